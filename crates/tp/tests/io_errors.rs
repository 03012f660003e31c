//! After an fsync failure (EIO), a full disk (ENOSPC) or a short write, the
//! tp acknowledges nothing more and tells every writer why; nothing that
//! failed is published; a restart recovers exactly the acknowledged prefix.

use std::sync::Arc;
use tickdb_core::batch::Value;
use tickdb_core::{Batch, BatchBuilder, Schema};
use tickdb_journal::{Fault, FaultyStorage, FsyncPolicy, Op, RecoveryMode};
use tickdb_tp::{Tickerplant, TpConfig, TpError};

fn config(dir: &std::path::Path) -> TpConfig {
    TpConfig {
        journal_dir: dir.join("journal"),
        schema: Arc::new(Schema::default_schema()),
        schema_toml: tickdb_core::schema::DEFAULT_SCHEMA_TOML.to_string(),
        schema_origin: "the built-in schema".to_string(),
        fsync: FsyncPolicy::Always,
        recovery: RecoveryMode::Strict,
        segment_bytes_max: 1 << 20,
        publish_interval_ms: 0,
        line_bytes_max: 1 << 16,
        request_bytes_max: 1 << 26,
        sub_queue_bytes_max: 1 << 26,
    }
}

fn trade(schema: &Schema, id: i64) -> Vec<Batch> {
    let def = schema.table("trade").expect("trade table");
    let mut b = BatchBuilder::new(def);
    b.set(0, Value::Timestamp(1_700_000_000_000_000_000 + id));
    b.set(1, Value::Symbol("A"));
    b.set(2, Value::F64(1.5));
    b.set(3, Value::I64(id));
    b.end_row();
    vec![b.finish()]
}

fn fault_case(op: Op, fault: Fault) {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyStorage::new();
    let (tp, _) = Tickerplant::open_with_storage(config(tmp.path()), fs.clone()).unwrap();
    let schema = tp.schema().clone();
    let sub = tp
        .subscribe("watcher", Default::default(), 1)
        .expect("subscribe");
    for id in 1..=3 {
        assert_eq!(tp.write_blocking(trade(&schema, id)).unwrap(), id as u64);
    }
    fs.inject(op, 0, fault);
    let err = tp.write_blocking(trade(&schema, 4)).unwrap_err();
    assert!(matches!(err, TpError::Journal(_)), "{err}");
    let reason = err.to_string();
    // Healthy disk again: still refused, because a retried fsync could
    // report success for pages the kernel already dropped.
    fs.clear();
    let again = tp.write_blocking(trade(&schema, 5)).unwrap_err();
    assert!(matches!(again, TpError::Journal(_)), "{again}");
    let st = tp.status();
    assert!(st.poisoned.is_some(), "status must say why");
    assert_eq!(st.seq, 3, "nothing after the failure is counted");
    eprintln!("{op:?}/{fault:?}: refused with: {reason}");
    // Exactly the three acknowledged updates were published.
    let mut seqs = Vec::new();
    while seqs.len() < 3 {
        for u in sub.queue.next_blocking().expect("three updates") {
            seqs.push(u.seq);
        }
    }
    assert_eq!(seqs, vec![1, 2, 3]);
    tp.shutdown();
    drop(sub);
    drop(tp);
    // Restart on real files: every acknowledged update, then a prefix of the
    // refused one (its write() may have reached the page cache before the
    // fsync failed: its outcome is unknown to the client, as after a
    // timeout), and the journal takes writes again.
    let (tp, report) = Tickerplant::open(config(tmp.path())).unwrap();
    let seq = tp.status().seq;
    assert!((3..=4).contains(&seq), "recovered seq {seq}: {report}");
    assert_eq!(tp.write_blocking(trade(&schema, 6)).unwrap(), seq + 1);
    tp.shutdown();
}

#[test]
fn eio_on_fsync_stops_acknowledging() {
    fault_case(Op::SyncData, Fault::Eio);
}

#[test]
fn enospc_stops_acknowledging() {
    fault_case(Op::Write, Fault::Enospc);
}

#[test]
fn short_write_stops_acknowledging() {
    fault_case(Op::Write, Fault::ShortWrite);
}
