//! Query results as PostgreSQL `DataRow` messages, encoded a batch at a
//! time with one loop per row over columns whose arrays and wire formats
//! were resolved once per batch.
//!
//! The library's encoder (`arrow_pg`) resolves every value on its own: it
//! downcasts the array, matches the Arrow type, clones the column's Postgres
//! type and format options, and converts timestamps through `chrono` (and
//! in text, parses the `DateStyle` and runs chrono's formatter per value).
//! For the six columns of a quote that cost about 240 ns a row in binary and
//! 750 ns in text; here about 80 ns and 250 ns (scripts/bench_query.py,
//! "Results out"). The common column types (booleans, 16/32/64-bit
//! integers, floats, strings, string dictionaries, timestamps without a
//! time zone) are encoded directly into one buffer per batch that the
//! batch's rows share.
//!
//! The bytes are the library's, value for value: binary values are the
//! fixed PostgreSQL encodings the library writes through `postgres-types`
//! (big-endian integers and floats, a boolean as one byte, a timestamp as
//! microseconds since 2000-01-01 truncated toward zero); text timestamps in
//! the ISO `DateStyle` are written as chrono writes them, and every other
//! text value goes through the library's own `ToSqlText` with the client's
//! format options (`DateStyle`, `extra_float_digits`). A batch with any
//! other column (dates, decimals, lists, a time zone, a column the catalog
//! tags with metadata, a Postgres type other than the plain mapping) is
//! encoded by the library, so nothing it supports is lost. The tests
//! compare both encoders byte for byte.

use bytes::{BufMut, BytesMut};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, GenericStringArray, PrimitiveArray, StringArray,
    StringViewArray,
};
use datafusion::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, TimeUnit,
    TimestampMicrosecondType, TimestampNanosecondType,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::arrow_pg::datatypes::{
    arrow_schema_to_pg_fields, encode_recordbatch, into_pg_type,
};
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire;
use futures::{stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse, Response};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::types::format::date_style::DateStyle;
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use std::sync::Arc;

/// 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch, in Unix
/// microseconds.
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// Unix nanoseconds as microseconds since PostgreSQL's epoch, truncated
/// toward zero as chrono's `signed_duration_since(..).num_microseconds()`
/// has it (without its i128 division, or an overflow at the ends of i64).
#[inline]
fn pg_micros(ns: i64) -> i64 {
    let (q, r) = (ns / 1000, ns % 1000);
    let d = q - PG_EPOCH_US;
    // The epoch is whole microseconds, so only the remainder's sign can
    // differ from the difference's: then truncation rounds up.
    if d < 0 && r > 0 {
        d + 1
    } else {
        d
    }
}

/// The result formats of the portal being executed, handed from
/// `WithPositions::do_query` (which has the portal) to the statement hook
/// (which gets the bound parameters but not the portal), per connection.
#[derive(Default)]
struct PortalFormat(parking_lot::Mutex<Option<Format>>);

/// Offers the hook the result formats of the portal about to run (`None`
/// withdraws them).
pub fn offer_portal_format<C: ClientInfo + ?Sized>(client: &C, format: Option<Format>) {
    *client
        .session_extensions()
        .get_or_insert_with(PortalFormat::default)
        .0
        .lock() = format;
}

/// Runs a query statement of the extended protocol with its parameters
/// bound, as the library would (bind, optimize, plan a DataFrame), but
/// with its rows encoded here. None (the library runs it) for any other
/// statement, or when no portal's formats were offered.
pub async fn execute_query(
    statement: &Statement,
    plan: &LogicalPlan,
    params: &ParamValues,
    session: &SessionContext,
    client: &mut dyn HookClient,
) -> Option<PgWireResult<Response>> {
    if !matches!(statement, Statement::Query(_)) {
        return None;
    }
    let format = client
        .session_extensions()
        .get::<PortalFormat>()?
        .0
        .lock()
        .take()?;
    let api = |e: datafusion::error::DataFusionError| PgWireError::ApiError(Box::new(e));
    let run = async {
        let plan = plan
            .clone()
            .replace_params_with_values(params)
            .map_err(api)?;
        let optimised = session.state().optimize(&plan).map_err(api)?;
        let df = session.execute_logical_plan(optimised).await.map_err(api)?;
        let options = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        encode_dataframe(df, &format, Some(options))
            .await
            .map(Response::Query)
    };
    Some(run.await)
}

