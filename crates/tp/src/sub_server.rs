//! The subscription port (`--tp-port`). A connection's first message decides
//! its role:
//! - `Subscribe { from_seq, tables, symbols }`: the tp registers the
//!   subscriber, answers `SubscribeOk { current_seq: S, schema }`, streams
//!   journal records `from_seq..=S` it lacks, then live updates from S+1 —
//!   no gap, no duplicate (kdb+ `r.q`).
//! - `Write { request_id, payload }`: a publisher (the aggregation engine);
//!   each write is journaled and answered with `WriteAck`.
//!
//! What no client can do here: hold more than `--sub-connections-max`
//! connections (more are told so in an `Error` frame and closed); keep a
//! connection that has not sent its first message within
//! `--sub-handshake-timeout-s`; keep a publisher connection that sends
//! nothing for `--publisher-idle-timeout-s`; send a frame larger than an
//! HTTP write request (`--request-bytes-max`); or make the tp hold its
//! updates past the subscriber memory bounds (see `hub`). A subscriber cut
//! off while its socket accepts nothing stops at once: its writes race the
//! queue's closing. Subscribers are never timed out for being quiet: they
//! receive, they need not send.
//!
//! With `--tls-cert` the port speaks only TLS. A plaintext client is told
//! so in an `Error` frame it can read, then closed: the tp peeks at the
//! first three bytes, which tell a TLS ClientHello from a frame (see
//! `tickdb_net::tls::looks_like_client_hello`).

use crate::catchup;
use crate::hub::SubFilter;
use crate::ilp_auth::LoginGate;
use crate::sub_queue::SubQueue;
use crate::tickerplant::Tickerplant;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tickdb_auth::{Role, User};
use tickdb_net::proto::{encode_message, read_message_max, write_message, Message};
use tickdb_net::stream::{Stream, StreamRead, StreamWrite};
use tickdb_net::tls::{Accepted, TlsAcceptor};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpListener;

/// Default bound on connections open at once on the subscription port.
pub const SUB_CONNECTIONS_MAX: usize = 256;
/// Default time a new connection has to send its first message, in seconds.
pub const SUB_HANDSHAKE_TIMEOUT_S: u64 = 10;
/// Default time a publisher may send nothing before it is closed, in
/// seconds (a feed of derived tables may be quiet for a while).
pub const PUBLISHER_IDLE_TIMEOUT_S: u64 = 600;
/// Bytes a connection buffers before a write: enough to send many small
/// updates in one syscall, small enough that hundreds of idle subscribers
/// cost little. Larger payloads go to the socket without a copy.
pub const SUB_WRITE_BUFFER_BYTES: usize = 16 * 1024;
/// How long the tp tries to send a closing `Error` frame to a peer that may
/// not be reading, in milliseconds.
pub const ERROR_SEND_TIMEOUT_MS: u64 = 1000;
/// A `Write` body's bytes before its payload (the request id).
const WRITE_FIXED_BYTES: usize = 8;

/// What a plaintext client on the TLS port is told.
pub const TLS_REQUIRED: &str = "this port speaks TLS only (the node was started with --tls-cert): \
connect with TLS (tickdb rdb and agg: --tp-tls-ca FILE, the CA that signed the node's certificate)";

type Writer = BufWriter<StreamWrite>;

/// Serves the subscription port; with a `gate` (a users file), a
/// connection logs in (`Login`) before it subscribes or publishes; with
/// `tls`, it speaks only TLS.
pub async fn serve(
    listener: TcpListener,
    tp: Arc<Tickerplant>,
    gate: Option<Arc<LoginGate>>,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("subscription accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let limit = tp.sub_connections();
        let Some(permit) = limit.try_open() else {
            // A fresh socket's send buffer is empty, so this small frame
            // goes out at once: the accept loop never waits on a peer.
            let mut frame = Vec::new();
            encode_message(
                &Message::Error {
                    message: limit.refusal_message(),
                },
                &mut frame,
            );
            let _ = sock.try_write(&frame);
            limit.note_refused(&peer.to_string());
            continue;
        };
        let tp = tp.clone();
        let gate = gate.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            let stream = match tls {
                None => Stream::Plain(sock),
                Some(acceptor) => {
                    // The client speaks first (Login or Subscribe, or its
                    // ClientHello), within the handshake timeout.
                    let wait = Duration::from_secs(tp.config().sub_handshake_timeout_s.max(1));
                    match tickdb_net::tls::accept(sock, &acceptor, wait, wait).await {
                        Accepted::Tls(s) => s,
                        Accepted::Plaintext(sock) => {
                            tracing::warn!("{PORT} {peer}: a plaintext client on the TLS port; told to connect with TLS");
                            let mut frame = Vec::new();
                            encode_message(
                                &Message::Error {
                                    message: TLS_REQUIRED.to_string(),
                                },
                                &mut frame,
                            );
                            tickdb_net::tls::refuse_plaintext(sock, &frame).await;
                            return;
                        }
                        Accepted::Failed(why) => {
                            tracing::warn!("{PORT} {peer}: {why}");
                            return;
                        }
                    }
                }
            };
            connection(stream, &tp, peer, gate.as_deref()).await;
            drop(permit);
        });
    }
}

