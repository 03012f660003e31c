//! Tick SQL functions registered in every session:
//!
//! - `vwap(price, size)`: sum(price * size) / sum(size), rows with a null
//!   in either argument skipped; null when no row (or zero total size).
//! - `first(x)` / `last(x)`: aliases of `first_value` / `last_value`; the
//!   statement rewrite in `asof.rs` adds `ORDER BY <time column>` when the
//!   query reads one store table, so they follow time (= arrival) order.
//! - `max(x)` / `min(x)`: DataFusion's, but NaN is the greatest float
//!   in every path (`minmax`).
//! - `time_bucket(width, ts)` / `xbar(width, x)`: the start of the bucket
//!   of `width` holding `x`, buckets aligned on the Unix epoch (kdb+
//!   `xbar`). `width` is an interval or integer nanoseconds for timestamps,
//!   and a number for numeric `x` (`xbar(5, size)`).

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, IntervalUnit, TimeUnit, TimestampNanosecondType,
};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    create_udaf, Accumulator, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use std::sync::Arc;

/// Registers the tick functions in a session.
pub fn register(ctx: &SessionContext) {
    ctx.register_udaf(vwap_udaf());
    // max/min with NaN the greatest float (DataFusion 55's grouped float
    // max/min get NaN wrong; see `minmax`).
    crate::minmax::register(ctx);
    let state = ctx.state();
    let has = |name: &str| state.aggregate_functions().contains_key(name);
    if !has("first") {
        let f = datafusion::functions_aggregate::first_last::first_value_udaf();
        ctx.register_udaf(f.as_ref().clone().with_aliases(["first"]));
    }
    if !has("last") {
        let f = datafusion::functions_aggregate::first_last::last_value_udaf();
        ctx.register_udaf(f.as_ref().clone().with_aliases(["last"]));
    }
    ctx.register_udf(ScalarUDF::from(Bucket::new("time_bucket")));
    ctx.register_udf(ScalarUDF::from(Bucket::new("xbar")));
}

/// `vwap(price, size)`.
pub fn vwap_udaf() -> datafusion::logical_expr::AggregateUDF {
    create_udaf(
        "vwap",
        vec![DataType::Float64, DataType::Float64],
        Arc::new(DataType::Float64),
        Volatility::Immutable,
        Arc::new(|_| Ok(Box::new(Vwap::default()))),
        Arc::new(vec![DataType::Float64, DataType::Float64]),
    )
}

#[derive(Debug, Default)]
struct Vwap {
    notional: f64,
    size: f64,
}

impl Vwap {
    fn add(&mut self, a: &Float64Array, b: &Float64Array, product: bool) {
        if a.null_count() == 0 && b.null_count() == 0 {
            for (x, y) in a.values().iter().zip(b.values().iter()) {
                self.notional += if product { x * y } else { *x };
                self.size += y;
            }
            return;
        }
        for i in 0..a.len() {
            if a.is_valid(i) && b.is_valid(i) {
                let (x, y) = (a.value(i), b.value(i));
                self.notional += if product { x * y } else { x };
                self.size += y;
            }
        }
    }
}

impl Accumulator for Vwap {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let p = values[0].as_primitive::<Float64Type>();
        let s = values[1].as_primitive::<Float64Type>();
        self.add(p, s, true);
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let n = states[0].as_primitive::<Float64Type>();
        let s = states[1].as_primitive::<Float64Type>();
        self.add(n, s, false);
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Float64(Some(self.notional)),
            ScalarValue::Float64(Some(self.size)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(if self.size == 0.0 {
            None
        } else {
            Some(self.notional / self.size)
        }))
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// `time_bucket` and `xbar`: one implementation under two names.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bucket {
    name: &'static str,
    signature: Signature,
}

