//! `import`: CSV or Parquet files into the HDB, one part per (file, date).
//!
//! Each file is read and checked whole before anything of it is written:
//! every date it spans is staged first and committed only when all of them
//! staged, so a file that fails leaves nothing behind. The part's source
//! is `import:<file name>:<file size>`, so importing the same file again is
//! a no-op (its parts are reported as skipped) and a file that was cut off
//! by a crash between two dates' commits completes on the next run.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::compute::{can_cast_types, cast_with_options, CastOptions};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{
    Array, ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tickdb_core::{ColumnType, TableDef};

use crate::error::HdbError;
use crate::write::{check_table, stage_day, CommitOutcome, PartReport, StageOutcome, WriteOptions};

/// Rows per batch read from an input file.
const IMPORT_BATCH_ROWS: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// fsync parts and directories (true in production).
    pub fsync: bool,
    /// A progress bar over the input bytes on stderr.
    pub progress: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            fsync: true,
            progress: false,
        }
    }
}

/// What importing one file did.
#[derive(Debug, Clone)]
pub struct ImportedFile {
    pub file: PathBuf,
    /// `import:<file name>:<file size>`.
    pub source: String,
    pub rows: u64,
    /// Parts written, one per date.
    pub committed: Vec<PartReport>,
    /// Dates whose part of this file was already committed: (date, part).
    pub skipped: Vec<(NaiveDate, PathBuf)>,
}

#[derive(Debug, Clone, Default)]
pub struct ImportReport {
    pub files: Vec<ImportedFile>,
}

impl ImportReport {
    /// Rows of the parts committed now (not of the skipped ones).
    pub fn rows_committed(&self) -> u64 {
        self.files
            .iter()
            .flat_map(|f| &f.committed)
            .map(|p| p.rows)
            .sum()
    }

    pub fn parts_committed(&self) -> usize {
        self.files.iter().map(|f| f.committed.len()).sum()
    }

    pub fn parts_skipped(&self) -> usize {
        self.files.iter().map(|f| f.skipped.len()).sum()
    }
}

/// Imports `files` into `def`'s table under `root`. Each row's date is the
/// date of its time in `tz` (times are epoch nanoseconds; see
/// `docs/history.md`, "Import", for what CSV times may look like). Files
/// are imported in order; the first file that fails stops the import with
/// an error naming it, after the files before it were committed.
pub fn import(
    root: &Path,
    def: &TableDef,
    files: &[PathBuf],
    tz: Tz,
    opts: &ImportOptions,
) -> Result<ImportReport, HdbError> {
    check_table(def)?;
    let mut sizes = Vec::with_capacity(files.len());
    for f in files {
        let md = std::fs::metadata(f).map_err(|e| HdbError::io(f, "stat", e))?;
        sizes.push(md.len());
    }
    let bar = if opts.progress {
        let b = ProgressBar::new(sizes.iter().sum());
        if let Ok(style) = ProgressStyle::with_template(
            "import {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ) {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let wopts = WriteOptions {
        fsync: opts.fsync,
        ..WriteOptions::default()
    };
    let mut rep = ImportReport::default();
    for (path, &size) in files.iter().zip(&sizes) {
        bar.set_message(path.display().to_string());
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| HdbError::Import {
                path: path.clone(),
                what: "not a file name".into(),
            })?;
        let source = format!("import:{name}:{size}");
        let batches = read_file(path, def, tz, &bar)?;
        let by_date = split_by_date(path, def, tz, &batches)?;
        drop(batches);
        let rows = by_date
            .values()
            .flat_map(|v| v.iter())
            .map(|b| b.num_rows() as u64)
            .sum();

        // Stage every date first: a failure drops (removes) the staged ones.
        let mut staged = Vec::new();
        let mut done = ImportedFile {
            file: path.clone(),
            source: source.clone(),
            rows,
            committed: Vec::new(),
            skipped: Vec::new(),
        };
        for (date, batches) in &by_date {
            match stage_day(root, def, *date, &source, batches, &wopts)? {
                StageOutcome::Staged(s) => staged.push(s),
                StageOutcome::AlreadyCommitted(p) => done.skipped.push((*date, p)),
                StageOutcome::Empty => {}
            }
        }
        for s in staged {
            let date = s.report().date;
            match s.commit()? {
                CommitOutcome::Committed(r) => {
                    tracing::info!(file = %path.display(), path = %r.path.display(), rows = r.rows, "imported");
                    done.committed.push(r);
                }
                CommitOutcome::AlreadyCommitted(p) => done.skipped.push((date, p)),
            }
        }
        rep.files.push(done);
    }
    bar.finish_and_clear();
    Ok(rep)
}

