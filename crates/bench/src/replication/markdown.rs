//! The replication report as markdown: a table per section, each with what
//! was measured and how, and the targets reported next to the figures.

use super::cluster::Setup;
use super::ReplicationReport;
use crate::disk::MB;
use crate::stats::{in_order, si, Samples};
use std::fmt::Write as _;

/// The targets (reported, not asserted).
const ASYNC_COST_PCT_MAX: f64 = 2.0;
const SEMI_SYNC_COST_PCT_MAX: f64 = 10.0;
const LAG_P99_US_MAX: u64 = 1_000;
/// The rate the lag target is stated at, rows/s.
const LAG_TARGET_RATE: u64 = 48_000;
const CATCHUP_RATIO_MIN: f64 = 0.8;
/// A feed that reached less than this share of its target rate is called
/// out next to its row.
const RATE_SHORTFALL: f64 = 0.95;
/// The log rate of Zero-Impact Crash Recovery for kdb+ for its Figure 4 (10k-row bulk inserts), MB/s.
const BRIEF_LOG_MB_S: f64 = 145.48;

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else {
        format!("{v:.0} µs")
    }
}

/// A count: exact below a thousand, then 1.2k, 3.45M.
fn count(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else {
        si(n as f64)
    }
}

fn secs(x: f64) -> String {
    format!("{x:.2} s")
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "missed"
    }
}

fn setup_name(s: Setup) -> &'static str {
    match s {
        Setup::Alone => "none (alone)",
        Setup::Async => "async",
        Setup::SemiSync => "semi-sync",
    }
}

pub fn render(r: &ReplicationReport) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "Zero-Impact Crash Recovery for kdb+ ships a kdb+ primary's log to a standby that replays it and \
         snapshots every 5 minutes; on failover the standby restores its last snapshot and replays the log \
         after it. Here the primary is `tickdb up` and the standby `tickdb up --standby-of PRIMARY`: it appends \
         the primary's journal to its own byte for byte, applies it to its own rdb and checkpoints its own \
         Hot Restart store. Every node is a child process on loopback, on free ports, with its own data \
         directory and replication port. **The standby runs on the same {} cores as the primary and the \
         client, and competes with them for CPU** (the standby of Zero-Impact Crash Recovery for kdb+ had a NUMA node of its own). \
         Measured on {}, {}, with a {} build{}.\n\n",
        r.cores,
        r.machine,
        r.date,
        r.build,
        if r.build == "debug" {
            " (figures NOT representative)"
        } else {
            ""
        }
    );
    if !r.insert.is_empty() {
        cost(&mut s, r);
    }
    if !r.lag.is_empty() {
        lag(&mut s, r);
    }
    if !r.ack.is_empty() {
        ack(&mut s, r);
    }
    if r.catchup.is_some() {
        catchup(&mut s, r);
    }
    if r.restore.is_some() {
        restore(&mut s, r);
    }
    checks(&mut s, r);
    s
}

