//! `tickdb journal`: operator tools over a journal (verify, repair, dump,
//! stats, schema, compare). They read the journal through tickdb-journal's public
//! API and never write to it, except `repair --yes`, which takes the
//! journal's lock (so it refuses to run beside a live tickerplant) and keeps
//! a backup of every byte it cuts.
//!
//! Every subcommand takes the journal directory or the data directory that
//! holds it in `journal/`. A directory holding no segment is never called
//! clean: the tools exit 2 and say what they looked for. Records are decoded
//! under the schema in force at their sequence number, from the journal's
//! schema history (`SCHEMA`).
//!
//! Exit codes: 0 clean / done, 1 problems found, 2 cannot read the journal,
//! there is none, or the command was refused (e.g. `repair` without `--yes`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tickdb_journal::format::parse_segment_file_name;
use tickdb_journal::{
    CompareReport, FsStorage, JournalError, JournalReader, SchemaHistory, VerifyReport,
};
use tickdb_tp::schema_binding::RecordDecoder;

/// Inspect, check and repair a tickerplant journal.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "DIR is the journal directory (it holds journal-<first seq>.log segments \
    and the schema history SCHEMA) or the data directory that holds it in journal/ (the \
    --data-dir of tickdb up and tickdb tp). A directory with no segment in either place is \
    never reported clean: the command exits 2 with \"no journal here\"."
)]
pub struct JournalArgs {
    #[command(subcommand)]
    pub cmd: JournalCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum JournalCmd {
    /// Read every segment and check every record's CRC and sequence number,
    /// and decode every record under the schema in force at its sequence
    /// number (the journal's schema history). Prints record and row counts,
    /// bytes, first/last seq and time, the schema history, and each problem
    /// with its file and offset. Changes nothing.
    /// Exit 0: clean; 1: problems found; 2: cannot read it, or no journal there.
    Verify {
        /// The journal directory, or the data directory holding journal/.
        dir: PathBuf,
    },
    /// Cut the journal back to its longest consistent prefix, copying every
    /// byte it cuts into a backup directory first. Without --yes, only prints
    /// what it would do. Refuses while a tickerplant holds the journal.
    /// Exit 0: repaired or nothing to do; 2: refused, failed, or no journal there.
    Repair {
        /// The journal directory, or the data directory holding journal/.
        dir: PathBuf,
        /// Really change the journal (otherwise: a dry run that exits 2 if a
        /// repair is needed).
        #[arg(long)]
        yes: bool,
        /// Where to keep the cut bytes [default: <journal dir>/repair-backup-<unix time>].
        #[arg(long)]
        backup: Option<PathBuf>,
    },
    /// Print records: seq, time, kind, rows, and each batch's table and row
    /// count, decoded under the schema in force at each record's seq.
    Dump {
        /// The journal directory, or the data directory holding journal/.
        dir: PathBuf,
        /// First sequence number to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Most records to print.
        #[arg(long, default_value_t = 100)]
        limit: u64,
        /// Also print every row of every batch.
        #[arg(long)]
        rows: bool,
    },
    /// Per-segment sizes, record counts and sequence ranges, totals, and the
    /// schema history (which schema is in force from which seq).
    Stats {
        /// The journal directory, or the data directory holding journal/.
        dir: PathBuf,
    },
    /// Print the schema (TOML, as it was given) the journal's records are
    /// written under: pass it to `tickdb up --schema` to start under it.
    /// Exit 2: no schema history (a journal from before tickdb recorded
    /// schemas) or a damaged one.
    Schema {
        /// The journal directory, or the data directory holding journal/.
        dir: PathBuf,
        /// The schema in force at this sequence number [default: the current one].
        #[arg(long)]
        seq: Option<u64>,
    },
    /// Compare two journals record by record and segment file by segment
    /// file, and print the first difference.
    ///
    /// Over the sequence range both hold, records are compared field by field
    /// (length, kind, time, rows, payload), and so are where segments start and
    /// their headers; then every segment file both hold is compared byte for
    /// byte. Prints the first difference (its seq, the file and offset in each
    /// journal, what differs), or "identical over seq X..=Y" and what either
    /// holds beyond the other.
    ///
    /// A journal that holds fewer records is not a difference as long as what
    /// it holds is the same: one behind the other (a standby catching up) is
    /// reported as a strict prefix, one trimmed or started later from a
    /// checkpoint as starting at a later seq. Each journal is read to the end
    /// of its valid records; bytes after them (a torn tail, damage) are noted,
    /// and are a difference where the other journal holds other bytes there.
    /// Read only; the tail of a journal being written may show as a prefix or
    /// a difference.
    ///
    /// Exit 0: nothing both hold differs (with --exact: the journals are the
    /// same, records and files); 1: a difference, or no seq in common; 2:
    /// cannot read a journal, or no journal there.
    Compare {
        /// The first journal directory (A), or the data directory holding journal/.
        dir_a: PathBuf,
        /// The second journal directory (B), or the data directory holding journal/.
        dir_b: PathBuf,
        /// Exit 1 unless both hold exactly the same records and the same
        /// segment files (a prefix or a trimmed journal is then a difference).
        #[arg(long)]
        exact: bool,
    },
}

pub fn run(args: JournalArgs) -> ExitCode {
    match args.cmd {
        JournalCmd::Verify { dir } => located(&dir, verify),
        JournalCmd::Repair { dir, yes, backup } => located(&dir, |d| repair(d, yes, backup)),
        JournalCmd::Dump {
            dir,
            from,
            limit,
            rows,
        } => located(&dir, |d| dump(d, from, limit, rows)),
        JournalCmd::Stats { dir } => located(&dir, stats),
        JournalCmd::Schema { dir, seq } => located(&dir, |d| schema(d, seq)),
        JournalCmd::Compare {
            dir_a,
            dir_b,
            exact,
        } => compare(&dir_a, &dir_b, exact),
    }
}

/// Runs `cmd` on the journal directory `dir` names (see `locate`), or
/// exits 2 saying where it looked.
fn located(dir: &Path, cmd: impl FnOnce(&Path) -> ExitCode) -> ExitCode {
    match locate(dir) {
        Ok(d) => cmd(&d),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The subdirectory of a data directory that holds the journal (`tickdb up
/// --data-dir DIR` journals into DIR/journal).
const DATA_DIR_JOURNAL: &str = "journal";

/// The journal directory for `dir`: `dir` itself when it holds segments,
/// else `dir/journal` when that does. Anything else is an error that says
/// where it looked, so no tool ever reports on a directory with nothing in it.
fn locate(dir: &Path) -> Result<PathBuf, String> {
    let has_segments = |d: &Path| -> Result<bool, String> {
        let entries = std::fs::read_dir(d)
            .map_err(|e| format!("cannot read journal directory {}: {e}", d.display()))?;
        Ok(entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(parse_segment_file_name)
                .is_some()
        }))
    };
    if has_segments(dir)? {
        return Ok(dir.to_path_buf());
    }
    let sub = dir.join(DATA_DIR_JOURNAL);
    if sub.is_dir() && has_segments(&sub)? {
        return Ok(sub);
    }
    Err(format!(
        "no journal here: {} holds no journal-*.log segments, and neither does {} \
         (a journal directory holds files named journal-<20-digit first seq>.log; \
         give the journal directory or the data directory that holds journal/)",
        dir.display(),
        sub.display()
    ))
}

/// The journal's schema history and a decoder for it. Ok(None): the journal
/// has none. Err: it has one this tool cannot use (damaged, or a schema this
/// build cannot read); verify reports a damaged one as a problem itself.
fn decoder(dir: &Path) -> Result<Option<(SchemaHistory, RecordDecoder)>, String> {
    match SchemaHistory::read(&FsStorage, dir) {
        Ok(None) => Ok(None),
        Ok(Some(h)) => {
            let d = RecordDecoder::new(&h).map_err(|e| {
                format!("the schema history holds a schema this tickdb cannot read: {e}")
            })?;
            Ok(Some((h, d)))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn cannot_read(dir: &Path, e: &JournalError) -> ExitCode {
    match e {
        JournalError::NoJournal { .. } => eprintln!("error: {e}"),
        _ => eprintln!("error: cannot read journal {}: {e}", dir.display()),
    }
    ExitCode::from(2)
}

fn verify(dir: &Path) -> ExitCode {
    let dec = decoder(dir);
    let result = match &dec {
        Ok(Some((_, d))) => {
            tickdb_journal::verify_payloads(dir, &mut |seq, kind, p| d.check(seq, kind, p))
        }
        _ => tickdb_journal::verify(dir),
    };
    let mut rep = match result {
        Ok(r) => r,
        Err(e) => return cannot_read(dir, &e),
    };
    if let Err(e) = &dec {
        // A damaged history is already one of verify's problems.
        if rep.schema_history.is_some() {
            rep.problems.push(tickdb_journal::Problem {
                file: SchemaHistory::path(dir),
                offset: 0,
                what: e.clone(),
            });
        }
    }
    print_summary(&rep);
    print_history(rep.schema_history.as_ref());
    if rep.schema_history.is_some() && dec.as_ref().is_ok_and(|d| d.is_some()) {
        println!(
            "payloads: {} decoded under the schema in force at their seq",
            rep.payloads_checked
        );
    } else if rep.schema_history.is_none()
        && rep.problems.iter().all(|p| !p.file.ends_with("SCHEMA"))
    {
        println!(
            "payloads: not decoded: the journal has no schema history (written before tickdb \
             recorded schemas; the tp records it at its next start)"
        );
    }
    if rep.problems.is_empty() {
        println!("problems: none");
        ExitCode::SUCCESS
    } else {
        println!("problems: {}", rep.problems.len());
        for p in &rep.problems {
            println!("  {} offset {}: {}", p.file.display(), p.offset, p.what);
        }
        ExitCode::from(1)
    }
}

fn print_summary(rep: &VerifyReport) {
    println!("journal:  {}", rep.dir.display());
    println!("segments: {}", rep.segments.len());
    println!("records:  {} valid", rep.records);
    println!("rows:     {}", rep.rows);
    println!("bytes:    {}", rep.bytes);
    if rep.records > 0 {
        println!("seq:      {} ..= {}", rep.first_seq, rep.last_seq);
        println!(
            "time:     {} ..= {}",
            fmt_time(rep.first_time_ns.unwrap_or(0)),
            fmt_time(rep.last_time_ns.unwrap_or(0))
        );
    }
}

/// One line per schema history entry: from which seq, when recorded, and
/// its tables.
fn print_history(h: Option<&SchemaHistory>) {
    let Some(h) = h else {
        println!("schema:   no schema history");
        return;
    };
    println!(
        "schema:   {} entr{}",
        h.entries().len(),
        if h.entries().len() == 1 { "y" } else { "ies" }
    );
    for e in h.entries() {
        let tables = match tickdb_core::Schema::parse(&e.text, "schema history") {
            Ok(s) => s
                .tables
                .iter()
                .map(|t| format!("{}({})", t.name, t.columns.len()))
                .collect::<Vec<_>>()
                .join(", "),
            Err(err) => format!("(cannot be read by this tickdb: {err})"),
        };
        println!(
            "  from seq {:<12} recorded {}  tables {tables}",
            e.first_seq,
            fmt_time(e.recorded_unix_ns)
        );
    }
}

fn repair(dir: &Path, yes: bool, backup: Option<PathBuf>) -> ExitCode {
    let backup = backup.unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        dir.join(format!("repair-backup-{secs}"))
    });
    if !yes {
        return match tickdb_journal::plan_repair(dir, &backup) {
            Ok(plan) if !plan.needed() => {
                println!("{plan}");
                ExitCode::SUCCESS
            }
            Ok(plan) => {
                println!("{plan}");
                println!("dry run: nothing changed; rerun with --yes to repair");
                ExitCode::from(2)
            }
            Err(e) => cannot_read(dir, &e),
        };
    }
    match tickdb_journal::repair(dir, &backup) {
        Ok(rep) => {
            println!("{rep}");
            ExitCode::SUCCESS
        }
        Err(e @ JournalError::NoJournal { .. }) => cannot_read(dir, &e),
        Err(e) => {
            eprintln!("error: repair of {} failed: {e}", dir.display());
            ExitCode::from(2)
        }
    }
}

fn dump(dir: &Path, from: u64, limit: u64, rows: bool) -> ExitCode {
    // Read only what verify says is there, so a live or damaged tail stops
    // the dump cleanly instead of failing mid-record.
    let rep = match tickdb_journal::verify(dir) {
        Ok(r) => r,
        Err(e) => return cannot_read(dir, &e),
    };
    let dec = match decoder(dir) {
        Ok(Some((_, d))) => Some(d),
        Ok(None) => {
            println!("(no schema history: payloads are decoded without a schema)");
            None
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if limit == 0 || rep.last_seq == 0 || from > rep.last_seq {
        println!("no records (journal last seq {})", rep.last_seq);
        return ExitCode::SUCCESS;
    }
    let to = rep.last_seq.min(from.saturating_add(limit - 1));
    let reader = match JournalReader::open(dir, from, to) {
        Ok(r) => r,
        Err(e) => return cannot_read(dir, &e),
    };
    let mut code = ExitCode::SUCCESS;
    for item in reader {
        let rec = match item {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        };
        println!(
            "seq {} epoch {} time {} kind {} rows {} bytes {}",
            rec.seq,
            rec.epoch,
            fmt_time(rec.time_ns),
            rec.kind,
            rec.rows,
            rec.payload.len()
        );
        let decoded = match &dec {
            Some(d) => d.decode(rec.seq, rec.kind, &rec.payload),
            None => tickdb_core::codec::decode(&rec.payload, None).map_err(|e| e.to_string()),
        };
        match decoded {
            Ok(batches) => {
                for b in &batches {
                    if let Some((_, what)) = b.schema_change_text() {
                        // The whole schema is `tickdb journal schema DIR --seq N`.
                        println!("  schema change: {what}");
                        continue;
                    }
                    println!("  table {} rows {}", b.table, b.rows);
                    if rows {
                        print_rows(b);
                    }
                }
            }
            Err(e) => {
                println!("  payload does not decode: {e}");
                code = ExitCode::from(1);
            }
        }
    }
    code
}

fn schema(dir: &Path, seq: Option<u64>) -> ExitCode {
    let h = match SchemaHistory::read(&FsStorage, dir) {
        Ok(Some(h)) => h,
        Ok(None) => {
            eprintln!(
                "error: the journal {} has no schema history (written before tickdb recorded \
                 schemas; the tp records one at its next start)",
                dir.display()
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let entry = match seq {
        None => Some(h.current()),
        Some(s) => h.in_force_at(s),
    };
    match entry {
        Some(e) => {
            print!("{}", e.text);
            if !e.text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "error: no schema is recorded for seq {}: the history starts at seq {}",
                seq.unwrap_or(0),
                h.entries()[0].first_seq
            );
            ExitCode::from(2)
        }
    }
}

fn compare(dir_a: &Path, dir_b: &Path, exact: bool) -> ExitCode {
    let (a, b) = match (locate(dir_a), locate(dir_b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rep: CompareReport = match tickdb_journal::compare(&a, &b) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "error: cannot compare journals {} and {}: {e}",
                a.display(),
                b.display()
            );
            return ExitCode::from(2);
        }
    };
    print!("{rep}");
    let ok = if exact {
        rep.is_identical()
    } else {
        rep.is_match()
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        if exact && rep.is_match() {
            println!("--exact: the journals hold different ranges or segment files");
        }
        ExitCode::from(1)
    }
}

/// Prints a batch's rows, one line each, columns in order.
fn print_rows(b: &tickdb_core::Batch) {
    use tickdb_core::ColumnData;
    for i in 0..b.rows {
        let mut line = String::from("   ");
        for c in &b.columns {
            line.push(' ');
            if !c.is_valid(i) {
                line.push_str("null");
                continue;
            }
            let cell = match &c.data {
                ColumnData::Timestamp(v) => v.get(i).map(|x| fmt_time(*x)),
                ColumnData::I64(v) => v.get(i).map(|x| x.to_string()),
                ColumnData::F64(v) => v.get(i).map(|x| x.to_string()),
                ColumnData::I32(v) => v.get(i).map(|x| x.to_string()),
                ColumnData::Bool(v) => v.get(i).map(|x| x.to_string()),
                ColumnData::Symbol { .. } => c.data.symbol(i).map(|s| s.to_string()),
                ColumnData::Str { offsets, data } => {
                    slice(offsets, data, i).map(|s| format!("{:?}", String::from_utf8_lossy(s)))
                }
                ColumnData::Bytes { offsets, data } => slice(offsets, data, i)
                    .map(|s| s.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            };
            line.push_str(cell.as_deref().unwrap_or("?"));
        }
        println!("{line}");
    }
}

fn slice<'a>(offsets: &[u32], data: &'a [u8], i: usize) -> Option<&'a [u8]> {
    let start = *offsets.get(i)? as usize;
    let end = *offsets.get(i + 1)? as usize;
    data.get(start..end)
}

fn stats(dir: &Path) -> ExitCode {
    let rep = match tickdb_journal::verify(dir) {
        Ok(r) => r,
        Err(e) => return cannot_read(dir, &e),
    };
    println!(
        "{:<34} {:>14} {:>10} {:>12} {:>20} {:>20}",
        "segment", "bytes", "records", "rows", "first seq", "last seq"
    );
    for s in &rep.segments {
        let name = s
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        println!(
            "{:<34} {:>14} {:>10} {:>12} {:>20} {:>20}",
            name, s.bytes, s.records, s.rows, s.first_seq, s.last_seq
        );
    }
    println!(
        "{:<34} {:>14} {:>10} {:>12} {:>20} {:>20}",
        "total", rep.bytes, rep.records, rep.rows, rep.first_seq, rep.last_seq
    );
    print_history(rep.schema_history.as_ref());
    if rep.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!(
            "{} problem(s); run `tickdb journal verify` for details",
            rep.problems.len()
        );
        ExitCode::from(1)
    }
}

/// Nanoseconds since the Unix epoch as UTC `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
fn fmt_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{compare, fmt_time, locate};
    use std::process::ExitCode;
    use tickdb_journal::{Journal, JournalOptions};

    fn append(dir: &std::path::Path, n: usize) {
        let (mut j, _) = Journal::open(dir, JournalOptions::default()).unwrap();
        for i in 0..n {
            j.append(1, 1, i as i64, b"payload").unwrap();
        }
        j.close().unwrap();
    }

    #[test]
    fn compare_exits_0_on_a_match_1_on_a_difference_2_without_a_journal() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        append(&a, 5);
        std::fs::create_dir_all(b.join("journal")).unwrap();
        assert_eq!(compare(&a, &b, false), ExitCode::from(2));
        for e in std::fs::read_dir(&a).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), b.join("journal").join(e.file_name())).unwrap();
        }
        // B given as a data directory holding journal/.
        assert_eq!(compare(&a, &b, false), ExitCode::SUCCESS);
        assert_eq!(compare(&a, &b, true), ExitCode::SUCCESS);
        // A ahead: B is a strict prefix, a match but not identical.
        append(&a, 1);
        assert_eq!(compare(&a, &b, false), ExitCode::SUCCESS);
        assert_eq!(compare(&a, &b, true), ExitCode::from(1));
        // B written on its own: its segment header (creation time) differs.
        let c = tmp.path().join("c");
        append(&c, 6);
        assert_eq!(compare(&a, &c, false), ExitCode::from(1));
    }

    #[test]
    fn locate_takes_the_journal_or_the_data_directory_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        let e = locate(data).unwrap_err();
        assert!(e.starts_with("no journal here: "), "{e}");
        assert!(e.contains("journal-*.log"), "{e}");
        let journal = data.join("journal");
        std::fs::create_dir(&journal).unwrap();
        // A journal directory with only a lock (or a history) holds no journal.
        std::fs::write(journal.join("LOCK"), b"").unwrap();
        assert!(locate(data).is_err());
        assert!(locate(&journal).is_err());
        std::fs::write(journal.join("journal-00000000000000000001.log"), b"x").unwrap();
        assert_eq!(locate(data).unwrap(), journal);
        assert_eq!(locate(&journal).unwrap(), journal);
        assert!(locate(&data.join("missing"))
            .unwrap_err()
            .contains("cannot read"));
    }

    #[test]
    fn formats_utc() {
        assert_eq!(fmt_time(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            fmt_time(1_583_712_000_000_000_001),
            "2020-03-09T00:00:00.000000001Z"
        );
        assert_eq!(fmt_time(-1), "1969-12-31T23:59:59.999999999Z");
    }
}