/// The next message of a connection that has not started yet, within the
/// handshake timeout; None when it closed, or misbehaved and was told why.
async fn handshake_message(
    rd: &mut StreamRead,
    wr: &mut Writer,
    peer: &str,
    frame_max: usize,
    handshake_s: u64,
) -> Option<Message> {
    let why = match tokio::time::timeout(
        Duration::from_secs(handshake_s),
        read_message_max(rd, frame_max),
    )
    .await
    {
        Ok(Ok(m)) => return m,
        Err(_) => format!(
            "no Subscribe or Write within {handshake_s} s (--sub-handshake-timeout-s); closing"
        ),
        Ok(Err(e)) => e.to_string(),
    };
    tracing::warn!("{PORT} {peer}: {why}");
    send_error(wr, &why).await;
    None
}

const PORT: &str = "subscription port";

/// Checks a `Login` against the users file; Err is what the client is told.
async fn login(
    gate: &LoginGate,
    ip: IpAddr,
    name: String,
    password: String,
) -> Result<User, String> {
    if let Err(refusal) = gate.limiter.check(ip) {
        return Err(refusal.to_string());
    }
    let users = gate.users.clone();
    let who = name.clone();
    // PBKDF2 on a cache miss: off the async threads.
    let found = tokio::task::spawn_blocking(move || users.check_password(&who, &password).cloned())
        .await
        .ok()
        .flatten();
    match found {
        Some(u) => {
            gate.limiter.succeeded(ip);
            Ok(u)
        }
        None => {
            gate.limiter
                .failed(PORT, ip, &name, "wrong user or password");
            Err("authentication failed: wrong user or password".to_string())
        }
    }
}

