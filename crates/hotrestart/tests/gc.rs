//! GC tests: space is reclaimed under an overwrite workload, write amplification
//! is reported, tombstones and prefix tombstones are collected once they shadow
//! nothing, and the GC thread keeps garbage bounded under back-pressure.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickdb_hotrestart::{ChunkState, Config, Store};

fn gc_until_idle(store: &Store) {
    for _ in 0..10_000 {
        if !store.run_gc_cycle().unwrap() {
            return;
        }
    }
    panic!("GC never went idle");
}

#[test]
fn gc_reclaims_space_under_overwrites() {
    let seed = common::seed("gc_reclaims_space_under_overwrites");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 64 * 1024,
        ..common::small_config()
    };
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    let mut model = BTreeMap::new();
    // Random overwrites leave every chunk partly live, so GC has to copy.
    for i in 0..6000u32 {
        let key = format!("t/{:04}", rng.random_range(0..200u32)).into_bytes();
        let mut v = vec![0u8; 1024];
        rng.fill(&mut v[..]);
        v[..4].copy_from_slice(&i.to_le_bytes());
        store.put(&key, &v).unwrap();
        model.insert(key, v);
    }
    store.sync().unwrap();
    let before = store.stats();
    let files_before = common::dir_chunk_bytes(dir.path());
    gc_until_idle(&store);
    let after = store.stats();
    let files_after = common::dir_chunk_bytes(dir.path());
    eprintln!(
        "disk {} -> {} bytes (live {}), write amplification {:.3}, gc runs {}, chunks reclaimed {}",
        files_before,
        files_after,
        after.live_bytes,
        after.write_amplification,
        after.gc_runs,
        after.gc_chunks_reclaimed
    );
    assert!(
        files_before > 15 * after.live_bytes,
        "workload did not create garbage"
    );
    // Chunks below `garbage_ratio_min` (0.3) garbage stay, plus the active chunk.
    assert!(
        (files_after as f64) < after.live_bytes as f64 / 0.7 + 2.0 * cfg.chunk_size_bytes as f64,
        "GC left {files_after} bytes"
    );
    assert_eq!(
        after.disk_bytes, files_after,
        "stats disagree with the directory"
    );
    assert!(after.gc_runs > 0 && after.gc_bytes_written > 0);
    assert!(after.write_amplification > 1.0);
    assert_eq!(after.user_bytes_written, before.user_bytes_written);
    // Sealed chunks left behind are bimodal: (almost) all live.
    for c in after
        .chunks
        .iter()
        .filter(|c| c.state == ChunkState::Sealed)
    {
        assert!(
            c.garbage_bytes * 2 <= c.file_bytes,
            "chunk {c:?} kept garbage"
        );
    }
    drop(store);
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(common::dump(&store), model);
}

#[test]
fn tombstones_and_prefix_tombstones_are_collected() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::small_config();
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    for k in 0..300u32 {
        store.put(format!("a/{k}").as_bytes(), &[7u8; 100]).unwrap();
        store.put(format!("b/{k}").as_bytes(), &[8u8; 100]).unwrap();
    }
    for k in 0..300u32 {
        assert!(store.remove(format!("a/{k}").as_bytes()).unwrap());
    }
    assert!(
        !store.remove(b"a/0").unwrap(),
        "removing a removed key writes nothing"
    );
    assert_eq!(store.clear_prefix(b"b/").unwrap(), 300);
    store.put(b"c/keep", b"kept").unwrap();
    let s = store.stats();
    assert_eq!((s.tombstones, s.prefix_tombstones), (300, 1));
    // Reopening seals the active chunks, so GC may take them all.
    store.close().unwrap();
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    let s = store.stats();
    assert_eq!(
        (s.tombstones, s.prefix_tombstones),
        (300, 1),
        "reload rebuilt the tombstones"
    );
    gc_until_idle(&store);
    let s = store.stats();
    eprintln!(
        "after GC: {} chunks, {} bytes",
        s.chunks.len(),
        s.disk_bytes
    );
    assert_eq!(
        (s.tombstones, s.prefix_tombstones),
        (0, 0),
        "tombstones shadowing nothing remain"
    );
    assert_eq!(s.live_records, 1);
    assert!(s.disk_bytes < 200, "left {} bytes on disk", s.disk_bytes);
    drop(store);
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(
        common::dump(&store),
        BTreeMap::from([(b"c/keep".to_vec(), b"kept".to_vec())])
    );
}

