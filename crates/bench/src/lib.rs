//! `tickdb bench`: benchmarks that run the peer (QuestDB, the raw disk) in the
//! same run and print the ratio. `tickdb bench report` runs them all and
//! regenerates `docs/benchmarks.md` (scripts/bench.sh builds and calls it).
//!
//! Speed is measured here, never in timed tests.

mod child;
mod disk;
mod error;
pub mod failover;
mod http;
mod ingest;
pub mod insert;
pub mod ipc;
mod journal;
pub mod kv;
mod latency;
mod machine;
mod redis;
pub mod replication;
pub mod restart;
pub mod robustness;
mod servers;
pub mod sharding;
pub mod stack;
mod stats;

use clap::{Args, Subcommand};
use error::{BenchError, Result};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
    /// The tickdb binary to benchmark (default: this one). Use a release build.
    #[arg(long, global = true)]
    tickdb_bin: Option<PathBuf>,
    /// Scratch directory for data and logs (default: a temporary directory,
    /// removed afterwards).
    #[arg(long, global = true)]
    work_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// ILP ingest rows/s over TCP and HTTP, 1 and 4 connections, 10k-row
    /// batches; QuestDB on the same data and client, as it ships and tuned as
    /// its documentation prescribes (table created with its symbol capacity,
    /// one ILP TCP I/O thread per connection). Every run's table is checked.
    Ingest(IngestArgs),
    /// Tick-to-subscriber latency p50/p99/max, zero-latency and 50 ms modes.
    Latency(LatencyArgs),
    /// Journal append MB/s per fsync policy against dd, and group commit with
    /// 1, 4 and 16 writers.
    Journal(JournalArgs),
    /// The test stack of the Optane kdb+ study: K complete stacks (feed →
    /// tp → agg → rdb → monitor, separate processes), DRAM rdbs against
    /// fsmem rdbs; writes the study's Test 1 and Test 2 tables.
    ///
    /// The study: "Using Intel Optane memory to expand the capacity of a
    /// typical realtime kdb market data system" (Eoin Cunning and Nick
    /// McDaid).
    Stack(StackArgs),
    /// The bulk-insert client of Zero-Impact Crash Recovery for kdb+:
    /// 10k-row trade inserts over one connection until N rows are
    /// acknowledged; MB/s, rows/s, and the server's CPU and RSS every
    /// second; dd and QuestDB (as it ships and tuned) in the same run.
    Insert(InsertArgs),
    /// The key-value benchmark of Hot Restart Persistence (Hazelcast): a
    /// keyed table of 1 KB values loaded, updated and removed at random in
    /// the Hot Restart store, then reloaded cold; ops/s, MB/s, write
    /// amplification, reload s and MB/s against dd and a cold sequential
    /// read, and Redis 7 (AOF everysec and always) on the same operations.
    Kv(KvArgs),
    /// An rdb's restart with Hot Restart against a full journal replay, and
    /// the checkpoint's ingest pause as the data grows.
    Restart(RestartArgs),
    /// Acknowledged-write latency of a 48,000 updates/s feed, quiet and
    /// under a storm of hostile queries and clients on every port; checks
    /// that the node stays up and no acknowledged row is lost.
    Robustness(RobustnessArgs),
    /// Replication after Zero-Impact Crash Recovery for kdb+: the bulk
    /// insert on a primary alone, with an async and with a semi-sync standby
    /// (its Figures 2 and 3); the standby's lag at a steady rate; write
    /// acknowledgement latency under semi-sync; a new standby's catch-up
    /// against a raw cold read; and a standby's restart from its last
    /// snapshot plus the log after it against a full replay (its Figure 4).
    /// Every scenario checks that the standby's journal and rows equal the
    /// primary's; a mismatch fails the benchmark.
    Replication(ReplicationArgs),
    /// Failover: RTO after kill -9 of the primary under a live 48,000
    /// updates/s feed, promoted by hand and through etcd (until the new
    /// primary acknowledges a write, and until an rdb following both nodes
    /// resumes); a planned switchover's downtime; rows lost in async and
    /// semi-sync; false failovers in a soak with the cores saturated and
    /// the primary paused; the standby restore of Zero-Impact Crash
    /// Recovery for kdb+; and Redis Sentinel's failover in the same run.
    /// Every round checks that the journals and rows agree; a mismatch, a
    /// semi-sync loss or a false failover fails the benchmark.
    Failover(FailoverArgs),
    /// kdb+ IPC against ILP and the tickdb subscription protocol: bulk
    /// insert rows/s and MB/s, and tick-to-subscriber latency.
    ///
    /// The bulk insert of Zero-Impact Crash Recovery for kdb+ (10k-row
    /// writes) as kdb+ IPC
    /// `.u.upd` (async + chaser, and sync) against ILP over TCP and HTTP,
    /// same rows, same run; and tick-to-subscriber latency of a kdb+ IPC
    /// `.u.sub` subscriber against the tickdb subscription protocol at
    /// 48,000 updates/s, zero-latency and 50 ms timer. Every insert run
    /// must end with the same rows and sums, and every subscriber with
    /// exactly the rows fed; a mismatch fails the benchmark.
    Ipc(IpcArgs),
    /// Socket sharding: the experiments of the KX whitepaper "Socket
    /// Sharding with kdb+ and Linux" against `tickdb rdb` listeners sharing
    /// query ports (`rp,PORT`), sizes scaled and stated, and the query
    /// throughput of 1, 2 and 4 rdbs behind one PostgreSQL port.
    ///
    /// Sections: `basic` (§3: 1000 kdb+ IPC connections over 4 listeners,
    /// each listener's share); `on-the-fly` (§4, Table 1: 2 s requests every
    /// second, a listener added each period); `volume` (§5: 0.2 s requests
    /// every 100 ms, 1 to 3 listeners); `busy` (§6, Figure 4: one of two
    /// listeners blocked; where connections go and how long they wait);
    /// `rolling` (§7: a rolling upgrade of a listener whose load is a real
    /// journal replay, without and with a shared port); `throughput`
    /// (psycopg clients against 1, 2, 4 single-threaded rdbs). Parts 4 to 6
    /// run with busy steering off and on; steering needs
    /// net.ipv4.tcp_migrate_req=1, which the benchmark sets for its run
    /// when root (and puts back). Every request must be answered with the
    /// expected value by a member of its group, every rdb must give the
    /// same answer, and the rolling upgrade on rp must fail no request: a
    /// failed check fails the benchmark.
    Sharding(ShardingArgs),
    /// Run every benchmark and regenerate docs/benchmarks.md.
    ///
    /// With `--only SECTION` (e.g. `--only sharding`), run just that
    /// section and replace it in place in the existing file (from its `## `
    /// heading to the next `## ` heading; appended at the end when the file
    /// has no such heading), keeping the rest of the file, the SQL section
    /// included; a note under the file's header says which section was
    /// regenerated alone, when, and on which machine when it differs from
    /// the file's Machine section. Sections: ingest, latency, journal,
    /// insert, sharding, ipc, failover, replication, robustness,
    /// hot-restart, stack.
    Report(ReportArgs),
}

#[derive(Args, Debug, Clone, Default)]
struct ShardingArgs {
    /// Sections to run: basic, on-the-fly, volume, busy, rolling, throughput.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "basic,on-the-fly,volume,busy,rolling,throughput"
    )]
    sections: Vec<String>,
    /// Short periods that prove the pipeline in about 90 s (figures
    /// indicative only); flags given explicitly still apply.
    #[arg(long)]
    quick: bool,
    /// Trade rows fed to the tp the listeners follow [default: 1M; --quick
    /// 100k].
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    rows: Option<u64>,
    /// §3: listeners sharing the port.
    #[arg(long, default_value_t = 4)]
    basic_listeners: usize,
    /// §3: connections opened and kept open.
    #[arg(long, default_value_t = 1000)]
    connections: usize,
    /// §4: seconds per period (the paper: 60) [default: 20; --quick 8].
    #[arg(long)]
    period_s: Option<f64>,
    /// §5: seconds per listener count [default: 10; --quick 4].
    #[arg(long)]
    volume_s: Option<f64>,
    /// §6: seconds listener 1 is blocked (the paper: 10) [default: 10;
    /// --quick 5].
    #[arg(long)]
    block_s: Option<f64>,
    /// §6: the steering run's --busy-query-ms.
    #[arg(long, default_value_t = 200)]
    busy_query_ms: u64,
    /// §7: rows (trades and quotes) in the journal the upgraded listener
    /// loads, so that its load takes a few seconds (a listener holds them
    /// all: about 2 GB at 40M, two listeners at once) [default: 40M;
    /// --quick 1M].
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    rolling_rows: Option<u64>,
    /// Throughput: seconds per setup [default: 10; --quick 4].
    #[arg(long)]
    throughput_s: Option<f64>,
    /// Throughput: rdbs sharing the PostgreSQL port, one setup each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    throughput_rdbs: Vec<usize>,
    /// Throughput: rounds of every setup in turn; the report gives each
    /// figure's median and range [default: 3; --quick 1].
    #[arg(long)]
    throughput_runs: Option<usize>,
    /// §3 to §7: runs of each scenario (§4 to §6 with steering off and on
    /// each time; §7's upgrades against the one journal); the report gives
    /// each figure's median and range (the paper's Table 1 averages 3
    /// tests) [default: 3; --quick 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    scenario_runs: Option<u64>,
    /// Throughput: psycopg client processes.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Throughput: queries per connection before a client reconnects.
    #[arg(long, default_value_t = 20)]
    queries_per_connection: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

