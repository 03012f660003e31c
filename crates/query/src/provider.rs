//! The DataFusion `TableProvider` over one table of the column store.
//!
//! A scan takes one snapshot of the table (at physical planning, i.e. when
//! the query starts) and hands its chunks to a `MemorySourceConfig` plan
//! without copying: projection is `RecordBatch::project`, and big chunks are
//! cut into `batch_size` slices. Two kinds of filters are pushed down:
//!
//! - equality / `IN` / `OR` of equalities on the table's indexed symbol
//!   column: sealed chunks take only that symbol's rows through their
//!   `SymIndex`; chunks without an index (the active one) are filtered by
//!   their dictionary keys. Exact: DataFusion drops the filter.
//! - range comparisons of the designated timestamp column with constants:
//!   chunks whose `[min_time, max_time]` misses the range are skipped, and
//!   a chunk the range starts or ends in is cut to the rows around it
//!   (`time_window`). Inexact (chunks arrive in arrival order, not time
//!   order), so DataFusion still filters the rows that remain.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, DictionaryArray, RecordBatch, RecordBatchOptions,
    UInt32Array,
};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{filter_record_batch, interleave, take};
use datafusion::arrow::datatypes::{
    DataType, SchemaRef, TimeUnit, TimestampNanosecondType, UInt32Type,
};
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use tickdb_core::store::{ChunkSnapshot, Store, SymIndex, TableSnapshot};
use tickdb_core::TableDef;

/// One table of the store, as SQL sees it.
pub struct TickTable {
    store: Arc<Store>,
    def: Arc<TableDef>,
    schema: SchemaRef,
    target_partitions: usize,
}

impl fmt::Debug for TickTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TickTable")
            .field("table", &self.def.name)
            .finish()
    }
}

impl TickTable {
    pub fn new(store: Arc<Store>, def: &TableDef, target_partitions: usize) -> TickTable {
        TickTable {
            store,
            def: Arc::new(def.clone()),
            schema: tickdb_core::store::arrow_schema(def),
            target_partitions: target_partitions.max(1),
        }
    }

    pub fn def(&self) -> &Arc<TableDef> {
        &self.def
    }

    /// A snapshot of the table as of now.
    pub fn snapshot(&self) -> Result<TableSnapshot> {
        self.store.snapshot(&self.def.name).map_err(|e| {
            DataFusionError::Execution(format!("snapshot of '{}': {e}", self.def.name))
        })
    }

    fn sym_name(&self) -> Option<&str> {
        self.def
            .sym_column
            .map(|i| self.def.columns[i].name.as_str())
    }

    fn time_name(&self) -> &str {
        &self.def.columns[self.def.time_column].name
    }
}

/// What the pushed-down filters of one scan allow.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruning {
    /// Symbols the rows must have (None: any).
    pub syms: Option<BTreeSet<String>>,
    /// Inclusive bounds on the designated timestamp, in ns.
    pub time_lo: i64,
    pub time_hi: i64,
}

impl Default for Pruning {
    fn default() -> Self {
        Pruning {
            syms: None,
            time_lo: i64::MIN,
            time_hi: i64::MAX,
        }
    }
}

/// The column an expression names, looking through casts.
fn column_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(c) => column_name(&c.expr),
        Expr::TryCast(c) => column_name(&c.expr),
        _ => None,
    }
}

/// The column an expression names, looking only through casts that keep
/// every nanosecond timestamp's value (a cast to a date or a coarser unit
/// is not a range on the column itself).
fn time_column_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(c) if ns_timestamp(c.field.data_type()) => time_column_name(&c.expr),
        Expr::TryCast(c) if ns_timestamp(c.field.data_type()) => time_column_name(&c.expr),
        _ => None,
    }
}

fn ns_timestamp(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(TimeUnit::Nanosecond, _))
}

/// A constant's scalar value, looking through casts of constants.
fn literal(e: &Expr) -> Option<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v.clone()),
        Expr::Cast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        Expr::TryCast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        _ => None,
    }
}

fn string_value(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        ScalarValue::Dictionary(_, inner) => string_value(inner),
        _ => None,
    }
}

