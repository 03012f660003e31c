//! Automatic failover with etcd, as Patroni does it: the node holding the
//! leader key, under a lease it keeps alive, is the primary. Keys, under
//! `/tickdb/CLUSTER/`:
//!
//! - `leader`: `{"name", "epoch", "repl", "http", "ilp", "sub"}` of the
//!   primary, attached to its lease: it vanishes when the lease expires;
//! - `epoch`: the last epoch handed out (decimal). A node becomes leader
//!   only in a transaction that finds no leader key and this key unchanged
//!   since it read it, and that writes both: every epoch is handed out
//!   once, so no two nodes ever write in the same epoch;
//! - `members/NAME`: `{"name", "epoch", "seq", "role", "repl", "http"}` of
//!   every node, refreshed when its role or epoch changes and every second, under the node's lease: when the
//!   leader key is gone, a standby campaigns only if no other member holds
//!   a higher (epoch, sequence) (ties: the smaller name).
//!
//! The primary renews its lease a few times per TTL and takes writes only
//! until the last renewal's send time plus the TTL less `--fence-margin-ms`
//! (self-fencing on a monotonic clock, checked on the write and
//! acknowledgement paths themselves): it stops acknowledging before the
//! lease can expire and a standby can be elected.

use crate::failover::{self, Advertised};
use crate::node::Node;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_etcd::{Client, Compare, Op};

/// Time one etcd request may take.
pub const ETCD_REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Why a primary fenced itself for its lease: the reason it is unfenced
/// for, too, once a renewal comes through in time.
const LEASE_FENCE_REASON: &str =
    "the leader lease was not renewed in time (etcd not reached): no write is acknowledged until it is";
/// Log "waiting for the leader" at most this often.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(5);

/// The settings and the client.
pub struct Etcd {
    pub client: Client,
    pub cluster: String,
    pub ttl_s: u64,
    pub margin: Duration,
    pub check: Duration,
    pub name: String,
    pub advertised: Advertised,
    /// This node's lease (its member key, and its leader key when primary).
    lease: parking_lot::Mutex<i64>,
}

/// The leader key's value.
#[derive(Debug, Clone)]
pub struct Leader {
    pub name: String,
    pub epoch: u32,
    pub repl: String,
    pub http: String,
}

/// What a node is at start.
pub enum StartRole {
    /// Elected: open fenced, begin `epoch`, then take writes.
    Primary { epoch: u32 },
    /// Follow the primary at this replication address.
    StandbyOf(String),
}

impl Etcd {
    pub fn new(
        urls: &str,
        cluster: &str,
        ttl_s: u64,
        margin_ms: u64,
        check_ms: u64,
        name: &str,
        advertised: Advertised,
    ) -> Result<Etcd, String> {
        let endpoints = Client::parse_endpoints(urls).map_err(|e| format!("--etcd: {e}"))?;
        let client = Client::new(endpoints, Duration::from_millis(ETCD_REQUEST_TIMEOUT_MS))
            .map_err(|e| format!("--etcd: {e}"))?;
        if ttl_s == 0 {
            return Err("--lease-ttl-s must be at least 1".into());
        }
        if Duration::from_millis(margin_ms) >= Duration::from_secs(ttl_s) {
            return Err(format!(
                "--fence-margin-ms {margin_ms} must be below the lease TTL ({ttl_s} s)"
            ));
        }
        Ok(Etcd {
            client,
            cluster: cluster.to_string(),
            ttl_s,
            margin: Duration::from_millis(margin_ms),
            check: Duration::from_millis(check_ms.max(10)),
            name: name.to_string(),
            advertised,
            lease: parking_lot::Mutex::new(0),
        })
    }

    fn key(&self, k: &str) -> String {
        format!("/tickdb/{}/{k}", self.cluster)
    }