#[test]
fn gc_thread_bounds_garbage_with_backpressure() {
    let seed = common::seed("gc_thread_bounds_garbage_with_backpressure");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::small_config();
    cfg.chunk_size_bytes = 8192;
    cfg.gc.enabled = true;
    cfg.gc.interval_ms = 50;
    cfg.gc.backpressure_garbage_chunks = 8;
    let bound = cfg.chunk_size_bytes * cfg.gc.backpressure_garbage_chunks;
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    let store = std::sync::Arc::new(store);
    let mut model = BTreeMap::new();
    let reader = {
        let store = store.clone();
        std::thread::spawn(move || {
            // Reads run concurrently with writes and GC and never see a torn value.
            for _ in 0..2000 {
                if let Some(v) = store.get(b"k/0") {
                    assert_eq!(v.len(), 200);
                }
            }
        })
    };
    let mut max_garbage = 0;
    for i in 0..20_000u32 {
        let key = format!("k/{}", rng.random_range(0..100u32)).into_bytes();
        let mut v = vec![0u8; 200];
        v[..4].copy_from_slice(&i.to_le_bytes());
        store.put(&key, &v).unwrap();
        model.insert(key, v);
        if i % 1000 == 0 {
            max_garbage = max_garbage.max(store.stats().garbage_bytes);
        }
    }
    reader.join().unwrap();
    let s = store.stats();
    eprintln!(
        "garbage max {max_garbage} (bound {bound}), waits {} ({} ms), wa {:.2}, gc runs {}",
        s.backpressure_waits, s.backpressure_wait_ms, s.write_amplification, s.gc_runs
    );
    // A write leaves at most one record of garbage past the bound.
    assert!(
        max_garbage <= bound + 1024,
        "garbage {max_garbage} beyond bound {bound}"
    );
    assert!(s.gc_runs > 0);
    // Let GC settle, then check everything survives a reopen.
    let t = Instant::now();
    while store.stats().garbage_bytes > bound / 2 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let store = std::sync::Arc::try_unwrap(store).ok().unwrap();
    store.close().unwrap();
    let (store, _) = Store::open(
        dir.path(),
        Config {
            parallelism: 3,
            ..cfg
        },
    )
    .unwrap();
    assert_eq!(common::dump(&store), model);
}

/// A value kept in its owner's form, counting how often the store encodes it.
struct CountingSource {
    bytes: Vec<u8>,
    encodes: std::sync::atomic::AtomicUsize,
}

impl tickdb_hotrestart::ValueSource for CountingSource {
    fn encode_into(&self, out: &mut Vec<u8>) {
        self.encodes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        out.extend_from_slice(&self.bytes);
    }
}

#[test]
fn gc_reencodes_owner_held_values_and_rebind_swaps_them_in() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 16 * 1024,
        ..common::small_config()
    };
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    // One owner-held value among many overwritten ones: GC must move it and can
    // only get its bytes by encoding the source (nothing reads chunk files).
    let held = Arc::new(CountingSource {
        bytes: b"held value".repeat(50),
        encodes: Default::default(),
    });
    store.put_source(b"t/held", held.clone()).unwrap();
    assert_eq!(held.encodes.load(Ordering::Relaxed), 1, "put encodes once");
    for i in 0..400u32 {
        let key = format!("t/{:02}", i % 20).into_bytes();
        store.put(&key, &vec![i as u8; 700]).unwrap();
    }
    store.sync().unwrap();
    gc_until_idle(&store);
    assert!(
        held.encodes.load(Ordering::Relaxed) >= 2,
        "GC copied the held record without encoding its source"
    );
    assert_eq!(store.get(b"t/held").unwrap(), held.bytes);
    let want = common::dump(&store);
    store.close().unwrap();

    // After a reload the value is bytes again; rebind hands the store the
    // owner's form, which must encode to exactly those bytes.
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(common::dump(&store), want);
    let wrong = Arc::new(CountingSource {
        bytes: b"something else".to_vec(),
        encodes: Default::default(),
    });
    if cfg!(debug_assertions) {
        assert!(store.rebind(b"t/held", wrong).is_err());
    }
    let again = Arc::new(CountingSource {
        bytes: held.bytes.clone(),
        encodes: Default::default(),
    });
    assert!(store.rebind(b"t/held", again.clone()).unwrap());
    assert!(!store.rebind(b"t/absent", again.clone()).unwrap());
    let before = again.encodes.load(Ordering::Relaxed);
    assert_eq!(store.get(b"t/held").unwrap(), held.bytes);
    assert_eq!(again.encodes.load(Ordering::Relaxed), before + 1);
    assert_eq!(common::dump(&store), want);
}

/// A tombstone shadowing two chunks watches one at a time: when GC deletes
/// the chunk it watches while the other still holds an older record of its
/// key, it must stay (and the key must not come back on reload); it goes once
/// the second chunk goes too.
#[test]
fn a_tombstone_outlives_the_first_of_its_shadowed_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::small_config();
    // Only chunks with no live record are collected, so the test decides
    // which chunks go, and when.
    cfg.gc.garbage_ratio_min = 1.0;
    let v = |b: u8| vec![b; 1500]; // two records fill a 4 KiB chunk
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    store.put(b"k", &v(1)).unwrap(); // chunk A: k v1
    store.put(b"f1", &v(2)).unwrap(); // chunk A: f1
    store.put(b"k", &v(3)).unwrap(); // chunk B: k v2 (A holds k v1 under it)
    store.put(b"f2", &v(4)).unwrap(); // chunk B: f2
    store.put(b"f3", &v(5)).unwrap(); // chunk C
    assert!(store.remove(b"k").unwrap()); // shadows A and B
    store.put(b"f1", &v(6)).unwrap(); // A is now all garbage
    store.sync().unwrap();
    gc_until_idle(&store);
    assert_eq!(
        store.stats().tombstones,
        1,
        "chunk B still holds k: its tombstone must stay"
    );
    drop(store);
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(store.get(b"k"), None, "a removed key came back");
    assert_eq!(store.stats().tombstones, 1);
    store.put(b"f2", &v(7)).unwrap(); // B is now all garbage
    store.sync().unwrap();
    gc_until_idle(&store);
    assert_eq!(
        store.stats().tombstones,
        0,
        "the tombstone shadows nothing once B is gone"
    );
    drop(store);
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(
        common::dump(&store),
        BTreeMap::from([
            (b"f1".to_vec(), v(6)),
            (b"f2".to_vec(), v(7)),
            (b"f3".to_vec(), v(5)),
        ])
    );
}
