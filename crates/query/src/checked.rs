//! Scalar functions that allocate are held to the query memory limit.
//!
//! DataFusion's memory pool accounts for what operators keep (sort
//! buffers, hash tables, aggregate state), but not for what a scalar
//! function builds: `select repeat('a', 2000000000)` allocated 2 GB per row
//! and ran past both the memory limit and the timeout (one call never
//! returns to the plan's deadline checks). So the functions whose output
//! can be much larger than their input are wrapped here: before the call
//! the wrapper computes how many bytes the call would build for the whole
//! batch, from the argument values, and refuses with a clear error when
//! that is over the limit; after the call it checks the real size too.
//!
//! - Amplifiers (output not bounded by the input): `repeat`, `lpad`,
//!   `rpad`, `replace`, `regexp_replace`, `array_repeat`, `array_resize`,
//!   `range`, `generate_series`.
//! - Combiners (output about the sum of the inputs, but nesting them
//!   doubles it per level): `concat`, `concat_ws`, `||`, `overlay`,
//!   `translate`, `make_array`, `array_concat`, `array_append`,
//!   `array_prepend`, `array_union`, `struct`, `named_struct`, `map`.
//!   A scalar argument counts once per row, since the result repeats it.
//!
//! Every other function's output is within a small factor of its input,
//! which is bounded by the checks here and the pool's accounting.
//!
//! The string `||` operator is planned as `tickdb_concat` (this module's
//! checked concatenation with the operator's NULL rule: NULL if either side
//! is NULL), and calls planned straight to a function's implementation
//! (the `[1, 2]` array syntax builds `make_array` that way) are switched to
//! the checked version by the analyzer rule `UseCheckedFunctions`.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ExprSchemable, LogicalPlan, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::BinaryOperator;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// How a wrapped function's output size is foreseen from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Estimate {
    /// About the sum of the arguments (scalars counted once per row),
    /// times a factor (`translate` may turn 1-byte characters into 4).
    Sum(usize),
    /// `repeat(s, n)`: len(s) × n per row.
    Repeat,
    /// `lpad/rpad(s, n [, fill])`: n characters of up to 4 bytes per row.
    Pad,
    /// `replace(s, from, to)`: s plus (len(to) − len(from)) per occurrence.
    Replace,
    /// `regexp_replace(s, re, repl [, flags])`: every position of s may
    /// match, and each group reference may copy all of s.
    RegexpReplace,
    /// `array_repeat(x, n)`: x × n per row.
    ArrayRepeat,
    /// `array_resize(a, n [, v])`: n elements of up to 16 bytes per row.
    ArrayResize,
    /// `range/generate_series(start, stop [, step])`: (stop − start) / step
    /// 8-byte elements per row.
    Series,
}

/// The wrapped functions and how each is foreseen.
const CHECKED: &[(&str, Estimate)] = &[
    ("repeat", Estimate::Repeat),
    ("lpad", Estimate::Pad),
    ("rpad", Estimate::Pad),
    ("replace", Estimate::Replace),
    ("regexp_replace", Estimate::RegexpReplace),
    ("array_repeat", Estimate::ArrayRepeat),
    ("array_resize", Estimate::ArrayResize),
    ("range", Estimate::Series),
    ("generate_series", Estimate::Series),
    ("concat", Estimate::Sum(1)),
    ("concat_ws", Estimate::Sum(1)),
    ("overlay", Estimate::Sum(1)),
    ("translate", Estimate::Sum(4)),
    ("make_array", Estimate::Sum(1)),
    ("array_concat", Estimate::Sum(1)),
    ("array_append", Estimate::Sum(1)),
    ("array_prepend", Estimate::Sum(1)),
    ("array_union", Estimate::Sum(1)),
    ("struct", Estimate::Sum(1)),
    ("named_struct", Estimate::Sum(1)),
    ("map", Estimate::Sum(1)),
];

/// Name of the checked `||`.
pub const CONCAT_OPERATOR_NAME: &str = "tickdb_concat";

