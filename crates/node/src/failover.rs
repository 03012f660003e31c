//! Changing which node is the primary: promotion (a standby becomes the
//! primary in a new epoch), a planned switchover (the primary fences
//! itself, waits until a standby holds everything, has it promoted, and
//! follows it), and demotion (a node that is no longer the primary restarts
//! itself as a standby of the new one, cutting what it holds that the new
//! primary never had). Every promotion, demotion, fence and cut is logged as
//! one structured line (`event=...`) and counted in /metrics.

use crate::node::Node;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tickdb_net::tls::ClientTls;

/// The environment variable a demoted node re-executes itself with: the
/// replication address of the primary it follows from now on. It replaces
/// `--standby-of` (and `--schema`, which a standby does not take).
pub const REJOIN_ENV: &str = "TICKDB_REJOIN_PRIMARY";
/// How long a promotion asked for with `min_seq` waits for the standby's
/// journal to reach it (the records are on their way from the primary).
pub const PROMOTE_CATCH_UP_MS_MAX: u64 = 3_000;
/// Default time a switchover waits for the standby to hold everything.
pub const SWITCHOVER_TIMEOUT_MS: u64 = 5_000;
/// Time to reach the standby's admin API during a switchover.
pub const ADMIN_CALL_TIMEOUT_MS: u64 = 10_000;
/// Between answering the switchover's caller and re-executing as a standby.
const DEMOTE_DELAY_MS: u64 = 100;

/// What this node tells others about where to reach it.
#[derive(Debug, Clone, Default)]
pub struct Advertised {
    pub http: String,
    pub repl: String,
    pub ilp: String,
    pub sub: String,
}

/// Counters and the last events, for /status and /metrics.
#[derive(Default)]
pub struct FailoverState {
    pub advertised: Advertised,
    pub promotions: AtomicU64,
    pub demotions: AtomicU64,
    pub fences: AtomicU64,
    pub cuts: AtomicU64,
    pub events: Mutex<Vec<Value>>,
}

/// Events kept for /status.
const EVENTS_KEPT: usize = 16;

impl FailoverState {
    /// Logs `event` as one structured line and keeps it for /status.
    pub fn event(&self, event: &str, fields: Value) {
        let counter = match event {
            "promote" => Some(&self.promotions),
            "demote" => Some(&self.demotions),
            "fence" => Some(&self.fences),
            "cut" => Some(&self.cuts),
            _ => None,
        };
        if let Some(c) = counter {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let mut v = json!({ "event": event, "unix_ms": unix_ms() });
        if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
            o.extend(f);
        }
        tracing::warn!(target: "tickdb::failover", "{v}");
        let mut e = self.events.lock();
        if e.len() >= EVENTS_KEPT {
            e.remove(0);
        }
        e.push(v);
    }

