//! The failover report as markdown: the settings, a table per section with
//! how it was measured, the targets and the anchors, and the checks.

use super::rto::RtoResult;
use super::{
    FailoverReport, BRIEF_RESTORE_S, PATRONI_RTO, TARGET_AUTO_RTO_P99_S, TARGET_MANUAL_MS,
};
use crate::stats::Samples;
use std::fmt::Write as _;

/// A duration given in seconds: ms below one second.
fn dur(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

fn opt(x: Option<f64>) -> String {
    x.map(dur).unwrap_or_else(|| "—".into())
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "missed"
    }
}

/// p50, p99 and max of seconds, as three cells.
fn cells(s: &Samples) -> String {
    format!(
        "{} | {} | {}",
        opt(s.percentile(50.0)),
        opt(s.percentile(99.0)),
        opt(s.max())
    )
}

fn write_samples(r: &RtoResult) -> Samples {
    Samples(r.rounds.iter().map(|x| x.write_s).collect())
}

fn rdb_samples(r: &RtoResult) -> Samples {
    Samples(r.rounds.iter().filter_map(|x| x.rdb_s).collect())
}

pub fn render(r: &FailoverReport) -> String {
    let o = &r.options;
    let mut s = String::new();
    let _ = write!(
        s,
        "How fast a primary and its standby recover from the primary's crash, and what a failover loses, \
         measured against the anchors that Zero-Impact Crash Recovery for kdb+, Patroni and Redis Sentinel \
         give. Every process is real and local: two `tickdb up` nodes per group, each bound to a loopback \
         address of its own with the same port numbers (so one client given both hosts follows the primary), \
         a live {} updates/s feed following both (`tickdb feed --host A,B`, ILP over TCP), a remote rdb \
         following both (`tickdb rdb --tp A,B`), etcd {} (one member, Raft heartbeat {} ms, election timeout \
         {} ms) and Redis {}. **They all share this machine's {} cores** and talk over loopback: no network \
         latency, no lost packets, one etcd member instead of a quorum on other machines. Measured on {}, {}, \
         with a {} build{}.\n\n",
        o.rate,
        r.etcd_version.as_deref().unwrap_or("(not run)"),
        super::etcd::HEARTBEAT_MS,
        super::etcd::ELECTION_MS,
        r.redis_version.as_deref().unwrap_or("(not run)"),
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
    let _ = write!(
        s,
        "Settings: every node `--fsync always`; `--replication async` unless said otherwise; with etcd, \
         `--lease-ttl-s {}` (the leader key's lease), `--fence-margin-ms {}` (a primary stops acknowledging \
         this long before its lease could expire unrenewed), `--failover-check-ms {}` (how often every node \
         looks at the leader key; the lease is renewed every TTL/4). {} round(s) of each kind{}. Percentiles \
         are by nearest rank: of 20 rounds, p50 is the 10th fastest and p99 the slowest.\n\n",
        o.lease_ttl_s,
        o.fence_margin_ms,
        o.check_ms,
        o.rounds,
        if o.quick {
            " (`--quick`: a few rounds and a short soak prove the pipeline; the percentiles of so few rounds are indicative only)"
        } else {
            ""
        }
    );
    for why in &r.skipped {
        let _ = writeln!(s, "**Not run:** {why}.\n");
    }
    rto(&mut s, r);
    switchover(&mut s, r);
    loss(&mut s, r);
    soak(&mut s, r);
    restore(&mut s, r);
    sentinel(&mut s, r);
    targets(&mut s, r);
    checks(&mut s, r);
    s
}

fn rto(s: &mut String, r: &FailoverReport) {
    let all: Vec<&RtoResult> = r.manual.iter().chain(r.etcd.iter()).collect();
    if all.is_empty() {
        return;
    }
    let _ = write!(
        s,
        "### Recovery after kill -9 of the primary (RTO)\n\n\
         The feed runs on the primary for a random 0.3–0.8 s, then the primary is killed with SIGKILL. Timed \
         from the kill: until the new primary acknowledges a write (the benchmark sends it a one-row `POST \
         /write` about every millisecond; a standby answers 503), and until the remote rdb has applied that \
         row (its `/status` sequence, polled every millisecond, then the row itself looked up there). Then the killed node is restarted: it rejoins \
         as the new primary's standby (cutting, and keeping a copy of, what the new primary never had), and the \
         next round starts once the group is stable again (one primary; the standby streaming and caught up).\n\n\
         - **Manual promotion**: the benchmark acts as an operator with zero detection time: it calls `POST \
         /admin/promote` on the standby right after the kill. The figure is the promotion and the first write, \
         not how long a person or a monitor would take to notice the crash.\n\
         - **etcd automatic failover**: nobody acts; the standby is elected once the dead primary's lease \
         expires (`--lease-ttl-s {}`), noticed within `--failover-check-ms {}`.\n\n",
        r.options.lease_ttl_s, r.options.check_ms
    );
    s.push_str("| failover | rounds | first acknowledged write p50 | p99 | max | rdb resumed p50 | p99 | max |\n|---|---|---|---|---|---|---|---|\n");
    for x in &all {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            x.how.label(),
            x.rounds.len(),
            cells(&write_samples(x)),
            cells(&rdb_samples(x))
        );
    }
    s.push('\n');
    let mut notes = Vec::new();
    if let Some(m) = &r.manual {
        let call = Samples(m.rounds.iter().filter_map(|x| x.promote_call_ms).collect());
        let took = Samples(m.rounds.iter().filter_map(|x| x.promote_took_ms).collect());
        if let (Some(c), Some(t)) = (call.median(), took.median()) {
            notes.push(format!(
                "Manual: the `POST /admin/promote` round trip took {c:.1} ms (median), of which the node reports {t:.1} ms for the promotion itself."
            ));
        }
    }
    for x in &all {
        let rejoin = Samples(x.rounds.iter().map(|r| r.rejoin_s).collect());
        if let Some(m) = rejoin.median() {
            notes.push(format!(
                "{}: the killed node's restart until the group was stable again took {} (median; not part of the RTO).",
                capital(x.how.label()),
                dur(m)
            ));
        }
        if !x.rdb_diverged.is_empty() {
            notes.push(format!(
                "{}: in {} round(s) the rdb had applied records the new primary never had (async replication) and stopped, as it must rather than show a gap; a fresh rdb was started and those rounds have no rdb figure.",
                capital(x.how.label()),
                x.rdb_diverged.len()
            ));
        }
        if !x.rdb_gaps.is_empty() {
            notes.push(format!(
                "**{}: in {} round(s) the rdb went on with a gap: it had applied a record of the old primary's that the new primary never had, re-subscribed (to the standby, before its promotion) past it, was not refused, and never received the new primary's record at that sequence. The rdb then disagrees with the primary: a failure.** A fresh rdb was started and those rounds have no rdb figure.",
                capital(x.how.label()),
                x.rdb_gaps.len()
            ));
        }
        if let Some(f) = &x.feed {
            notes.push(format!(
                "{}: the feed sent {} rows at {:.0} rows/s on average (target {}), moved between hosts {} times and had {} rows in TCP batches whose connection broke (ILP over TCP has no acknowledgements: a crash loses the batch in flight).",
                capital(x.how.label()),
                f.rows,
                f.rate_achieved,
                f.rate_target,
                f.reconnects,
                f.rows_in_broken_batches
            ));
        }
    }
    if !notes.is_empty() {
        let _ = write!(s, "{}\n\n", notes.join(" "));
    }
}

