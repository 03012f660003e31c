//! `latest('quote')` across days: each symbol's last row from the newest
//! day that has it, with the row's `date`.
//!
//! Today's rows come first (the symbol index, as `latest`), then each
//! closing day's, newest first, for symbols not found yet. Then history,
//! newest date first: the part files are sorted by (sym, time), so a row
//! group whose statistics say it holds one symbol has that symbol's last
//! row of the group as its last row, and the footer alone names it; only
//! row groups holding several symbols (or without statistics) have their
//! sym and time columns read. The chosen rows are then fetched with a row
//! selection. History has no list of its symbols, so every date's footers
//! are read; a date's data pages only when it holds a symbol that newer
//! days lack. One `DaySnapshot` answers the whole call.

use crate::history::{date_field, HistTable, DATE_COLUMN};
use crate::latest::latest_rows;
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Date32Array, RecordBatch,
};
use datafusion::arrow::compute::{cast, concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef, TimestampNanosecondType};
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::parquet::arrow::arrow_reader::{
    ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::file::statistics::Statistics;
use datafusion::physical_plan::ExecutionPlan;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use tickdb_core::store::{History, TableSnapshot};

/// The table function's answer for a table that spans history.
pub struct HistLatest {
    table: Arc<HistTable>,
}

impl fmt::Debug for HistLatest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistLatest")
            .field("table", &self.table.def().name)
            .finish()
    }
}

impl HistLatest {
    pub fn new(table: Arc<HistTable>) -> HistLatest {
        HistLatest { table }
    }
}

#[async_trait::async_trait]
impl TableProvider for HistLatest {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = latest_across_days(self.table.clone()).await?;
        let source =
            MemorySourceConfig::try_new(&[vec![batch]], self.table.schema(), projection.cloned())?
                .with_show_sizes(false);
        Ok(DataSourceExec::from_data_source(source))
    }
}

/// Each symbol's last row across today, closing days and history, with
/// its date: today's in symbol-id order, then older days' symbols.
pub async fn latest_across_days(table: Arc<HistTable>) -> Result<RecordBatch> {
    let schema = table.schema();
    let Some(sym) = table.def().sym_column else {
        return Ok(RecordBatch::new_empty(schema));
    };
    let day = table.day_snapshot()?;
    let mut found: HashSet<String> = HashSet::new();
    let mut out: Vec<RecordBatch> = Vec::new();
    let mut memory: Vec<(i32, &TableSnapshot)> = vec![(day.today_date, &day.today)];
    memory.extend(day.closing.iter().rev().map(|(d, s)| (*d, s)));
    for (date, snap) in memory {
        let rows = latest_rows(snap, sym)?;
        let rows = unseen(&rows, sym, &mut found)?;
        if rows.num_rows() > 0 {
            out.push(with_date(&table, &rows, date)?);
        }
    }
    let history = day.history.clone();
    if !history.is_empty() {
        let t = table.clone();
        let batches = tokio::task::spawn_blocking(move || from_history(&t, &history, found))
            .await
            .map_err(|e| DataFusionError::Execution(format!("latest over history: {e}")))??;
        out.extend(batches);
    }
    Ok(concat_batches(&schema, &out)?)
}

/// The rows of `batch` whose symbol is not in `found`; adds theirs.
fn unseen(batch: &RecordBatch, sym: usize, found: &mut HashSet<String>) -> Result<RecordBatch> {
    let names = cast(
        batch.column(sym),
        &datafusion::arrow::datatypes::DataType::Utf8,
    )?;
    let names = names.as_string::<i32>();
    let mask: BooleanArray = (0..names.len())
        .map(|i| Some(names.is_valid(i) && found.insert(names.value(i).to_string())))
        .collect();
    Ok(filter_record_batch(batch, &mask)?)
}

/// `batch` (any column types, by name) in the table's schema with `date`.
fn with_date(table: &HistTable, batch: &RecordBatch, date: i32) -> Result<RecordBatch> {
    let schema = table.schema();
    let n = batch.num_rows();
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        if f.name() == DATE_COLUMN {
            cols.push(Arc::new(Date32Array::from(vec![date; n])));
            continue;
        }
        cols.push(match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => c.clone(),
            Some(c) => cast(c, f.data_type())?,
            None => new_null_array(f.data_type(), n),
        });
    }
    debug_assert_eq!(schema.field(schema.fields().len() - 1), &date_field());
    Ok(RecordBatch::try_new(schema, cols)?)
}

/// Where a symbol's last row of one date is: file, row group, row in the
/// group, and its time (ties: the later file, group, row wins).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pick {
    time: i64,
    file: usize,
    group: usize,
    row: usize,
}

fn file_error(path: &Path, e: impl fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("history part file {}: {e}", path.display()))
}

