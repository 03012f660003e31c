//! The HDB's names and paths (documented in `docs/history.md`, "Layout"):
//!
//! ```text
//! ROOT/<table>/date=YYYY-MM-DD/part-NNNNN.parquet     committed
//! ROOT/<table>/.tmp-date=YYYY-MM-DD-<pid>-<n>/        staging (never read)
//! ROOT/<table>/.commit.lock                           serialises commits
//! ```
//!
//! Everything a reader globs (`*/date=*/*.parquet`) is committed; anything
//! that starts with a dot is the writer's own and invisible to readers.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use chrono::{Datelike, NaiveDate};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::error::HdbError;

/// Prefix of a committed date directory's name.
pub const DATE_DIR_PREFIX: &str = "date=";
/// Prefix of a staging directory's name (`.tmp-date=YYYY-MM-DD-<pid>-<n>`).
pub const STAGING_PREFIX: &str = ".tmp-";
/// The lock file in a table directory that commits into an existing date
/// directory hold, so two writers of the same source cannot both add it.
pub const COMMIT_LOCK: &str = ".commit.lock";
/// Digits of a part number: `part-00000.parquet` .. `part-99999.parquet`.
pub const PART_DIGITS: usize = 5;
/// The largest part number the name has room for.
pub const PART_NUMBER_MAX: u32 = 99_999;

/// Key-value metadata keys every part carries.
pub const KV_VERSION: &str = "tickdb.version";
pub const KV_TABLE: &str = "tickdb.table";
pub const KV_DATE: &str = "tickdb.date";
pub const KV_ROWS: &str = "tickdb.rows";
pub const KV_SOURCE: &str = "tickdb.source";
/// The value of `tickdb.version` this crate writes and reads.
pub const LAYOUT_VERSION: &str = "1";

/// `ROOT/<table>`.
pub fn table_dir(root: &Path, table: &str) -> PathBuf {
    root.join(table)
}

/// `date=YYYY-MM-DD`.
pub fn date_dir_name(date: NaiveDate) -> String {
    format!("{DATE_DIR_PREFIX}{}", format_date(date))
}

/// `YYYY-MM-DD`. Only years 0..=9999 are written (`format_date` is the
/// inverse of the strict `parse_date`).
pub fn format_date(date: NaiveDate) -> String {
    format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day())
}

/// `ROOT/<table>/date=YYYY-MM-DD`.
pub fn date_dir(root: &Path, table: &str, date: NaiveDate) -> PathBuf {
    table_dir(root, table).join(date_dir_name(date))
}

/// Parses exactly `YYYY-MM-DD` (zero-padded, a real date); chrono alone
/// would also take `2024-1-2`, which is not the layout's name.
pub fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_digit());
    if !digits(0..4) || !digits(5..7) || !digits(8..10) {
        return None;
    }
    let y: i32 = s[0..4].parse().ok()?;
    let m: u32 = s[5..7].parse().ok()?;
    let d: u32 = s[8..10].parse().ok()?;
    NaiveDate::from_ymd_opt(y, m, d)
}

/// The date of a committed date directory's name (`date=YYYY-MM-DD`).
pub fn parse_date_dir(name: &str) -> Option<NaiveDate> {
    parse_date(name.strip_prefix(DATE_DIR_PREFIX)?)
}

/// `part-NNNNN.parquet`.
pub fn part_file_name(n: u32) -> String {
    format!("part-{n:0width$}.parquet", width = PART_DIGITS)
}

/// The number of a part file's name, exactly `part-NNNNN.parquet`.
pub fn parse_part_file_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("part-")?.strip_suffix(".parquet")?;
    if digits.len() != PART_DIGITS || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

const UNIX_EPOCH_DAY: NaiveDate = match NaiveDate::from_ymd_opt(1970, 1, 1) {
    Some(d) => d,
    None => panic!("1970-01-01 is a date"),
};