fn cost(s: &mut String, r: &ReplicationReport) {
    let o = &r.options.cost;
    let _ = write!(
        s,
        "### Cost to the primary (Figures 2 and 3 of Zero-Impact Crash Recovery for kdb+)\n\n\
         Its bulk-insert client: one connection inserts {} `trade` rows in 10,000-row requests (ILP \
         over HTTP, each answered once journaled under the primary's `--fsync`; under semi-sync, once the \
         standby has it fsynced too), {} run(s) per row on fresh nodes, median (min–max). MB/s counts the ILP \
         bytes sent (10^6 bytes). CPU (% of one core) and RSS of the primary are sampled every second from \
         /proc (CPU avg: the mean of the runs' averages; CPU max and RSS max: the highest seen), and the \
         standby's CPU likewise. Async standby `--fsync {}`; semi-sync standby `--fsync always`.\n\n",
        count(o.rows),
        o.repeats,
        o.standby_fsync
    );
    s.push_str("| primary `--fsync` | standby | rows/s | MB/s | ÷ alone | primary CPU avg | primary CPU max | primary RSS max | standby CPU avg |\n|---|---|---|---|---|---|---|---|---|\n");
    let med = |c: &super::cost::CostCell, f: fn(&crate::insert::InsertResult) -> f64| {
        Samples(c.runs.iter().map(f).collect())
    };
    let mut targets = Vec::new();
    for c in &r.insert {
        let rows = med(c, |x| x.rows_s);
        let alone = r
            .insert
            .iter()
            .find(|a| a.setup == Setup::Alone && a.primary_fsync == c.primary_fsync)
            .and_then(|a| med(a, |x| x.rows_s).median());
        let ratio = match (rows.median(), alone) {
            (Some(v), Some(a)) if a > 0.0 => Some(v / a),
            _ => None,
        };
        let cpu_avgs: Vec<f64> = c.runs.iter().filter_map(|x| x.cpu_avg()).collect();
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let pct = |x: Option<f64>| x.map(|v| format!("{v:.0}%")).unwrap_or("—".into());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.primary_fsync,
            match (&c.setup, &c.standby_fsync) {
                (Setup::Alone, _) => setup_name(c.setup).to_string(),
                (_, Some(f)) => format!("{} (`--fsync {f}`)", setup_name(c.setup)),
                _ => setup_name(c.setup).to_string(),
            },
            rows.describe(si),
            med(c, |x| x.mb_s).describe(|v| format!("{v:.1}")),
            ratio.map(|v| format!("{v:.3}")).unwrap_or("—".into()),
            pct(mean(&cpu_avgs)),
            pct(c.runs.iter().filter_map(|x| x.cpu_max()).reduce(f64::max)),
            c.runs
                .iter()
                .filter_map(|x| x.rss_max())
                .max()
                .map(|b| crate::stack::bytes(b as f64))
                .unwrap_or("—".into()),
            pct(mean(&c.standby_cpu_avg)),
        );
        if let (Some(v), Setup::Async | Setup::SemiSync) = (ratio, c.setup) {
            let cost_pct = (1.0 - v) * 100.0;
            let max = if c.setup == Setup::Async {
                ASYNC_COST_PCT_MAX
            } else {
                SEMI_SYNC_COST_PCT_MAX
            };
            targets.push(format!(
                "- A{} {} standby costs the primary at most {max:.0}% of its throughput: {cost_pct:.1}% under `--fsync {}` ({}).",
                if c.setup == Setup::Async { "n" } else { "" },
                c.setup.label(),
                c.primary_fsync,
                met(cost_pct <= max)
            ));
        }
    }
    let _ = write!(
        s,
        "\nTargets (reported, not asserted; a negative cost is run-to-run noise):\n\n{}\n\n",
        targets.join("\n")
    );
}

/// How many rounds `runs` (0-based round numbers) hold.
fn rounds(runs: impl Iterator<Item = usize>) -> usize {
    runs.map(|r| r + 1).max().unwrap_or(0)
}

fn lag(s: &mut String, r: &ReplicationReport) {
    let o = &r.options.lag;
    let _ = write!(
        s,
        "### Replication lag\n\n\
         `tickdb feed` sends trades and quotes (1:10) over ILP TCP to the primary at the target rate for {} s \
         (it writes what is due every millisecond: at 48,000 rows/s, 48 rows a write); primary and standby run \
         `--fsync always`. The standby measures every record from the primary journaling it (the record's journal \
         time) to its own durable copy (appended and fsynced), and reports p50, p99 and max over the records it \
         received (`replication.primary.lag_us` in its /status); each cell starts a fresh pair. Both clocks are \
         this machine's. {} round(s), every cell in turn in each: median (min–max) over the rounds, `*` marking \
         a spread over 1.3×; each percentile is over one cell's records, and records and refused writes are \
         summed over the rounds.\n\n",
        o.seconds,
        rounds(r.lag.iter().map(|c| c.run))
    );
    s.push_str("| shipping | target rows/s | achieved rows/s | records | p50 | p99 | max | writes refused |\n|---|---|---|---|---|---|---|---|\n");
    let mut notes = Vec::new();
    let mut at_target = Vec::new();
    for (setup, rate) in in_order(&r.lag, |c| (c.setup, c.target_rows_s)) {
        let cells: Vec<_> = r
            .lag
            .iter()
            .filter(|c| c.setup == setup && c.target_rows_s == rate)
            .collect();
        let f =
            |g: fn(&super::lag::LagCell) -> f64| cells.iter().map(|c| g(c)).collect::<Samples>();
        let achieved = f(|c| c.achieved_rows_s);
        let p99 = f(|c| c.p99_us as f64);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            setup.label(),
            si(rate as f64),
            achieved.describe(si),
            cells.iter().map(|c| c.records).sum::<u64>(),
            f(|c| c.p50_us as f64).describe(us),
            p99.describe(us),
            f(|c| c.max_us as f64).describe(us),
            cells.iter().map(|c| c.refused).sum::<u64>()
        );
        let got = achieved.median().unwrap_or(0.0);
        if got < RATE_SHORTFALL * rate as f64 {
            notes.push(format!(
                "{} at {} rows/s: the feed reached {} rows/s here (median; the feed, both nodes and the client share the cores).",
                setup.label(),
                si(rate as f64),
                si(got)
            ));
        }
        if rate == LAG_TARGET_RATE {
            let m = p99.median().unwrap_or(f64::MAX);
            at_target.push(format!(
                "{} {} ({})",
                setup.label(),
                us(m),
                met(m < LAG_P99_US_MAX as f64)
            ));
        }
    }
    if !notes.is_empty() {
        let _ = write!(s, "\n{}\n", notes.join(" "));
    }
    let _ = write!(
        s,
        "\nTarget (reported, not asserted): p99 under {} at {} rows/s, the median over the rounds: {}.\n\n",
        us(LAG_P99_US_MAX as f64),
        si(LAG_TARGET_RATE as f64),
        if at_target.is_empty() {
            "not measured at that rate".to_string()
        } else {
            at_target.join(", ")
        }
    );
}

