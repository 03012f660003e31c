//! The benchmark of Hot Restart Persistence, scaled to this machine: a keyed table
//! `cache(key, value bytes)` of N entries with 1 KB values in the Hot Restart
//! store (keys carry the table prefix `cache/`), loaded, then updated and
//! removed at random; then reloaded cold. Peers in the same run: the raw disk
//! (`dd` write, cold sequential read of the same files with as many threads
//! as the reload) and Redis 7 with an append-only file (`everysec`, then
//! `always`), given exactly the same operations over loopback, and restarted
//! twice: on its AOF as the workload left it, and after a `BGREWRITEAOF`
//! (an RDB base file, its best form for a restart). The whole sequence runs
//! `runs` times; the report gives medians and ranges.
//!
//! Both systems' results are checked against a model of the workload: every
//! remove's answer, the final number of keys and a sample of values, after
//! the run and again after the restart. A benchmark that lost data would
//! fail rather than report a speed.

use crate::child;
use crate::disk::{self, MB};
use crate::error::{BenchError, Result};
use crate::redis::{self, Redis, Reply};
use crate::stats::{si, Samples};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tickdb_hotrestart::{Config, GcConfig, Store};

/// The keyed table's prefix: every key is `cache/` and a 10-digit id.
pub const KEY_PREFIX: &[u8] = b"cache/";
/// Key length: the prefix and a zero-padded decimal id.
pub const KEY_BYTES: usize = 16;
/// Keys read back and compared with the model after each run and restart.
pub const SAMPLE_KEYS: u64 = 1000;
/// Under `everysec` both systems make writes durable this often.
pub const EVERYSEC_MS: u64 = 1000;
/// Largest id a 10-digit key can carry.
const ENTRIES_MAX: u64 = 9_999_999_999;

#[derive(Clone, Debug, Serialize)]
pub struct KvOptions {
    pub entries: u64,
    pub value_bytes: usize,
    /// Random operations under `everysec`.
    pub updates: u64,
    /// Random operations under `always` (fsync per batch).
    pub always_updates: u64,
    pub remove_pct: u32,
    /// Operations per batch: Redis's pipeline depth, and what one fsync
    /// covers under `always`.
    pub batch: usize,
    pub parallelism: Vec<usize>,
    pub partitions: usize,
    pub chunk_mb: u64,
    pub redis: bool,
    pub seed: u64,
    /// Whole runs (disk, store, Redis); every figure is their median.
    pub runs: usize,
}

impl KvOptions {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::Server(m));
        if self.entries == 0 || self.entries > ENTRIES_MAX {
            return bad(format!("--entries must be within 1..={ENTRIES_MAX}"));
        }
        if self.value_bytes == 0 || self.value_bytes > 1 << 20 {
            return bad("--value-bytes must be within 1..=1048576".into());
        }
        if self.remove_pct > 100 {
            return bad("--remove-pct must be within 0..=100".into());
        }
        if self.batch == 0 || self.parallelism.is_empty() || self.parallelism.contains(&0) {
            return bad("--batch and every --parallelism must be at least 1".into());
        }
        if self.runs == 0 {
            return bad("--runs must be at least 1".into());
        }
        Ok(())
    }
}

/// One operation of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Put entry `id` with the value of version `version` (the op's index).
    Put {
        id: u64,
        version: u64,
    },
    Remove {
        id: u64,
    },
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Operation `i`: the first `entries` put every id once, in order; after
/// that each op picks a uniformly random id and removes it with
/// `remove_pct` % probability, else puts a new value. A pure function of
/// (seed, i), so every system replays exactly the same sequence.
fn op(o: &KvOptions, i: u64) -> Op {
    if i < o.entries {
        return Op::Put { id: i, version: i };
    }
    let r = splitmix(o.seed ^ splitmix(i));
    let id = r % o.entries;
    if ((r >> 40) % 100) < o.remove_pct as u64 {
        Op::Remove { id }
    } else {
        Op::Put { id, version: i }
    }
}

fn key(id: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[..KEY_PREFIX.len()].copy_from_slice(KEY_PREFIX);
    let digits = format!("{id:010}");
    k[KEY_PREFIX.len()..].copy_from_slice(digits.as_bytes());
    k
}

/// The value of (id, version): `len` pseudo-random bytes, so nothing on the
/// way (file system, AOF) can compress it.
fn value_into(id: u64, version: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    let mut s = splitmix(id.rotate_left(32) ^ version);
    while out.len() < len {
        s = splitmix(s);
        let b = s.to_le_bytes();
        let n = (len - out.len()).min(8);
        out.extend_from_slice(&b[..n]);
    }
}

/// What each id should hold: the version of its latest put, if any.
struct Model {
    /// version + 1 of the latest put; 0 = absent.
    last: Vec<u64>,
    live: u64,
}

impl Model {
    fn new(entries: u64) -> Model {
        Model {
            last: vec![0; entries as usize],
            live: 0,
        }
    }

