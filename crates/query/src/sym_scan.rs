//! A tickdb table scan, and the same scan by symbol.
//!
//! `TickScanExec` is what a `TickTable` scan plans: its chunks in arrival
//! order (the `DataSourceExec` it wraps and shows in EXPLAIN), plus what it
//! needs to be planned again by symbol (`by_symbol`, used by
//! `sym_order::SymbolAggregateRule`).
//!
//! `SymScanExec` is that second plan: each partition holds whole symbols
//! (spread by row counts), in symbol name order, a symbol's rows in
//! arrival order, gathered through each chunk's `SymIndex` when the
//! partition is read (so the gather runs on every core, batch by batch,
//! beside the work above it). Its symbol column is keyed into one
//! dictionary, the table's names sorted, so that keys sort as names do.

use crate::provider::Pruning;
use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, DictionaryArray, PrimitiveArray, RecordBatch,
    RecordBatchOptions, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{interleave, SortOptions};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int32Type, Int64Type, SchemaRef, TimeUnit, TimestampNanosecondType,
    UInt32Type,
};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, PhysicalSortExpr,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::StreamExt;
use std::fmt;
use std::sync::Arc;
use tickdb_core::store::{SymIndex, TableSnapshot};

/// A scan of one tickdb table, as planned (`inner`: its chunks in arrival
/// order), that can be planned again by symbol.
pub struct TickScanExec {
    inner: Arc<dyn ExecutionPlan>,
    snap: Arc<TableSnapshot>,
    pruning: Pruning,
    projection: Option<Vec<usize>>,
    batch_rows: usize,
    partitions: usize,
}

impl TickScanExec {
    pub(crate) fn new(
        inner: Arc<dyn ExecutionPlan>,
        snap: TableSnapshot,
        pruning: Pruning,
        projection: Option<&Vec<usize>>,
        batch_rows: usize,
        partitions: usize,
    ) -> TickScanExec {
        TickScanExec {
            inner,
            snap: Arc::new(snap),
            pruning,
            projection: projection.cloned(),
            batch_rows: batch_rows.max(1),
            partitions: partitions.max(1),
        }
    }

    /// The index of the table's symbol column in this scan's output, if
    /// the table has one and the scan reads it.
    pub(crate) fn sym_output(&self) -> Option<usize> {
        let sc = self.snap.def.sym_column?;
        match &self.projection {
            Some(p) => p.iter().position(|&c| c == sc),
            None => Some(sc),
        }
    }

    /// The table's symbol names by id, which the keys of the symbol column
    /// of every chunk of this scan index (the dictionary only grows, and
    /// the snapshot was taken after every row it holds); None if the scan
    /// does not read the symbol column, or a name is null.
    pub(crate) fn symbol_names(&self) -> Option<ArrayRef> {
        self.sym_output()?;
        let names = &self.snap.symbols;
        (names.null_count() == 0).then(|| names.clone() as ArrayRef)
    }