/// `arrow_pg::datatypes::df::encode_dataframe`, with this module's
/// encoder: the same fields (types and formats) and the same rows.
pub async fn encode_dataframe(
    df: DataFrame,
    format: &Format,
    options: Option<Arc<FormatOptions>>,
) -> PgWireResult<QueryResponse> {
    let fields = Arc::new(arrow_schema_to_pg_fields(
        df.schema().as_arrow(),
        format,
        options,
    )?);
    let batches = df
        .execute_stream()
        .await
        .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
    let batch_fields = fields.clone();
    let rows = batches
        .map(move |batch| {
            let rows = batch
                .map_err(|e| PgWireError::ApiError(Box::new(e)))
                .and_then(|b| encode_batch(&batch_fields, b));
            match rows {
                Ok(rows) => stream::iter(rows.into_iter().map(Ok)).left_stream(),
                Err(e) => stream::iter(std::iter::once(Err(e))).right_stream(),
            }
        })
        .flatten();
    Ok(QueryResponse::new(fields, rows))
}

/// One batch's rows.
pub fn encode_batch(
    fields: &Arc<Vec<FieldInfo>>,
    batch: RecordBatch,
) -> PgWireResult<Vec<DataRow>> {
    let schema = batch.schema();
    let columns: Option<Vec<Column>> = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .zip(fields.iter())
        .map(|((array, field), pg)| {
            if !field.metadata().is_empty() {
                return None;
            }
            Column::new(array, pg)
        })
        .collect();
    let Some(columns) = columns.filter(|c| c.len() == fields.len()) else {
        return encode_recordbatch(fields.clone(), batch).collect();
    };
    let rows = batch.num_rows();
    let width: usize = columns.iter().map(|c| c.bytes_hint(rows)).sum::<usize>();
    let mut buf = BytesMut::with_capacity(width + 4 * columns.len() * rows);
    let mut out = Vec::with_capacity(rows);
    let count = columns.len() as i16;
    for row in 0..rows {
        for c in &columns {
            c.encode(row, &mut buf)?;
        }
        out.push(DataRow::new(buf.split(), count));
    }
    Ok(out)
}

/// A column resolved for its wire format.
struct Column<'a> {
    pg: &'a FieldInfo,
    text: bool,
    /// Text timestamps in the ISO `DateStyle` (written here, not by chrono).
    iso: bool,
    values: Values<'a>,
}