impl ShardingArgs {
    /// The report's run: the defaults, or --quick's.
    fn for_report(quick: bool) -> ShardingArgs {
        ShardingArgs {
            sections: sharding::SECTIONS.iter().map(|s| s.to_string()).collect(),
            quick,
            basic_listeners: 4,
            connections: 1000,
            busy_query_ms: 200,
            throughput_rdbs: vec![1, 2, 4],
            clients: 16,
            queries_per_connection: 20,
            seed: 42,
            ..ShardingArgs::default()
        }
    }
}

fn sharding_opts(a: &ShardingArgs) -> Result<sharding::ShardingOptions> {
    for s in &a.sections {
        if !sharding::SECTIONS.contains(&s.as_str()) {
            return Err(BenchError::Server(format!(
                "--sections: unknown section '{s}' (known: {})",
                sharding::SECTIONS.join(", ")
            )));
        }
    }
    let q = a.quick;
    let pick = |v: Option<f64>, full: f64, quick: f64| v.unwrap_or(if q { quick } else { full });
    let (period_s, volume_s, block_s, throughput_s) = (
        pick(a.period_s, 20.0, 8.0),
        pick(a.volume_s, 10.0, 4.0),
        pick(a.block_s, 10.0, 5.0),
        pick(a.throughput_s, 10.0, 4.0),
    );
    if [period_s, volume_s, block_s, throughput_s]
        .iter()
        .any(|x| !(x.is_finite() && *x >= 0.5))
    {
        return Err(BenchError::Server(
            "--period-s, --volume-s, --block-s and --throughput-s must be at least 0.5".into(),
        ));
    }
    if a.basic_listeners == 0
        || a.connections < 2
        || a.throughput_rdbs.is_empty()
        || a.throughput_rdbs.contains(&0)
        || a.clients == 0
        || a.throughput_runs == Some(0)
    {
        return Err(BenchError::Server(
            "--basic-listeners, --throughput-rdbs, --throughput-runs and --clients must be at least 1, --connections at least 2".into(),
        ));
    }
    let scenario_runs = a.scenario_runs.unwrap_or(if q { 1 } else { 3 }) as usize;
    Ok(sharding::ShardingOptions {
        sections: a.sections.clone(),
        quick: q,
        rows: a.rows.unwrap_or(if q { 100_000 } else { 1_000_000 }).max(1),
        basic: sharding::basic::BasicOptions {
            listeners: a.basic_listeners,
            connections: a.connections,
            runs: scenario_runs,
        },
        fly: sharding::fly::FlyOptions {
            period_s,
            listeners: 3,
            interval_s: 1.0,
            sleep_s: 2.0,
            runs: scenario_runs,
        },
        volume: sharding::fly::VolumeOptions {
            seconds: volume_s,
            listeners: 3,
            interval_s: 0.1,
            sleep_s: 0.2,
            runs: scenario_runs,
        },
        busy: sharding::busy::BusyOptions {
            block_s,
            interval_s: 0.1,
            around_s: if q { 1.0 } else { 2.0 },
            busy_query_ms: a.busy_query_ms,
            runs: scenario_runs,
        },
        rolling: sharding::rolling::RollingOptions {
            rows: a
                .rolling_rows
                .unwrap_or(if q { 1_000_000 } else { 40_000_000 })
                .max(1),
            interval_s: 0.1,
            around_s: 1.0,
            seed: a.seed,
            runs: scenario_runs,
        },
        throughput: sharding::throughput::ThroughputOptions {
            rdbs: a.throughput_rdbs.clone(),
            seconds: throughput_s,
            clients: a.clients,
            per_conn: a.queries_per_connection.max(1),
            runs: a.throughput_runs.unwrap_or(if a.quick { 1 } else { 3 }),
        },
        seed: a.seed,
    })
}