    /// Applies `op`; for a remove, returns whether the id had a value.
    fn apply(&mut self, op: Op) -> bool {
        match op {
            Op::Put { id, version } => {
                let slot = &mut self.last[id as usize];
                if *slot == 0 {
                    self.live += 1;
                }
                *slot = version + 1;
                true
            }
            Op::Remove { id } => {
                let slot = &mut self.last[id as usize];
                let had = *slot != 0;
                if had {
                    self.live -= 1;
                }
                *slot = 0;
                had
            }
        }
    }

    /// `SAMPLE_KEYS` ids spread over the key space, with their expected value.
    fn sample(&self, value_bytes: usize) -> Vec<(u64, Option<Vec<u8>>)> {
        let n = self.last.len() as u64;
        let step = (n / SAMPLE_KEYS).max(1);
        (0..n)
            .step_by(step as usize)
            .take(SAMPLE_KEYS as usize)
            .map(|id| {
                let v = self.last[id as usize].checked_sub(1).map(|ver| {
                    let mut b = Vec::new();
                    value_into(id, ver, value_bytes, &mut b);
                    b
                });
                (id, v)
            })
            .collect()
    }
}

/// A measured phase of the workload.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub ops: u64,
    pub secs: f64,
    /// Bytes the store wrote for the operations themselves (records).
    pub user_bytes: u64,
    /// Bytes GC wrote while the phase ran.
    pub gc_bytes: u64,
}

