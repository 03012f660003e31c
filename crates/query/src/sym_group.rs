//! Grouping by symbol and one 64-bit key (a time bucket), a symbol at a time.
//!
//! Under `sym_order::SymbolAggregateRule` each partition holds whole
//! symbols, in key order. DataFusion's aggregate, told its input is ordered
//! by symbol, interns a two-column group key row by row through its
//! streaming path (a hash, a probe and a per-column comparison through
//! dynamic calls for every row): most of the time of a `group by
//! time_bucket(…), sym` over a day of trades.
//!
//! `SymGroupExec` does the same aggregation with what the order gives:
//! only the current symbol's groups can still grow, so a group is found in
//! a small table of that symbol's keys, cleared when the symbol changes;
//! a row with the same key as the row before (a bucket's ticks) skips the
//! table. The aggregates are DataFusion's own group accumulators, fed a
//! whole batch at a time. Groups of finished symbols are emitted once at
//! least `batch_rows` of them are held, so memory stays bounded by that
//! plus the symbol in progress.

use datafusion::arrow::array::{
    make_array, Array, ArrayData, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array,
};
use datafusion::arrow::buffer::{Buffer, NullBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, SchemaRef, UInt32Type};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::{aggregate_expressions, AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{
    apply_expression_roots, Boundedness, EmissionType,
};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties, ReplaceChildrenOptions,
};
use futures::StreamExt;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

type PExpr = Arc<dyn PhysicalExpr>;

/// See the module's documentation.
#[derive(Debug)]
pub(crate) struct SymGroupExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Arc<Spec>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// The aggregation, shared by the plan and each partition's stream.
#[derive(Debug)]
struct Spec {
    /// The grouping, as the aggregate it replaces had it: the symbol's
    /// keys at `sym`, the other key at the other place (`key()`).
    group_expr: Vec<(PExpr, String)>,
    sym: usize,
    aggr_expr: Vec<Arc<AggregateFunctionExpr>>,
    filter_expr: Vec<Option<PExpr>>,
    /// Each aggregate's arguments, its ordering's expressions after them
    /// (what an order-sensitive accumulator compares).
    args: Vec<Vec<PExpr>>,
    schema: SchemaRef,
    batch_rows: usize,
}

impl Spec {
    fn key(&self) -> usize {
        1 - self.sym
    }
}

/// Whether `key` is a type whose values are 64-bit integers in Arrow.
fn is_64bit_key(t: &DataType) -> bool {
    matches!(t, DataType::Int64 | DataType::Timestamp(_, _))
}