impl Bucket {
    fn new(name: &'static str) -> Bucket {
        Bucket {
            name,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// A constant bucket width in nanoseconds.
fn width_nanos(name: &str, w: &ScalarValue) -> Result<i64> {
    let ns = match w {
        ScalarValue::IntervalMonthDayNano(Some(v)) => {
            if v.months != 0 {
                return exec_err!("{name}: widths in months are not supported; use date_bin");
            }
            (v.days as i64)
                .checked_mul(NANOS_PER_DAY)
                .and_then(|d| d.checked_add(v.nanoseconds))
        }
        ScalarValue::Int64(Some(v)) => Some(*v),
        ScalarValue::Float64(Some(v)) if v.fract() == 0.0 => Some(*v as i64),
        _ => None,
    };
    match ns {
        Some(ns) if ns > 0 => Ok(ns),
        _ => exec_err!("{name}: the bucket width must be a positive constant, got {w}"),
    }
}

impl ScalarUDFImpl for Bucket {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 2 {
            return plan_err!(
                "{}(width, value) takes 2 arguments, got {}",
                self.name,
                arg_types.len()
            );
        }
        let (w, x) = (&arg_types[0], &arg_types[1]);
        let int_like = |t: &DataType| t.is_integer() || t.is_null();
        match x {
            DataType::Timestamp(_, tz) => {
                let w = match w {
                    DataType::Interval(_)
                    | DataType::Utf8
                    | DataType::Utf8View
                    | DataType::LargeUtf8 => DataType::Interval(IntervalUnit::MonthDayNano),
                    t if int_like(t) => DataType::Int64,
                    t => {
                        return plan_err!(
                            "{}: width must be an interval or integer nanoseconds, got {t}",
                            self.name
                        )
                    }
                };
                Ok(vec![
                    w,
                    DataType::Timestamp(TimeUnit::Nanosecond, tz.clone()),
                ])
            }
            t if t.is_integer() && int_like(w) => Ok(vec![DataType::Int64, DataType::Int64]),
            t if t.is_numeric() && w.is_numeric() => Ok(vec![DataType::Float64, DataType::Float64]),
            t => plan_err!("{}: cannot bucket values of type {t}", self.name),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[1].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let width = match &args.args[0] {
            ColumnarValue::Scalar(s) => s.clone(),
            ColumnarValue::Array(_) => {
                return exec_err!("{}: the bucket width must be a constant", self.name)
            }
        };
        let (x, scalar) = match &args.args[1] {
            ColumnarValue::Array(a) => (a.clone(), false),
            ColumnarValue::Scalar(s) => (s.to_array()?, true),
        };
        let out: ArrayRef = match x.data_type() {
            DataType::Timestamp(_, tz) => {
                let w = width_nanos(self.name, &width)?;
                let a = x.as_primitive::<TimestampNanosecondType>();
                let r: TimestampNanosecondArray = a.unary(|t| t.div_euclid(w) * w);
                Arc::new(r.with_timezone_opt(tz.clone()))
            }
            DataType::Int64 => {
                let w = width_nanos(self.name, &width)?;
                let r: Int64Array = x.as_primitive::<Int64Type>().unary(|v| v.div_euclid(w) * w);
                Arc::new(r)
            }
            DataType::Float64 => {
                let w = match width {
                    ScalarValue::Float64(Some(w)) if w > 0.0 => w,
                    w => {
                        return exec_err!(
                            "{}: the bucket width must be a positive constant, got {w}",
                            self.name
                        )
                    }
                };
                let r: Float64Array = x
                    .as_primitive::<Float64Type>()
                    .unary(|v| (v / w).floor() * w);
                Arc::new(r)
            }
            t => return exec_err!("{}: cannot bucket values of type {t}", self.name),
        };
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        use datafusion::arrow::datatypes::IntervalMonthDayNano;
        let s = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(0, 1, 5)));
        assert_eq!(width_nanos("x", &s).unwrap(), NANOS_PER_DAY + 5);
        assert!(width_nanos("x", &ScalarValue::Int64(Some(0))).is_err());
        let m = ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(1, 0, 0)));
        assert!(width_nanos("x", &m).is_err());
    }
}
