//! The kdb+ IPC listener (`--ipc-port`): kdb+ feed handlers, subscribers
//! and query clients connect to tickdb unchanged. The bytes are
//! `tickdb_ipc`'s; this module is what a node does with them.
//!
//! - The handshake's `user:password` is checked against the users file
//!   (`--users`; off the I/O threads, with the node's failed-login
//!   limiter), or without one against the PostgreSQL wire user and
//!   password (anonymous only with `--ipc-no-auth`); a refusal closes the
//!   socket, as kdb+ does (the client reports `'access`), and is logged.
//! - With a users file, writes (`.u.upd`, `insert`) need the `write` role,
//!   queries and `.u.sub` the `read` role; a call without its role is
//!   answered `'access` and logged, and the connection goes on.
//! - Writes (`.u.upd`, `insert`) go to the tp like ILP writes: checked
//!   against the schema, journaled, acknowledged under the fsync policy and
//!   the replication mode. A sync call answers once that is done. Async
//!   ones are pipelined; the empty sync "chaser" answers `::` once every
//!   earlier message on the connection is acknowledged, or with the first
//!   error one of them met.
//! - `.u.sub` subscribes (see `sub`); queries run on the node's engine.
//!
//! A message over the size bound, or a header that is not a kdb+ header,
//! ends the connection (after an error message when the client can still
//! read one); a message that does not decode is answered with an error and
//! the connection goes on. Nothing of a bad write is applied.

pub mod call;
pub mod convert;
pub mod qcatalog;
pub mod result;
pub mod sub;

use crate::node::Node;
use call::Call;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tickdb_ipc::handshake::{self, HANDSHAKE_BYTES_MAX};
use tickdb_ipc::{Header, Limits, MsgType, HEADER_BYTES, K};
use tickdb_tp::conn_limit::ConnLimit;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Seconds a new connection has to complete its handshake.
pub const HANDSHAKE_TIMEOUT_S: u64 = 10;
/// Seconds the rest of a message has to arrive once its header has.
pub const MESSAGE_TIMEOUT_S: u64 = 60;
/// Default bound on kdb+ IPC connections open at once.
pub const IPC_CONNECTIONS_MAX_DEFAULT: usize = 256;
/// Async writes a connection may have waiting for their acknowledgement;
/// past this, reading its next message waits for the oldest.
pub const ASYNC_WRITES_IN_FLIGHT_MAX: usize = 256;
/// Messages queued to a connection's writer (answers and updates).
pub const OUTBOUND_MESSAGES_MAX: usize = 64;

/// A q error: its code (`type`, `length`, a table name, `nyi`, …) and
/// what exactly was wrong. Sent as `code: detail`.
#[derive(Debug, Clone, PartialEq)]
pub struct QError {
    pub code: String,
    pub detail: String,
}

impl QError {
    pub fn new(code: &str, detail: String) -> QError {
        QError {
            code: code.to_string(),
            detail,
        }
    }

    pub fn text(&self) -> String {
        if self.detail.is_empty() {
            self.code.clone()
        } else {
            format!("{}: {}", self.code, self.detail)
        }
    }
}

#[derive(Debug, Clone)]
pub enum IpcAuth {
    /// Any user and password (`--ipc-no-auth`).
    Anonymous,
    Password {
        user: String,
        password: String,
    },
    /// The node's users file (`--users`): checked with its limiter.
    Users,
}

#[derive(Debug, Clone)]
pub struct IpcOptions {
    pub auth: IpcAuth,
    pub limits: Limits,
    pub connections_max: usize,
}

/// Serves kdb+ IPC on the connections `acceptor` hands over, until it is
/// done. When the node drains, a connection waiting for its next message
/// is closed (kdb+ clients see the handle close and reconnect); one in the
/// middle of a call answers it first.
pub async fn serve(
    mut acceptor: tickdb_net::acceptor::Acceptor,
    node: Arc<Node>,
    opts: IpcOptions,
) {
    let limit = Arc::new(ConnLimit::new(
        "kdb+ IPC",
        "--ipc-connections-max",
        opts.connections_max.max(1),
    ));
    let opts = Arc::new(opts);
    let (drain, conns) = (acceptor.drain(), acceptor.conns());
    while let Some(accepted) = acceptor.accept().await {
        let (sock, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("kdb+ IPC accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(permit) = limit.try_open() else {
            limit.note_refused(&peer.to_string());
            continue;
        };
        let (node, opts, drain, counted) =
            (node.clone(), opts.clone(), drain.clone(), conns.enter());
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            match connection(sock, peer, &node, &opts, drain).await {
                Ok(()) => tracing::debug!("kdb+ IPC {peer} closed"),
                Err(why) => tracing::warn!("kdb+ IPC {peer}: {why}; closing the connection"),
            }
            drop(permit);
            drop(counted);
        });
    }
}

