//! One SQL table per append table, spanning today and history.
//!
//! With `QueryOptions::hdb` set, every append table is registered as a
//! `HistTable`: its columns plus a derived, non-null `date` column
//! (`Date32`, last). Keyed tables stay plain `TickTable`s.
//!
//! A scan takes ONE `Store::day_snapshot` of the table (at physical
//! planning) and plans a `UnionExec` of:
//!
//! - the history: one Parquet `DataSourceExec` (`FileScanConfig` +
//!   `ParquetSource`) over exactly the part files the snapshot lists for
//!   the dates that survive the `date` filters (`ROOT/<table>/date=
//!   YYYY-MM-DD/<part>`), `date` a partition column. The filters on other
//!   columns go into the Parquet source as its predicate, so row groups
//!   are pruned by their statistics (sym, time, ...) and pages by the page
//!   index. The files hold sym as plain Utf8: a projection casts it to the
//!   table's `Dictionary(UInt32, Utf8)`, so today's path keeps its type and
//!   speed.
//! - each closing day (ended, Parquet not committed yet) whose date
//!   survives, and today if its date survives: the `TickTable` machinery
//!   (symbol-index and time-range pruning, zero-copy batches) with the
//!   constant date added by a projection.
//!
//! A row is in exactly one of today / closing / history in any one
//! snapshot, and the plan holds its snapshot until it ends, so a query
//! running across an end of day sees every row exactly once; parts
//! committed after the snapshot are not read.
//!
//! Filters on `date` alone are applied exactly here (evaluated on the
//! candidate dates, like Hive partition pruning); every other filter is
//! `Inexact`: it prunes, and DataFusion still filters the rows. See
//! `history_scan` for the Parquet side and its metrics, and
//! `history_latest` for `latest()` across days.

use crate::provider::{partition, scan_batches, Pruning, TickTable};
use crate::QueryError;
use datafusion::arrow::array::{Array, AsArray, Date32Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::{Column as PhysColumn, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tickdb_core::store::{DaySnapshot, Store, TableSnapshot};
use tickdb_core::TableDef;

/// The derived column holding each row's date.
pub const DATE_COLUMN: &str = "date";

/// The directory of one date in a table's HDB directory: `date=YYYY-MM-DD`.
pub fn date_dir(date: i32) -> String {
    format!("date={}", tickdb_core::store::date_string(date))
}

/// An append table across today, closing days and the HDB.
pub struct HistTable {
    tick: Arc<TickTable>,
    store: Arc<Store>,
    /// The table's directory in the HDB: `ROOT/<table>`.
    dir: PathBuf,
    /// The table's columns, then `date`.
    schema: SchemaRef,
    /// The table's columns as the Parquet files hold them (sym Utf8).
    file_schema: SchemaRef,
    target_partitions: usize,
}

impl fmt::Debug for HistTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistTable")
            .field("table", &self.tick.def().name)
            .field("dir", &self.dir)
            .finish()
    }
}

impl HistTable {
    pub fn new(
        store: Arc<Store>,
        def: &TableDef,
        hdb_root: &Path,
        target_partitions: usize,
    ) -> Result<HistTable, QueryError> {
        if def.columns.iter().any(|c| c.name == DATE_COLUMN) {
            return Err(QueryError::Internal(format!(
                "table '{}' has a column named '{DATE_COLUMN}': with an HDB that name is \
                 the derived date column",
                def.name
            )));
        }
        let tick = Arc::new(TickTable::new(store.clone(), def, target_partitions));
        let mem = tickdb_core::store::arrow_schema(def);
        let mut fields: Vec<Field> = mem.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(date_field());
        let schema = Arc::new(Schema::new(fields));
        let file_fields: Vec<Field> = mem
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Dictionary(_, v) => {
                    Field::new(f.name(), v.as_ref().clone(), f.is_nullable())
                }
                _ => f.as_ref().clone(),
            })
            .collect();
        Ok(HistTable {
            tick,
            store,
            dir: hdb_root.join(&def.name),
            schema,
            file_schema: Arc::new(Schema::new(file_fields)),
            target_partitions: target_partitions.max(1),
        })
    }

    pub fn tick(&self) -> &Arc<TickTable> {
        &self.tick
    }

    pub fn def(&self) -> &Arc<TableDef> {
        self.tick.def()
    }

    /// The table's directory in the HDB.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The columns as the Parquet files hold them (sym Utf8, no date).
    pub fn file_schema(&self) -> &SchemaRef {
        &self.file_schema
    }

    pub(crate) fn target_partitions(&self) -> usize {
        self.target_partitions
    }

    /// The path of one committed part.
    pub fn part_path(&self, date: i32, file: &str) -> PathBuf {
        self.dir.join(date_dir(date)).join(file)
    }

    /// Today, closing days and history, of one moment.
    pub fn day_snapshot(&self) -> Result<DaySnapshot> {
        let name = &self.tick.def().name;
        self.store
            .day_snapshot(name)
            .map_err(|e| DataFusionError::Execution(format!("snapshot of '{name}': {e}")))
    }

    /// Today's and the closing days' rows of one date as a plan with the
    /// date column, or None when pruning leaves no rows.
    fn memory_branch(
        &self,
        snap: &TableSnapshot,
        date: i32,
        pruning: &Pruning,
        projection: &[usize],
        batch_rows: usize,
        limit: Option<usize>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let ncols = self.tick.def().columns.len();
        let inner: Vec<usize> = projection.iter().copied().filter(|&i| i < ncols).collect();
        let batches = scan_batches(
            snap,
            pruning,
            Some(&inner),
            batch_rows,
            self.target_partitions,
        )?;
        if batches.is_empty() {
            return Ok(None);
        }
        let inner_schema = Arc::new(snap.schema.project(&inner)?);
        let parts = partition(batches, self.target_partitions);
        let source = MemorySourceConfig::try_new(&parts, inner_schema.clone(), None)?
            .with_show_sizes(false)
            .with_limit(limit);
        let exec: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(source);
        if inner.as_slice() == projection {
            return Ok(Some(exec));
        }
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
        let mut at = 0;
        for &i in projection {
            if i == ncols {
                exprs.push((
                    Arc::new(Literal::new(ScalarValue::Date32(Some(date)))),
                    DATE_COLUMN.to_string(),
                ));
            } else {
                let name = inner_schema.field(at).name().clone();
                exprs.push((Arc::new(PhysColumn::new(&name, at)), name));
                at += 1;
            }
        }
        Ok(Some(Arc::new(ProjectionExec::try_new(exprs, exec)?)))
    }
}