/// Wraps the allocating functions of `ctx`, plans `||` on strings as the
/// checked concatenation, and switches directly planned calls to the
/// checked versions. `limit_bytes` is the query memory limit.
pub fn install(ctx: &SessionContext, limit_bytes: usize) {
    let state = ctx.state();
    let functions = state.scalar_functions();
    let mut wrapped: HashMap<String, Arc<ScalarUDF>> = HashMap::new();
    for (name, estimate) in CHECKED {
        let Some(inner) = functions.get(*name) else {
            continue;
        };
        let udf = Arc::new(ScalarUDF::new_from_impl(Checked {
            inner: inner.clone(),
            estimate: *estimate,
            limit_bytes,
        }));
        ctx.register_udf(udf.as_ref().clone());
        wrapped.insert(inner.name().to_string(), udf);
    }
    let concat = Arc::new(ScalarUDF::new_from_impl(ConcatOperator {
        signature: Signature::user_defined(Volatility::Immutable),
        limit_bytes,
    }));
    ctx.register_udf(concat.as_ref().clone());
    let rule = Arc::new(UseCheckedFunctions {
        wrapped: Arc::new(wrapped),
    });
    ctx.add_analyzer_rule(rule);
    // After DataFusion's own planners: they keep `||` on arrays.
    let planner = Arc::new(ConcatPlanner { udf: concat });
    let _ = datafusion::execution::FunctionRegistry::register_expr_planner(
        &mut *ctx.state_ref().write(),
        planner,
    );
}

fn too_big(what: &str, bytes: u128, limit: usize) -> DataFusionError {
    DataFusionError::ResourcesExhausted(format!(
        "{what} would build {bytes} bytes, over the query memory limit of {limit} bytes \
         (--query-memory-bytes)"
    ))
}

/// Memory an argument takes once repeated for every row.
fn arg_bytes(v: &ColumnarValue, rows: usize) -> u128 {
    match v {
        ColumnarValue::Array(a) => a.get_array_memory_size() as u128,
        ColumnarValue::Scalar(s) => s.size() as u128 * rows.max(1) as u128,
    }
}

/// Byte length of each row's string (or binary) value; NULL counts 0.
fn byte_lens(v: &ColumnarValue, rows: usize) -> Result<Vec<u64>> {
    let array: ArrayRef = match v {
        ColumnarValue::Scalar(s) => {
            let n = match s {
                ScalarValue::Utf8(Some(x))
                | ScalarValue::LargeUtf8(Some(x))
                | ScalarValue::Utf8View(Some(x)) => x.len(),
                ScalarValue::Binary(Some(x))
                | ScalarValue::LargeBinary(Some(x))
                | ScalarValue::BinaryView(Some(x)) => x.len(),
                other => other.size(),
            };
            return Ok(vec![n as u64; rows.max(1)]);
        }
        ColumnarValue::Array(a) => a.clone(),
    };
    let lens = |len: &mut dyn Iterator<Item = Option<usize>>| {
        len.map(|l| l.unwrap_or(0) as u64).collect::<Vec<u64>>()
    };
    Ok(match array.data_type() {
        DataType::Utf8 => lens(&mut array.as_string::<i32>().iter().map(|s| s.map(str::len))),
        DataType::LargeUtf8 => lens(&mut array.as_string::<i64>().iter().map(|s| s.map(str::len))),
        DataType::Utf8View => lens(&mut array.as_string_view().iter().map(|s| s.map(str::len))),
        DataType::Binary => lens(&mut array.as_binary::<i32>().iter().map(|s| s.map(<[u8]>::len))),
        DataType::LargeBinary => {
            lens(&mut array.as_binary::<i64>().iter().map(|s| s.map(<[u8]>::len)))
        }
        _ => {
            let s = cast(&array, &DataType::LargeUtf8)?;
            lens(&mut s.as_string::<i64>().iter().map(|s| s.map(str::len)))
        }
    })
}

