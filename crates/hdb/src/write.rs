//! Writing a table's day as a Parquet part and committing it atomically.
//!
//! A part is written and fsynced in a dot-prefixed staging directory that
//! no reader's glob matches, then published with one no-replace rename:
//! the whole staging directory becomes `date=YYYY-MM-DD` when the date is
//! new, or the file becomes the date's next `part-NNNNN.parquet`. Either
//! way a reader sees the part whole or not at all, and a crash leaves only
//! a `.tmp-*` directory behind (see `cleanup_staging`). The part's
//! `tickdb.source` is the idempotency key: a source already committed is
//! never written again.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use chrono::{Datelike, NaiveDate};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use tickdb_core::{TableDef, TableKind};

use crate::error::HdbError;
use crate::layout::{
    date_dir, date_dir_name, find_source, format_date, fsync_dir, part_file_name, parts, table_dir,
    COMMIT_LOCK, KV_DATE, KV_ROWS, KV_SOURCE, KV_TABLE, KV_VERSION, LAYOUT_VERSION,
    PART_NUMBER_MAX, STAGING_PREFIX,
};
use crate::sort::{self, unpack, SortedRows};

/// A row group is closed at the first symbol boundary at or past this many
/// rows: big enough that per-group overhead (footer entries, one seek per
/// column chunk) stays small next to the data.
pub const ROW_GROUP_ROWS_FLOOR: usize = 128 * 1024;
/// No row group holds more rows than this; a longer symbol is cut into
/// pieces of this size. Parquet's own default row group size.
pub const ROW_GROUP_ROWS_CAP: usize = 1024 * 1024;
/// Most rows in one data page: pages are the unit the page index (column
/// index + offset index) prunes on time within a row group.
pub const DATA_PAGE_ROWS_MAX: usize = 8192;
/// Rows the writer encodes at a time; the page row limit is enforced at
/// this granularity, so it must be well under `DATA_PAGE_ROWS_MAX`.
pub const WRITE_BATCH_ROWS: usize = 1024;
/// ZSTD's level: 3 is its default, fast to write and ~as small as gzip.
pub const ZSTD_LEVEL: i32 = 3;
/// Rows gathered into one Arrow batch for the writer: bounds the memory of
/// the sorted copy to one slice, not the day.
pub const GATHER_ROWS: usize = 64 * 1024;

/// How parts are written.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// fsync files and directories before and after the commit (true in
    /// production; tests may turn it off).
    pub fsync: bool,
    /// See `ROW_GROUP_ROWS_FLOOR` (settable so tests can use small numbers).
    pub row_group_rows_floor: usize,
    /// See `ROW_GROUP_ROWS_CAP`.
    pub row_group_rows_cap: usize,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            fsync: true,
            row_group_rows_floor: ROW_GROUP_ROWS_FLOOR,
            row_group_rows_cap: ROW_GROUP_ROWS_CAP,
        }
    }
}

/// What writing a part did.
#[derive(Debug, Clone)]
pub struct PartReport {
    pub table: String,
    pub date: NaiveDate,
    /// The staging path until committed, the final path after.
    pub path: PathBuf,
    pub rows: u64,
    pub row_groups: usize,
    /// Arrow in-memory size of the input: the sum of
    /// `RecordBatch::get_array_memory_size()` over the input batches (a
    /// dictionary shared by several batches counts once per batch).
    pub input_bytes: u64,
    pub file_bytes: u64,
    pub sort_secs: f64,
    /// Gathering, encoding, compressing, writing and fsyncing.
    pub write_secs: f64,
}

/// The result of `stage_day`.
#[derive(Debug)]
pub enum StageOutcome {
    /// Written and synced in staging; `commit` publishes it.
    Staged(Staged),
    /// A part with this source is already committed (its path); nothing
    /// was written.
    AlreadyCommitted(PathBuf),
    /// Zero rows: nothing written.
    Empty,
}

/// The result of `Staged::commit`.
#[derive(Debug)]
pub enum CommitOutcome {
    Committed(PartReport),
    /// Another writer committed the same source first (its part's path);
    /// the staged copy was removed.
    AlreadyCommitted(PathBuf),
}

/// One table's day, written and synced in a staging directory. Dropping it
/// uncommitted removes the staging directory.
#[derive(Debug)]
pub struct Staged {
    staging: PathBuf,
    table_dir: PathBuf,
    final_dir: PathBuf,
    source: String,
    fsync: bool,
    report: PartReport,
    /// Set once the staging directory is gone or handed over.
    done: bool,
}

/// Distinguishes the staging directories of one process.
static STAGING_SEQ: AtomicU64 = AtomicU64::new(0);