fn capital(x: &str) -> String {
    let mut c = x.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn switchover(s: &mut String, r: &FailoverReport) {
    if r.switchover.is_empty() {
        return;
    }
    let gaps = Samples(r.switchover.iter().map(|x| x.gap_ms / 1000.0).collect());
    let took = Samples(r.switchover.iter().filter_map(|x| x.took_ms).collect());
    let acked: u64 = r.switchover.iter().map(|x| x.writer.acked).sum();
    let lost: u64 = r.switchover.iter().map(|x| x.writer.lost).sum();
    let _ = write!(
        s,
        "### Planned switchover\n\n\
         A client writes one row per request, about one a millisecond, following the primary (a refusal \
         sends it to the other node), while the feed runs; `POST /admin/switchover?to=STANDBY` goes to the \
         primary, which stops taking writes, waits until the standby holds everything durably, has it \
         promoted and rejoins as its standby. Downtime: the last write the old primary acknowledged to the \
         first the new one did, as the client saw them. Every acknowledged row is then checked on the new \
         primary.\n\n\
         | rounds | downtime p50 | p99 | max | switchover as the node reports it (median) | rows acknowledged | lost |\n\
         |---|---|---|---|---|---|---|\n\
         | {} | {} | {} | {acked} | {lost} |\n\n{}",
        r.switchover.len(),
        cells(&gaps),
        took.median()
            .map(|m| format!("{m:.1} ms"))
            .unwrap_or_else(|| "—".into()),
        match r.switchover.iter().filter(|x| !x.rdb_diverged.is_empty()).count() {
            0 => String::new(),
            n => format!(
                "**In {n} round(s) the rdb stopped: the new primary refused it as diverged, since it held a record \
                 the new primary never had, which a planned switchover must not cause. A failure**; a fresh rdb was \
                 started. Its reason: {}\n\n",
                r.switchover
                    .iter()
                    .flat_map(|x| x.rdb_diverged.iter())
                    .next()
                    .map(String::as_str)
                    .unwrap_or("")
            ),
        }
    );
}

fn loss(s: &mut String, r: &FailoverReport) {
    if r.loss.is_empty() {
        return;
    }
    s.push_str(
        "### Rows lost at a failover\n\n\
         A client writes one row per request with a unique id and logs every acknowledgement outside the \
         database, while the feed runs; the primary is killed with SIGKILL and etcd elects the standby; once \
         the group is stable again, every acknowledged id is looked up on the new primary. Async: the writer \
         of the etcd rounds above. Semi-sync (`--replication semi-sync`, both nodes `--fsync always`): rounds \
         of their own, where the killed node is restarted as soon as the new primary is elected (a semi-sync \
         primary acknowledges nothing without a standby; until it rejoins, writes are refused after \
         `--sync-timeout-ms`, not acknowledged).\n\n\
         | replication | rounds | rows acknowledged | lost | most lost in a round | written twice |\n\
         |---|---|---|---|---|---|\n",
    );
    for l in &r.loss {
        let _ = writeln!(
            s,
            "| {} | {} | {} | **{}** | {} | {} |",
            l.mode,
            l.rounds,
            l.acked,
            l.lost,
            l.lost_per_round.iter().max().copied().unwrap_or(0),
            l.duplicated
        );
    }
    s.push_str(
        "\nAn async primary acknowledges once its own journal has the row; a crash loses what it had not yet \
         shipped (the standby's lag), by design. Semi-sync must lose nothing: a loss fails the benchmark.\n\n",
    );
}

fn soak(s: &mut String, r: &FailoverReport) {
    let Some(k) = &r.soak else {
        return;
    };
    let _ = write!(
        s,
        "### False failovers\n\n\
         A healthy but starved primary must keep its role. For {:.0} s, {} busy loops (`sh -c 'while :; do :; \
         done'`, one per core, at the nodes' own priority) saturate the cores, the feed runs, and about every \
         {} s the primary is paused with SIGSTOP and resumed with SIGCONT {} ms later. Counted: new epochs \
         (each promotion begins one) and `tickdb_failover_promotions_total` over both nodes, before and \
         after.\n\n\
         | soak | busy loops | pauses | longest pause | promotions | epoch before → after | self-fences | false failovers |\n\
         |---|---|---|---|---|---|---|---|\n\
         | {:.0} s | {} | {} | {:.0} ms | {} | {} → {} | {} | **{}** |\n\n\
         A self-fence (the primary stops acknowledging while its lease might lapse) is not a failover; it is \
         shown because it would stall writers.{}\n\n",
        k.seconds,
        k.busy_loops,
        r.options.soak.pause_every_s,
        r.options.soak.pause_ms,
        k.seconds,
        k.busy_loops,
        k.pauses,
        k.longest_pause_ms,
        k.promotions,
        k.epoch_before,
        k.epoch_after,
        k.fences,
        k.false_failovers,
        if k.rdb_diverged.is_empty() {
            String::new()
        } else {
            format!(
                " **The rdb stopped {} time(s) during the soak (a failure): {}**",
                k.rdb_diverged.len(),
                k.rdb_diverged.join("; ")
            )
        }
    );
}

fn restore(s: &mut String, r: &FailoverReport) {
    let Some(res) = &r.restore else {
        return;
    };
    let o = &r.options.restore;
    let _ = write!(
        s,
        "### Restore from the standby's last checkpoint (the headline of Zero-Impact Crash Recovery for kdb+)\n\n\
         Its standby snapshots every 5 minutes; after a failover it restores its last snapshot and \
         replays the log after it, in under {BRIEF_RESTORE_S:.0} s. Here, in the same run, the replication \
         benchmark's restore: a standby with a Hot Restart store (`--fsync {}`) follows a primary preloaded \
         with {} rows, checkpoints (`POST /checkpoint`), follows 5 minutes of a {} rows/s feed's log ({}-row \
         updates), and is killed with SIGKILL; then it is restarted from its store plus the log after the \
         checkpoint, and, for reference, from its journal alone. **Scaled: each minute is {:.1} s of log here \
         (`--minutes-scale {}`).** Page cache {} before each restart. Timed from the process's start until \
         `/health` answers (ready) and until it holds everything the primary has (caught up). {} run(s) of \
         the restarts, the standby killed with SIGKILL again before each (`--restore-runs`): median \
         (min–max) over the runs, `*` marking a spread over 1.3×.\n\n\
         | minutes of log after the checkpoint (s of log here) | rows in that log | Hot Restart: ready | **Hot Restart: caught up** | full replay: ready | full replay: caught up |\n\
         |---|---|---|---|---|---|\n",
        o.standby_fsync,
        o.base_rows,
        o.rate,
        o.batch_rows,
        60.0 * o.minutes_scale,
        o.minutes_scale,
        res.cold.unwrap_or("NOT emptied (no permission; warm reads)"),
        res.runs()
    );
    let secs = |x: f64| format!("{x:.2} s");
    for p in &res.points {
        let _ = writeln!(
            s,
            "| {} ({:.1} s) | {} | {} | **{}** | {} | {} |",
            p.minutes,
            p.log_seconds,
            p.tail_rows,
            p.hot(|t| t.ready_s).describe(secs),
            p.hot(|t| t.caught_up_s).describe(secs),
            p.full(|t| t.ready_s).describe(secs),
            p.full(|t| t.caught_up_s).describe(secs)
        );
    }
    s.push('\n');
}

/// The better (lower p50) Sentinel form measured.
fn best_sentinel(r: &FailoverReport) -> Option<(&super::sentinel::SentinelResult, f64)> {
    r.sentinel
        .iter()
        .filter_map(|x| {
            Samples(x.rounds.iter().map(|y| y.set_s).collect())
                .percentile(50.0)
                .map(|m| (x, m))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

fn sentinel(s: &mut String, r: &FailoverReport) {
    let o = &r.options;
    if r.sentinel.is_empty() && !o.runs("sentinel") {
        return;
    }
    let _ = write!(
        s,
        "### Peer: Redis Sentinel\n\n\
         Redis {} as master and replica (`replicaof`, in memory) and one Sentinel (`redis-server CONF \
         --sentinel`) monitoring the master with quorum 1, each a child process on a free loopback port, fresh \
         for every round. Once Sentinel lists the replica as healthy and a key written to the master is on the \
         replica (`WAIT 1`), the master is killed with SIGKILL. Timed from the kill as tickdb's probe is: until \
         a client trying the other address can `SET` on the new master (it answers -READONLY until Sentinel \
         promotes it), and until Sentinel names the new master (`SENTINEL get-master-addr-by-name`, what a \
         Sentinel-aware client asks). Both keys then read back on the new master.\n\n\
         - **Default form**: Sentinel's defaults, `down-after-milliseconds` {} and `failover-timeout` {}. \
         Each round waits out the 30 s: {}.\n\
         - **Best form**: `down-after-milliseconds {}`, `failover-timeout {}`. Sentinel PINGs every instance \
         once a second, so 1000 ms is one missed reply: lower settings flap on a single late PING (the \
         Sentinel documentation's own examples use 5000 to 60000). {} round(s).\n\n",
        r.redis_version.as_deref().unwrap_or("7"),
        super::SentinelForm::DEFAULT_DOWN_AFTER_MS,
        super::SentinelForm::DEFAULT_FAILOVER_TIMEOUT_MS,
        match o.sentinel_default.rounds {
            0 => "not run here (`--quick` runs none; a full run, 3)".to_string(),
            n => format!("{n} round(s) only"),
        },
        o.sentinel_best.down_after(),
        o.sentinel_best.failover_timeout(),
        o.sentinel_best.rounds
    );
    if r.sentinel.is_empty() {
        s.push_str("Not run (see above).\n\n");
        return;
    }
    s.push_str("| Sentinel form | rounds | SET on the new master p50 | p99 | max | Sentinel names it p50 |\n|---|---|---|---|---|---|\n");
    for x in &r.sentinel {
        let _ = writeln!(
            s,
            "| {} (down-after {} ms, failover-timeout {} ms) | {} | {} | {} |",
            x.form.label,
            x.form.down_after(),
            x.form.failover_timeout(),
            x.rounds.len(),
            cells(&Samples(x.rounds.iter().map(|y| y.set_s).collect())),
            opt(Samples(x.rounds.iter().map(|y| y.named_s).collect()).percentile(50.0))
        );
    }
    if o.sentinel_default.rounds == 0 {
        s.push_str("| default (down-after 30000 ms) | 0 | not run under `--quick`: each round waits out the 30 s | | | |\n");
    }
    let tick = r
        .etcd
        .as_ref()
        .and_then(|e| write_samples(e).percentile(50.0));
    match (tick, best_sentinel(r)) {
        (Some(t), Some((b, m))) if m > 0.0 => {
            let _ = write!(
                s,
                "\n**tickdb's etcd failover p50 {} against Redis Sentinel's {} form p50 {}: tickdb ÷ Sentinel = {:.2}×.** \
                 Detection sets both: tickdb's lease of {} s against Sentinel's down-after-milliseconds of {} ms in \
                 its best form ({} ms by default).\n\n",
                dur(t),
                b.form.label,
                dur(m),
                t / m,
                o.lease_ttl_s,
                b.form.down_after(),
                super::SentinelForm::DEFAULT_DOWN_AFTER_MS
            );
        }
        _ => s.push_str("\n(No ratio: tickdb's etcd rounds or Sentinel's did not run.)\n\n"),
    }
}

fn targets(s: &mut String, r: &FailoverReport) {
    let mut t = Vec::new();
    match r
        .etcd
        .as_ref()
        .and_then(|e| write_samples(e).percentile(99.0))
    {
        Some(p99) => t.push(format!(
            "- Automatic failover (etcd) RTO p99 under {TARGET_AUTO_RTO_P99_S:.0} s: {} ({}).",
            dur(p99),
            met(p99 < TARGET_AUTO_RTO_P99_S)
        )),
        None => t.push(format!(
            "- Automatic failover (etcd) RTO p99 under {TARGET_AUTO_RTO_P99_S:.0} s: not measured."
        )),
    }
    let sw = Samples(r.switchover.iter().map(|x| x.gap_ms / 1000.0).collect());
    t.push(match sw.percentile(99.0) {
        Some(p) => format!(
            "- Switchover downtime under {TARGET_MANUAL_MS:.0} ms: p99 {} ({}).",
            dur(p),
            met(p * 1000.0 < TARGET_MANUAL_MS)
        ),
        None => format!("- Switchover downtime under {TARGET_MANUAL_MS:.0} ms: not measured."),
    });
    t.push(
        match r
            .manual
            .as_ref()
            .and_then(|m| write_samples(m).percentile(99.0))
        {
            Some(p) => format!(
                "- Manual promotion (kill to the first acknowledged write, detection excluded) under {TARGET_MANUAL_MS:.0} ms: p99 {} ({}).",
                dur(p),
                met(p * 1000.0 < TARGET_MANUAL_MS)
            ),
            None => format!("- Manual promotion under {TARGET_MANUAL_MS:.0} ms: not measured."),
        },
    );
    t.push(match r.loss.iter().find(|l| l.mode == "semi-sync") {
        Some(l) => format!(
            "- Zero rows lost under semi-sync: {} lost of {} acknowledged ({}).",
            l.lost,
            l.acked,
            met(l.lost == 0)
        ),
        None => "- Zero rows lost under semi-sync: not measured.".into(),
    });
    t.push(match &r.soak {
        Some(k) => format!(
            "- Zero false failovers: {} in {:.0} s ({}).",
            k.false_failovers,
            k.seconds,
            met(k.false_failovers == 0)
        ),
        None => "- Zero false failovers: not measured.".into(),
    });
    let sentinel_default = r
        .sentinel
        .iter()
        .find(|x| x.form.down_after_ms.is_none())
        .and_then(|x| Samples(x.rounds.iter().map(|y| y.set_s).collect()).percentile(50.0));
    let restore = r
        .restore
        .as_ref()
        .and_then(|x| x.points.last())
        .and_then(|p| p.hot(|t| t.caught_up_s).median());
    let _ = write!(
        s,
        "### Targets and anchors\n\n\
         Targets (the zero ones are also checked: a miss fails the benchmark):\n\n{}\n\n\
         Anchors (from their sources, not measured here unless said): Patroni, the usual PostgreSQL failover \
         manager, fails over in {PATRONI_RTO} with its default settings; Redis Sentinel takes at least 30 s \
         by default ({}); the standby of Zero-Impact Crash Recovery for kdb+ restores in under \
         {BRIEF_RESTORE_S:.0} s ({}).\n\n",
        t.join("\n"),
        match sentinel_default {
            Some(m) => format!("measured here: p50 {}", dur(m)),
            None => "not measured in this run".into(),
        },
        match restore {
            Some(x) => format!(
                "tickdb's standby here: {x:.2} s (median) from its checkpoint plus 5 scaled minutes of log"
            ),
            None => "not measured in this run".into(),
        }
    );
}

fn checks(s: &mut String, r: &FailoverReport) {
    let failures = r.failures();
    let _ = write!(
        s,
        "### Correctness\n\n\
         After every round, with the feed paused and everything applied: the primary's journal against the \
         standby's with `tickdb journal compare` (exit 0: the same records and segment files over the range \
         both hold), and the rows of every table on the primary, the standby and the rdb; every acknowledged \
         row of the writers looked up on the new primary; for Redis, both keys read back on the new master. \
         {} checks: {}.\n",
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
