//! `verify`: checks every entry of an HDB against the layout and every part
//! against its table, reading each part fully, and optionally compares the
//! rows of each end-of-day part with the rows the journal holds for that
//! day. It never changes anything and reports every problem it finds, each
//! naming its path, rather than stopping at the first.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{Array, RecordBatch};
use chrono::NaiveDate;
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tickdb_core::{Schema, TableDef, TableKind};

use crate::error::HdbError;
use crate::layout::{
    format_date, kv, list_dir, parse_date_dir, parse_part_file_name, COMMIT_LOCK, KV_DATE, KV_ROWS,
    KV_SOURCE, KV_TABLE, KV_VERSION, LAYOUT_VERSION, STAGING_PREFIX,
};
use crate::write::part_arrow_schema;

/// Rows read at a time while checking a part.
const VERIFY_BATCH_ROWS: usize = 64 * 1024;

/// One thing wrong, at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: PathBuf,
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.what)
    }
}

/// One comparison of an end-of-day source's rows with the journal: the
/// rows of `table` in records with `after_seq < seq < eod_seq`.
#[derive(Debug, Clone)]
pub struct JournalCheck {
    pub table: String,
    /// `eod:<eod_seq>`.
    pub source: String,
    /// The dates whose parts carry this source.
    pub dates: Vec<NaiveDate>,
    /// The previous end-of-day sequence number of this table in the HDB (0
    /// if none).
    pub after_seq: u64,
    pub eod_seq: u64,
    /// Rows of the source's parts.
    pub hdb_rows: u64,
    /// Rows in the journal; None when the journal no longer (or does not
    /// yet) hold the whole range, so nothing was compared.
    pub journal_rows: Option<u64>,
    /// Why it was not compared, or "".
    pub note: String,
}

/// What `verify` found.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    pub root: PathBuf,
    /// Part files opened.
    pub files_checked: u64,
    /// Rows read from them.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    pub problems: Vec<Problem>,
    /// The journal comparisons (empty without a journal).
    pub journal_checked: Vec<JournalCheck>,
}

impl VerifyReport {
    /// No problems found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

struct PartFile<'a> {
    def: &'a TableDef,
    date: NaiveDate,
    path: PathBuf,
    bytes: u64,
}

/// What a part's check yields for the journal comparison.
struct PartSeen {
    table: String,
    date: NaiveDate,
    source: Option<String>,
    rows: u64,
}