    /// A fresh lease; returns it and the instant the request was sent.
    async fn grant(&self) -> Result<(i64, Instant), String> {
        let sent = Instant::now();
        let id = self
            .client
            .grant(self.ttl_s as i64)
            .await
            .map_err(|e| format!("etcd: granting a lease: {e}"))?;
        *self.lease.lock() = id;
        Ok((id, sent))
    }

    fn lease(&self) -> i64 {
        *self.lease.lock()
    }

    /// Until when a primary renewed at `sent` may take writes.
    fn deadline(&self, sent: Instant) -> Instant {
        sent + Duration::from_secs(self.ttl_s) - self.margin
    }

    pub async fn leader(&self) -> Result<Option<Leader>, String> {
        let kv = self
            .client
            .get(&self.key("leader"))
            .await
            .map_err(|e| format!("etcd: reading the leader key: {e}"))?;
        Ok(kv.and_then(|kv| {
            let v: Value = serde_json::from_slice(&kv.value).ok()?;
            Some(Leader {
                name: v["name"].as_str()?.to_string(),
                epoch: v["epoch"].as_u64()? as u32,
                repl: v["repl"].as_str()?.to_string(),
                http: v["http"].as_str().unwrap_or_default().to_string(),
            })
        }))
    }

    async fn register(&self, epoch: u32, seq: u64, role: &str) {
        let v = json!({
            "name": self.name, "epoch": epoch, "seq": seq, "role": role,
            "repl": self.advertised.repl, "http": self.advertised.http,
        });
        let _ = self
            .client
            .put(
                &self.key(&format!("members/{}", self.name)),
                v.to_string().as_bytes(),
                Some(self.lease()),
            )
            .await;
    }

    /// Whether another member should campaign before this one: it holds
    /// a higher (epoch, seq), or the same and a smaller name.
    async fn better_member(&self, epoch: u32, seq: u64) -> Option<String> {
        let kvs = self.client.get_prefix(&self.key("members/")).await.ok()?;
        let me = (epoch, seq);
        kvs.iter()
            .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
            .filter(|v| v["name"].as_str() != Some(self.name.as_str()))
            .find(|v| {
                let them = (
                    v["epoch"].as_u64().unwrap_or(0) as u32,
                    v["seq"].as_u64().unwrap_or(0),
                );
                them > me || (them == me && v["name"].as_str().unwrap_or("") < self.name.as_str())
            })
            .and_then(|v| v["name"].as_str().map(str::to_string))
    }

    /// One campaign: becomes the leader if there is none, in the epoch
    /// after every epoch etcd and this journal know of. Some(epoch) when
    /// elected.
    async fn campaign(&self, my_epoch: u32) -> Result<Option<u32>, String> {
        let epoch_key = self.key("epoch");
        let cur = self
            .client
            .get(&epoch_key)
            .await
            .map_err(|e| format!("etcd: reading the epoch: {e}"))?;
        let (etcd_epoch, guard) = match &cur {
            Some(kv) => (
                std::str::from_utf8(&kv.value)
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok())
                    .unwrap_or(0),
                Compare::mod_revision(&epoch_key, kv.mod_revision),
            ),
            None => (0, Compare::absent(&epoch_key)),
        };
        let epoch = etcd_epoch.max(my_epoch) + 1;
        let leader = json!({
            "name": self.name, "epoch": epoch,
            "repl": self.advertised.repl, "http": self.advertised.http,
            "ilp": self.advertised.ilp, "sub": self.advertised.sub,
        });
        let r = self
            .client
            .txn(
                vec![Compare::absent(self.key("leader")), guard],
                vec![
                    Op::put(
                        self.key("leader"),
                        leader.to_string().into_bytes(),
                        Some(self.lease()),
                    ),
                    Op::put(&epoch_key, epoch.to_string().into_bytes(), None),
                ],
                vec![],
            )
            .await
            .map_err(|e| format!("etcd: campaigning: {e}"))?;
        Ok(r.succeeded.then_some(epoch))
    }

    pub fn status(&self, tp: &tickdb_tp::Tickerplant) -> Value {
        json!({
            "cluster": self.cluster,
            "endpoints": self.client.endpoints(),
            "lease_ttl_s": self.ttl_s,
            "fence_margin_ms": self.margin.as_millis() as u64,
            "check_ms": self.check.as_millis() as u64,
            "lease_left_ms": tp.lease_left().map(|d| d.as_millis() as u64),
        })
    }
}