fn ack(s: &mut String, r: &ReplicationReport) {
    let o = &r.options.ack;
    let _ = write!(
        s,
        "### Acknowledged-write latency\n\n\
         {} updates/s of {} rows over ILP/HTTP from 4 connections for {} s, each timed by the client from \
         sending the request to its 204 (the writer of the robustness benchmark). The primary runs \
         `--fsync always` in every row, standbys `--fsync always`: alone, a 204 means fsynced on the primary; \
         under semi-sync, fsynced on the primary and on the standby. Every acknowledged row was checked on the \
         primary afterwards. {} round(s), every setup in turn in each, each a fresh primary: median (min–max) \
         over the rounds, `*` marking a spread over 1.3×; each percentile is over one setup's acknowledgements, \
         the counts are summed over the rounds, and \"p99 ÷ alone\" is the median of each round's ratio.\n\n",
        o.updates_per_s,
        o.update_rows,
        o.seconds,
        rounds(r.ack.iter().map(|a| a.run))
    );
    s.push_str("| standby | updates acked | updates/s | errors | ack p50 | ack p99 | ack max | p99 ÷ alone | rows lost | rows duplicated |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for setup in in_order(&r.ack, |a| a.setup) {
        let cells: Vec<_> = r.ack.iter().filter(|a| a.setup == setup).collect();
        let f =
            |g: fn(&super::ack::AckCell) -> f64| cells.iter().map(|c| g(c)).collect::<Samples>();
        let ratios = Samples(
            cells
                .iter()
                .filter_map(|a| {
                    let alone = r
                        .ack
                        .iter()
                        .find(|x| x.setup == Setup::Alone && x.run == a.run)?;
                    (alone.phase.p99_us > 0.0).then(|| a.phase.p99_us / alone.phase.p99_us)
                })
                .collect(),
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            setup_name(setup),
            cells.iter().map(|a| a.phase.updates_acked).sum::<u64>(),
            f(|a| a.phase.achieved_updates_per_s).describe(|x| format!("{x:.0}")),
            cells.iter().map(|a| a.phase.write_errors).sum::<u64>(),
            f(|a| a.phase.p50_us).describe(us),
            f(|a| a.phase.p99_us).describe(us),
            f(|a| a.phase.max_us).describe(us),
            if ratios.0.is_empty() {
                "—".to_string()
            } else if setup == Setup::Alone {
                // Each run's primary alone against itself.
                "1.00×".to_string()
            } else {
                ratios.describe(|x| format!("{x:.2}×"))
            },
            cells.iter().map(|a| a.lost_rows).sum::<u64>(),
            cells.iter().map(|a| a.duplicated_rows).sum::<u64>()
        );
    }
    s.push('\n');
}