/// Each row's integer value (NULL or negative counts 0).
fn counts(v: &ColumnarValue, rows: usize) -> Result<Vec<u64>> {
    match v {
        ColumnarValue::Scalar(s) => {
            let n = match s.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(Some(n)) => n.max(0) as u64,
                _ => 0,
            };
            Ok(vec![n; rows.max(1)])
        }
        ColumnarValue::Array(a) => {
            let a = cast(a, &DataType::Int64)?;
            Ok(a.as_primitive::<Int64Type>()
                .iter()
                .map(|n| n.unwrap_or(0).max(0) as u64)
                .collect())
        }
    }
}

/// Each row's string value, for counting occurrences.
fn strings(v: &ColumnarValue, rows: usize) -> Result<Vec<Option<String>>> {
    match v {
        ColumnarValue::Scalar(s) => {
            let text = match s.cast_to(&DataType::Utf8)? {
                ScalarValue::Utf8(x) => x,
                _ => None,
            };
            Ok(vec![text; rows.max(1)])
        }
        ColumnarValue::Array(a) => {
            let a = cast(a, &DataType::LargeUtf8)?;
            Ok(a.as_string::<i64>()
                .iter()
                .map(|s| s.map(str::to_string))
                .collect())
        }
    }
}

/// The most bytes a call could build for the whole batch.
fn foresee(estimate: Estimate, args: &[ColumnarValue], rows: usize) -> Result<u128> {
    let arg = |i: usize| args.get(i);
    Ok(match estimate {
        Estimate::Sum(factor) => {
            args.iter().map(|a| arg_bytes(a, rows)).sum::<u128>() * factor as u128
        }
        Estimate::Repeat => match (arg(0), arg(1)) {
            (Some(s), Some(n)) => byte_lens(s, rows)?
                .iter()
                .zip(counts(n, rows)?)
                .map(|(l, n)| *l as u128 * n as u128)
                .sum(),
            _ => 0,
        },
        Estimate::Pad => match (arg(0), arg(1)) {
            (Some(s), Some(n)) => {
                let base: u128 = byte_lens(s, rows)?.iter().map(|l| *l as u128).sum();
                base + counts(n, rows)?
                    .iter()
                    .map(|n| *n as u128 * 4)
                    .sum::<u128>()
            }
            _ => 0,
        },
        Estimate::Replace => match (arg(0), arg(1), arg(2)) {
            (Some(s), Some(from), Some(to)) => {
                let texts = strings(s, rows)?;
                let froms = strings(from, rows)?;
                let tos = byte_lens(to, rows)?;
                let mut total: u128 = 0;
                for (i, text) in texts.iter().enumerate() {
                    let Some(text) = text else { continue };
                    let from = froms.get(i).cloned().flatten().unwrap_or_default();
                    let to = tos.get(i).copied().unwrap_or(0) as u128;
                    let hits = if from.is_empty() {
                        // PostgreSQL and DataFusion leave the text as is.
                        0
                    } else {
                        text.matches(from.as_str()).count() as u128
                    };
                    total += text.len() as u128 + hits * to;
                }
                total
            }
            _ => 0,
        },
        Estimate::RegexpReplace => match (arg(0), arg(2)) {
            (Some(s), Some(repl)) => {
                let lens = byte_lens(s, rows)?;
                let repls = strings(repl, rows)?;
                let mut total: u128 = 0;
                for (i, l) in lens.iter().enumerate() {
                    let l = *l as u128;
                    let repl = repls.get(i).cloned().flatten().unwrap_or_default();
                    let refs = repl.matches('\\').count() + repl.matches('$').count();
                    total += l + (l + 1) * (repl.len() as u128 + refs as u128 * l);
                }
                total
            }
            _ => 0,
        },
        Estimate::ArrayRepeat => match (arg(0), arg(1)) {
            (Some(x), Some(n)) => {
                let per = (arg_bytes(x, rows) / rows.max(1) as u128).max(1);
                counts(n, rows)?.iter().map(|n| *n as u128 * per).sum()
            }
            _ => 0,
        },
        Estimate::ArrayResize => match arg(1) {
            Some(n) => counts(n, rows)?.iter().map(|n| *n as u128 * 16).sum(),
            None => 0,
        },
        Estimate::Series => series_elements(args, rows)? * 8,
    })
}

