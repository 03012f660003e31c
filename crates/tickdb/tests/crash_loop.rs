//! The kill -9 loop (issue: durability). Writers post ILP over HTTP under
//! `--fsync always` and record every acknowledgement here, outside the
//! database; at a random moment the server is killed with SIGKILL and
//! restarted on the same data directory. After every restart:
//!
//! - the journal holds every acknowledged row exactly once and in the order
//!   each writer sent it, and what it holds of each writer is a prefix of
//!   what that writer sent (never a row it did not send);
//! - the rdb (rebuilt by journal replay) holds exactly the journal's rows.
//!
//! `TICKDB_CRASH_ITERATIONS` sets the number of kills (default 200, which
//! runs in about a minute here); `scripts/crash-loop.sh --long` runs
//! thousands. `TICKDB_SEED` reproduces a run.

mod support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{seed, HttpConn, Server};
use tickdb_core::batch::ColumnData;
use tickdb_core::Schema;
use tickdb_journal::JournalReader;

const ITERATIONS_DEFAULT: usize = 200;
const WRITERS: usize = 4;
/// Rows per request are drawn from 1..=ROWS_PER_REQUEST_MAX.
const ROWS_PER_REQUEST_MAX: u64 = 64;
/// The kill comes this many ms (drawn uniformly) after the writers start.
const KILL_AFTER_MS_MAX: u64 = 120;

/// Per writer (its `sym`): rows acknowledged and rows sent (acknowledged or
/// in flight when the server died). Writers number their rows 0, 1, 2, …
/// in the `size` column.
#[derive(Default, Clone, Copy, Debug)]
struct Tally {
    acked: u64,
    sent: u64,
}

fn iterations() -> usize {
    std::env::var("TICKDB_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ITERATIONS_DEFAULT)
}

/// Posts numbered rows for `sym` until the server stops answering.
fn writer(port: u16, sym: String, seed: u64, stop: Arc<AtomicBool>) -> Tally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = Tally::default();
    let Ok(mut conn) = HttpConn::connect(port) else {
        return t;
    };
    let mut body = String::new();
    while !stop.load(Ordering::Relaxed) {
        let n = rng.random_range(1..=ROWS_PER_REQUEST_MAX);
        body.clear();
        for i in t.sent..t.sent + n {
            body.push_str(&format!(
                "trade,sym={sym} price={}.25,size={i}i {}\n",
                i % 1000,
                1_700_000_000_000_000_000u64 + i
            ));
        }
        t.sent += n;
        match conn.request("POST", "/write", body.as_bytes()) {
            Ok((204, _)) => t.acked = t.sent,
            Ok((status, b)) => panic!(
                "{sym}: unexpected HTTP {status}: {}",
                String::from_utf8_lossy(&b)
            ),
            // The server was killed: this request's rows may or may not be
            // journaled; they were sent, not acknowledged.
            Err(_) => break,
        }
    }
    t
}

/// Reads the journal and checks it against the tallies; returns rows per sym.
fn check_journal(
    dir: &Path,
    to_seq: u64,
    tallies: &BTreeMap<String, Tally>,
) -> BTreeMap<String, u64> {
    let schema = Schema::default_schema();
    let mut next: BTreeMap<String, u64> = BTreeMap::new();
    let reader = JournalReader::open(&dir.join("journal"), 1, to_seq).expect("opening the journal");
    for rec in reader {
        let rec = rec.expect("a journal record after recovery");
        let batches = tickdb_core::codec::decode(&rec.payload, Some(&schema))
            .expect("a journal payload decodes");
        for b in batches {
            assert_eq!(b.table, "trade");
            let (ColumnData::Symbol { dict, keys }, ColumnData::I64(sizes)) =
                (&b.columns[1].data, &b.columns[3].data)
            else {
                panic!("trade columns are (time, sym, price, size)");
            };
            for (k, size) in keys.iter().zip(sizes) {
                let sym = &dict[*k as usize];
                let n = next.entry(sym.clone()).or_default();
                assert_eq!(
                    *size, *n as i64,
                    "{sym}: journal seq {} holds row {size} where row {n} was due \
                     (a duplicate, a gap or a reordering)",
                    rec.seq
                );
                *n += 1;
            }
        }
    }
    for (sym, t) in tallies {
        let got = next.get(sym).copied().unwrap_or(0);
        assert!(
            got >= t.acked,
            "{sym}: lost acknowledged rows: journal has {got}, {} were acknowledged",
            t.acked
        );
        assert!(
            got <= t.sent,
            "{sym}: journal has {got} rows, only {} were sent",
            t.sent
        );
    }
    for sym in next.keys() {
        assert!(
            tallies.contains_key(sym),
            "journal holds rows of {sym}, which nobody sent"
        );
    }
    next
}

/// The rdb, rebuilt by replay, must hold exactly the journal's rows.
fn check_rdb(server: &Server, journal: &BTreeMap<String, u64>) {
    let r = server.exec(
        "select sym, count(*) as n, min(size) as lo, max(size) as hi from trade group by sym",
    );
    let rows = r["dataset"].as_array().expect("dataset");
    let mut got = BTreeMap::new();
    for row in rows {
        let sym = row[0].as_str().expect("sym").to_string();
        let n = row[1].as_u64().expect("n");
        assert_eq!(
            row[2].as_i64(),
            Some(0),
            "{sym}: rdb rows do not start at 0"
        );
        assert_eq!(
            row[3].as_i64(),
            Some(n as i64 - 1),
            "{sym}: rdb has a gap or duplicate"
        );
        got.insert(sym, n);
    }
    assert_eq!(
        &got, journal,
        "the rdb differs from the journal after replay"
    );
}

fn crash_loop(test: &str, fsync: &[&str], iterations: usize) {
    let seed = seed(test);
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut rows_total = 0u64;
    for it in 0..=iterations {
        let mut server = Server::up(&data, fsync);
        let seq = server.status()["tp"]["seq"].as_u64().expect("tp seq");
        let journal = check_journal(&data, seq, &tallies);
        check_rdb(&server, &journal);
        rows_total = journal.values().sum();
        if it == iterations {
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let sym = format!("i{it}w{w}");
                let (port, s, stop) = (server.http, rng.random(), stop.clone());
                std::thread::spawn(move || (sym.clone(), writer(port, sym, s, stop)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(
            rng.random_range(0..=KILL_AFTER_MS_MAX),
        ));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let (sym, t) = h.join().expect("a writer panicked");
            tallies.insert(sym, t);
        }
        if (it + 1) % 50 == 0 {
            eprintln!(
                "{test}: {} kills, {rows_total} rows recovered so far",
                it + 1
            );
        }
    }
    let acked: u64 = tallies.values().map(|t| t.acked).sum();
    eprintln!(
        "{test}: {iterations} kills; {acked} rows acknowledged, {rows_total} recovered, none lost"
    );
    assert!(
        acked > 0,
        "no write was ever acknowledged: the loop tested nothing"
    );
}

#[test]
fn kill9_loop_fsync_always() {
    crash_loop(
        "kill9_loop_fsync_always",
        &["--fsync", "always"],
        iterations(),
    );
}

/// Under `interval`, a kill -9 (a process crash, not a power loss) loses
/// nothing either: acknowledged rows were written to the kernel. What power
/// loss can take under `interval` is measured in the journal crate's
/// `interval_power_loss_stays_within_the_window`.
#[test]
fn kill9_loop_fsync_interval() {
    crash_loop(
        "kill9_loop_fsync_interval",
        &["--fsync", "interval", "--fsync-interval-ms", "50"],
        (iterations() / 4).max(10),
    );
}