/// Decides, before the journal opens, whether this node starts as the
/// primary (elected now) or as the standby of the current leader. Waits
/// while a stale leader key names this node (a previous run of it) or a
/// better member should campaign first.
pub async fn decide_at_start(
    e: &Etcd,
    my_epoch: u32,
    my_seq: u64,
    life: &crate::lifecycle::Lifecycle,
) -> Result<StartRole, String> {
    life.starting("asking etcd who the primary is");
    let mut logged = Instant::now() - WAIT_LOG_EVERY;
    loop {
        let step = async {
            // The lease must be alive before it can hold a key: renewed
            // each step, granted anew once it has expired.
            let alive = e.lease() != 0
                && matches!(e.client.keepalive_once(e.lease()).await, Ok(ttl) if ttl > 0);
            if !alive {
                e.grant().await?;
            }
            e.register(my_epoch, my_seq, "starting").await;
            match e.leader().await? {
                Some(l) if l.name != e.name => return Ok(Some(StartRole::StandbyOf(l.repl))),
                Some(_) => {
                    return Err(
                        "the leader key names this node, from an earlier run; waiting for its lease to expire".to_string(),
                    )
                }
                None => {}
            }
            if let Some(b) = e.better_member(my_epoch, my_seq).await {
                return Err(format!(
                    "no leader; waiting for {b}, which holds more, to campaign"
                ));
            }
            Ok(e.campaign(my_epoch)
                .await?
                .map(|epoch| StartRole::Primary { epoch }))
        };
        match step.await {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {}
            Err(why) if logged.elapsed() >= WAIT_LOG_EVERY => {
                logged = Instant::now();
                tracing::warn!("failover: {why}");
            }
            Err(_) => {}
        }
        tokio::time::sleep(e.check).await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Primary,
    Standby,
    /// Lost the lease or found another leader: takes no writes, waits to
    /// follow the new leader.
    Deposed,
}

/// What the renewer last heard from etcd about this node's lease.
#[derive(Debug, Clone, Copy)]
enum Renewal {
    /// Renewed (the renewer has already moved the primary's deadline).
    Renewed,
    /// etcd says the lease is gone.
    Expired,
}

/// Shared between the renewer and the run loop.
#[derive(Default)]
struct LeaseState {
    /// Whether this node is the primary: the renewer extends the tp's
    /// write deadline only then.
    primary: std::sync::atomic::AtomicBool,
    last: parking_lot::Mutex<Option<Renewal>>,
}

/// Members' keys are rewritten when the role or epoch changes, and
/// otherwise at most this often (the sequence they carry only matters when
/// there is no leader, and each write costs etcd a WAL fsync).
const REGISTER_EVERY: Duration = Duration::from_secs(1);

/// Renews the lease a few times per TTL, in a task of its own: no other
/// etcd request (a slow write, a read timing out) can delay a renewal, and
/// a primary's write deadline moves forward as soon as one succeeds.
async fn renewer(
    e: Arc<Etcd>,
    tp: Arc<tickdb_tp::Tickerplant>,
    shared: Arc<LeaseState>,
    every: Duration,
) {
    use std::sync::atomic::Ordering;
    loop {
        tokio::time::sleep(every).await;
        match keepalive(&e).await {
            Ok(Some(sent)) => {
                if shared.primary.load(Ordering::SeqCst) {
                    tp.set_lease_deadline(Some(e.deadline(sent)));
                }
                *shared.last.lock() = Some(Renewal::Renewed);
            }
            Ok(None) => *shared.last.lock() = Some(Renewal::Expired),
            Err(why) => tracing::debug!("failover: {why}"),
        }
    }
}

/// Keeps this node's place in the group for as long as it runs: renews the
/// lease, fences a primary that cannot, elects a standby when the leader
/// key is gone, and demotes a node another has replaced.
pub async fn run(e: Arc<Etcd>, node: Arc<Node>, elected: Option<u32>) {
    use std::sync::atomic::Ordering;
    // Spawned while the node is being wired: wait for its parts.
    let tp = loop {
        if let (Some(tp), Some(_)) = (node.tp(), node.replication()) {
            break tp.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let renew_every = Duration::from_millis((e.ttl_s * 1000 / 4).max(50));
    let shared = Arc::new(LeaseState::default());
    let mut state = State::Standby;
    if let Some(epoch) = elected {
        match keepalive(&e).await {
            Ok(Some(sent)) => {
                tp.set_lease_deadline(Some(e.deadline(sent)));
                shared.primary.store(true, Ordering::SeqCst);
                match failover::promote(&node, None, Some(epoch), "elected by etcd at start").await
                {
                    Ok(_) => state = State::Primary,
                    Err(x) => {
                        shared.primary.store(false, Ordering::SeqCst);
                        tracing::error!("failover: elected, but not promoted: {}", x.message)
                    }
                }
            }
            _ => tracing::error!(
                "failover: elected, but the lease could not be renewed before the epoch began"
            ),
        }
    }
    let renewing = tokio::spawn(renewer(e.clone(), tp.clone(), shared.clone(), renew_every));
    let mut registered: Option<(Instant, u32, &'static str, u64)> = None;
    loop {
        tokio::time::sleep(e.check).await;
        let heard = shared.last.lock().take();
        match heard {
            Some(Renewal::Renewed) if state == State::Primary => {
                let lease_fenced = matches!(tp.role(), tickdb_tp::Role::Fenced { reason, .. } if reason == LEASE_FENCE_REASON);
                if lease_fenced {
                    tp.unfence();
                    if let Some(r) = node.replication() {
                        r.failover.event(
                            "unfence",
                            json!({ "reason": "the leader lease was renewed in time", "epoch": tp.epoch() }),
                        );
                    }
                }
            }
            Some(Renewal::Renewed) | None => {}
            Some(Renewal::Expired) if state == State::Primary => {
                let why = "lost the leader lease (etcd says it expired)";
                shared.primary.store(false, Ordering::SeqCst);
                tp.fence(why, None);
                if let Some(r) = node.replication() {
                    r.failover
                        .event("fence", json!({ "reason": why, "epoch": tp.epoch() }));
                }
                state = State::Deposed;
                let _ = e.grant().await;
            }
            Some(Renewal::Expired) => {
                let _ = e.grant().await;
            }
        }
        // The deadline already stops writes on its own; this makes it an
        // event, logged and counted, like every fence.
        if state == State::Primary
            && tp.role() == tickdb_tp::Role::Primary
            && tp.lease_left() == Some(Duration::ZERO)
        {
            tp.fence(LEASE_FENCE_REASON, None);
            if let Some(r) = node.replication() {
                r.failover.event(
                    "fence",
                    json!({ "reason": LEASE_FENCE_REASON, "epoch": tp.epoch() }),
                );
            }
        }
        let role = if state == State::Primary {
            "primary"
        } else {
            tp.role().name()
        };
        let (epoch, seq) = (tp.epoch(), tp.seq());
        // A standby whose link to its primary is down may be about to
        // take part in an election, where members rank by the (epoch,
        // seq) in their keys: its key must then hold what it really has,
        // or an old primary restarted with a torn tail (fewer records)
        // could win with a key of a second ago (a semi-sync record
        // acknowledged by both would be lost).
        let unlinked = state != State::Primary
            && !node
                .replication()
                .and_then(|r| r.follower())
                .is_some_and(|f| f.linked());
        let due = match registered {
            Some((at, ep, r, sq)) => {
                ep != epoch
                    || r != role
                    || at.elapsed() >= REGISTER_EVERY
                    || (unlinked && sq != seq)
            }
            None => true,
        };
        if due {
            e.register(epoch, seq, role).await;
            registered = Some((Instant::now(), epoch, role, seq));
        }
        let Ok(leader) = e.leader().await else {
            continue;
        };
        match (state, leader) {
            (State::Primary, Some(l)) if l.name == e.name => {}
            (State::Primary, other) => {
                let why = match &other {
                    Some(l) => format!("{} is the leader now (epoch {})", l.name, l.epoch),
                    None => "the leader key is gone".to_string(),
                };
                shared.primary.store(false, Ordering::SeqCst);
                tp.fence(&why, other.as_ref().map(|l| l.repl.clone()));
                if let Some(r) = node.replication() {
                    r.failover
                        .event("fence", json!({ "reason": why, "epoch": tp.epoch() }));
                }
                state = State::Deposed;
                if let Some(l) = other {
                    renewing.abort();
                    demote(&node, &tp, &l).await;
                }
            }
            (State::Deposed, Some(l)) if l.name != e.name => {
                renewing.abort();
                demote(&node, &tp, &l).await
            }
            (State::Deposed, Some(_)) => {}
            (State::Standby, Some(l)) if l.name != e.name => {
                // Following someone else than the leader (the old primary,
                // from before a failover): follow the leader instead.
                let following = node
                    .replication()
                    .and_then(|r| r.follower())
                    .map(|f| f.following())
                    .unwrap_or_default();
                if !following.split(',').any(|a| a.trim() == l.repl) {
                    renewing.abort();
                    demote(&node, &tp, &l).await;
                }
            }
            (State::Standby, Some(_)) => {}
            // No leader: a standby campaigns, and so does a deposed primary
            // (it may hold the most records; were it left out, a standby
            // deferring to it would wait for ever).
            (State::Standby | State::Deposed, None) => {
                if e.better_member(tp.epoch(), tp.seq()).await.is_some() {
                    continue;
                }
                let sent = match keepalive(&e).await {
                    Ok(Some(sent)) => sent,
                    Ok(None) => {
                        let _ = e.grant().await;
                        continue;
                    }
                    Err(_) => continue,
                };
                match e.campaign(tp.epoch()).await {
                    Ok(Some(epoch)) => {
                        tp.set_lease_deadline(Some(e.deadline(sent)));
                        shared.primary.store(true, Ordering::SeqCst);
                        match failover::promote(
                            &node,
                            None,
                            Some(epoch),
                            "etcd: the leader's lease expired",
                        )
                        .await
                        {
                            Ok(_) => state = State::Primary,
                            Err(x) => {
                                shared.primary.store(false, Ordering::SeqCst);
                                tracing::error!("failover: elected, but not promoted: {}; giving the leadership up", x.message);
                                let _ = e.client.revoke(e.lease()).await;
                                let _ = e.grant().await;
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(why) => tracing::warn!("failover: {why}"),
                }
            }
        }
    }
}

/// Renews this node's lease: Ok(the instant the renewal was sent), Ok(None)
/// when etcd says the lease is gone, Err when etcd cannot be reached (the
/// lease may still be alive: a primary keeps its role until its deadline).
async fn keepalive(e: &Etcd) -> Result<Option<Instant>, String> {
    let sent = Instant::now();
    match e.client.keepalive_once(e.lease()).await {
        Ok(ttl) if ttl > 0 => Ok(Some(sent)),
        Ok(_) => Ok(None),
        Err(x) => Err(format!("renewing the lease: {x}")),
    }
}

/// Restarts this node as a standby of the leader `l`.
async fn demote(node: &Node, tp: &Arc<tickdb_tp::Tickerplant>, l: &Leader) {
    if let Some(r) = node.replication() {
        r.failover.event(
            "demote",
            json!({ "to": l.name, "primary": l.repl, "epoch": l.epoch, "why": "etcd names another leader" }),
        );
    }
    failover::rejoin_as_standby(tp, &l.repl).await;
}