#[derive(Args, Debug, Clone, Default)]
struct IpcArgs {
    /// Sections to run: insert, latency.
    #[arg(long, value_delimiter = ',', default_value = "insert,latency")]
    sections: Vec<String>,
    /// Small sizes that prove the pipeline in well under a minute (100k
    /// rows, one repeat, 3 s per latency cell; figures indicative only);
    /// flags given explicitly still apply.
    #[arg(long)]
    quick: bool,
    /// Bulk insert: rows per run [default: 2M; --quick 100k].
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    rows: Option<u64>,
    /// Runs of each part: every bulk-insert cell, and every latency cell
    /// (all of them in turn, run after run); the medians are reported
    /// [default: 3; --quick 1].
    #[arg(long)]
    repeats: Option<usize>,
    /// Bulk insert: the `tickdb up --fsync` policies, each cell its own runs.
    #[arg(long, value_delimiter = ',', default_value = "never,always")]
    fsync: Vec<String>,
    /// Latency: the feed's rate, rows/s.
    #[arg(long, default_value_t = 48_000)]
    rate: u64,
    /// Latency: seconds per cell (publish mode × subscriber) [default: 10;
    /// --quick 3].
    #[arg(long)]
    seconds: Option<u64>,
    /// Latency: the tp's --publish-interval-ms values (0 = zero-latency).
    #[arg(long, value_delimiter = ',', default_value = "0,50")]
    publish_interval_ms: Vec<u64>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

impl IpcArgs {
    /// The report's run: the defaults, or --quick's.
    fn for_report(quick: bool) -> IpcArgs {
        IpcArgs {
            sections: ipc::SECTIONS.iter().map(|s| s.to_string()).collect(),
            quick,
            fsync: vec!["never".into(), "always".into()],
            rate: 48_000,
            publish_interval_ms: vec![0, 50],
            seed: 42,
            ..IpcArgs::default()
        }
    }
}

fn ipc_opts(a: &IpcArgs) -> Result<ipc::IpcBenchOptions> {
    for s in &a.sections {
        if !ipc::SECTIONS.contains(&s.as_str()) {
            return Err(BenchError::Server(format!(
                "--sections: unknown section '{s}' (known: {})",
                ipc::SECTIONS.join(", ")
            )));
        }
    }
    if a.fsync.is_empty() || a.publish_interval_ms.is_empty() {
        return Err(BenchError::Server(
            "--fsync and --publish-interval-ms need at least one value".into(),
        ));
    }
    let q = a.quick;
    Ok(ipc::IpcBenchOptions {
        sections: a.sections.clone(),
        rows: a.rows.unwrap_or(if q { 100_000 } else { 2_000_000 }).max(1),
        repeats: a.repeats.unwrap_or(if q { 1 } else { 3 }).max(1),
        fsync: a.fsync.clone(),
        rate: a.rate.max(1),
        seconds: a.seconds.unwrap_or(if q { 3 } else { 10 }).max(1),
        modes: a.publish_interval_ms.clone(),
        seed: a.seed,
    })
}

#[derive(Args, Debug, Clone, Default)]
struct ReplicationArgs {
    /// Sections to run: insert, lag, ack, catchup, restore.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "insert,lag,ack,catchup,restore"
    )]
    sections: Vec<String>,
    /// Small sizes that prove the pipeline in about a minute (figures
    /// indicative only); flags given explicitly still apply.
    #[arg(long)]
    quick: bool,
    /// Bulk insert: rows per run [default: 2M; --quick 50k].
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    insert_rows: Option<u64>,
    /// Bulk insert: the primary's --fsync policies, each run alone, with an
    /// async and with a semi-sync standby [default: never,always; --quick
    /// never].
    #[arg(long, value_delimiter = ',')]
    insert_fsync: Option<Vec<String>>,
    /// Bulk insert: runs per cell; the median is reported [default: 3;
    /// --quick 1].
    #[arg(long)]
    insert_repeats: Option<usize>,
    /// Lag: target rows/s of the feed [default: 48000,480000].
    #[arg(long, value_delimiter = ',')]
    lag_rates: Option<Vec<u64>>,
    /// Lag: seconds per cell [default: 10; --quick 2].
    #[arg(long)]
    lag_seconds: Option<f64>,
    /// Lag and acknowledged-write latency: rounds of every cell in turn,
    /// each cell a fresh pair; the report gives medians [default: 3;
    /// --quick 1].
    #[arg(long)]
    latency_runs: Option<usize>,
    /// Acknowledged-write latency: updates per second, all writers together
    /// [default: 1000; --quick 200].
    #[arg(long)]
    ack_updates_per_s: Option<u64>,
    /// Acknowledged-write latency: rows per update.
    #[arg(long, default_value_t = 48)]
    ack_update_rows: usize,
    /// Acknowledged-write latency: seconds per setup [default: 10; --quick 2].
    #[arg(long)]
    ack_seconds: Option<f64>,
    /// Catch-up: GB (10^9 bytes) of journal the new standby starts behind
    /// [default: 2; --quick 0.02].
    #[arg(long)]
    catchup_gb: Option<f64>,
    /// Catch-up: rounds of the raw read and a new standby behind the same
    /// primary; the report gives medians [default: 3; --quick 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    catchup_runs: Option<u64>,
    /// Restore: minutes of log after the last snapshot, one point each.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2.5,5")]
    restore_minutes: Vec<f64>,
    /// Restore: each minute of log is this many minutes here, to keep the
    /// run short (1 = the figure's sizes) [default: 0.25, 15 s of log a
    /// minute; --quick 0.005].
    #[arg(long)]
    minutes_scale: Option<f64>,
    /// Restore: the feed rate whose log is journaled, rows/s.
    #[arg(long, default_value_t = restart::SEED_RATE)]
    restore_rate: u64,
    /// Restore: rows per journaled update of that log (48: a 48,000 rows/s
    /// feed's 1 ms ticks; 10000: the bulk insert).
    #[arg(long, default_value_t = restart::SEED_RATE_BATCH_ROWS)]
    restore_batch_rows: usize,
    /// Restore: rows loaded before the first snapshot [default: 1M; --quick
    /// 20k].
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    restore_base_rows: Option<u64>,
    /// Restore: timed pairs of restarts (full replay, then Hot Restart) at
    /// each point, the standby killed with SIGKILL before each; the report
    /// gives medians [default: 3; --quick 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    restore_runs: Option<u64>,
    /// --fsync of async standbys (a semi-sync standby always runs always).
    #[arg(long, default_value = "always")]
    standby_fsync: String,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn replication_opts(a: &ReplicationArgs) -> Result<replication::ReplicationOptions> {
    use replication::Setup;
    for s in &a.sections {
        if !replication::SECTIONS.contains(&s.as_str()) {
            return Err(BenchError::Server(format!(
                "--sections: unknown section '{s}' (known: {})",
                replication::SECTIONS.join(", ")
            )));
        }
    }
    let q = a.quick;
    let pick = |v: Option<f64>, full: f64, quick: f64| v.unwrap_or(if q { quick } else { full });
    let scale = pick(a.minutes_scale, 0.25, 0.005);
    let gb = pick(a.catchup_gb, 2.0, 0.02);
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(scale)
        || !positive(gb)
        || a.restore_minutes.iter().any(|m| !m.is_finite() || *m < 0.0)
    {
        return Err(BenchError::Server(
            "--minutes-scale and --catchup-gb must be above 0, --restore-minutes at least 0".into(),
        ));
    }
    let seconds = |v: Option<f64>| pick(v, 10.0, 2.0).max(0.5);
    Ok(replication::ReplicationOptions {
        sections: a.sections.clone(),
        cost: replication::CostOptions {
            rows: a
                .insert_rows
                .unwrap_or(if q { 50_000 } else { 2_000_000 })
                .max(1),
            fsync: a.insert_fsync.clone().unwrap_or_else(|| {
                if q {
                    vec!["never".into()]
                } else {
                    vec!["never".into(), "always".into()]
                }
            }),
            repeats: a.insert_repeats.unwrap_or(if q { 1 } else { 3 }).max(1),
            standby_fsync: a.standby_fsync.clone(),
            seed: a.seed,
        },
        lag: replication::LagOptions {
            rates: a
                .lag_rates
                .clone()
                .unwrap_or_else(|| vec![LAG_RATE, LATENCY_TARGET_RATE]),
            seconds: seconds(a.lag_seconds),
            setups: vec![Setup::Async, Setup::SemiSync],
            seed: a.seed,
            runs: a.latency_runs.unwrap_or(if q { 1 } else { 3 }).max(1),
        },
        ack: replication::AckOptions {
            updates_per_s: a
                .ack_updates_per_s
                .unwrap_or(if q { 200 } else { 1000 })
                .max(1),
            update_rows: a.ack_update_rows.max(1),
            seconds: seconds(a.ack_seconds),
            setups: vec![Setup::Alone, Setup::Async, Setup::SemiSync],
            runs: a.latency_runs.unwrap_or(if q { 1 } else { 3 }).max(1),
        },
        catchup: replication::CatchupOptions {
            gb,
            standby_fsync: a.standby_fsync.clone(),
            seed: a.seed,
            runs: a.catchup_runs.unwrap_or(if q { 1 } else { 3 }) as usize,
        },
        restore: replication::RestoreOptions {
            minutes: a.restore_minutes.clone(),
            minutes_scale: scale,
            rate: a.restore_rate.max(1),
            batch_rows: a.restore_batch_rows.max(1),
            base_rows: a
                .restore_base_rows
                .unwrap_or(if q { 20_000 } else { 1_000_000 }),
            standby_fsync: a.standby_fsync.clone(),
            symbols: 2000,
            seed: a.seed,
            runs: a.restore_runs.unwrap_or(if q { 1 } else { 3 }) as usize,
        },
    })
}

#[derive(Args, Debug, Clone)]
struct FailoverArgs {
    /// Sections to run: manual, etcd, switchover, loss, soak, restore,
    /// sentinel.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "manual,etcd,switchover,loss,soak,restore,sentinel"
    )]
    sections: Vec<String>,
    /// A short run that proves the pipeline in about a minute (3 rounds, a
    /// 10 s soak, no default-form Sentinel round; figures indicative only);
    /// flags given explicitly still apply.
    #[arg(long)]
    quick: bool,
    /// Rounds of each kill -9 kind (manual, etcd), of the switchover, of
    /// the semi-sync loss and of Sentinel's best form [default: 20; --quick
    /// 3].
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds of the false-failover soak [default: 600; --quick 10].
    #[arg(long)]
    soak_s: Option<f64>,
    /// Skip Redis Sentinel.
    #[arg(long)]
    no_redis: bool,
    /// Rounds of Sentinel's default form (each waits out its 30 s
    /// down-after-milliseconds) [default: 3; --quick 0].
    #[arg(long)]
    sentinel_default_rounds: Option<usize>,
    /// Sentinel's best form: down-after-milliseconds.
    #[arg(long, default_value_t = 1000)]
    sentinel_down_after_ms: u64,
    /// Sentinel's best form: failover-timeout.
    #[arg(long, default_value_t = 3000)]
    sentinel_failover_timeout_ms: u64,
    /// The live feed's rate, rows/s.
    #[arg(long, default_value_t = 48_000)]
    rate: u64,
    /// The nodes' --lease-ttl-s.
    #[arg(long, default_value_t = 2)]
    lease_ttl_s: u64,
    /// The nodes' --fence-margin-ms.
    #[arg(long, default_value_t = 500)]
    fence_margin_ms: u64,
    /// The nodes' --failover-check-ms.
    #[arg(long, default_value_t = 100)]
    failover_check_ms: u64,
    /// Restore: each minute of log is this many minutes here [default:
    /// 0.25; --quick 0.005].
    #[arg(long)]
    minutes_scale: Option<f64>,
    /// Restore: timed pairs of restarts (Hot Restart, and a full replay for
    /// reference), the standby killed with SIGKILL before each; the report
    /// gives medians [default: 3; --quick 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    restore_runs: Option<u64>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

impl FailoverArgs {
    /// The report's run: every section at the defaults (or --quick's).
    fn for_report(quick: bool, no_redis: bool) -> FailoverArgs {
        FailoverArgs {
            sections: failover::SECTIONS.iter().map(|s| s.to_string()).collect(),
            quick,
            rounds: None,
            soak_s: None,
            no_redis,
            sentinel_default_rounds: None,
            sentinel_down_after_ms: 1000,
            sentinel_failover_timeout_ms: 3000,
            rate: 48_000,
            lease_ttl_s: 2,
            fence_margin_ms: 500,
            failover_check_ms: 100,
            minutes_scale: None,
            restore_runs: None,
            seed: 42,
            json: None,
        }
    }
}

fn failover_opts(a: &FailoverArgs) -> Result<failover::FailoverOptions> {
    for s in &a.sections {
        if !failover::SECTIONS.contains(&s.as_str()) {
            return Err(BenchError::Server(format!(
                "--sections: unknown section '{s}' (known: {})",
                failover::SECTIONS.join(", ")
            )));
        }
    }
    let q = a.quick;
    let soak_s = a.soak_s.unwrap_or(if q { 10.0 } else { 600.0 });
    if !(soak_s.is_finite() && soak_s > 0.0) {
        return Err(BenchError::Server("--soak-s must be above 0".into()));
    }
    if a.lease_ttl_s == 0 || a.fence_margin_ms >= a.lease_ttl_s * 1000 {
        return Err(BenchError::Server(
            "--lease-ttl-s must be at least 1 and --fence-margin-ms below it".into(),
        ));
    }
    let scale = a.minutes_scale;
    if scale.is_some_and(|x| !(x.is_finite() && x > 0.0)) {
        return Err(BenchError::Server("--minutes-scale must be above 0".into()));
    }
    let rounds = a.rounds.unwrap_or(if q { 3 } else { 20 }).max(1);
    Ok(failover::FailoverOptions {
        sections: a.sections.clone(),
        quick: q,
        rounds,
        rate: a.rate.max(1),
        lease_ttl_s: a.lease_ttl_s,
        fence_margin_ms: a.fence_margin_ms,
        check_ms: a.failover_check_ms.max(10),
        soak: failover::SoakOptions {
            seconds: soak_s,
            pause_every_s: 5.0,
            pause_ms: 150,
            busy_loops: cores(),
        },
        restore: failover::restore_options(q, scale, a.restore_runs, a.seed),
        redis: !a.no_redis,
        sentinel_default: failover::SentinelForm {
            label: "default",
            down_after_ms: None,
            failover_timeout_ms: None,
            rounds: a.sentinel_default_rounds.unwrap_or(if q { 0 } else { 3 }),
        },
        sentinel_best: failover::SentinelForm {
            label: "best",
            down_after_ms: Some(a.sentinel_down_after_ms.max(1)),
            failover_timeout_ms: Some(a.sentinel_failover_timeout_ms.max(1)),
            rounds,
        },
        seed: a.seed,
    })
}

