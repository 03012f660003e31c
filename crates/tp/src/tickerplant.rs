//! The tickerplant handle: open (recover the journal), write, subscribe,
//! status, shutdown. Every ingest path (HTTP, ILP TCP, the subscription
//! port's writes, the built-in demo feed) goes through `write`.

use crate::conn_limit::ConnLimit;
use crate::error::{OpenError, TpError};
use crate::hub::{Hub, SubFilter, SubForm, SubInfo, SubQueue};
use crate::journal_thread::{
    self, Counters, Outputs, ReplicatedItem, ReplicatedReq, Req, WriteReq,
};
use crate::sub_memory::SubMemoryInfo;
use crate::sync_gate::{SyncGate, SyncPolicy};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tickdb_core::{Batch, Schema};
use tickdb_journal::{
    FsStorage, FsyncPolicy, Journal, JournalError, JournalOptions, JournalReader, RecoveryMode,
    RecoveryReport, Storage,
};
use tokio::sync::oneshot;

/// Write requests waiting for the journal thread; a full queue makes
/// writers wait (back-pressure), it never drops.
pub const WRITE_QUEUE_REQUESTS_MAX: usize = 4096;

#[derive(Clone, Debug)]
pub struct TpConfig {
    pub journal_dir: PathBuf,
    pub schema: Arc<Schema>,
    /// The schema's TOML text, sent to subscribers so an rdb needs no copy,
    /// and recorded in the journal's schema history.
    pub schema_toml: String,
    /// Where the schema came from (a file path, "the built-in schema"), for
    /// messages.
    pub schema_origin: String,
    pub fsync: FsyncPolicy,
    pub recovery: RecoveryMode,
    pub segment_bytes_max: u64,
    /// 0 = zero-latency publishing; otherwise publish every N ms.
    pub publish_interval_ms: u64,
    pub line_bytes_max: usize,
    pub request_bytes_max: usize,
    /// One subscriber's bytes queued or being written before it is cut off.
    pub sub_queue_bytes_max: usize,
    /// All subscribers' buffers together: queued, being written, and
    /// journal records read ahead for catch-ups.
    pub sub_memory_bytes_max: usize,
    /// Connections open at once on the subscription port.
    pub sub_connections_max: usize,
    /// A subscription-port connection's first message (Subscribe or Write)
    /// must arrive within this many seconds.
    pub sub_handshake_timeout_s: u64,
    /// A publisher (Write frames) sending nothing for this long is closed;
    /// 0 = never. Subscribers are never timed out for being quiet.
    pub publisher_idle_timeout_s: u64,
    /// An ILP TCP connection sending nothing for this long is closed;
    /// 0 = never.
    pub ilp_idle_timeout_s: u64,
    /// The bytes of an unfinished ILP TCP line must complete within this
    /// many seconds of arriving.
    pub ilp_partial_line_timeout_s: u64,
    /// Connections open at once on the ILP TCP port.
    pub ilp_connections_max: usize,
    /// Create the tables and columns ILP lines name that the schema lacks
    /// (`--ilp-auto-create`), instead of refusing the lines.
    pub ilp_auto_create: bool,
    /// This tp is a standby of the primary at this address: it takes
    /// records from its follower only, refuses every write naming the
    /// primary, and starts segments where the primary did.
    pub standby_of: Option<String>,
    /// Semi-sync replication: writes are acknowledged once this many
    /// standbys hold them durably. None: acknowledged once journaled here.
    pub sync: Option<SyncPolicy>,
    /// A new journal starts at this sequence (a standby reseeded from its
    /// primary's tables continues the journal where the primary's is).
    pub first_seq: Option<u64>,
    /// Open fenced, for this reason: a node elected primary by etcd takes
    /// no write until its new epoch has begun.
    pub start_fenced: Option<String>,
}