/// Elements `range`/`generate_series` would build: integers exactly,
/// dates and timestamps from the step's length (months as 28 days, so
/// never fewer than the real count).
fn series_elements(args: &[ColumnarValue], rows: usize) -> Result<u128> {
    let scalar = |i: usize| match args.get(i) {
        Some(ColumnarValue::Scalar(s)) => Some(s.clone()),
        _ => None,
    };
    let ns = |s: &ScalarValue| -> Option<i128> {
        match s {
            ScalarValue::Int64(Some(v)) => Some(*v as i128),
            ScalarValue::Date32(Some(d)) => Some(*d as i128 * 86_400_000_000_000),
            ScalarValue::TimestampNanosecond(Some(v), _) => Some(*v as i128),
            ScalarValue::TimestampMicrosecond(Some(v), _) => Some(*v as i128 * 1_000),
            ScalarValue::TimestampMillisecond(Some(v), _) => Some(*v as i128 * 1_000_000),
            ScalarValue::TimestampSecond(Some(v), _) => Some(*v as i128 * 1_000_000_000),
            ScalarValue::IntervalMonthDayNano(Some(i)) => Some(
                i.months as i128 * 28 * 86_400_000_000_000
                    + i.days as i128 * 86_400_000_000_000
                    + i.nanoseconds as i128,
            ),
            ScalarValue::IntervalDayTime(Some(i)) => {
                Some(i.days as i128 * 86_400_000_000_000 + i.milliseconds as i128 * 1_000_000)
            }
            ScalarValue::IntervalYearMonth(Some(m)) => Some(*m as i128 * 28 * 86_400_000_000_000),
            other => other.cast_to(&DataType::Int64).ok().and_then(|v| match v {
                ScalarValue::Int64(Some(v)) => Some(v as i128),
                _ => None,
            }),
        }
    };
    // Array arguments (a series per row of a table) are foreseen per row.
    if args.iter().any(|a| matches!(a, ColumnarValue::Array(_))) {
        let n = args
            .iter()
            .map(|a| match a {
                ColumnarValue::Array(a) => a.len(),
                _ => 1,
            })
            .max()
            .unwrap_or(rows);
        let mut total: u128 = 0;
        for row in 0..n {
            let at = |i: usize| match args.get(i) {
                Some(ColumnarValue::Array(a)) => ScalarValue::try_from_array(a, row).ok(),
                Some(ColumnarValue::Scalar(s)) => Some(s.clone()),
                None => None,
            };
            total += one_series(at(0), at(1), at(2), &ns);
        }
        return Ok(total);
    }
    Ok(one_series(scalar(0), scalar(1), scalar(2), &ns) * rows.max(1) as u128)
}

fn one_series(
    a: Option<ScalarValue>,
    b: Option<ScalarValue>,
    c: Option<ScalarValue>,
    ns: &dyn Fn(&ScalarValue) -> Option<i128>,
) -> u128 {
    // range(n) runs 0..n; range(a, b) steps by 1.
    let (start, stop, step) = match (a, b, c) {
        (Some(stop), None, None) => (Some(0), ns(&stop), Some(1)),
        (Some(start), Some(stop), None) => (ns(&start), ns(&stop), Some(1)),
        (Some(start), Some(stop), Some(step)) => (ns(&start), ns(&stop), ns(&step)),
        _ => (None, None, None),
    };
    match (start, stop, step) {
        (Some(start), Some(stop), Some(step)) if step != 0 => {
            let span = (stop - start).unsigned_abs();
            span / step.unsigned_abs() + 1
        }
        _ => 0,
    }
}

/// An allocating function held to the limit.
#[derive(Debug)]
struct Checked {
    inner: Arc<ScalarUDF>,
    estimate: Estimate,
    limit_bytes: usize,
}

impl PartialEq for Checked {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
            && self.estimate == other.estimate
            && self.limit_bytes == other.limit_bytes
    }
}

impl Eq for Checked {}

