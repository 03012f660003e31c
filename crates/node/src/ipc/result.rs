//! A query's Arrow result as a q table: strings (and symbols) as q
//! symbols, timestamps as q timestamps, floats as q floats, 64-bit
//! integers as q longs, 32-bit ones as q ints, booleans, dates, durations.
//! SQL nulls become q's nulls. A keyed result (q `select … by …`) is a
//! dictionary from the key columns' table to the other columns' table.

use super::QError;
use arrow::array::cast::AsArray;
use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::*;
use tickdb_ipc::temporal::{Q_EPOCH_DAYS, Q_EPOCH_NS};
use tickdb_ipc::value::nulls;
use tickdb_ipc::{Kind, Table, Vector, K};

/// The table of `batches` (all of `schema`), keyed by its first `keys`
/// columns when `keys > 0`.
pub fn table_from_arrow(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    keys: usize,
) -> Result<K, QError> {
    let mut names = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        names.push(f.name().clone());
        let arrays: Vec<&ArrayRef> = batches.iter().map(|b| b.column(i)).collect();
        columns.push(column(f.name(), f.data_type(), &arrays)?);
    }
    if keys == 0 || keys >= names.len() {
        return Ok(K::table(names, columns));
    }
    let vnames = names.split_off(keys);
    let vcols = columns.split_off(keys);
    Ok(K::dict(
        K::Table(Table {
            attr: 0,
            names,
            columns,
        }),
        K::Table(Table {
            attr: 0,
            names: vnames,
            columns: vcols,
        }),
    ))
}

/// The first row's first value as a q atom (`count t`).
pub fn atom_from_arrow(batches: &[RecordBatch]) -> Option<K> {
    let b = batches.iter().find(|b| b.num_rows() > 0)?;
    let col = b.column(0);
    let k = column("x", col.data_type(), &[col]).ok()?;
    match k {
        K::Vector { v, .. } => v.get(0).map(K::Atom),
        _ => None,
    }
}

fn column(name: &str, ty: &DataType, arrays: &[&ArrayRef]) -> Result<K, QError> {
    macro_rules! prim {
        ($t:ty, $null:expr, $conv:expr, $wrap:expr) => {{
            let mut out = Vec::new();
            for a in arrays {
                let a = a.as_primitive::<$t>();
                for i in 0..a.len() {
                    out.push(if a.is_null(i) {
                        $null
                    } else {
                        $conv(a.value(i))
                    });
                }
            }
            Ok(K::vector($wrap(out)))
        }};
    }
    match ty {
        DataType::Float64 => prim!(Float64Type, f64::NAN, |x| x, |v| Vector::Float(Kind::Float, v)),
        DataType::Float32 => prim!(Float32Type, f64::NAN, |x: f32| x as f64, |v| Vector::Float(Kind::Float, v)),
        DataType::Int64 => prim!(Int64Type, nulls::LONG_NULL, |x| x, |v| Vector::Long(Kind::Long, v)),
        DataType::UInt64 => prim!(UInt64Type, nulls::LONG_NULL, |x: u64| x.min(i64::MAX as u64) as i64, |v| Vector::Long(Kind::Long, v)),
        DataType::UInt32 => prim!(UInt32Type, nulls::LONG_NULL, |x: u32| x as i64, |v| Vector::Long(Kind::Long, v)),
        DataType::Int32 => prim!(Int32Type, nulls::INT_NULL, |x| x, |v| Vector::Int(Kind::Int, v)),
        DataType::Int16 => prim!(Int16Type, nulls::SHORT_NULL, |x| x, Vector::Short),
        DataType::Int8 => prim!(Int8Type, nulls::SHORT_NULL, |x: i8| x as i16, Vector::Short),
        DataType::UInt16 => prim!(UInt16Type, nulls::INT_NULL, |x: u16| x as i32, |v| Vector::Int(Kind::Int, v)),
        DataType::UInt8 => prim!(UInt8Type, nulls::SHORT_NULL, |x: u8| x as i16, Vector::Short),
        DataType::Timestamp(unit, _) => {
            let scale: i64 = match unit {
                TimeUnit::Second => 1_000_000_000,
                TimeUnit::Millisecond => 1_000_000,
                TimeUnit::Microsecond => 1_000,
                TimeUnit::Nanosecond => 1,
            };
            let mut out = Vec::new();
            for a in arrays {
                // Every timestamp unit's array holds i64 values.
                let a = arrow_cast_i64(a);
                for i in 0..a.len() {
                    out.push(if a.is_null(i) {
                        nulls::LONG_NULL
                    } else {
                        a.value(i).saturating_mul(scale).saturating_sub(Q_EPOCH_NS)
                    });
                }
            }
            Ok(K::vector(Vector::Long(Kind::Timestamp, out)))
        }
        DataType::Date32 => prim!(Date32Type, nulls::INT_NULL, |d: i32| d - Q_EPOCH_DAYS as i32, |v| Vector::Int(Kind::Date, v)),
        DataType::Duration(TimeUnit::Nanosecond) => {
            prim!(DurationNanosecondType, nulls::LONG_NULL, |x| x, |v| Vector::Long(Kind::Timespan, v))
        }
        DataType::Boolean => {
            let mut out = Vec::new();
            for a in arrays {
                let a = a.as_boolean();
                for i in 0..a.len() {
                    out.push(!a.is_null(i) && a.value(i));
                }
            }
            Ok(K::vector(Vector::Bool(out)))
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(_, _) => {
            let mut out = Vec::new();
            for a in arrays {
                let s = cast(a, &DataType::Utf8).map_err(|e| {
                    QError::new("type", format!("column `{name}`: {e}"))
                })?;
                let s = s.as_string::<i32>();
                for i in 0..s.len() {
                    out.push(if s.is_null(i) { String::new() } else { s.value(i).to_string() });
                }
            }
            Ok(K::vector(Vector::Symbol(out)))
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let mut out = Vec::new();
            for a in arrays {
                let b = cast(a, &DataType::Binary).map_err(|e| {
                    QError::new("type", format!("column `{name}`: {e}"))
                })?;
                let b = b.as_binary::<i32>();
                for i in 0..b.len() {
                    out.push(K::vector(Vector::Byte(if b.is_null(i) { Vec::new() } else { b.value(i).to_vec() })));
                }
            }
            Ok(K::List(out))
        }
        DataType::Null => {
            let n = arrays.iter().map(|a| a.len()).sum();
            Ok(K::vector(Vector::Float(Kind::Float, vec![f64::NAN; n])))
        }
        other => Err(QError::new(
            "nyi",
            format!("column `{name}` is of SQL type {other}, which has no q type here: cast it (to DOUBLE, BIGINT, VARCHAR or TIMESTAMP)"),
        )),
    }
}

/// A timestamp array of any unit, as its i64 values.
fn arrow_cast_i64(a: &ArrayRef) -> Int64Array {
    match cast(a, &DataType::Int64) {
        Ok(x) => x.as_primitive::<Int64Type>().clone(),
        Err(_) => Int64Array::new_null(a.len()),
    }
}