impl TpConfig {
    /// A configuration with every bound and timeout at its default.
    pub fn new(journal_dir: PathBuf, schema: Arc<Schema>, schema_toml: String) -> TpConfig {
        TpConfig {
            journal_dir,
            schema,
            schema_toml,
            schema_origin: "the built-in schema".to_string(),
            fsync: FsyncPolicy::Always,
            recovery: RecoveryMode::Strict,
            segment_bytes_max: tickdb_journal::SEGMENT_BYTES_MAX_DEFAULT,
            publish_interval_ms: 0,
            line_bytes_max: crate::ingest::LINE_BYTES_MAX,
            request_bytes_max: crate::ingest::REQUEST_BYTES_MAX,
            sub_queue_bytes_max: crate::hub::SUB_QUEUE_BYTES_MAX,
            sub_memory_bytes_max: crate::sub_memory::SUB_MEMORY_BYTES_MAX,
            sub_connections_max: crate::sub_server::SUB_CONNECTIONS_MAX,
            sub_handshake_timeout_s: crate::sub_server::SUB_HANDSHAKE_TIMEOUT_S,
            publisher_idle_timeout_s: crate::sub_server::PUBLISHER_IDLE_TIMEOUT_S,
            ilp_idle_timeout_s: crate::ilp_tcp::ILP_IDLE_TIMEOUT_S,
            ilp_partial_line_timeout_s: crate::ilp_tcp::ILP_PARTIAL_LINE_TIMEOUT_S,
            ilp_connections_max: crate::ilp_tcp::TCP_CONNECTIONS_MAX,
            ilp_auto_create: false,
            standby_of: None,
            sync: None,
            first_seq: None,
            start_fenced: None,
        }
    }
}

/// An update queued by `Tickerplant::submit`, not yet acknowledged.
pub struct WriteAck(oneshot::Receiver<Result<u64, TpError>>);

impl WriteAck {
    /// The update's sequence once it is acknowledged (journaled under the
    /// fsync policy, and through the semi-sync gate when there is one).
    pub async fn wait(self) -> Result<u64, TpError> {
        self.0.await.map_err(|_| TpError::Shutdown)?
    }

    /// The answer if it has come; None while it is pending.
    pub fn try_take(&mut self) -> Option<Result<u64, TpError>> {
        match self.0.try_recv() {
            Ok(r) => Some(r),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(TpError::Shutdown)),
        }
    }
}

pub struct Subscription {
    pub queue: Arc<SubQueue>,
    /// The tp's sequence when the subscription began (kdb+ `r.q`'s count).
    pub current_seq: u64,
    /// Journal records `from_seq..=current_seq` the subscriber still lacks.
    pub catchup: Option<JournalReader>,
}

/// A network subscriber's registration (`subscribe_encoded`): its queue
/// gets the encoded form of each update, and it opens its own journal
/// reader for the catch-up (see `catchup`), within the memory bound.
pub struct EncodedSubscription {
    pub queue: Arc<SubQueue>,
    pub current_seq: u64,
    /// The range `from..=to` still lacking, if any.
    pub catchup: Option<(u64, u64)>,
}

/// Connections per port, for /status.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConnectionsInfo {
    pub ilp_tcp: usize,
    pub ilp_tcp_max: usize,
    pub ilp_tcp_refused: u64,
    pub subscription: usize,
    pub subscription_max: usize,
    pub subscription_refused: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TpStatus {
    pub seq: u64,
    pub synced_seq: u64,
    pub rows: u64,
    pub updates: u64,
    pub bytes: u64,
    pub commits: u64,
    pub fsync: String,
    pub publish_interval_ms: u64,
    pub journal_dir: String,
    pub poisoned: Option<String>,
    pub subscribers: Vec<SubInfo>,
    /// Bytes held for all subscribers together (an update shared by many
    /// counts once), the bound, and how many were cut off to keep it.
    pub subscriber_memory: SubMemoryInfo,
    pub connections: ConnectionsInfo,
}