async fn connection(
    sock: Stream,
    tp: &Arc<Tickerplant>,
    peer_addr: SocketAddr,
    gate: Option<&LoginGate>,
) {
    let peer = &peer_addr.to_string();
    let cfg = tp.config();
    let frame_max = cfg.request_bytes_max + WRITE_FIXED_BYTES;
    let (mut rd, wr) = sock.into_split();
    let mut wr = BufWriter::with_capacity(SUB_WRITE_BUFFER_BYTES, wr);
    let handshake_s = cfg.sub_handshake_timeout_s.max(1);
    let mut first = match handshake_message(&mut rd, &mut wr, peer, frame_max, handshake_s).await {
        Some(m) => m,
        None => return,
    };
    // A Login comes first, if at all; a tp without users ignores it.
    let mut user: Option<User> = None;
    if let Message::Login {
        user: name,
        password,
    } = first
    {
        if let Some(g) = gate {
            match login(g, peer_addr.ip(), name, password).await {
                Ok(u) => user = Some(u),
                Err(msg) => {
                    send_error(&mut wr, &msg).await;
                    return;
                }
            }
        }
        first = match handshake_message(&mut rd, &mut wr, peer, frame_max, handshake_s).await {
            Some(m) => m,
            None => return,
        };
    }
    if gate.is_some() {
        let (needed, what) = match &first {
            Message::Write { .. } => (Role::Write, "publishing"),
            _ => (Role::Read, "subscribing"),
        };
        let refusal = match &user {
            None => Some(format!(
                "this tp has users (--users): log in before {what} (tickdb rdb and agg: --tp-user, TICKDB_TP_PASSWORD)"
            )),
            Some(u) if !u.may(needed) => Some(format!(
                "user `{}` lacks the {needed} role; {what} needs it",
                u.name
            )),
            Some(_) => None,
        };
        if let Some(msg) = refusal {
            tracing::warn!("{PORT} {peer}: refused: {msg}");
            send_error(&mut wr, &msg).await;
            return;
        }
    }
    match first {
        Message::Subscribe {
            from_seq,
            tables,
            symbols,
            epoch,
        } => {
            if let Some(t) = tables.iter().find(|t| tp.schema().table(t).is_none()) {
                let msg = format!("unknown table '{t}' in subscription");
                tracing::warn!("subscriber {peer}: {msg}");
                send_error(&mut wr, &msg).await;
                return;
            }
            if let Some(msg) = epoch.and_then(|e| diverged(tp, from_seq, e)) {
                tracing::warn!("subscriber {peer}: {msg}");
                send_error(&mut wr, &msg).await;
                return;
            }
            // An epoch-aware subscriber ahead of this journal holds records
            // this tp does not (a standby behind its old primary): were this
            // tp promoted, its new epoch would begin under them. It must
            // wait, or find the primary.
            if epoch.is_some() && from_seq > tp.seq() + 1 {
                let msg = format!(
                    "behind: this tp's journal ends at seq {}, and the subscriber holds records up to seq {}; \
                     subscribe to the primary, or retry once this tp has them",
                    tp.seq(),
                    from_seq - 1
                );
                tracing::info!("subscriber {peer}: {msg}");
                send_error(&mut wr, &msg).await;
                return;
            }
            let filter = SubFilter {
                tables: tables.into_iter().collect(),
                symbols: symbols.into_iter().collect(),
            };
            match subscriber(rd, wr, tp, peer, filter, from_seq, epoch.is_some()).await {
                Ok(()) => tracing::debug!("subscriber {peer} closed"),
                Err(stop) if stop.logged => tracing::debug!("subscriber {peer}: {}", stop.reason),
                Err(stop) => tracing::warn!("subscriber {peer}: {}", stop.reason),
            }
        }
        Message::Write {
            request_id,
            payload,
        } => {
            if let Err(e) = publisher(rd, wr, tp, peer, request_id, payload).await {
                tracing::warn!("publisher {peer}: {e}");
            }
        }
        other => {
            let msg = format!("expected Subscribe or Write first, got {}", other.name());
            tracing::warn!("subscription port {peer}: {msg}");
            send_error(&mut wr, &msg).await;
        }
    }
}

/// Journals each `Write` and acknowledges it, until the publisher closes,
/// misbehaves or sends nothing for `--publisher-idle-timeout-s`.
async fn publisher(
    mut rd: StreamRead,
    mut wr: Writer,
    tp: &Arc<Tickerplant>,
    peer: &str,
    request_id: u64,
    payload: Vec<u8>,
) -> Result<(), String> {
    let cfg = tp.config();
    let frame_max = cfg.request_bytes_max + WRITE_FIXED_BYTES;
    let idle_s = cfg.publisher_idle_timeout_s;
    let mut next = Some((request_id, payload));
    while let Some((request_id, payload)) = next.take() {
        let ack = match tp.write_payload(&payload).await {
            Ok(seq) => Message::WriteAck {
                request_id,
                seq,
                error: None,
            },
            Err(e) => Message::WriteAck {
                request_id,
                seq: 0,
                error: Some(e.to_string()),
            },
        };
        drop(payload);
        // The idle time runs from the write's arrival: sending the ack to a
        // publisher that reads nothing counts as idle too.
        let ack_and_next = async {
            write_message(&mut wr, &ack)
                .await
                .map_err(|e| e.to_string())?;
            wr.flush().await.map_err(|e| e.to_string())?;
            read_message_max(&mut rd, frame_max)
                .await
                .map_err(|e| e.to_string())
        };
        let got = if idle_s == 0 {
            ack_and_next.await
        } else {
            match tokio::time::timeout(Duration::from_secs(idle_s), ack_and_next).await {
                Ok(got) => got,
                Err(_) => {
                    let msg =
                        format!("no Write for {idle_s} s (--publisher-idle-timeout-s); closing");
                    tracing::info!("publisher {peer}: {msg}");
                    send_error(&mut wr, &msg).await;
                    return Ok(());
                }
            }
        };
        match got? {
            None => return Ok(()),
            Some(Message::Write {
                request_id,
                payload,
            }) => next = Some((request_id, payload)),
            Some(other) => {
                let msg = format!("unexpected {} after Write", other.name());
                send_error(&mut wr, &msg).await;
                return Err(msg);
            }
        }
    }
    Ok(())
}