/// Checks the HDB under `root` against `schema` (see `docs/history.md`,
/// "Verify"); with `journal_dir`, also compares each end-of-day source's
/// rows with the journal's, where the journal still holds that day. Err
/// only when `root` or the journal cannot be read at all; everything else
/// is a `Problem` in the report.
pub fn verify(
    root: &Path,
    schema: &Schema,
    journal_dir: Option<&Path>,
    progress: bool,
) -> Result<VerifyReport, HdbError> {
    let mut rep = VerifyReport {
        root: root.to_path_buf(),
        ..Default::default()
    };
    let mut files: Vec<PartFile<'_>> = Vec::new();
    walk(root, schema, &mut files, &mut rep.problems)?;

    let total: u64 = files.iter().map(|f| f.bytes).sum();
    let bar = if progress {
        let b = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(
            "verify {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ) {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let mut seen = Vec::with_capacity(files.len());
    for f in &files {
        bar.set_message(f.path.display().to_string());
        rep.files_checked += 1;
        rep.bytes += f.bytes;
        if let Some(s) = check_part(f, &mut rep.problems) {
            rep.rows += s.rows;
            seen.push(s);
        }
        bar.inc(f.bytes);
    }
    bar.finish_and_clear();

    if let Some(jdir) = journal_dir {
        check_journal(root, schema, jdir, &seen, &mut rep)?;
    }
    Ok(rep)
}

fn problem(problems: &mut Vec<Problem>, path: &Path, what: impl Into<String>) {
    problems.push(Problem {
        path: path.to_path_buf(),
        what: what.into(),
    });
}

/// Checks names and collects the part files to read.
fn walk<'a>(
    root: &Path,
    schema: &'a Schema,
    files: &mut Vec<PartFile<'a>>,
    problems: &mut Vec<Problem>,
) -> Result<(), HdbError> {
    for (name, tdir, is_dir) in list_dir(root)? {
        let Some(def) = schema.table(&name) else {
            problem(problems, &tdir, "unknown table (not in the schema)");
            continue;
        };
        if !is_dir {
            problem(problems, &tdir, "a table entry that is not a directory");
            continue;
        }
        if def.kind != TableKind::Append {
            problem(
                problems,
                &tdir,
                "a keyed table (only append tables belong in the HDB)",
            );
        }
        let entries = match list_dir(&tdir) {
            Ok(e) => e,
            Err(e) => {
                problem(problems, &tdir, e.to_string());
                continue;
            }
        };
        for (name, ddir, is_dir) in entries {
            if name.starts_with(STAGING_PREFIX) {
                problem(
                    problems,
                    &ddir,
                    "uncommitted staging left by a crash (cleanup_staging removes it)",
                );
                continue;
            }
            if name == COMMIT_LOCK && !is_dir {
                continue;
            }
            let date = match parse_date_dir(&name) {
                Some(d) if is_dir => d,
                Some(_) => {
                    problem(problems, &ddir, "a date entry that is not a directory");
                    continue;
                }
                None => {
                    problem(problems, &ddir, "not a date directory (date=YYYY-MM-DD)");
                    continue;
                }
            };
            let parts = match list_dir(&ddir) {
                Ok(e) => e,
                Err(e) => {
                    problem(problems, &ddir, e.to_string());
                    continue;
                }
            };
            if parts.is_empty() {
                problem(problems, &ddir, "an empty date directory");
            }
            for (name, path, is_dir) in parts {
                if is_dir || parse_part_file_name(&name).is_none() {
                    problem(
                        problems,
                        &path,
                        "foreign entry (only part-NNNNN.parquet files belong in a date directory)",
                    );
                    continue;
                }
                let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                files.push(PartFile {
                    def,
                    date,
                    path,
                    bytes,
                });
            }
        }
    }
    Ok(())
}

/// A row's sort key: (sym, time), null sym first, null time as the least.
type Key = (Option<Vec<u8>>, i64);

/// Checks one part; None when it could not be read far enough to count.
fn check_part(f: &PartFile<'_>, problems: &mut Vec<Problem>) -> Option<PartSeen> {
    let path = &f.path;
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) => {
            problem(problems, path, format!("open: {e}"));
            return None;
        }
    };
    let builder = match ParquetRecordBatchReaderBuilder::try_new(file) {
        Ok(b) => b.with_batch_size(VERIFY_BATCH_ROWS),
        Err(e) => {
            problem(
                problems,
                path,
                format!("unreadable footer (truncated or corrupt): {e}"),
            );
            return None;
        }
    };
    let md = builder.metadata().clone();
    let footer_rows = md.file_metadata().num_rows();
    let def = f.def;

    // Schema: names and types, in order.
    let want = part_arrow_schema(def);
    let got = builder.schema().clone();
    let names = |s: &arrow_schema::Schema| {
        s.fields()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.data_type()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let schema_ok = want.fields().len() == got.fields().len()
        && want
            .fields()
            .iter()
            .zip(got.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    if !schema_ok {
        problem(
            problems,
            path,
            format!(
                "schema ({}) is not table '{}''s ({})",
                names(&got),
                def.name,
                names(&want)
            ),
        );
    }

    // Key-value metadata.
    match kv(&md, KV_VERSION) {
        Some(LAYOUT_VERSION) => {}
        v => problem(
            problems,
            path,
            format!("{KV_VERSION} is {}, not \"{LAYOUT_VERSION}\"", show(v)),
        ),
    }
    match kv(&md, KV_TABLE) {
        Some(t) if t == def.name => {}
        v => problem(
            problems,
            path,
            format!("{KV_TABLE} is {}, the directory is '{}'", show(v), def.name),
        ),
    }
    let dir_date = format_date(f.date);
    match kv(&md, KV_DATE) {
        Some(d) if d == dir_date => {}
        v => problem(
            problems,
            path,
            format!("{KV_DATE} is {}, the directory is {dir_date}", show(v)),
        ),
    }
    let kv_rows = kv(&md, KV_ROWS);
    match kv_rows.map(|s| s.parse::<i64>()) {
        Some(Ok(n)) if n == footer_rows => {}
        _ => problem(
            problems,
            path,
            format!(
                "{KV_ROWS} is {}, the footer says {footer_rows} rows",
                show(kv_rows)
            ),
        ),
    }
    let source = kv(&md, KV_SOURCE).map(str::to_string);
    if source.is_none() {
        problem(problems, path, format!("{KV_SOURCE} is missing"));
    }

    // Every row: count, and order by (sym, time) across batch boundaries.
    let reader = match builder.build() {
        Ok(r) => r,
        Err(e) => {
            problem(problems, path, format!("cannot read: {e}"));
            return None;
        }
    };
    let mut rows: u64 = 0;
    let mut prev: Option<Key> = None;
    let mut unsorted_reported = false;
    for batch in reader {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                problem(problems, path, format!("cannot read row {rows} on: {e}"));
                return None;
            }
        };
        if schema_ok && !unsorted_reported {
            if let Some(what) = check_sorted(def, &batch, rows, &mut prev) {
                problem(problems, path, what);
                unsorted_reported = true;
            }
        }
        rows += batch.num_rows() as u64;
    }
    if rows as i64 != footer_rows {
        problem(
            problems,
            path,
            format!("{rows} rows read, the footer says {footer_rows}"),
        );
    }
    Some(PartSeen {
        table: def.name.clone(),
        date: f.date,
        source,
        rows,
    })
}

