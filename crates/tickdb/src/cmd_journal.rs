//! `tickdb journal`: operator tools over a journal directory (verify,
//! repair, dump, stats). They read the journal through tickdb-journal's
//! public API and never write to it, except `repair --yes`, which takes the
//! journal's lock (so it refuses to run beside a live tickerplant) and keeps
//! a backup of every byte it cuts.
//!
//! Exit codes: 0 clean / done, 1 problems found, 2 cannot read the journal
//! or the command was refused (e.g. `repair` without `--yes`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tickdb_journal::{JournalReader, VerifyReport};

/// Inspect, check and repair a tickerplant journal directory.
#[derive(clap::Args, Debug)]
pub struct JournalArgs {
    #[command(subcommand)]
    pub cmd: JournalCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum JournalCmd {
    /// Read every segment and check every record's CRC and sequence number.
    /// Prints record and row counts, bytes, first/last seq and time, and each
    /// problem with its file and offset. Changes nothing.
    /// Exit 0: clean; 1: problems found; 2: cannot read the journal.
    Verify {
        /// The journal directory (holds journal-<first seq>.log segments).
        dir: PathBuf,
    },
    /// Cut the journal back to its longest consistent prefix, copying every
    /// byte it cuts into a backup directory first. Without --yes, only prints
    /// what it would do. Refuses while a tickerplant holds the journal.
    /// Exit 0: repaired or nothing to do; 2: refused or failed.
    Repair {
        /// The journal directory.
        dir: PathBuf,
        /// Really change the journal (otherwise: a dry run that exits 2 if a
        /// repair is needed).
        #[arg(long)]
        yes: bool,
        /// Where to keep the cut bytes [default: DIR/repair-backup-<unix time>].
        #[arg(long)]
        backup: Option<PathBuf>,
    },
    /// Print records: seq, time, kind, rows, and each batch's table and row count.
    Dump {
        /// The journal directory.
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
    /// Per-segment sizes, record counts and sequence ranges, and totals.
    Stats {
        /// The journal directory.
        dir: PathBuf,
    },
}

pub fn run(args: JournalArgs) -> ExitCode {
    match args.cmd {
        JournalCmd::Verify { dir } => verify(&dir),
        JournalCmd::Repair { dir, yes, backup } => repair(&dir, yes, backup),
        JournalCmd::Dump {
            dir,
            from,
            limit,
            rows,
        } => dump(&dir, from, limit, rows),
        JournalCmd::Stats { dir } => stats(&dir),
    }
}

fn verify(dir: &Path) -> ExitCode {
    let rep = match tickdb_journal::verify(dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot read journal {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    print_summary(&rep);
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
            Err(e) => {
                eprintln!("error: cannot read journal {}: {e}", dir.display());
                ExitCode::from(2)
            }
        };
    }
    match tickdb_journal::repair(dir, &backup) {
        Ok(rep) => {
            println!("{rep}");
            ExitCode::SUCCESS
        }
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
        Err(e) => {
            eprintln!("error: cannot read journal {}: {e}", dir.display());
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
        Err(e) => {
            eprintln!("error: cannot read journal {}: {e}", dir.display());
            return ExitCode::from(2);
        }
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
            "seq {} time {} kind {} rows {} bytes {}",
            rec.seq,
            fmt_time(rec.time_ns),
            rec.kind,
            rec.rows,
            rec.payload.len()
        );
        match tickdb_core::codec::decode(&rec.payload, None) {
            Ok(batches) => {
                for b in &batches {
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
        Err(e) => {
            eprintln!("error: cannot read journal {}: {e}", dir.display());
            return ExitCode::from(2);
        }
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
    use super::fmt_time;

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
