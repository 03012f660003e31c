//! End of day on an rdb with a historical database (`--hdb DIR`): kdb+'s
//! `.u.end` then `.Q.hdpf`, in steps that each leave a state a restart
//! continues from.
//!
//! 1. The tp journals an end-of-day marker at seq S; the rdb applies it by
//!    moving every append table's rows into a closing day (the tables start
//!    the next day empty; the ingest pause is that move).
//! 2. This writer stages each table's day as sorted Parquet, synced.
//! 3. It commits each table's date directory by one rename.
//! 4. It hands the committed parts to the store's day state: queries read
//!    the day from Parquet from now on, in the same step that drops it from
//!    memory.
//! 5. A checkpoint of the Hot Restart store (its prefix tombstone drops the
//!    day's records there); checkpoints wait while a day is closing, so the
//!    store never loses a day that is not in Parquet yet.
//! 6. The journal is trimmed up to S (with `--hot-restart`, unless
//!    `--eod-keep-journal`).
//!
//! A crash anywhere replays the marker (the journal and Hot Restart store
//! are only advanced past S after step 4), and the re-run finds committed
//! parts by their source (`eod:S`) and never writes them twice.

use crate::eod_clock::EodClock;
use parking_lot::Mutex;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::store::{date_string, ClosingDay, History};
use tickdb_core::TableKind;
use tickdb_rdb::Rdb;
use tickdb_tp::Tickerplant;

/// How long a failed end of day waits before it is tried again.
const RETRY_DELAY_MS: u64 = 5_000;
/// Environment variable naming a step at which the process kills itself
/// with SIGKILL (crash tests; see `crash_point`).
pub const TEST_CRASH_ENV: &str = "TICKDB_TEST_EOD_CRASH";

/// One table's part of an end of day.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    pub table: String,
    pub rows: u64,
    pub path: String,
    /// Already in the HDB from an earlier run of this end of day.
    pub already_committed: bool,
    pub row_groups: usize,
    pub input_bytes: u64,
    pub file_bytes: u64,
}

/// A completed end of day.
#[derive(Debug, Clone, Serialize)]
pub struct EodReport {
    pub date: String,
    pub seq: u64,
    pub tables: Vec<TableReport>,
    pub rows: u64,
    /// From the marker's arrival to the commit.
    pub seconds: f64,
    /// Arrow input written per second of writing.
    pub input_mb_per_s: f64,
    /// Parquet bytes over the Arrow in-memory bytes of the day.
    pub size_ratio: f64,
    /// How long ingest waited while the day was moved out of the tables.
    pub ingest_pause_us: u64,
    pub checkpoint_seq: Option<u64>,
    pub journal_trimmed_upto: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClosingStatus {
    pub date: String,
    pub seq: u64,
    pub rows: u64,
}

/// `/status` `eod`.
#[derive(Debug, Clone, Serialize)]
pub struct EodStatus {
    pub hdb: String,
    pub time_zone: String,
    pub today: String,
    pub closing: Vec<ClosingStatus>,
    pub completed: u64,
    pub last: Option<EodReport>,
    pub last_error: Option<String>,
    /// Per table, the dates in the HDB.
    pub history_dates: std::collections::BTreeMap<String, usize>,
}

pub struct Eod {
    rdb: Arc<Rdb>,
    root: PathBuf,
    tp: Option<Arc<Tickerplant>>,
    keep_journal: bool,
    clock: EodClock,
    fsync: bool,
    state: Mutex<(u64, Option<EodReport>, Option<String>)>,
    /// Held by a commit and by a reload: a reload's listing never loses a
    /// part committed while it read the directories.
    history_lock: Mutex<()>,
}

impl Eod {
    /// Opens the HDB for `rdb`: removes staging left by a crash, reads what
    /// is committed, sets today's date from `clock`, and has the rdb end
    /// days from now on. Call before the rdb applies anything.
    pub fn open(
        rdb: Arc<Rdb>,
        root: PathBuf,
        tp: Option<Arc<Tickerplant>>,
        keep_journal: bool,
        clock: EodClock,
    ) -> Result<Arc<Eod>, String> {
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("--hdb {}: cannot create it: {e}", root.display()))?;
        for p in tickdb_hdb::cleanup_staging(&root).map_err(|e| e.to_string())? {
            tracing::warn!(
                "hdb: removed {} (an end of day or import interrupted before its commit)",
                p.display()
            );
        }
        let eod = Self::new(rdb, root, tp, keep_journal, clock)?;
        eod.rdb.end_days();
        Ok(eod)
    }

    /// An HDB that is only read (`tickdb hdb serve`): its committed parts
    /// become the tables' history; nothing ends a day.
    pub fn open_read_only(
        rdb: Arc<Rdb>,
        root: PathBuf,
        clock: EodClock,
    ) -> Result<Arc<Eod>, String> {
        Self::new(rdb, root, None, true, clock)
    }