/// The Arrow schema of a part: the table's, with the sym column as plain
/// Utf8 (Parquet's dictionary encoding does what Arrow's dictionary did,
/// and every reader maps BYTE_ARRAY/UTF8 to a string).
pub fn part_arrow_schema(def: &TableDef) -> SchemaRef {
    let table = tickdb_core::store::arrow_schema(def);
    let fields: Vec<Field> = table
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if Some(i) == def.sym_column {
                Field::new(f.name(), DataType::Utf8, true)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

/// Checks that `def` can be written to the HDB.
pub(crate) fn check_table(def: &TableDef) -> Result<(), HdbError> {
    let bad = |what: &str| {
        Err(HdbError::Table {
            table: def.name.clone(),
            what: what.into(),
        })
    };
    if def.kind != TableKind::Append {
        return bad("keyed tables are not written to the HDB");
    }
    match def.columns.get(def.time_column) {
        Some(c) if c.ty == tickdb_core::ColumnType::Timestamp => {}
        _ => return bad("its time column is not of type timestamp"),
    }
    if let Some(s) = def.sym_column {
        match def.columns.get(s) {
            Some(c) if c.ty == tickdb_core::ColumnType::Symbol => {}
            _ => return bad("its sym column is not of type symbol"),
        }
    }
    Ok(())
}

/// Writes `batches` (the table's Arrow schema, `arrow_schema(def)`) as one
/// part of `def`'s `date` in a staging directory under `root`, sorted by
/// (sym, time) with row groups following symbol runs. `source` is the
/// idempotency key (`eod:<seq>`, `import:<name>:<size>`): if a committed
/// part of that date already has it, nothing is written.
pub fn stage_day(
    root: &Path,
    def: &TableDef,
    date: NaiveDate,
    source: &str,
    batches: &[RecordBatch],
    opts: &WriteOptions,
) -> Result<StageOutcome, HdbError> {
    check_table(def)?;
    if !(0..=9999).contains(&date.year()) {
        return Err(HdbError::Table {
            table: def.name.clone(),
            what: format!("date {date} is outside years 0000..9999"),
        });
    }
    if opts.row_group_rows_floor == 0
        || opts.row_group_rows_cap == 0
        || opts.row_group_rows_floor > opts.row_group_rows_cap
    {
        return Err(HdbError::Table {
            table: def.name.clone(),
            what: format!(
                "row group floor {} and cap {} must be 1 <= floor <= cap",
                opts.row_group_rows_floor, opts.row_group_rows_cap
            ),
        });
    }
    let final_dir = date_dir(root, &def.name, date);
    if let Some(p) = find_source(&final_dir, source)? {
        return Ok(StageOutcome::AlreadyCommitted(p));
    }
    let table_schema = tickdb_core::store::arrow_schema(def);
    sort::check_input(def, &table_schema, batches)?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if rows == 0 {
        return Ok(StageOutcome::Empty);
    }
    let input_bytes: u64 = batches
        .iter()
        .map(|b| b.get_array_memory_size() as u64)
        .sum();

    let t0 = Instant::now();
    let sorted = sort::sort_rows(def, batches)?;
    let sort_secs = t0.elapsed().as_secs_f64();

    let tdir = table_dir(root, &def.name);
    create_table_dir(root, &tdir, opts.fsync)?;
    let staging = create_staging(&tdir, date)?;
    let mut staged = Staged {
        staging: staging.clone(),
        table_dir: tdir,
        final_dir,
        source: source.to_string(),
        fsync: opts.fsync,
        report: PartReport {
            table: def.name.clone(),
            date,
            path: staging.join(part_file_name(0)),
            rows: rows as u64,
            row_groups: 0,
            input_bytes,
            file_bytes: 0,
            sort_secs,
            write_secs: 0.0,
        },
        done: false,
    };
    // On any error below, dropping `staged` removes the staging directory.
    let t1 = Instant::now();
    let (row_groups, file_bytes) = write_part(
        &staged.report.path,
        def,
        date,
        source,
        batches,
        &sorted,
        opts,
    )?;
    if opts.fsync {
        fsync_dir(&staging)?;
    }
    staged.report.row_groups = row_groups;
    staged.report.file_bytes = file_bytes;
    staged.report.write_secs = t1.elapsed().as_secs_f64();
    Ok(StageOutcome::Staged(staged))
}

fn create_table_dir(root: &Path, tdir: &Path, fsync: bool) -> Result<(), HdbError> {
    if tdir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(tdir).map_err(|e| HdbError::io(tdir, "create directory", e))?;
    if fsync {
        // The new table directory's entry must survive a crash too.
        fsync_dir(root)?;
    }
    Ok(())
}

fn create_staging(tdir: &Path, date: NaiveDate) -> Result<PathBuf, HdbError> {
    let pid = std::process::id();
    loop {
        let n = STAGING_SEQ.fetch_add(1, Ordering::Relaxed);
        let p = tdir.join(format!("{STAGING_PREFIX}{}-{pid}-{n}", date_dir_name(date)));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            // A crashed process with the same pid left it: take the next n.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(HdbError::io(&p, "create staging directory", e)),
        }
    }
}

fn writer_properties(
    def: &TableDef,
    date: NaiveDate,
    source: &str,
    rows: usize,
    opts: &WriteOptions,
) -> Result<WriterProperties, HdbError> {
    let zstd = ZstdLevel::try_new(ZSTD_LEVEL)
        .map_err(|e| HdbError::parquet("<writer>", "zstd level", e))?;
    let time_name = def.columns[def.time_column].name.clone();
    let mut sorting = Vec::new();
    if let Some(s) = def.sym_column {
        // Rank 0 is the null symbol, so nulls come first.
        sorting.push(SortingColumn {
            column_idx: s as i32,
            descending: false,
            nulls_first: true,
        });
    }
    // A null time sorts as the smallest time of its symbol.
    sorting.push(SortingColumn {
        column_idx: def.time_column as i32,
        descending: false,
        nulls_first: true,
    });
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(zstd))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_data_page_row_count_limit(DATA_PAGE_ROWS_MAX)
        .set_write_batch_size(WRITE_BATCH_ROWS)
        // Row groups end where `plan_row_groups` says (ArrowWriter::flush);
        // the writer's own limits must never cut one first.
        .set_max_row_group_row_count(Some(opts.row_group_rows_cap + 1))
        .set_max_row_group_bytes(None)
        // Nanosecond timestamps are near-unique: a dictionary would only
        // be built and thrown away.
        .set_column_dictionary_enabled(ColumnPath::from(time_name), false)
        .set_sorting_columns(Some(sorting))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(KV_VERSION.to_string(), LAYOUT_VERSION.to_string()),
            KeyValue::new(KV_TABLE.to_string(), def.name.clone()),
            KeyValue::new(KV_DATE.to_string(), format_date(date)),
            KeyValue::new(KV_ROWS.to_string(), rows.to_string()),
            KeyValue::new(KV_SOURCE.to_string(), source.to_string()),
        ]));
    if let Some(s) = def.sym_column {
        // Symbols repeat by the thousand: dictionary encoding, explicitly.
        b = b.set_column_dictionary_enabled(ColumnPath::from(def.columns[s].name.clone()), true);
    }
    Ok(b.build())
}

