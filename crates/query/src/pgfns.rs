//! PostgreSQL's session functions that tools and operators reach for:
//!
//! - `pg_sleep(seconds)`: waits, then answers NULL, as PostgreSQL's does
//!   (its result is `void` there; a NULL text here). It stands in for a
//!   slow query: the KX socket sharding whitepaper's listeners sleep to
//!   model one. The sleep holds a query slot but not a query thread's
//!   other work (other queries on that thread move elsewhere). It is not
//!   interrupted by the query timeout or a cancel, so it is capped at
//!   `PG_SLEEP_S_MAX`.
//! - `pg_backend_pid()`: the answering process's id. Every member of a
//!   query group (`rp,PORT`) is its own process, so this tells a client
//!   which member answered. (It is not the key of a PostgreSQL cancel
//!   request.)

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use std::time::Duration;

/// The longest sleep one `pg_sleep` call takes, in seconds.
pub const PG_SLEEP_S_MAX: f64 = 300.0;

pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::from(PgSleep::new()));
    ctx.register_udf(ScalarUDF::from(BackendPid::new()));
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSleep {
    signature: Signature,
}

impl PgSleep {
    fn new() -> Self {
        PgSleep {
            signature: Signature::exact(vec![DataType::Float64], Volatility::Volatile),
        }
    }
}

/// Sleeps without holding up the other tasks of a query thread.
fn sleep(seconds: f64) {
    let d = Duration::from_secs_f64(seconds.clamp(0.0, PG_SLEEP_S_MAX));
    let multi = tokio::runtime::Handle::try_current()
        .map(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        .unwrap_or(false);
    if multi {
        tokio::task::block_in_place(|| std::thread::sleep(d));
    } else {
        std::thread::sleep(d);
    }
}

impl ScalarUDFImpl for PgSleep {
    fn name(&self) -> &str {
        "pg_sleep"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let total = match &args.args[0] {
            ColumnarValue::Scalar(ScalarValue::Float64(s)) => s.unwrap_or(0.0),
            ColumnarValue::Array(a) => {
                let a = a.as_primitive::<Float64Type>();
                (0..a.len())
                    .filter(|&i| a.is_valid(i))
                    .map(|i| a.value(i))
                    .sum()
            }
            ColumnarValue::Scalar(s) => {
                return exec_err!("pg_sleep: seconds must be a number, got {s}")
            }
        };
        if !total.is_finite() || total < 0.0 {
            return exec_err!("pg_sleep: seconds must be a non-negative number, got {total}");
        }
        sleep(total);
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct BackendPid {
    signature: Signature,
}

impl BackendPid {
    fn new() -> Self {
        BackendPid {
            signature: Signature::exact(vec![], Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for BackendPid {
    fn name(&self) -> &str {
        "pg_backend_pid"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Int32(Some(
            std::process::id() as i32,
        ))))
    }
}
