//! Replication wiring for a node: the replication port every node serves
//! (its standbys follow it; a standby's own standbys are chained to it),
//! and, on a standby, the follower and the schema it adopts from its
//! primary before its tickerplant opens.

use crate::config::ReplArgs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tickdb_replication::auth::{Secret, SecretSource};
use tickdb_replication::primary::{self, PrimaryOptions};
use tickdb_replication::protocol::Mode;
use tickdb_replication::shipper::ShipOptions;
use tickdb_replication::standby::{self, Connected, FollowOptions, Follower};
use tickdb_replication::status::Standbys;
use tickdb_replication::ReplError;
use tickdb_tp::Tickerplant;
use tokio::net::TcpListener;

/// A node's replication: its standbys, and on a standby its follower.
pub struct Replication {
    pub name: String,
    pub mode: Mode,
    pub standbys: Arc<Standbys>,
    /// On a standby: the follower and its task (gone once promoted).
    follower: parking_lot::Mutex<Option<(Arc<Follower>, tokio::task::JoinHandle<()>)>>,
    pub secret_source: SecretSource,
    /// One promotion at a time.
    pub promoting: tokio::sync::Mutex<()>,
    pub failover: Arc<crate::failover::FailoverState>,
    /// With --etcd: automatic failover's client and settings.
    pub etcd: Option<Arc<crate::leader::Etcd>>,
    /// `--primary-tls-ca`: the CAs this node trusts in its peers'
    /// certificates; a switchover's call to the standby's HTTP API speaks
    /// TLS with it (peers started with --tls-cert serve HTTP on TLS only).
    pub peer_tls: Option<tickdb_net::tls::ClientTls>,
}

/// What a node needs before its tickerplant opens.
pub struct Prepared {
    pub secret: Secret,
    pub secret_source: SecretSource,
    pub name: String,
    /// On a standby: the schema (TOML) adopted from the primary, and the
    /// handshake already made, which the follower goes on with.
    pub standby: Option<(String, Option<Connected>)>,
    /// On a standby that needed records its primary had trimmed: the cut of
    /// the primary's tables it received, to load before anything else.
    pub reseeded: Option<tickdb_replication::reseed::Reseeded>,
    /// On a standby with a journal of its own that its primary refused
    /// (diverged, ahead of it): why. It serves what it has; replication
    /// stays stopped.
    pub refused: Option<String>,
    /// Divergent suffixes cut before the journal opened (an old primary
    /// rejoining), as failover events.
    pub cuts: Vec<serde_json::Value>,
    /// The primary followed: `--standby-of`, the one a demotion named, or
    /// etcd's leader.
    pub standby_of: Option<String>,
    /// With --etcd: the client, and the epoch this node was elected in at
    /// start (it opens fenced and begins it).
    pub etcd: Option<Arc<crate::leader::Etcd>>,
    pub elected: Option<u32>,
    /// `--primary-tls-ca`: how this node speaks TLS to a primary it follows.
    pub tls: Option<tickdb_net::tls::ClientTls>,
}

/// The primary a node follows: the one its demotion named (REJOIN_ENV,
/// set when a primary restarts itself as a standby), else `--standby-of`.
pub fn standby_of(a: &ReplArgs) -> Option<String> {
    std::env::var(crate::failover::REJOIN_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| a.standby_of.clone())
}