/// A constant as nanoseconds since the epoch.
fn time_value(v: &ScalarValue) -> Option<i64> {
    let v = match v {
        ScalarValue::Dictionary(_, inner) => return time_value(inner),
        ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_) | ScalarValue::Utf8View(_) => v
            .cast_to(&DataType::Timestamp(TimeUnit::Nanosecond, None))
            .ok()?,
        _ => v.clone(),
    };
    match v {
        ScalarValue::TimestampNanosecond(Some(x), _) => Some(x),
        ScalarValue::TimestampMicrosecond(Some(x), _) => x.checked_mul(1_000),
        ScalarValue::TimestampMillisecond(Some(x), _) => x.checked_mul(1_000_000),
        ScalarValue::TimestampSecond(Some(x), _) => x.checked_mul(1_000_000_000),
        ScalarValue::Date32(Some(d)) => (d as i64).checked_mul(86_400_000_000_000),
        ScalarValue::Date64(Some(ms)) => ms.checked_mul(1_000_000),
        _ => None,
    }
}

impl TickTable {
    /// The symbols an expression restricts the index column to, if it is an
    /// equality, an `IN` list, or an `OR` of those.
    fn sym_set(&self, e: &Expr) -> Option<BTreeSet<String>> {
        let sym = self.sym_name()?;
        match e {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => {
                let v = if column_name(left) == Some(sym) {
                    right
                } else if column_name(right) == Some(sym) {
                    left
                } else {
                    return None;
                };
                Some(BTreeSet::from([string_value(&literal(v)?)?]))
            }
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Or,
                right,
            }) => {
                let mut a = self.sym_set(left)?;
                a.extend(self.sym_set(right)?);
                Some(a)
            }
            Expr::InList(l) if !l.negated && column_name(&l.expr) == Some(sym) => {
                let mut out = BTreeSet::new();
                for v in &l.list {
                    out.insert(string_value(&literal(v)?)?);
                }
                Some(out)
            }
            _ => None,
        }
    }

    /// Inclusive time bounds an expression implies, if it compares the
    /// designated timestamp column with constants.
    fn time_range(&self, e: &Expr) -> Option<(i64, i64)> {
        let time = self.time_name();
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (op, v) = if time_column_name(left) == Some(time) {
                    (*op, right)
                } else if time_column_name(right) == Some(time) {
                    (op.swap()?, left)
                } else {
                    return None;
                };
                let v = time_value(&literal(v)?)?;
                match op {
                    Operator::Eq => Some((v, v)),
                    Operator::Gt => Some((v.checked_add(1)?, i64::MAX)),
                    Operator::GtEq => Some((v, i64::MAX)),
                    Operator::Lt => Some((i64::MIN, v.checked_sub(1)?)),
                    Operator::LtEq => Some((i64::MIN, v)),
                    _ => None,
                }
            }
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) if time_column_name(expr) == Some(time) => {
                Some((time_value(&literal(low)?)?, time_value(&literal(high)?)?))
            }
            _ => None,
        }
    }

    /// Folds the pushed-down filters into one pruning description.
    pub fn pruning(&self, filters: &[Expr]) -> Pruning {
        let mut p = Pruning::default();
        for f in filters {
            if let Some(s) = self.sym_set(f) {
                p.syms = Some(match p.syms.take() {
                    None => s,
                    Some(prev) => prev.intersection(&s).cloned().collect(),
                });
            } else if let Some((lo, hi)) = self.time_range(f) {
                p.time_lo = p.time_lo.max(lo);
                p.time_hi = p.time_hi.min(hi);
            }
        }
        p
    }
}