pub(crate) fn date_field() -> Field {
    Field::new(DATE_COLUMN, DataType::Date32, false)
}

/// The expression with its columns unqualified (the scan's schemas are).
pub(crate) fn unqualify(e: Expr) -> Result<Expr> {
    e.transform(|e| match e {
        Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
            Column::new_unqualified(c.name),
        ))),
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

/// Whether a filter reads the date column and nothing else.
fn date_only(e: &Expr) -> bool {
    let cols = e.column_refs();
    !cols.is_empty() && cols.iter().all(|c| c.name == DATE_COLUMN)
}

/// Which of `dates` pass every one of `filters` (each on `date` alone).
fn surviving(state: &dyn Session, filters: &[&Expr], dates: &[i32]) -> Result<Vec<bool>> {
    let mut keep = vec![true; dates.len()];
    if filters.is_empty() || dates.is_empty() {
        return Ok(keep);
    }
    let schema = Arc::new(Schema::new(vec![date_field()]));
    let df = DFSchema::try_from(schema.as_ref().clone())?;
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Date32Array::from(dates.to_vec()))])?;
    for f in filters {
        let p = state.create_physical_expr(unqualify((*f).clone())?, &df)?;
        let v = p.evaluate(&batch)?.into_array(dates.len())?;
        let b = v
            .as_boolean_opt()
            .ok_or_else(|| DataFusionError::Internal(format!("date filter {f} is not boolean")))?;
        for (i, k) in keep.iter_mut().enumerate() {
            *k &= b.is_valid(i) && b.value(i);
        }
    }
    Ok(keep)
}

#[async_trait::async_trait]
impl TableProvider for HistTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if date_only(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let day = self.day_snapshot()?;
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let out_schema = Arc::new(self.schema.project(&projection)?);
        let (date_filters, other): (Vec<&Expr>, Vec<&Expr>) =
            filters.iter().partition(|f| date_only(f));

        // Every date the snapshot has, then which survive the date filters.
        let hist_dates: Vec<i32> = day.history.keys().copied().collect();
        let mut dates = hist_dates.clone();
        dates.extend(day.closing.iter().map(|(d, _)| *d));
        dates.push(day.today_date);
        let keep = surviving(state, &date_filters, &dates)?;
        let (hist_keep, mem_keep) = keep.split_at(hist_dates.len());

        let other_owned: Vec<Expr> = other.iter().map(|e| (*e).clone()).collect();
        let pruning = self.tick.pruning(&other_owned);
        let batch_rows = state.config().batch_size().max(1);
        let mut branches: Vec<Arc<dyn ExecutionPlan>> = Vec::new();

        let parts: Vec<(i32, &Vec<String>)> = day
            .history
            .iter()
            .zip(hist_keep)
            .filter(|(_, k)| **k)
            .map(|((d, files), _)| (*d, files))
            .collect();
        if let Some(p) =
            crate::history_scan::parquet_branch(self, state, &parts, &other, &projection, limit)?
        {
            branches.push(p);
        }
        let memory = day
            .closing
            .iter()
            .map(|(d, s)| (*d, s))
            .chain(std::iter::once((day.today_date, &day.today)));
        for ((date, snap), k) in memory.zip(mem_keep) {
            if !*k {
                continue;
            }
            if let Some(b) =
                self.memory_branch(snap, date, &pruning, &projection, batch_rows, limit)?
            {
                branches.push(b);
            }
        }
        if branches.is_empty() {
            return Ok(Arc::new(EmptyExec::new(out_schema)));
        }
        UnionExec::try_new(branches)
    }
}
