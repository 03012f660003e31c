//! A tp's role decides what it takes: a standby refuses writes naming its
//! primary, a promoted one journals in its new epoch (from a segment of its
//! own), a fenced one refuses and never acknowledges, and a primary whose
//! leader lease ran out refuses the moment it runs again.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::batch::Value;
use tickdb_core::{Batch, BatchBuilder, Schema};
use tickdb_tp::{Role, Tickerplant, TpConfig, TpError};

fn config(dir: &std::path::Path) -> TpConfig {
    TpConfig::new(
        dir.join("journal"),
        Arc::new(Schema::default_schema()),
        tickdb_core::schema::DEFAULT_SCHEMA_TOML.to_string(),
    )
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

/// (seq, epoch) of records 1..=2.
fn epochs_in_journal(dir: &std::path::Path) -> Vec<(u64, u32)> {
    tickdb_journal::JournalReader::open(&dir.join("journal"), 1, 2)
        .unwrap()
        .map(|r| r.map(|r| (r.seq, r.epoch)).unwrap())
        .collect()
}

#[tokio::test]
async fn a_standby_refuses_then_is_promoted_into_its_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::default_schema();
    {
        let (tp, _) = Tickerplant::open(config(tmp.path())).unwrap();
        tp.write(trade(&schema, 1)).await.unwrap();
        tp.shutdown();
    }
    let mut cfg = config(tmp.path());
    cfg.standby_of = Some("10.0.0.1:8711".into());
    let (tp, _) = Tickerplant::open(cfg).unwrap();
    match tp.write(trade(&schema, 2)).await {
        Err(TpError::Standby { primary, .. }) => assert_eq!(primary, "10.0.0.1:8711"),
        other => panic!("{other:?}"),
    }
    assert_eq!(tp.promote(3).await.unwrap(), 1);
    assert_eq!((tp.role(), tp.epoch()), (Role::Primary, 3));
    assert_eq!(tp.write(trade(&schema, 3)).await.unwrap(), 2);
    // An epoch must grow.
    assert!(tp.promote(3).await.is_err());
    tp.shutdown();
    assert_eq!(epochs_in_journal(tmp.path()), vec![(1, 0), (2, 3)]);
    // The new epoch starts in a segment of its own.
    assert!(tmp
        .path()
        .join("journal/journal-00000000000000000002.log")
        .exists());
}

#[tokio::test]
async fn a_fenced_primary_refuses_until_unfenced() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::default_schema();
    let (tp, _) = Tickerplant::open(config(tmp.path())).unwrap();
    tp.write(trade(&schema, 1)).await.unwrap();
    tp.fence("switchover to b", Some("10.0.0.2:8711".into()));
    match tp.write(trade(&schema, 2)).await {
        Err(TpError::Fenced { reason, primary }) => {
            assert_eq!(reason, "switchover to b");
            assert_eq!(primary.as_deref(), Some("10.0.0.2:8711"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tp.fences_total(), 1);
    tp.unfence();
    assert_eq!(tp.write(trade(&schema, 3)).await.unwrap(), 2);
    tp.shutdown();
}

#[tokio::test]
async fn a_primary_past_its_lease_refuses_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::default_schema();
    let (tp, _) = Tickerplant::open(config(tmp.path())).unwrap();
    tp.set_lease_deadline(Some(Instant::now() + Duration::from_millis(50)));
    assert!(tp.write(trade(&schema, 1)).await.is_ok());
    // Nothing fences it but the clock: a paused primary that runs again
    // past its deadline refuses before any timer could act.
    std::thread::sleep(Duration::from_millis(60));
    match tp.write(trade(&schema, 2)).await {
        Err(TpError::Fenced { reason, .. }) => assert!(reason.contains("lease"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Renewed: it takes writes again.
    tp.set_lease_deadline(Some(Instant::now() + Duration::from_secs(5)));
    assert!(tp.write(trade(&schema, 3)).await.is_ok());
    tp.shutdown();
}