/// The rows of `rows` (a chunk, or the part of it `time_window` keeps)
/// whose symbol id is in `ids` (sorted ascending), as a batch of the
/// columns in `projection`, for a chunk without a symbol index (the active
/// one): a pass over its symbol column.
fn filter_syms(
    rows: &RecordBatch,
    sym_column: usize,
    ids: &[u32],
    projection: Option<&Vec<usize>>,
) -> Result<RecordBatch> {
    let batch = match projection {
        Some(p) => rows.project(p)?,
        None => rows.clone(),
    };
    let col = rows.column(sym_column);
    let dict = col
        .as_any()
        .downcast_ref::<datafusion::arrow::array::DictionaryArray<UInt32Type>>()
        .ok_or_else(|| {
            DataFusionError::Internal("symbol column is not Dictionary(UInt32, Utf8)".into())
        })?;
    let keys = dict.keys();
    let values = keys.values();
    // Built 64 rows to a word, with no per-row Option: the active chunk
    // holds up to a chunk's rows, and one symbol's query (a monitor's
    // poll) filters all of them. One symbol is compared directly.
    let wanted = match ids {
        [id] => BooleanBuffer::collect_bool(values.len(), |i| values[i] == *id),
        _ => BooleanBuffer::collect_bool(values.len(), |i| ids.binary_search(&values[i]).is_ok()),
    };
    // A null key (no symbol) is never selected.
    let wanted = match keys.nulls() {
        Some(valid) if valid.null_count() > 0 => &wanted & valid.inner(),
        _ => wanted,
    };
    let mask = BooleanArray::new(wanted, None);
    Ok(filter_record_batch(&batch, &mask)?)
}

/// Cuts a batch into zero-copy slices of at most `rows` rows.
fn slices(batch: RecordBatch, rows: usize, out: &mut Vec<RecordBatch>) {
    let n = batch.num_rows();
    if n <= rows {
        if n > 0 {
            out.push(batch);
        }
        return;
    }
    let mut at = 0;
    while at < n {
        let len = rows.min(n - at);
        out.push(batch.slice(at, len));
        at += len;
    }
}