impl SymGroupExec {
    /// The same aggregation as `agg` (single mode, grouped by the symbol's
    /// keys at `sym` and one other key), where this exec can do it: the
    /// other key 64-bit, every aggregate with a group accumulator. None
    /// otherwise, and `agg` stays.
    pub(crate) fn replacing(
        agg: &AggregateExec,
        sym: usize,
        batch_rows: usize,
    ) -> Result<Option<SymGroupExec>> {
        let groups = agg.group_expr();
        if !groups.is_single() || groups.expr().len() != 2 || sym > 1 {
            return Ok(None);
        }
        let input = agg.input().clone();
        let in_schema = input.schema();
        if groups.expr()[sym].0.data_type(&in_schema)? != DataType::UInt32
            || !is_64bit_key(&groups.expr()[1 - sym].0.data_type(&in_schema)?)
        {
            return Ok(None);
        }
        if !agg
            .aggr_expr()
            .iter()
            .all(|a| a.groups_accumulator_supported())
        {
            return Ok(None);
        }
        let args = aggregate_expressions(agg.aggr_expr(), &AggregateMode::Single, 0)?;
        let schema = agg.schema();
        let parts = input.output_partitioning().partition_count();
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(parts),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Some(SymGroupExec {
            input,
            spec: Arc::new(Spec {
                group_expr: groups.expr().to_vec(),
                sym,
                aggr_expr: agg.aggr_expr().to_vec(),
                filter_expr: agg.filter_expr().to_vec(),
                args,
                schema,
                batch_rows: batch_rows.max(1),
            }),
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

impl DisplayAs for SymGroupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<String> = self
            .spec
            .group_expr
            .iter()
            .map(|(e, n)| format!("{e} as {n}"))
            .collect();
        let aggs: Vec<&str> = self.spec.aggr_expr.iter().map(|a| a.name()).collect();
        write!(
            f,
            "SymGroupExec: by symbol, gby=[{}], aggr=[{}]",
            names.join(", "),
            aggs.join(", ")
        )
    }
}

impl ExecutionPlan for SymGroupExec {
    fn name(&self) -> &'static str {
        "SymGroupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let spec = &self.spec;
        let exprs = spec
            .group_expr
            .iter()
            .map(|(e, _)| e)
            .chain(spec.args.iter().flatten())
            .chain(spec.filter_expr.iter().flatten());
        apply_expression_roots(exprs, f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("SymGroupExec takes one child".into()))?;
        if input.output_partitioning().partition_count()
            != self.input.output_partitioning().partition_count()
        {
            // Its partitions must stay whole symbols: not to be re-planned.
            return internal_err!("SymGroupExec's input cannot be repartitioned");
        }
        Ok(Arc::new(SymGroupExec {
            input,
            spec: self.spec.clone(),
            properties: self.properties.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, ctx.clone())?;
        let accs = self
            .spec
            .aggr_expr
            .iter()
            .map(|a| a.create_groups_accumulator())
            .collect::<Result<Vec<_>>>()?;
        let reservation =
            MemoryConsumer::new(format!("SymGroupExec[{partition}]")).register(ctx.memory_pool());
        let state = Grouping {
            spec: self.spec.clone(),
            accs,
            groups: Groups::default(),
            indices: Vec::new(),
            reservation,
            metrics: BaselineMetrics::new(&self.metrics, partition),
            done: false,
        };
        let stream =
            futures::stream::try_unfold((input, state), |(mut input, mut st)| async move {
                loop {
                    if st.done {
                        return Ok(None);
                    }
                    match input.next().await {
                        Some(batch) => {
                            if let Some(out) = st.push(&batch?)? {
                                return Ok(Some((out, (input, st))));
                            }
                        }
                        None => {
                            st.done = true;
                            let out = st.emit(EmitTo::All)?;
                            st.reservation.free();
                            if out.num_rows() == 0 {
                                return Ok(None);
                            }
                            return Ok(Some((out, (input, st))));
                        }
                    }
                }
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.spec.schema.clone(),
            stream,
        )))
    }
}

/// A 64-bit key's hash: one multiply (the keys are integers; the table
/// holds one symbol's few thousand of them).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i64(&mut self, v: i64) {
        // The table's bucket comes from the low bits, and time buckets are
        // multiples of a power of ten (of 2^9 for whole seconds in
        // nanoseconds): the product's high half, folded down, mixes all.
        let x = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 32);
    }
}

/// The groups held: each one's keys, in group order, and the current
/// symbol's table of its keys.
#[derive(Default)]
struct Groups {
    keys: Vec<i64>,
    key_valid: Vec<bool>,
    syms: Vec<u32>,
    sym_valid: Vec<bool>,
    /// The current symbol (None before the first row; a null symbol is
    /// `Some(None)` and comes after every key).
    current: Option<Option<u32>>,
    /// Groups before this index belong to finished symbols.
    finished: usize,
    table: HashMap<i64, usize, BuildHasherDefault<KeyHasher>>,
    null_key_group: Option<usize>,
    /// The previous row's key and group.
    last: Option<(i64, usize)>,
}

impl Groups {
    fn len(&self) -> usize {
        self.keys.len()
    }