/// Checks that `batch` continues the (sym, time) order after `prev`;
/// returns what is wrong at the first row out of order.
fn check_sorted(
    def: &TableDef,
    batch: &RecordBatch,
    first_row: u64,
    prev: &mut Option<Key>,
) -> Option<String> {
    let times = batch
        .column(def.time_column)
        .as_primitive_opt::<TimestampNanosecondType>()?;
    let syms = match def.sym_column {
        Some(s) => Some(batch.column(s).as_string_opt::<i32>()?),
        None => None,
    };
    for i in 0..batch.num_rows() {
        let t = if times.is_valid(i) {
            times.value(i)
        } else {
            i64::MIN
        };
        let s = syms.and_then(|s| s.is_valid(i).then(|| s.value(i).as_bytes()));
        if let Some((ps, pt)) = prev.as_ref() {
            let ord = ps.as_deref().cmp(&s).then(pt.cmp(&t));
            if ord == std::cmp::Ordering::Greater {
                return Some(format!(
                    "rows are not sorted by (sym, time): row {} ({}, {t}) comes after ({}, {pt})",
                    first_row + i as u64,
                    show_sym(s),
                    show_sym(ps.as_deref()),
                ));
            }
        }
        // Only keep the bytes when the symbol changes.
        match prev {
            Some((ps, pt)) if ps.as_deref() == s => *pt = t,
            _ => *prev = Some((s.map(<[u8]>::to_vec), t)),
        }
    }
    None
}

/// A metadata value for a message: quoted, or "missing".
fn show(v: Option<&str>) -> String {
    v.map_or_else(|| "missing".to_string(), |s| format!("\"{s}\""))
}

fn show_sym(s: Option<&[u8]>) -> String {
    match s {
        Some(b) => format!("'{}'", String::from_utf8_lossy(b)),
        None => "null".into(),
    }
}

/// `eod:<seq>` → seq.
fn eod_seq(source: &str) -> Option<u64> {
    source.strip_prefix("eod:")?.parse().ok()
}

/// The range of one end-of-day source: rows of the table in records with
/// `after < seq < eod`.
struct Range {
    after: u64,
    eod: u64,
    hdb_rows: u64,
    dates: Vec<NaiveDate>,
    journal_rows: u64,
}

