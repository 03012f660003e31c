//! A running node's parts: the role it plays, its lifecycle, and its
//! tickerplant, rdb and query engine once each is open. Listeners start
//! before the parts exist (so `/health` and `/status` answer during a long
//! reload) and find each part here when it is there; until then they
//! answer "not ready" with how far loading has got.

use crate::lifecycle::Lifecycle;
use std::sync::{Arc, OnceLock};
use tickdb_query::QueryEngine;
use tickdb_rdb::Rdb;
use tickdb_tp::Tickerplant;

/// Which parts a node has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `tickdb up`: tp + rdb + queries in one process.
    Up,
    /// `tickdb tp`: the tickerplant alone.
    Tp,
    /// `tickdb rdb`: an rdb following a remote tp, with queries.
    Rdb,
}

impl Role {
    pub fn has_tp(self) -> bool {
        matches!(self, Role::Up | Role::Tp)
    }

    pub fn has_rdb(self) -> bool {
        matches!(self, Role::Up | Role::Rdb)
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Up => "up",
            Role::Tp => "tp",
            Role::Rdb => "rdb",
        }
    }
}

/// The node: role, lifecycle and parts. Shared by every listener.
pub struct Node {
    pub role: Role,
    pub life: Lifecycle,
    tp: OnceLock<Arc<Tickerplant>>,
    rdb: OnceLock<Arc<Rdb>>,
    query: OnceLock<QueryEngine>,
    replication: OnceLock<Arc<crate::replication::Replication>>,
    /// Cancelled when the node drains: every server ends its idle
    /// connections and finishes the busy ones.
    pub drain: tokio_util::sync::CancellationToken,
    /// Cancelled by `POST /admin/drain`: the role's main loop then drains
    /// as it does on SIGTERM.
    pub drain_requested: tokio_util::sync::CancellationToken,
    ports: OnceLock<Arc<crate::query_group::QueryPorts>>,
    eod: OnceLock<Arc<crate::eod::Eod>>,
    clock: OnceLock<crate::eod_clock::EodClock>,
    security: OnceLock<Arc<crate::security::Security>>,
}

impl Node {
    pub fn new(role: Role) -> Arc<Node> {
        Arc::new(Node {
            role,
            life: Lifecycle::new(),
            tp: OnceLock::new(),
            rdb: OnceLock::new(),
            query: OnceLock::new(),
            replication: OnceLock::new(),
            drain: tokio_util::sync::CancellationToken::new(),
            drain_requested: tokio_util::sync::CancellationToken::new(),
            ports: OnceLock::new(),
            eod: OnceLock::new(),
            clock: OnceLock::new(),
            security: OnceLock::new(),
        })
    }

    /// Set once at start, before any port serves.
    pub fn set_security(&self, s: Arc<crate::security::Security>) {
        let _ = self.security.set(s);
    }

    /// The node's users and login limiter; open when none were set.
    pub fn security(&self) -> Arc<crate::security::Security> {
        self.security
            .get_or_init(|| Arc::new(crate::security::Security::open()))
            .clone()
    }

    pub fn set_tp(&self, tp: Arc<Tickerplant>) {
        let _ = self.tp.set(tp);
    }

    pub fn set_rdb(&self, rdb: Arc<Rdb>) {
        let _ = self.rdb.set(rdb);
    }

    /// The engine answers nothing until the lifecycle says ready.
    pub fn set_query(&self, engine: QueryEngine) {
        engine.set_readiness(Arc::new(self.life.clone()));
        let _ = self.query.set(engine);
    }

    pub fn set_replication(&self, r: Arc<crate::replication::Replication>) {
        let _ = self.replication.set(r);
    }

    pub fn replication(&self) -> Option<&Arc<crate::replication::Replication>> {
        self.replication.get()
    }

    pub fn set_ports(&self, p: Arc<crate::query_group::QueryPorts>) {
        let _ = self.ports.set(p);
    }

    /// The node's listening ports, once bound.
    pub fn ports(&self) -> Option<&Arc<crate::query_group::QueryPorts>> {
        self.ports.get()
    }

    /// Ready, and listening on every shared port: what `/health` says 200
    /// to (a rolling upgrade drains the old member only then).
    pub fn serving(&self) -> bool {
        self.life.is_ready() && self.ports().is_none_or(|p| p.joined())
    }

    pub fn tp(&self) -> Option<&Arc<Tickerplant>> {
        self.tp.get()
    }

    pub fn rdb(&self) -> Option<&Arc<Rdb>> {
        self.rdb.get()
    }

    /// The end-of-day writer, on an rdb with a historical database.
    pub fn set_eod(&self, e: Arc<crate::eod::Eod>) {
        let _ = self.eod.set(e);
    }

    pub fn eod(&self) -> Option<&Arc<crate::eod::Eod>> {
        self.eod.get()
    }

    /// The end-of-day clock (time zone), on a node with a tp.
    pub fn set_clock(&self, c: crate::eod_clock::EodClock) {
        let _ = self.clock.set(c);
    }

    pub fn clock(&self) -> Option<&crate::eod_clock::EodClock> {
        self.clock.get()
    }

    pub fn query(&self) -> Option<&QueryEngine> {
        self.query.get()
    }
}