/// Writes the sorted rows to `path`; returns (row groups, file bytes).
fn write_part(
    path: &Path,
    def: &TableDef,
    date: NaiveDate,
    source: &str,
    batches: &[RecordBatch],
    sorted: &SortedRows,
    opts: &WriteOptions,
) -> Result<(usize, u64), HdbError> {
    let schema = part_arrow_schema(def);
    let props = writer_properties(def, date, source, sorted.rows(), opts)?;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| HdbError::io(path, "create", e))?;
    let mut w = ArrowWriter::try_new(&file, schema.clone(), Some(props))
        .map_err(|e| HdbError::parquet(path, "start writer", e))?;
    let groups = sort::plan_row_groups(
        sorted.runs.iter().map(|&(_, n)| n),
        opts.row_group_rows_floor,
        opts.row_group_rows_cap,
    );
    let ncols = def.columns.len();
    let inputs: Vec<Vec<&dyn Array>> = (0..ncols)
        .map(|c| batches.iter().map(|b| b.column(c).as_ref()).collect())
        .collect();
    let mut idx: Vec<(usize, usize)> = Vec::with_capacity(GATHER_ROWS);
    for g in &groups {
        let mut at = g.start;
        while at < g.end {
            let end = (at + GATHER_ROWS).min(g.end);
            idx.clear();
            idx.extend(sorted.order[at..end].iter().map(|&p| unpack(p)));
            let mut cols: Vec<ArrayRef> = Vec::with_capacity(ncols);
            for (c, input) in inputs.iter().enumerate() {
                if Some(c) == def.sym_column {
                    cols.push(sort::sym_slice(sorted, at..end)?);
                } else {
                    cols.push(
                        arrow_select::interleave::interleave(input, &idx)
                            .map_err(|e| HdbError::arrow(path, "gather rows", e))?,
                    );
                }
            }
            let batch = RecordBatch::try_new(schema.clone(), cols)
                .map_err(|e| HdbError::arrow(path, "build batch", e))?;
            w.write(&batch)
                .map_err(|e| HdbError::parquet(path, "write", e))?;
            at = end;
        }
        // The group ends at a symbol boundary the plan chose.
        w.flush()
            .map_err(|e| HdbError::parquet(path, "end row group", e))?;
    }
    let md = w
        .close()
        .map_err(|e| HdbError::parquet(path, "write footer", e))?;
    if opts.fsync {
        file.sync_all()
            .map_err(|e| HdbError::io(path, "fsync", e))?;
    }
    let bytes = file
        .metadata()
        .map_err(|e| HdbError::io(path, "stat", e))?
        .len();
    Ok((md.num_row_groups(), bytes))
}