/// The batches a scan of `snap` yields under `pruning`, in arrival order.
///
/// A quiet symbol's rows in the indexed chunks are gathered across chunks
/// into batches of `batch_rows`: it has a few rows in each of hundreds of
/// chunks, and a batch per chunk would cost more to build and to run
/// through the plan than the rows themselves.
///
/// A selection of many rows (`PARALLEL_GATHER_ROWS_MIN`) is gathered by up
/// to `threads` threads, each over a run of consecutive chunks holding an
/// equal share of the rows: a gather reads scattered rows, so it waits on
/// memory, and a second core waits on other rows at the same time (the
/// most active symbol's quotes on a 50M-row rdb are 6M rows spread over
/// every chunk). The runs' batches are concatenated in chunk order, so the
/// arrival order is kept.
pub fn scan_batches(
    snap: &TableSnapshot,
    pruning: &Pruning,
    projection: Option<&Vec<usize>>,
    batch_rows: usize,
    threads: usize,
) -> Result<Vec<RecordBatch>> {
    let ids: Option<Vec<u32>> = pruning.syms.as_ref().map(|syms| {
        let mut ids: Vec<u32> = syms.iter().filter_map(|s| snap.symbol_id(s)).collect();
        ids.sort_unstable();
        ids
    });
    if ids.as_ref().is_some_and(|i| i.is_empty()) {
        return Ok(Vec::new());
    }
    let batch_rows = batch_rows.max(1);
    let chunks: Vec<&ChunkSnapshot> = snap
        .chunks
        .iter()
        .filter(|c| {
            c.batch.num_rows() > 0 && c.max_time >= pruning.time_lo && c.min_time <= pruning.time_hi
        })
        .collect();
    let runs = match (&ids, snap.def.sym_column) {
        (Some(ids), Some(_)) if threads > 1 && chunks.len() > 1 => {
            gather_runs(&chunks, ids, threads)
        }
        _ => Vec::new(),
    };
    let times = (pruning.time_lo, pruning.time_hi);
    if runs.len() < 2 {
        return scan_chunks(snap, &chunks, ids.as_deref(), times, projection, batch_rows);
    }
    let ids = ids.as_deref();
    let parts: Vec<Result<Vec<RecordBatch>>> = std::thread::scope(|scope| {
        let (first, rest) = runs.split_first().expect("two runs or more");
        let handles: Vec<_> = rest
            .iter()
            .map(|r| {
                let part = &chunks[r.clone()];
                scope.spawn(move || scan_chunks(snap, part, ids, times, projection, batch_rows))
            })
            .collect();
        let mut parts = vec![scan_chunks(
            snap,
            &chunks[first.clone()],
            ids,
            times,
            projection,
            batch_rows,
        )];
        for h in handles {
            parts.push(h.join().unwrap_or_else(|_| {
                Err(DataFusionError::Internal(
                    "a gather thread of a symbol selection panicked".into(),
                ))
            }));
        }
        parts
    });
    let mut out = Vec::new();
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

/// A symbol selection of at least this many rows is gathered by several
/// threads (`scan_batches`); below it a thread's start costs more than it
/// saves.
pub const PARALLEL_GATHER_ROWS_MIN: usize = 256 * 1024;

/// Runs of consecutive `chunks` holding about equal shares of the rows of
/// the symbols `ids`, at most `threads` of them; none where the selection
/// is under `PARALLEL_GATHER_ROWS_MIN` rows.
fn gather_runs(
    chunks: &[&ChunkSnapshot],
    ids: &[u32],
    threads: usize,
) -> Vec<std::ops::Range<usize>> {
    let counts: Vec<usize> = chunks
        .iter()
        .map(|c| match &c.sym_index {
            Some(ix) => ids.iter().map(|id| ix.rows(*id).len()).sum(),
            // An unindexed chunk (the active one) is filtered whole.
            None => c.batch.num_rows(),
        })
        .collect();
    let total: usize = counts.iter().sum();
    if total < PARALLEL_GATHER_ROWS_MIN {
        return Vec::new();
    }
    let share = total.div_ceil(threads);
    let mut runs = Vec::with_capacity(threads);
    let (mut start, mut acc) = (0, 0);
    for (i, n) in counts.iter().enumerate() {
        acc += n;
        if acc >= share && runs.len() + 1 < threads {
            runs.push(start..i + 1);
            start = i + 1;
            acc = 0;
        }
    }
    if start < chunks.len() {
        runs.push(start..chunks.len());
    }
    runs
}

/// `scan_batches` over `chunks` (already pruned by time), in their order;
/// `times` are the inclusive bounds the filters put on the designated
/// timestamp (`time_window`).
fn scan_chunks(
    snap: &TableSnapshot,
    chunks: &[&ChunkSnapshot],
    ids: Option<&[u32]>,
    times: (i64, i64),
    projection: Option<&Vec<usize>>,
    batch_rows: usize,
) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    let mut gather = Gather::new(snap, projection, ids, batch_rows)?;
    let mut rows: Vec<u32> = Vec::new();
    for &chunk in chunks {
        let window = time_window(chunk, snap.def.time_column, times);
        if window.is_empty() {
            continue;
        }
        let whole = window.len() == chunk.batch.num_rows();
        let batch = match (ids, snap.def.sym_column, &chunk.sym_index) {
            (Some(ids), Some(_), Some(ix)) => {
                index_rows(ix, ids, &mut rows);
                if !whole {
                    rows.retain(|r| window.contains(&(*r as usize)));
                }
                if rows.len() < batch_rows / GATHER_FROM_CHUNK_MAX_DIV {
                    gather.add(chunk, &rows, &mut out)?;
                    continue;
                }
                // Rows gathered so far come first, in arrival order.
                gather.flush(&mut out)?;
                gather.take_chunk(chunk, &rows)?
            }
            (Some(ids), Some(sc), None) => {
                gather.flush(&mut out)?;
                let rows = chunk.batch.slice(window.start, window.len());
                filter_syms(&rows, sc, ids, projection)?
            }
            _ => {
                let rows = chunk.batch.slice(window.start, window.len());
                match projection {
                    Some(p) => rows.project(p)?,
                    None => rows,
                }
            }
        };
        slices(batch, batch_rows, &mut out);
    }
    gather.flush(&mut out)?;
    Ok(out)
}