/// The date `days` after 1970-01-01 (Arrow's Date32). Days beyond chrono's
/// range (about ±262,000 years) clamp to `NaiveDate::MIN` / `MAX`.
pub fn date_from_days(days: i32) -> NaiveDate {
    UNIX_EPOCH_DAY
        .checked_add_signed(chrono::Duration::days(i64::from(days)))
        .unwrap_or(if days < 0 {
            NaiveDate::MIN
        } else {
            NaiveDate::MAX
        })
}

/// Days from 1970-01-01 to `d` (Arrow's Date32); always fits an i32.
pub fn days_from_date(d: NaiveDate) -> i32 {
    // chrono's whole range is ±262,143 years, under 1e8 days.
    d.signed_duration_since(UNIX_EPOCH_DAY).num_days() as i32
}

/// Names of the entries of `dir`, as Strings; an entry whose name is not
/// UTF-8 comes back as its lossy form so that callers can name it in errors.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<(String, PathBuf, bool)>, HdbError> {
    let rd = std::fs::read_dir(dir).map_err(|e| HdbError::io(dir, "read directory", e))?;
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| HdbError::io(dir, "read directory", e))?;
        let ft = ent
            .file_type()
            .map_err(|e| HdbError::io(ent.path(), "stat", e))?;
        out.push((
            ent.file_name().to_string_lossy().into_owned(),
            ent.path(),
            ft.is_dir(),
        ));
    }
    out.sort();
    Ok(out)
}

/// The committed dates of `table`: its `date=YYYY-MM-DD` directories. Dot
/// entries (staging, the commit lock) are ignored; any other entry is an
/// error naming it, since a reader's glob would trip over it too.
pub fn committed_dates(root: &Path, table: &str) -> Result<BTreeSet<NaiveDate>, HdbError> {
    let dir = table_dir(root, table);
    if !dir.exists() {
        return Ok(BTreeSet::new());
    }
    let mut out = BTreeSet::new();
    for (name, path, is_dir) in list_dir(&dir)? {
        if name.starts_with('.') {
            continue;
        }
        match parse_date_dir(&name) {
            Some(d) if is_dir => {
                out.insert(d);
            }
            Some(_) => {
                return Err(HdbError::BadName {
                    path,
                    what: "a date entry that is not a directory".into(),
                })
            }
            None => {
                return Err(HdbError::BadName {
                    path,
                    what: "not a date directory (date=YYYY-MM-DD)".into(),
                })
            }
        }
    }
    Ok(out)
}

/// The part files of a date directory, by number. Other names are left
/// out (verify reports them).
pub(crate) fn parts(dir: &Path) -> Result<Vec<(u32, PathBuf)>, HdbError> {
    let mut out: Vec<(u32, PathBuf)> = list_dir(dir)?
        .into_iter()
        .filter(|(_, _, is_dir)| !is_dir)
        .filter_map(|(name, path, _)| parse_part_file_name(&name).map(|n| (n, path)))
        .collect();
    out.sort();
    Ok(out)
}

/// Reads a part's footer (without the page index).
pub(crate) fn read_footer(path: &Path) -> Result<ParquetMetaData, HdbError> {
    let f = File::open(path).map_err(|e| HdbError::io(path, "open", e))?;
    ParquetMetaDataReader::new()
        .parse_and_finish(&f)
        .map_err(|e| HdbError::parquet(path, "read footer", e))
}

/// The value of a key in a footer's key-value metadata.
pub(crate) fn kv<'a>(md: &'a ParquetMetaData, key: &str) -> Option<&'a str> {
    md.file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_deref())
}

