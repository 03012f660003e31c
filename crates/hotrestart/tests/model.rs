//! Model-based crash test: random puts, removes, prefix clears, metadata writes,
//! syncs and GC cycles; a crash (drop without flushing, then tearing the active
//! chunks beyond their durable length) or a GC stopped at a crash point; reopen
//! with parallelism 1 and 4 and compare both with each other and with a model.
//!
//! The model keeps the log of operations. After a crash, the store must show,
//! for every key, either its value at the durable point (the last sync, or the
//! last `set_meta` whose value was reloaded, whichever is later) or a value some
//! later operation gave it: nothing synced is lost, nothing deleted returns.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tickdb_hotrestart::{Config, Error, GcCrashPoint, Store, ValueSource};

/// A value held in its owner's form: here simply the bytes, in a type the store
/// does not know, encoded on demand.
struct OwnedValue(Vec<u8>);

impl ValueSource for OwnedValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
}

const META: &[u8] = b"applied";
const PREFIXES: [&[u8]; 4] = [b"a/", b"b/", b"c/", b"a/1"];

#[derive(Clone, Debug)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Clear(Vec<u8>),
    Meta(u64),
}

fn universe() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for t in ["a/", "b/", "c/"] {
        for i in 0..40 {
            v.push(format!("{t}{i}").into_bytes());
        }
    }
    v
}

#[derive(Default)]
struct Model {
    ops: Vec<Op>,
    /// ops[..synced] are durable.
    synced: usize,
    /// meta value → index just after its Meta op.
    meta_at: HashMap<u64, usize>,
}

fn apply(state: &mut BTreeMap<Vec<u8>, Vec<u8>>, meta: &mut Option<u64>, op: &Op) {
    match op {
        Op::Put(k, v) => {
            state.insert(k.clone(), v.clone());
        }
        Op::Remove(k) => {
            state.remove(k);
        }
        Op::Clear(p) => state.retain(|k, _| !k.starts_with(p)),
        Op::Meta(m) => *meta = Some(*m),
    }
}

impl Model {
    /// Checks a reloaded store against the model; returns the model rebased on
    /// what the store shows, as the truth to continue from.
    fn check(&mut self, store: &Store, ctx: &str) {
        let got_meta = store.meta_u64(META);
        let mut base = self.synced;
        if let Some(m) = got_meta {
            let at = *self
                .meta_at
                .get(&m)
                .unwrap_or_else(|| panic!("{ctx}: unknown meta value {m}"));
            base = base.max(at);
        }
        let mut state = BTreeMap::new();
        let mut meta = None;
        for op in &self.ops[..base] {
            apply(&mut state, &mut meta, op);
        }
        let mut later: HashMap<Vec<u8>, BTreeSet<Option<Vec<u8>>>> = HashMap::new();
        let mut later_meta: BTreeSet<Option<u64>> = BTreeSet::new();
        for op in &self.ops[base..] {
            match op {
                Op::Put(k, v) => {
                    later.entry(k.clone()).or_default().insert(Some(v.clone()));
                }
                Op::Remove(k) => {
                    later.entry(k.clone()).or_default().insert(None);
                }
                Op::Clear(p) => {
                    for k in universe().into_iter().filter(|k| k.starts_with(p)) {
                        later.entry(k).or_default().insert(None);
                    }
                }
                Op::Meta(m) => {
                    later_meta.insert(Some(*m));
                }
            }
        }
        assert!(
            got_meta == meta || later_meta.contains(&got_meta),
            "{ctx}: meta {got_meta:?}, durable {meta:?}"
        );
        for k in universe() {
            let got = store.get(&k);
            let want = state.get(&k).cloned();
            let ok = got == want || later.get(&k).is_some_and(|s| s.contains(&got));
            assert!(
                ok,
                "{ctx}: key {} is {:?}, durable value {:?}, later values {:?}",
                String::from_utf8_lossy(&k),
                got.as_deref().map(String::from_utf8_lossy),
                want.as_deref().map(String::from_utf8_lossy),
                later.get(&k).map(|s| s.len())
            );
        }
        // Nothing outside the key universe ever appears.
        for (k, _) in store.iter_prefix(b"") {
            assert!(universe().contains(&k.to_vec()), "{ctx}: stray key {:?}", k);
        }
        // Continue from what the store shows: it is now the durable truth.
        let mut ops: Vec<Op> = store
            .iter_prefix(b"")
            .map(|(k, v)| Op::Put(k.to_vec(), v.bytes().to_vec()))
            .collect();
        if let Some(m) = got_meta {
            ops.push(Op::Meta(m));
        }
        self.meta_at.clear();
        if let Some(m) = got_meta {
            self.meta_at.insert(m, ops.len());
        }
        self.synced = ops.len();
        self.ops = ops;
    }
}