impl Hash for Checked {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.estimate.hash(state);
        self.limit_bytes.hash(state);
    }
}

impl Checked {
    fn check_output(&self, out: &ColumnarValue) -> Result<()> {
        let bytes = match out {
            ColumnarValue::Array(a) => a.get_array_memory_size(),
            ColumnarValue::Scalar(s) => s.size(),
        };
        if bytes > self.limit_bytes {
            return Err(too_big(
                &format!("{}()", self.inner.name()),
                bytes as u128,
                self.limit_bytes,
            ));
        }
        Ok(())
    }
}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_strict(&self) -> bool {
        self.inner.inner().is_strict()
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let inner = self.inner.inner().with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(Checked {
            inner: Arc::new(inner),
            estimate: self.estimate,
            limit_bytes: self.limit_bytes,
        }))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let foreseen = foresee(self.estimate, &args.args, args.number_rows)?;
        if foreseen > self.limit_bytes as u128 {
            return Err(too_big(
                &format!("{}()", self.inner.name()),
                foreseen,
                self.limit_bytes,
            ));
        }
        let out = self.inner.invoke_with_args(args)?;
        self.check_output(&out)?;
        Ok(out)
    }

    /// The inner function's simplification, with any call it builds to an
    /// allocating function kept checked.
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        match self.inner.simplify(args, info)? {
            ExprSimplifyResult::Simplified(e) => {
                let e = e.transform_up(|e| self.rewrap(e))?.data;
                Ok(ExprSimplifyResult::Simplified(e))
            }
            original => Ok(original),
        }
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

impl Checked {
    /// A call to the bare version of this function, as a simplification
    /// may build, switched back to this checked one.
    fn rewrap(&self, e: Expr) -> Result<Transformed<Expr>> {
        match e {
            Expr::ScalarFunction(f)
                if f.func.name() == self.inner.name() && !f.func.inner().is::<Checked>() =>
            {
                let func = Arc::new(ScalarUDF::new_from_impl(Checked {
                    inner: f.func.clone(),
                    estimate: self.estimate,
                    limit_bytes: self.limit_bytes,
                }));
                Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                    func,
                    args: f.args,
                })))
            }
            e => Ok(Transformed::no(e)),
        }
    }
}

/// The `||` operator on strings and binaries: NULL if either side is NULL,
/// the two values joined otherwise, refused over the limit.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ConcatOperator {
    signature: Signature,
    limit_bytes: usize,
}

fn is_text(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

fn is_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

impl ScalarUDFImpl for ConcatOperator {
    fn name(&self) -> &str {
        CONCAT_OPERATOR_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        // Result columns read `a || b`, as before the operator was checked.
        let names = args
            .iter()
            .map(|a| a.schema_name().to_string())
            .collect::<Vec<_>>();
        Ok(names.join(" || "))
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Utf8))
    }

    /// Both sides to one type, as the operator coerces: the widest string
    /// type present (a non-string side becomes text), or binary when both
    /// are binary.
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let target = if arg_types.iter().all(is_bytes) {
            if arg_types.contains(&DataType::LargeBinary) {
                DataType::LargeBinary
            } else {
                DataType::Binary
            }
        } else if arg_types.contains(&DataType::LargeUtf8) {
            DataType::LargeUtf8
        } else if arg_types.contains(&DataType::Utf8View) {
            DataType::Utf8View
        } else {
            DataType::Utf8
        };
        Ok(vec![target; arg_types.len()])
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let [l, r] = <[ColumnarValue; 2]>::try_from(args.args)
            .map_err(|_| DataFusionError::Internal("|| takes two operands".into()))?;
        let foreseen = arg_bytes(&l, rows) + arg_bytes(&r, rows);
        if foreseen > self.limit_bytes as u128 {
            return Err(too_big("||", foreseen, self.limit_bytes));
        }
        let out_type = args.return_field.data_type().clone();
        if let (ColumnarValue::Scalar(a), ColumnarValue::Scalar(b)) = (&l, &r) {
            return scalar_concat(a, b, &out_type).map(ColumnarValue::Scalar);
        }
        // The arrow kernel joins offset-based arrays; views are joined as
        // such and turned back.
        let plain = |t: &DataType| match t {
            DataType::Utf8View => DataType::Utf8,
            DataType::BinaryView => DataType::Binary,
            other => other.clone(),
        };
        let work = plain(&out_type);
        let la = cast(&l.into_array(rows)?, &work)?;
        let ra = cast(&r.into_array(rows)?, &work)?;
        let joined = datafusion::arrow::compute::kernels::concat_elements::concat_elements_dyn(
            la.as_ref(),
            ra.as_ref(),
        )?;
        let out = if work != out_type {
            cast(&joined, &out_type)?
        } else {
            joined
        };
        Ok(ColumnarValue::Array(out))
    }
}