/// Why a subscriber's stream ended.
struct Stop {
    reason: String,
    /// The stream may end inside a frame: an `Error` frame after it would
    /// be garbage to the subscriber, so none is sent.
    mid_frame: bool,
    /// The queue was closed (cut off, or the tp stopping): whoever closed
    /// it has logged why.
    logged: bool,
}

impl Stop {
    fn clean(reason: impl Into<String>) -> Stop {
        Stop {
            reason: reason.into(),
            mid_frame: false,
            logged: false,
        }
    }

    /// The queue was closed while nothing was being written.
    fn closed(reason: String) -> Stop {
        Stop {
            reason,
            mid_frame: false,
            logged: true,
        }
    }
}

async fn subscriber(
    mut rd: StreamRead,
    mut wr: Writer,
    tp: &Arc<Tickerplant>,
    peer: &str,
    filter: SubFilter,
    from_seq: u64,
    epoch_aware: bool,
) -> Result<(), Stop> {
    let sub = tp.subscribe_encoded(&format!("rdb@{peer}"), filter.clone(), from_seq);
    let queue = sub.queue.clone();
    // A subscriber sends nothing after Subscribe, so the read side only
    // tells when it goes away: also while its catch-up waits for memory,
    // when nothing is written to notice a broken socket by.
    let result = tokio::select! {
        r = stream(&mut wr, tp, &queue, sub.current_seq, sub.catchup, filter, epoch_aware) => r,
        r = peer_gone(&mut rd) => r,
    };
    // Releases whatever is still held for it, also by the catch-up thread.
    tp.unsubscribe(queue.id());
    if let Err(stop) = &result {
        if !stop.mid_frame {
            send_error(&mut wr, &stop.reason).await;
        }
    }
    result
}

/// Resolves when the subscriber closes its connection (`Ok`), or sends
/// something, which it must not.
async fn peer_gone(rd: &mut StreamRead) -> Result<(), Stop> {
    let mut probe = [0u8; 1];
    match rd.read(&mut probe).await {
        Ok(0) | Err(_) => Ok(()),
        Ok(_) => Err(Stop::clean("unexpected bytes from subscriber")),
    }
}

async fn stream(
    wr: &mut Writer,
    tp: &Arc<Tickerplant>,
    queue: &Arc<SubQueue>,
    current_seq: u64,
    catchup: Option<(u64, u64)>,
    filter: SubFilter,
    epoch_aware: bool,
) -> Result<(), Stop> {
    // The journal reader is opened, and its buffer counted, before
    // SubscribeOk: a journal that no longer holds from_seq is refused first,
    // as the protocol says.
    let catchup = match catchup {
        None => None,
        Some((from, to)) => {
            let (tp2, q2) = (tp.clone(), queue.clone());
            match tokio::task::spawn_blocking(move || catchup::open(&tp2, &q2, from, to)).await {
                Ok(Ok(c)) => Some(c),
                Ok(Err(e)) if queue.is_closed() => return Err(Stop::closed(e)),
                Ok(Err(e)) => return Err(Stop::clean(e)),
                Err(e) => return Err(Stop::clean(format!("catch-up reader failed: {e}"))),
            }
        }
    };
    let ok = Message::SubscribeOk {
        current_seq,
        schema_toml: tp.schema_toml(),
        role: epoch_aware.then(|| role_of(tp)),
    };
    // Epoch-aware subscribers are told where each epoch starts, before its
    // first update they receive.
    let mut epoch_sent: Option<u32> = None;
    let mut epoch_mark = |epoch: u32, seq: u64| -> Option<Message> {
        if !epoch_aware || epoch_sent == Some(epoch) {
            return None;
        }
        epoch_sent = Some(epoch);
        Some(Message::Epoch {
            epoch,
            first_seq: seq,
        })
    };
    guarded(queue, async {
        write_message(wr, &ok).await?;
        wr.flush().await?;
        Ok(())
    })
    .await?;
    if let Some(c) = catchup {
        let mut records = catchup::start(c, queue.clone(), filter);
        while let Some(rec) = records.recv().await {
            let rec = rec.map_err(Stop::clean)?;
            let mark = epoch_mark(rec.epoch, rec.seq);
            let m = Message::Update {
                seq: rec.seq,
                payload: rec.payload,
            };
            guarded(queue, async {
                if let Some(e) = &mark {
                    write_message(wr, e).await?;
                }
                write_message(wr, &m).await
            })
            .await?;
            // Written (into the socket or the small buffer): released.
            drop(rec.hold);
        }
        // The channel also ends early when the queue was closed; then
        // `next` below reports why, and no live update follows a gap.
        guarded(queue, async { Ok(wr.flush().await?) }).await?;
    }
    loop {
        let updates = queue.next().await.map_err(Stop::closed)?;
        let marks: Vec<Option<Message>> =
            updates.iter().map(|u| epoch_mark(u.epoch, u.seq)).collect();
        guarded(queue, async {
            for (u, mark) in updates.into_iter().zip(marks) {
                if let Some(e) = &mark {
                    write_message(wr, e).await?;
                }
                let m = Message::Update {
                    seq: u.seq,
                    payload: u.payload.clone(),
                };
                write_message(wr, &m).await?;
                // Dropping `u` releases it: it is in the socket or the
                // small buffer now.
            }
            wr.flush().await?;
            Ok(())
        })
        .await?;
    }
}