/// The rows of `chunk` that may hold a time within `times` (inclusive): all
/// but those before its first time at or after the low bound and those
/// after its last time at or before the high bound (a null time ends either
/// search; only the filter can tell it). Rows arrive in about time order,
/// so in a chunk that a range starts or ends in this keeps about the rows
/// of the range: the plan's row count (its statistics) is then what the
/// query reads, and a query for the last moments of the day reads those
/// rows, not the chunk they are in. The window may keep rows outside the
/// range (out-of-order ones between); the filter above the scan drops them.
fn time_window(
    chunk: &ChunkSnapshot,
    time_column: usize,
    (lo, hi): (i64, i64),
) -> std::ops::Range<usize> {
    let n = chunk.batch.num_rows();
    if chunk.min_time >= lo && chunk.max_time <= hi {
        return 0..n;
    }
    let Some(times) = chunk
        .batch
        .column(time_column)
        .as_primitive_opt::<TimestampNanosecondType>()
    else {
        return 0..n;
    };
    let values = times.values();
    let nulls = times.nulls().filter(|b| b.null_count() > 0);
    let null = |i: usize| nulls.is_some_and(|b| b.is_null(i));
    let start = if chunk.min_time >= lo {
        0
    } else {
        (0..n).find(|&i| null(i) || values[i] >= lo).unwrap_or(n)
    };
    let end = if chunk.max_time <= hi {
        n
    } else {
        (start..n)
            .rev()
            .find(|&i| null(i) || values[i] <= hi)
            .map_or(start, |i| i + 1)
    };
    start..end
}

/// The rows of the symbols `ids` (sorted) in an indexed chunk, into
/// `rows`, in arrival order.
fn index_rows(ix: &SymIndex, ids: &[u32], rows: &mut Vec<u32>) {
    rows.clear();
    for id in ids {
        rows.extend_from_slice(ix.rows(*id));
    }
    if ids.len() > 1 {
        // Keep arrival order across symbols.
        rows.sort_unstable();
    }
}

/// A chunk with fewer selected rows than a batch over this is gathered
/// with others; one with more makes its own batch (a gather across chunks
/// costs more per row than a take within one, and is only worth it for
/// the few rows a chunk holds of a quiet symbol).
const GATHER_FROM_CHUNK_MAX_DIV: usize = 4;

/// Rows of several chunks to be copied into shared batches: the chunks,
/// and (chunk, row) pairs in arrival order.
struct Gather<'a> {
    sources: Vec<&'a RecordBatch>,
    rows: Vec<(usize, usize)>,
    /// The chunk column of each column read, and their schema.
    columns: Vec<usize>,
    schema: SchemaRef,
    /// The table's symbol dictionary (see `flush`).
    symbols: ArrayRef,
    /// The id of the one symbol selected, if one is; and where the table's
    /// symbol column is among the columns read, if it is. With one symbol
    /// that column is the id repeated, not read from the chunks (a cache
    /// miss or two per row saved: a quiet symbol's rows are far apart).
    one: Option<u32>,
    sym_at: Option<usize>,
    batch_rows: usize,
}

