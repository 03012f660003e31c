//! Hot Restart of an rdb, model-based: random updates to append and keyed
//! tables, table clears, checkpoints (some stopped part-way, as a crash would
//! stop them), crashes at any point, and restarts that restore the store and
//! replay only the journal after its checkpoint. After every restart the rdb
//! must hold exactly the rows of an rdb rebuilt from the whole journal, in the
//! same order. Restores alternate between parallelism 1 and 3. The same
//! run with the quote table placed in fsmem restores its chunks into fsmem.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::domain::Domains;
use tickdb_core::from_arrow::batch_from_arrow;
use tickdb_core::store::Store;
use tickdb_core::{Batch, Schema};
use tickdb_rdb::hot::{CheckpointCrash, HotOptions, HotRestart};
use tickdb_rdb::Rdb;

const SCHEMA: &str = r#"
[[table]]
name = "trade"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "price", type = "f64" },
  { name = "size", type = "i64" },
  { name = "note", type = "string" },
]

[[table]]
name = "quote"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "bid", type = "f64" },
  { name = "ask", type = "f64" },
]

[[table]]
name = "last"
kind = "keyed"
key = ["sym", "venue"]
column = [
  { name = "sym", type = "symbol" },
  { name = "venue", type = "i32" },
  { name = "time", type = "timestamp" },
  { name = "price", type = "f64" },
]
"#;

const SYMS: [&str; 7] = ["AAPL", "MSFT", "IBM", "", "GOOG", "ES", "NQ"];

fn seed(test: &str) -> u64 {
    tickdb_core::testing::seed(test)
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::parse(SCHEMA, "test").unwrap())
}

/// The schema with the quote table in fsmem.
fn fsmem_schema() -> Arc<Schema> {
    let text = SCHEMA.replace(
        "name = \"quote\"\n",
        "name = \"quote\"\ndomain = \"fsmem\"\n",
    );
    let s = Schema::parse(&text, "test").unwrap();
    assert!(s
        .table("quote")
        .unwrap()
        .columns
        .iter()
        .all(|c| c.domain == tickdb_core::domain::Domain::Fsmem));
    Arc::new(s)
}

/// One random update: a few batches, sometimes a clear marker among them.
fn update(rng: &mut StdRng, schema: &Schema, t: &mut i64) -> Vec<Batch> {
    let mut out = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let r = rng.random_range(0..100);
        if r < 3 {
            let name = ["trade", "quote", "last"][rng.random_range(0..3)];
            out.push(Batch::clear_marker(name));
            continue;
        }
        let name = if r < 45 {
            "trade"
        } else if r < 80 {
            "quote"
        } else {
            "last"
        };
        let def = schema.table(name).unwrap();
        let mut b = BatchBuilder::new(def);
        // Mostly small updates, sometimes one bigger than a column chunk.
        let rows = if rng.random_bool(0.02) {
            rng.random_range(2000..9000)
        } else {
            rng.random_range(1..40)
        };
        for _ in 0..rows {
            *t += rng.random_range(0..1000);
            let sym = SYMS[rng.random_range(0..SYMS.len())];
            match name {
                "trade" => {
                    b.set(0, Value::Timestamp(*t));
                    if rng.random_bool(0.95) {
                        b.set(1, Value::Symbol(sym));
                    }
                    b.set(2, Value::F64(rng.random_range(1.0..500.0)));
                    if rng.random_bool(0.9) {
                        b.set(3, Value::I64(rng.random_range(1..10_000)));
                    }
                    if rng.random_bool(0.3) {
                        b.set(4, Value::Str(&"x".repeat(rng.random_range(0..20))));
                    }
                }
                "quote" => {
                    b.set(0, Value::Timestamp(*t));
                    b.set(1, Value::Symbol(sym));
                    let bid = rng.random_range(1.0..500.0);
                    b.set(2, Value::F64(bid));
                    b.set(3, Value::F64(bid + 0.01));
                }
                _ => {
                    b.set(0, Value::Symbol(sym));
                    b.set(1, Value::I32(rng.random_range(0..3)));
                    b.set(2, Value::Timestamp(*t));
                    b.set(3, Value::F64(rng.random_range(1.0..500.0)));
                }
            }
            b.end_row();
        }
        out.push(b.finish());
    }
    out
}