    /// The same rows by symbol (`SymScanExec`), and its symbol column's
    /// dictionary (the names, sorted); None where that cannot be done: no
    /// symbol column read, or a row without a symbol (no index has it).
    pub(crate) fn by_symbol(&self) -> Result<Option<(Arc<dyn ExecutionPlan>, ArrayRef)>> {
        let (Some(sym), Some(sc)) = (self.sym_output(), self.snap.def.sym_column) else {
            return Ok(None);
        };
        if self.inner.fetch().is_some() {
            // A scan that stops after some rows (a pushed-down LIMIT)
            // reads rows in arrival order: not to be re-planned.
            return Ok(None);
        }
        let snap = &self.snap;
        let names = &snap.symbols;
        if names.null_count() > 0 {
            return Ok(None);
        }
        let p = &self.pruning;
        let mut chunks = Vec::new();
        let mut indexes = Vec::new();
        for c in &snap.chunks {
            if c.batch.num_rows() == 0 || c.max_time < p.time_lo || c.min_time > p.time_hi {
                continue;
            }
            let ix = match &c.sym_index {
                Some(ix) => ix.clone(),
                // The active chunk has no index yet: one for this scan.
                None => {
                    let Some(d) = c.batch.column(sc).as_dictionary_opt::<UInt32Type>() else {
                        return Ok(None);
                    };
                    if d.null_count() > 0 {
                        return Ok(None);
                    }
                    Arc::new(SymIndex::build(d.keys().values()))
                }
            };
            chunks.push(match &self.projection {
                Some(proj) => c.batch.project(proj)?,
                None => c.batch.clone(),
            });
            indexes.push(ix);
        }
        let ids: Vec<u32> = match &p.syms {
            Some(syms) => syms.iter().filter_map(|s| snap.symbol_id(s)).collect(),
            None => (0..names.len() as u32).collect(),
        };
        let mut rows_of: Vec<(u32, usize)> = Vec::with_capacity(ids.len());
        for &id in &ids {
            let rows: usize = indexes.iter().map(|ix| ix.rows(id).len()).sum();
            if rows > 0 {
                rows_of.push((id, rows));
            }
        }
        if p.syms.is_none() {
            // Every row in some symbol's index: no null symbol was left out.
            let indexed: usize = rows_of.iter().map(|(_, r)| r).sum();
            let total: usize = chunks.iter().map(|c| c.num_rows()).sum();
            if indexed != total {
                return Ok(None);
            }
        }
        // rank[id]: the id's place in name order, its key here.
        let mut by_name: Vec<u32> = (0..names.len() as u32).collect();
        by_name.sort_by(|&a, &b| names.value(a as usize).cmp(names.value(b as usize)));
        let mut rank = vec![0u32; names.len()];
        for (r, &id) in by_name.iter().enumerate() {
            rank[id as usize] = r as u32;
        }
        let sorted: ArrayRef = Arc::new(StringArray::from_iter_values(
            by_name.iter().map(|&id| names.value(id as usize)),
        ));
        // Symbols spread by rows: the largest first, each to the lightest
        // partition; then each partition's in name order.
        rows_of.sort_by_key(|&(id, rows)| (std::cmp::Reverse(rows), id));
        let mut parts: Vec<(usize, Vec<u32>)> = vec![(0, Vec::new()); self.partitions];
        for (id, rows) in rows_of {
            let lightest = parts
                .iter_mut()
                .min_by_key(|(r, _)| *r)
                .expect("one partition at least");
            lightest.0 += rows;
            lightest.1.push(id);
        }
        let parts: Vec<Vec<u32>> = parts
            .into_iter()
            .map(|(_, mut ids)| {
                ids.sort_by_key(|&id| rank[id as usize]);
                ids
            })
            .collect();
        let schema = self.inner.schema();
        let order = LexOrdering::new(vec![PhysicalSortExpr::new(
            Arc::new(Column::new(schema.field(sym).name(), sym)),
            SortOptions {
                descending: false,
                nulls_first: false,
            },
        )]);
        let eq = match order {
            Some(o) => EquivalenceProperties::new_with_orderings(schema.clone(), [o]),
            None => EquivalenceProperties::new(schema.clone()),
        };
        let properties = Arc::new(PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(parts.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let layout = Arc::new(SymLayout {
            table: snap.def.name.clone(),
            schema,
            chunks,
            indexes,
            parts,
            rank,
            names: sorted.clone(),
            sym,
            batch_rows: self.batch_rows,
        });
        Ok(Some((Arc::new(SymScanExec { layout, properties }), sorted)))
    }
}

impl fmt::Debug for TickScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TickScanExec({})", self.snap.def.name)
    }
}

impl DisplayAs for TickScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        // EXPLAIN shows the scan as planned.
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for TickScanExec {
    fn name(&self) -> &'static str {
        "DataSourceExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.inner.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, ctx)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.inner.metrics()
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        // Exact row counts, so that `count(*)` alone needs no scan.
        self.inner.statistics_from_inputs(input_stats, args)
    }

    fn fetch(&self) -> Option<usize> {
        self.inner.fetch()
    }
}

/// What every partition of a `SymScanExec` reads from.
struct SymLayout {
    table: String,
    schema: SchemaRef,
    /// The chunks, projected, and each one's index.
    chunks: Vec<RecordBatch>,
    indexes: Vec<Arc<SymIndex>>,
    /// Per partition, its symbol ids in name order.
    parts: Vec<Vec<u32>>,
    /// Per symbol id, its key in `names`.
    rank: Vec<u32>,
    names: ArrayRef,
    sym: usize,
    batch_rows: usize,
}

pub struct SymScanExec {
    layout: Arc<SymLayout>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for SymScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SymScanExec({})", self.layout.table)
    }
}

impl DisplayAs for SymScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SymScanExec: table={}, partitions={}, by symbol",
            self.layout.table,
            self.layout.parts.len()
        )
    }
}

impl ExecutionPlan for SymScanExec {
    fn name(&self) -> &'static str {
        "SymScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let layout = self.layout.clone();
        let reservation =
            MemoryConsumer::new(format!("SymScanExec[{partition}]")).register(ctx.memory_pool());
        // The gather runs when the partition is first polled, on the
        // thread that reads it.
        let batches = futures::stream::once(async move {
            let mut reservation = reservation;
            let out = gather_partition(&layout, partition, &mut reservation);
            futures::stream::iter(match out {
                Ok(batches) => batches.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
            .map(move |b| {
                // Held until the last batch is read.
                let _ = &reservation;
                b
            })
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.layout.schema.clone(),
            batches,
        )))
    }
}