fn catchup(s: &mut String, r: &ReplicationReport) {
    let (Some(c), o) = (&r.catchup, &r.options.catchup) else {
        return;
    };
    let mb = c.journal_bytes as f64 / MB;
    let _ = write!(
        s,
        "### Catch-up of a new standby\n\n\
         A primary (`--fsync never`) loaded with the bulk insert to {mb:.0} MiB of journal ({} segment files, \
         {} records, {} rows; {:.2} GB asked for); then a new standby (`--fsync {}`) is started behind all of \
         it, timed from its start until its journal holds the primary's last record (polling its /status), \
         and until its rdb has applied it too. The primary's shipper reads its segment files from the disk. \
         Peer: a raw sequential read of the same files in 1 MiB blocks by one thread. Page cache {} before \
         each. MB = MiB. {} round(s) of the raw read then a new standby, behind the same primary \
         (`--catchup-runs`): median (min–max) over the rounds, `*` marking a spread over 1.3×; \
         \"÷ raw read\" is the median of each round's ratio to that round's raw read.\n\n",
        c.segments,
        c.records,
        count(c.rows),
        o.gb,
        o.standby_fsync,
        c.cold.unwrap_or("NOT emptied (no permission; warm reads)"),
        c.rounds.len()
    );
    s.push_str("| | MB | seconds | MB/s | ÷ raw read |\n|---|---|---|---|---|\n");
    let mb_s = |x: f64| format!("{x:.0}");
    let ratio = |x: f64| format!("{x:.2}×");
    let raw = c.each(|x| x.raw_read_mb_s);
    let _ = writeln!(
        s,
        "| raw cold sequential read | {mb:.0} | {} | {} | |",
        c.rounds
            .iter()
            .map(|x| mb / x.raw_read_mb_s.max(1e-9))
            .collect::<Samples>()
            .describe(secs),
        raw.describe(mb_s)
    );
    let ratios = c.each(|x| x.ratio_to_raw);
    let _ = writeln!(
        s,
        "| standby catch-up: journal | {mb:.0} | {} | {} | **{}** |",
        c.each(|x| x.journal_secs).describe(secs),
        c.each(|x| x.journal_mb_s).describe(mb_s),
        ratios.describe(ratio)
    );
    let applied = |x: &super::catchup::CatchupRound| mb / x.applied_secs.max(1e-9);
    let _ = writeln!(
        s,
        "| standby catch-up: applied by its rdb | {mb:.0} | {} | {} | {} |",
        c.each(|x| x.applied_secs).describe(secs),
        c.rounds
            .iter()
            .map(applied)
            .collect::<Samples>()
            .describe(mb_s),
        c.rounds
            .iter()
            .map(|x| applied(x) / x.raw_read_mb_s.max(1e-9))
            .collect::<Samples>()
            .describe(ratio)
    );
    let m = ratios.median().unwrap_or(0.0);
    let _ = write!(
        s,
        "\nTarget (reported, not asserted): catch-up at {:.0}% or more of a raw cold read, the median over the rounds: {:.0}% ({}).\n\n",
        CATCHUP_RATIO_MIN * 100.0,
        m * 100.0,
        met(m >= CATCHUP_RATIO_MIN)
    );
}

/// One figure of a restart, for a row of the figure-like table.
type Figure = fn(&super::restore::RestartTiming) -> f64;