/// Runs socket writes unless the queue is closed first (the subscriber
/// was cut off or the tp is stopping): a peer that reads nothing must not
/// keep the updates its writer holds, nor the connection.
async fn guarded<F>(queue: &SubQueue, writes: F) -> Result<(), Stop>
where
    F: Future<Output = Result<(), tickdb_net::NetError>>,
{
    tokio::select! {
        r = writes => r.map_err(|e| Stop {
            reason: e.to_string(),
            mid_frame: true,
            logged: false,
        }),
        reason = queue.closed() => Err(Stop {
            reason,
            mid_frame: true,
            logged: true,
        }),
    }
}

/// Tells the peer why the tp closes the connection, if it reads within
/// `ERROR_SEND_TIMEOUT_MS`.
async fn send_error(wr: &mut Writer, message: &str) {
    let m = Message::Error {
        message: message.to_string(),
    };
    let _ = tokio::time::timeout(Duration::from_millis(ERROR_SEND_TIMEOUT_MS), async {
        write_message(wr, &m).await?;
        wr.flush().await?;
        Ok::<(), tickdb_net::NetError>(())
    })
    .await;
}

/// What an epoch-aware subscriber is told of this tp.
fn role_of(tp: &Tickerplant) -> tickdb_net::proto::TpRole {
    use tickdb_net::proto::{TpRole, ROLE_FENCED, ROLE_PRIMARY, ROLE_STANDBY};
    let (role, primary) = match tp.role() {
        crate::role::Role::Primary => (ROLE_PRIMARY, String::new()),
        crate::role::Role::Standby { primary } => (ROLE_STANDBY, primary),
        crate::role::Role::Fenced { primary, .. } => (ROLE_FENCED, primary.unwrap_or_default()),
    };
    TpRole {
        epoch: tp.epoch(),
        role,
        primary,
    }
}

/// Why a subscriber resuming after its record `from_seq - 1`, which it has
/// from `epoch`, cannot resume here: this tp wrote that record in another
/// epoch, so the subscriber holds a record this tp never had (an async
/// primary's last records that its standby had not received when it was
/// promoted). None when it can resume.
fn diverged(tp: &Tickerplant, from_seq: u64, epoch: u32) -> Option<String> {
    if epoch == tickdb_net::proto::EPOCH_UNKNOWN {
        return None;
    }
    if epoch > tp.epoch() {
        return Some(format!(
            "diverged: the subscriber holds records of epoch {epoch}, and this tp is at epoch {}, an older one: \
             it was deposed; subscribe to the current primary",
            tp.epoch()
        ));
    }
    let last = from_seq
        .checked_sub(1)
        .filter(|&s| s >= 1 && s <= tp.seq())?;
    let mine = tp.epoch_at(last);
    (mine != epoch).then(|| {
        format!(
            "diverged: the subscriber's record seq {last} was written in epoch {epoch}, this tp's in epoch {mine}; \
             the subscriber holds records this tp never had and must reload (restart it without its Hot Restart store)"
        )
    })
}