impl<'a> Gather<'a> {
    fn new(
        snap: &TableSnapshot,
        projection: Option<&Vec<usize>>,
        ids: Option<&[u32]>,
        batch_rows: usize,
    ) -> Result<Gather<'a>> {
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..snap.schema.fields().len()).collect(),
        };
        let schema = Arc::new(snap.schema.project(&columns)?);
        let one = match ids {
            Some([id]) => Some(*id),
            _ => None,
        };
        let sym_at = snap
            .def
            .sym_column
            .and_then(|sc| columns.iter().position(|&c| c == sc));
        Ok(Gather {
            sources: Vec::new(),
            rows: Vec::new(),
            columns,
            schema,
            symbols: snap.symbols.clone(),
            one,
            sym_at,
            batch_rows,
        })
    }

    /// Adds `rows` of `chunk` (in arrival order) to be gathered.
    fn add(
        &mut self,
        chunk: &'a ChunkSnapshot,
        rows: &[u32],
        out: &mut Vec<RecordBatch>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let source = self.sources.len();
        self.rows.extend(rows.iter().map(|&r| (source, r as usize)));
        self.sources.push(&chunk.batch);
        if self.rows.len() >= self.batch_rows {
            self.flush(out)?;
        }
        Ok(())
    }

    /// `rows` of `chunk` (in arrival order), as a batch of their own: the
    /// whole chunk as it is where they are all of it; with one symbol
    /// selected, its column is the symbol repeated, not read.
    fn take_chunk(&self, chunk: &ChunkSnapshot, rows: &[u32]) -> Result<RecordBatch> {
        if rows.len() == chunk.batch.num_rows() {
            return Ok(chunk.batch.project(&self.columns)?);
        }
        let indices = UInt32Array::from(rows.to_vec());
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (at, &c) in self.columns.iter().enumerate() {
            cols.push(match self.repeated_symbol(at, rows.len())? {
                Some(col) => col,
                None => take(chunk.batch.column(c), &indices, None)?,
            });
        }
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            // No column read (`count(*)`): only the row count.
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }

    /// Column `at` of `n` rows as the one symbol selected, repeated, where
    /// it is the table's symbol column and one symbol is selected.
    fn repeated_symbol(&self, at: usize, n: usize) -> Result<Option<ArrayRef>> {
        match self.one {
            Some(id) if self.sym_at == Some(at) => {
                Ok(Some(Arc::new(DictionaryArray::<UInt32Type>::try_new(
                    UInt32Array::from(vec![id; n]),
                    self.symbols.clone(),
                )?)))
            }
            _ => Ok(None),
        }
    }

    /// The rows added so far, copied out in batches of `batch_rows`.
    ///
    /// Symbol columns keep their keys and take the table's dictionary:
    /// each chunk's is a prefix of it (the dictionary only grows), and
    /// Arrow, given dictionaries that are not one array, would concatenate
    /// them all.
    fn flush(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        if self.sources.is_empty() {
            return Ok(());
        }
        for part in self.rows.chunks(self.batch_rows) {
            let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
            for (at, &c) in self.columns.iter().enumerate() {
                let arrays: Vec<&dyn Array> =
                    self.sources.iter().map(|b| b.column(c).as_ref()).collect();
                let col = match (
                    self.repeated_symbol(at, part.len())?,
                    self.schema.field(at).data_type(),
                ) {
                    (Some(col), _) => col,
                    (None, DataType::Dictionary(k, _)) if **k == DataType::UInt32 => {
                        let keys: Vec<&dyn Array> = arrays
                            .iter()
                            .map(|a| match a.as_dictionary_opt::<UInt32Type>() {
                                Some(d) => Ok(d.keys() as &dyn Array),
                                None => Err(DataFusionError::Internal(
                                    "symbol column is not Dictionary(UInt32, Utf8)".into(),
                                )),
                            })
                            .collect::<Result<_>>()?;
                        let keys = interleave(&keys, part)?
                            .as_primitive::<UInt32Type>()
                            .clone();
                        Arc::new(DictionaryArray::<UInt32Type>::try_new(
                            keys,
                            self.symbols.clone(),
                        )?) as ArrayRef
                    }
                    (None, _) => interleave(&arrays, part)?,
                };
                cols.push(col);
            }
            out.push(RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                // No column read (`count(*)`): only the row count.
                &RecordBatchOptions::new().with_row_count(Some(part.len())),
            )?);
        }
        self.sources.clear();
        self.rows.clear();
        Ok(())
    }
}

/// A scan partition gets at least this many rows (DataFusion's default
/// batch size, below which it does not spread rows over threads either): a
/// second partition of a small scan costs a task and a thread wake-up (on
/// an idle core, hundreds of µs in a virtual machine) for less work than
/// that, and a monitor's poll of the newest rows is all such overhead.
pub const PARTITION_ROWS_MIN: usize = 8192;

/// Spreads batches over at most `n` partitions (fewer for a small scan,
/// `PARTITION_ROWS_MIN`) in contiguous runs, so each partition reads its
/// part of the table in arrival order.
pub fn partition(batches: Vec<RecordBatch>, n: usize) -> Vec<Vec<RecordBatch>> {
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    let n = n.max(1).min(total.div_ceil(PARTITION_ROWS_MIN).max(1));
    if batches.is_empty() {
        return vec![Vec::new()];
    }
    let per = total.div_ceil(n).max(1);
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new()];
    let mut rows_in_last = 0;
    for b in batches {
        if rows_in_last >= per && parts.len() < n {
            parts.push(Vec::new());
            rows_in_last = 0;
        }
        rows_in_last += b.num_rows();
        parts.last_mut().expect("one partition at least").push(b);
    }
    parts
}