/// Reads the handshake: the bytes before its NUL.
async fn read_handshake(sock: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut got = Vec::with_capacity(64);
    let mut b = [0u8; 1];
    loop {
        match sock.read(&mut b).await {
            Ok(0) => return Err("closed during the handshake".into()),
            Ok(_) if b[0] == 0 => return Ok(got),
            Ok(_) => {
                if got.len() >= HANDSHAKE_BYTES_MAX {
                    return Err(format!(
                        "the handshake is over {HANDSHAKE_BYTES_MAX} bytes without its terminating NUL"
                    ));
                }
                got.push(b[0]);
            }
            Err(e) => return Err(format!("reading the handshake: {e}")),
        }
    }
}

fn authorized(auth: &IpcAuth, hello: &handshake::Hello) -> bool {
    match auth {
        IpcAuth::Anonymous => true,
        // Checked in `login`, which needs the node.
        IpcAuth::Users => false,
        IpcAuth::Password { user, password } => {
            // Compared in full, whatever differs first.
            let same = |a: &str, b: &str| {
                a.len() == b.len()
                    && a.bytes()
                        .zip(b.bytes())
                        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                        == 0
            };
            same(&hello.user, user) & same(&hello.password, password)
        }
    }
}

/// The port's name in the failed-login log.
const PORT: &str = "kdb+ IPC";

/// Checks a handshake against the users file: the user, or why not
/// (already logged). The limiter refuses an address that keeps failing
/// before its password is even checked; PBKDF2 (on a cache miss) runs off
/// the I/O threads.
async fn login(
    node: &Arc<Node>,
    peer: SocketAddr,
    hello: &handshake::Hello,
) -> Result<tickdb_auth::User, String> {
    let security = node.security();
    let Some(users) = security.users().cloned() else {
        return Err("no users file; refused".into());
    };
    if let Err(refusal) = security.limiter().check(peer.ip()) {
        return Err(format!("user {:?}: {refusal}; refused", hello.user));
    }
    let (name, password) = (hello.user.clone(), hello.password.clone());
    let user = tokio::task::spawn_blocking(move || users.check_password(&name, &password).cloned())
        .await
        .map_err(|e| format!("checking the password failed: {e}"))?;
    match user {
        Some(u) => {
            security.limiter().succeeded(peer.ip());
            tracing::debug!("kdb+ IPC {peer}: {} logged in", u.name);
            Ok(u)
        }
        None => {
            security
                .limiter()
                .failed(PORT, peer.ip(), &hello.user, "wrong user or password");
            Err(format!(
                "user {:?}: wrong user or password; refused",
                hello.user
            ))
        }
    }
}

/// Per-connection state.
struct Session {
    peer: String,
    /// Who logged in, with a users file: what their roles allow. None:
    /// everything (no users file).
    user: Option<tickdb_auth::User>,
    may_compress: bool,
    out: mpsc::Sender<Vec<u8>>,
    pending: VecDeque<tickdb_tp::WriteAck>,
    /// The first error an async message met since the last chaser.
    async_error: Option<String>,
    subscriber: Option<sub::Subscriber>,
    cut_off: Option<tokio::sync::oneshot::Receiver<String>>,
}

async fn connection(
    mut sock: TcpStream,
    peer: SocketAddr,
    node: &Arc<Node>,
    opts: &IpcOptions,
    drain: tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let hs = tokio::time::timeout(
        Duration::from_secs(HANDSHAKE_TIMEOUT_S),
        read_handshake(&mut sock),
    )
    .await
    .map_err(|_| format!("no handshake within {HANDSHAKE_TIMEOUT_S} s"))??;
    let hello = match handshake::parse(&hs) {
        Ok(h) => h,
        Err(e) => return Err(format!("{e}; refused")),
    };
    let user = match opts.auth {
        // kdb+ refuses by closing: the client reports 'access.
        IpcAuth::Users => Some(login(node, peer, &hello).await?),
        _ => None,
    };
    if user.is_none() && !authorized(&opts.auth, &hello) {
        // kdb+ refuses by closing: the client reports 'access.
        return Err(format!(
            "user {:?}: wrong user or password (the PostgreSQL wire user and password; --ipc-no-auth allows anyone); refused",
            hello.user
        ));
    }
    sock.write_all(&[hello.agreed()])
        .await
        .map_err(|e| format!("answering the handshake: {e}"))?;
    let (mut rd, mut wr) = sock.into_split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(OUTBOUND_MESSAGES_MAX);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if wr.write_all(&m).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut s = Session {
        peer: peer.to_string(),
        user,
        may_compress: !peer.ip().is_loopback() && hello.agreed() >= 1,
        out: tx,
        pending: VecDeque::new(),
        async_error: None,
        subscriber: None,
        cut_off: None,
    };
    let result = serve_messages(&mut rd, node, opts, &mut s, &drain).await;
    // Answers already queued still go out; then the writer closes.
    let Session {
        out, subscriber, ..
    } = s;
    drop(subscriber);
    drop(out);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    result
}

