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
    pub follower: Option<Arc<Follower>>,
    pub secret_source: SecretSource,
}

/// What a node needs before its tickerplant opens.
pub struct Prepared {
    pub secret: Secret,
    pub secret_source: SecretSource,
    pub name: String,
    /// On a standby: the schema (TOML) adopted from the primary, and the
    /// handshake already made when that took a connection.
    pub standby: Option<(String, Option<Connected>)>,
}

/// Resolves the secret and, on a standby, the schema: from its own
/// journal's schema history when it has one, else from the primary (the
/// first contact; retried until the primary answers or refuses).
pub async fn prepare(
    a: &ReplArgs,
    data_dir: &Path,
    bind: &str,
    life: &crate::lifecycle::Lifecycle,
) -> Result<Prepared, String> {
    let (secret, source) =
        Secret::resolve(a.repl_secret_file.as_deref(), data_dir).map_err(|e| e.to_string())?;
    let name = a
        .node_name
        .clone()
        .unwrap_or_else(|| format!("{bind}:{}", a.repl_port.port));
    let Some(primary) = a.standby_of.clone() else {
        return Ok(Prepared {
            secret,
            secret_source: source,
            name,
            standby: None,
        });
    };
    let journal_dir = data_dir.join("journal");
    let history = journal_dir.join(tickdb_journal::schema_history::SCHEMA_HISTORY_FILE);
    if let Ok(bytes) = std::fs::read(&history) {
        let h =
            tickdb_journal::SchemaHistory::decode(&bytes, &history).map_err(|e| e.to_string())?;
        return Ok(Prepared {
            secret,
            secret_source: source,
            name,
            standby: Some((h.current().text.clone(), None)),
        });
    }
    life.starting(&format!(
        "connecting to the primary {primary} for its schema"
    ));
    let opts = FollowOptions {
        primary: primary.clone(),
        name: name.clone(),
        secret: secret.clone(),
    };
    let mut delay = standby::RECONNECT_DELAY_MS_MIN;
    let conn = loop {
        match standby::connect(&opts, 0, 0).await {
            Ok(c) => break c,
            Err(ReplError::Refused(r)) => return Err(r),
            Err(e) => {
                tracing::warn!("standby: {e}; retrying in {delay} ms");
                tokio::time::sleep(Duration::from_millis(delay)).await;
                delay = (delay * 2).min(standby::RECONNECT_DELAY_MS_MAX);
            }
        }
    };
    let text =
        standby::adopt_schema(&journal_dir, &conn.schema_history).map_err(|e| e.to_string())?;
    Ok(Prepared {
        secret,
        secret_source: source,
        name,
        standby: Some((text, Some(conn))),
    })
}

/// Serves the replication port, and on a standby follows the primary.
/// `applied` is the node's rdb's applied sequence (0 without an rdb).
pub fn start(
    listener: TcpListener,
    tp: &Arc<Tickerplant>,
    a: &ReplArgs,
    prepared: Prepared,
    applied: Arc<dyn Fn() -> u64 + Send + Sync>,
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
    });
    tokio::spawn(primary::serve(listener, tp.clone(), opts, standbys.clone()));
    let follower = prepared.standby.map(|(_, first)| {
        let primary = a.standby_of.clone().unwrap_or_default();
        let f = Follower::new(FollowOptions {
            primary,
            name: prepared.name.clone(),
            secret: prepared.secret.clone(),
        });
        let (f2, tp2) = (f.clone(), tp.clone());
        tokio::spawn(async move {
            let why = f2.run(tp2, first, applied).await;
            tracing::error!(
                "standby: replication has stopped and will not resume by itself: {why}"
            );
        });
        f
    });
    Arc::new(Replication {
        name: prepared.name,
        mode,
        standbys,
        follower,
        secret_source: prepared.secret_source,
    })
}

impl Replication {
    /// The `replication` section of /status.
    pub fn status(&self, tp: &Tickerplant, applied: u64) -> serde_json::Value {
        let seq = tp.seq();
        let mut v = serde_json::json!({
            "name": self.name,
            "role": if self.follower.is_some() { "standby" } else { "primary" },
            "mode": self.mode.name(),
            "secret": self.secret_source.to_string(),
            "standbys": self.standbys.connected(seq),
            "departed": self.standbys.departed(),
        });
        if let Some(g) = tp.sync_gate() {
            v["semi_sync"] = serde_json::to_value(g.status()).unwrap_or_default();
        }
        if let Some(f) = &self.follower {
            v["primary"] = serde_json::to_value(f.status(tp, applied)).unwrap_or_default();
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
        let _ = writeln!(out, "# TYPE tickdb_repl_standby_lag_records gauge");
        for s in &standbys {
            let _ = writeln!(
                out,
                "tickdb_repl_standby_lag_records{{standby=\"{}\"}} {}",
                s.name, s.lag_records
            );
        }
        let _ = writeln!(out, "# TYPE tickdb_repl_standby_lag_bytes gauge");
        for s in &standbys {
            let _ = writeln!(
                out,
                "tickdb_repl_standby_lag_bytes{{standby=\"{}\"}} {}",
                s.name, s.lag_bytes
            );
        }
        let _ = writeln!(out, "# TYPE tickdb_repl_standby_lag_seconds gauge");
        for s in &standbys {
            let _ = writeln!(
                out,
                "tickdb_repl_standby_lag_seconds{{standby=\"{}\"}} {}",
                s.name,
                s.lag_ms / 1000.0
            );
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
        if let Some(f) = &self.follower {
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
