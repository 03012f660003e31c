//! `tickdb bench failover`: how fast a failover group recovers and what it
//! loses, against the anchors Zero-Impact Crash Recovery for kdb+, Patroni
//! and Redis Sentinel give. Every process is real and local: two `tickdb
//! up` nodes per group, each on a loopback address of its own with the same
//! ports, a live 48,000 updates/s feed following both (`tickdb feed --host
//! A,B`), a remote rdb following both (`tickdb rdb --tp A,B`), etcd (one
//! member, for automatic failover) and Redis. Sections:
//!
//! - `manual`: RTO after kill -9 of the primary, promoted by hand at once
//! - `etcd`: the same, elected through etcd (and the async rows lost)
//! - `switchover`: a planned switchover's downtime for a writing client
//! - `loss`: rows lost at an etcd failover under semi-sync (must be none)
//! - `soak`: false failovers with both cores saturated and the primary
//!   paused 150 ms every ~5 s (must be none)
//! - `restore`: the headline of Zero-Impact Crash Recovery for kdb+, a
//!   standby's restore from its last checkpoint plus the log after it
//!   (the replication benchmark's restore, one point)
//! - `sentinel`: Redis Sentinel's failover, default and best settings
//!
//! Every round ends with a check (`group::Group::verify`): the new
//! primary's journal equals the rejoined standby's (`tickdb journal
//! compare`, exit 0) and the primary, the standby and the rdb hold the same
//! rows; a mismatch, a semi-sync loss, a lost switchover write or a false
//! failover fails the benchmark once the report is written.

mod etcd;
mod group;
mod loss;
mod markdown;
mod rto;
mod sentinel;
mod soak;
mod switchover;
mod writer;

pub use crate::replication::Progress;
pub use sentinel::SentinelForm;
pub use soak::SoakOptions;

use crate::error::Result;
use crate::replication::cluster::Cluster;
use crate::replication::restore::{self, RestoreOptions, RestoreResult};
use group::{Group, GroupSpec, STABLE_TIMEOUT};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;

/// The sections, by the names `--sections` takes.
pub const SECTIONS: [&str; 7] = [
    "manual",
    "etcd",
    "switchover",
    "loss",
    "soak",
    "restore",
    "sentinel",
];

/// The targets (reported; the zero ones also fail the benchmark).
pub const TARGET_AUTO_RTO_P99_S: f64 = 3.0;
pub const TARGET_MANUAL_MS: f64 = 200.0;
/// The anchors.
pub const PATRONI_RTO: &str = "15–30 s";
pub const BRIEF_RESTORE_S: f64 = 85.0;

#[derive(Debug, Clone, Serialize)]
pub struct FailoverOptions {
    pub sections: Vec<String>,
    pub quick: bool,
    /// Rounds of each kill -9 kind, of the switchover and of the semi-sync
    /// loss.
    pub rounds: usize,
    /// The feed's rate, rows/s.
    pub rate: u64,
    pub lease_ttl_s: u64,
    pub fence_margin_ms: u64,
    pub check_ms: u64,
    pub soak: SoakOptions,
    pub restore: RestoreOptions,
    pub redis: bool,
    pub sentinel_default: SentinelForm,
    pub sentinel_best: SentinelForm,
    pub seed: u64,
}

impl FailoverOptions {
    fn runs(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }

    fn spec(&self, tag: &str, etcd: Option<&str>, mode: &'static str) -> GroupSpec {
        GroupSpec {
            tag: tag.to_string(),
            etcd: etcd.map(str::to_string),
            mode,
            lease_ttl_s: self.lease_ttl_s,
            fence_margin_ms: self.fence_margin_ms,
            check_ms: self.check_ms,
        }
    }
}