/// Where an existing journal ends: its last sequence and that record's
/// CRC (0, 0 for none). Opens it (recovery) and closes it again.
fn local_tail(journal_dir: &Path) -> Result<(u64, u32), String> {
    let has_segments = std::fs::read_dir(journal_dir)
        .map(|d| {
            d.filter_map(|e| e.ok()).any(|e| {
                tickdb_journal::format::parse_segment_file_name(&e.file_name().to_string_lossy())
                    .is_some()
            })
        })
        .unwrap_or(false);
    if !has_segments {
        return Ok((0, 0));
    }
    let opts = tickdb_journal::JournalOptions {
        roll: tickdb_journal::RollPolicy::Manual,
        ..tickdb_journal::JournalOptions::default()
    };
    let (j, _) = tickdb_journal::Journal::open(journal_dir, opts)
        .map_err(|e| format!("journal {}: {e}", journal_dir.display()))?;
    let last = j.last_seq();
    drop(j);
    if last == 0 {
        return Ok((0, 0));
    }
    let mut r =
        tickdb_journal::RawReader::open(journal_dir, last, last).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    match r.read_into(&mut buf) {
        Ok(Some(_)) if buf.len() >= 8 => {
            Ok((last, u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]])))
        }
        other => Err(format!(
            "reading the journal's last record (seq {last}): {other:?}"
        )),
    }
}

/// The schema in force in a journal's schema history.
fn local_schema(journal_dir: &Path) -> Result<String, String> {
    let history = journal_dir.join(tickdb_journal::schema_history::SCHEMA_HISTORY_FILE);
    let bytes = std::fs::read(&history).map_err(|e| format!("{}: {e}", history.display()))?;
    let h = tickdb_journal::SchemaHistory::decode(&bytes, &history).map_err(|e| e.to_string())?;
    Ok(h.current().text.clone())
}

/// Moves a directory aside (kept, never deleted) before a reseed replaces
/// what it held.
fn move_aside(dir: &Path, what: &str, why: &str) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let to = dir.with_file_name(format!("{name}.before-{why}-{stamp}"));
    std::fs::rename(dir, &to).map_err(|e| format!("moving {what} {} aside: {e}", dir.display()))?;
    tracing::warn!(
        "{why}: the old {what} was moved to {} (kept, not deleted)",
        to.display()
    );
    Ok(())
}