/// The part of a date directory whose `tickdb.source` is `source`, if any.
/// A part whose footer cannot be read is an error: deciding "not there"
/// from a damaged file could commit the same rows twice.
pub(crate) fn find_source(dir: &Path, source: &str) -> Result<Option<PathBuf>, HdbError> {
    if !dir.exists() {
        return Ok(None);
    }
    for (_, path) in parts(dir)? {
        let md = read_footer(&path)?;
        if kv(&md, KV_SOURCE) == Some(source) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// Whether a committed part of `table` on `date` has `tickdb.source` =
/// `source` (the idempotency key: `eod:<seq>` or `import:<name>:<size>`).
pub fn has_source(
    root: &Path,
    table: &str,
    date: NaiveDate,
    source: &str,
) -> Result<bool, HdbError> {
    Ok(find_source(&date_dir(root, table, date), source)?.is_some())
}

/// Every committed part of `table`, per date, in part-number order: what a
/// reader of the HDB reads (date directories only; staging and foreign
/// files left out).
pub fn committed_parts(
    root: &Path,
    table: &str,
) -> Result<std::collections::BTreeMap<NaiveDate, Vec<PathBuf>>, HdbError> {
    let mut out = std::collections::BTreeMap::new();
    for date in committed_dates(root, table)? {
        let files: Vec<PathBuf> = parts(&date_dir(root, table, date))?
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        if !files.is_empty() {
            out.insert(date, files);
        }
    }
    Ok(out)
}

/// A part file's `tickdb.source` (None for a file written by another tool).
pub fn part_source(path: &Path) -> Result<Option<String>, HdbError> {
    let md = read_footer(path)?;
    Ok(kv(&md, KV_SOURCE).map(str::to_string))
}

/// Flushes a directory's entries (new names, renames) to disk.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), HdbError> {
    let f = File::open(dir).map_err(|e| HdbError::io(dir, "open directory", e))?;
    f.sync_all()
        .map_err(|e| HdbError::io(dir, "fsync directory", e))
}

/// Removes leftover staging directories (`.tmp-*`, left by a crash or a
/// killed writer) under every table directory of `root`, and returns them.
/// Only run it when no writer is staging into `root`: a live writer's
/// staging directory looks the same as a crashed one's.
/// Whether a staging name (`.tmp-date=YYYY-MM-DD-<pid>-<n>`) belongs to
/// another process that is still running: rdbs sharing one HDB must not
/// remove each other's work in progress.
fn staging_owner_alive(name: &str) -> bool {
    let mut fields = name.rsplit('-');
    let _n = fields.next();
    let Some(pid) = fields.next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists()
}

pub fn cleanup_staging(root: &Path) -> Result<Vec<PathBuf>, HdbError> {
    let mut removed = Vec::new();
    if !root.exists() {
        return Ok(removed);
    }
    for (name, tdir, is_dir) in list_dir(root)? {
        if !is_dir || name.starts_with('.') {
            continue;
        }
        for (name, path, is_dir) in list_dir(&tdir)? {
            if !name.starts_with(STAGING_PREFIX) {
                continue;
            }
            if staging_owner_alive(&name) {
                // Another process sharing this HDB is writing it now.
                continue;
            }
            let r = if is_dir {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            r.map_err(|e| HdbError::io(&path, "remove staging", e))?;
            tracing::info!(path = %path.display(), "removed uncommitted HDB staging left by a crash");
            removed.push(path);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let d = NaiveDate::from_ymd_opt(2024, 3, 9).unwrap();
        assert_eq!(date_dir_name(d), "date=2024-03-09");
        assert_eq!(parse_date_dir("date=2024-03-09"), Some(d));
        assert_eq!(parse_date_dir("date=2024-3-09"), None);
        assert_eq!(parse_date_dir("date=2024-02-30"), None);
        assert_eq!(parse_date_dir(".tmp-date=2024-03-09-1-0"), None);
        assert_eq!(part_file_name(7), "part-00007.parquet");
        assert_eq!(parse_part_file_name("part-00007.parquet"), Some(7));
        assert_eq!(parse_part_file_name("part-7.parquet"), None);
        assert_eq!(parse_part_file_name("part-00007.parquet.bak"), None);
    }

    #[test]
    fn days() {
        let d = NaiveDate::from_ymd_opt(2024, 1, 2).unwrap();
        assert_eq!(date_from_days(days_from_date(d)), d);
        assert_eq!(days_from_date(UNIX_EPOCH_DAY), 0);
        assert_eq!(date_from_days(i32::MAX), NaiveDate::MAX);
        assert_eq!(date_from_days(i32::MIN), NaiveDate::MIN);
    }
}