enum Next {
    Message(Header, Vec<u8>),
    Closed,
    /// The node drains and no message had begun.
    Drained,
}

async fn read_message(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    limits: &Limits,
    drain: &tokio_util::sync::CancellationToken,
) -> Result<Next, tickdb_ipc::IpcError> {
    let mut h = [0u8; HEADER_BYTES];
    // Waiting for a message to begin is where a drain closes the handle:
    // `read` is cancel-safe, so no byte is lost if the drain wins.
    let first = tokio::select! {
        r = rd.read(&mut h) => r,
        _ = drain.cancelled() => return Ok(Next::Drained),
    };
    let got = match first {
        Ok(0) => return Ok(Next::Closed),
        Ok(n) => n,
        Err(e) => return Err(tickdb_ipc::IpcError::BadHeader(format!("reading: {e}"))),
    };
    match rd.read_exact(&mut h[got..]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(Next::Closed),
        Err(e) => return Err(tickdb_ipc::IpcError::BadHeader(format!("reading: {e}"))),
    }
    let header = Header::parse(&h, limits)?;
    let mut msg = vec![0u8; header.len];
    msg[..HEADER_BYTES].copy_from_slice(&h);
    let body = tokio::time::timeout(
        Duration::from_secs(MESSAGE_TIMEOUT_S),
        rd.read_exact(&mut msg[HEADER_BYTES..]),
    )
    .await;
    match body {
        Ok(Ok(_)) => Ok(Next::Message(header, msg)),
        Ok(Err(_)) => Err(tickdb_ipc::IpcError::Truncated {
            what: "the message body (the connection closed)",
            need: header.len - HEADER_BYTES,
            at: HEADER_BYTES,
            len: header.len,
        }),
        Err(_) => Err(tickdb_ipc::IpcError::BadHeader(format!(
            "the rest of a {}-byte message did not arrive within {MESSAGE_TIMEOUT_S} s",
            header.len
        ))),
    }
}

async fn serve_messages(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    node: &Arc<Node>,
    opts: &IpcOptions,
    s: &mut Session,
    drain: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    loop {
        let next = match s.cut_off.as_mut() {
            Some(cut) => tokio::select! {
                m = read_message(rd, &opts.limits, drain) => m,
                why = cut => {
                    let why = why.unwrap_or_else(|_| "the subscription ended".into());
                    return Err(format!("subscriber cut off: {why}"));
                }
            },
            None => read_message(rd, &opts.limits, drain).await,
        };
        let (header, msg) = match next {
            Ok(Next::Message(h, m)) => (h, m),
            Ok(Next::Closed) => return Ok(()),
            // Draining: close between messages, never inside one; async
            // writes already sent are acknowledged first.
            Ok(Next::Drained) => {
                drain_pending(s).await;
                return Ok(());
            }
            Err(e) => {
                // The stream cannot be resynchronized: say why, then close.
                send(s, MsgType::Response, &K::Error(e.to_string())).await;
                return Err(e.to_string());
            }
        };
        reap(s);
        let sync = header.msg_type == MsgType::Sync;
        let k = match tickdb_ipc::decode_message(&header, &msg, &opts.limits) {
            Ok(k) => k,
            Err(e) => {
                let text = format!("badmsg: {e}");
                tracing::info!("kdb+ IPC {}: {text}", s.peer);
                answer_or_keep(s, sync, Err(QError::new("badmsg", e.to_string()))).await;
                continue;
            }
        };
        drop(msg);
        if header.msg_type == MsgType::Response {
            // Nothing is asked of a client here: a response is ignored.
            continue;
        }
        let reply = run_call(node, s, call::interpret(&k), sync).await;
        if let Some(reply) = reply {
            answer_or_keep(s, sync, reply).await;
        }
    }
}