/// Which build measured: reports say so beside every figure.
pub(crate) fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The replication lag target's rate: 48,000 rows/s.
const LAG_RATE: u64 = 48_000;

#[derive(Args, Debug, Clone)]
struct RobustnessArgs {
    /// Journaled updates per second (the Optane kdb+ study's 48,000 rows/s
    /// as 1,000 updates of 48 rows).
    #[arg(long, default_value_t = 1000)]
    updates_per_s: u64,
    /// Rows per update.
    #[arg(long, default_value_t = 48)]
    update_rows: usize,
    /// Seconds per phase (quiet, then storm, in each round).
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Rows preloaded for the hostile queries to read.
    #[arg(long, default_value = "1M", value_parser = tickdb_stack::feed::parse_count)]
    preload_rows: u64,
    /// Concurrent slow queries in the storm.
    #[arg(long, default_value_t = 50)]
    slow_queries: usize,
    /// Idle connections held on each port in the storm.
    #[arg(long, default_value_t = 200)]
    idle_per_port: usize,
    /// The node's --query-timeout-ms.
    #[arg(long, default_value_t = 5000)]
    query_timeout_ms: u64,
    /// The node's --query-threads (default: the node's own default).
    #[arg(long)]
    query_threads: Option<usize>,
    /// Rounds of a quiet phase then a storm, on the same node; the report
    /// gives each figure's median and range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn robustness_opts(a: &RobustnessArgs) -> robustness::RobustnessOptions {
    robustness::RobustnessOptions {
        updates_per_s: a.updates_per_s.max(1),
        update_rows: a.update_rows.max(1),
        seconds: a.seconds.max(1.0),
        preload_rows: a.preload_rows,
        slow_queries: a.slow_queries,
        idle_per_port: a.idle_per_port,
        query_timeout_ms: a.query_timeout_ms,
        query_threads: a.query_threads,
        runs: a.runs as usize,
    }
}