pub struct Tickerplant {
    cfg: TpConfig,
    /// The schema writes are checked under now: the configured one, grown
    /// by run-time schema changes (`schema_change`).
    live: Arc<crate::schema_change::LiveSchema>,
    tx: Mutex<Option<crossbeam_channel::Sender<Req>>>,
    committed: tokio::sync::watch::Receiver<u64>,
    gate: Option<Arc<SyncGate>>,
    hub: Arc<Hub>,
    counters: Arc<Counters>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    ilp_connections: ConnLimit,
    sub_connections: ConnLimit,
    role: Arc<crate::role::RoleCell>,
    fences: std::sync::atomic::AtomicU64,
}

impl Tickerplant {
    /// Recovers the journal (see `tickdb_journal::Journal::open`), binds the
    /// schema to it (`schema_binding::bind`: refused with
    /// `OpenError::SchemaMismatch` if it does not fit the records already
    /// journaled; a new or compatibly changed schema is recorded, durably,
    /// before anything is appended) and starts the journal thread, and the
    /// publish timer in timer mode.
    pub fn open(cfg: TpConfig) -> Result<(Arc<Tickerplant>, RecoveryReport), OpenError> {
        Self::open_with_storage(cfg, Arc::new(FsStorage))
    }

    /// `open` over a given storage seam: tests inject EIO, ENOSPC and short
    /// writes through `tickdb_journal::FaultyStorage`.
    pub fn open_with_storage(
        cfg: TpConfig,
        storage: Arc<dyn Storage>,
    ) -> Result<(Arc<Tickerplant>, RecoveryReport), OpenError> {
        std::fs::create_dir_all(&cfg.journal_dir).map_err(|e| {
            OpenError::Io(format!(
                "cannot create journal directory {}: {e}",
                cfg.journal_dir.display()
            ))
        })?;
        let opts = JournalOptions {
            segment_bytes_max: cfg.segment_bytes_max,
            fsync: cfg.fsync,
            recovery: cfg.recovery,
            // A standby's segments start where its primary's did.
            roll: if cfg.standby_of.is_some() {
                tickdb_journal::RollPolicy::Manual
            } else {
                tickdb_journal::RollPolicy::Automatic
            },
            first_seq: cfg.first_seq,
        };
        let (journal, report) = Journal::open_with(storage.clone(), &cfg.journal_dir, opts)
            .map_err(|e| {
                let hint = if e.is_corruption() && cfg.recovery == RecoveryMode::Strict {
                    ". Nothing was changed. Inspect with `tickdb journal verify DIR`; start with \
                     --recover-point-in-time to keep the longest consistent prefix (what is cut \
                     is moved aside and reported), or cut it with `tickdb journal repair DIR --yes`"
                } else {
                    ""
                };
                let msg = format!("journal {}: {e}{hint}", cfg.journal_dir.display());
                if e.is_corruption() {
                    OpenError::Corrupt(msg)
                } else {
                    OpenError::Io(msg)
                }
            })?;
        // Before anything is appended, and while the journal's lock is held:
        // the schema must fit the records already there (refused otherwise,
        // with nothing written), and a new or changed schema is recorded.
        let bound = crate::schema_binding::bind(
            &*storage,
            &cfg.journal_dir,
            &cfg.schema,
            &cfg.schema_toml,
            &cfg.schema_origin,
            journal.last_seq(),
            cfg.standby_of.is_some(),
        )?;
        match &bound {
            crate::schema_binding::Bound::Same => {
                tracing::info!(journal = %cfg.journal_dir.display(), "{bound}")
            }
            _ => {
                tracing::warn!(journal = %cfg.journal_dir.display(), schema = %cfg.schema_origin, "{bound}")
            }
        }
        let live = match &bound {
            // The journal's schema: the given one grown at run time.
            crate::schema_binding::Bound::Grown { .. } => {
                let h = tickdb_journal::SchemaHistory::read(&*storage, &cfg.journal_dir)
                    .map_err(|e| OpenError::Io(format!("reading the schema history: {e}")))?
                    .ok_or_else(|| OpenError::Io("the schema history went missing".into()))?;
                let text = h.current().text.clone();
                let s = Schema::parse(&text, "the journal's schema history")
                    .map_err(|e| OpenError::Corrupt(e.to_string()))?;
                crate::schema_change::LiveSchema::new(Arc::new(s), &text)
            }
            _ => crate::schema_change::LiveSchema::new(cfg.schema.clone(), &cfg.schema_toml),
        };
        let live = Arc::new(live);
        let recorder = crate::schema_change::SchemaRecorder::open(
            live.clone(),
            storage.clone(),
            &cfg.journal_dir,
        )
        .map_err(|e| OpenError::Io(format!("reading the schema history: {e}")))?;
        let last = journal.last_seq();
        let hub = Arc::new(Hub::new(
            last,
            cfg.publish_interval_ms > 0,
            cfg.sub_queue_bytes_max,
            cfg.sub_memory_bytes_max,
        ));
        let counters = Arc::new(Counters::default());
        counters.seq.store(last, Ordering::Relaxed);
        counters
            .synced_seq
            .store(journal.synced_seq(), Ordering::Relaxed);
        *counters.epochs.lock() = journal.epoch_history().clone();
        let role = Arc::new(crate::role::RoleCell::new(
            match (&cfg.standby_of, &cfg.start_fenced) {
                (Some(primary), _) => crate::role::Role::Standby {
                    primary: primary.clone(),
                },
                (None, Some(reason)) => crate::role::Role::Fenced {
                    reason: reason.clone(),
                    primary: None,
                },
                (None, None) => crate::role::Role::Primary,
            },
        ));
        let (tx, rx) = crossbeam_channel::bounded(WRITE_QUEUE_REQUESTS_MAX);
        let (committed_tx, committed) = tokio::sync::watch::channel(last);
        let mut threads = Vec::new();
        // A standby's records come from its primary and never pass the
        // gate; it has one all the same, for the day it is promoted.
        let gate = cfg
            .sync
            .map(|p| SyncGate::with_role(p, hub.clone(), last, Some(role.clone())));
        if let Some(g) = &gate {
            let g = g.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("tp-sync-gate".into())
                    .spawn(move || g.run())
                    .map_err(|e| OpenError::Io(format!("spawning the semi-sync gate: {e}")))?,
            );
        }
        {
            let out = Outputs {
                hub: hub.clone(),
                counters: counters.clone(),
                committed: committed_tx,
                gate: gate.clone(),
                role: role.clone(),
                schema: recorder,
            };
            threads.push(
                std::thread::Builder::new()
                    .name("tp-journal".into())
                    .spawn(move || journal_thread::run(journal, rx, out))
                    .map_err(|e| OpenError::Io(format!("spawning journal thread: {e}")))?,
            );
        }
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if cfg.publish_interval_ms > 0 {
            let hub = hub.clone();
            let stopping = stopping.clone();
            let every = std::time::Duration::from_millis(cfg.publish_interval_ms);
            threads.push(
                std::thread::Builder::new()
                    .name("tp-publish-timer".into())
                    .spawn(move || {
                        while !stopping.load(Ordering::Relaxed) {
                            std::thread::sleep(every);
                            hub.flush();
                        }
                    })
                    .map_err(|e| OpenError::Io(format!("spawning timer thread: {e}")))?,
            );
        }
        let ilp_connections = ConnLimit::new(
            "ILP TCP",
            "--ilp-connections-max",
            cfg.ilp_connections_max.max(1),
        );
        let sub_connections = ConnLimit::new(
            "subscriptions",
            "--sub-connections-max",
            cfg.sub_connections_max.max(1),
        );
        Ok((
            Arc::new(Tickerplant {
                live,
                role,
                fences: Default::default(),
                ilp_connections,
                sub_connections,
                cfg,
                tx: Mutex::new(Some(tx)),
                committed,
                gate,
                hub,
                counters,
                threads: Mutex::new(threads),
                stopping,
            }),
            report,
        ))
    }

    pub fn config(&self) -> &TpConfig {
        &self.cfg
    }

    /// The schema as of now: the configured one, grown by run-time schema
    /// changes. Ingest checks each update under the one it reads here.
    pub fn schema(&self) -> Arc<Schema> {
        self.live.schema()
    }

    /// The current schema as TOML (what a subscriber gets at subscribe).
    pub fn schema_toml(&self) -> String {
        self.live.toml().to_string()
    }

    /// Changes the schema at run time (`CREATE TABLE`, `ALTER TABLE ... ADD
    /// COLUMN`; `what` is the statement): checked completely against the
    /// current schema, then recorded in the journal's schema history and
    /// journaled as a schema-change marker at the next sequence number, in
    /// order with the updates (see `schema_change`). Returns the marker's
    /// sequence once journaled under the fsync policy and published, or
    /// None when nothing changes (`IF NOT EXISTS` of what exists). An
    /// error changes nothing.
    pub async fn change_schema(
        &self,
        ops: Vec<tickdb_core::schema_change::SchemaOp>,
        what: &str,
    ) -> Result<Option<u64>, TpError> {
        if let Some(refused) = self.role.refusal() {
            return Err(refused);
        }
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock().clone().ok_or(TpError::Shutdown)?;
        tx.send(Req::SchemaChange(crate::schema_change::SchemaChangeReq {
            ops,
            what: what.to_string(),
            reply,
        }))
        .map_err(|_| TpError::Shutdown)?;
        let seq = rx.await.map_err(|_| TpError::Shutdown)??;
        Ok((seq > 0).then_some(seq))
    }

    /// The bound on connections to the ILP TCP port.
    pub fn ilp_connections(&self) -> &ConnLimit {
        &self.ilp_connections
    }

    /// The bound on connections to the subscription port.
    pub fn sub_connections(&self) -> &ConnLimit {
        &self.sub_connections
    }

    fn request(
        &self,
        batches: Vec<Batch>,
    ) -> Result<oneshot::Receiver<Result<u64, TpError>>, TpError> {
        if let Some(refused) = self.role.refusal() {
            return Err(refused);
        }
        // An end-of-day marker's one row is a date, not a tick.
        let rows = batches
            .iter()
            .filter(|b| !b.is_marker())
            .map(|b| b.rows)
            .sum();
        let payload = tickdb_core::codec::encode_to_vec(&batches);
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock().clone().ok_or(TpError::Shutdown)?;
        tx.send(Req::Write(WriteReq {
            batches,
            payload,
            rows,
            reply,
        }))
        .map_err(|_| TpError::Shutdown)?;
        Ok(rx)
    }

    /// Journals an update and returns its sequence number once it is
    /// journaled under the fsync policy (after the fsync under `always`) and
    /// published. Batches must already fit the schema (ingest checks).
    pub async fn write(&self, batches: Vec<Batch>) -> Result<u64, TpError> {
        let rx = self.request(batches)?;
        rx.await.map_err(|_| TpError::Shutdown)?
    }

    /// `write` in two steps, for writers that pipeline (kdb+ IPC async
    /// messages): the update is queued to the journal now, so updates are
    /// journaled in the order of these calls, and the returned `WriteAck`
    /// resolves as `write` does.
    pub fn submit(&self, batches: Vec<Batch>) -> Result<WriteAck, TpError> {
        Ok(WriteAck(self.request(batches)?))
    }

    /// `write` for threads outside the async runtime.
    pub fn write_blocking(&self, batches: Vec<Batch>) -> Result<u64, TpError> {
        let rx = self.request(batches)?;
        rx.blocking_recv().map_err(|_| TpError::Shutdown)?
    }

    /// A standby's follower: appends its primary's records byte for byte
    /// (each checked: CRC, and the next sequence), starting segments where
    /// the primary did, publishes them to this tp's subscribers, and returns
    /// the last sequence once committed under the fsync policy (after the
    /// fsync under `always`).
    pub async fn append_replicated(&self, items: Vec<ReplicatedItem>) -> Result<u64, TpError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock().clone().ok_or(TpError::Shutdown)?;
        tx.send(Req::Replicated(ReplicatedReq { items, reply }))
            .map_err(|_| TpError::Shutdown)?;
        rx.await.map_err(|_| TpError::Shutdown)?
    }

    /// The last committed sequence, changing as commits happen (replication
    /// shippers wait on it).
    pub fn committed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.committed.clone()
    }

    /// The highest sequence fsynced.
    pub fn synced_seq(&self) -> u64 {
        self.counters.synced_seq.load(Ordering::Relaxed)
    }

    /// The semi-sync gate, on a primary run with `--replication semi-sync`.
    pub fn sync_gate(&self) -> Option<&Arc<SyncGate>> {
        self.gate.as_ref()
    }

    /// The primary this tp follows, on a standby.
    pub fn standby_of(&self) -> Option<String> {
        match self.role.get() {
            crate::role::Role::Standby { primary } => Some(primary),
            _ => None,
        }
    }

    /// Whether this tp takes writes (primary), follows (standby) or is
    /// fenced.
    pub fn role(&self) -> crate::role::Role {
        self.role.get()
    }

    /// The epoch this tp's journal is at (records it writes carry it).
    pub fn epoch(&self) -> u32 {
        self.counters.epochs.lock().last_epoch()
    }

    /// The epoch that wrote `seq`, without copying the history (the write
    /// path answers every acknowledgement with it).
    pub fn epoch_at(&self, seq: u64) -> u32 {
        self.counters.epochs.lock().epoch_at(seq)
    }

    /// Which epoch wrote which records of this tp's journal.
    pub fn epoch_history(&self) -> tickdb_journal::EpochHistory {
        self.counters.epochs.lock().clone()
    }

    /// Stops taking writes at once: requests not yet journaled are refused,
    /// and no write is acknowledged from now on, also those journaled
    /// already (they may be cut when this node rejoins as a standby).
    pub fn fence(&self, reason: &str, primary: Option<String>) {
        if self.role.get() == crate::role::Role::Primary {
            self.fences.fetch_add(1, Ordering::Relaxed);
        }
        self.role.set(crate::role::Role::Fenced {
            reason: reason.to_string(),
            primary,
        });
    }

    /// A standby learned where clients write to its primary.
    pub fn set_primary_endpoints(&self, http: &str, ilp: &str) {
        self.role.set_primary_endpoints(http, ilp);
    }

    /// The primary's HTTP and ILP TCP addresses, on a standby that knows.
    pub fn primary_endpoints(&self) -> Option<(String, String)> {
        self.role.primary_endpoints()
    }

    /// A primary under a leader lease takes writes only until `until`.
    pub fn set_lease_deadline(&self, until: Option<std::time::Instant>) {
        self.role.set_lease_deadline(until);
    }

    /// How long the leader lease still lets this primary take writes.
    pub fn lease_left(&self) -> Option<std::time::Duration> {
        self.role.lease_left()
    }

    /// Times this tp stopped taking writes as a primary (fenced).
    pub fn fences_total(&self) -> u64 {
        self.fences.load(Ordering::Relaxed)
    }

    /// A fenced primary that learned it still holds its epoch (its lease
    /// was renewed in time) takes writes again.
    pub fn unfence(&self) {
        if matches!(self.role.get(), crate::role::Role::Fenced { .. }) {
            self.role.set(crate::role::Role::Primary);
        }
    }

    /// The last sequence journaled once every write queued before this call
    /// is committed (or refused): after `fence`, nothing journals past it.
    pub async fn barrier(&self) -> Result<u64, TpError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock().clone().ok_or(TpError::Shutdown)?;
        tx.send(Req::Barrier(reply))
            .map_err(|_| TpError::Shutdown)?;
        rx.await.map_err(|_| TpError::Shutdown)?
    }

    /// Promotion: this standby (or fenced node) becomes the primary in
    /// `epoch`. Everything it received is journaled before the epoch
    /// begins (the caller has stopped its follower); the journal records
    /// the epoch durably and rolls its segments itself from now on, and
    /// then writes are taken. Returns the sequence the epoch starts after.
    pub async fn promote(&self, epoch: u32) -> Result<u64, TpError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock().clone().ok_or(TpError::Shutdown)?;
        tx.send(Req::BeginEpoch(journal_thread::BeginEpochReq {
            epoch,
            reply,
        }))
        .map_err(|_| TpError::Shutdown)?;
        let last = rx.await.map_err(|_| TpError::Shutdown)??;
        if let Some(g) = &self.gate {
            g.start_at(last);
        }
        self.role.set(crate::role::Role::Primary);
        Ok(last)
    }

    /// `--ilp-auto-create`: creates the tables and columns the ILP lines
    /// in `body` name that the schema lacks (`tickdb_ilp::infer`), as one
    /// schema change. Returns whether the schema changed; false when
    /// auto-creation is off or nothing is missing (the caller then reports
    /// the line's error as it is).
    pub async fn auto_create(&self, body: &[u8]) -> Result<bool, TpError> {
        if !self.cfg.ilp_auto_create {
            return Ok(false);
        }
        let ops = tickdb_ilp::infer::missing(&self.schema(), body);
        if ops.is_empty() {
            return Ok(false);
        }
        let what = tickdb_core::schema_change::SchemaOp::describe_all(&ops);
        let seq = self
            .change_schema(ops, &format!("ILP auto-create: {what}"))
            .await?;
        Ok(seq.is_some())
    }

    /// Journals an update that arrived already encoded (a subscriber
    /// publishing back, like kdb+'s aggregation engine): it is decoded
    /// against the schema first, so nothing unchecked reaches the journal.
    pub async fn write_payload(&self, payload: &[u8]) -> Result<u64, TpError> {
        // A publisher that built it before a column was added: nulls in it.
        let batches = tickdb_core::codec::decode_widened(payload, &self.schema())
            .map_err(|e| TpError::BadInput(e.to_string()))?;
        if batches.iter().any(|b| b.schema_change_text().is_some()) {
            return Err(TpError::BadInput(
                "a schema change cannot be written as an update: use CREATE TABLE or ALTER TABLE"
                    .into(),
            ));
        }
        self.write(batches).await
    }

    /// Empties `tables` (every table if empty) in every subscriber at one
    /// sequence number: journals and publishes a clear marker per table (the
    /// end-of-day purge, kdb+'s `.u.end`; an operator's clear). Returns the
    /// update's sequence once journaled under the fsync policy.
    pub async fn clear_tables(&self, tables: &[String]) -> Result<u64, TpError> {
        let schema = self.schema();
        let names: Vec<String> = if tables.is_empty() {
            schema.tables.iter().map(|t| t.name.clone()).collect()
        } else {
            tables.to_vec()
        };
        let mut batches = Vec::with_capacity(names.len());
        for n in &names {
            if schema.table(n).is_none() {
                return Err(TpError::BadInput(format!(
                    "cannot clear table '{n}': no such table in the schema"
                )));
            }
            batches.push(Batch::clear_marker(n));
        }
        self.write(batches).await
    }

    /// Ends the trading day `date` (days since 1970-01-01) in every
    /// subscriber at one sequence number, kdb+'s `.u.end`: journals and
    /// publishes an end-of-day marker, then rolls the journal so the next
    /// day starts a segment. Rows journaled before the marker are `date`'s,
    /// rows after it the next day's. Returns the marker's sequence once
    /// journaled under the fsync policy.
    pub async fn end_of_day(&self, date: i32) -> Result<u64, TpError> {
        self.write(vec![Batch::end_of_day(date)]).await
    }

    /// Removes the journal segments whose records are all at or before
    /// `upto_seq` (never the segment being written). The caller must hold
    /// those records durably elsewhere: an rdb's Hot Restart checkpoint at
    /// `upto_seq` or later. Returns after the directory fsync.
    pub fn trim_journal(&self, upto_seq: u64) -> Result<tickdb_journal::TrimReport, TpError> {
        tickdb_journal::trim(&FsStorage, &self.cfg.journal_dir, upto_seq.min(self.seq()))
            .map_err(|e| TpError::Io(format!("trimming the journal: {e}")))
    }

    /// Registers a subscriber that has applied everything before `from_seq`
    /// and applies decoded batches (the rdb inside `tickdb up`): it reads
    /// the catch-up from the journal itself, a record at a time.
    pub fn subscribe(
        &self,
        name: &str,
        filter: SubFilter,
        from_seq: u64,
    ) -> Result<Subscription, TpError> {
        let (queue, current_seq) = self.hub.subscribe(name, filter, SubForm::Batches);
        let catchup = if from_seq <= current_seq {
            match self.open_journal_reader(from_seq, current_seq) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.hub.unsubscribe(queue.id());
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok(Subscription {
            queue,
            current_seq,
            catchup,
        })
    }

    /// Registers a network subscriber that has applied everything before
    /// `from_seq`: its queue holds only the encoded updates.
    pub fn subscribe_encoded(
        &self,
        name: &str,
        filter: SubFilter,
        from_seq: u64,
    ) -> EncodedSubscription {
        let (queue, current_seq) = self.hub.subscribe(name, filter, SubForm::Encoded);
        EncodedSubscription {
            queue,
            current_seq,
            catchup: (from_seq <= current_seq).then_some((from_seq.max(1), current_seq)),
        }
    }

    /// A reader over journal records `from_seq..=to_seq` (committed).
    pub fn open_journal_reader(
        &self,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<JournalReader, TpError> {
        JournalReader::open(&self.cfg.journal_dir, from_seq.max(1), to_seq).map_err(|e| {
            TpError::Io(match e {
                JournalError::MissingSegment {
                    found, expected, ..
                } if expected < found => {
                    format!(
                        "the journal no longer holds seq {expected}: it starts at seq {found} \
                         (trimmed behind a checkpoint, or segments removed); subscribe from \
                         seq {found} or later"
                    )
                }
                e => format!("opening journal for replay: {e}"),
            })
        })
    }

    pub fn unsubscribe(&self, id: u64) {
        self.hub.unsubscribe(id);
    }

    pub fn seq(&self) -> u64 {
        self.counters.seq.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> TpStatus {
        let c = &self.counters;
        TpStatus {
            seq: c.seq.load(Ordering::Relaxed),
            synced_seq: c.synced_seq.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            updates: c.updates.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            fsync: format!("{:?}", self.cfg.fsync),
            publish_interval_ms: self.cfg.publish_interval_ms,
            journal_dir: self.cfg.journal_dir.display().to_string(),
            poisoned: c.poisoned.lock().clone(),
            subscribers: self.hub.subscribers(),
            subscriber_memory: self.hub.memory().info(),
            connections: ConnectionsInfo {
                ilp_tcp: self.ilp_connections.open(),
                ilp_tcp_max: self.ilp_connections.max(),
                ilp_tcp_refused: self.ilp_connections.refused(),
                subscription: self.sub_connections.open(),
                subscription_max: self.sub_connections.max(),
                subscription_refused: self.sub_connections.refused(),
            },
        }
    }

    /// Stops accepting writes, lets the journal thread finish what it has
    /// (a final sync), and closes every subscription.
    pub fn shutdown(&self) {
        self.tx.lock().take();
        self.stopping.store(true, Ordering::Relaxed);
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}
