//! Finding the primary among several tp addresses: a subscriber given
//! `HOST:PORT,HOST:PORT,...` (every node of a failover pair or group)
//! subscribes to whichever is the primary now, so that after a failover it
//! follows the new primary without being told. It sends the epoch of its
//! last record, so a tp that never had that record refuses it instead of
//! handing it a gap or a duplicate.
//!
//! It also holds how this process connects to tps: the user it logs in as
//! (`--tp-user`) and whether it speaks TLS to them (`--tp-tls-ca`).

use crate::proto::{read_message, write_message, Message, TpRole, ROLE_PRIMARY};
use crate::stream::Stream;
use crate::tls::ClientTls;
use crate::NetError;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Time to connect to one address and get its SubscribeOk.
pub const SUBSCRIBE_TIMEOUT_MS: u64 = 3_000;
/// Read buffer of a subscription stream.
const STREAM_BUFFER_BYTES: usize = 1 << 20;

/// The addresses of a comma-separated list, trimmed, empty ones dropped.
pub fn addresses(list: &str) -> Vec<String> {
    list.split(',')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

/// A subscription made.
pub struct Subscribed {
    /// The address that answered.
    pub addr: String,
    pub stream: BufReader<Stream>,
    pub current_seq: u64,
    pub schema_toml: String,
    /// The tp's epoch and role (None from a tp that predates epochs).
    pub role: Option<TpRole>,
}

impl Subscribed {
    fn is_primary(&self) -> bool {
        self.role.as_ref().is_none_or(|r| r.role == ROLE_PRIMARY)
    }
}

/// Why a subscription could not be made anywhere.
#[derive(Debug)]
pub struct SubscribeFailed {
    /// A tp refused the subscriber for what it holds (diverged): retrying
    /// elsewhere or later does not help.
    pub fatal: bool,
    pub reason: String,
}

impl std::fmt::Display for SubscribeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

async fn subscribe_one(
    addr: &str,
    request: &Message,
) -> Result<Result<Subscribed, String>, NetError> {
    let mut stream = BufReader::with_capacity(STREAM_BUFFER_BYTES, connect(addr).await?);
    send_login(stream.get_mut()).await?;
    write_message(stream.get_mut(), request).await?;
    // A TLS session may hold the tail of a write until flushed.
    stream.get_mut().flush().await?;
    Ok(match read_message(&mut stream).await? {
        Some(Message::SubscribeOk {
            current_seq,
            schema_toml,
            role,
        }) => Ok(Subscribed {
            addr: addr.to_string(),
            stream,
            current_seq,
            schema_toml,
            role,
        }),
        Some(Message::Error { message }) => Err(message),
        Some(other) => Err(format!("expected SubscribeOk, got {}", other.name())),
        None => Err("closed the connection".into()),
    })
}

/// This process's user on tp subscription ports (`--tp-user`,
/// `--tp-password`): one identity per process, set once at start, so every
/// connection to a tp (subscriptions, reconnects, publishing) logs in the
/// same way.
static LOGIN: std::sync::OnceLock<Message> = std::sync::OnceLock::new();

/// Sets the user every later connection to a tp logs in as.
pub fn set_login(user: String, password: String) {
    let _ = LOGIN.set(Message::Login { user, password });
}

/// This process's TLS to tp subscription ports (`--tp-tls-ca`): set once
/// at start, like the login, so that every connection to a tp speaks it.
static TLS: std::sync::OnceLock<ClientTls> = std::sync::OnceLock::new();

/// Makes every later connection of this process to a tp speak TLS.
pub fn set_tls(tls: ClientTls) {
    let _ = TLS.set(tls);
}

/// Connects to the tp subscription port at `addr` (HOST:PORT), with TLS
/// when this process was given it (`set_tls`).
pub async fn connect(addr: &str) -> Result<Stream, NetError> {
    let sock = TcpStream::connect(addr).await?;
    // Updates and acknowledgements are small and latency-bound.
    let _ = sock.set_nodelay(true);
    match TLS.get() {
        None => Ok(Stream::Plain(sock)),
        Some(tls) => tls.connect(addr, sock).await.map_err(NetError::Tls),
    }
}

/// Sends `Login` first when this process has a user (`set_login`).
pub async fn send_login<W: tokio::io::AsyncWrite + Unpin>(w: &mut W) -> Result<(), NetError> {
    if let Some(m) = LOGIN.get() {
        write_message(w, m).await?;
    }
    Ok(())
}

/// Subscribes from `from_seq` (whose previous record the subscriber holds
/// from `epoch`) at the primary among `list`, or, when none of them says it
/// is the primary, at the first that answers (a standby serves its
/// primary's updates too).
pub async fn subscribe_any(
    list: &str,
    from_seq: u64,
    tables: &[String],
    symbols: &[String],
    epoch: u32,
) -> Result<Subscribed, SubscribeFailed> {
    let request = Message::Subscribe {
        from_seq,
        tables: tables.to_vec(),
        symbols: symbols.to_vec(),
        epoch: Some(epoch),
    };
    let mut fallback: Option<Subscribed> = None;
    let mut errors = Vec::new();
    for addr in addresses(list) {
        let r = tokio::time::timeout(
            Duration::from_millis(SUBSCRIBE_TIMEOUT_MS),
            subscribe_one(&addr, &request),
        )
        .await;
        match r {
            Ok(Ok(Ok(s))) if s.is_primary() => return Ok(s),
            Ok(Ok(Ok(s))) => {
                if fallback.is_none() {
                    fallback = Some(s);
                }
            }
            Ok(Ok(Err(refused))) if refused.starts_with("diverged") => {
                return Err(SubscribeFailed {
                    fatal: true,
                    reason: format!("tp {addr}: {refused}"),
                })
            }
            Ok(Ok(Err(refused))) => errors.push(format!("{addr}: {refused}")),
            Ok(Err(e)) => errors.push(format!("{addr}: {e}")),
            Err(_) => errors.push(format!(
                "{addr}: no answer within {SUBSCRIBE_TIMEOUT_MS} ms"
            )),
        }
    }
    fallback.ok_or_else(|| SubscribeFailed {
        fatal: false,
        reason: format!("no tp to subscribe to: {}", errors.join("; ")),
    })
}