#[derive(Args, Debug, Clone)]
struct StackArgs {
    /// Updates per second per stack, trades:quotes 1:10 (the Optane kdb+
    /// study: 48000). Default: 8000; 48000 with --scale or --full.
    #[arg(long)]
    rate: Option<u64>,
    /// Seconds measured per scenario (the study: 1800). Default: 20; 600
    /// with --scale; 1800 with --full.
    #[arg(long)]
    seconds: Option<f64>,
    /// Rows preloaded into each stack before it is measured (the study:
    /// 65M). Default: 1M; 65M with --scale or --full.
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    prestress: Option<u64>,
    /// Symbols in the feed's universe.
    #[arg(long, default_value_t = 2000)]
    symbols: usize,
    /// Test 1 scenarios, MONITOR_MS:TP_MS each (tp 0 = zero-latency).
    /// Default: the study's four plus zero-latency,
    /// 300:50,50:50,20:50,50:1000,50:0. With --scale, its one scenario
    /// (the first given; default 300:50).
    #[arg(long, value_delimiter = ',', value_parser = stack::parse_timers)]
    timers: Option<Vec<stack::Timers>>,
    /// Test 2: DRAM rdbs (stacks) run together.
    #[arg(long, default_value_t = 2)]
    dram_rdbs: usize,
    /// Test 2: fsmem rdbs run together. Default: as many as fit in the DRAM
    /// the DRAM rdbs used, at most 2 stacks per core.
    #[arg(long)]
    fsmem_rdbs: Option<usize>,
    /// Test 2's timers, MONITOR_MS:TP_MS (the study: a 1 s tp timer).
    #[arg(long, default_value = "50:1000", value_parser = stack::parse_timers)]
    test2_timers: stack::Timers,
    /// Which tests to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    tests: Vec<u8>,
    /// The agg publishes changed bars this often.
    #[arg(long, default_value_t = 100)]
    publish_ms: u64,
    /// The tps' fsync policy (kdb+ tps log without fsync).
    #[arg(long, default_value = "never")]
    fsync: String,
    /// The feeds' seed (every stack of a scenario gets the same data).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The study's sizes: 48,000 updates/s per stack, 30 min per scenario,
    /// 65M rows preloaded, 10 fsmem rdbs in Test 2 (overrides those flags;
    /// needs a machine like the study's).
    #[arg(long)]
    full: bool,
    /// The study's scale on one stack, instead of Tests 1 and 2: one DRAM
    /// stack preloaded with 65M rows (the preload's progress is shown),
    /// then 48,000 updates/s for 10 minutes with a 50 ms tp timer and the
    /// monitor every 300 ms. Reports bytes per row of trade and quote,
    /// max and mean tick latency, the as-of query's time, the rdb's RSS,
    /// the feed's rate and how long the preload took. --rate, --seconds,
    /// --prestress and --timers override its sizes (a quick check:
    /// --scale --runs 1 --prestress 2M --seconds 30). If the live run would not fit
    /// in memory after the preload, the preload stops early and the report
    /// says at how many rows and why. 65M rows take about 3 GiB in the rdb
    /// (its RSS ends near 7 GiB with the live run's rows and the agg's
    /// bars) and about a minute to load on 2 cores; with 10 minutes
    /// measured a run takes about 12 minutes, and it runs --runs times
    /// (default 3: about 36 minutes), each on a stack started afresh.
    #[arg(long)]
    scale: bool,
    /// Zero latency at the study's rate, instead of Tests 1 and 2: one
    /// stack at a time, a DRAM and an fsmem rdb alternating, RUNS times
    /// each (default 3), with a zero tp timer and the monitor every 50 ms,
    /// 48,000 updates/s, 1M rows preloaded and 20 s measured (--rate,
    /// --seconds and --prestress override those). Reports each run's max
    /// tick latency and the medians over the runs. About 40 s a run.
    #[arg(
        long,
        value_name = "RUNS",
        num_args = 0..=1,
        default_missing_value = "3",
        value_parser = clap::value_parser!(u64).range(1..),
        conflicts_with_all = ["scale", "timers", "full"]
    )]
    zero_latency: Option<u64>,
    /// Runs of each Test 1 scenario and of Test 2, or of the --scale run:
    /// every figure of their tables is the median over the runs, and the
    /// report lists each run's figures. The scenarios run in rounds (each
    /// once, then again), each run starting its stacks afresh. Default: 3;
    /// 1 with --full (the study's 30-minute runs).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..),
        conflicts_with_all = ["zero_latency"]
    )]
    runs: Option<u64>,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct KvArgs {
    /// Entries in the keyed table (Hot Restart Persistence: 100M in the lab,
    /// 40M on EC2).
    #[arg(long, default_value = "2M", value_parser = tickdb_stack::feed::parse_count)]
    entries: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Random operations under `everysec` after the load (default: 2 × entries).
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    updates: Option<u64>,
    /// Random operations under `always` (default: entries / 5).
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    always_updates: Option<u64>,
    /// Percent of the random operations that remove their key.
    #[arg(long, default_value_t = 10)]
    remove_pct: u32,
    /// Operations per batch: Redis's pipeline depth, and what one fsync
    /// covers under `always`.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Reload reader threads to measure, each against a raw read with as
    /// many threads.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    parallelism: Vec<usize>,
    /// Index partitions (reload partition threads). Default: the cores.
    #[arg(long)]
    partitions: Option<usize>,
    /// Chunk file size, MiB.
    #[arg(long, default_value_t = 64)]
    chunk_mb: u64,
    /// Skip Redis.
    #[arg(long)]
    no_redis: bool,
    /// Seed of the random operations and values (both systems get the same).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Whole runs (dd, the store, Redis); every figure reported is the
    /// median over them, with its range.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The lab size of Hot Restart Persistence: 100M entries, parallelism 4,
    /// 40 partitions (needs about 150 GB of RAM for the store and as much
    /// for Redis).
    #[arg(long)]
    full: bool,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct RestartArgs {
    /// Rows loaded before the last checkpoint (trades and quotes 1:10). A
    /// day at 48,000/s (the Optane kdb+ study's rate) is 1.12G rows.
    #[arg(long, default_value = "10M", value_parser = tickdb_stack::feed::parse_count)]
    rows: u64,
    /// Load steps, each followed by a checkpoint.
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// Rows after the last checkpoint (the journal tail). Default: half of
    /// the 5-minute checkpoint interval, scaled like the day.
    #[arg(long, value_parser = tickdb_stack::feed::parse_count)]
    tail_rows: Option<u64>,
    /// Updates/s of the live feed running through the load and checkpoints.
    #[arg(long, default_value_t = 48_000)]
    live_rate: u64,
    /// Restarts of each kind; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Symbols in the feeds' universe.
    #[arg(long, default_value_t = 2000)]
    symbols: usize,
    /// --hot-restart-parallelism of the restarts.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Journal segment size (`tickdb up --segment-bytes-max`): the journal
    /// is trimmed by whole segments.
    #[arg(long, default_value_t = tickdb_journal::SEGMENT_BYTES_MAX_DEFAULT)]
    segment_bytes_max: u64,
    /// Rows per journaled update while loading. The default is what a feed
    /// at 48,000/s makes in a 1 ms tick; 10000 is the bulk insert of
    /// Zero-Impact Crash Recovery for kdb+ (the cheapest journal to replay).
    #[arg(long, default_value_t = restart::SEED_RATE_BATCH_ROWS)]
    batch_rows: usize,
    /// Seed of the feeds (each load step adds its number; the live feed 1000).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct InsertArgs {
    /// Rows to insert per server (Zero-Impact Crash Recovery for kdb+
    /// inserted 271.6 GB).
    #[arg(long, default_value = "2M", value_parser = tickdb_stack::feed::parse_count)]
    rows: u64,
    /// Timed inserts per server: rows/s is reported as the median and the
    /// range, the other figures from the median run.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// `tickdb up` fsync policies to measure.
    #[arg(long, value_delimiter = ',', default_value = "never,always")]
    fsync: Vec<String>,
    /// Skip QuestDB.
    #[arg(long)]
    no_questdb: bool,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
struct IngestArgs {
    /// Rows per run.
    #[arg(long, default_value_t = 2_000_000)]
    rows: usize,
    /// Runs per cell; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Client connection counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    conns: Vec<usize>,
    /// Skip QuestDB (no Java, or a quick look).
    #[arg(long)]
    no_questdb: bool,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Args, Debug, Clone)]
struct LatencyArgs {
    /// Feed rate in rows/s. The target is 480000 (10× the Optane kdb+
    /// study's 48,000); the default is what a 2-core machine sustains
    /// alongside the feed and the subscriber.
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Publish intervals to measure (0 = zero-latency).
    #[arg(long, value_delimiter = ',', default_value = "0,50")]
    modes: Vec<u64>,
    /// Runs of each mode, each on a fresh tp, the modes taking turns; the
    /// report gives each figure's median and range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
}

#[derive(Args, Debug, Clone)]
struct JournalArgs {
    /// MB appended per fsync policy (and written by dd).
    #[arg(long, default_value_t = 512)]
    megabytes: u64,
    /// Seconds per group-commit run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    writers: Vec<usize>,
    /// Runs of the whole sequence (dd, appends, replay, group commit); the
    /// report gives each figure's median and range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// Small sizes and one repeat: proves the pipeline in a minute or two;
    /// the figures are indicative only.
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    #[arg(long)]
    no_questdb: bool,
    /// Skip Redis in the Hot Restart key-value section.
    #[arg(long)]
    no_redis: bool,
    /// Run only this section and replace it in place in --out, keeping the
    /// rest of the file (see above): ingest (## ILP ingest), latency (## Tick-to-subscriber
    /// latency), journal, insert (## Bulk insert), sharding (## Socket
    /// sharding), ipc, failover, replication, robustness, hot-restart (its
    /// two sections), stack (the market-data stack and the bulk insert).
    #[arg(long, value_name = "SECTION", value_parser = clap::builder::PossibleValuesParser::new(REPORT_ONLY.map(|(n, _)| n)))]
    only: Option<String>,
}

/// One report section: runs its benchmark, answers its markdown.
type SectionFn = fn(&Path, &Path, &ReportArgs) -> Result<String>;

/// The sections `report --only` runs alone.
const REPORT_ONLY: [(&str, SectionFn); 11] = [
    ("ingest", ingest_section),
    ("latency", latency_section),
    ("insert", insert_section),
    ("journal", journal_section),
    ("sharding", sharding_section),
    ("ipc", ipc_section),
    ("failover", failover_section),
    ("replication", replication_section),
    ("robustness", robustness_section),
    ("hot-restart", hot_restart_sections),
    ("stack", stack_and_insert_sections),
];

const SHARDING_HEADING: &str = "## Socket sharding";

pub fn run(args: BenchArgs) -> ExitCode {
    child::install_interrupt_handler();
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickdb bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_inner(args: BenchArgs) -> Result<()> {
    let bin = match args.tickdb_bin {
        Some(b) => b,
        None => std::env::current_exe().map_err(BenchError::io("locating the tickdb binary"))?,
    };
    let tmp;
    let work: PathBuf = match args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(&d)
                .map_err(BenchError::io(format!("creating {}", d.display())))?;
            d
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("tickdb-bench")
                .tempdir_in(std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")))
                .map_err(BenchError::io("creating a scratch directory"))?;
            tmp.path().to_path_buf()
        }
    };
    match args.cmd {
        BenchCmd::Ingest(a) => {
            let r = ingest::run(&bin, &work, &ingest_opts(&a))?;
            println!("{}", r.markdown());
        }
        BenchCmd::Latency(a) => {
            let o = latency_opts(&a);
            let r = latency::run(&bin, &work, &o)?;
            println!("{}", latency::markdown(&r, &o));
        }
        BenchCmd::Journal(a) => {
            let r = journal::run(&bin, &work, &journal_opts(&a))?;
            println!("{}", r.markdown());
        }
        BenchCmd::Stack(a) => {
            let r = stack::run(&bin, &work, &stack_opts(&a))?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
        }
        BenchCmd::Insert(a) => {
            let r = insert::run(&bin, &work, &insert_opts(&a))?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
        }
        BenchCmd::Kv(a) => {
            let r = kv::run(&work, &kv_opts(&a))?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
        }
        BenchCmd::Restart(a) => {
            let r = restart::run(&bin, &work, &restart_opts(&a))?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
        }
        BenchCmd::Robustness(a) => {
            let r = robustness::run(&bin, &work, &robustness_opts(&a))?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
            if r.lost_rows > 0 || r.duplicated_rows > 0 || !r.node_alive {
                return Err(BenchError::Server(format!(
                    "the node lost {} and duplicated {} acknowledged rows (alive: {})",
                    r.lost_rows, r.duplicated_rows, r.node_alive
                )));
            }
        }
        BenchCmd::Replication(a) => {
            let r = replication::run(&bin, &work, &replication_opts(&a)?)?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
            let failures = r.failures();
            if !failures.is_empty() {
                return Err(BenchError::Server(format!(
                    "replication: the standby did not equal the primary: {}",
                    failures.join("; ")
                )));
            }
        }
        BenchCmd::Failover(a) => {
            let r = failover::run(&bin, &work, &failover_opts(&a)?)?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
            let failures = r.failures();
            if !failures.is_empty() {
                return Err(BenchError::Server(format!(
                    "failover: {}",
                    failures.join("; ")
                )));
            }
        }
        BenchCmd::Ipc(a) => {
            let r = ipc::run(&bin, &work, &ipc_opts(&a)?)?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
            let failures = r.failures();
            if !failures.is_empty() {
                return Err(BenchError::Server(format!("ipc: {}", failures.join("; "))));
            }
        }
        BenchCmd::Sharding(a) => {
            let r = sharding::run(&bin, &work, &sharding_opts(&a)?)?;
            if let Some(p) = &a.json {
                write_json(p, &r)?;
            }
            println!("{}", r.markdown());
            let failures = r.failures();
            if !failures.is_empty() {
                return Err(BenchError::Server(format!(
                    "sharding: {}",
                    failures.join("; ")
                )));
            }
        }
        BenchCmd::Report(a) => report(&bin, &work, &a)?,
    }
    Ok(())
}

fn ingest_opts(a: &IngestArgs) -> ingest::IngestOptions {
    ingest::IngestOptions {
        rows: a.rows,
        repeats: a.repeats.max(1),
        conns: a.conns.clone(),
        seed: a.seed,
        questdb: !a.no_questdb,
    }
}

fn write_json<T: serde::Serialize>(p: &Path, v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| BenchError::Protocol(format!("encoding results: {e}")))?;
    std::fs::write(p, text).map_err(BenchError::io(format!("writing {}", p.display())))
}

/// Test 1's scenarios by default: the study's four and zero-latency.
const STACK_TIMERS_DEFAULT: [stack::Timers; 5] = [
    stack::Timers {
        monitor_ms: 300,
        tp_ms: 50,
    },
    stack::Timers {
        monitor_ms: 50,
        tp_ms: 50,
    },
    stack::Timers {
        monitor_ms: 20,
        tp_ms: 50,
    },
    stack::Timers {
        monitor_ms: 50,
        tp_ms: 1000,
    },
    stack::Timers {
        monitor_ms: 50,
        tp_ms: 0,
    },
];