fn import_err(path: &Path, what: impl Into<String>) -> HdbError {
    HdbError::Import {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

/// Reads a file into batches of the table's Arrow schema.
fn read_file(
    path: &Path,
    def: &TableDef,
    tz: Tz,
    bar: &ProgressBar,
) -> Result<Vec<RecordBatch>, HdbError> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "csv" => read_csv(path, def, tz, bar),
        "parquet" => {
            let out = read_parquet(path, def)?;
            bar.inc(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0));
            Ok(out)
        }
        _ => Err(import_err(
            path,
            "unknown file type (the name must end in .csv or .parquet)",
        )),
    }
}

/// Checks that `names` are exactly the table's columns (any order) and
/// returns, for each table column, its position in `names`.
fn match_columns(path: &Path, def: &TableDef, names: &[String]) -> Result<Vec<usize>, HdbError> {
    let mut pos: HashMap<&str, usize> = HashMap::new();
    let mut dup = Vec::new();
    for (i, n) in names.iter().enumerate() {
        if pos.insert(n.as_str(), i).is_some() {
            dup.push(n.clone());
        }
    }
    let missing: Vec<&str> = def
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .filter(|n| !pos.contains_key(n))
        .collect();
    let extra: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| def.column_index(n).is_none())
        .collect();
    if !missing.is_empty() || !extra.is_empty() || !dup.is_empty() {
        let mut what = format!(
            "columns [{}] are not table '{}''s [{}]:",
            names.join(", "),
            def.name,
            def.columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !missing.is_empty() {
            what += &format!(" missing [{}]", missing.join(", "));
        }
        if !extra.is_empty() {
            what += &format!(" extra [{}]", extra.join(", "));
        }
        if !dup.is_empty() {
            what += &format!(" repeated [{}]", dup.join(", "));
        }
        return Err(import_err(path, what));
    }
    Ok(def.columns.iter().map(|c| pos[c.name.as_str()]).collect())
}

/// Counts the bytes read into the progress bar.
struct Counting<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