fn check_journal(
    root: &Path,
    schema: &Schema,
    jdir: &Path,
    seen: &[PartSeen],
    rep: &mut VerifyReport,
) -> Result<(), HdbError> {
    // table → eod seq → (rows, dates), over all dates.
    let mut by_table: BTreeMap<&str, BTreeMap<u64, (u64, Vec<NaiveDate>)>> = BTreeMap::new();
    for s in seen {
        if let Some(seq) = s.source.as_deref().and_then(eod_seq) {
            let e = by_table
                .entry(s.table.as_str())
                .or_default()
                .entry(seq)
                .or_default();
            e.0 += s.rows;
            e.1.push(s.date);
        }
    }
    if by_table.is_empty() {
        return Ok(());
    }
    // Each table's ranges, in seq order: (previous eod, this eod).
    let mut ranges: BTreeMap<&str, Vec<Range>> = BTreeMap::new();
    for (t, m) in &by_table {
        let mut after = 0;
        let v = ranges.entry(t).or_default();
        for (&eod, (rows, dates)) in m {
            v.push(Range {
                after,
                eod,
                hdb_rows: *rows,
                dates: dates.clone(),
                journal_rows: 0,
            });
            after = eod;
        }
    }
    let last_eod = ranges
        .values()
        .flat_map(|v| v.last().map(|r| r.eod))
        .max()
        .unwrap_or(0);

    let mut undecodable: u64 = 0;
    let mut first_undecodable: Option<(u64, String)> = None;
    let mut check = |seq: u64, _kind: u8, payload: &[u8]| -> Result<(), String> {
        if seq >= last_eod {
            return Ok(());
        }
        // Does any table want this record?
        let wanted = ranges.values().any(|v| range_of(v, seq).is_some());
        if !wanted {
            return Ok(());
        }
        // Decode under the schema; a record of a table the schema no longer
        // has (or an older layout of one) still decodes without it.
        let batches = match tickdb_core::codec::decode(payload, Some(schema))
            .or_else(|_| tickdb_core::codec::decode(payload, None))
        {
            Ok(b) => b,
            Err(e) => {
                undecodable += 1;
                if first_undecodable.is_none() {
                    first_undecodable = Some((seq, e.to_string()));
                }
                return Ok(());
            }
        };
        for b in batches {
            if let Some(v) = ranges.get_mut(b.table.as_str()) {
                if let Some(i) = range_of(v, seq) {
                    v[i].journal_rows += b.rows as u64;
                }
            }
        }
        Ok(())
    };
    let jrep =
        tickdb_journal::verify_payloads(jdir, &mut check).map_err(|e| HdbError::Journal {
            path: jdir.to_path_buf(),
            source: e,
        })?;
    let damaged = !jrep.problems.is_empty() || undecodable > 0;
    for (t, v) in ranges {
        for r in v {
            let held =
                jrep.first_seq > 0 && jrep.first_seq <= r.after + 1 && jrep.last_seq >= r.eod;
            let note = if !held {
                format!(
                    "the journal holds seq {}..={}, not all of {}..={}",
                    jrep.first_seq,
                    jrep.last_seq,
                    r.after + 1,
                    r.eod
                )
            } else if damaged {
                format!(
                    "the journal has {} problems and {undecodable} undecodable records{}: not compared",
                    jrep.problems.len(),
                    first_undecodable
                        .as_ref()
                        .map(|(s, e)| format!(" (first: seq {s}: {e})"))
                        .unwrap_or_default()
                )
            } else {
                String::new()
            };
            let compared = held && !damaged;
            if compared && r.journal_rows != r.hdb_rows {
                let dates: Vec<String> = r.dates.iter().map(|d| format_date(*d)).collect();
                let path = match r.dates.first() {
                    Some(d) => crate::layout::date_dir(root, t, *d),
                    None => crate::layout::table_dir(root, t),
                };
                problem(
                    &mut rep.problems,
                    &path,
                    format!(
                        "source eod:{} ({}): {} rows in the HDB, {} rows of '{t}' in the journal between seq {} and {} (exclusive)",
                        r.eod,
                        dates.join(", "),
                        r.hdb_rows,
                        r.journal_rows,
                        r.after,
                        r.eod
                    ),
                );
            }
            rep.journal_checked.push(JournalCheck {
                table: t.to_string(),
                source: format!("eod:{}", r.eod),
                dates: r.dates,
                after_seq: r.after,
                eod_seq: r.eod,
                hdb_rows: r.hdb_rows,
                journal_rows: compared.then_some(r.journal_rows),
                note,
            });
        }
    }
    Ok(())
}

/// The index of the range with `after < seq < eod`, if any.
fn range_of(v: &[Range], seq: u64) -> Option<usize> {
    let i = v.partition_point(|r| r.eod <= seq);
    (i < v.len() && v[i].after < seq).then_some(i)
}
