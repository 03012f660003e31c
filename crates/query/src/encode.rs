//! Result encodings for the HTTP `/exec` endpoint: JSON shaped like
//! QuestDB's `/exec`, CSV with a header row, and the Arrow IPC stream
//! format that pyarrow, pandas and polars read.

use crate::QueryResult;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::*;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::{json, Number, Value};
use std::sync::Arc;

/// The type name shown in the JSON `columns` list (QuestDB's names where
/// one fits, Arrow's otherwise).
pub fn type_name(dt: &DataType) -> String {
    match dt {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "BYTE".into(),
        DataType::Int16 => "SHORT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "LONG".into(),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            format!("{dt}").to_uppercase()
        }
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Dictionary(_, v) if v.is_string() => "SYMBOL".into(),
        DataType::Timestamp(_, _) => "TIMESTAMP".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BINARY".into(),
        DataType::Null => "NULL".into(),
        other => format!("{other}").to_uppercase(),
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// RFC 3339 in UTC with nanoseconds: `2024-01-02T03:04:05.123456789Z`.
pub fn rfc3339_nanos(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

fn date_string(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

fn f64_value(v: f64) -> Value {
    Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn timestamp_ns(unit: &TimeUnit, v: i64) -> i64 {
    match unit {
        TimeUnit::Second => v.saturating_mul(1_000_000_000),
        TimeUnit::Millisecond => v.saturating_mul(1_000_000),
        TimeUnit::Microsecond => v.saturating_mul(1_000),
        TimeUnit::Nanosecond => v,
    }
}

/// One column of a batch as JSON values, one per row.
fn column_values(array: &ArrayRef) -> Result<Vec<Value>, ArrowError> {
    let n = array.len();
    let mut out = Vec::with_capacity(n);
    macro_rules! prim {
        ($t:ty, $f:expr) => {{
            let a = array.as_primitive::<$t>();
            for i in 0..n {
                out.push(if a.is_null(i) {
                    Value::Null
                } else {
                    $f(a.value(i))
                });
            }
        }};
    }
    match array.data_type() {
        DataType::Null => out.resize(n, Value::Null),
        DataType::Boolean => {
            let a = array.as_boolean();
            for i in 0..n {
                out.push(if a.is_null(i) {
                    Value::Null
                } else {
                    Value::Bool(a.value(i))
                });
            }
        }
        DataType::Int8 => prim!(Int8Type, |v| json!(v)),
        DataType::Int16 => prim!(Int16Type, |v| json!(v)),
        DataType::Int32 => prim!(Int32Type, |v| json!(v)),
        DataType::Int64 => prim!(Int64Type, |v| json!(v)),
        DataType::UInt8 => prim!(UInt8Type, |v| json!(v)),
        DataType::UInt16 => prim!(UInt16Type, |v| json!(v)),
        DataType::UInt32 => prim!(UInt32Type, |v| json!(v)),
        DataType::UInt64 => prim!(UInt64Type, |v| json!(v)),
        DataType::Float32 => prim!(Float32Type, |v: f32| f64_value(v as f64)),
        DataType::Float64 => prim!(Float64Type, f64_value),
        DataType::Timestamp(unit, _) => {
            let unit = *unit;
            let a = cast(array, &DataType::Int64)?;
            let a = a.as_primitive::<Int64Type>();
            for i in 0..n {
                out.push(if a.is_null(i) {
                    Value::Null
                } else {
                    Value::String(rfc3339_nanos(timestamp_ns(&unit, a.value(i))))
                });
            }
        }
        DataType::Date32 => prim!(Date32Type, |v: i32| Value::String(date_string(v as i64))),
        DataType::Date64 => prim!(Date64Type, |v: i64| Value::String(date_string(
            v.div_euclid(86_400_000)
        ))),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(_, _) => {
            let a = cast(array, &DataType::Utf8)?;
            let a = a.as_string::<i32>();
            for i in 0..n {
                out.push(if a.is_null(i) {
                    Value::Null
                } else {
                    Value::String(a.value(i).to_string())
                });
            }
        }
        DataType::Decimal128(_, _) | DataType::Decimal256(_, _) => {
            let a = cast(array, &DataType::Float64)?;
            let a = a.as_primitive::<Float64Type>();
            for i in 0..n {
                out.push(if a.is_null(i) {
                    Value::Null
                } else {
                    f64_value(a.value(i))
                });
            }
        }
        _ => {
            let f = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())?;
            for i in 0..n {
                out.push(if array.is_null(i) {
                    Value::Null
                } else {
                    Value::String(f.value(i).to_string())
                });
            }
        }
    }
    Ok(out)
}

/// A result encoding for HTTP `/exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// QuestDB `/exec`-like JSON.
    Json,
    /// CSV with a header row.
    Csv,
    /// The Arrow IPC stream format.
    Arrow,
}

impl Format {
    /// `json`, `csv` or `arrow` (any case).
    pub fn parse(s: &str) -> Option<Format> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            "arrow" => Some(Format::Arrow),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv",
            Format::Arrow => "application/vnd.apache.arrow.stream",
        }
    }
}

