//! `max` and `min` with PostgreSQL's (and DuckDB's) float semantics: NaN
//! is greater than every number, so `max` of values holding a NaN is NaN
//! and `min` skips NaN unless every value is NaN. Nulls are skipped as
//! always. A NaN of either sign counts as NaN, and results hold the one
//! canonical NaN; `-0.0` orders below `+0.0` (`f64::total_cmp`).
//!
//! DataFusion 55.2's grouped float accumulators compare with
//! `partial_cmp` and answer the max/min of the rows after a group's last
//! NaN (apache/datafusion#24432, fixed upstream by #24435). These UDAFs
//! replace the built-in `max`/`min` in every session: for Float32/Float64
//! they use the accumulators below; every other type, and everything
//! else about the function (names, signature, coercion, ordering and
//! optimizer hints), goes to DataFusion's own `max`/`min`.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute;
use datafusion::arrow::datatypes::{
    ArrowNumericType, ArrowPrimitiveType, DataType, FieldRef, Float32Type, Float64Type,
};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{
    AggregateFunction, AggregateFunctionParams, WindowFunctionParams,
};
use datafusion::logical_expr::function::{
    AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs,
};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, Expr, GroupsAccumulator,
    Operator, ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion::physical_expr::NullState;
use datafusion::prelude::SessionContext;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Registers `max` and `min` in a session, over DataFusion's built-ins.
pub fn register(ctx: &SessionContext) {
    ctx.register_udaf(max_udaf());
    ctx.register_udaf(min_udaf());
}

/// `max` with NaN the greatest float.
pub fn max_udaf() -> AggregateUDF {
    AggregateUDF::new_from_impl(NanMinMax::new(Kind::Max))
}

/// `min` with NaN the greatest float (skipped unless every value is NaN).
pub fn min_udaf() -> AggregateUDF {
    AggregateUDF::new_from_impl(NanMinMax::new(Kind::Min))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Max,
    Min,
}

/// The float native types, with the order these functions use.
trait NanFloat: Copy + Send + Sync + std::fmt::Debug + 'static {
    const NAN: Self;
    const NEG_INFINITY: Self;
    fn is_nan(self) -> bool;
    fn total_cmp(&self, other: &Self) -> Ordering;
}

macro_rules! nan_float {
    ($t:ty) => {
        impl NanFloat for $t {
            const NAN: Self = <$t>::NAN;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn total_cmp(&self, other: &Self) -> Ordering {
                <$t>::total_cmp(self, other)
            }
        }
    };
}
nan_float!(f32);
nan_float!(f64);

/// Any NaN as the canonical (positive, quiet) NaN.
#[inline(always)]
fn canon<N: NanFloat>(v: N) -> N {
    if v.is_nan() {
        N::NAN
    } else {
        v
    }
}

/// Folds `new` into `cur` (`cur` holds no NaN but the canonical one).
#[inline(always)]
fn fold_max<N: NanFloat>(cur: &mut N, new: N) {
    let new = canon(new);
    if new.total_cmp(cur) == Ordering::Greater {
        *cur = new;
    }
}

/// Folds `new` into `cur`; `cur` starts as NaN, which every number beats.
#[inline(always)]
fn fold_min<N: NanFloat>(cur: &mut N, new: N) {
    // `cur` is a number or the canonical NaN, above every number in
    // `total_cmp`; a NaN `new` never replaces it.
    if !new.is_nan() && new.total_cmp(cur) == Ordering::Less {
        *cur = new;
    }
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

/// `max` or `min`: DataFusion's, but for float inputs.
#[derive(Debug)]
struct NanMinMax {
    kind: Kind,
    inner: Arc<AggregateUDF>,
}

impl NanMinMax {
    fn new(kind: Kind) -> Self {
        let inner = match kind {
            Kind::Max => datafusion::functions_aggregate::min_max::max_udaf(),
            Kind::Min => datafusion::functions_aggregate::min_max::min_udaf(),
        };
        NanMinMax { kind, inner }
    }

    fn imp(&self) -> &dyn AggregateUDFImpl {
        self.inner.inner().as_ref()
    }
}

impl PartialEq for NanMinMax {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
    }
}

impl Eq for NanMinMax {}

impl Hash for NanMinMax {
    fn hash<H: Hasher>(&self, state: &mut H) {
        "tickdb::minmax".hash(state);
        self.kind.hash(state);
    }
}

impl AggregateUDFImpl for NanMinMax {
    fn name(&self) -> &str {
        self.imp().name()
    }

    fn aliases(&self) -> &[String] {
        self.imp().aliases()
    }