fn tear(rng: &mut StdRng, lengths: &[(std::path::PathBuf, u64)]) {
    for (path, durable) in lengths {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let len = meta.len();
        if len <= *durable || !rng.random_bool(0.6) {
            continue;
        }
        let cut = rng.random_range(*durable..=len);
        let f = OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(cut).unwrap();
        if rng.random_bool(0.3) {
            let mut junk = vec![0u8; rng.random_range(1..64)];
            rng.fill(&mut junk[..]);
            let mut f = OpenOptions::new().append(true).open(path).unwrap();
            f.write_all(&junk).unwrap();
        }
    }
}

fn open_pair(
    dir: &Path,
    cfg: &Config,
    ctx: &str,
) -> (tempfile::TempDir, Store, tickdb_hotrestart::ReloadReport) {
    // Reload one copy with parallelism 1 and another with 4 (and different
    // partition counts): the states must be identical.
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    common::copy_dir(dir, a.path());
    common::copy_dir(dir, b.path());
    // GC stays off while comparing, so that nothing changes under the comparison.
    let mut quiet = cfg.clone();
    quiet.gc.enabled = false;
    quiet.test_gc_crash = None;
    let cfg1 = Config {
        parallelism: 1,
        partitions: 1,
        ..quiet.clone()
    };
    let cfg4 = Config {
        parallelism: 4,
        partitions: 3,
        ..quiet
    };
    let (s1, r1) = Store::open(a.path(), cfg1).unwrap_or_else(|e| panic!("{ctx}: reopen p1: {e}"));
    let (s4, r4) = Store::open(b.path(), cfg4).unwrap_or_else(|e| panic!("{ctx}: reopen p4: {e}"));
    assert_eq!(
        common::dump(&s1),
        common::dump(&s4),
        "{ctx}: p1 and p4 reload differ"
    );
    assert_eq!(s1.meta_u64(META), s4.meta_u64(META), "{ctx}: meta differs");
    assert_eq!(
        common::chunk_stats(&s1),
        common::chunk_stats(&s4),
        "{ctx}: chunk accounting differs"
    );
    let (st1, st4) = (s1.stats(), s4.stats());
    assert_eq!(
        (st1.tombstones, st1.prefix_tombstones),
        (st4.tombstones, st4.prefix_tombstones),
        "{ctx}"
    );
    let torn = |r: &tickdb_hotrestart::ReloadReport| {
        r.torn_tails
            .iter()
            .map(|t| {
                (
                    t.file.file_name().map(|n| n.to_owned()),
                    t.offset,
                    t.bytes_dropped,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(torn(&r1), torn(&r4), "{ctx}: torn tails differ");
    assert_eq!(r1.records_loaded, r4.records_loaded, "{ctx}");
    drop(s4);
    // Chunk accounting must add up.
    for c in &st1.chunks {
        assert_eq!(
            c.live_bytes + c.garbage_bytes + 32,
            c.file_bytes,
            "{ctx}: chunk {c:?}"
        );
    }
    let before = common::dump(&s1);
    drop(s1);
    // Reopen with the round's real configuration (GC thread, crash points).
    let (s, _) =
        Store::open(a.path(), cfg.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    assert_eq!(common::dump(&s), before, "{ctx}: second reload differs");
    (a, s, r1)
}

fn run_model(seed: u64, rounds: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = universe();
    let mut model = Model::default();
    let mut meta_counter = 0u64;
    let first = tempfile::tempdir().unwrap();
    let mut dir_holder = first;
    let mut cfg = common::small_config();
    let (mut store, _) = Store::open(dir_holder.path(), cfg.clone()).unwrap();
    let (mut gc_crashes, mut crashes, mut torn, mut gc_runs, mut tombs_seen) = (0, 0, 0, 0, 0);
    for round in 0..rounds {
        let ctx = format!("seed {seed} round {round}");
        let ops = rng.random_range(20..300);
        let mut crashed_in_gc = false;
        for _ in 0..ops {
            let r = rng.random_range(0..100);
            if r < 55 {
                let k = keys[rng.random_range(0..keys.len())].clone();
                let mut v = format!("{}:", model.ops.len() + round * 100_000).into_bytes();
                let pad = rng.random_range(0..300);
                v.extend(std::iter::repeat_n(b'x', pad));
                // Half the values are kept in the owner's form (`put_source`),
                // as the RDB does, so GC's copies re-encode them from RAM.
                if rng.random_bool(0.5) {
                    store.put(&k, &v).unwrap();
                } else {
                    store
                        .put_source(&k, Arc::new(OwnedValue(v.clone())))
                        .unwrap();
                }
                model.ops.push(Op::Put(k, v));
            } else if r < 75 {
                let k = keys[rng.random_range(0..keys.len())].clone();
                store.remove(&k).unwrap();
                model.ops.push(Op::Remove(k));
            } else if r < 78 {
                let p = PREFIXES[rng.random_range(0..PREFIXES.len())].to_vec();
                store.clear_prefix(&p).unwrap();
                model.ops.push(Op::Clear(p));
            } else if r < 85 {
                store.sync().unwrap();
                model.synced = model.ops.len();
            } else if r < 88 {
                meta_counter += 1;
                store.set_meta_u64(META, meta_counter).unwrap();
                // set_meta made everything before it durable.
                model.synced = model.ops.len();
                model.ops.push(Op::Meta(meta_counter));
                model.meta_at.insert(meta_counter, model.ops.len());
            } else {
                match store.run_gc_cycle() {
                    Ok(did) => gc_runs += did as u32,
                    Err(Error::GcTestCrash) => {
                        crashed_in_gc = true;
                        break;
                    }
                    Err(e) => panic!("{ctx}: gc: {e}"),
                }
            }
            if store.gc_crashed() {
                crashed_in_gc = true;
                break;
            }
        }
        gc_crashes += crashed_in_gc as u32;
        tombs_seen += store.stats().tombstones;
        if !crashed_in_gc && rng.random_bool(0.1) {
            store.close().unwrap();
            model.synced = model.ops.len();
        } else {
            crashes += 1;
            let lengths = store.simulate_crash(rng.random_bool(0.5));
            tear(&mut rng, &lengths);
        }

        // Next round's configuration: sometimes fsync, sometimes a GC thread,
        // sometimes a GC that stops at a crash point.
        cfg = common::small_config();
        cfg.chunk_size_bytes = [4096, 8192, 16384][rng.random_range(0..3)];
        cfg.fsync = rng.random_bool(0.2);
        if rng.random_bool(0.25) {
            cfg.gc.enabled = true;
            cfg.gc.interval_ms = 1;
        }
        if rng.random_bool(0.3) {
            cfg.test_gc_crash = Some(
                [
                    GcCrashPoint::MidOutput,
                    GcCrashPoint::AfterRename,
                    GcCrashPoint::BeforeUnlink,
                ][rng.random_range(0..3)],
            );
        }
        let (new_dir, s, report) = open_pair(dir_holder.path(), &cfg, &ctx);
        torn += report.torn_tails.len();
        model.check(&s, &ctx);
        store = s;
        dir_holder = new_dir;
    }
    store.close().unwrap();
    eprintln!(
        "seed {seed}: {rounds} rounds, {crashes} crashes ({gc_crashes} inside GC), {torn} torn tails cut, \
         {gc_runs} GC cycles with work, {tombs_seen} live tombstones seen at crash time"
    );
}

#[test]
fn model_crash_reopen() {
    let seed = common::seed("model_crash_reopen");
    run_model(seed, 40);
}

#[test]
fn model_crash_reopen_second_seed() {
    let seed = common::seed("model_crash_reopen_second_seed").wrapping_add(0x9e37_79b9_7f4a_7c15);
    run_model(seed, 25);
}