/// A table's rows as the rdb answers them (latest per key for keyed tables),
/// in order, as one batch.
fn rows(rdb: &Rdb, table: &str) -> Option<Batch> {
    let snap = rdb.store().snapshot(table).unwrap();
    let parts: Vec<Batch> = snap
        .chunks
        .iter()
        .map(|c| batch_from_arrow(table, &c.batch).unwrap())
        .collect();
    Batch::concat(&parts)
}

fn assert_same(got: &Rdb, want: &Rdb, ctx: &str) {
    assert_eq!(got.applied_seq(), want.applied_seq(), "{ctx}: applied seq");
    for t in ["trade", "quote", "last"] {
        let (g, w) = (rows(got, t), rows(want, t));
        let n = |b: &Option<Batch>| b.as_ref().map(|b| b.rows).unwrap_or(0);
        assert_eq!(n(&g), n(&w), "{ctx}: rows of {t}");
        assert!(g == w, "{ctx}: rows of {t} differ");
    }
}

fn fresh_rdb(schema: &Arc<Schema>, fsmem: Option<&std::path::Path>) -> Arc<Rdb> {
    Rdb::new(Arc::new(
        Store::new(schema.clone(), domains(fsmem)).unwrap(),
    ))
}

/// Where a test's fsmem tables live (the schema says which are there).
fn domains(fsmem: Option<&std::path::Path>) -> Domains {
    Domains::new(fsmem).unwrap()
}

/// Opens the store, restores an rdb from it and replays the journal tail.
fn restart(
    dir: &std::path::Path,
    fsmem: Option<&std::path::Path>,
    schema: &Arc<Schema>,
    journal: &[Vec<Batch>],
    parallelism: usize,
    ctx: &str,
) -> Arc<Rdb> {
    let mut opts = HotOptions::new(dir);
    opts.parallelism = parallelism;
    opts.fsync = false;
    opts.chunk_size_bytes = 64 * 1024;
    let hot = HotRestart::open(&opts).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    if let Some(m) = hot.checkpoint_found() {
        // The checkpoint records the store's schema as cut, rendered.
        assert_eq!(m.schema_toml, schema.to_toml(), "{ctx}");
        hot.check_compatible(schema, &[], &[], journal.len() as u64)
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    }
    let store = Arc::new(Store::new(schema.clone(), domains(fsmem)).unwrap());
    let report = hot
        .restore(&store, &[], &[])
        .unwrap_or_else(|e| panic!("{ctx}: restore: {e}"));
    let rdb = Rdb::restored(store, report.seq);
    rdb.attach_hot_restart(Arc::new(hot));
    for (i, u) in journal.iter().enumerate().skip(report.seq as usize) {
        assert!(rdb.apply(i as u64 + 1, u).unwrap());
    }
    rdb
}

#[test]
fn restart_from_store_and_journal_tail_equals_full_replay() {
    let seed = seed("restart_from_store_and_journal_tail_equals_full_replay");
    restarts_equal_full_replay(seed, schema(), None);
}

#[test]
fn restart_into_fsmem_equals_full_replay() {
    let seed = seed("restart_into_fsmem_equals_full_replay");
    let fsmem = tempfile::tempdir().unwrap();
    restarts_equal_full_replay(seed, fsmem_schema(), Some(fsmem.path()));
}