    fn new(
        rdb: Arc<Rdb>,
        root: PathBuf,
        tp: Option<Arc<Tickerplant>>,
        keep_journal: bool,
        clock: EodClock,
    ) -> Result<Arc<Eod>, String> {
        let eod = Eod {
            rdb,
            root,
            tp,
            keep_journal,
            clock,
            fsync: true,
            state: Mutex::new((0, None, None)),
            history_lock: Mutex::new(()),
        };
        eod.reload()?;
        let c = eod.clock.clone();
        eod.rdb
            .store()
            .days()
            .set_clock(Box::new(move || c.today()));
        Ok(Arc::new(eod))
    }

    /// Writes every closing day, oldest first, as they come; retries a
    /// failed one (the day stays in memory and queryable meanwhile).
    pub async fn run(self: Arc<Self>) {
        loop {
            let pending = self.rdb.store().days().closing();
            let mut failed = false;
            for day in pending {
                let me = self.clone();
                let r = tokio::task::spawn_blocking(move || me.end_day(&day))
                    .await
                    .unwrap_or_else(|e| Err(format!("the end-of-day writer panicked: {e}")));
                if let Err(e) = r {
                    tracing::error!("end of day failed (retrying in {RETRY_DELAY_MS} ms; the day stays in memory): {e}");
                    self.state.lock().2 = Some(e);
                    failed = true;
                    break;
                }
            }
            let wait = if failed {
                Duration::from_millis(RETRY_DELAY_MS)
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                _ = self.rdb.day_ended() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn end_day(&self, day: &ClosingDay) -> Result<(), String> {
        let started = Instant::now();
        let date = tickdb_hdb::date_from_days(day.date);
        let source = format!("eod:{}", day.seq);
        let rows: u64 = day.tables.iter().map(|t| t.rows as u64).sum();
        tracing::info!(
            "end of day {} (seq {}): writing {rows} rows of {} tables to {}",
            date_string(day.date),
            day.seq,
            day.tables.len(),
            self.root.display()
        );
        crash_point("before-write");
        let opts = tickdb_hdb::WriteOptions {
            fsync: self.fsync,
            ..Default::default()
        };
        // Tables are sorted and compressed side by side: each is one thread's work.
        let staged: Vec<Result<tickdb_hdb::StageOutcome, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = day
                .tables
                .iter()
                .map(|t| {
                    let (root, opts, source) = (&self.root, &opts, &source);
                    s.spawn(move || {
                        let batches: Vec<_> = t.chunks.iter().map(|c| c.batch.clone()).collect();
                        tickdb_hdb::stage_day(root, &t.def, date, source, &batches, opts)
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a table writer panicked".into()))
                })
                .collect()
        });
        let staged = staged.into_iter().collect::<Result<Vec<_>, _>>()?;
        crash_point("staged");
        let write_secs = started.elapsed().as_secs_f64();
        let mut parts = Vec::new();
        let mut reports = Vec::new();
        let mut input_bytes = 0u64;
        let mut file_bytes = 0u64;
        for (t, outcome) in day.tables.iter().zip(staged) {
            let (path, already, report) = match outcome {
                tickdb_hdb::StageOutcome::Empty => continue,
                tickdb_hdb::StageOutcome::AlreadyCommitted(p) => (p, true, None),
                tickdb_hdb::StageOutcome::Staged(st) => {
                    if !parts.is_empty() {
                        crash_point("between-commits");
                    }
                    match st.commit().map_err(|e| e.to_string())? {
                        tickdb_hdb::CommitOutcome::Committed(r) => (r.path.clone(), false, Some(r)),
                        tickdb_hdb::CommitOutcome::AlreadyCommitted(p) => (p, true, None),
                    }
                }
            };
            let file = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            parts.push((t.def.name.clone(), day.date, file));
            if let Some(r) = &report {
                input_bytes += r.input_bytes;
                file_bytes += r.file_bytes;
            }
            reports.push(TableReport {
                table: t.def.name.clone(),
                rows: t.rows as u64,
                path: path.display().to_string(),
                already_committed: already,
                row_groups: report.as_ref().map(|r| r.row_groups).unwrap_or(0),
                input_bytes: report.as_ref().map(|r| r.input_bytes).unwrap_or(0),
                file_bytes: report.as_ref().map(|r| r.file_bytes).unwrap_or(0),
            });
        }
        // Queries read the day from Parquet from here on; its rows leave memory.
        {
            let _h = self.history_lock.lock();
            self.rdb.store().days().commit(day.seq, &parts);
        }
        crash_point("committed");
        let seconds = started.elapsed().as_secs_f64();
        let checkpoint_seq = match self.rdb.checkpoint() {
            Ok(Some(r)) => {
                tickdb_rdb::hot::log_checkpoint("end-of-day", &r);
                Some(r.seq)
            }
            Ok(None) => None,
            // Another day still closing: the checkpoint waits for it.
            Err(tickdb_rdb::RdbError::Deferred(_)) => None,
            Err(e) => {
                tracing::error!("end-of-day checkpoint failed (the previous one stands; the journal is kept): {e}");
                None
            }
        };
        crash_point("checkpointed");
        let journal_trimmed_upto = match (&self.tp, checkpoint_seq) {
            (Some(tp), Some(durable)) if !self.keep_journal => {
                let upto = day.seq.min(durable);
                match tp.trim_journal(upto) {
                    Ok(r) => {
                        crate::http::log_trim(Ok(r));
                        Some(upto)
                    }
                    Err(e) => {
                        crate::http::log_trim(Err(e));
                        None
                    }
                }
            }
            _ => None,
        };
        let report = EodReport {
            date: date_string(day.date),
            seq: day.seq,
            rows,
            seconds,
            input_mb_per_s: if write_secs > 0.0 {
                input_bytes as f64 / 1e6 / write_secs
            } else {
                0.0
            },
            size_ratio: if input_bytes > 0 {
                file_bytes as f64 / input_bytes as f64
            } else {
                0.0
            },
            ingest_pause_us: day.pause.as_micros() as u64,
            tables: reports,
            checkpoint_seq,
            journal_trimmed_upto,
        };
        tracing::info!(
            "end of day {} (seq {}) committed: {} rows in {:.2} s ({:.0} MB/s of Arrow input, Parquet {:.0}% of it), ingest paused {} µs",
            report.date,
            report.seq,
            report.rows,
            report.seconds,
            report.input_mb_per_s,
            report.size_ratio * 100.0,
            report.ingest_pause_us
        );
        let mut st = self.state.lock();
        st.0 += 1;
        st.1 = Some(report);
        st.2 = None;
        Ok(())
    }

    /// Reads every table's committed parts again (after an import into
    /// the HDB). Returns the number of dates per table.
    pub fn reload(&self) -> Result<std::collections::BTreeMap<String, usize>, String> {
        let _h = self.history_lock.lock();
        let store = self.rdb.store();
        let mut out = std::collections::BTreeMap::new();
        for t in &store.schema().tables {
            if matches!(t.kind, TableKind::Append) {
                let (h, seqs) = read_history(&self.root, &t.name)?;
                out.insert(t.name.clone(), h.len());
                store.days().set_history(&t.name, h, seqs);
            }
        }
        Ok(out)
    }

    pub fn status(&self) -> EodStatus {
        let store = self.rdb.store();
        let closing = store
            .days()
            .closing()
            .iter()
            .map(|d| ClosingStatus {
                date: date_string(d.date),
                seq: d.seq,
                rows: d.tables.iter().map(|t| t.rows as u64).sum(),
            })
            .collect();
        let history_dates = store
            .schema()
            .tables
            .iter()
            .filter(|t| matches!(t.kind, TableKind::Append))
            .map(|t| (t.name.clone(), store.days().history(&t.name).len()))
            .collect();
        let st = self.state.lock();
        EodStatus {
            hdb: self.root.display().to_string(),
            time_zone: self.clock.zone_name(),
            today: date_string(self.clock.today()),
            closing,
            completed: st.0,
            last: st.1.clone(),
            last_error: st.2.clone(),
            history_dates,
        }
    }
}

/// A table's committed parts, as the store's day state keeps them, and
/// the end-of-day sequences they came from (their `tickdb.source`).
pub fn read_history(
    root: &std::path::Path,
    table: &str,
) -> Result<(History, std::collections::BTreeSet<u64>), String> {
    let mut out = History::new();
    let mut seqs = std::collections::BTreeSet::new();
    for (date, files) in tickdb_hdb::committed_parts(root, table).map_err(|e| e.to_string())? {
        let mut names = Vec::with_capacity(files.len());
        for f in &files {
            // A damaged part stays listed: a query that reads it fails
            // naming it, and every other date still answers.
            let source = tickdb_hdb::part_source(f).unwrap_or_else(|e| {
                tracing::error!("hdb: {e} (tickdb hdb verify checks every file)");
                None
            });
            if let Some(seq) = source
                .as_deref()
                .and_then(|s| s.strip_prefix("eod:"))
                .and_then(|s| s.parse::<u64>().ok())
            {
                seqs.insert(seq);
            }
            names.extend(f.file_name().map(|n| n.to_string_lossy().into_owned()));
        }
        out.insert(tickdb_hdb::days_from_date(date), names);
    }
    Ok((out, seqs))
}

/// Kills the process with SIGKILL when `TICKDB_TEST_EOD_CRASH` names this
/// step: the crash tests' kill -9 at an exact point of end of day.
fn crash_point(step: &str) {
    if std::env::var(TEST_CRASH_ENV).is_ok_and(|v| v == step) {
        tracing::warn!("{TEST_CRASH_ENV}={step}: killing this process");
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