fn read_csv(
    path: &Path,
    def: &TableDef,
    tz: Tz,
    bar: &ProgressBar,
) -> Result<Vec<RecordBatch>, HdbError> {
    let mut file = File::open(path).map_err(|e| HdbError::io(path, "open", e))?;
    // The header, through the CSV parser so that quoted names read right.
    let format = arrow::csv::reader::Format::default().with_header(true);
    let (header, _) = format
        .infer_schema(&mut file, Some(0))
        .map_err(|e| import_err(path, format!("cannot read the header row: {e}")))?;
    let names: Vec<String> = header.fields().iter().map(|f| f.name().clone()).collect();
    if names.is_empty() || (names.len() == 1 && names[0].is_empty()) {
        return Err(import_err(
            path,
            "no header row (the first line must name the columns)",
        ));
    }
    let col_of = match_columns(path, def, &names)?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| HdbError::io(path, "seek", e))?;

    // Every field as text; the values are converted here so that an error
    // can say which line and column.
    let text_schema = Arc::new(ArrowSchema::new(
        names
            .iter()
            .map(|n| Field::new(n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let reader = arrow::csv::ReaderBuilder::new(text_schema)
        .with_header(true)
        .with_batch_size(IMPORT_BATCH_ROWS)
        .build(Counting {
            inner: std::io::BufReader::new(file),
            bar: bar.clone(),
        })
        .map_err(|e| import_err(path, format!("csv: {e}")))?;
    let schema = tickdb_core::store::arrow_schema(def);
    let mut out = Vec::new();
    // Line 1 is the header; a record is one line unless a quoted field
    // spans lines, which tick data does not have.
    let mut line = 2u64;
    for batch in reader {
        let batch = batch.map_err(|e| import_err(path, format!("csv: {e}")))?;
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(def.columns.len());
        for (ci, c) in def.columns.iter().enumerate() {
            let src = batch.column(col_of[ci]).as_string::<i32>();
            let at = |row: usize, what: String| {
                import_err(
                    path,
                    format!("line {}, column '{}': {what}", line + row as u64, c.name),
                )
            };
            cols.push(convert_text(src, c.ty, ci == def.time_column, tz, &at)?);
        }
        line += batch.num_rows() as u64;
        out.push(
            RecordBatch::try_new(schema.clone(), cols)
                .map_err(|e| HdbError::arrow(path, "build batch", e))?,
        );
    }
    Ok(out)
}

/// One CSV column's text to the column's type.
fn convert_text(
    src: &StringArray,
    ty: ColumnType,
    is_time: bool,
    tz: Tz,
    at: &dyn Fn(usize, String) -> HdbError,
) -> Result<ArrayRef, HdbError> {
    let target = column_arrow_type(ty);
    match ty {
        ColumnType::Timestamp => {
            let mut v: Vec<Option<i64>> = Vec::with_capacity(src.len());
            for i in 0..src.len() {
                if src.is_null(i) {
                    if is_time {
                        return Err(at(i, "empty time".into()));
                    }
                    v.push(None);
                    continue;
                }
                v.push(Some(parse_time(src.value(i), tz).map_err(|e| at(i, e))?));
            }
            Ok(Arc::new(TimestampNanosecondArray::from(v)))
        }
        ColumnType::Str => Ok(Arc::new(src.clone())),
        _ => {
            let opts = CastOptions {
                safe: true,
                ..Default::default()
            };
            let out = cast_with_options(src, &target, &opts)
                .map_err(|e| at(0, format!("cannot convert to {target}: {e}")))?;
            // A safe cast turns what does not parse into null: find the first.
            if out.null_count() != src.null_count() {
                for i in 0..src.len() {
                    if src.is_valid(i) && out.is_null(i) {
                        return Err(at(
                            i,
                            format!("'{}' is not a valid {}", src.value(i), ty.name()),
                        ));
                    }
                }
            }
            Ok(out)
        }
    }
}

/// The Arrow type of a table column (as `arrow_schema(def)` has it).
fn column_arrow_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
        ColumnType::Symbol => {
            DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
        }
        ColumnType::F64 => DataType::Float64,
        ColumnType::I64 => DataType::Int64,
        ColumnType::I32 => DataType::Int32,
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Str => DataType::Utf8,
        ColumnType::Bytes => DataType::Binary,
    }
}

/// A CSV time: integer nanoseconds since the epoch; an RFC 3339 / ISO 8601
/// timestamp with an offset (`2024-01-02T09:30:00.5Z`, `...+01:00`); or one
/// without, taken as local time in `tz`.
pub(crate) fn parse_time(s: &str, tz: Tz) -> Result<i64, String> {
    let s = s.trim();
    if !s.is_empty()
        && s.trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return s
            .parse::<i64>()
            .map_err(|e| format!("'{s}' is not a nanosecond count: {e}"));
    }
    let nanos = |dt: DateTime<chrono::Utc>| {
        dt.timestamp_nanos_opt()
            .ok_or_else(|| format!("'{s}' is outside the nanosecond range (1677..2262)"))
    };
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return nanos(dt.to_utc());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f%:z",
        "%Y-%m-%dT%H:%M:%S%.f%z",
        "%Y-%m-%d %H:%M:%S%.f%z",
    ] {
        if let Ok(dt) = DateTime::parse_from_str(s, f) {
            return nanos(dt.to_utc());
        }
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(ndt) = NaiveDateTime::parse_from_str(s, f) {
            return match tz.from_local_datetime(&ndt) {
                chrono::LocalResult::Single(dt) => nanos(dt.to_utc()),
                chrono::LocalResult::Ambiguous(..) => Err(format!(
                    "'{s}' is ambiguous in {tz} (a clock change): give its offset"
                )),
                chrono::LocalResult::None => {
                    Err(format!("'{s}' does not exist in {tz} (a clock change)"))
                }
            };
        }
    }
    Err(format!(
        "'{s}' is not a time (nanoseconds since the epoch, or YYYY-MM-DDTHH:MM:SS[.f][Z|±HH:MM])"
    ))
}

fn read_parquet(path: &Path, def: &TableDef) -> Result<Vec<RecordBatch>, HdbError> {
    let file = File::open(path).map_err(|e| HdbError::io(path, "open", e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| HdbError::parquet(path, "read footer", e))?
        .with_batch_size(IMPORT_BATCH_ROWS);
    let src_schema: SchemaRef = builder.schema().clone();
    let names: Vec<String> = src_schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let col_of = match_columns(path, def, &names)?;
    // Types first, so that a file that cannot fit fails before it is read.
    for (ci, c) in def.columns.iter().enumerate() {
        let from = src_schema.field(col_of[ci]).data_type();
        let to = column_arrow_type(c.ty);
        if !can_cast_types(from, &to) {
            return Err(import_err(
                path,
                format!(
                    "column '{}' is {from}, which does not convert to {}",
                    c.name,
                    c.ty.name()
                ),
            ));
        }
    }
    let schema = tickdb_core::store::arrow_schema(def);
    let reader = builder
        .build()
        .map_err(|e| HdbError::parquet(path, "read", e))?;
    let opts = CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| import_err(path, format!("read: {e}")))?;
        let mut cols = Vec::with_capacity(def.columns.len());
        for (ci, c) in def.columns.iter().enumerate() {
            let a = batch.column(col_of[ci]);
            let to = column_arrow_type(c.ty);
            let conv = match a.data_type() {
                // A zoned timestamp is an instant: keep it, drop the zone
                // (arrow's cast would shift it to the zone's wall clock).
                DataType::Timestamp(_, Some(z)) if c.ty == ColumnType::Timestamp => {
                    let zoned = DataType::Timestamp(TimeUnit::Nanosecond, Some(z.clone()));
                    cast_with_options(a, &zoned, &opts).map(|x| {
                        Arc::new(
                            x.as_primitive::<TimestampNanosecondType>()
                                .clone()
                                .with_timezone_opt(None::<String>),
                        ) as ArrayRef
                    })
                }
                t if *t == to => Ok(a.clone()),
                _ => cast_with_options(a, &to, &opts),
            };
            cols.push(conv.map_err(|e| {
                import_err(path, format!("column '{}' to {}: {e}", c.name, c.ty.name()))
            })?);
        }
        out.push(
            RecordBatch::try_new(schema.clone(), cols)
                .map_err(|e| HdbError::arrow(path, "build batch", e))?,
        );
    }
    Ok(out)
}