/// The check a round ends with.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub scenario: String,
    /// The primary's name then.
    pub primary: String,
    pub seq: u64,
    pub primary_rows: u64,
    pub standby_rows: u64,
    /// The remote rdb's rows (groups with one).
    pub rdb_rows: Option<u64>,
    pub journal_equal: bool,
    pub journal_compare: String,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    pub machine: String,
    pub cores: usize,
    pub date: String,
    pub build: &'static str,
    pub options: FailoverOptions,
    pub etcd_version: Option<String>,
    pub redis_version: Option<String>,
    /// Sections not run, and why.
    pub skipped: Vec<String>,
    pub manual: Option<rto::RtoResult>,
    pub etcd: Option<rto::RtoResult>,
    pub switchover: Vec<switchover::SwitchoverRound>,
    pub semi_sync_rounds: Vec<loss::LossRound>,
    /// Rows lost per mode: async (the etcd rounds' writer) and semi-sync.
    pub loss: Vec<loss::LossResult>,
    pub soak: Option<soak::SoakResult>,
    pub restore: Option<RestoreResult>,
    pub sentinel: Vec<sentinel::SentinelResult>,
    pub checks: Vec<Check>,
    /// Every check passed, semi-sync and the switchover lost nothing,
    /// nothing was written twice, and no false failover happened.
    pub correct: bool,
}

impl FailoverReport {
    pub fn markdown(&self) -> String {
        markdown::render(self)
    }

    /// What failed, for the error that ends the benchmark.
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| {
                format!(
                    "{}: journals {}; rows {} on the primary, {} on the standby, {:?} on the rdb",
                    c.scenario, c.journal_compare, c.primary_rows, c.standby_rows, c.rdb_rows
                )
            })
            .collect();
        for x in self.manual.iter().chain(self.etcd.iter()) {
            for gap in &x.rdb_gaps {
                out.push(format!("{}: {gap}", x.how.label()));
            }
        }
        for l in &self.loss {
            if l.mode == "semi-sync" && l.lost > 0 {
                out.push(format!(
                    "semi-sync lost {} of {} acknowledged rows",
                    l.lost, l.acked
                ));
            }
            if l.duplicated > 0 || l.stale > 0 {
                out.push(format!(
                    "{}: {} rows written twice, {} acknowledged in an older epoch after a newer one",
                    l.mode, l.duplicated, l.stale
                ));
            }
        }
        let sw = |f: fn(&writer::Tally) -> u64| -> u64 {
            self.switchover.iter().map(|r| f(&r.writer)).sum()
        };
        let (sw_lost, sw_dup, sw_stale) = (sw(|t| t.lost), sw(|t| t.duplicated), sw(|t| t.stale));
        if sw_lost > 0 || sw_dup > 0 || sw_stale > 0 {
            out.push(format!(
                "switchover: {sw_lost} acknowledged rows lost, {sw_dup} written twice, {sw_stale} acknowledged in an older epoch after a newer one"
            ));
        }
        for (i, r) in self.switchover.iter().enumerate() {
            for why in &r.rdb_diverged {
                out.push(format!(
                    "switchover, round {}: the rdb held a record the new primary never had and stopped: {why}",
                    i + 1
                ));
            }
        }
        if let Some(s) = &self.soak {
            for why in &s.rdb_diverged {
                out.push(format!("soak: the rdb stopped: {why}"));
            }
            if s.false_failovers > 0 {
                out.push(format!(
                    "soak: {} false failover(s) ({} promotions, epoch {} to {})",
                    s.false_failovers, s.promotions, s.epoch_before, s.epoch_after
                ));
            }
        }
        out
    }
}

fn steps(o: &FailoverOptions, etcd: bool, redis: bool) -> u64 {
    let r = o.rounds as u64;
    let mut n = 0;
    for (s, k, needs_etcd) in [
        ("manual", r, false),
        ("switchover", r, false),
        ("etcd", r, true),
        ("soak", 1, true),
        ("loss", r, true),
        ("restore", restore::steps(&o.restore), false),
    ] {
        if o.runs(s) && (etcd || !needs_etcd) {
            n += k;
        }
    }
    if o.runs("sentinel") && redis {
        n += (o.sentinel_default.rounds + o.sentinel_best.rounds) as u64;
    }
    n
}