fn stack_opts(a: &StackArgs) -> stack::StackOptions {
    let mut o = stack::StackOptions {
        rate: a.rate.unwrap_or(8000),
        seconds: a.seconds.unwrap_or(20.0),
        prestress: a.prestress.unwrap_or(1_000_000),
        symbols: a.symbols,
        timers: a
            .timers
            .clone()
            .unwrap_or_else(|| STACK_TIMERS_DEFAULT.to_vec()),
        dram_rdbs: a.dram_rdbs,
        fsmem_rdbs: a.fsmem_rdbs,
        test2_timers: a.test2_timers,
        tests: a.tests.clone(),
        publish_ms: a.publish_ms,
        seed: a.seed,
        fsync: a.fsync.clone(),
        scale: a.scale,
        zero_latency: a.zero_latency.unwrap_or(0) as usize,
        runs: a.runs.map(|n| n as usize).unwrap_or(if a.full {
            1
        } else {
            stack::TEST_RUNS_DEFAULT
        }),
    };
    if o.zero_latency > 0 {
        o.rate = a.rate.unwrap_or(stack::SCALE_RATE);
        o.seconds = a.seconds.unwrap_or(stack::ZERO_LATENCY_SECONDS);
        o.prestress = a.prestress.unwrap_or(stack::ZERO_LATENCY_PRESTRESS_ROWS);
    } else if a.scale {
        // The study's sizes unless given; --full makes it the study's 30
        // minutes.
        o.rate = a.rate.unwrap_or(stack::SCALE_RATE);
        o.seconds = a
            .seconds
            .unwrap_or(if a.full { 1800.0 } else { stack::SCALE_SECONDS });
        o.prestress = a
            .prestress
            .unwrap_or(tickdb_stack::feed::SEED_PRESTRESS_ROWS);
        o.timers = vec![a
            .timers
            .as_ref()
            .and_then(|t| t.first().copied())
            .unwrap_or(stack::SCALE_TIMERS)];
    } else if a.full {
        o.rate = 48_000;
        o.seconds = 1800.0;
        o.prestress = tickdb_stack::feed::SEED_PRESTRESS_ROWS;
        o.fsmem_rdbs = Some(10);
    }
    o
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

fn kv_opts(a: &KvArgs) -> kv::KvOptions {
    let mut o = kv::KvOptions {
        entries: a.entries,
        value_bytes: a.value_bytes,
        updates: a.updates.unwrap_or(2 * a.entries),
        always_updates: a.always_updates.unwrap_or(a.entries / 5),
        remove_pct: a.remove_pct,
        batch: a.batch,
        parallelism: a.parallelism.clone(),
        partitions: a.partitions.unwrap_or_else(cores),
        chunk_mb: a.chunk_mb,
        redis: !a.no_redis,
        seed: a.seed,
        runs: a.runs,
    };
    if a.full {
        o.entries = 100_000_000;
        o.updates = a.updates.unwrap_or(2 * o.entries);
        o.always_updates = a.always_updates.unwrap_or(o.entries / 5);
        o.parallelism = vec![1, 4];
        o.partitions = 40;
    }
    o
}

fn restart_opts(a: &RestartArgs) -> restart::RestartOptions {
    restart::RestartOptions {
        rows: a.rows,
        steps: a.steps,
        tail_rows: a
            .tail_rows
            .unwrap_or_else(|| restart::RestartOptions::scaled_tail(a.rows)),
        live_rate: a.live_rate,
        repeats: a.repeats,
        symbols: a.symbols,
        parallelism: a.parallelism,
        segment_bytes_max: a.segment_bytes_max,
        batch_rows: a.batch_rows,
        seed: a.seed,
    }
}

fn insert_opts(a: &InsertArgs) -> insert::InsertBenchOptions {
    insert::InsertBenchOptions {
        rows: a.rows,
        runs: a.runs as usize,
        fsync: a.fsync.clone(),
        questdb: !a.no_questdb,
        seed: a.seed,
    }
}

/// The tick-to-subscriber target's rate: 480,000 updates/s.
const LATENCY_TARGET_RATE: u64 = 480_000;

fn latency_opts(a: &LatencyArgs) -> latency::LatencyOptions {
    latency::LatencyOptions {
        rate: a.rate,
        seconds: a.seconds,
        modes: a.modes.clone(),
        runs: a.runs as usize,
    }
}

fn journal_opts(a: &JournalArgs) -> journal::JournalOptionsBench {
    journal::JournalOptionsBench {
        megabytes: a.megabytes,
        seconds: a.seconds,
        writers: a.writers.clone(),
        runs: a.runs as usize,
    }
}

fn report(bin: &Path, work: &Path, a: &ReportArgs) -> Result<()> {
    if let Some(only) = &a.only {
        return report_only(bin, work, a, only);
    }
    let machine = machine::Machine::probe(work);
    let started = std::time::SystemTime::now();
    let ingest_md = ingest_section(bin, work, a)?;
    let latency_md = latency_section(bin, work, a)?;
    let journal_md = journal_section(bin, work, a)?;
    let stack_md = stack_and_insert_sections(bin, work, a)?;
    let hot_md = hot_restart_sections(bin, work, a)?;
    let robust_md = robustness_section(bin, work, a)?;
    let repl_md = replication_section(bin, work, a)?;
    let failover_md = failover_section(bin, work, a)?;
    let ipc_md = ipc_section(bin, work, a)?;
    let sharding_md = sharding_section(bin, work, a)?;
    let secs = started.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let date = today_utc();
    let profile = if cfg!(debug_assertions) {
        "debug (figures NOT representative)"
    } else {
        "release"
    };
    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str(&format!(
        "Generated by `scripts/bench.sh{}` (`tickdb bench report`) on {date}, in {secs} s, with a {profile} build. \
         Every peer figure was measured in the same run on the same machine. Regenerate with the same command; \
         `tickdb bench ingest|latency|journal|kv|restart|stack|insert|replication|failover|ipc|sharding --help` runs one part with other sizes, and `tickdb bench report --only SECTION` regenerates one section in place. \
         `scripts/bench.sh` then runs three scripts, each of which replaces its own section in place: \
         `scripts/bench_query.py` (SQL against QuestDB and DuckDB), `scripts/bench_monitor.py` (one symbol on a \
         50M-row rdb) and `scripts/bench_history.py` (end of day and history); the lines below say how to run each alone.\n\n",
        if a.quick { " --quick" } else { "" }
    ));
    md.push_str("## Machine\n\n");
    md.push_str(&machine.markdown());
    md.push_str("\nThe benchmark clients, the servers and the peers share this machine's cores, so every figure includes the client's own CPU cost.\n\n");
    md.push_str(ingest_md.trim_start_matches('\n'));
    md.push_str(&latency_md);
    md.push_str(&journal_md);
    md.push_str(&hot_md);
    md.push_str(&robust_md);
    md.push_str(&repl_md);
    md.push_str(&failover_md);
    md.push_str(&stack_md);
    md.push_str(&ipc_md);
    md.push_str(&sharding_md);
    std::fs::write(&a.out, md).map_err(BenchError::io(format!("writing {}", a.out.display())))?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}

/// The journal section: append per fsync policy against dd, group commit,
/// replay against a raw cold read; medians of its runs.
/// The tick-to-subscriber latency section: both publish modes at the
/// default rate, then zero-latency mode at the target rate.
fn latency_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let la = if a.quick {
        LatencyArgs {
            rate: 20_000,
            seconds: 3,
            modes: vec![0, 50],
            runs: 1,
        }
    } else {
        LatencyArgs {
            rate: 100_000,
            seconds: 10,
            modes: vec![0, 50],
            runs: 3,
        }
    };
    eprintln!("[latency] tick to subscriber, {} run(s) per mode", la.runs);
    let lo = latency_opts(&la);
    let lat = latency::run(bin, work, &lo)?;
    let mut md = String::from("\n## Tick-to-subscriber latency\n\n");
    md.push_str(&latency::markdown(&lat, &lo));
    // The target rate (ten times the Optane kdb+ study's), zero-latency mode:
    // reported even where this machine cannot sustain it.
    if !a.quick {
        let target = latency::LatencyOptions {
            rate: LATENCY_TARGET_RATE,
            seconds: lo.seconds.min(5),
            modes: vec![0],
            runs: lo.runs,
        };
        let t = latency::run(bin, work, &target)?;
        md.push_str("\nAt the target rate, ten times 48,000 rows/s:\n\n");
        md.push_str(&latency::markdown(&t, &target));
    }
    Ok(md)
}

fn journal_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let ja = JournalArgs {
        megabytes: if a.quick { 64 } else { 512 },
        seconds: if a.quick { 2 } else { 5 },
        writers: vec![1, 4, 16],
        runs: if a.quick { 1 } else { 3 },
    };
    eprintln!("[journal] write and replay, {} run(s)", ja.runs);
    let jr = journal::run(bin, work, &journal_opts(&ja))?;
    Ok(format!("\n## Journal\n\n{}", jr.markdown()))
}

