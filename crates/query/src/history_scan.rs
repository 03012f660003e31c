//! The Parquet side of a `HistTable` scan, and the metrics a benchmark
//! reads back from an executed plan.
//!
//! The scan reads exactly the part files of one `DaySnapshot` (sizes and
//! modification times from the file system at planning, so a missing part
//! fails the query naming it). Its predicate is the query's filters
//! rewritten for the files' types (sym Utf8): row groups are pruned by
//! their statistics and pages by the page index. The file metadata is
//! cached in the runtime's file-metadata cache (keyed by path, size and
//! modification time).

use crate::history::{date_field, unqualify, HistTable};
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::{CastExpr, Column as PhysColumn};
use datafusion::physical_expr::{conjunction, PhysicalExpr};
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// The symbol column's type in SQL (and in memory).
fn sym_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

/// A filter rewritten for the files' types: dictionary literals become
/// their values, and casts of a column to Utf8 or a dictionary of Utf8
/// (the planner's coercions of sym) are dropped.
fn for_files(e: &Expr) -> Result<Expr> {
    let e = unqualify(e.clone())?;
    e.transform(|e| match e {
        Expr::Literal(ScalarValue::Dictionary(_, v), m) => {
            Ok(Transformed::yes(Expr::Literal(*v, m)))
        }
        Expr::Cast(c)
            if matches!(c.expr.as_ref(), Expr::Column(_))
                && matches!(
                    c.field.data_type(),
                    DataType::Utf8 | DataType::Dictionary(_, _)
                ) =>
        {
            Ok(Transformed::yes(*c.expr))
        }
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

/// The Parquet scan of `parts` (date, committed file names), projected as
/// the table's `projection` (indices into columns + date), sym cast to
/// the table's dictionary type. None when there is no file to read.
pub(crate) fn parquet_branch(
    table: &HistTable,
    state: &dyn Session,
    parts: &[(i32, &Vec<String>)],
    filters: &[&Expr],
    projection: &[usize],
    limit: Option<usize>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut files: Vec<PartitionedFile> = Vec::new();
    for (date, names) in parts {
        for name in names.iter() {
            let path = table.part_path(*date, name);
            let meta = std::fs::metadata(&path).map_err(|e| {
                DataFusionError::Execution(format!(
                    "history of '{}': part file {}: {e}",
                    table.def().name,
                    path.display()
                ))
            })?;
            let mut f = PartitionedFile::new(path.to_string_lossy(), meta.len())
                .with_partition_values(vec![ScalarValue::Date32(Some(*date))]);
            if let Ok(m) = meta.modified() {
                f.object_meta.last_modified = m.into();
            }
            files.push(f);
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    // Contiguous runs of files (date order) per partition.
    let n = table.target_partitions().min(files.len()).max(1);
    let per = files.len().div_ceil(n);
    let mut groups: Vec<FileGroup> = Vec::new();
    let mut it = files.into_iter().peekable();
    while it.peek().is_some() {
        groups.push(FileGroup::new(it.by_ref().take(per).collect()));
    }

    let table_schema = TableSchema::builder(table.file_schema().clone())
        .with_table_partition_cols(vec![Arc::new(date_field())])
        .build();
    let full = table_schema.table_schema().clone();
    let df = DFSchema::try_from(full.as_ref().clone())?;
    // Filters the files' types cannot express are left to DataFusion.
    let predicates: Vec<Arc<dyn PhysicalExpr>> = filters
        .iter()
        .filter_map(|f| {
            for_files(f)
                .and_then(|e| state.create_physical_expr(e, &df))
                .ok()
        })
        .collect();

    let url = ObjectStoreUrl::local_filesystem();
    let store = state.runtime_env().object_store(&url)?;
    let cache = state.runtime_env().cache_manager.get_file_metadata_cache();
    let mut source = ParquetSource::new(table_schema)
        .with_table_parquet_options(state.table_options().parquet.clone())
        .with_enable_page_index(true)
        .with_parquet_file_reader_factory(Arc::new(CachedParquetFileReaderFactory::new(
            store, cache,
        )));
    if !predicates.is_empty() {
        source = source.with_predicate(conjunction(predicates));
    }
    let config = FileScanConfigBuilder::new(url, Arc::new(source))
        .with_file_groups(groups)
        .with_projection_indices(Some(projection.to_vec()))?
        .with_limit(limit)
        .build();
    let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);

    // Symbol columns come out as Utf8: cast them to the table's dictionary
    // type (sym, and any other symbol column, such as one added by ALTER
    // TABLE after the day was written, which the files then lack and the
    // scan fills with nulls).
    let out = scan.schema();
    let is_symbol: Vec<bool> = out
        .fields()
        .iter()
        .map(|f| {
            table
                .def()
                .column_index(f.name())
                .is_some_and(|i| table.def().columns[i].ty == tickdb_core::ColumnType::Symbol)
        })
        .collect();
    if !is_symbol.iter().any(|s| *s) {
        return Ok(Some(scan));
    }
    let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = out
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let c: Arc<dyn PhysicalExpr> = Arc::new(PhysColumn::new(f.name(), i));
            let e: Arc<dyn PhysicalExpr> = if is_symbol[i] {
                Arc::new(CastExpr::new(c, sym_type(), None))
            } else {
                c
            };
            (e, f.name().clone())
        })
        .collect();
    Ok(Some(Arc::new(ProjectionExec::try_new(exprs, scan)?)))
}

/// What the history (Parquet) scans of an executed plan read and skipped,
/// summed over every such scan in the plan. Row-group and page counts come
/// from the Parquet source's pruning metrics, which it keeps only when the
/// scan has a predicate (all zero otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryScanMetrics {
    /// Parquet scans in the plan.
    pub scans: usize,
    /// Part files the scans were given (after date pruning).
    pub files: usize,
    /// Distinct dates of those files.
    pub dates: usize,
    /// Row groups the statistics were checked on (pruned + read).
    pub row_groups_total: usize,
    /// Row groups skipped by their statistics.
    pub row_groups_pruned_by_stats: usize,
    /// Row groups that survived the statistics.
    pub row_groups_read: usize,
    /// Pages skipped / kept by the page index.
    pub pages_pruned: usize,
    pub pages_matched: usize,
    /// Rows skipped by the page index.
    pub page_rows_pruned: usize,
    /// Bytes read from the files.
    pub bytes_scanned: usize,
    /// Rows the scans produced.
    pub rows: usize,
}

/// Sums the history scans' metrics over `plan` (after it has run).
pub fn history_scan_metrics(plan: &Arc<dyn ExecutionPlan>) -> HistoryScanMetrics {
    let mut m = HistoryScanMetrics::default();
    let mut dates = std::collections::BTreeSet::new();
    walk(plan, &mut m, &mut dates);
    m.dates = dates.len();
    m
}

fn walk(
    plan: &Arc<dyn ExecutionPlan>,
    m: &mut HistoryScanMetrics,
    dates: &mut std::collections::BTreeSet<String>,
) {
    if let Some(config) = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|d| d.data_source().downcast_ref::<FileScanConfig>())
        .filter(|c| c.file_source().file_type() == "parquet")
    {
        m.scans += 1;
        for g in &config.file_groups {
            for f in g.iter() {
                m.files += 1;
                dates.insert(format!("{:?}", f.partition_values));
            }
        }
        if let Some(set) = plan.metrics() {
            for metric in set.iter() {
                match metric.value() {
                    MetricValue::PruningMetrics {
                        name,
                        pruning_metrics: p,
                    } => match name.as_ref() {
                        "row_groups_pruned_statistics" => {
                            m.row_groups_pruned_by_stats += p.pruned();
                            m.row_groups_read += p.matched();
                            m.row_groups_total += p.pruned() + p.matched();
                        }
                        "page_index_pages_pruned" => {
                            m.pages_pruned += p.pruned();
                            m.pages_matched += p.matched();
                        }
                        "page_index_rows_pruned" => m.page_rows_pruned += p.pruned(),
                        _ => {}
                    },
                    MetricValue::Count { name, count } if name == "bytes_scanned" => {
                        m.bytes_scanned += count.value()
                    }
                    MetricValue::OutputRows(c) => m.rows += c.value(),
                    _ => {}
                }
            }
        }
    }
    for c in plan.children() {
        walk(c, m, dates);
    }
}