#[async_trait::async_trait]
impl TableProvider for TickTable {
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
                if self.sym_set(f).is_some() {
                    TableProviderFilterPushDown::Exact
                } else if self.time_range(f).is_some() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
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
        let snap = self.snapshot()?;
        // Columns added to the table since this provider was registered
        // (a query planned before `ALTER TABLE ... ADD COLUMN`): only the
        // columns planned are read.
        let planned: Vec<usize>;
        let projection = match projection {
            None if snap.schema.fields().len() != self.schema.fields().len() => {
                planned = (0..self.schema.fields().len()).collect();
                Some(&planned)
            }
            p => p,
        };
        let pruning = self.pruning(filters);
        let batch_rows = state.config().batch_size().max(1);
        let batches = scan_batches(
            &snap,
            &pruning,
            projection,
            batch_rows,
            self.target_partitions,
        )?;
        let partitions = partition(batches, self.target_partitions);
        // The batches are projected already (zero-copy) so that symbol
        // selection takes only the columns the query reads.
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let source = MemorySourceConfig::try_new(&partitions, schema, None)?
            .with_show_sizes(false)
            .with_limit(limit);
        let inner = datafusion::datasource::source::DataSourceExec::from_data_source(source);
        Ok(Arc::new(crate::sym_scan::TickScanExec::new(
            inner,
            snap,
            pruning,
            projection,
            batch_rows,
            self.target_partitions,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    /// A batch of (sym, n) with the given symbol keys (None: null) over a
    /// dictionary of four symbols, n the row number.
    fn batch(keys: &[Option<u32>]) -> RecordBatch {
        let dict = DictionaryArray::<UInt32Type>::try_new(
            UInt32Array::from(keys.to_vec()),
            Arc::new(StringArray::from(vec!["A", "B", "C", "D"])),
        )
        .expect("dictionary");
        let n = Int64Array::from_iter_values(0..keys.len() as i64);
        let schema = Schema::new(vec![
            Field::new("sym", dict.data_type().clone(), true),
            Field::new("n", DataType::Int64, false),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(dict), Arc::new(n)]).expect("batch")
    }

    fn rows_of(b: &RecordBatch) -> Vec<i64> {
        b.column(b.num_columns() - 1)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .values()
            .to_vec()
    }

    /// The active chunk's pass keeps exactly the rows of the selected
    /// symbols, in order, past a word of the mask (130 rows), with one
    /// symbol and with several, in a slice too, and never a row without a
    /// symbol.
    #[test]
    fn the_active_chunk_keeps_the_selected_symbols_rows_and_no_null() {
        let keys: Vec<Option<u32>> = (0..130u32)
            .map(|i| if i % 7 == 0 { None } else { Some(i % 4) })
            .collect();
        let b = batch(&keys);
        let want = |ids: &[u32]| -> Vec<i64> {
            (0..keys.len())
                .filter(|&i| keys[i].is_some_and(|k| ids.contains(&k)))
                .map(|i| i as i64)
                .collect()
        };
        for ids in [&[2u32][..], &[0, 3], &[1, 2, 3], &[]] {
            let got = filter_syms(&b, 0, ids, None).expect("filter");
            assert_eq!(rows_of(&got), want(ids), "ids {ids:?}");
        }
        let projected = filter_syms(&b, 0, &[1], Some(&vec![1])).expect("projected");
        assert_eq!(projected.num_columns(), 1);
        assert_eq!(rows_of(&projected), want(&[1]));
        // A time window's slice (not at a word boundary), null keys in it.
        let part = b.slice(3, 100);
        let got = filter_syms(&part, 0, &[0, 2], None).expect("slice");
        let want_part: Vec<i64> = want(&[0, 2])
            .into_iter()
            .filter(|&r| (3..103).contains(&r))
            .collect();
        assert_eq!(rows_of(&got), want_part);
        // With no null key at all.
        let full: Vec<Option<u32>> = (0..70u32).map(|i| Some(i % 4)).collect();
        let got = filter_syms(&batch(&full), 0, &[3], None).expect("filter");
        assert_eq!(
            rows_of(&got),
            (0..70).filter(|i| i % 4 == 3).collect::<Vec<i64>>()
        );
    }
}
