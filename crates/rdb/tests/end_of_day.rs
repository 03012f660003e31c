//! End of day in the rdb: an end-of-day marker moves the append tables'
//! rows into a closing day (keyed tables stay), checkpoints wait while it
//! is not committed, and after the commit a checkpoint persists the empty
//! day so a restart restores only what came after the marker.

use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::domain::Domains;
use tickdb_core::store::Store;
use tickdb_core::{Batch, Schema};
use tickdb_rdb::hot::{HotOptions, HotRestart};
use tickdb_rdb::{Rdb, RdbError};

const SCHEMA: &str = r#"
[[table]]
name = "trade"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "size", type = "i64" },
]

[[table]]
name = "last"
kind = "keyed"
key = ["sym"]
column = [
  { name = "sym", type = "symbol" },
  { name = "time", type = "timestamp" },
  { name = "size", type = "i64" },
]
"#;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::parse(SCHEMA, "test").unwrap())
}

fn trade(schema: &Schema, size: i64) -> Batch {
    let mut b = BatchBuilder::new(schema.table("trade").unwrap());
    b.set(0, Value::Timestamp(1_700_000_000_000_000_000 + size));
    b.set(1, Value::Symbol("A"));
    b.set(2, Value::I64(size));
    b.end_row();
    b.finish()
}

fn last(schema: &Schema, size: i64) -> Batch {
    let mut b = BatchBuilder::new(schema.table("last").unwrap());
    b.set(0, Value::Symbol("A"));
    b.set(1, Value::Timestamp(size));
    b.set(2, Value::I64(size));
    b.end_row();
    b.finish()
}

fn rows(rdb: &Rdb, table: &str) -> u64 {
    rdb.status().tables[table].rows
}

fn hot(dir: &std::path::Path) -> HotRestart {
    let mut opts = HotOptions::new(dir);
    opts.fsync = false;
    HotRestart::open(&opts).unwrap()
}

#[test]
fn a_marker_moves_the_day_out_and_checkpoints_wait_for_its_commit() {
    let schema = schema();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap());
    let h = hot(dir.path());
    h.restore(&store, &[], &[]).unwrap();
    let rdb = Rdb::restored(store, 0);
    rdb.attach_hot_restart(Arc::new(h));
    rdb.end_days();
    rdb.apply(1, &[trade(&schema, 1), last(&schema, 1)])
        .unwrap();
    rdb.apply(2, &[trade(&schema, 2)]).unwrap();
    assert!(rdb.checkpoint().unwrap().is_some());
    rdb.apply(3, &[Batch::end_of_day(20_412)]).unwrap();
    // The day left the table; the keyed table's state stayed.
    assert_eq!(rows(&rdb, "trade"), 0);
    assert_eq!(rows(&rdb, "last"), 1);
    let closing = rdb.store().days().closing();
    assert_eq!(closing.len(), 1);
    assert_eq!((closing[0].date, closing[0].seq), (20_412, 3));
    assert_eq!(closing[0].table("trade").map(|t| t.rows), Some(2));
    assert!(closing[0].table("last").is_none());
    // Rows after the marker are the next day's.
    rdb.apply(4, &[trade(&schema, 4)]).unwrap();
    assert_eq!(rows(&rdb, "trade"), 1);
    // A query sees the closing day and today, once each.
    let snap = rdb.store().day_snapshot("trade").unwrap();
    assert_eq!(snap.today.rows, 1);
    assert_eq!(snap.closing.len(), 1);
    assert_eq!(snap.closing[0].1.rows, 2);
    // No checkpoint (and no reseed cut) while the day is not committed.
    assert!(matches!(rdb.checkpoint(), Err(RdbError::Deferred(_))));
    assert!(rdb.consistent_cut().is_err());
    rdb.store()
        .days()
        .commit(3, &[("trade".into(), 20_412, "part-00000.parquet".into())]);
    let snap = rdb.store().day_snapshot("trade").unwrap();
    assert!(snap.closing.is_empty());
    assert_eq!(snap.history.get(&20_412).map(Vec::len), Some(1));
    let ck = rdb.checkpoint().unwrap().unwrap();
    assert_eq!(ck.seq, 4);
    drop(rdb);

    // A restart restores only the next day's rows.
    let store = Arc::new(Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap());
    let report = hot(dir.path()).restore(&store, &[], &[]).unwrap();
    assert_eq!(report.seq, 4);
    let rdb = Rdb::restored(store, report.seq);
    assert_eq!(rows(&rdb, "trade"), 1);
    assert_eq!(rows(&rdb, "last"), 1);
}

#[test]
fn without_a_historical_database_the_day_stays() {
    let schema = schema();
    let rdb = Rdb::new(Arc::new(
        Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap(),
    ));
    rdb.apply(1, &[trade(&schema, 1)]).unwrap();
    rdb.apply(2, &[Batch::end_of_day(20_412)]).unwrap();
    assert_eq!(rows(&rdb, "trade"), 1);
    assert!(rdb.store().days().closing().is_empty());
    assert_eq!(rdb.applied_seq(), 2);
}

#[test]
fn a_replayed_day_already_in_history_is_not_read_twice() {
    let schema = schema();
    let rdb = Rdb::new(Arc::new(
        Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap(),
    ));
    rdb.end_days();
    // What a restart finds: the part of end of day 2 was committed before
    // the crash, and the replay meets its marker again.
    rdb.store().days().set_history(
        "trade",
        [(20_412, vec!["part-00000.parquet".to_string()])].into(),
        [2].into(),
    );
    rdb.apply(1, &[trade(&schema, 1)]).unwrap();
    rdb.apply(2, &[Batch::end_of_day(20_412)]).unwrap();
    let snap = rdb.store().day_snapshot("trade").unwrap();
    assert!(
        snap.closing.is_empty(),
        "the closing day is in history already"
    );
    assert_eq!(snap.today.rows, 0);
    assert!(rdb.store().days().is_committed("trade", 2));
}