/// `renameat2(from, to, RENAME_NOREPLACE)`: fails with EEXIST instead of
/// replacing `to`. Called through `syscall` so that it does not depend on
/// the C library's version having the wrapper.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let cfrom = CString::new(from.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
    let cto = CString::new(to.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: both pointers are valid NUL-terminated strings for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            cfrom.as_ptr(),
            libc::AT_FDCWD,
            cto.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

enum Rename {
    Done,
    Exists,
}

fn try_rename(from: &Path, to: &Path) -> Result<Rename, HdbError> {
    match rename_noreplace(from, to) {
        Ok(()) => Ok(Rename::Done),
        Err(e) => match e.raw_os_error() {
            Some(libc::EEXIST) | Some(libc::ENOTEMPTY) => Ok(Rename::Exists),
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
                Err(HdbError::RenameUnsupported {
                    from: from.to_path_buf(),
                    to: to.to_path_buf(),
                    source: e,
                })
            }
            _ => Err(HdbError::io(from, "rename", e)),
        },
    }
}

/// An exclusive `flock` on the table's commit lock, held while adding a
/// part to an existing date directory so that the source check and the
/// rename are one step for every writer (released when dropped).
struct CommitLock {
    _file: File,
}

impl CommitLock {
    fn take(tdir: &Path) -> Result<CommitLock, HdbError> {
        let p = tdir.join(COMMIT_LOCK);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| HdbError::io(&p, "open commit lock", e))?;
        loop {
            // SAFETY: flock on an fd we own.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(CommitLock { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(HdbError::io(&p, "lock commit lock", e));
            }
        }
    }
}

impl Staged {
    /// What was written (path: the staging file until committed).
    pub fn report(&self) -> &PartReport {
        &self.report
    }

    /// Publishes the staged part: the date directory appears with it, or
    /// it becomes the date's next part. If a part with the same source got
    /// there first (another writer, a retry), the staged copy is removed
    /// and that part is returned.
    pub fn commit(mut self) -> Result<CommitOutcome, HdbError> {
        let out = self.commit_inner();
        // Committed or not, the staging directory is finished with; on an
        // error Drop removes whatever is left of it.
        if out.is_ok() {
            self.done = true;
        }
        out
    }

    fn commit_inner(&mut self) -> Result<CommitOutcome, HdbError> {
        match try_rename(&self.staging, &self.final_dir)? {
            Rename::Done => {
                if self.fsync {
                    fsync_dir(&self.table_dir)?;
                }
                self.report.path = self.final_dir.join(part_file_name(0));
                return Ok(CommitOutcome::Committed(self.report.clone()));
            }
            Rename::Exists => {}
        }
        // The date exists: add the file as its next part, under the lock.
        let _lock = CommitLock::take(&self.table_dir)?;
        if let Some(p) = find_source(&self.final_dir, &self.source)? {
            self.remove_staging();
            return Ok(CommitOutcome::AlreadyCommitted(p));
        }
        let staged_file = self.staging.join(part_file_name(0));
        let mut n = parts(&self.final_dir)?
            .last()
            .map_or(0, |&(n, _)| n.saturating_add(1));
        loop {
            if n > PART_NUMBER_MAX {
                return Err(HdbError::BadName {
                    path: self.final_dir.clone(),
                    what: format!("no part number left (the last is {PART_NUMBER_MAX})"),
                });
            }
            let to = self.final_dir.join(part_file_name(n));
            match try_rename(&staged_file, &to)? {
                Rename::Done => {
                    if self.fsync {
                        fsync_dir(&self.final_dir)?;
                    }
                    self.remove_staging();
                    self.report.path = to;
                    return Ok(CommitOutcome::Committed(self.report.clone()));
                }
                // A writer outside the lock took the number: the next one.
                Rename::Exists => n += 1,
            }
        }
    }

    fn remove_staging(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.staging) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.staging.display(), error = %e,
                    "could not remove HDB staging (cleanup_staging will)");
            }
        }
        self.done = true;
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            self.remove_staging();
        }
    }
}