pub fn run(bin: &Path, work: &Path, o: &FailoverOptions) -> Result<FailoverReport> {
    let machine = crate::machine::Machine::probe(work);
    let c = Cluster::new(bin, work);
    let mut skipped = Vec::new();
    let needs_etcd = ["etcd", "loss", "soak"].iter().any(|s| o.runs(s));
    let etcd_missing = needs_etcd.then(etcd::unavailable).flatten();
    if let Some(why) = &etcd_missing {
        let msg = format!("etcd, loss and soak sections skipped: {why}");
        eprintln!("failover: {msg}");
        skipped.push(msg);
    }
    let redis_missing = if !o.runs("sentinel") {
        None
    } else if !o.redis {
        Some("--no-redis".to_string())
    } else {
        crate::redis::unavailable()
    };
    if let Some(why) = &redis_missing {
        let msg = format!("Redis Sentinel skipped: {why}");
        eprintln!("failover: {msg}");
        skipped.push(msg);
    }
    let have_etcd = etcd_missing.is_none();
    let have_redis = redis_missing.is_none();
    let mp = MultiProgress::new();
    let bar = mp.add(ProgressBar::new(steps(o, have_etcd, have_redis)));
    bar.set_style(
        ProgressStyle::with_template("failover {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let ui = Progress { mp, steps: bar };
    let mut checks = Vec::new();
    let mut r = FailoverReport {
        machine: machine.summary(),
        cores: machine.cores,
        date: crate::today_utc(),
        build: crate::build_profile(),
        options: o.clone(),
        etcd_version: (needs_etcd && have_etcd).then(etcd::version),
        redis_version: (o.runs("sentinel") && have_redis).then(crate::redis::version),
        skipped,
        manual: None,
        etcd: None,
        switchover: Vec::new(),
        semi_sync_rounds: Vec::new(),
        loss: Vec::new(),
        soak: None,
        restore: None,
        sentinel: Vec::new(),
        checks: Vec::new(),
        correct: false,
    };

    // Promotion by hand and switchovers: no etcd.
    if o.runs("manual") || o.runs("switchover") {
        ui.steps
            .set_message("manual group: starting a primary, its standby, the rdb and the feed");
        let mut g = Group::new(&c, o.spec("fo-manual", None, "async"))?;
        g.start(0, None)?;
        g.start(1, Some(0))?;
        start_load(&mut g, o)?;
        if o.runs("manual") {
            r.manual = Some(rto::run(
                &mut g,
                rto::How::Manual,
                o.rounds,
                &ui,
                &mut checks,
            )?);
        }
        if o.runs("switchover") {
            r.switchover = switchover::run(&mut g, o.rounds, &ui, &mut checks)?;
        }
        let feed = g.stop_feed()?;
        if let Some(m) = r.manual.as_mut() {
            m.feed = feed;
        }
        g.stop();
    }

    if have_etcd && needs_etcd {
        let e = etcd::Etcd::start(work)?;
        if o.runs("etcd") || o.runs("soak") {
            ui.steps
                .set_message("etcd group: electing a primary, its standby, the rdb and the feed");
            let mut g = Group::new(&c, o.spec("fo-etcd", Some(&e.url), "async"))?;
            g.start(0, None)?;
            g.start(1, None)?;
            start_load(&mut g, o)?;
            if o.runs("etcd") {
                let res = rto::run(&mut g, rto::How::Etcd, o.rounds, &ui, &mut checks)?;
                let per: Vec<_> = res.rounds.iter().filter_map(|x| x.writer).collect();
                r.loss.push(loss::LossResult::of("async", &per));
                r.etcd = Some(res);
            }
            if o.runs("soak") {
                let cores = crate::cores().max(2);
                let so = SoakOptions {
                    busy_loops: cores,
                    ..o.soak.clone()
                };
                r.soak = Some(soak::run(&mut g, &so, work, &ui, &mut checks)?);
            }
            let feed = g.stop_feed()?;
            if let Some(x) = r.etcd.as_mut() {
                x.feed = feed;
            }
            g.stop();
        }
        if o.runs("loss") {
            ui.steps
                .set_message("semi-sync group: electing a primary, its standby and the feed");
            let mut g = Group::new(&c, o.spec("fo-semi", Some(&e.url), "semi-sync"))?;
            g.start(0, None)?;
            g.start(1, None)?;
            g.wait_stable(STABLE_TIMEOUT)?;
            g.start_feed(o.rate, o.seed + 2)?;
            let rounds = loss::run(&mut g, o.rounds, &ui, &mut checks)?;
            let per: Vec<_> = rounds.iter().map(|x| x.writer).collect();
            r.loss.push(loss::LossResult::of("semi-sync", &per));
            r.semi_sync_rounds = rounds;
            g.stop_feed()?;
            g.stop();
        }
    }

    if o.runs("restore") {
        let mut rchecks = Vec::new();
        let res = restore::run(&c, &o.restore, &ui, &mut rchecks)?;
        checks.extend(rchecks.into_iter().map(|x| Check {
            scenario: x.scenario,
            primary: "restore primary".into(),
            seq: x.seq,
            primary_rows: x.primary_rows,
            standby_rows: x.standby_rows,
            rdb_rows: None,
            journal_equal: x.journal_equal,
            journal_compare: x.journal_compare,
            ok: x.ok,
        }));
        r.restore = Some(res);
    }

    if o.runs("sentinel") && have_redis {
        for form in [&o.sentinel_default, &o.sentinel_best] {
            if form.rounds > 0 {
                r.sentinel.push(sentinel::run(work, form, &ui)?);
            }
        }
    }
    ui.steps.finish_and_clear();
    r.checks = checks;
    r.correct = r.failures().is_empty();
    Ok(r)
}

/// The group's rdb and feed, once the nodes are stable.
fn start_load(g: &mut Group, o: &FailoverOptions) -> Result<()> {
    g.wait_stable(STABLE_TIMEOUT)?;
    g.start_rdb()?;
    g.start_feed(o.rate, o.seed)?;
    Ok(())
}

/// The restore section's options: the replication benchmark's restore at
/// one point, 5 minutes of log after the last checkpoint (the standby of
/// Zero-Impact Crash Recovery for kdb+ checkpoints every 5 minutes: the most it ever replays).
pub fn restore_options(
    quick: bool,
    minutes_scale: Option<f64>,
    runs: Option<u64>,
    seed: u64,
) -> RestoreOptions {
    RestoreOptions {
        minutes: vec![5.0],
        minutes_scale: minutes_scale.unwrap_or(if quick { 0.005 } else { 0.25 }),
        rate: crate::restart::SEED_RATE,
        batch_rows: crate::restart::SEED_RATE_BATCH_ROWS,
        base_rows: if quick { 20_000 } else { 1_000_000 },
        standby_fsync: "always".into(),
        symbols: 2000,
        seed,
        runs: runs.unwrap_or(if quick { 1 } else { 3 }).max(1) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use writer::Tally;

    fn options() -> FailoverOptions {
        FailoverOptions {
            sections: SECTIONS.iter().map(|s| s.to_string()).collect(),
            quick: false,
            rounds: 2,
            rate: 48_000,
            lease_ttl_s: 2,
            fence_margin_ms: 500,
            check_ms: 100,
            soak: SoakOptions {
                seconds: 600.0,
                pause_every_s: 5.0,
                pause_ms: 150,
                busy_loops: 2,
            },
            restore: restore_options(false, None, None, 1),
            redis: true,
            sentinel_default: SentinelForm {
                label: "default",
                down_after_ms: None,
                failover_timeout_ms: None,
                rounds: 1,
            },
            sentinel_best: SentinelForm {
                label: "best",
                down_after_ms: Some(1000),
                failover_timeout_ms: Some(3000),
                rounds: 2,
            },
            seed: 1,
        }
    }

    fn round(write_s: f64, rdb_s: Option<f64>) -> rto::RtoRound {
        rto::RtoRound {
            killed: "a",
            promoted: "b",
            epoch: 1,
            write_s,
            rdb_s,
            promote_call_ms: None,
            promote_took_ms: None,
            probes_refused: 0,
            rejoin_s: 0.5,
            writer: None,
        }
    }

    fn report() -> FailoverReport {
        let tally = |acked, lost| Tally {
            acked,
            lost,
            duplicated: 0,
            stale: 0,
        };
        let sentinel = |form: &SentinelForm, s: f64| sentinel::SentinelResult {
            form: form.clone(),
            rounds: vec![sentinel::SentinelRound {
                set_s: s,
                named_s: s + 0.5,
            }],
        };
        let o = options();
        FailoverReport {
            machine: "a machine".into(),
            cores: 2,
            date: "2026-01-01".into(),
            build: "release",
            etcd_version: Some("3.4.23".into()),
            redis_version: Some("7.0.15".into()),
            skipped: vec![],
            manual: Some(rto::RtoResult {
                how: rto::How::Manual,
                rounds: vec![round(0.004, Some(0.005)), round(0.006, Some(0.007))],
                rdb_diverged: vec![],
                rdb_gaps: vec![],
                feed: None,
            }),
            etcd: Some(rto::RtoResult {
                how: rto::How::Etcd,
                rounds: vec![round(2.0, Some(2.001)), round(2.2, None)],
                rdb_diverged: vec!["round 2: diverged".into()],
                rdb_gaps: vec![],
                feed: None,
            }),
            switchover: vec![],
            semi_sync_rounds: vec![],
            loss: vec![
                loss::LossResult::of("async", &[tally(100, 2), tally(100, 0)]),
                loss::LossResult::of("semi-sync", &[tally(100, 0), tally(100, 0)]),
            ],
            soak: None,
            restore: None,
            sentinel: vec![
                sentinel(&o.sentinel_default, 31.0),
                sentinel(&o.sentinel_best, 2.5),
            ],
            checks: vec![],
            correct: true,
            options: o,
        }
    }

    #[test]
    fn reports_each_section_the_targets_and_the_ratio() {
        let r = report();
        assert!(r.failures().is_empty(), "{:?}", r.failures());
        let md = r.markdown();
        for want in [
            "| manual promotion | 2 | 4.0 ms | 6.0 ms | 6.0 ms |",
            "| etcd automatic failover | 2 | 2.00 s | 2.20 s | 2.20 s | 2.00 s |",
            "| async | 2 | 200 | **2** | 2 | 0 |",
            "| semi-sync | 2 | 200 | **0** | 0 | 0 |",
            "zero detection time",
            "RTO p99 under 3 s: 2.20 s (met)",
            "Sentinel = 0.80×",
            "measured here: p50 31.00 s",
            "Patroni",
            "Zero-Impact Crash Recovery for kdb+",
            "in 1 round(s) the rdb had applied records the new primary never had",
        ] {
            assert!(md.contains(want), "{want}\n{md}");
        }
        // The report names its source by title, never by file or issue.
        assert!(!md.to_lowercase().contains("seed 0"), "{md}");
        assert!(!md.to_lowercase().contains("issue #"), "{md}");
        assert!(!md.to_lowercase().contains("the brief"), "{md}");
    }

    #[test]
    fn a_semi_sync_loss_a_false_failover_and_an_rdb_gap_fail_it() {
        let mut r = report();
        r.loss[1] = loss::LossResult::of(
            "semi-sync",
            &[Tally {
                acked: 10,
                lost: 1,
                duplicated: 0,
                stale: 0,
            }],
        );
        r.soak = Some(soak::SoakResult {
            seconds: 600.0,
            pauses: 120,
            longest_pause_ms: 151.0,
            busy_loops: 2,
            primary: "a",
            epoch_before: 3,
            epoch_after: 4,
            promotions: 1,
            fences: 0,
            false_failovers: 1,
            rdb_diverged: vec![],
        });
        if let Some(e) = r.etcd.as_mut() {
            e.rdb_gaps.push("round 2: a gap".into());
        }
        let f = r.failures();
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f.iter().any(|x| x.contains("semi-sync lost 1 of 10")));
        assert!(f.iter().any(|x| x.contains("1 false failover")));
        assert!(f.iter().any(|x| x.contains("round 2: a gap")));
        assert!(r.markdown().contains("**3 FAILED**"));
    }
}