/// Splits rows by the date of their time in `tz`.
fn split_by_date(
    path: &Path,
    def: &TableDef,
    tz: Tz,
    batches: &[RecordBatch],
) -> Result<BTreeMap<NaiveDate, Vec<RecordBatch>>, HdbError> {
    let mut out: BTreeMap<NaiveDate, Vec<RecordBatch>> = BTreeMap::new();
    let mut row0 = 0u64;
    for b in batches {
        let t = b
            .column(def.time_column)
            .as_primitive::<TimestampNanosecondType>();
        let mut dates: Vec<NaiveDate> = Vec::with_capacity(b.num_rows());
        // Consecutive rows mostly share a day: remember the last day's
        // bounds in UTC and convert only when a time leaves them.
        let mut cache: Option<(i64, i64, NaiveDate)> = None;
        for i in 0..b.num_rows() {
            if t.is_null(i) {
                return Err(import_err(
                    path,
                    format!("row {}: no time", row0 + i as u64 + 1),
                ));
            }
            let v = t.value(i);
            let d = match cache {
                Some((lo, hi, d)) if lo <= v && v < hi => d,
                _ => {
                    let d = tz.timestamp_nanos(v).date_naive();
                    cache = day_bounds(tz, d).map(|(lo, hi)| (lo, hi, d));
                    d
                }
            };
            dates.push(d);
        }
        row0 += b.num_rows() as u64;
        let Some(first) = dates.first() else {
            continue;
        };
        if dates.iter().all(|d| d == first) {
            out.entry(*first).or_default().push(b.clone());
            continue;
        }
        let mut rows_of: BTreeMap<NaiveDate, Vec<u32>> = BTreeMap::new();
        for (i, d) in dates.iter().enumerate() {
            rows_of.entry(*d).or_default().push(i as u32);
        }
        for (d, rows) in rows_of {
            let idx = UInt32Array::from(rows);
            let cols = b
                .columns()
                .iter()
                .map(|c| arrow_select::take::take(c, &idx, None))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| HdbError::arrow(path, "split by date", e))?;
            out.entry(d).or_default().push(
                RecordBatch::try_new(b.schema(), cols)
                    .map_err(|e| HdbError::arrow(path, "split by date", e))?,
            );
        }
    }
    Ok(out)
}

/// The UTC nanosecond bounds [start, end) of `date` in `tz`, when both
/// midnights exist (a zone may skip midnight on a clock change: then no
/// cache, every time is converted).
fn day_bounds(tz: Tz, date: NaiveDate) -> Option<(i64, i64)> {
    let start = tz
        .from_local_datetime(&date.and_hms_opt(0, 0, 0)?)
        .earliest()?
        .timestamp_nanos_opt()?;
    let next = date.succ_opt()?;
    let end = tz
        .from_local_datetime(&next.and_hms_opt(0, 0, 0)?)
        .earliest()?
        .timestamp_nanos_opt()?;
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times() {
        let tz = chrono_tz::America::New_York;
        assert_eq!(
            parse_time("1700000000000000000", tz),
            Ok(1_700_000_000_000_000_000)
        );
        assert_eq!(parse_time("-5", tz), Ok(-5));
        assert_eq!(parse_time("1970-01-01T00:00:01Z", tz), Ok(1_000_000_000));
        assert_eq!(
            parse_time("1970-01-01T00:00:00.5+00:00", tz),
            Ok(500_000_000)
        );
        // Naive: New York local time (EST, UTC-5).
        assert_eq!(
            parse_time("1970-01-01T00:00:00", tz),
            Ok(5 * 3600 * 1_000_000_000)
        );
        assert_eq!(
            parse_time("1970-01-01 00:00:00.25", chrono_tz::UTC),
            Ok(250_000_000)
        );
        assert!(parse_time("yesterday", tz).is_err());
        // 02:30 on the spring-forward day does not exist in New York.
        assert!(parse_time("2024-03-10T02:30:00", tz).is_err());
    }
}