enum Values<'a> {
    Bool(&'a BooleanArray),
    I16(&'a PrimitiveArray<Int16Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I64(&'a PrimitiveArray<Int64Type>),
    F32(&'a PrimitiveArray<Float32Type>),
    F64(&'a PrimitiveArray<Float64Type>),
    Utf8(&'a StringArray),
    LargeUtf8(&'a GenericStringArray<i64>),
    Utf8View(&'a StringViewArray),
    /// A string dictionary: each row's key, and the strings.
    Dict {
        array: &'a ArrayRef,
        keys: Vec<usize>,
        strings: &'a StringArray,
    },
    TsNanos(&'a PrimitiveArray<TimestampNanosecondType>),
    TsMicros(&'a PrimitiveArray<TimestampMicrosecondType>),
}

impl<'a> Column<'a> {
    /// None for a column the library encodes.
    fn new(array: &'a ArrayRef, pg: &'a FieldInfo) -> Option<Column<'a>> {
        let dt = array.data_type();
        if into_pg_type(dt).ok().as_ref() != Some(pg.datatype()) {
            return None;
        }
        let values = match dt {
            DataType::Boolean => Values::Bool(array.as_boolean()),
            DataType::Int16 => Values::I16(array.as_primitive()),
            DataType::Int32 => Values::I32(array.as_primitive()),
            DataType::Int64 => Values::I64(array.as_primitive()),
            DataType::Float32 => Values::F32(array.as_primitive()),
            DataType::Float64 => Values::F64(array.as_primitive()),
            DataType::Utf8 => Values::Utf8(array.as_string()),
            DataType::LargeUtf8 => Values::LargeUtf8(array.as_string()),
            DataType::Utf8View => Values::Utf8View(array.as_string_view()),
            DataType::Dictionary(_, v) if v.as_ref() == &DataType::Utf8 => {
                let d = array.as_any_dictionary_opt()?;
                Values::Dict {
                    array,
                    keys: d.normalized_keys(),
                    strings: d.values().as_string_opt()?,
                }
            }
            DataType::Timestamp(TimeUnit::Nanosecond, None) => {
                Values::TsNanos(array.as_primitive())
            }
            DataType::Timestamp(TimeUnit::Microsecond, None) => {
                Values::TsMicros(array.as_primitive())
            }
            _ => return None,
        };
        let text = pg.format() == FieldFormat::Text;
        let iso = text
            && DateStyle::new(&pg.format_options().date_style).full_format_str() == ISO_TIMESTAMP;
        Some(Column {
            pg,
            text,
            iso,
            values,
        })
    }

    /// About how many value bytes the column takes for `rows` rows.
    fn bytes_hint(&self, rows: usize) -> usize {
        let fixed = |w: usize| if self.text { 3 * w } else { w } * rows;
        match &self.values {
            Values::Bool(_) => fixed(1),
            Values::I16(_) => fixed(2),
            Values::I32(_) | Values::F32(_) => fixed(4),
            Values::I64(_) | Values::F64(_) => fixed(8),
            Values::TsNanos(_) | Values::TsMicros(_) => fixed(8),
            Values::Utf8(a) => a.value_data().len(),
            Values::LargeUtf8(a) => a.value_data().len(),
            Values::Utf8View(_) | Values::Dict { .. } => 16 * rows,
        }
    }

    /// Writes one value: its length (-1 for NULL), then its bytes.
    #[inline]
    fn encode(&self, row: usize, buf: &mut BytesMut) -> PgWireResult<()> {
        macro_rules! fixed {
            ($a:expr, $put:ident, $len:expr) => {{
                if $a.is_null(row) {
                    buf.put_i32(-1);
                } else if self.text {
                    self.text_value(&$a.value(row), buf)?;
                } else {
                    buf.put_i32($len);
                    buf.$put($a.value(row));
                }
            }};
        }
        match &self.values {
            Values::Bool(a) => {
                if a.is_null(row) {
                    buf.put_i32(-1);
                } else if self.text {
                    self.text_value(&a.value(row), buf)?;
                } else {
                    buf.put_i32(1);
                    buf.put_u8(a.value(row) as u8);
                }
            }
            Values::I16(a) => fixed!(a, put_i16, 2),
            Values::I32(a) => fixed!(a, put_i32, 4),
            Values::I64(a) => fixed!(a, put_i64, 8),
            Values::F32(a) => fixed!(a, put_f32, 4),
            Values::F64(a) => fixed!(a, put_f64, 8),
            Values::Utf8(a) => string((!a.is_null(row)).then(|| a.value(row)), buf),
            Values::LargeUtf8(a) => string((!a.is_null(row)).then(|| a.value(row)), buf),
            Values::Utf8View(a) => string((!a.is_null(row)).then(|| a.value(row)), buf),
            Values::Dict {
                array,
                keys,
                strings,
            } => {
                let s = (!array.is_null(row))
                    .then(|| keys[row])
                    .filter(|k| !strings.is_null(*k))
                    .map(|k| strings.value(k));
                string(s, buf)
            }
            Values::TsNanos(a) => {
                if a.is_null(row) {
                    buf.put_i32(-1);
                } else if self.text {
                    if !(self.iso && iso_timestamp(a.value(row).div_euclid(1000), buf)) {
                        match a.value_as_datetime(row) {
                            Some(t) => self.text_value(&t, buf)?,
                            None => buf.put_i32(-1),
                        }
                    }
                } else {
                    buf.put_i32(8);
                    buf.put_i64(pg_micros(a.value(row)));
                }
            }
            Values::TsMicros(a) => {
                // A value past chrono's range is NULL, as the library has it.
                if self.text && self.iso && a.is_valid(row) && iso_timestamp(a.value(row), buf) {
                    return Ok(());
                }
                let t = if a.is_null(row) {
                    None
                } else {
                    a.value_as_datetime(row)
                };
                match t {
                    None => buf.put_i32(-1),
                    Some(t) if self.text => self.text_value(&t, buf)?,
                    Some(_) => {
                        buf.put_i32(8);
                        buf.put_i64(a.value(row) - PG_EPOCH_US);
                    }
                }
            }
        }
        Ok(())
    }

    /// A value (not NULL) in text format, through the library's `ToSqlText`.
    #[inline]
    fn text_value<T: ToSqlText>(&self, v: &T, buf: &mut BytesMut) -> PgWireResult<()> {
        let at = buf.len();
        buf.put_i32(-1);
        // Never NULL: the values here are not Options.
        v.to_sql_text(self.pg.datatype(), buf, self.pg.format_options())
            .map_err(PgWireError::ApiError)?;
        let len = (buf.len() - at - 4) as i32;
        buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

/// The text format of a timestamp in the ISO `DateStyle`
/// (`pgwire::types::format::date_style`), through chrono.
const ISO_TIMESTAMP: &str = "%Y-%m-%d %H:%M:%S%.6f";

/// Unix microseconds as `ISO_TIMESTAMP` formats them, for the years 0 to
/// 9999 (false otherwise: chrono signs or widens other years).
#[inline]
fn iso_timestamp(us: i64, buf: &mut BytesMut) -> bool {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000) as u32;
    let sod = secs.rem_euclid(86_400) as u32;
    let (y, m, d) = crate::encode::civil_from_days(secs.div_euclid(86_400));
    if !(0..=9999).contains(&y) {
        return false;
    }
    let mut s = *b"0000-00-00 00:00:00.000000";
    for (range, v) in [
        (0..4, y as u32),
        (5..7, m),
        (8..10, d),
        (11..13, sod / 3600),
        (14..16, sod / 60 % 60),
        (17..19, sod % 60),
        (20..26, frac),
    ] {
        let mut v = v;
        for b in s[range].iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    buf.put_i32(s.len() as i32);
    buf.put_slice(&s);
    true
}

/// A string value: the same bytes in text and binary format.
#[inline]
fn string(s: Option<&str>, buf: &mut BytesMut) {
    match s {
        None => buf.put_i32(-1),
        Some(s) => {
            buf.put_i32(s.len() as i32);
            buf.put_slice(s.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        BooleanArray, DictionaryArray, Float32Array, Float64Array, Int16Array, Int32Array,
        Int64Array, Int8Array, LargeStringArray, TimestampMicrosecondArray,
        TimestampNanosecondArray, TimestampSecondArray,
    };
    use datafusion::arrow::datatypes::{Field, Int8Type, Schema, UInt16Type};

    fn batch(columns: Vec<ArrayRef>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn formats(n: usize) -> Vec<Format> {
        vec![
            Format::UnifiedText,
            Format::UnifiedBinary,
            Format::Individual((0..n).map(|i| (i % 2) as i16).collect()),
        ]
    }

    fn options() -> Vec<FormatOptions> {
        let mut iso = FormatOptions::default();
        iso.date_style = "ISO, MDY".into();
        let mut german = FormatOptions::default();
        german.date_style = "German".into();
        german.extra_float_digits = 0;
        let mut short = FormatOptions::default();
        short.extra_float_digits = -3;
        vec![FormatOptions::default(), iso, german, short]
    }

    /// Both encoders, row for row, in every format and with several
    /// client settings.
    fn same_as_library(b: &RecordBatch) {
        for format in formats(b.num_columns()) {
            for opts in options() {
                let fields = Arc::new(
                    arrow_schema_to_pg_fields(&b.schema(), &format, Some(Arc::new(opts))).unwrap(),
                );
                let want: Vec<DataRow> = encode_recordbatch(fields.clone(), b.clone())
                    .collect::<PgWireResult<_>>()
                    .unwrap();
                let got = encode_batch(&fields, b.clone()).unwrap();
                assert_eq!(got.len(), want.len());
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g, w, "row {i}, {format:?}, {:?}", b.schema());
                }
            }
        }
    }

    fn uses_fast_path(b: &RecordBatch) -> bool {
        let fields = arrow_schema_to_pg_fields(&b.schema(), &Format::UnifiedBinary, None).unwrap();
        b.columns()
            .iter()
            .zip(&fields)
            .all(|(a, f)| Column::new(a, f).is_some())
    }

    #[test]
    fn numbers_and_booleans_match_the_library() {
        let b = batch(vec![
            Arc::new(BooleanArray::from(vec![
                Some(true),
                None,
                Some(false),
                Some(true),
            ])),
            Arc::new(Int16Array::from(vec![
                Some(i16::MIN),
                Some(-1),
                None,
                Some(i16::MAX),
            ])),
            Arc::new(Int32Array::from(vec![
                Some(i32::MIN),
                None,
                Some(0),
                Some(i32::MAX),
            ])),
            Arc::new(Int64Array::from(vec![
                None,
                Some(i64::MIN),
                Some(42),
                Some(i64::MAX),
            ])),
            Arc::new(Float32Array::from(vec![
                Some(f32::NAN),
                Some(-0.0),
                Some(f32::INFINITY),
                None,
            ])),
            Arc::new(Float64Array::from(vec![
                Some(0.1),
                Some(f64::NEG_INFINITY),
                Some(1e300),
                Some(f64::NAN),
            ])),
            Arc::new(Float64Array::from(vec![
                Some(50.01),
                Some(99.99),
                None,
                Some(1.0 / 3.0),
            ])),
        ]);
        assert!(uses_fast_path(&b));
        same_as_library(&b);
    }

    #[test]
    fn strings_and_dictionaries_match_the_library() {
        let dict: DictionaryArray<Int32Type> =
            vec![Some("AAPL"), None, Some("MSFT"), Some("AAPL"), Some("")]
                .into_iter()
                .collect();
        let dict8: DictionaryArray<Int8Type> =
            vec![Some("x"), Some("y, \"z\""), None, Some("x"), Some("{}")]
                .into_iter()
                .collect();
        let dict16: DictionaryArray<UInt16Type> =
            vec![Some("é"), Some("b"), Some("b"), None, Some("NULL")]
                .into_iter()
                .collect();
        let b = batch(vec![
            Arc::new(StringArray::from(vec![
                Some("a"),
                None,
                Some(""),
                Some("ü\"x"),
                Some("null"),
            ])),
            Arc::new(LargeStringArray::from(vec![
                Some("l"),
                Some("m"),
                None,
                Some(""),
                Some("z"),
            ])),
            Arc::new(StringViewArray::from(vec![
                Some("a string longer than twelve bytes"),
                Some("short"),
                None,
                Some(""),
                Some("v"),
            ])),
            Arc::new(dict),
            Arc::new(dict8),
            Arc::new(dict16),
        ]);
        assert!(uses_fast_path(&b));
        same_as_library(&b);
        // A dictionary whose values hold a null.
        let values = StringArray::from(vec![Some("a"), None]);
        let keys = Int32Array::from(vec![Some(0), Some(1), None]);
        let d = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values)).unwrap();
        let b = batch(vec![Arc::new(d)]);
        assert!(uses_fast_path(&b));
        same_as_library(&b);
    }

    #[test]
    fn timestamps_match_the_library() {
        let ns = vec![
            Some(1_700_000_000_123_456_789),
            None,
            Some(0),
            Some(-1),
            Some(-1_001),
            Some(-999),
            Some(946_684_799_999_999_999),
            Some(946_684_800_000_000_001),
            Some(i64::MIN),
            Some(i64::MAX),
            Some(-5_000_000_000_000_000_001),
            Some(951_868_799_999_999_999),
            Some(-1_000_000_000_000_000_000),
            Some(1_000_000_000),
            Some(86_399_999_999_999),
            None,
            Some(-86_400_000_000_001),
        ];
        let us = vec![
            Some(1_700_000_000_123_456),
            None,
            Some(0),
            Some(-1),
            Some(946_684_799_999_999),
            Some(-62_135_596_800_000_000),
            Some(253_402_300_799_999_999),
            Some(253_402_300_800_000_000),
            Some(-62_167_219_200_000_000),
            Some(-62_167_219_200_000_001),
            Some(-62_198_755_200_000_000),
            Some(951_782_400_000_000),
            Some(-2_203_891_200_000_001),
            Some(-9_000_000_000_000_000_000),
            Some(9_000_000_000_000_000_000),
            Some(i64::MIN),
            Some(i64::MAX),
        ];
        let b = batch(vec![
            Arc::new(TimestampNanosecondArray::from(ns)),
            Arc::new(TimestampMicrosecondArray::from(us)),
        ]);
        assert!(uses_fast_path(&b));
        same_as_library(&b);
    }

    #[test]
    fn microseconds_since_2000_truncate_toward_zero() {
        for ns in [
            i64::MIN,
            i64::MAX,
            0,
            1,
            -1,
            999,
            -999,
            1000,
            -1000,
            946_684_800_000_000_000,
            946_684_799_999_999_001,
            946_684_800_000_000_999,
            946_684_799_999_998_999,
            1_700_000_000_123_456_789,
        ] {
            let want = (ns as i128 - 946_684_800_000_000_000i128) / 1000;
            assert_eq!(pg_micros(ns) as i128, want, "{ns}");
        }
    }

    #[test]
    fn text_timestamps_in_the_iso_style_skip_chrono() {
        let b = batch(vec![Arc::new(TimestampNanosecondArray::from(vec![1i64]))]);
        for (style, iso) in [
            ("ISO, YMD", true),
            ("iso, mdy", true),
            ("ISO", true),
            ("German", false),
            ("SQL, DMY", false),
        ] {
            let mut opts = FormatOptions::default();
            opts.date_style = style.into();
            let fields =
                arrow_schema_to_pg_fields(&b.schema(), &Format::UnifiedText, Some(Arc::new(opts)))
                    .unwrap();
            let c = Column::new(b.column(0), &fields[0]).unwrap();
            assert_eq!(c.iso, iso, "{style}");
        }
    }

    #[test]
    fn other_columns_are_left_to_the_library() {
        let tz = TimestampNanosecondArray::from(vec![Some(1_700_000_000_000_000_000), None])
            .with_timezone("UTC");
        let b = batch(vec![Arc::new(tz), Arc::new(Int64Array::from(vec![1, 2]))]);
        assert!(!uses_fast_path(&b));
        same_as_library(&b);
        let b = batch(vec![
            Arc::new(Int8Array::from(vec![Some(1), None])),
            Arc::new(TimestampSecondArray::from(vec![Some(1), None])),
        ]);
        assert!(!uses_fast_path(&b));
        same_as_library(&b);
    }

    #[test]
    fn an_empty_batch_has_no_rows() {
        let b = batch(vec![Arc::new(Int64Array::from(Vec::<i64>::new()))]);
        let fields =
            Arc::new(arrow_schema_to_pg_fields(&b.schema(), &Format::UnifiedBinary, None).unwrap());
        assert!(encode_batch(&fields, b).unwrap().is_empty());
    }
}