/// The robustness section: acknowledged-write latency, quiet and under
/// hostile queries and clients.
fn robustness_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let ra = RobustnessArgs {
        updates_per_s: 1000,
        update_rows: 48,
        seconds: if a.quick { 5.0 } else { 30.0 },
        preload_rows: if a.quick { 100_000 } else { 1_000_000 },
        slow_queries: 50,
        idle_per_port: 200,
        query_timeout_ms: 5000,
        query_threads: None,
        runs: if a.quick { 1 } else { 3 },
        json: None,
    };
    eprintln!("[robustness] write latency under hostile queries and clients");
    let r = robustness::run(bin, work, &robustness_opts(&ra))?;
    Ok(format!(
        "\n## Robustness: acknowledged writes under hostile queries and clients\n\n{}",
        r.markdown()
    ))
}

/// The replication section (Zero-Impact Crash Recovery for kdb+): the cost
/// to the primary, lag, acknowledgement latency, catch-up and restore. A
/// standby that does not equal its primary fails the report.
fn replication_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let ra = ReplicationArgs {
        sections: replication::SECTIONS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        quick: a.quick,
        restore_minutes: vec![0.0, 1.0, 2.5, 5.0],
        restore_rate: restart::SEED_RATE,
        restore_batch_rows: restart::SEED_RATE_BATCH_ROWS,
        ack_update_rows: 48,
        standby_fsync: "always".into(),
        seed: 42,
        ..ReplicationArgs::default()
    };
    eprintln!("[replication] cost to the primary, lag, acknowledgements, catch-up, restore");
    let r = replication::run(bin, work, &replication_opts(&ra)?)?;
    let failures = r.failures();
    if !failures.is_empty() {
        return Err(BenchError::Server(format!(
            "replication: the standby did not equal the primary: {}",
            failures.join("; ")
        )));
    }
    Ok(format!(
        "\n## Replication (Zero-Impact Crash Recovery for kdb+)\n\n{}",
        r.markdown()
    ))
}

/// The failover section: RTO by hand and through etcd, switchover, loss,
/// false failovers, the standby restore and Redis Sentinel. A mismatch, a
/// semi-sync loss or a false failover fails the report.
fn failover_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let fa = FailoverArgs::for_report(a.quick, a.no_redis);
    eprintln!("[failover] RTO, switchover, loss, false failovers, restore, Redis Sentinel");
    let r = failover::run(bin, work, &failover_opts(&fa)?)?;
    let failures = r.failures();
    if !failures.is_empty() {
        return Err(BenchError::Server(format!(
            "failover: {}",
            failures.join("; ")
        )));
    }
    Ok(format!("\n## Failover\n\n{}", r.markdown()))
}

/// The ILP ingest section: rows/s over TCP and HTTP, 1 and 4 connections,
/// tickdb under `--fsync never` and `always` against QuestDB in the same run.
fn ingest_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let ia = IngestArgs {
        rows: if a.quick { 200_000 } else { 2_000_000 },
        repeats: if a.quick { 1 } else { 3 },
        conns: vec![1, 4],
        no_questdb: a.no_questdb,
        seed: 42,
    };
    eprintln!("[ingest] ILP over TCP and HTTP, 1 and 4 connections, against QuestDB");
    let r = ingest::run(bin, work, &ingest_opts(&ia))?;
    Ok(format!(
        "\n## ILP ingest\n\n{}\nQuestDB {} runs from its Maven Central jar, listeners on 127.0.0.1, telemetry off, \
         in two forms, each a fresh server per cell that gets one untimed run first (its JVM compiles the ingest \
         path during it) and then writes a new table per run:\n\n\
         - **default**: as it ships (WAL tables, commits without fsync), each table auto-created by ILP;\n\
         - **tuned**: what its documentation prescribes for this load. Each table is created before its run with \
         the schema ILP would give it and `sym SYMBOL CAPACITY 512`: the CREATE TABLE reference (\"Symbol \
         capacity\") asks for the column's distinct values (500 here; the default is 256, and \"getting this \
         value badly wrong will cause performance degradation\", configuration reference, \
         `cairo.default.symbol.capacity`). Over TCP, `line.tcp.io.worker.count` is set to the connection count: \
         the ILP TCP receiver's capacity planning calls one I/O thread per connection \"the ideal ratio\". For \
         ILP over HTTP, the capacity planning guide says ILP \"is optimal out-of-the box\", so only the table \
         is prepared.\n\n\
         Ratios are against the better of the two QuestDB forms, named in brackets. QuestDB commits without \
         fsync in both forms, so the `--fsync always` ratio compares durable acknowledgements with its \
         unsynced ones. tickdb starts fresh for each run. All are timed until the rows are queryable.\n",
        r.markdown(),
        servers::QUESTDB_VERSION,
    ))
}

/// The kdb+ IPC section: the bulk insert over IPC against ILP, and
/// tick-to-subscriber latency over IPC against the tickdb protocol. A
/// mismatch in rows or sums fails the report.
fn ipc_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    eprintln!("[ipc] kdb+ IPC bulk insert against ILP, subscriber latency");
    let r = ipc::run(bin, work, &ipc_opts(&IpcArgs::for_report(a.quick))?)?;
    let failures = r.failures();
    if !failures.is_empty() {
        return Err(BenchError::Server(format!("ipc: {}", failures.join("; "))));
    }
    Ok(format!("\n## kdb+ IPC\n\n{}", r.markdown()))
}

/// The socket sharding section: the experiments of the KX whitepaper
/// "Socket Sharding with kdb+ and Linux" and the PostgreSQL throughput of
/// rdbs sharing a port. A failed check fails the report.
fn sharding_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    eprintln!("[sharding] socket sharding: the KX whitepaper's experiments, query throughput");
    let r = sharding::run(
        bin,
        work,
        &sharding_opts(&ShardingArgs::for_report(a.quick))?,
    )?;
    let failures = r.failures();
    if !failures.is_empty() {
        return Err(BenchError::Server(format!(
            "sharding: {}",
            failures.join("; ")
        )));
    }
    Ok(format!("\n{SHARDING_HEADING}\n\n{}", r.markdown()))
}

/// `report --only SECTION`: runs that section and puts it in place in the
/// existing file.
fn report_only(bin: &Path, work: &Path, a: &ReportArgs, only: &str) -> Result<()> {
    let machine = machine::Machine::probe(work);
    let started = std::time::SystemTime::now();
    let Some((_, section)) = REPORT_ONLY.iter().find(|(n, _)| *n == only) else {
        return Err(BenchError::Server(format!(
            "--only: unknown section '{only}' (known: {})",
            REPORT_ONLY.map(|(n, _)| n).join(", ")
        )));
    };
    let md = section(bin, work, a)?;
    let secs = started.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    let old = match std::fs::read_to_string(&a.out) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(BenchError::io(format!("reading {}", a.out.display()))(e)),
    };
    let doc = old.unwrap_or_else(|| {
        format!(
            "# Benchmarks\n\n## Machine\n\n{}\nThe benchmark clients, the servers and the peers share this machine's cores, so every figure includes the client's own CPU cost.\n",
            machine.markdown()
        )
    });
    let file_cpu = doc
        .lines()
        .find_map(|l| l.strip_prefix("- CPU: "))
        .map(str::to_string);
    let here = format!("{} ({} cores available)", machine.cpu, machine.cores);
    let elsewhere = match &file_cpu {
        Some(c) if *c != here => format!(
            " on another machine than the Machine section's: {}",
            machine.summary()
        ),
        _ => String::new(),
    };
    let headings: Vec<String> = split_sections(&md)
        .iter()
        .filter_map(|c| c.lines().next())
        .map(|h| format!("\"{}\"", h.trim_start_matches("## ").trim_end()))
        .collect();
    let note = format!(
        "`tickdb bench report --only {only}{}` regenerated {} alone on {}, in {secs} s, with a {} build{elsewhere}; the other sections are from the run above.",
        if a.quick { " --quick" } else { "" },
        headings.join(" and "),
        today_utc(),
        build_profile()
    );
    let doc = replace_sections(&doc, &md);
    let doc = set_only_note(&doc, only, &note);
    std::fs::write(&a.out, doc).map_err(BenchError::io(format!("writing {}", a.out.display())))?;
    eprintln!("replaced the {only} section(s) of {}", a.out.display());
    Ok(())
}

/// Puts each `## ` section of `new` in `doc`: from the line with the same
/// heading to the next `## ` heading (or the end) is replaced; a heading
/// `doc` lacks is appended at the end.
fn replace_sections(doc: &str, new: &str) -> String {
    let mut out = doc.to_string();
    for chunk in split_sections(new) {
        let heading = chunk.lines().next().unwrap_or("").trim_end().to_string();
        let lines: Vec<&str> = out.split_inclusive('\n').collect();
        let at = lines.iter().position(|l| l.trim_end() == heading);
        out = match at {
            Some(i) => {
                let end = lines[i + 1..]
                    .iter()
                    .position(|l| l.starts_with("## "))
                    .map(|j| i + 1 + j)
                    .unwrap_or(lines.len());
                let mut body = chunk.trim_end().to_string();
                body.push_str(if end < lines.len() { "\n\n" } else { "\n" });
                format!("{}{}{}", lines[..i].concat(), body, lines[end..].concat())
            }
            None => {
                let mut s = out.trim_end().to_string();
                s.push_str("\n\n");
                s.push_str(chunk.trim_end());
                s.push('\n');
                s
            }
        };
    }
    out
}