    fn schema_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().schema_name(params)
    }

    fn human_display(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().human_display(params)
    }

    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.imp().window_function_schema_name(params)
    }

    fn display_name(&self, params: &AggregateFunctionParams) -> Result<String> {
        self.imp().display_name(params)
    }

    fn window_function_display_name(&self, params: &WindowFunctionParams) -> Result<String> {
        self.imp().window_function_display_name(params)
    }

    fn signature(&self) -> &Signature {
        self.imp().signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.imp().return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.imp().return_field(arg_fields)
    }

    fn is_nullable(&self) -> bool {
        self.imp().is_nullable()
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match args.return_field.data_type() {
            DataType::Float64 => Ok(Box::new(FloatAcc::<Float64Type>::new(self.kind))),
            DataType::Float32 => Ok(Box::new(FloatAcc::<Float32Type>::new(self.kind))),
            _ => self.imp().accumulator(args),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.imp().state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        is_float(args.return_field.data_type()) || self.imp().groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let t = args.return_field.data_type().clone();
        match t {
            DataType::Float64 => Ok(Box::new(FloatGroups::<Float64Type>::new(self.kind, t))),
            DataType::Float32 => Ok(Box::new(FloatGroups::<Float32Type>::new(self.kind, t))),
            _ => self.imp().create_groups_accumulator(args),
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let t = args.return_field.data_type().clone();
        let inner = self.imp().create_sliding_accumulator(args)?;
        // DataFusion's sliding max/min order ScalarValues by `total_cmp`:
        // with NaNs made positive, that is the order here.
        Ok(match t {
            DataType::Float64 => Box::new(CanonNan::<Float64Type>::new(inner)),
            DataType::Float32 => Box::new(CanonNan::<Float32Type>::new(inner)),
            _ => inner,
        })
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.imp().order_sensitivity()
    }

    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.imp().simplify()
    }

    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> Result<Option<Expr>> {
        self.imp()
            .simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        // `Identical`: the reverse of this function is itself.
        self.imp().reverse_expr()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.imp().coerce_types(arg_types)
    }

    fn is_descending(&self) -> Option<bool> {
        self.imp().is_descending()
    }

    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        // Float statistics cannot be trusted to say whether a NaN is there:
        // Parquet's leave NaN out of min/max. Floats are aggregated.
        if is_float(args.return_type) {
            return None;
        }
        self.imp().value_from_stats(args)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.imp().default_value(data_type)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.imp().supports_null_handling_clause()
    }

    fn supports_within_group_clause(&self) -> bool {
        self.imp().supports_within_group_clause()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.imp().documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.imp().set_monotonicity(data_type)
    }
}

/// The max or min of a float array's non-null values, NaN canonical.
fn array_min_max<T>(kind: Kind, a: &PrimitiveArray<T>) -> Option<T::Native>
where
    T: ArrowNumericType,
    T::Native: NanFloat,
{
    // Arrow's kernels order by `total_cmp`: positive NaN above every
    // number, negative NaN below. The common case (no NaN) is one pass
    // for min and two for max.
    match kind {
        Kind::Max => {
            let hi = compute::max(a)?;
            if hi.is_nan() || compute::min(a).is_some_and(|lo| lo.is_nan()) {
                Some(T::Native::NAN)
            } else {
                Some(hi)
            }
        }
        Kind::Min => {
            let lo = compute::min(a)?;
            if !lo.is_nan() {
                return Some(lo);
            }
            // A NaN is there: the least number, NaN when none.
            let mut cur = T::Native::NAN;
            for v in a.iter().flatten() {
                fold_min(&mut cur, v);
            }
            Some(cur)
        }
    }
}

/// Ungrouped (and window, growing frame) accumulator for floats.
#[derive(Debug)]
struct FloatAcc<T: ArrowPrimitiveType> {
    kind: Kind,
    cur: Option<T::Native>,
}

impl<T: ArrowPrimitiveType> FloatAcc<T> {
    fn new(kind: Kind) -> Self {
        FloatAcc { kind, cur: None }
    }
}