fn restore(s: &mut String, r: &ReplicationReport) {
    let (Some(res), o) = (&r.restore, &r.options.restore) else {
        return;
    };
    let runs = res.runs();
    let _ = write!(
        s,
        "### Restore after a crash (Figure 4 of Zero-Impact Crash Recovery for kdb+)\n\n\
         That figure gives the seconds to replay the log from 0 to 5 minutes after the last snapshot \
         (its log: 10k-row bulk inserts at {BRIEF_LOG_MB_S} MB/s). Here a standby (`--hot-restart DIR`, \
         checkpoints only on command, `--fsync {}`) follows a primary preloaded with {} rows; for each point the \
         standby checkpoints (`POST /checkpoint`), the primary journals the log of a {} rows/s feed ({}-row \
         updates, as a feed ticking every millisecond journals them, loaded as fast as the primary takes them), \
         the standby follows it, and is killed with SIGKILL. **Scaled: each minute here is {:.1} s of log \
         (`--minutes-scale {}`; 1 gives the figure's sizes).** The standby is then restarted twice, page cache \
         {} before each: from its journal alone (a full replay, no `--hot-restart`), then from its Hot Restart \
         store plus the log after the checkpoint. Timed from the start of the process: ready = `/health` \
         answers 200; caught up = its journal and rdb hold everything the primary has (each restart came back \
         with exactly the primary's rows). {runs} run(s) of the two restarts per point, the standby killed \
         with SIGKILL again before each (`--restore-runs`): median (min–max) over the runs, `*` marking a \
         spread over 1.3×; the speed-up is the median of each run's.\n\n",
        o.standby_fsync,
        count(o.base_rows),
        si(o.rate as f64),
        o.batch_rows,
        60.0 * o.minutes_scale,
        o.minutes_scale,
        res.cold.unwrap_or("NOT emptied (no permission; warm reads)")
    );
    // The figure's layout: minutes after the last snapshot across; medians.
    s.push_str("| minutes of log after the last snapshot |");
    for p in &res.points {
        let _ = write!(s, " {} |", p.minutes);
    }
    s.push_str("\n|---|");
    for _ in &res.points {
        s.push_str("---|");
    }
    let ready: Figure = |t| t.ready_s;
    let caught_up: Figure = |t| t.caught_up_s;
    let rows: [(&str, bool, Figure); 4] = [
        ("seconds to ready, Hot Restart", true, ready),
        ("seconds to caught up, Hot Restart", true, caught_up),
        ("seconds to ready, full replay", false, ready),
        ("seconds to caught up, full replay", false, caught_up),
    ];
    for (name, hot, f) in rows {
        let _ = write!(s, "\n| {name} |");
        for p in &res.points {
            let x = if hot { p.hot(f) } else { p.full(f) };
            let _ = write!(s, " {:.2} |", x.median().unwrap_or(f64::NAN));
        }
    }
    s.push_str("\n\nIn detail:\n\n");
    s.push_str("| minutes (s of log here) | log after the snapshot | Hot Restart: ready | of which store reload / table rebuild | Hot Restart: caught up | full replay of | full replay: ready | full replay: caught up | speed-up to ready |\n|---|---|---|---|---|---|---|---|---|\n");
    for p in &res.points {
        let reload: Vec<(f64, f64)> = p
            .hot_restart
            .iter()
            .filter_map(|h| Some((h.reload_s?, h.rebuild_s?)))
            .collect();
        let speedups = p.speedups();
        let _ = writeln!(
            s,
            "| {} ({:.1} s) | {} records, {} rows | {} | {} | {} | {} records, {:.0} MB | {} | {} | **{}** |",
            p.minutes,
            p.log_seconds,
            p.tail_records,
            count(p.tail_rows),
            p.hot(ready).describe(secs),
            if reload.is_empty() {
                "—".into()
            } else {
                let a: Samples = reload.iter().map(|x| x.0).collect();
                let b: Samples = reload.iter().map(|x| x.1).collect();
                format!("{} / {}", a.describe(secs), b.describe(secs))
            },
            p.hot(caught_up).describe(secs),
            p.journal_records,
            p.journal_bytes as f64 / MB,
            p.full(ready).describe(secs),
            p.full(caught_up).describe(secs),
            if speedups.0.is_empty() {
                "—".into()
            } else {
                speedups.describe(|x| format!("{x:.1}×"))
            }
        );
    }
    s.push('\n');
}