/// The `## ` sections of a report part, each from its heading on.
fn split_sections(md: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in md.split_inclusive('\n') {
        if line.starts_with("## ") {
            out.push(String::new());
        }
        if let Some(cur) = out.last_mut() {
            cur.push_str(line);
        }
    }
    out
}

/// The note under the file's header that `report --only SECTION` ran: an
/// earlier note for the same section is replaced, else it goes before the
/// first `## ` heading.
fn set_only_note(doc: &str, only: &str, note: &str) -> String {
    let key = format!("`tickdb bench report --only {only}");
    let mut lines: Vec<String> = doc.lines().map(str::to_string).collect();
    if let Some(l) = lines
        .iter_mut()
        .find(|l| l.starts_with(&key) && l[key.len()..].starts_with(['`', ' ']))
    {
        *l = note.to_string();
    } else {
        let at = lines
            .iter()
            .position(|l| l.starts_with("## "))
            .unwrap_or(lines.len());
        lines.insert(at, String::new());
        lines.insert(at, note.to_string());
    }
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// The Hot Restart sections: the key-value workload of Hot Restart
/// Persistence against the raw disk and Redis, then the rdb's restart and
/// checkpoint pause.
fn hot_restart_sections(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let kv = KvArgs {
        entries: if a.quick { 100_000 } else { 2_000_000 },
        value_bytes: 1024,
        updates: None,
        always_updates: None,
        remove_pct: 10,
        batch: 1000,
        parallelism: vec![1, 2],
        partitions: None,
        chunk_mb: 64,
        no_redis: a.no_redis,
        seed: 42,
        runs: if a.quick { 1 } else { 3 },
        full: false,
        json: None,
    };
    eprintln!("[hot restart] key-value workload");
    let kr = kv::run(work, &kv_opts(&kv))?;
    // The restarts below are timed from their spawn, and a spawn forks this
    // process: return the key-value workload's freed gigabytes first.
    child::release_freed_memory();
    let rows = if a.quick { 300_000 } else { 10_000_000 };
    let ra = RestartArgs {
        rows,
        steps: 3,
        tail_rows: None,
        live_rate: 48_000,
        repeats: if a.quick { 1 } else { 3 },
        symbols: 2000,
        parallelism: 2,
        segment_bytes_max: tickdb_journal::SEGMENT_BYTES_MAX_DEFAULT,
        batch_rows: restart::SEED_RATE_BATCH_ROWS,
        seed: 42,
        json: None,
    };
    eprintln!("[hot restart] rdb restart and checkpoints");
    let rr = restart::run(bin, work, &restart_opts(&ra))?;
    Ok(format!(
        "\n## Hot Restart: key-value workload (Hot Restart Persistence)\n\n{}\n## Hot Restart: rdb restart and checkpoints\n\n{}",
        kr.markdown(),
        rr.markdown()
    ))
}

/// The report's market-data stack (the Optane kdb+ study's Test 1 and
/// Test 2) and bulk insert (Zero-Impact Crash Recovery for kdb+) sections,
/// as markdown.
fn stack_and_insert_sections(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let args = StackArgs {
        rate: Some(8000),
        seconds: Some(20.0),
        prestress: Some(1_000_000),
        symbols: 2000,
        timers: Some(STACK_TIMERS_DEFAULT.to_vec()),
        dram_rdbs: 2,
        fsmem_rdbs: None,
        test2_timers: stack::Timers {
            monitor_ms: 50,
            tp_ms: 1000,
        },
        tests: vec![1, 2],
        publish_ms: 100,
        fsync: "never".into(),
        seed: 42,
        full: false,
        scale: false,
        zero_latency: None,
        runs: None,
        json: None,
    };
    let mut so = stack_opts(&args);
    // Zero latency at the study's rate, one stack at a time: its own runs.
    let mut zl = stack_opts(&StackArgs {
        rate: None,
        seconds: None,
        prestress: None,
        timers: None,
        zero_latency: Some(stack::ZERO_LATENCY_RUNS as u64),
        ..args.clone()
    });
    // The study's scale on one stack: its own run, at its own sizes.
    let mut scale = stack_opts(&StackArgs {
        rate: None,
        seconds: None,
        prestress: None,
        timers: None,
        scale: true,
        ..args
    });
    if a.quick {
        so.rate = 3000;
        so.seconds = 4.0;
        so.runs = 1;
        so.prestress = 50_000;
        so.symbols = 1000;
        scale.rate = 10_000;
        scale.seconds = 5.0;
        scale.prestress = 300_000;
        scale.symbols = 1000;
        scale.runs = 1;
        zl.rate = 10_000;
        zl.seconds = 4.0;
        zl.prestress = 50_000;
        zl.symbols = 1000;
        zl.zero_latency = 1;
    }
    eprintln!("[stack] market-data stack");
    let mut st = stack::run(bin, work, &so)?;
    eprintln!(
        "[stack] the study's scale on one stack: {} rows preloaded, {} updates/s for {} s",
        scale.prestress, scale.rate, scale.seconds
    );
    st.scale = stack::run(bin, work, &scale)?.scale;
    eprintln!(
        "[stack] zero latency, one stack at a time: {} runs each of DRAM and fsmem, {} updates/s for {} s",
        zl.zero_latency, zl.rate, zl.seconds
    );
    st.zero_latency = stack::run(bin, work, &zl)?.zero_latency;
    Ok(format!(
        "\n## Market-data stack: DRAM against fsmem rdbs\n\n{}{}",
        st.markdown(),
        insert_section(bin, work, a)?
    ))
}

/// The bulk insert (Zero-Impact Crash Recovery for kdb+) section: tickdb
/// under each fsync policy against QuestDB's two forms and dd.
fn insert_section(bin: &Path, work: &Path, a: &ReportArgs) -> Result<String> {
    let io = insert::InsertBenchOptions {
        rows: if a.quick { 200_000 } else { 2_000_000 },
        runs: if a.quick { 1 } else { 3 },
        fsync: vec!["never".into(), "always".into()],
        questdb: !a.no_questdb,
        seed: 42,
    };
    eprintln!("[insert] bulk insert");
    let ins = insert::run(bin, work, &io)?;
    Ok(format!(
        "\n## Bulk insert (Zero-Impact Crash Recovery for kdb+)\n\n{}",
        ins.markdown()
    ))
}

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn report_only_replaces_one_section_in_place() {
        let doc = "# Benchmarks\n\nGenerated by x.\n\n## Machine\n\n- CPU: A (2 cores available)\n\n## kdb+ IPC\n\nold ipc\n\n### sub\n\nmore old\n\n## SQL\n\nsql stays\n";
        let new = "\n## kdb+ IPC\n\nnew ipc\n";
        let out = super::replace_sections(doc, new);
        assert_eq!(
            out,
            "# Benchmarks\n\nGenerated by x.\n\n## Machine\n\n- CPU: A (2 cores available)\n\n## kdb+ IPC\n\nnew ipc\n\n## SQL\n\nsql stays\n"
        );
        // Absent: appended; the last section keeps one trailing newline.
        let out = super::replace_sections(&out, "\n## Socket sharding\n\nshards\n");
        assert!(
            out.ends_with("sql stays\n\n## Socket sharding\n\nshards\n"),
            "{out}"
        );
        let again = super::replace_sections(&out, "\n## Socket sharding\n\nshards 2\n");
        assert!(
            again.ends_with("sql stays\n\n## Socket sharding\n\nshards 2\n"),
            "{again}"
        );
        // Two sections at once, each in its place.
        let two = "\n## A\n\na2\n\n## B\n\nb2\n";
        let out = super::replace_sections("## A\n\na1\n\n## C\n\nc\n\n## B\n\nb1\n", two);
        assert_eq!(out, "## A\n\na2\n\n## C\n\nc\n\n## B\n\nb2\n");
        // The note: inserted before the first heading, then replaced.
        let n1 = super::set_only_note(doc, "sharding", "`tickdb bench report --only sharding` one");
        assert!(
            n1.contains(
                "Generated by x.\n\n`tickdb bench report --only sharding` one\n\n## Machine"
            ),
            "{n1}"
        );
        let n2 = super::set_only_note(
            &n1,
            "sharding",
            "`tickdb bench report --only sharding --quick` two",
        );
        assert!(
            !n2.contains(" one") && n2.contains("--quick` two\n\n## Machine"),
            "{n2}"
        );
        let n3 = super::set_only_note(&n2, "ipc", "`tickdb bench report --only ipc` three");
        assert!(n3.contains("--quick` two") && n3.contains("three"), "{n3}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_779), (2026, 11, 22));
    }
}