    /// `fences`: the tp's count (a deposed primary is fenced by the
    /// replication listener too, which keeps no failover state).
    pub fn metrics(&self, fences: u64, out: &mut String) {
        use std::fmt::Write as _;
        for (name, n) in [
            (
                "tickdb_failover_promotions_total",
                self.promotions.load(Ordering::Relaxed),
            ),
            (
                "tickdb_failover_demotions_total",
                self.demotions.load(Ordering::Relaxed),
            ),
            ("tickdb_failover_fences_total", fences),
            (
                "tickdb_failover_cuts_total",
                self.cuts.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {n}");
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A failed admin request: the HTTP status and why.
#[derive(Debug)]
pub struct AdminError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

fn err(status: u16, code: &'static str, message: impl Into<String>) -> AdminError {
    AdminError {
        status,
        code,
        message: message.into(),
    }
}

/// The tickerplant and replication a role change works on.
type Parts<'a> = (
    &'a std::sync::Arc<tickdb_tp::Tickerplant>,
    &'a std::sync::Arc<crate::replication::Replication>,
);

fn parts(node: &Node) -> Result<Parts<'_>, AdminError> {
    match (node.tp(), node.replication()) {
        (Some(tp), Some(repl)) => Ok((tp, repl)),
        _ => Err(err(
            503,
            "not_ready",
            "this node has no tickerplant open yet",
        )),
    }
}

/// Makes this standby the primary. `min_seq`: refuse unless its journal
/// holds that sequence (a switchover's guarantee that nothing is lost),
/// waiting up to PROMOTE_CATCH_UP_MS_MAX for it. `epoch`: the epoch to
/// begin (from etcd); otherwise one above every epoch this node knows of.
pub async fn promote(
    node: &Node,
    min_seq: Option<u64>,
    epoch: Option<u32>,
    why: &str,
) -> Result<Value, AdminError> {
    let (tp, repl) = parts(node)?;
    let _one_at_a_time = repl.promoting.lock().await;
    if tp.role() == tickdb_tp::Role::Primary {
        return Err(err(
            409,
            "already_primary",
            format!("this node is already the primary (epoch {})", tp.epoch()),
        ));
    }
    let started = Instant::now();
    if let Some(want) = min_seq {
        let deadline = Instant::now() + Duration::from_millis(PROMOTE_CATCH_UP_MS_MAX);
        while tp.seq() < want {
            if Instant::now() >= deadline {
                return Err(err(
                    409,
                    "behind",
                    format!(
                        "this standby's journal ends at seq {}, and seq {want} was asked for: not promoted",
                        tp.seq()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    // Nothing more from the old primary: what was received is journaled
    // before the epoch begins (the journal thread takes requests in order).
    let heard = repl.halt_follower().await;
    let epoch = epoch.unwrap_or_else(|| tp.epoch().max(heard) + 1);
    let after = tp.promote(epoch).await.map_err(|e| {
        err(
            500,
            "promote_failed",
            format!("beginning epoch {epoch}: {e}"),
        )
    })?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    repl.failover.event(
        "promote",
        json!({ "epoch": epoch, "after_seq": after, "why": why, "took_ms": ms }),
    );
    Ok(json!({
        "epoch": epoch,
        "after_seq": after,
        "repl": repl.failover.advertised.repl,
        "http": repl.failover.advertised.http,
        "took_ms": ms,
    }))
}

/// A planned switchover from this primary to one of its standbys (`to`: its
/// name, HTTP address or peer address; the only streaming standby when
/// None). Loses nothing, in any replication mode: this node stops taking
/// writes, waits until the standby holds every record durably, has it
/// promoted, then re-executes itself as its standby.
pub async fn switchover(
    node: &Node,
    to: Option<&str>,
    timeout: Duration,
) -> Result<Value, AdminError> {
    let (tp, repl) = parts(node)?;
    if tp.role() != tickdb_tp::Role::Primary {
        return Err(err(
            409,
            "not_primary",
            format!("this node is {}, not the primary", tp.role().name()),
        ));
    }
    let standbys = repl.standbys.connected(tp.seq());
    let candidates: Vec<_> = standbys
        .iter()
        .filter(|s| match to {
            Some(t) => s.name == t || s.http == t || s.peer == t,
            None => true,
        })
        .collect();
    let target = match candidates.as_slice() {
        [one] => (*one).clone(),
        [] => {
            return Err(err(
                409,
                "no_standby",
                match to {
                    Some(t) => format!("no connected standby is named {t}"),
                    None => "no standby is connected".to_string(),
                },
            ))
        }
        _ => {
            return Err(err(
                409,
                "ambiguous",
                format!(
                    "{} standbys are connected: name one with to= ({})",
                    candidates.len(),
                    candidates
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        }
    };
    if target.http.is_empty() {
        return Err(err(
            409,
            "no_http",
            format!(
                "the standby {} did not say where its HTTP port is",
                target.name
            ),
        ));
    }
    let started = Instant::now();
    let reason = format!("switchover to {}", target.name);
    tp.fence(&reason, None);
    repl.failover
        .event("fence", json!({ "reason": reason, "epoch": tp.epoch() }));
    // Writes taken before the fence may still be on their way to the
    // journal (and to subscribers): wait until they are journaled, so the
    // standby is promoted holding them too.
    let last = match tp.barrier().await {
        Ok(l) => l,
        Err(e) => {
            tp.unfence();
            return Err(err(
                500,
                "journal",
                format!("{e}; this node is the primary again"),
            ));
        }
    };
    // Every record journaled here, durable on the standby.
    let deadline = Instant::now() + timeout;
    let seq = loop {
        let seq = tp.seq().max(last);
        let held = repl
            .standbys
            .connected(seq)
            .into_iter()
            .find(|s| s.name == target.name)
            .map(|s| s.durable_seq);
        match held {
            Some(d) if d >= seq => break seq,
            None => {
                tp.unfence();
                return Err(err(
                    503,
                    "standby_gone",
                    format!(
                        "the standby {} disconnected; this node is the primary again",
                        target.name
                    ),
                ));
            }
            _ if Instant::now() >= deadline => {
                tp.unfence();
                return Err(err(
                    504,
                    "timeout",
                    format!(
                        "the standby {} did not hold seq {seq} durably within {} ms; this node is the primary again",
                        target.name,
                        timeout.as_millis()
                    ),
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    };
    let answer = admin_post(
        repl.peer_tls.as_ref(),
        &target.http,
        &format!("/admin/promote?min_seq={seq}&why=switchover"),
    )
    .await;
    let answer = match answer {
        Ok((200, body)) => body,
        Ok((status, body)) => {
            tp.unfence();
            return Err(err(
                502,
                "promote_refused",
                format!("the standby {} refused to be promoted ({status}): {body}; this node is the primary again", target.name),
            ));
        }
        Err(e) => {
            // It may have been promoted all the same: stay fenced rather
            // than risk two primaries.
            return Err(err(
                502,
                "promote_unknown",
                format!("promoting the standby {} at {}: {e}. This node stays fenced: check the standby's /status, then restart this node as its standby or unfence it by restarting it as a primary", target.name, target.http),
            ));
        }
    };
    let v: Value = serde_json::from_str(&answer).unwrap_or_default();
    let new_repl = v["repl"].as_str().unwrap_or_default().to_string();
    let epoch = v["epoch"].as_u64().unwrap_or(0);
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    tp.fence(&reason, Some(new_repl.clone()));
    repl.failover.event(
        "demote",
        json!({ "to": target.name, "primary": new_repl, "epoch": epoch, "at_seq": seq, "took_ms": ms }),
    );
    if !new_repl.is_empty() {
        let tp = tp.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(DEMOTE_DELAY_MS)).await;
            rejoin_as_standby(&tp, &new_repl).await;
        });
    }
    Ok(json!({
        "new_primary": target.name,
        "repl": v["repl"],
        "http": target.http,
        "epoch": epoch,
        "at_seq": seq,
        "took_ms": ms,
    }))
}

/// Restarts this process as a standby of `primary` (its replication
/// address): the journal is synced and closed, then the same command line
/// is executed again with REJOIN_ENV set. The new process cuts what this
/// journal holds that the primary never had, and follows it. Returns only
/// if the exec failed (logged).
pub async fn rejoin_as_standby(tp: &std::sync::Arc<tickdb_tp::Tickerplant>, primary: &str) {
    let tp2 = tp.clone();
    let _ = tokio::task::spawn_blocking(move || tp2.shutdown()).await;
    // /proc/self/exe is this very program even when its file was replaced
    // or removed since it started (an upgrade, a rebuild): the same version
    // restarts.
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| "tickdb".into());
    let args: Vec<std::ffi::OsString> = args.collect();
    tracing::warn!("demotion: restarting as a standby of {primary}");
    use std::os::unix::process::CommandExt as _;
    let e = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env(REJOIN_ENV, primary)
        .exec();
    tracing::error!("demotion: restarting as a standby of {primary} failed: {e}; exiting");
    std::process::exit(75);
}

/// POSTs to another node's HTTP API: (status, body).
/// With `tls`, over TLS (the node at `http` was started with --tls-cert),
/// trusting its CAs.
pub async fn admin_post(
    tls: Option<&ClientTls>,
    http: &str,
    path_and_query: &str,
) -> Result<(u16, String), String> {
    admin_call(tls, "POST", http, path_and_query).await
}

/// GETs from another node's HTTP API (`/status`): (status, body).
pub async fn admin_get(
    tls: Option<&ClientTls>,
    http: &str,
    path_and_query: &str,
) -> Result<(u16, String), String> {
    admin_call(tls, "GET", http, path_and_query).await
}

/// The variables naming the admin user that `tickdb promote`,
/// `switchover` and `eod`, and a node handing over its primary role, log in
/// as on nodes with a users file.
pub const ADMIN_USER_ENV: &str = "TICKDB_ADMIN_USER";
pub const ADMIN_PASSWORD_ENV: &str = "TICKDB_ADMIN_PASSWORD";

/// An `Authorization` header line for the admin user, when both variables
/// are set; empty otherwise.
fn admin_authorization() -> String {
    use base64::Engine;
    match (
        std::env::var(ADMIN_USER_ENV),
        std::env::var(ADMIN_PASSWORD_ENV),
    ) {
        (Ok(u), Ok(p)) => format!(
            "Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        ),
        _ => String::new(),
    }
}

async fn admin_call(
    tls: Option<&ClientTls>,
    method: &str,
    http: &str,
    path_and_query: &str,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let go = async {
        let sock = tokio::net::TcpStream::connect(http)
            .await
            .map_err(|e| format!("connecting to {http}: {e}"))?;
        let mut s = match tls {
            Some(tls) => tls.connect(http, sock).await?,
            None => tickdb_net::stream::Stream::from(sock),
        };
        let req = format!(
            "{method} {path_and_query} HTTP/1.1\r\nHost: {http}\r\n{}Content-Length: 0\r\nConnection: close\r\n\r\n",
            admin_authorization()
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("writing to {http}: {e}"))?;
        // A TLS session holds written bytes until flushed.
        s.flush()
            .await
            .map_err(|e| format!("writing to {http}: {e}"))?;
        let mut buf = Vec::new();
        // A bounded answer: an admin reply is a small JSON object.
        match s.take(1 << 20).read_to_end(&mut buf).await {
            Ok(_) => {}
            // A TLS peer that closes without close_notify after its whole
            // answer (`Connection: close`): the answer is still whole.
            // A node on TLS answers a plaintext request with 400 and
            // closes at once, which can reset the connection under the
            // answer: what arrived of it is still read below.
            Err(_) if buf.starts_with(b"HTTP/") => {}
            Err(e) if tls.is_none() => {
                return Err(format!(
                    "reading from {http}: {e} (a node started with --tls-cert speaks only TLS on its HTTP port: give --tls-ca FILE)"
                ))
            }
            Err(e) => return Err(format!("reading from {http}: {e}")),
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| format!("{http} did not answer HTTP"))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    };
    tokio::time::timeout(Duration::from_millis(ADMIN_CALL_TIMEOUT_MS), go)
        .await
        .map_err(|_| format!("{http} did not answer within {ADMIN_CALL_TIMEOUT_MS} ms"))?
}