    /// Starts symbol `s`; an error if the input is not in symbol order
    /// (a symbol seen again after another would split its groups).
    fn start(&mut self, s: Option<u32>) -> Result<()> {
        let rank = |s: Option<u32>| s.map_or(u64::MAX, u64::from);
        if let Some(prev) = self.current {
            if rank(s) <= rank(prev) {
                return internal_err!(
                    "SymGroupExec: input not grouped by symbol (key {s:?} after {prev:?})"
                );
            }
        }
        self.current = Some(s);
        self.finished = self.len();
        self.table.clear();
        self.null_key_group = None;
        self.last = None;
        Ok(())
    }

    fn new_group(&mut self, key: Option<i64>) -> usize {
        let g = self.keys.len();
        self.keys.push(key.unwrap_or(0));
        self.key_valid.push(key.is_some());
        let s = self.current.flatten();
        self.syms.push(s.unwrap_or(0));
        self.sym_valid.push(s.is_some());
        g
    }

    /// The group of every row of one batch, into `out`.
    fn intern(
        &mut self,
        syms: &UInt32Array,
        keys: &[i64],
        key_nulls: Option<&NullBuffer>,
        out: &mut Vec<usize>,
    ) -> Result<()> {
        out.clear();
        out.reserve(keys.len());
        let sym_vals = syms.values();
        for (i, &k) in keys.iter().enumerate() {
            let s = if syms.is_null(i) {
                None
            } else {
                Some(sym_vals[i])
            };
            if self.current != Some(s) {
                self.start(s)?;
            }
            let g = if key_nulls.is_some_and(|n| n.is_null(i)) {
                match self.null_key_group {
                    Some(g) => g,
                    None => {
                        let g = self.new_group(None);
                        self.null_key_group = Some(g);
                        g
                    }
                }
            } else {
                match self.last {
                    Some((lk, lg)) if lk == k => lg,
                    _ => {
                        let g = match self.table.get(&k) {
                            Some(&g) => g,
                            None => {
                                let g = self.new_group(Some(k));
                                self.table.insert(k, g);
                                g
                            }
                        };
                        self.last = Some((k, g));
                        g
                    }
                }
            };
            out.push(g);
        }
        Ok(())
    }

    /// Takes the first `n` groups' keys out, renumbering the rest: `n` is
    /// either the finished symbols' groups or all of them.
    fn take(&mut self, n: usize) -> (Vec<i64>, Vec<bool>, Vec<u32>, Vec<bool>) {
        let rest_keys = self.keys.split_off(n);
        let rest_kv = self.key_valid.split_off(n);
        let rest_syms = self.syms.split_off(n);
        let rest_sv = self.sym_valid.split_off(n);
        let out = (
            std::mem::replace(&mut self.keys, rest_keys),
            std::mem::replace(&mut self.key_valid, rest_kv),
            std::mem::replace(&mut self.syms, rest_syms),
            std::mem::replace(&mut self.sym_valid, rest_sv),
        );
        if n > self.finished {
            // Every group, the current symbol's too: at the end of input.
            self.table.clear();
            self.null_key_group = None;
            self.last = None;
            self.finished = 0;
            return out;
        }
        // Only finished symbols' groups: the current symbol's are all at
        // `finished` or after.
        for g in self.table.values_mut() {
            *g -= n;
        }
        if let Some(g) = self.null_key_group.as_mut() {
            *g -= n;
        }
        if let Some((_, g)) = self.last.as_mut() {
            *g -= n;
        }
        self.finished -= n;
        out
    }

    fn bytes(&self) -> usize {
        self.keys.capacity() * 8
            + self.syms.capacity() * 4
            + self.key_valid.capacity()
            + self.sym_valid.capacity()
            + self.table.capacity() * 24
    }
}

/// One partition's aggregation.
struct Grouping {
    spec: Arc<Spec>,
    accs: Vec<Box<dyn GroupsAccumulator>>,
    groups: Groups,
    indices: Vec<usize>,
    reservation: MemoryReservation,
    metrics: BaselineMetrics,
    done: bool,
}