impl<T> Accumulator for FloatAcc<T>
where
    T: ArrowNumericType + Send + Sync + std::fmt::Debug,
    T::Native: NanFloat,
{
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = values[0].as_primitive::<T>();
        if let Some(v) = array_min_max(self.kind, a) {
            self.cur = Some(match self.cur {
                None => v,
                Some(mut c) => {
                    match self.kind {
                        Kind::Max => fold_max(&mut c, v),
                        Kind::Min => fold_min(&mut c, v),
                    }
                    c
                }
            });
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        ScalarValue::new_primitive::<T>(self.cur, &T::DATA_TYPE)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// Grouped accumulator for floats: DataFusion's primitive one with the
/// NaN-aware comparison.
#[derive(Debug)]
struct FloatGroups<T: ArrowPrimitiveType> {
    kind: Kind,
    data_type: DataType,
    values: Vec<T::Native>,
    null_state: NullState,
}

impl<T> FloatGroups<T>
where
    T: ArrowPrimitiveType,
    T::Native: NanFloat,
{
    fn new(kind: Kind, data_type: DataType) -> Self {
        FloatGroups {
            kind,
            data_type,
            values: Vec::new(),
            null_state: NullState::new(),
        }
    }

    /// A new group's value: below every value for max, above every
    /// number for min (a min of NaNs only is then NaN).
    fn start(&self) -> T::Native {
        match self.kind {
            Kind::Max => T::Native::NEG_INFINITY,
            Kind::Min => T::Native::NAN,
        }
    }
}

impl<T> GroupsAccumulator for FloatGroups<T>
where
    T: ArrowPrimitiveType + Send + Sync,
    T::Native: NanFloat,
{
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = values[0].as_primitive::<T>();
        let start = self.start();
        self.values.resize(total_num_groups, start);
        let acc = &mut self.values;
        match self.kind {
            Kind::Max => self.null_state.accumulate(
                group_indices,
                values,
                opt_filter,
                total_num_groups,
                |g, v| fold_max(&mut acc[g], v),
            ),
            Kind::Min => self.null_state.accumulate(
                group_indices,
                values,
                opt_filter,
                total_num_groups,
                |g, v| fold_min(&mut acc[g], v),
            ),
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let values = emit_to.take_needed(&mut self.values);
        let nulls = self.null_state.build(emit_to);
        Ok(Arc::new(
            PrimitiveArray::<T>::new(values.into(), nulls).with_data_type(self.data_type.clone()),
        ))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        // A state is a value: merging is updating.
        self.update_batch(values, group_indices, None, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        // One row's state is its value (NaN canonical); filtered-out rows
        // are null.
        let a = values[0].as_primitive::<T>();
        let mut nulls = a.nulls().cloned();
        if let Some(f) = opt_filter {
            let keep = match f.nulls() {
                Some(n) => n.inner() & f.values(),
                None => f.values().clone(),
            };
            nulls = NullBuffer::union(nulls.as_ref(), Some(&NullBuffer::from(keep)));
        }
        let canon_values: Vec<T::Native> = a.values().iter().map(|v| canon(*v)).collect();
        Ok(vec![Arc::new(
            PrimitiveArray::<T>::new(canon_values.into(), nulls)
                .with_data_type(self.data_type.clone()),
        )])
    }

    fn size(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<T::Native>() + self.null_state.size()
    }
}

/// DataFusion's sliding (window frame) max/min, fed canonical NaNs.
#[derive(Debug)]
struct CanonNan<T> {
    inner: Box<dyn Accumulator>,
    _t: std::marker::PhantomData<T>,
}

impl<T> CanonNan<T> {
    fn new(inner: Box<dyn Accumulator>) -> Self {
        CanonNan {
            inner,
            _t: std::marker::PhantomData,
        }
    }
}

fn canon_array<T>(a: &ArrayRef) -> ArrayRef
where
    T: ArrowPrimitiveType,
    T::Native: NanFloat,
{
    let p = a.as_primitive::<T>();
    if !p.values().iter().any(|v| v.is_nan()) {
        return a.clone();
    }
    Arc::new(p.unary::<_, T>(canon))
}

impl<T> Accumulator for CanonNan<T>
where
    T: ArrowPrimitiveType + Send + Sync + std::fmt::Debug,
    T::Native: NanFloat,
{
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(&[canon_array::<T>(&values[0])])
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        // Retraction drops the oldest values by count: values unchanged.
        self.inner.retract_batch(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(&[canon_array::<T>(&states[0])])
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.inner.evaluate()
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }

    fn size(&self) -> usize {
        self.inner.size() + std::mem::size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Float64Array;

    fn fold(kind: Kind, vals: &[f64]) -> f64 {
        let mut cur = match kind {
            Kind::Max => f64::NEG_INFINITY,
            Kind::Min => f64::NAN,
        };
        for v in vals {
            match kind {
                Kind::Max => fold_max(&mut cur, *v),
                Kind::Min => fold_min(&mut cur, *v),
            }
        }
        cur
    }

    fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits()
    }

    #[test]
    fn fold_and_kernel_agree() {
        let neg_nan = -f64::NAN;
        let cases: Vec<Vec<f64>> = vec![
            vec![1.0, f64::NAN, 2.0],
            vec![neg_nan, 1.0, -3.0],
            vec![f64::NAN, neg_nan],
            vec![-0.0, 0.0],
            vec![0.0, -0.0],
            vec![f64::NEG_INFINITY],
            vec![f64::INFINITY, f64::NAN, f64::NEG_INFINITY],
            vec![5.0],
        ];
        for c in cases {
            let a = Float64Array::from(c.clone());
            for kind in [Kind::Max, Kind::Min] {
                let k = array_min_max::<Float64Type>(kind, &a).unwrap();
                let f = fold(kind, &c);
                assert!(same(k, f), "{kind:?} {c:?}: kernel {k} fold {f}");
                if k.is_nan() {
                    assert!(same(k, f64::NAN), "canonical NaN");
                }
            }
        }
    }
}