fn scalar_concat(a: &ScalarValue, b: &ScalarValue, out: &DataType) -> Result<ScalarValue> {
    if a.is_null() || b.is_null() {
        return ScalarValue::try_from(out);
    }
    if is_bytes(out) {
        let bytes = |s: &ScalarValue| -> Result<Vec<u8>> {
            match s.cast_to(&DataType::Binary)? {
                ScalarValue::Binary(Some(v)) => Ok(v),
                _ => Ok(Vec::new()),
            }
        };
        let mut v = bytes(a)?;
        v.extend(bytes(b)?);
        return ScalarValue::Binary(Some(v)).cast_to(out);
    }
    let text = |s: &ScalarValue| -> Result<String> {
        match s.cast_to(&DataType::Utf8)? {
            ScalarValue::Utf8(Some(v)) => Ok(v),
            _ => Ok(String::new()),
        }
    };
    let mut s = text(a)?;
    s.push_str(&text(b)?);
    ScalarValue::Utf8(Some(s)).cast_to(out)
}

/// Plans `a || b` on strings and binaries as the checked concatenation.
/// It runs after DataFusion's own planners, which turn `||` on arrays into
/// `array_concat` and friends.
#[derive(Debug)]
struct ConcatPlanner {
    udf: Arc<ScalarUDF>,
}

impl ExprPlanner for ConcatPlanner {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        if expr.op != BinaryOperator::StringConcat {
            return Ok(PlannerResult::Original(expr));
        }
        let (lt, rt) = match (expr.left.get_type(schema), expr.right.get_type(schema)) {
            (Ok(l), Ok(r)) => (l, r),
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let texty = |t: &DataType| is_text(t) || is_bytes(t);
        let scalar_ok = |t: &DataType| {
            !matches!(
                t,
                DataType::List(_)
                    | DataType::LargeList(_)
                    | DataType::FixedSizeList(_, _)
                    | DataType::Struct(_)
                    | DataType::Map(_, _)
            )
        };
        if (texty(&lt) || texty(&rt)) && scalar_ok(&lt) && scalar_ok(&rt) {
            return Ok(PlannerResult::Planned(Expr::ScalarFunction(
                ScalarFunction::new_udf(self.udf.clone(), vec![expr.left, expr.right]),
            )));
        }
        Ok(PlannerResult::Original(expr))
    }
}

/// Switches calls built straight from a function's implementation (not
/// looked up by name) to the checked version.
#[derive(Debug)]
struct UseCheckedFunctions {
    wrapped: Arc<HashMap<String, Arc<ScalarUDF>>>,
}

impl AnalyzerRule for UseCheckedFunctions {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let swap = |e: Expr| -> Result<Transformed<Expr>> {
            match e {
                Expr::ScalarFunction(f) if !f.func.inner().is::<Checked>() => {
                    match self.wrapped.get(f.func.name()) {
                        Some(checked) => {
                            Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                                func: checked.clone(),
                                args: f.args,
                            })))
                        }
                        None => Ok(Transformed::no(Expr::ScalarFunction(f))),
                    }
                }
                e => Ok(Transformed::no(e)),
            }
        };
        plan.transform_up_with_subqueries(|node| node.map_expressions(|e| e.transform_up(swap)))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "tickdb_use_checked_functions"
    }
}