fn checks(s: &mut String, r: &ReplicationReport) {
    let failures = r.failures();
    let _ = write!(
        s,
        "### Correctness\n\n\
         After every scenario with a standby, once it had caught up: its journal against the primary's with \
         `tickdb journal compare` (exit 0: the same records and segment files over the range both hold), and the \
         rows of every table on both. {} checks: {}.\n",
        r.checks.len(),
        if failures.is_empty() {
            "all passed".to_string()
        } else {
            format!("**{} FAILED**", failures.len())
        }
    );
    for f in failures {
        let _ = writeln!(s, "- {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    fn report(checks: Vec<cluster::Check>) -> ReplicationReport {
        let options = ReplicationOptions {
            sections: vec![],
            cost: CostOptions {
                rows: 1,
                fsync: vec![],
                repeats: 1,
                standby_fsync: "always".into(),
                seed: 1,
            },
            lag: LagOptions {
                rates: vec![],
                seconds: 1.0,
                setups: vec![],
                seed: 1,
                runs: 1,
            },
            ack: AckOptions {
                updates_per_s: 1,
                update_rows: 1,
                seconds: 1.0,
                setups: vec![],
                runs: 1,
            },
            catchup: CatchupOptions {
                gb: 1.0,
                standby_fsync: "always".into(),
                seed: 1,
                runs: 1,
            },
            restore: RestoreOptions {
                minutes: vec![],
                minutes_scale: 1.0,
                rate: 1,
                batch_rows: 1,
                base_rows: 0,
                standby_fsync: "always".into(),
                symbols: 1,
                seed: 1,
                runs: 1,
            },
        };
        ReplicationReport {
            machine: "a machine".into(),
            cores: 2,
            date: "2026-01-01".into(),
            build: "release",
            options,
            insert: vec![],
            lag: vec![],
            ack: vec![],
            catchup: None,
            restore: None,
            correct: checks.iter().all(|c| c.ok),
            checks,
        }
    }

    fn check(ok: bool) -> cluster::Check {
        cluster::Check {
            scenario: "lag, async".into(),
            seq: 7,
            primary_rows: 70,
            standby_rows: if ok { 70 } else { 60 },
            journal_equal: ok,
            journal_compare: if ok {
                "identical over seq 1..=7".into()
            } else {
                "first difference at seq 5".into()
            },
            ok,
        }
    }

    #[test]
    fn names_its_source_by_title_and_counts_the_checks() {
        let md = report(vec![check(true), check(true)]).markdown();
        assert!(md.contains("Zero-Impact Crash Recovery for kdb+"), "{md}");
        assert!(md.contains("competes with them for CPU"), "{md}");
        assert!(md.contains("2 checks: all passed"), "{md}");
        // The report names its source by title, never by file or issue.
        assert!(!md.to_lowercase().contains("seed 0"), "{md}");
        assert!(!md.to_lowercase().contains("issue #"), "{md}");
        assert!(!md.to_lowercase().contains("the brief"), "{md}");
    }

    #[test]
    fn catch_up_and_restore_give_medians_over_their_runs() {
        use super::super::catchup::{CatchupResult, CatchupRound};
        use super::super::restore::{RestartTiming, RestorePoint, RestoreResult};
        let mut r = report(vec![check(true)]);
        let round = |raw: f64, secs: f64| CatchupRound {
            raw_read_mb_s: raw,
            journal_secs: secs,
            journal_mb_s: 100.0 / secs,
            applied_secs: secs + 0.5,
            ratio_to_raw: 100.0 / secs / raw,
        };
        // Ratios 0.5, 0.25, 1.0: the median round is the first.
        r.catchup = Some(CatchupResult {
            journal_bytes: 100 << 20,
            segments: 2,
            records: 10,
            rows: 1000,
            rounds: vec![round(100.0, 2.0), round(100.0, 4.0), round(50.0, 2.0)],
            cold: Some("dropped"),
        });
        let t = |ready_s: f64| RestartTiming {
            ready_s,
            caught_up_s: ready_s + 0.01,
            reload_s: Some(0.02),
            rebuild_s: Some(0.01),
            rows: 5,
        };
        r.restore = Some(RestoreResult {
            points: vec![RestorePoint {
                minutes: 5.0,
                log_seconds: 75.0,
                tail_records: 3,
                tail_rows: 30,
                journal_records: 9,
                journal_bytes: 1 << 20,
                // Speed-ups 4×, 2×, 3×.
                full_replay: vec![t(0.8), t(0.6), t(0.9)],
                hot_restart: vec![t(0.2), t(0.3), t(0.3)],
            }],
            cold: Some("dropped"),
        });
        let md = r.markdown();
        assert!(
            md.contains("3 round(s) of the raw read then a new standby"),
            "{md}"
        );
        assert!(
            md.contains("| standby catch-up: journal | 100 | 2.00 s (2.00 s–4.00 s) * | 50 (25–50) * | **0.50× (0.25×–1.00×) *** |"),
            "{md}"
        );
        assert!(
            md.contains("the median over the rounds: 50% (missed)"),
            "{md}"
        );
        assert!(
            md.contains("3 run(s) of the two restarts per point"),
            "{md}"
        );
        assert!(
            md.contains("| seconds to ready, Hot Restart | 0.30 |"),
            "{md}"
        );
        assert!(
            md.contains("| seconds to ready, full replay | 0.80 |"),
            "{md}"
        );
        assert!(md.contains("**3.0× (2.0×–4.0×) ***"), "{md}");
    }

    #[test]
    fn a_mismatch_is_a_failure_named_in_the_report() {
        let r = report(vec![check(true), check(false)]);
        let f = r.failures();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("first difference at seq 5") && f[0].contains("60 on the standby"));
        let md = r.markdown();
        assert!(
            md.contains("**1 FAILED**") && md.contains("first difference at seq 5"),
            "{md}"
        );
    }
}