/// A 64-bit key column's values (Int64 or a timestamp of any unit: one
/// buffer of i64 either way).
fn key_values(a: &ArrayRef) -> Result<ScalarBuffer<i64>> {
    let data = a.to_data();
    match data.buffers().first() {
        Some(values) if is_64bit_key(a.data_type()) => {
            Ok(ScalarBuffer::new(values.clone(), data.offset(), data.len()))
        }
        _ => internal_err!(
            "SymGroupExec: key column of type {} is not supported",
            a.data_type()
        ),
    }
}

impl Grouping {
    /// Aggregates one batch; a batch of finished symbols' groups once
    /// enough of them are held.
    fn push(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let timer = self.metrics.elapsed_compute().timer();
        let n = batch.num_rows();
        if n == 0 {
            return Ok(None);
        }
        let p = &self.spec;
        let syms = p.group_expr[p.sym].0.evaluate(batch)?.into_array(n)?;
        let Some(syms) = syms.as_primitive_opt::<UInt32Type>() else {
            return internal_err!(
                "SymGroupExec: symbol keys are {}, not UInt32",
                syms.data_type()
            );
        };
        let keys = p.group_expr[p.key()].0.evaluate(batch)?.into_array(n)?;
        let key_vals = key_values(&keys)?;
        let mut indices = std::mem::take(&mut self.indices);
        self.groups
            .intern(syms, &key_vals, keys.logical_nulls().as_ref(), &mut indices)?;
        let total = self.groups.len();
        for (i, acc) in self.accs.iter_mut().enumerate() {
            let values = self.spec.args[i]
                .iter()
                .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                .collect::<Result<Vec<_>>>()?;
            let filter = match &self.spec.filter_expr[i] {
                Some(f) => Some(f.evaluate(batch)?.into_array(n)?),
                None => None,
            };
            let filter: Option<&BooleanArray> = match &filter {
                Some(f) => match f.as_boolean_opt() {
                    Some(b) => Some(b),
                    None => return internal_err!("SymGroupExec: a FILTER that is not boolean"),
                },
                None => None,
            };
            acc.update_batch(&values, &indices, filter, total)?;
        }
        self.indices = indices;
        let held = self.accs.iter().map(|a| a.size()).sum::<usize>() + self.groups.bytes();
        self.reservation.try_resize(held)?;
        timer.done();
        if self.groups.finished >= self.spec.batch_rows {
            let out = self.emit(EmitTo::First(self.groups.finished))?;
            return Ok(Some(out));
        }
        Ok(None)
    }

    /// The groups `to` names, as a batch of the aggregate's columns.
    fn emit(&mut self, to: EmitTo) -> Result<RecordBatch> {
        let _timer = self.metrics.elapsed_compute().timer();
        let n = match to {
            EmitTo::All => self.groups.len(),
            EmitTo::First(n) => n,
        };
        let (keys, key_valid, syms, sym_valid) = self.groups.take(n);
        let key_nulls = (key_valid.iter().any(|v| !v)).then(|| NullBuffer::from(key_valid));
        let sym_nulls = (sym_valid.iter().any(|v| !v)).then(|| NullBuffer::from(sym_valid));
        let key_type = self.spec.schema.field(self.spec.key()).data_type().clone();
        let key_col = make_array(
            ArrayData::builder(key_type)
                .len(n)
                .add_buffer(Buffer::from_vec(keys))
                .nulls(key_nulls)
                .build()?,
        );
        let sym_col: ArrayRef = Arc::new(UInt32Array::new(syms.into(), sym_nulls));
        let mut cols: Vec<ArrayRef> = vec![sym_col.clone(); 2];
        cols[self.spec.key()] = key_col;
        cols[self.spec.sym] = sym_col;
        for acc in self.accs.iter_mut() {
            cols.push(acc.evaluate(to)?);
        }
        let out = RecordBatch::try_new(self.spec.schema.clone(), cols)?;
        self.metrics.record_output(out.num_rows());
        Ok(out)
    }
}