/// Resolves the secret and, on a standby, meets the primary before the
/// journal opens: the handshake (retried until the primary answers or
/// refuses), the schema it adopts, and, when it needs records the primary
/// trimmed, the reseed (`hot_dir`, the Hot Restart store, is replaced too).
#[allow(clippy::too_many_arguments)]
pub async fn prepare(
    a: &ReplArgs,
    data_dir: &Path,
    advertised: &crate::failover::Advertised,
    life: &crate::lifecycle::Lifecycle,
    can_reseed: bool,
    hot_dir: Option<&Path>,
) -> Result<Prepared, String> {
    let (secret, source) =
        Secret::resolve(a.repl_secret_file.as_deref(), data_dir).map_err(|e| e.to_string())?;
    let tls = match &a.primary_tls_ca {
        Some(ca) => Some(tickdb_net::tls::client(ca, "--primary-tls-ca")?),
        None => None,
    };
    let name = a
        .node_name
        .clone()
        .unwrap_or_else(|| advertised.repl.clone());
    let journal_dir = data_dir.join("journal");
    let etcd = match &a.etcd {
        Some(urls) => Some(Arc::new(crate::leader::Etcd::new(
            urls,
            &a.cluster,
            a.lease_ttl_s,
            a.fence_margin_ms,
            a.failover_check_ms,
            &name,
            advertised.clone(),
        )?)),
        None => None,
    };
    let mut primary = standby_of(a);
    let mut elected = None;
    if let (Some(e), None) = (&etcd, &primary) {
        let (last, _) = local_tail(&journal_dir)?;
        let epochs = tickdb_journal::EpochHistory::read(&tickdb_journal::FsStorage, &journal_dir)
            .map_err(|e| e.to_string())?;
        match crate::leader::decide_at_start(e, epochs.last_epoch(), last, life).await? {
            crate::leader::StartRole::Primary { epoch } => {
                tracing::warn!("failover: elected primary by etcd in epoch {epoch}");
                elected = Some(epoch);
            }
            crate::leader::StartRole::StandbyOf(p) => {
                tracing::info!("failover: etcd names {p} the primary; following it");
                primary = Some(p);
            }
        }
    }
    let Some(primary) = primary else {
        return Ok(Prepared {
            secret,
            secret_source: source,
            name,
            standby: None,
            reseeded: None,
            refused: None,
            cuts: Vec::new(),
            standby_of: None,
            etcd,
            elected,
            tls,
        });
    };
    life.starting(&format!("connecting to the primary {primary}"));
    let opts = FollowOptions {
        primary: primary.clone(),
        name: name.clone(),
        secret: secret.clone(),
        http: advertised.http.clone(),
        tls: tls.clone(),
    };
    let mut delay = standby::RECONNECT_DELAY_MS_MIN;
    let mut cuts = Vec::new();
    let (mut conn, last) = loop {
        let (last, crc) = local_tail(&journal_dir)?;
        let epochs = tickdb_journal::EpochHistory::read(&tickdb_journal::FsStorage, &journal_dir)
            .map_err(|e| e.to_string())?;
        match standby::connect_any(&opts, last, crc, &epochs, can_reseed).await {
            Ok(c) => break (c, last),
            Err(ReplError::Diverged {
                keep_through,
                primary_epoch,
                reason,
            }) => {
                // An old primary rejoining: what it wrote after the fork
                // was never in the new primary's history (in semi-sync,
                // never acknowledged). Cut it, keeping a copy, and go on.
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let copy = data_dir.join(format!("cut-{stamp}-after-{keep_through}"));
                let jd = journal_dir.clone();
                let cut = tokio::task::spawn_blocking(move || {
                    tickdb_journal::cut_after(&jd, keep_through, &copy)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cutting the journal after seq {keep_through}: {e}"))?;
                // The Hot Restart store may hold the cut rows.
                if let Some(hot) = hot_dir.filter(|h| {
                    std::fs::read_dir(h)
                        .map(|mut d| d.next().is_some())
                        .unwrap_or(false)
                }) {
                    move_aside(hot, "Hot Restart store", "cut")?;
                }
                cuts.push(serde_json::json!({
                    "primary": primary,
                    "primary_epoch": primary_epoch,
                    "kept_through": cut.kept_through,
                    "from_seq": cut.from_seq,
                    "to_seq": cut.to_seq,
                    "records": cut.records,
                    "rows": cut.rows,
                    "copy": cut.copy_dir.display().to_string(),
                    "files": cut.files,
                    "why": reason,
                }));
                tracing::warn!("rejoin: {cut}");
            }
            // A standby with a journal of its own starts without its
            // primary: refused (diverged beyond a cut, ahead of it), it
            // serves what it has; unreachable (it may be the one that is
            // gone), it also can be promoted, and its follower keeps trying.
            Err(e) if last > 0 => {
                let refused = match e {
                    ReplError::Refused(r) => {
                        tracing::error!("replication stopped: {r}");
                        Some(r)
                    }
                    e => {
                        tracing::warn!("standby: {e}; starting from this journal (seq {last}) and following the primary once it answers");
                        None
                    }
                };
                return Ok(Prepared {
                    secret,
                    secret_source: source,
                    name,
                    standby: Some((local_schema(&journal_dir)?, None)),
                    reseeded: None,
                    refused,
                    cuts,
                    standby_of: Some(primary),
                    etcd,
                    elected: None,
                    tls,
                });
            }
            Err(ReplError::Refused(r)) => return Err(r),
            Err(e) => {
                tracing::warn!("standby: {e}; retrying in {delay} ms");
                tokio::time::sleep(Duration::from_millis(delay)).await;
                delay = (delay * 2).min(standby::RECONNECT_DELAY_MS_MAX);
            }
        }
    };
    let mut reseeded = None;
    if let Some(h) = conn.reseed {
        tracing::warn!(
            "standby: this journal ends at seq {last}, and the primary's starts at seq {} (trimmed): reseeding from the primary's tables as of seq {}",
            conn.first_seq_held,
            h.seq
        );
        if last > 0 {
            move_aside(&journal_dir, "journal", "reseed")?;
        } else {
            // Nothing was journaled here: only what start-up made (the
            // directory, its lock file, a schema history).
            let _ = std::fs::remove_dir_all(&journal_dir);
        }
        if let Some(hot) = hot_dir.filter(|h| {
            std::fs::read_dir(h)
                .map(|mut d| d.next().is_some())
                .unwrap_or(false)
        }) {
            move_aside(hot, "Hot Restart store", "reseed")?;
        }
        life.loading("reseeding from the primary (rows)", h.rows);
        let l = life.clone();
        let progress = move |done: u64, _total: u64| l.progress(done);
        reseeded = conn
            .receive_reseed(data_dir, &progress)
            .await
            .map_err(|e| e.to_string())?;
    }
    let text =
        standby::adopt_schema(&journal_dir, &conn.schema_history).map_err(|e| e.to_string())?;
    Ok(Prepared {
        secret,
        secret_source: source,
        name,
        standby: Some((text, Some(conn))),
        reseeded,
        refused: None,
        cuts,
        standby_of: Some(primary),
        etcd,
        elected: None,
        tls,
    })
}

/// An rdb's tables as reseed cuts for standbys.
pub struct RdbSnapshots(pub Arc<tickdb_rdb::Rdb>);

struct RdbCut {
    seq: u64,
    tables: Vec<tickdb_core::store::TableSnapshot>,
    rows: u64,
    table: usize,
    chunk: usize,
}

impl tickdb_replication::reseed::SnapshotSource for RdbSnapshots {
    fn cut(&self) -> Result<Box<dyn tickdb_replication::reseed::SnapshotCut>, String> {
        let cut = self.0.consistent_cut().map_err(|e| e.to_string())?;
        let (seq, tables) = (cut.seq, cut.tables);
        let rows = tables.iter().map(|t| t.rows as u64).sum();
        Ok(Box::new(RdbCut {
            seq,
            tables,
            rows,
            table: 0,
            chunk: 0,
        }))
    }
}

impl tickdb_replication::reseed::SnapshotCut for RdbCut {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn tables(&self) -> u32 {
        self.tables.len() as u32
    }

    fn rows(&self) -> u64 {
        self.rows
    }

    fn next_payload(&mut self) -> Result<Option<Vec<u8>>, String> {
        while let Some(t) = self.tables.get(self.table) {
            if let Some(c) = t.chunks.get(self.chunk) {
                self.chunk += 1;
                if c.batch.num_rows() == 0 {
                    continue;
                }
                let b = tickdb_core::from_arrow::batch_from_arrow(&t.def.name, &c.batch)
                    .map_err(|e| format!("table '{}': {e}", t.def.name))?;
                return Ok(Some(tickdb_core::codec::encode_to_vec(&[b])));
            }
            self.table += 1;
            self.chunk = 0;
        }
        Ok(None)
    }
}

/// Loads a reseed's spooled tables into a new rdb (then removes the spool).
pub fn load_reseed(
    rdb: &tickdb_rdb::Rdb,
    r: &tickdb_replication::reseed::Reseeded,
) -> Result<(), String> {
    let schema = rdb.store().schema().clone();
    rdb.load_cut(r.seq, |apply| {
        tickdb_replication::reseed::read_spool(&r.spool, |payload| {
            for b in
                tickdb_core::codec::decode(payload, Some(&schema)).map_err(|e| e.to_string())?
            {
                apply(&b)?;
            }
            Ok(())
        })
    })
    .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&r.spool);
    tracing::info!("reseed: {} rows loaded as of seq {}", r.rows, r.seq);
    Ok(())
}

/// Serves the replication port (TLS only with `tls`, the node's
/// `--tls-cert`), and on a standby follows the primary. `applied` is the
/// node's rdb's applied sequence (0 without an rdb).
#[allow(clippy::too_many_arguments)]
pub fn start(
    listener: TcpListener,
    tls: Option<tickdb_net::tls::TlsAcceptor>,
    tp: &Arc<Tickerplant>,
    a: &ReplArgs,
    prepared: Prepared,
    applied: Arc<dyn Fn() -> u64 + Send + Sync>,
    snapshots: Option<Arc<dyn tickdb_replication::reseed::SnapshotSource>>,
    advertised: crate::failover::Advertised,
) -> Arc<Replication> {
    let mode = a.mode();
    let standbys = Arc::new(Standbys::default());
    let opts = Arc::new(PrimaryOptions {
        name: prepared.name.clone(),
        ship: ShipOptions {
            mode,
            interval: Duration::from_secs(a.forward_interval_s.max(1)),
        },
        secret: prepared.secret.clone(),
        snapshots,
        http: advertised.http.clone(),
        ilp: advertised.ilp.clone(),
        tls: tls.map(tickdb_net::tls::ServerTls),
    });
    tokio::spawn(primary::serve(listener, tp.clone(), opts, standbys.clone()));
    let failover = Arc::new(crate::failover::FailoverState {
        advertised: advertised.clone(),
        ..Default::default()
    });
    for c in &prepared.cuts {
        failover.event("cut", c.clone());
    }
    let follower = prepared.standby.map(|(_, first)| {
        let primary = prepared.standby_of.clone().unwrap_or_default();
        let rejoin_to = primary.clone();
        let f = Follower::new(FollowOptions {
            primary,
            name: prepared.name.clone(),
            secret: prepared.secret.clone(),
            http: advertised.http.clone(),
            tls: prepared.tls.clone(),
        });
        let (f2, tp2) = (f.clone(), tp.clone());
        let task = tokio::spawn(async move {
            let why = f2.run(tp2.clone(), first, applied).await;
            match why {
                ReplError::Refused(r) if r == "halted" => {}
                // The primary proved (authenticated) that this journal holds
                // records its history never had: an old primary that started
                // from its own journal while the new one was unreachable.
                // Restarting as a rejoining standby cuts them, keeping a
                // copy, exactly as a start that got this answer does; without
                // it the standby would stay stopped until someone restarted it.
                ReplError::Diverged { .. } => {
                    tracing::warn!("standby: {why}; restarting to cut and rejoin");
                    crate::failover::rejoin_as_standby(&tp2, &rejoin_to).await;
                }
                why => tracing::error!(
                    "standby: replication has stopped and will not resume by itself: {why}"
                ),
            }
        });
        (f, task)
    });
    Arc::new(Replication {
        name: prepared.name,
        mode,
        standbys,
        follower: parking_lot::Mutex::new(follower),
        secret_source: prepared.secret_source,
        promoting: tokio::sync::Mutex::new(()),
        failover,
        etcd: prepared.etcd,
        peer_tls: prepared.tls,
    })
}

impl Replication {
    /// The follower, on a standby not promoted.
    pub fn follower(&self) -> Option<Arc<Follower>> {
        self.follower.lock().as_ref().map(|(f, _)| f.clone())
    }

    /// Stops following the primary and waits until the follower has
    /// stopped; returns the newest epoch it heard its primary was at.
    pub async fn halt_follower(&self) -> u32 {
        let Some((f, task)) = self.follower.lock().take() else {
            return 0;
        };
        f.halt();
        let _ = task.await;
        f.primary_epoch()
    }

    /// The primary's replication address as this node knows it.
    pub fn primary_address(&self, tp: &Tickerplant) -> String {
        match tp.role() {
            tickdb_tp::Role::Primary => self.failover.advertised.repl.clone(),
            tickdb_tp::Role::Standby { .. } => {
                self.follower().map(|f| f.following()).unwrap_or_default()
            }
            tickdb_tp::Role::Fenced { primary, .. } => primary.unwrap_or_default(),
        }
    }

    /// The `replication` section of /status.
    pub fn status(&self, tp: &Tickerplant, applied: u64) -> serde_json::Value {
        let seq = tp.seq();
        let role = tp.role();
        let mut v = serde_json::json!({
            "name": self.name,
            "role": role.name(),
            "epoch": tp.epoch(),
            "epochs": tp.epoch_history().entries().iter().map(|e| serde_json::json!({"epoch": e.epoch, "first_seq": e.first_seq})).collect::<Vec<_>>(),
            "primary_address": self.primary_address(tp),
            "advertised": {
                "http": self.failover.advertised.http,
                "repl": self.failover.advertised.repl,
                "ilp": self.failover.advertised.ilp,
                "sub": self.failover.advertised.sub,
            },
            "failover_events": *self.failover.events.lock(),
            "mode": self.mode.name(),
            "secret": self.secret_source.to_string(),
            "standbys": self.standbys.connected(seq),
            "departed": self.standbys.departed(),
        });
        if let Some(g) = tp.sync_gate() {
            v["semi_sync"] = serde_json::to_value(g.status()).unwrap_or_default();
        }
        if let tickdb_tp::Role::Fenced { reason, .. } = &role {
            v["fenced"] = serde_json::json!(reason);
        }
        if let Some(f) = self.follower() {
            v["primary"] = serde_json::to_value(f.status(tp, applied)).unwrap_or_default();
        }
        if let Some(e) = &self.etcd {
            v["etcd"] = e.status(tp);
        }
        v
    }

    /// Prometheus lines.
    pub fn metrics(&self, tp: &Tickerplant, applied: u64, out: &mut String) {
        use std::fmt::Write as _;
        let seq = tp.seq();
        let standbys = self.standbys.connected(seq);
        let _ = writeln!(
            out,
            "# TYPE tickdb_repl_standbys gauge\ntickdb_repl_standbys {}",
            standbys.len()
        );
        type Read = fn(&tickdb_replication::status::StandbyStatus) -> f64;
        let per_standby: [(&str, Read); 3] = [
            ("tickdb_repl_standby_lag_records", |s| s.lag_records as f64),
            ("tickdb_repl_standby_lag_bytes", |s| s.lag_bytes as f64),
            ("tickdb_repl_standby_lag_seconds", |s| s.lag_ms / 1000.0),
        ];
        for (metric, value) in per_standby {
            let _ = writeln!(out, "# TYPE {metric} gauge");
            for s in &standbys {
                let _ = writeln!(out, "{metric}{{standby=\"{}\"}} {}", s.name, value(s));
            }
        }
        if let Some(g) = tp.sync_gate() {
            let st = g.status();
            let _ = writeln!(
                out,
                "# TYPE tickdb_repl_semi_sync_degraded gauge\ntickdb_repl_semi_sync_degraded {}\n\
                 # TYPE tickdb_repl_semi_sync_waiting gauge\ntickdb_repl_semi_sync_waiting {}\n\
                 # TYPE tickdb_repl_semi_sync_refused_total counter\ntickdb_repl_semi_sync_refused_total {}\n\
                 # TYPE tickdb_repl_semi_sync_degradations_total counter\ntickdb_repl_semi_sync_degradations_total {}",
                st.degraded as u8, st.waiting, st.refused_total, st.degradations_total
            );
        }
        self.failover.metrics(tp.fences_total(), out);
        let _ = writeln!(
            out,
            "# TYPE tickdb_epoch gauge\ntickdb_epoch {}\n# TYPE tickdb_primary gauge\ntickdb_primary {}",
            tp.epoch(),
            (tp.role() == tickdb_tp::Role::Primary) as u8
        );
        if let Some(f) = self.follower() {
            let st = f.status(tp, applied);
            let _ = writeln!(
                out,
                "# TYPE tickdb_repl_standby_of_primary_lag_records gauge\ntickdb_repl_standby_of_primary_lag_records {}\n\
                 # TYPE tickdb_repl_standby_streaming gauge\ntickdb_repl_standby_streaming {}",
                st.lag_records,
                (st.state == tickdb_replication::status::LinkState::Streaming) as u8
            );
        }
    }
}