/// Encodes a result batch by batch, so that a result of any size streams
/// out in bounded memory: each batch becomes one chunk of bytes. The first
/// chunk carries the head (JSON's columns, CSV's header row, Arrow's
/// schema) together with the first batch, so a query that fails on its
/// first batch fails before any byte is sent.
pub struct Encoder {
    format: Format,
    query: String,
    schema: Option<SchemaRef>,
    head_sent: bool,
    rows: usize,
    arrow: Option<datafusion::arrow::ipc::writer::StreamWriter<Vec<u8>>>,
}

impl Encoder {
    /// `query` is echoed in the JSON head.
    pub fn new(format: Format, query: &str) -> Encoder {
        Encoder {
            format,
            query: query.to_string(),
            schema: None,
            head_sent: false,
            rows: 0,
            arrow: None,
        }
    }

    fn head(&mut self, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        if self.head_sent {
            return Ok(());
        }
        self.head_sent = true;
        let Some(schema) = self.schema.clone() else {
            return Ok(());
        };
        match self.format {
            Format::Json => {
                let columns: Vec<Value> = schema
                    .fields()
                    .iter()
                    .map(|f| json!({"name": f.name(), "type": type_name(f.data_type())}))
                    .collect();
                out.extend_from_slice(b"{\"query\":");
                serde_json::to_writer(&mut *out, &self.query).map_err(json_err)?;
                out.extend_from_slice(b",\"columns\":");
                serde_json::to_writer(&mut *out, &columns).map_err(json_err)?;
                out.extend_from_slice(b",\"dataset\":[");
            }
            Format::Csv => {
                let header: Vec<String> = schema
                    .fields()
                    .iter()
                    .map(|f| csv_field(f.name()))
                    .collect();
                out.extend_from_slice(header.join(",").as_bytes());
                out.push(b'\n');
            }
            Format::Arrow => {
                let w = datafusion::arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &schema)?;
                self.arrow = Some(w);
                self.drain_arrow(out);
            }
        }
        Ok(())
    }

    fn drain_arrow(&mut self, out: &mut Vec<u8>) {
        if let Some(w) = self.arrow.as_mut() {
            out.append(w.get_mut());
        }
    }

    /// Bytes for the result's schema (nothing yet: the head goes out with
    /// the first batch).
    pub fn start(&mut self, schema: &SchemaRef) {
        self.schema = Some(schema.clone());
    }

    /// Bytes for one batch (with the head, the first time).
    pub fn batch(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
        let mut out = Vec::new();
        self.head(&mut out)?;
        if batch.num_rows() == 0 {
            return Ok(out);
        }
        match self.format {
            Format::Json => {
                let cols = batch
                    .columns()
                    .iter()
                    .map(column_values)
                    .collect::<Result<Vec<_>, _>>()?;
                for row in 0..batch.num_rows() {
                    if self.rows > 0 {
                        out.push(b',');
                    }
                    self.rows += 1;
                    out.push(b'[');
                    for (i, c) in cols.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        serde_json::to_writer(&mut out, &c[row]).map_err(json_err)?;
                    }
                    out.push(b']');
                }
            }
            Format::Csv => {
                self.rows += batch.num_rows();
                let mut w = datafusion::arrow::csv::WriterBuilder::new()
                    .with_header(false)
                    .with_timestamp_format("%Y-%m-%dT%H:%M:%S%.9fZ".to_string())
                    .build(&mut out);
                w.write(&plain(batch)?)?;
            }
            Format::Arrow => {
                self.rows += batch.num_rows();
                if let Some(w) = self.arrow.as_mut() {
                    w.write(&unique_dictionaries(batch)?)?;
                }
                self.drain_arrow(&mut out);
            }
        }
        Ok(out)
    }

    /// The closing bytes (the head too, for a result with no batch).
    pub fn finish(&mut self) -> Result<Vec<u8>, ArrowError> {
        let mut out = Vec::new();
        self.head(&mut out)?;
        match self.format {
            Format::Json => {
                out.extend_from_slice(format!("],\"count\":{}}}", self.rows).as_bytes());
            }
            Format::Csv => {}
            Format::Arrow => {
                if let Some(w) = self.arrow.as_mut() {
                    w.finish()?;
                }
                self.drain_arrow(&mut out);
            }
        }
        Ok(out)
    }

    /// Rows encoded so far.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