/// Per symbol missing from `found`, its row of the newest date that has it.
fn from_history(
    table: &HistTable,
    history: &History,
    mut found: HashSet<String>,
) -> Result<Vec<RecordBatch>> {
    let def = table.def();
    let (Some(sym_col), time_col) = (def.sym_column, def.time_column) else {
        return Ok(Vec::new());
    };
    let sym_name = def.columns[sym_col].name.as_str();
    let time_name = def.columns[time_col].name.as_str();
    let mut out = Vec::new();
    for (&date, names) in history.iter().rev() {
        let paths: Vec<_> = names.iter().map(|n| table.part_path(date, n)).collect();
        let mut picks: HashMap<String, Pick> = HashMap::new();
        let mut consider = |s: &str, p: Pick, found: &HashSet<String>| {
            if found.contains(s) {
                return;
            }
            match picks.get_mut(s) {
                Some(old) if *old >= p => {}
                Some(old) => *old = p,
                None => {
                    picks.insert(s.to_string(), p);
                }
            }
        };
        for (fi, path) in paths.iter().enumerate() {
            let file = std::fs::File::open(path).map_err(|e| file_error(path, e))?;
            let builder =
                ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| file_error(path, e))?;
            let md = builder.metadata().clone();
            let descr = md.file_metadata().schema_descr();
            let leaf = |name: &str| {
                (0..descr.num_columns())
                    .find(|&i| descr.column(i).name() == name)
                    .ok_or_else(|| file_error(path, format!("no column '{name}'")))
            };
            let (sl, tl) = (leaf(sym_name)?, leaf(time_name)?);
            let mut scan_groups = Vec::new();
            for g in 0..md.num_row_groups() {
                let rg = md.row_group(g);
                let one = match (rg.column(sl).statistics(), rg.column(tl).statistics()) {
                    (Some(Statistics::ByteArray(s)), Some(Statistics::Int64(t)))
                        if s.null_count_opt() == Some(0) =>
                    {
                        match (s.min_opt(), s.max_opt(), t.max_opt()) {
                            (Some(lo), Some(hi), Some(tmax)) if lo == hi => {
                                lo.as_utf8().ok().map(|s| (s.to_string(), *tmax))
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                match one {
                    Some((s, time)) if rg.num_rows() > 0 => {
                        let row = rg.num_rows() as usize - 1;
                        consider(
                            &s,
                            Pick {
                                time,
                                file: fi,
                                group: g,
                                row,
                            },
                            &found,
                        );
                    }
                    Some(_) => {}
                    None => scan_groups.push(g),
                }
            }
            if scan_groups.is_empty() {
                continue;
            }
            // Row groups holding several symbols: read sym and time.
            let mask = ProjectionMask::leaves(descr, [sl, tl]);
            let reader = builder
                .with_projection(mask)
                .with_row_groups(scan_groups.clone())
                .build()
                .map_err(|e| file_error(path, e))?;
            let (mut gi, mut row) = (0usize, 0usize);
            for b in reader {
                let b = b.map_err(|e| file_error(path, e))?;
                let s = cast(
                    b.column_by_name(sym_name)
                        .ok_or_else(|| file_error(path, "no sym column"))?,
                    &datafusion::arrow::datatypes::DataType::Utf8,
                )?;
                let s = s.as_string::<i32>();
                let t = b
                    .column_by_name(time_name)
                    .ok_or_else(|| file_error(path, "no time column"))?;
                let t: Vec<Option<i64>> = match t.as_primitive_opt::<TimestampNanosecondType>() {
                    Some(a) => a.iter().collect(),
                    None => cast(t, &datafusion::arrow::datatypes::DataType::Int64)?
                        .as_primitive::<Int64Type>()
                        .iter()
                        .collect(),
                };
                for (i, time) in t.iter().enumerate() {
                    while gi < scan_groups.len()
                        && row >= md.row_group(scan_groups[gi]).num_rows() as usize
                    {
                        gi += 1;
                        row = 0;
                    }
                    if let (true, Some(time)) = (s.is_valid(i), time) {
                        let p = Pick {
                            time: *time,
                            file: fi,
                            group: scan_groups.get(gi).copied().unwrap_or(0),
                            row,
                        };
                        consider(s.value(i), p, &found);
                    }
                    row += 1;
                }
            }
        }
        if picks.is_empty() {
            continue;
        }
        // Fetch the picked rows, file by file.
        let mut per_file: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
        for p in picks.values() {
            per_file.entry(p.file).or_default().push((p.group, p.row));
        }
        for (fi, mut rows) in per_file {
            rows.sort_unstable();
            out.push(with_date(table, &fetch_rows(&paths[fi], &rows)?, date)?);
        }
        found.extend(picks.into_keys());
    }
    Ok(out)
}

/// The rows (row group, row in group) of one part file, all columns.
fn fetch_rows(path: &Path, rows: &[(usize, usize)]) -> Result<RecordBatch> {
    let file = std::fs::File::open(path).map_err(|e| file_error(path, e))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| file_error(path, e))?;
    let md = builder.metadata().clone();
    let mut groups: Vec<usize> = rows.iter().map(|r| r.0).collect();
    groups.dedup();
    // Offsets of the chosen groups in the rows they yield together.
    let mut selectors = Vec::new();
    let mut at = 0usize;
    let mut base = 0usize;
    let mut gi = 0usize;
    for &(g, r) in rows {
        while groups[gi] != g {
            base += md.row_group(groups[gi]).num_rows() as usize;
            gi += 1;
        }
        let abs = base + r;
        if abs > at {
            selectors.push(RowSelector::skip(abs - at));
        }
        selectors.push(RowSelector::select(1));
        at = abs + 1;
    }
    let schema = builder.schema().clone();
    let reader = builder
        .with_row_groups(groups)
        .with_row_selection(RowSelection::from(selectors))
        .build()
        .map_err(|e| file_error(path, e))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    Ok(concat_batches(&schema, &batches)?)
}