/// One partition's rows, gathered chunk by chunk into their places in
/// symbol order: `(symbol, chunk)` blocks laid out by prefix sums, then
/// each chunk's rows of the partition's symbols copied in one pass over
/// the chunk (a symbol-by-symbol gather would jump between chunks for
/// every few rows and miss the cache on most of them). Cut into batches
/// of `batch_rows` rows.
fn gather_partition(
    l: &SymLayout,
    part: usize,
    reservation: &mut MemoryReservation,
) -> Result<Vec<RecordBatch>> {
    let Some(ids) = l.parts.get(part) else {
        return Ok(Vec::new());
    };
    // slot[id]: the symbol's place in this partition's (name) order.
    let mut slot = vec![u32::MAX; l.rank.len()];
    for (i, &id) in ids.iter().enumerate() {
        slot[id as usize] = i as u32;
    }
    let n_chunks = l.indexes.len();
    // offset[symbol * n_chunks + chunk]: where that block starts.
    let mut offset = vec![0usize; ids.len() * n_chunks + 1];
    for (c, ix) in l.indexes.iter().enumerate() {
        for (id, rows) in ix.groups() {
            if let Some(&s) = slot.get(id as usize).filter(|&&s| s != u32::MAX) {
                offset[s as usize * n_chunks + c + 1] = rows.len();
            }
        }
    }
    for i in 1..offset.len() {
        offset[i] += offset[i - 1];
    }
    let total = offset[offset.len() - 1];
    let row_bytes: usize = l
        .schema
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().unwrap_or(16))
        .sum();
    reservation.try_grow(total * row_bytes)?;
    let mut keys = vec![0u32; total];
    for (s, &id) in ids.iter().enumerate() {
        let (from, to) = (offset[s * n_chunks], offset[(s + 1) * n_chunks]);
        keys[from..to].fill(l.rank[id as usize]);
    }
    // Each (chunk, symbol) block of the partition: the chunk, where its
    // rows go, and the rows.
    let blocks = |f: &mut dyn FnMut(usize, usize, &[u32])| {
        for (c, ix) in l.indexes.iter().enumerate() {
            for (id, rows) in ix.groups() {
                if let Some(&s) = slot.get(id as usize).filter(|&&s| s != u32::MAX) {
                    f(c, offset[s as usize * n_chunks + c], rows);
                }
            }
        }
    };
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(l.schema.fields().len());
    for col in 0..l.schema.fields().len() {
        if col == l.sym {
            let d = DictionaryArray::<UInt32Type>::try_new(
                UInt32Array::from(std::mem::take(&mut keys)),
                l.names.clone(),
            )?;
            cols.push(Arc::new(d));
            continue;
        }
        let arrays: Vec<&dyn Array> = l.chunks.iter().map(|b| b.column(col).as_ref()).collect();
        let fast = match arrays.first().map(|a| a.data_type()) {
            _ if arrays.iter().any(|a| a.null_count() > 0) => None,
            Some(DataType::Int64) => place_primitive::<Int64Type>(&arrays, total, &blocks),
            Some(DataType::Float64) => place_primitive::<Float64Type>(&arrays, total, &blocks),
            Some(DataType::Int32) => place_primitive::<Int32Type>(&arrays, total, &blocks),
            Some(DataType::Timestamp(TimeUnit::Nanosecond, _)) => {
                place_primitive::<TimestampNanosecondType>(&arrays, total, &blocks)
            }
            _ => None,
        };
        cols.push(match fast {
            Some(a) => a,
            None => {
                let mut pairs = vec![(0usize, 0usize); total];
                blocks(&mut |c, at, rows| {
                    for (p, &r) in pairs[at..at + rows.len()].iter_mut().zip(rows) {
                        *p = (c, r as usize);
                    }
                });
                interleave(&arrays, &pairs)?
            }
        });
    }
    let whole = RecordBatch::try_new_with_options(
        l.schema.clone(),
        cols,
        &RecordBatchOptions::new().with_row_count(Some(total)),
    )?;
    let step = l.batch_rows.max(1);
    Ok((0..total)
        .step_by(step)
        .map(|at| whole.slice(at, step.min(total - at)))
        .collect())
}

/// Calls its argument once per (chunk, symbol) block of a partition:
/// (chunk, the block's place in the output, the block's rows).
type Blocks<'a> = dyn Fn(&mut dyn FnMut(usize, usize, &[u32])) + 'a;

/// A primitive column without nulls, each block of values copied to its
/// place (a block at a time: the per-row loop has no call in it).
fn place_primitive<T: ArrowPrimitiveType>(
    arrays: &[&dyn Array],
    total: usize,
    blocks: &Blocks<'_>,
) -> Option<ArrayRef> {
    let values: Vec<&[T::Native]> = arrays
        .iter()
        .map(|a| a.as_primitive_opt::<T>().map(|p| p.values().as_ref()))
        .collect::<Option<_>>()?;
    let mut out: Vec<T::Native> = vec![T::Native::default(); total];
    blocks(&mut |c, at, rows| {
        let vals = values[c];
        for (d, &r) in out[at..at + rows.len()].iter_mut().zip(rows) {
            *d = vals[r as usize];
        }
    });
    let dt = arrays.first()?.data_type().clone();
    Some(Arc::new(
        PrimitiveArray::<T>::new(out.into(), None).with_data_type(dt),
    ))
}