fn restarts_equal_full_replay(seed: u64, schema: Arc<Schema>, fsmem: Option<&std::path::Path>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut journal: Vec<Vec<Batch>> = Vec::new();
    // The reference's fsmem files go in a directory of their own (a
    // store's Domains removes leftover files in its directory).
    let reference_fsmem = tempfile::tempdir().unwrap();
    let reference = fresh_rdb(&schema, fsmem.map(|_| reference_fsmem.path()));
    let mut t = 1_700_000_000_000_000_000i64;
    let (mut checkpoints, mut crashed_checkpoints, mut restored_rows) = (0, 0, 0u64);
    for round in 0..12 {
        let ctx = format!("seed {seed} round {round}");
        let rdb = restart(
            dir.path(),
            fsmem,
            &schema,
            &journal,
            [1, 3][round % 2],
            &ctx,
        );
        assert_same(&rdb, &reference, &ctx);
        if fsmem.is_some() && rdb.store().snapshot("quote").unwrap().rows > 0 {
            assert!(
                rdb.store().memory().fsmem > 0,
                "{ctx}: quote restored outside fsmem"
            );
        }
        let hot = rdb.hot_restart().unwrap().clone();
        restored_rows += hot
            .status()
            .restore
            .map(|r| r.rows.values().sum::<u64>())
            .unwrap_or(0);
        for _ in 0..rng.random_range(10..120) {
            let u = update(&mut rng, &schema, &mut t);
            journal.push(u.clone());
            let seq = journal.len() as u64;
            assert!(rdb.apply(seq, &u).unwrap());
            assert!(reference.apply(seq, &u).unwrap());
            if rng.random_bool(0.06) {
                let r = rdb.checkpoint().unwrap().unwrap();
                assert_eq!(r.seq, seq, "{ctx}");
                assert!(r.pause_us < 1_000_000, "{ctx}: pause {} µs", r.pause_us);
                checkpoints += 1;
            }
        }
        // End the round with a crash: plain, or part-way through a checkpoint.
        match rng.random_range(0..4) {
            0 => {}
            1 => {
                let n = rng.random_range(1..6);
                hot.set_test_crash(Some(CheckpointCrash::AfterRecords(n)));
                if rdb.checkpoint().is_err() {
                    crashed_checkpoints += 1;
                }
            }
            2 => {
                hot.set_test_crash(Some(CheckpointCrash::BeforeClear));
                if rdb.checkpoint().is_err() {
                    crashed_checkpoints += 1;
                }
            }
            _ => {
                rdb.checkpoint().unwrap();
                checkpoints += 1;
            }
        }
        drop(hot);
        drop(rdb);
    }
    let ctx = format!("seed {seed} final");
    let rdb = restart(dir.path(), fsmem, &schema, &journal, 2, &ctx);
    assert_same(&rdb, &reference, &ctx);
    eprintln!(
        "{} updates, {checkpoints} checkpoints, {crashed_checkpoints} stopped part-way, {restored_rows} rows restored over the restarts",
        journal.len()
    );
    assert!(checkpoints > 0 && restored_rows > 0);
}

#[test]
fn a_store_for_another_schema_filter_or_journal_is_refused() {
    let schema = schema();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = HotOptions::new(dir.path());
    opts.fsync = false;
    {
        let hot = HotRestart::open(&opts).unwrap();
        let store = Arc::new(Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap());
        hot.restore(&store, &["trade".into()], &[]).unwrap();
        let rdb = Rdb::new(store);
        rdb.attach_hot_restart(Arc::new(hot));
        let mut rng = StdRng::seed_from_u64(1);
        let mut t = 0;
        for seq in 1..=5 {
            rdb.apply(seq, &update(&mut rng, &schema, &mut t)).unwrap();
        }
        assert_eq!(rdb.checkpoint().unwrap().unwrap().seq, 5);
    }
    let hot = HotRestart::open(&opts).unwrap();
    assert_eq!(hot.checkpoint_found().unwrap().seq, 5);
    hot.check_compatible(&schema, &["trade".into()], &[], 5)
        .unwrap();
    let e = hot
        .check_compatible(&schema, &[], &[], 5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("subscribes to tables"), "{e}");
    let e = hot
        .check_compatible(&schema, &["trade".into()], &[], 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another journal"), "{e}");
    let other = Schema::default_schema();
    let e = hot
        .check_compatible(&other, &["trade".into()], &[], 5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("schema differs"), "{e}");
}
