//! What `--fsync interval` can lose, measured: records are appended and
//! committed (acknowledged) continuously under `IntervalMs(N)`, then a
//! simulated power loss keeps only what was fsynced (plus a random part of
//! the page cache). Every record synced before the crash must survive, and
//! every lost record must have been acknowledged within the window: less
//! than N ms (plus the time between two commits) before the crash. The
//! measured loss is printed for each run.

mod common;

use common::*;
use rand::Rng;
use std::time::{Duration, Instant};
use tickdb_journal::{FaultyStorage, FsyncPolicy, Journal, JournalOptions};

const INTERVAL_MS: u64 = 50;
const RUNS: u64 = 8;
/// Slack for the scheduler between two commits on a loaded 2-core CI box;
/// the assertion is about the policy's shape, not about speed.
const SCHEDULING_SLACK_MS: u64 = 500;

#[test]
fn interval_power_loss_stays_within_the_window() {
    let seed = seed("interval_power_loss_stays_within_the_window");
    let mut rng = rng(seed);
    for run in 0..RUNS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let fs = FaultyStorage::new();
        let o = opts(1 << 20, FsyncPolicy::IntervalMs(INTERVAL_MS));
        let (mut j, _) = Journal::open_with(fs.clone(), dir, o).unwrap();
        let t0 = Instant::now();
        let run_for = Duration::from_millis(rng.random_range(20..=4 * INTERVAL_MS));
        // ack_at[seq - 1]: when the commit covering seq returned.
        let mut ack_at: Vec<Instant> = Vec::new();
        while t0.elapsed() < run_for {
            for _ in 0..rng.random_range(1..=8) {
                append_std(&mut j, run);
            }
            j.commit().unwrap();
            let now = Instant::now();
            ack_at.resize(j.last_seq() as usize, now);
            std::thread::sleep(Duration::from_micros(rng.random_range(0..=2000)));
        }
        let crash = Instant::now();
        let (acked, synced) = (j.last_seq(), j.synced_seq());
        drop(j);
        fs.power_loss(rng.random()).unwrap();
        let (j, report) = Journal::open(dir, JournalOptions::default())
            .unwrap_or_else(|e| panic!("recovery after power loss: {e}"));
        let kept = j.last_seq();
        drop(j);
        assert_std_records(dir, kept, run);
        assert!(
            kept >= synced,
            "lost fsynced records: kept {kept} < synced {synced}: {report}"
        );
        assert!(kept <= acked);
        let lost = acked - kept;
        let window_ms = if lost == 0 {
            0
        } else {
            crash.duration_since(ack_at[kept as usize]).as_millis() as u64
        };
        eprintln!(
            "run {run}: {acked} acknowledged, {synced} fsynced, {kept} kept after power loss; \
             lost {lost}, the oldest acknowledged {window_ms} ms before the crash \
             (interval {INTERVAL_MS} ms)"
        );
        assert!(
            window_ms <= INTERVAL_MS + SCHEDULING_SLACK_MS,
            "lost a record acknowledged {window_ms} ms before the crash, \
             beyond the {INTERVAL_MS} ms interval"
        );
    }
}