fn json_err(e: serde_json::Error) -> ArrowError {
    ArrowError::ExternalError(Box::new(e))
}

fn encode_err(e: ArrowError) -> crate::QueryError {
    crate::QueryError::Execution(format!("encoding the result: {e}"))
}

impl crate::ResultSink for Encoder {
    type Item = bytes::Bytes;

    fn start(&mut self, schema: &SchemaRef) -> Result<Option<bytes::Bytes>, crate::QueryError> {
        Encoder::start(self, schema);
        Ok(None)
    }

    fn batch(&mut self, batch: RecordBatch) -> Result<Option<bytes::Bytes>, crate::QueryError> {
        let out = Encoder::batch(self, &batch).map_err(encode_err)?;
        Ok((!out.is_empty()).then(|| out.into()))
    }

    fn finish(&mut self) -> Result<Option<bytes::Bytes>, crate::QueryError> {
        let out = Encoder::finish(self).map_err(encode_err)?;
        Ok((!out.is_empty()).then(|| out.into()))
    }
}

/// A whole result in one encoding (tests, small results).
pub fn encode_all(format: Format, result: &QueryResult) -> Result<Vec<u8>, ArrowError> {
    let mut e = Encoder::new(format, &result.query);
    e.start(&result.schema);
    let mut out = Vec::new();
    for b in &result.batches {
        out.extend(e.batch(b)?);
    }
    out.extend(e.finish()?);
    Ok(out)
}

/// QuestDB `/exec`-like JSON:
/// `{"query": .., "columns": [{"name", "type"}], "dataset": [[..]], "count": N}`.
/// Timestamps are RFC 3339 strings with nanoseconds, symbols strings, and
/// NaN or infinite floats `null`.
pub fn json(result: &QueryResult) -> Value {
    match encode_all(Format::Json, result)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => json!({ "query": result.query, "error": e }),
    }
}

fn has_dictionary(batch: &RecordBatch) -> bool {
    batch
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Dictionary(_, _)))
}

/// Dictionary columns cast to strings: CSV has no dictionaries.
fn plain(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    if !has_dictionary(batch) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut cols = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if let DataType::Dictionary(_, v) = f.data_type() {
            cols.push(cast(c, v)?);
            fields.push(Field::new(f.name(), v.as_ref().clone(), f.is_nullable()));
        } else {
            cols.push(c.clone());
            fields.push(f.as_ref().clone());
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
}

/// Dictionary columns re-encoded so each dictionary holds every value once.
/// Operators that concatenate batches (sorts, merges, aggregations over
/// several chunks) append dictionaries, which Arrow allows but pandas does
/// not: it refuses categoricals with repeated categories.
fn unique_dictionaries(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    if !has_dictionary(batch) {
        return Ok(batch.clone());
    }
    let cols = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(f, c)| match f.data_type() {
            DataType::Dictionary(_, v) if repeats_a_value(c) => cast(&cast(c, v)?, f.data_type()),
            _ => Ok(c.clone()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(batch.schema(), cols)
}

/// Whether a dictionary column's dictionary holds some value twice (only
/// then is it re-encoded: the check reads the dictionary, not the rows).
fn repeats_a_value(c: &ArrayRef) -> bool {
    let Some(d) = c.as_any_dictionary_opt() else {
        return false;
    };
    let values = d.values();
    let Some(strings) = values.as_string_opt::<i32>() else {
        return true;
    };
    let mut seen = std::collections::HashSet::with_capacity(strings.len());
    strings.iter().any(|v| !seen.insert(v))
}

/// CSV with a header row; timestamps as RFC 3339 with nanoseconds.
pub fn csv(result: &QueryResult) -> Vec<u8> {
    encode_all(Format::Csv, result).unwrap_or_else(|e| {
        tracing::warn!("csv encoding: {e}");
        Vec::new()
    })
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The Arrow IPC *stream* format (schema, then batches):
/// `pyarrow.ipc.open_stream`, `pandas`/`polars` via pyarrow read it.
pub fn arrow_ipc(result: &QueryResult) -> Vec<u8> {
    encode_all(Format::Arrow, result).unwrap_or_else(|e| {
        tracing::warn!("arrow ipc encoding: {e}");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
        // 2024-01-02T03:04:05.123456789Z
        let ns = 1_704_164_645_123_456_789i64;
        assert_eq!(rfc3339_nanos(ns), "2024-01-02T03:04:05.123456789Z");
        assert_eq!(rfc3339_nanos(-1), "1969-12-31T23:59:59.999999999Z");
    }
}