impl Phase {
    pub fn ops_s(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    pub fn user_mb_s(&self) -> f64 {
        self.user_bytes as f64 / MB / self.secs
    }
    pub fn disk_mb_s(&self) -> f64 {
        (self.user_bytes + self.gc_bytes) as f64 / MB / self.secs
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Reload {
    pub parallelism: usize,
    pub raw_mb_s: f64,
    pub bytes: u64,
    pub secs: f64,
    pub records: u64,
}

impl Reload {
    pub fn mb_s(&self) -> f64 {
        self.bytes as f64 / MB / self.secs
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TickdbRun {
    pub load: Phase,
    pub everysec: Phase,
    pub always: Phase,
    pub write_amplification: f64,
    pub disk_bytes: u64,
    pub garbage_bytes: u64,
    pub live_records: u64,
    pub gc_runs: u64,
    pub backpressure_waits: u64,
    pub reloads: Vec<Reload>,
}

/// One restart of Redis from its AOF, page cache emptied first.
#[derive(Clone, Debug, Serialize)]
pub struct RedisRestart {
    pub aof_bytes: u64,
    /// Spawn until PING answers PONG, with the AOF loaded.
    pub secs: f64,
    /// What Redis logged as its own load time, if it did.
    pub logged_load_secs: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RedisRun {
    pub version: String,
    pub load: Phase,
    pub everysec: Phase,
    pub always: Phase,
    /// As it ships: the AOF as the workload and Redis's automatic rewrites
    /// left it.
    pub restart: RedisRestart,
    /// At its best for a restart: the AOF rewritten (`BGREWRITEAOF`) just
    /// before the shutdown, so that it is an RDB base file.
    pub rewritten: RedisRestart,
}

impl RedisRun {
    /// The faster of the two restarts, and which it was.
    pub fn best_restart(&self) -> (f64, &'static str) {
        if self.rewritten.secs < self.restart.secs {
            (self.rewritten.secs, "after BGREWRITEAOF")
        } else {
            (self.restart.secs, "as left")
        }
    }
}

/// One whole run: the raw disk, the store, then Redis.
#[derive(Clone, Debug, Serialize)]
pub struct KvRun {
    pub dd_mb_s: f64,
    pub tickdb: TickdbRun,
    pub redis: Option<RedisRun>,
}

impl KvRun {
    /// The `i`-th reload (every run measures the same parallelisms, in order).
    fn reload(&self, i: usize) -> &Reload {
        &self.tickdb.reloads[i]
    }

    /// The store's fastest reload, seconds.
    fn best_reload_secs(&self) -> Option<f64> {
        self.tickdb.reloads.iter().map(|x| x.secs).reduce(f64::min)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct KvReport {
    pub options: KvOptions,
    pub cold: Option<&'static str>,
    pub live_keys: u64,
    /// Every run, in run order; the report gives medians over them.
    pub runs: Vec<KvRun>,
}

fn total_ops(o: &KvOptions) -> u64 {
    o.entries + o.updates + o.always_updates
}

fn progress(o: &KvOptions, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total_ops(o));
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "kv {what} {{bar:30}} {{human_pos}}/{{human_len}} ops ({{per_sec}}) {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

fn store_err(e: tickdb_hotrestart::Error) -> BenchError {
    BenchError::Server(format!("hot restart store: {e}"))
}

fn mismatch(system: &str, what: String) -> BenchError {
    BenchError::Server(format!(
        "{system} does not hold what the workload wrote: {what}"
    ))
}

fn store_config(o: &KvOptions, parallelism: usize) -> Config {
    Config {
        chunk_size_bytes: o.chunk_mb * 1024 * 1024,
        parallelism,
        partitions: o.partitions,
        fsync: true,
        progress: true,
        gc: GcConfig::default(),
        ..Config::default()
    }
}

/// Checks a store's contents against the model: key count and the sample.
fn check_store(store: &Store, model: &Model, o: &KvOptions, when: &str) -> Result<()> {
    let live = store.stats().live_records;
    if live != model.live {
        return Err(mismatch(
            "tickdb",
            format!("{when}: {live} keys, expected {}", model.live),
        ));
    }
    for (id, want) in model.sample(o.value_bytes) {
        let got = store.get(&key(id));
        if got != want {
            return Err(mismatch(
                "tickdb",
                format!("{when}: key {id} differs from its last write"),
            ));
        }
    }
    Ok(())
}

/// Runs ops `range` against the store; `sync_each_batch` is `always`.
fn store_phase(
    store: &Store,
    model: &mut Model,
    o: &KvOptions,
    range: std::ops::Range<u64>,
    sync_each_batch: bool,
    pb: &ProgressBar,
) -> Result<Phase> {
    let before = store.io_stats();
    let mut buf = Vec::with_capacity(o.value_bytes);
    let t0 = Instant::now();
    let mut i = range.start;
    while i < range.end {
        child::check_interrupt()?;
        let end = (i + o.batch as u64).min(range.end);
        for j in i..end {
            let op = op(o, j);
            let want = model.apply(op);
            match op {
                Op::Put { id, version } => {
                    value_into(id, version, o.value_bytes, &mut buf);
                    store.put(&key(id), &buf).map_err(store_err)?;
                }
                Op::Remove { id } => {
                    let had = store.remove(&key(id)).map_err(store_err)?;
                    if had != want {
                        return Err(mismatch(
                            "tickdb",
                            format!("op {j}: remove of key {id} answered {had}, expected {want}"),
                        ));
                    }
                }
            }
        }
        if sync_each_batch {
            store.sync().map_err(store_err)?;
        }
        pb.inc(end - i);
        i = end;
    }
    // The phase ends when its writes are durable.
    store.sync().map_err(store_err)?;
    let secs = t0.elapsed().as_secs_f64();
    let after = store.io_stats();
    Ok(Phase {
        ops: range.end - range.start,
        secs,
        user_bytes: after.user_bytes_written - before.user_bytes_written,
        gc_bytes: after.gc_bytes_written - before.gc_bytes_written,
    })
}

fn run_tickdb(work: &Path, o: &KvOptions) -> Result<(TickdbRun, Model, Option<&'static str>)> {
    let dir = work.join("kv-tickdb");
    let _ = std::fs::remove_dir_all(&dir);
    let p_max = o.parallelism.iter().copied().max().unwrap_or(1);
    let (store, _) = Store::open(&dir, store_config(o, p_max)).map_err(store_err)?;
    let mut model = Model::new(o.entries);
    let pb = progress(o, "tickdb");
    let n = o.entries;
    let u = n + o.updates;
    // `everysec`: a thread makes everything written so far durable every
    // second, as Redis's background fsync does; writers do not wait for it.
    let stop = AtomicBool::new(false);
    let (load, everysec) = std::thread::scope(|s| -> Result<(Phase, Phase)> {
        let syncer = s.spawn(|| -> Result<()> {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(EVERYSEC_MS));
                store.sync().map_err(store_err)?;
            }
            Ok(())
        });
        let run = (|| {
            pb.set_message("load, fsync every 1 s");
            let load = store_phase(&store, &mut model, o, 0..n, false, &pb)?;
            pb.set_message("updates, fsync every 1 s");
            let every = store_phase(&store, &mut model, o, n..u, false, &pb)?;
            Ok((load, every))
        })();
        stop.store(true, Ordering::Relaxed);
        let synced = syncer
            .join()
            .unwrap_or_else(|_| Err(BenchError::Server("sync thread panicked".into())));
        let r = run?;
        synced?;
        Ok(r)
    })?;
    pb.set_message(format!("updates, fsync per batch of {}", o.batch));
    let always = store_phase(&store, &mut model, o, u..total_ops(o), true, &pb)?;
    pb.finish_and_clear();
    check_store(&store, &model, o, "after the run")?;
    let st = store.stats();
    store.close().map_err(store_err)?;
    let mut reloads = Vec::new();
    let mut cold = disk::ColdReads::default();
    for &p in &o.parallelism {
        cold.evict(&dir);
        let (_, raw_mb_s) = disk::read_files(&disk::files_in(&dir)?, p)?;
        cold.evict(&dir);
        // No GC thread on the reloaded store: it would compact the files
        // under the next reload, which must read exactly the same ones.
        let cfg = Config {
            gc: GcConfig {
                enabled: false,
                ..GcConfig::default()
            },
            ..store_config(o, p)
        };
        let t0 = Instant::now();
        let (store, rep) = Store::open(&dir, cfg).map_err(store_err)?;
        let secs = t0.elapsed().as_secs_f64();
        check_store(
            &store,
            &model,
            o,
            &format!("after a reload with parallelism {p}"),
        )?;
        drop(store);
        reloads.push(Reload {
            parallelism: p,
            raw_mb_s,
            bytes: rep.bytes_loaded,
            secs,
            records: rep.records_loaded,
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        TickdbRun {
            load,
            everysec,
            always,
            write_amplification: st.write_amplification,
            disk_bytes: st.disk_bytes,
            garbage_bytes: st.garbage_bytes,
            live_records: st.live_records,
            gc_runs: st.gc_runs,
            backpressure_waits: st.backpressure_waits,
            reloads,
        },
        model,
        cold.how(),
    ))
}

fn expect_ok(r: &Reply, what: &str) -> Result<()> {
    match r {
        Reply::Simple(s) if s == "OK" => Ok(()),
        other => Err(BenchError::Protocol(format!("Redis {what}: {other:?}"))),
    }
}

fn redis_phase(
    conn: &mut redis::Conn,
    model: &mut Model,
    o: &KvOptions,
    range: std::ops::Range<u64>,
    pb: &ProgressBar,
) -> Result<Phase> {
    let mut buf = Vec::with_capacity(o.value_bytes);
    let mut wants = Vec::with_capacity(o.batch);
    let t0 = Instant::now();
    let mut i = range.start;
    while i < range.end {
        child::check_interrupt()?;
        let end = (i + o.batch as u64).min(range.end);
        wants.clear();
        for j in i..end {
            let op = op(o, j);
            wants.push((op, model.apply(op)));
            match op {
                Op::Put { id, version } => {
                    value_into(id, version, o.value_bytes, &mut buf);
                    conn.queue(&[b"SET", &key(id), &buf]);
                }
                Op::Remove { id } => conn.queue(&[b"DEL", &key(id)]),
            }
        }
        let replies = conn.flush()?;
        for ((op, want), r) in wants.iter().zip(&replies) {
            match op {
                Op::Put { .. } => expect_ok(r, "SET")?,
                Op::Remove { id } => {
                    let want = i64::from(*want);
                    if *r != Reply::Int(want) {
                        return Err(mismatch(
                            "Redis",
                            format!("DEL of key {id} answered {r:?}, expected {want}"),
                        ));
                    }
                }
            }
        }
        pb.inc(end - i);
        i = end;
    }
    Ok(Phase {
        ops: range.end - range.start,
        secs: t0.elapsed().as_secs_f64(),
        user_bytes: 0,
        gc_bytes: 0,
    })
}

fn check_redis(conn: &mut redis::Conn, model: &Model, o: &KvOptions, when: &str) -> Result<()> {
    let n = conn.command(&[b"DBSIZE"])?;
    if n != Reply::Int(model.live as i64) {
        return Err(mismatch(
            "Redis",
            format!("{when}: DBSIZE {n:?}, expected {}", model.live),
        ));
    }
    for (id, want) in model.sample(o.value_bytes) {
        let got = conn.command(&[b"GET", &key(id)])?;
        if got != Reply::Bulk(want) {
            return Err(mismatch(
                "Redis",
                format!("{when}: key {id} differs from its last write"),
            ));
        }
    }
    Ok(())
}

/// Redis's own figure: "DB loaded from append only file: 1.234 seconds".
fn logged_load_secs(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().rev().find_map(|l| {
        let rest = l.split("DB loaded from append only file:").nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn run_redis(work: &Path, o: &KvOptions) -> Result<RedisRun> {
    let dir = work.join("kv-redis");
    let _ = std::fs::remove_dir_all(&dir);
    let r = Redis::start(&dir, "everysec", &work.join("kv-redis.log"))?;
    let mut conn = redis::Conn::connect(r.port)?;
    let mut model = Model::new(o.entries);
    let pb = progress(o, "Redis");
    let (n, u) = (o.entries, o.entries + o.updates);
    pb.set_message("load, appendfsync everysec");
    let load = redis_phase(&mut conn, &mut model, o, 0..n, &pb)?;
    pb.set_message("updates, appendfsync everysec");
    let everysec = redis_phase(&mut conn, &mut model, o, n..u, &pb)?;
    expect_ok(
        &conn.command(&[b"CONFIG", b"SET", b"appendfsync", b"always"])?,
        "CONFIG SET appendfsync always",
    )?;
    pb.set_message("updates, appendfsync always");
    let always = redis_phase(&mut conn, &mut model, o, u..total_ops(o), &pb)?;
    pb.finish_and_clear();
    check_redis(&mut conn, &model, o, "after the run")?;
    drop(conn);
    r.stop();
    // As it ships: whatever the workload and Redis's automatic rewrites
    // left on disk.
    let (r, restart) = redis_restart(&dir, work, "kv-redis-restart.log")?;
    let mut conn = redis::Conn::connect(r.port)?;
    check_redis(&mut conn, &model, o, "after the restart")?;
    // At its best: the AOF rewritten just before the shutdown, an RDB base
    // file alone (redis.conf: the RDB format "is always faster and more
    // efficient").
    eprintln!("kv: Redis: BGREWRITEAOF, then a restart");
    redis::rewrite_aof(&mut conn)?;
    drop(conn);
    r.stop();
    let (r, rewritten) = redis_restart(&dir, work, "kv-redis-restart-rewritten.log")?;
    let mut conn = redis::Conn::connect(r.port)?;
    check_redis(
        &mut conn,
        &model,
        o,
        "after the restart of the rewritten AOF",
    )?;
    drop(conn);
    r.stop();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(RedisRun {
        version: redis::version(),
        load,
        everysec,
        always,
        restart,
        rewritten,
    })
}

/// A cold restart of the Redis in `dir`: its AOF evicted from the page
/// cache, then timed from spawn to PONG.
fn redis_restart(dir: &Path, work: &Path, log: &str) -> Result<(Redis, RedisRestart)> {
    let aof_dir = dir.join("appendonlydir");
    disk::evict(&aof_dir);
    let log = work.join(log);
    let r = Redis::start(dir, "everysec", &log)?;
    let out = RedisRestart {
        aof_bytes: r.aof_bytes(),
        secs: r.ready_secs,
        logged_load_secs: logged_load_secs(&log),
    };
    Ok((r, out))
}

pub fn run(work: &Path, o: &KvOptions) -> Result<KvReport> {
    o.validate()?;
    if o.redis {
        if let Some(why) = redis::unavailable() {
            return Err(BenchError::Server(format!("Redis not available: {why}")));
        }
    }
    let data_mb = (o.entries as f64 * o.value_bytes as f64 / MB) as u64;
    let mut runs = Vec::with_capacity(o.runs);
    let mut cold = None;
    let mut live_keys = 0;
    for k in 0..o.runs {
        eprintln!("kv: run {} of {}: dd conv=fdatasync", k + 1, o.runs);
        let dd_mb_s = disk::dd(work, data_mb.clamp(256, 2048))?;
        let (tickdb, model, how) = run_tickdb(work, o)?;
        let redis = if o.redis {
            Some(run_redis(work, o)?)
        } else {
            None
        };
        // A spawn forks this process: return the run's freed gigabytes
        // before the next run starts its servers.
        child::release_freed_memory();
        cold = how;
        live_keys = model.live;
        runs.push(KvRun {
            dd_mb_s,
            tickdb,
            redis,
        });
    }
    Ok(KvReport {
        options: o.clone(),
        cold,
        live_keys,
        runs,
    })
}

fn secs(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2} s")
    } else {
        format!("{x:.1} s")
    }
}

/// A figure of every run, as samples.
fn samples(runs: &[KvRun], f: impl Fn(&KvRun) -> f64) -> Samples {
    runs.iter().map(f).collect()
}

/// Samples of a figure only some runs have (Redis's, when it ran).
fn some_samples(runs: &[KvRun], f: impl Fn(&KvRun) -> Option<f64>) -> Option<Samples> {
    let v: Samples = runs.iter().filter_map(f).collect();
    (!v.0.is_empty()).then_some(v)
}

/// "met" or "missed", by the median against the target (higher is better).
fn verdict(x: &Samples, target: f64) -> &'static str {
    match x.median() {
        Some(m) if m >= target => "met",
        _ => "missed",
    }
}

/// The median alone where every run gave the same figure (sizes, counts),
/// else the median and range.
fn tight(x: &Samples, fmt: fn(f64) -> String) -> String {
    match (x.min(), x.max()) {
        (Some(lo), Some(hi)) if fmt(lo) == fmt(hi) => fmt(lo),
        _ => x.range(fmt),
    }
}

fn fmt_pct(x: f64) -> String {
    format!("{x:.0}%")
}

fn fmt_si(x: f64) -> String {
    si(x)
}

fn fmt_mb_s(x: f64) -> String {
    format!("{x:.0}")
}

fn fmt_ratio(x: f64) -> String {
    format!("{x:.2}×")
}

impl KvReport {
    fn redis_version(&self) -> Option<&str> {
        self.runs
            .iter()
            .find_map(|r| r.redis.as_ref().map(|r| r.version.as_str()))
    }

    /// The median of each run's restart speed-up over Redis at its best
    /// (the faster of its two restarts), against the store's fastest reload.
    fn restart_speedup(&self) -> Option<Samples> {
        some_samples(&self.runs, |r| {
            Some(r.redis.as_ref()?.best_restart().0 / r.best_reload_secs()?)
        })
    }

    pub fn markdown(&self) -> String {
        let o = &self.options;
        let runs = &self.runs;
        let mut s = format!(
            "Workload: {} entries of {} B values (keys `cache/` + a 10-digit id: one keyed table's prefix), \
             loaded in id order; then {} random operations under `everysec` and {} under `always`, each \
             picking a uniformly random id and removing it ({} %) or putting a new value. One client thread, \
             {} operations per batch: Redis's pipeline depth, and what one fsync covers under `always`. \
             tickdb is the Hot Restart store called in-process (chunks of {} MiB, {} partitions, GC on); Redis \
             gets the same operations over loopback. Both are checked against a model of the workload \
             (every remove's answer, the key count, {} sampled values) after the run and after each restart: \
             {} keys at the end. The whole sequence (dd, the store, Redis) runs {} time(s) (`--runs`); every \
             figure is the median (min–max) over the runs, `*` marking a spread over 1.3×.\n\n",
            si(o.entries as f64),
            o.value_bytes,
            si(o.updates as f64),
            si(o.always_updates as f64),
            o.remove_pct,
            o.batch,
            o.chunk_mb,
            o.partitions,
            SAMPLE_KEYS,
            si(self.live_keys as f64),
            runs.len(),
        );
        let dd = samples(runs, |r| r.dd_mb_s);
        s.push_str(&format!(
            "Durability: `everysec` = tickdb fsyncs every {EVERYSEC_MS} ms from a thread of its own (a phase's \
             time includes the final fsync), Redis `appendfsync everysec`; `always` = tickdb fsyncs after every \
             batch, Redis `appendfsync always` (it fsyncs before answering each read from the socket). Redis \
             runs pipelined, its documented way to send many commands (\"Redis pipelining\"), and with its \
             shipped persistence settings otherwise. Raw disk, same runs: `dd conv=fdatasync` **{} MB/s**.\n\n",
            dd.describe(fmt_mb_s)
        ));
        s.push_str(&format!(
            "| phase | durability | tickdb ops/s | tickdb MB/s written (records / with GC) | records ÷ dd | Redis {} ops/s | tickdb ÷ Redis |\n|---|---|---|---|---|---|---|\n",
            self.redis_version().unwrap_or("")
        ));
        type Pick = fn(&KvRun) -> &Phase;
        type PickRedis = fn(&RedisRun) -> &Phase;
        let phases: [(&str, &str, Pick, PickRedis); 3] = [
            ("load", "everysec", |r| &r.tickdb.load, |r| &r.load),
            (
                "updates",
                "everysec",
                |r| &r.tickdb.everysec,
                |r| &r.everysec,
            ),
            ("updates", "always", |r| &r.tickdb.always, |r| &r.always),
        ];
        for (name, dur, pick, pick_redis) in phases {
            let ops = runs.first().map(|r| pick(r).ops).unwrap_or(0);
            let redis = some_samples(runs, |r| Some(pick_redis(r.redis.as_ref()?).ops_s()));
            s.push_str(&format!(
                "| {name} ({}) | {dur} | {} | {} / {} | {} | {} | {} |\n",
                si(ops as f64),
                samples(runs, |r| pick(r).ops_s()).describe(fmt_si),
                samples(runs, |r| pick(r).user_mb_s()).describe(fmt_mb_s),
                samples(runs, |r| pick(r).disk_mb_s()).describe(fmt_mb_s),
                samples(runs, |r| pick(r).user_mb_s() / r.dd_mb_s).describe(fmt_ratio),
                redis
                    .map(|r| r.describe(fmt_si))
                    .unwrap_or_else(|| "not run".into()),
                some_samples(runs, |r| Some(
                    pick(r).ops_s() / pick_redis(r.redis.as_ref()?).ops_s()
                ))
                .map(|x| x.describe(fmt_ratio))
                .unwrap_or_else(|| "n/a".into()),
            ));
        }
        let med = |f: fn(&TickdbRun) -> f64| samples(runs, |r| f(&r.tickdb));
        s.push_str(&format!(
            "\nWrite amplification (record + GC bytes ÷ record bytes): **{}**; {} GC cycles, {} writes held \
             by the back-pressure bound. At the end the store held {} MB on disk, of which {} MB garbage.\n\n",
            tight(&med(|t| t.write_amplification), |x| format!("{x:.2}")),
            tight(&med(|t| t.gc_runs as f64), |x| format!("{x:.0}")),
            tight(&med(|t| t.backpressure_waits as f64), |x| format!("{x:.0}")),
            tight(&med(|t| t.disk_bytes as f64 / MB), fmt_mb_s),
            tight(&med(|t| t.garbage_bytes as f64 / MB), fmt_mb_s),
        ));
        s.push_str(&format!(
            "Restart, page cache {} first. tickdb: `Store::open` (the parallel reload pipeline, until every \
             key is back in RAM); raw read: the same chunk files read sequentially with as many threads. Redis: \
             from starting `redis-server` on its AOF until it answers PING, in two forms: **as left**, the AOF as \
             the workload and Redis's automatic rewrites (`auto-aof-rewrite-percentage 100`, as shipped) left it; \
             and **after BGREWRITEAOF**, its best form for a restart: the AOF rewritten just before the shutdown, \
             so that it is one RDB base file (redis.conf, `aof-use-rdb-preamble`: \"the RDB format is always \
             faster and more efficient\").\n\n",
            self.cold
                .unwrap_or("NOT emptied (no permission; warm reads)")
        ));
        s.push_str(
            "| restart | data read | seconds | MB/s | ratio to raw read |\n|---|---|---|---|---|\n",
        );
        let parallelisms: Vec<usize> = runs
            .first()
            .map(|r| r.tickdb.reloads.iter().map(|x| x.parallelism).collect())
            .unwrap_or_default();
        for (i, p) in parallelisms.into_iter().enumerate() {
            let bytes = samples(runs, |r| r.reload(i).bytes as f64 / MB);
            s.push_str(&format!(
                "| raw sequential read, {p} thread{} | {} MB | | {} | |\n",
                if p == 1 { "" } else { "s" },
                tight(&bytes, fmt_mb_s),
                samples(runs, |r| r.reload(i).raw_mb_s).describe(fmt_mb_s),
            ));
            s.push_str(&format!(
                "| tickdb reload, parallelism {p} | {} MB, {} records | {} | {} | {} |\n",
                tight(&bytes, fmt_mb_s),
                tight(&samples(runs, |r| r.reload(i).records as f64), fmt_si),
                samples(runs, |r| r.reload(i).secs).describe(secs),
                samples(runs, |r| r.reload(i).mb_s()).describe(fmt_mb_s),
                samples(runs, |r| r.reload(i).mb_s() / r.reload(i).raw_mb_s).describe(fmt_ratio),
            ));
        }
        type PickRestart = fn(&RedisRun) -> &RedisRestart;
        let forms: [(&str, PickRestart); 2] = [
            ("as left", |r| &r.restart),
            ("after BGREWRITEAOF", |r| &r.rewritten),
        ];
        if self.redis_version().is_some() {
            for (form, pick) in forms {
                let get = |f: fn(&RedisRestart) -> f64| {
                    some_samples(runs, |r| Some(f(pick(r.redis.as_ref()?))))
                };
                let logged = some_samples(runs, |r| pick(r.redis.as_ref()?).logged_load_secs);
                s.push_str(&format!(
                    "| Redis AOF load, {form} | {} MB (AOF{}) | {} | {} | |\n",
                    get(|x| x.aof_bytes as f64 / MB)
                        .map(|x| tight(&x, fmt_mb_s))
                        .unwrap_or_default(),
                    logged
                        .map(|l| format!("; Redis logged {}", l.range(secs)))
                        .unwrap_or_default(),
                    get(|x| x.secs)
                        .map(|x| x.describe(secs))
                        .unwrap_or_default(),
                    get(|x| x.aof_bytes as f64 / MB / x.secs)
                        .map(|x| x.describe(fmt_mb_s))
                        .unwrap_or_default(),
                ));
            }
            if let Some(x) = self.restart_speedup() {
                let mut best_forms: Vec<&str> = runs
                    .iter()
                    .filter_map(|r| Some(r.redis.as_ref()?.best_restart().1))
                    .collect();
                best_forms.dedup();
                let forms = match best_forms.as_slice() {
                    [one] => format!("{one}, in every run"),
                    many => format!("per run: {}", many.join(", ")),
                };
                s.push_str(&format!(
                    "\nRestart: Redis's faster form ({forms}) took **{}** as long as the store's fastest reload \
                     (the median of each run's ratio{}; above 1× the store is faster).\n",
                    x.median().map(|v| format!("{v:.1}×")).unwrap_or_default(),
                    match (x.min(), x.max()) {
                        (Some(lo), Some(hi)) if runs.len() > 1 => format!(", {lo:.1}×–{hi:.1}×"),
                        _ => String::new(),
                    }
                ));
            }
        } else {
            s.push_str("\nRedis was not run (--no-redis).\n");
        }
        s.push_str(&self.targets());
        s
    }

    /// The targets next to what this run measured.
    fn targets(&self) -> String {
        let runs = &self.runs;
        let mut s = String::from("\nTargets (reported, not asserted):\n\n");
        let top = runs.first().and_then(|r| {
            r.tickdb
                .reloads
                .iter()
                .enumerate()
                .max_by_key(|(_, x)| x.parallelism)
                .map(|(i, x)| (i, x.parallelism))
        });
        if let Some((i, p)) = top {
            let pct = samples(runs, |r| 100.0 * r.reload(i).mb_s() / r.reload(i).raw_mb_s);
            s.push_str(&format!(
                "- Reload at 90% or more of a raw sequential read (Hazelcast: 86%): {} at parallelism {p} \
                 ({} of {} MB/s; {}). The reload rebuilds every value in RAM, and on 2 cores that CPU work, \
                 not the disk, is the limit.\n",
                pct.range(fmt_pct),
                samples(runs, |r| r.reload(i).mb_s()).range(fmt_mb_s),
                samples(runs, |r| r.reload(i).raw_mb_s).range(fmt_mb_s),
                verdict(&pct, 90.0),
            ));
        }
        let pct = samples(runs, |r| 100.0 * r.tickdb.everysec.user_mb_s() / r.dd_mb_s);
        s.push_str(&format!(
            "- 1 KB updates at 85% or more of the raw write bandwidth: {} under `everysec` ({} of {} MB/s of \
             records; {} MB/s with GC's copies; {}), from one client thread that also generates the values.\n",
            pct.range(fmt_pct),
            samples(runs, |r| r.tickdb.everysec.user_mb_s()).range(fmt_mb_s),
            samples(runs, |r| r.dd_mb_s).range(fmt_mb_s),
            samples(runs, |r| r.tickdb.everysec.disk_mb_s()).range(fmt_mb_s),
            verdict(&pct, 85.0),
        ));
        if let Some(x) = self.restart_speedup() {
            s.push_str(&format!(
                "- A restart at least 2× faster than Redis loading its AOF of the same data (at its best): {} ({}).\n",
                x.range(|v| format!("{v:.1}×")),
                verdict(&x, 2.0),
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> KvOptions {
        KvOptions {
            entries: 1000,
            value_bytes: 100,
            updates: 5000,
            always_updates: 100,
            remove_pct: 10,
            batch: 10,
            parallelism: vec![1],
            partitions: 2,
            chunk_mb: 1,
            redis: false,
            seed: 7,
            runs: 1,
        }
    }

    #[test]
    fn workload_is_a_pure_function_of_seed_and_index() {
        let o = opts();
        let a: Vec<Op> = (0..6100).map(|i| op(&o, i)).collect();
        let b: Vec<Op> = (0..6100).map(|i| op(&o, i)).collect();
        assert_eq!(a, b);
        assert_eq!(a[5], Op::Put { id: 5, version: 5 });
        let removes = a[1000..]
            .iter()
            .filter(|o| matches!(o, Op::Remove { .. }))
            .count();
        // 10 % of 5100 random ops, give or take.
        assert!((350..700).contains(&removes), "{removes}");
        let other = KvOptions { seed: 8, ..opts() };
        assert_ne!(op(&o, 2000), op(&other, 2000));
    }

    #[test]
    fn keys_and_values() {
        assert_eq!(&key(42), b"cache/0000000042");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        value_into(1, 2, 1024, &mut a);
        value_into(1, 3, 1024, &mut b);
        assert_eq!(a.len(), 1024);
        assert_ne!(a, b);
    }

    #[test]
    fn model_tracks_live_keys_and_remove_answers() {
        let mut m = Model::new(3);
        assert!(m.apply(Op::Put { id: 1, version: 0 }));
        assert!(!m.apply(Op::Remove { id: 2 }));
        assert!(m.apply(Op::Remove { id: 1 }));
        assert_eq!(m.live, 0);
        m.apply(Op::Put { id: 0, version: 9 });
        let s = m.sample(8);
        assert_eq!(s.len(), 3);
        assert!(s[0].1.is_some() && s[1].1.is_none());
    }

    fn phase(ops: u64, secs: f64) -> Phase {
        Phase {
            ops,
            secs,
            user_bytes: ops * 1000,
            gc_bytes: 0,
        }
    }

    /// A run whose store reloads in `reload` s and whose Redis restarts in
    /// `as_left` s, then `rewritten` s after BGREWRITEAOF.
    fn fake_run(reload: f64, as_left: f64, rewritten: f64) -> KvRun {
        let restart = |secs| RedisRestart {
            aof_bytes: 1_000_000,
            secs,
            logged_load_secs: None,
        };
        KvRun {
            dd_mb_s: 1000.0,
            tickdb: TickdbRun {
                load: phase(100, 1.0),
                everysec: phase(100, 1.0),
                always: phase(10, 1.0),
                write_amplification: 1.0,
                disk_bytes: 1,
                garbage_bytes: 0,
                live_records: 100,
                gc_runs: 0,
                backpressure_waits: 0,
                reloads: vec![Reload {
                    parallelism: 2,
                    raw_mb_s: 1000.0,
                    bytes: 1_000_000,
                    secs: reload,
                    records: 100,
                }],
            },
            redis: Some(RedisRun {
                version: "7.0.15".into(),
                load: phase(100, 2.0),
                everysec: phase(100, 2.0),
                always: phase(10, 2.0),
                restart: restart(as_left),
                rewritten: restart(rewritten),
            }),
        }
    }

    /// The restart ratio is against Redis's faster form in each run, and
    /// the report gives the median of the runs' ratios with its verdict.
    #[test]
    fn restart_ratio_takes_redis_at_its_best_per_run() {
        let rep = KvReport {
            options: KvOptions { runs: 3, ..opts() },
            cold: None,
            live_keys: 100,
            runs: vec![
                fake_run(1.0, 10.0, 3.0),
                fake_run(1.0, 10.0, 1.5),
                fake_run(2.0, 2.0, 9.0),
            ],
        };
        let x = rep.restart_speedup().unwrap();
        assert_eq!(x.0, vec![3.0, 1.5, 1.0]);
        let md = rep.markdown();
        assert!(md.contains("took **1.5×** as long"), "{md}");
        assert!(md.contains("per run: after BGREWRITEAOF, as left"), "{md}");
        assert!(
            md.contains("(at its best): 1.5× (1.0×–3.0×) (missed)"),
            "{md}"
        );
        assert!(
            md.contains("| Redis AOF load, after BGREWRITEAOF |"),
            "{md}"
        );
        let ok = KvReport {
            runs: vec![fake_run(1.0, 10.0, 3.0)],
            ..rep
        };
        assert!(ok.markdown().contains("(at its best): 3.0× (met)"));
    }

    /// The whole tickdb side on a small store: the model check passes, and
    /// each reload finds every record.
    #[test]
    fn tickdb_run_checks_out() {
        let dir = tempfile::tempdir().unwrap();
        let o = KvOptions {
            parallelism: vec![1, 2],
            ..opts()
        };
        let (t, model, _) = run_tickdb(dir.path(), &o).unwrap();
        assert_eq!(t.live_records, model.live);
        assert_eq!(t.load.ops, 1000);
        assert_eq!(t.reloads.len(), 2);
        assert!(t.reloads.iter().all(|r| r.records > 0 && r.bytes > 0));
        assert!(t.write_amplification >= 1.0);
    }
}