/// Collects the acknowledgements that have come, keeping the first error.
fn reap(s: &mut Session) {
    while let Some(front) = s.pending.front_mut() {
        match front.try_take() {
            None => break,
            Some(r) => {
                s.pending.pop_front();
                if let Err(e) = r {
                    s.async_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

/// Waits for every pending acknowledgement.
async fn drain_pending(s: &mut Session) {
    while let Some(a) = s.pending.pop_front() {
        if let Err(e) = a.wait().await {
            s.async_error.get_or_insert_with(|| e.to_string());
        }
    }
}

async fn send(s: &Session, t: MsgType, k: &K) {
    match tickdb_ipc::encode_message(t, k, s.may_compress) {
        Ok(b) => {
            let _ = s.out.send(b).await;
        }
        Err(e) => {
            if let Ok(b) = tickdb_ipc::encode_message(t, &K::Error(format!("limit: {e}")), false) {
                let _ = s.out.send(b).await;
            }
        }
    }
}

/// A sync message gets its answer; an async one's error is kept for the
/// next chaser (and logged).
async fn answer_or_keep(s: &mut Session, sync: bool, r: Result<K, QError>) {
    match (sync, r) {
        (true, Ok(k)) => send(s, MsgType::Response, &k).await,
        (true, Err(e)) => send(s, MsgType::Response, &K::Error(e.text())).await,
        (false, Ok(_)) => {}
        (false, Err(e)) => {
            tracing::info!("kdb+ IPC {}: async message failed: {}", s.peer, e.text());
            s.async_error.get_or_insert_with(|| e.text());
        }
    }
}

/// Runs one call. None when the answer is already handled (an async write
/// left pending).
async fn run_call(
    node: &Arc<Node>,
    s: &mut Session,
    c: Call,
    sync: bool,
) -> Option<Result<K, QError>> {
    if let Err(e) = allowed(s, &c) {
        return Some(Err(e));
    }
    match c {
        Call::Pid => Some(Ok(K::Atom(tickdb_ipc::Atom::Int(
            tickdb_ipc::Kind::Int,
            std::process::id() as i32,
        )))),
        Call::Chaser => {
            drain_pending(s).await;
            Some(match s.async_error.take() {
                Some(e) => Err(QError::new(
                    "async",
                    format!("an earlier async message failed: {e}"),
                )),
                None => Ok(K::Null),
            })
        }
        Call::Upd { table, data } => {
            let Some(tp) = node.tp().cloned() else {
                return Some(Err(QError::new(
                    "nyi",
                    format!(
                        "this node ({}) takes no writes: send .u.upd to a tp or up node",
                        node.role.name()
                    ),
                )));
            };
            let Some(def) = tp.schema().table(&table).cloned() else {
                return Some(Err(QError::new(
                    &table,
                    format!("no table `{table}` in the schema"),
                )));
            };
            let now = tickdb_tp::now_ns();
            let batch = match convert::batch_from_q(&def, &data, now) {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            if batch.rows == 0 {
                return Some(Ok(K::Null));
            }
            let ack = match tp.submit(vec![batch]) {
                Ok(a) => a,
                Err(e) => return Some(Err(QError::new("write", e.to_string()))),
            };
            if sync {
                drain_pending(s).await;
                Some(match ack.wait().await {
                    Ok(_) => Ok(K::Null),
                    Err(e) => Err(QError::new("write", e.to_string())),
                })
            } else {
                s.pending.push_back(ack);
                if s.pending.len() > ASYNC_WRITES_IN_FLIGHT_MAX {
                    if let Some(a) = s.pending.pop_front() {
                        if let Err(e) = a.wait().await {
                            s.async_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                None
            }
        }
        Call::Sub { table, syms } => Some(subscribe(node, s, table, syms)),
        Call::Sql(sql) => Some(query_sql(node, &sql, 0).await),
        Call::Q(text) => Some(query_q(node, &text).await),
        Call::Nyi(text) => Some(Err(QError::new("nyi", text))),
    }
}

/// Whether the session's user may make call `c`: writes need `write`,
/// queries and subscriptions `read`. A refusal is `'access`, logged.
fn allowed(s: &Session, c: &Call) -> Result<(), QError> {
    let Some(user) = &s.user else {
        return Ok(());
    };
    let (needed, what) = match c {
        Call::Upd { .. } => (tickdb_auth::Role::Write, "writes (.u.upd, insert)"),
        Call::Sub { .. } => (tickdb_auth::Role::Read, "subscriptions (.u.sub)"),
        Call::Sql(_) | Call::Q(_) => (tickdb_auth::Role::Read, "queries"),
        Call::Pid | Call::Chaser | Call::Nyi(_) => return Ok(()),
    };
    if user.may(needed) {
        return Ok(());
    }
    let roles: Vec<&str> = user.roles.iter().map(|r| r.name()).collect();
    let detail = format!(
        "user `{}` may not make {what}: that needs the {needed} role (the user has: {})",
        user.name,
        roles.join(", ")
    );
    tracing::warn!("kdb+ IPC {}: refused: {detail}", s.peer);
    Err(QError::new("access", detail))
}

fn subscribe(
    node: &Arc<Node>,
    s: &mut Session,
    table: Option<String>,
    syms: Option<Vec<String>>,
) -> Result<K, QError> {
    let Some(tp) = node.tp().cloned() else {
        return Err(QError::new(
            "nyi",
            format!(
                "this node ({}) publishes nothing: .u.sub at a tp or up node",
                node.role.name()
            ),
        ));
    };
    let schema = tp.schema().clone();
    let tables: Vec<&tickdb_core::schema::TableDef> = match &table {
        None => schema.tables.iter().collect(),
        Some(t) => match schema.table(t) {
            Some(d) => vec![d],
            None => return Err(QError::new(t, format!("no table `{t}` in the schema"))),
        },
    };
    if s.subscriber.is_none() {
        let (cut_tx, cut_rx) = tokio::sync::oneshot::channel();
        let sub =
            sub::Subscriber::start(tp.clone(), &s.peer, s.out.clone(), s.may_compress, cut_tx)
                .map_err(|e| QError::new("sub", e))?;
        s.subscriber = Some(sub);
        s.cut_off = Some(cut_rx);
    }
    let Some(sub) = &s.subscriber else {
        return Err(QError::new("sub", "no subscription".into()));
    };
    let mut answers = Vec::with_capacity(tables.len());
    for d in &tables {
        sub.add(&d.name, syms.clone());
        answers.push(K::List(vec![K::symbol(&d.name), convert::empty_table(d)]));
    }
    tracing::info!(
        "kdb+ IPC {}: subscribed to {} ({})",
        s.peer,
        table.as_deref().unwrap_or("every table"),
        syms.as_ref()
            .map(|s| s.join(" "))
            .unwrap_or_else(|| "every symbol".into())
    );
    Ok(match table {
        Some(_) => answers.pop().unwrap_or(K::Null),
        None => K::List(answers),
    })
}

/// The node's query engine, or why there is none.
fn engine(node: &Arc<Node>) -> Result<tickdb_query::QueryEngine, QError> {
    if let Some(e) = node.query() {
        return Ok(e.clone());
    }
    if node.role.has_rdb() {
        let why = node.life.check().err().unwrap_or_else(|| "starting".into());
        return Err(QError::new("notready", why));
    }
    Err(QError::new(
        "nyi",
        format!(
            "this node ({}) holds no tables: query an rdb or up node",
            node.role.name()
        ),
    ))
}

async fn query_sql(node: &Arc<Node>, sql: &str, keys: usize) -> Result<K, QError> {
    let engine = engine(node)?;
    let r = engine
        .query(sql)
        .await
        .map_err(|e| QError::new("query", e.to_string()))?;
    result::table_from_arrow(&r.schema, &r.batches, keys)
}

async fn query_q(node: &Arc<Node>, text: &str) -> Result<K, QError> {
    let engine = engine(node)?;
    let schema = engine.store().schema().clone();
    let cat = qcatalog::SchemaCatalog(&schema);
    match tickdb_ipc::qsql::translate(text, &cat) {
        Ok(tickdb_ipc::qsql::Query::Sql { sql, keys }) => query_sql(node, &sql, keys).await,
        Ok(tickdb_ipc::qsql::Query::Count(t)) => {
            let r = engine
                .query(&format!("SELECT count(*) AS x FROM \"{t}\""))
                .await
                .map_err(|e| QError::new("query", e.to_string()))?;
            result::atom_from_arrow(&r.batches)
                .ok_or_else(|| QError::new("query", "no count".into()))
        }
        Ok(tickdb_ipc::qsql::Query::Meta(t)) => qcatalog::meta(&schema, &t),
        Ok(tickdb_ipc::qsql::Query::Tables) => Ok(qcatalog::tables(&schema)),
        Err(tickdb_ipc::qsql::QsqlError::Nyi(t)) => Err(QError::new("nyi", t)),
        Err(tickdb_ipc::qsql::QsqlError::UnknownTable(t)) => {
            Err(QError::new(&t, format!("no table `{t}`")))
        }
        Err(e) => Err(QError::new("parse", e.to_string())),
    }
}
