//! Fault injection through `FaultyStorage`: failed fsyncs, full disks and
//! short writes poison the journal, and recovery afterwards yields exactly a
//! prefix that holds every acknowledged record.

mod common;

use std::sync::Arc;

use common::*;
use rand::Rng;
use tickdb_journal::{
    Fault, FaultyStorage, FsyncPolicy, Journal, JournalError, JournalOptions, Op,
};

/// Checks the journal after a crash: recovery (strict, real files) succeeds
/// and leaves records 1..=L, all correct, with `acked <= L <= assigned`.
fn assert_recovers_prefix(dir: &std::path::Path, acked: u64, assigned: u64, salt: u64) -> u64 {
    let (j, rep) = Journal::open(dir, JournalOptions::default())
        .unwrap_or_else(|e| panic!("recovery after the fault failed: {e}"));
    let last = j.last_seq();
    drop(j);
    assert!(
        last >= acked,
        "lost acknowledged records: last {last} < acked {acked}: {rep}"
    );
    assert!(
        last <= assigned,
        "more records than appended: {last} > {assigned}"
    );
    assert_std_records(dir, last, salt);
    last
}

fn single_fault(op: Op, fault: Fault) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = FaultyStorage::new();
    let (mut j, _) = Journal::open_with(fs.clone(), dir, JournalOptions::default()).unwrap();
    for _ in 0..5 {
        append_std(&mut j, 0);
        assert!(j.commit().unwrap());
    }
    let acked = j.synced_seq();
    fs.inject(op, 0, fault);
    append_std(&mut j, 0);
    append_std(&mut j, 0);
    let err = j.commit().unwrap_err();
    assert!(matches!(err, JournalError::Io { .. }), "{err}");
    let reason = j.poisoned().expect("poisoned").to_string();
    assert!(!reason.is_empty());
    // Everything after is refused, even once the disk is healthy again: a
    // retried fsync could report success for pages the kernel dropped.
    fs.clear();
    assert!(matches!(
        j.append(1, 1, 1, b"x"),
        Err(JournalError::Poisoned(_))
    ));
    assert!(matches!(j.commit(), Err(JournalError::Poisoned(_))));
    assert!(matches!(j.sync(), Err(JournalError::Poisoned(_))));
    assert!(matches!(j.roll_segment(), Err(JournalError::Poisoned(_))));
    assert_eq!(j.sync_due_in(), None);
    assert_eq!(j.synced_seq(), acked);
    drop(j);
    let last = assert_recovers_prefix(dir, acked, 7, 0);
    // Reopened, the journal takes new records after the recovered prefix.
    let (mut j, rep) = Journal::open(dir, JournalOptions::default()).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert!(j.poisoned().is_none());
    append_std(&mut j, 0);
    assert!(j.commit().unwrap());
    drop(j);
    assert_std_records(dir, last + 1, 0);
}

#[test]
fn eio_on_fsync_poisons() {
    single_fault(Op::SyncData, Fault::Eio);
}

#[test]
fn enospc_on_write_poisons() {
    single_fault(Op::Write, Fault::Enospc);
}

#[test]
fn short_write_poisons_and_recovery_truncates_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = FaultyStorage::new();
    let (mut j, _) = Journal::open_with(fs.clone(), dir, JournalOptions::default()).unwrap();
    append_std(&mut j, 0);
    assert!(j.commit().unwrap());
    fs.inject(Op::Write, 0, Fault::ShortWrite);
    // One record, so the half that reaches the file is a torn record.
    append_std(&mut j, 0);
    assert!(j.commit().is_err());
    assert!(
        j.poisoned().unwrap().contains("short write"),
        "{:?}",
        j.poisoned()
    );
    drop(j);
    let (j, rep) = Journal::open(dir, JournalOptions::default()).unwrap();
    assert!(rep.truncated.is_some(), "{rep}");
    assert_eq!(j.last_seq(), 1);
    drop(j);
    single_fault(Op::Write, Fault::ShortWrite);
}

#[test]
fn failed_segment_roll_poisons() {
    for op in [Op::Create, Op::SyncDir, Op::SyncData, Op::Write] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let fs = FaultyStorage::new();
        let (mut j, _) = Journal::open_with(fs.clone(), dir, JournalOptions::default()).unwrap();
        append_std(&mut j, 0);
        assert!(j.commit().unwrap());
        fs.inject(op, 0, Fault::Eio);
        assert!(j.roll_segment().is_err(), "{op:?}");
        assert!(j.poisoned().is_some());
        drop(j);
        fs.clear();
        assert_recovers_prefix(dir, 1, 1, 0);
    }
}

/// Random appends, commits, syncs and rolls under a random policy; a random
/// fault at a random point; then a process crash or (for policies that
/// fsync) a power loss that drops part of the unsynced bytes. Recovery must
/// give a prefix holding every record the journal reported durable (for a
/// power loss) or written (for a process crash).
#[test]
fn random_faults_then_crash_recover_a_prefix() {
    let seed = seed("random_faults_then_crash_recover_a_prefix");
    let mut rng = rng(seed);
    for round in 0..40 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let fs = FaultyStorage::new();
        let policy = match rng.random_range(0..3) {
            0 => FsyncPolicy::Always,
            1 => FsyncPolicy::IntervalMs(1),
            _ => FsyncPolicy::Never,
        };
        let o = opts(rng.random_range(200..3000), policy);
        let (mut j, _) = Journal::open_with(fs.clone(), dir, o).unwrap();
        let op = [Op::Write, Op::SyncData, Op::Create, Op::SyncDir][rng.random_range(0..4)];
        let fault = [Fault::Eio, Fault::Enospc, Fault::ShortWrite][rng.random_range(0..3)];
        fs.inject(op, rng.random_range(0..60), fault);
        let (mut written, mut durable) = (0u64, 0u64);
        for _ in 0..rng.random_range(1..200) {
            let r = match rng.random_range(0..10) {
                0..=5 => {
                    for _ in 0..rng.random_range(1..8) {
                        append_std(&mut j, seed);
                    }
                    j.commit().map(|synced| {
                        written = j.written_seq();
                        if synced {
                            durable = j.last_seq();
                        }
                    })
                }
                6 => j.sync().map(|()| durable = j.synced_seq()),
                7 => j.roll_segment(),
                _ => Ok(()),
            };
            assert!(j.synced_seq() <= j.written_seq() && j.written_seq() <= j.last_seq());
            if let Err(e) = r {
                assert!(matches!(e, JournalError::Io { .. }), "round {round}: {e}");
                assert!(j.poisoned().is_some());
                assert!(matches!(j.commit(), Err(JournalError::Poisoned(_))));
                break;
            }
            durable = durable.max(j.synced_seq());
        }
        let assigned = j.last_seq();
        drop(j);
        let power_loss = policy != FsyncPolicy::Never && rng.random_range(0..2) == 0;
        let acked = if power_loss {
            fs.power_loss(rng.random()).unwrap();
            durable
        } else {
            written
        };
        fs.clear();
        eprintln!("round {round}: {policy:?} {op:?} {fault:?} power_loss={power_loss} acked={acked} assigned={assigned}");
        assert_recovers_prefix(dir, acked, assigned, seed);
    }
}

#[test]
fn storage_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Journal>();
    let _: Arc<dyn tickdb_journal::Storage> = FaultyStorage::new();
}
