//! The ILP TCP listener. Per the ILP convention there is no reply on TCP: a
//! bad line is logged with the peer and line number and the connection is
//! closed; the lines before it in the stream are kept.
//!
//! What no client can do here: hold more than `--ilp-connections-max`
//! connections (more are closed at once, with a log line); stay connected
//! sending nothing for `--ilp-idle-timeout-s` (a feed handler may be quiet
//! for a while, so the default is generous); or keep an unfinished line
//! open for more than `--ilp-partial-line-timeout-s` (a slowloris client
//! dripping bytes is never idle, but its line never completes). An idle
//! connection costs a few KB: the read buffer grows only while bytes flow
//! and is given back once the connection goes quiet.

use crate::error::TpError;
use crate::ilp_auth::LoginGate;
use crate::ingest::line_error;
use crate::tickerplant::Tickerplant;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_ilp::{IlpBatcher, IlpOptions, Precision};
use tickdb_net::tls::{TlsAcceptor, TlsStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Most bytes read from a connection at a time: the read buffer grows to
/// this while data flows faster than it is parsed. Also the most unparsed
/// bytes kept between reads beyond one line.
pub const TCP_READ_BYTES: usize = 1024 * 1024;
/// The first read of a connection that starts sending; doubled while reads
/// fill the buffer.
pub const TCP_READ_BYTES_MIN: usize = 4 * 1024;
/// Default bound on ILP TCP connections open at once; more are refused.
pub const TCP_CONNECTIONS_MAX: usize = 1024;
/// Default time an ILP TCP connection may send nothing before it is
/// closed, in seconds.
pub const ILP_IDLE_TIMEOUT_S: u64 = 600;
/// Default time the bytes of an unfinished line have to complete it, in
/// seconds.
pub const ILP_PARTIAL_LINE_TIMEOUT_S: u64 = 30;
/// A connection that sends nothing for this long gives its read buffer
/// back (keeping only an unfinished line's bytes), in milliseconds.
pub const BUFFER_RELEASE_IDLE_MS: u64 = 200;

/// Serves ILP over TCP; with a `gate`, each connection authenticates first
/// (`ilp_auth`).
/// With `tls` (`--tls-cert`), every connection must be TLS (the questdb
/// client's `tcps::`); a plaintext one is sent one line saying so and
/// closed.
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
                tracing::warn!("ILP TCP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let limit = tp.ilp_connections();
        let Some(permit) = limit.try_open() else {
            // ILP TCP has no replies: the refused client sees the close.
            limit.note_refused(&peer.to_string());
            continue;
        };
        let tp = tp.clone();
        let gate = gate.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            let mut conn = match tls {
                None => Conn::Plain(sock),
                Some(tls) => match accept_tls(sock, &tls).await {
                    Ok(s) => Conn::Tls(Box::new(s)),
                    Err(e) => {
                        tracing::warn!("ILP TCP {peer}: {e}; closing");
                        drop(permit);
                        return;
                    }
                },
            };
            let first = match &gate {
                Some(g) => {
                    let authed = match &mut conn {
                        Conn::Plain(s) => crate::ilp_auth::authenticate(s, peer, g).await,
                        Conn::Tls(s) => crate::ilp_auth::authenticate(s.as_mut(), peer, g).await,
                    };
                    match authed {
                        Some(rest) => rest,
                        None => {
                            drop(permit);
                            return;
                        }
                    }
                }
                None => Vec::new(),
            };
            let peer = peer.to_string();
            match connection(conn, &tp, first).await {
                Ok(Closed::ByPeer) => tracing::debug!("ILP TCP {peer} closed"),
                Ok(Closed::Idle(s)) => {
                    tracing::info!("ILP TCP {peer}: idle for {s} s (--ilp-idle-timeout-s); closing")
                }
                Ok(Closed::PartialLine { bytes, s, line }) => tracing::warn!(
                    "ILP TCP {peer}: an unfinished line ({bytes} bytes) did not complete within \
                     {s} s (--ilp-partial-line-timeout-s); closing the connection at line {line}"
                ),
                Err(e) => tracing::warn!("ILP TCP {peer}: {e}; closing the connection"),
            }
            drop(permit);
        });
    }
}

/// A connection: plain TCP, or TLS (`--tls-cert`).
enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Time a TLS client has for its handshake, in seconds.
pub const ILP_TLS_HANDSHAKE_TIMEOUT_S: u64 = 10;

/// The TLS session of a new connection; a plaintext client is sent one
/// line saying the port speaks TLS.
async fn accept_tls(sock: TcpStream, tls: &TlsAcceptor) -> Result<TlsStream<TcpStream>, String> {
    let handshake = async {
        match tickdb_net::tls::starts_tls(&sock).await {
            Ok(Some(true)) => tls.accept(sock).await.map_err(|e| format!("TLS: {e}")),
            Ok(Some(false)) => {
                let mut sock = sock;
                let _ = sock
                    .write_all(b"tickdb: this ILP port speaks TLS only (--tls-cert): connect with tcps::\n")
                    .await;
                Err("a plaintext client on the TLS port; told to use tcps".to_string())
            }
            Ok(None) => Err("closed before sending anything".to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    tokio::time::timeout(Duration::from_secs(ILP_TLS_HANDSHAKE_TIMEOUT_S), handshake)
        .await
        .unwrap_or_else(|_| Err("no TLS handshake within 10 s".to_string()))
}

/// How a connection ended without a bad line.
enum Closed {
    ByPeer,
    /// No bytes for this many seconds.
    Idle(u64),
    /// An unfinished line of `bytes` did not complete within `s` seconds.
    PartialLine {
        bytes: usize,
        s: u64,
        line: u64,
    },
}

/// The connection's unparsed bytes: empty (no allocation) while idle,
/// grown in doubling chunks while bytes flow.
struct ReadBuf {
    buf: Vec<u8>,
    chunk: usize,
}

enum Got {
    Bytes,
    Eof,
    /// A timeout expired first.
    Late(Closed),
}

impl ReadBuf {
    fn new() -> ReadBuf {
        ReadBuf {
            buf: Vec::new(),
            chunk: TCP_READ_BYTES_MIN,
        }
    }

    /// Reads what the socket has, without zero-filling anything: the bytes
    /// land in spare capacity reserved for them.
    fn try_read(&mut self, sock: &TcpStream) -> std::io::Result<Option<usize>> {
        self.buf.reserve(self.chunk);
        let spare = self.buf.capacity() - self.buf.len();
        match sock.try_read_buf(&mut self.buf) {
            Ok(n) => {
                if n == spare && self.chunk < TCP_READ_BYTES {
                    // The socket had more than we had room for: data is
                    // flowing, read in larger chunks.
                    self.chunk *= 2;
                }
                Ok(Some(n))
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Gives the buffer back, keeping only the unparsed bytes.
    fn release(&mut self) {
        if self.buf.is_empty() {
            self.buf = Vec::new();
        } else {
            self.buf.shrink_to_fit();
        }
        self.chunk = TCP_READ_BYTES_MIN;
    }
}

/// Deadlines of a connection, from the tp's configuration.
struct Timeouts {
    idle_s: u64,
    partial_line_s: u64,
}

impl Timeouts {
    /// When the connection is idle too long (no bytes since `last_bytes`),
    /// when its unfinished line (since `partial_since`) is too late, and
    /// the earlier of the two.
    fn deadlines(
        &self,
        last_bytes: Instant,
        partial_since: Option<Instant>,
    ) -> (Option<Instant>, Option<Instant>, Option<Instant>) {
        let idle = (self.idle_s > 0).then(|| last_bytes + Duration::from_secs(self.idle_s));
        let partial = partial_since
            .filter(|_| self.partial_line_s > 0)
            .map(|at| at + Duration::from_secs(self.partial_line_s));
        (idle, partial, earliest(idle, partial))
    }
}

/// Waits for bytes and reads them into `rb`, unless a timeout expires
/// first: no bytes since `last_bytes` for the idle timeout, or an
/// unfinished line since `partial_since` for the partial-line timeout.
async fn read_more(
    conn: &mut Conn,
    rb: &mut ReadBuf,
    t: &Timeouts,
    last_bytes: Instant,
    partial_since: Option<Instant>,
    line: u64,
) -> Result<Got, TpError> {
    match conn {
        Conn::Plain(sock) => read_more_plain(sock, rb, t, last_bytes, partial_since, line).await,
        Conn::Tls(s) => read_more_tls(s, rb, t, last_bytes, partial_since, line).await,
    }
}

/// Which timeout expired at `now`, if one did.
fn late(
    now: Instant,
    idle: Option<Instant>,
    partial: Option<Instant>,
    t: &Timeouts,
    bytes: usize,
    line: u64,
) -> Option<Closed> {
    if partial.is_some_and(|d| now >= d) {
        return Some(Closed::PartialLine {
            bytes,
            s: t.partial_line_s,
            line,
        });
    }
    if idle.is_some_and(|d| now >= d) {
        return Some(Closed::Idle(t.idle_s));
    }
    None
}

/// `read_more` over TLS: the session may hold decrypted bytes already, so
/// it reads (with the same deadlines) instead of waiting for readiness.
async fn read_more_tls(
    s: &mut TlsStream<TcpStream>,
    rb: &mut ReadBuf,
    t: &Timeouts,
    last_bytes: Instant,
    partial_since: Option<Instant>,
    line: u64,
) -> Result<Got, TpError> {
    let io = |e: std::io::Error| TpError::Io(e.to_string());
    let (idle, partial, deadline) = t.deadlines(last_bytes, partial_since);
    let mut holding = true;
    loop {
        rb.buf.reserve(if holding {
            rb.chunk
        } else {
            TCP_READ_BYTES_MIN
        });
        let spare = rb.buf.capacity() - rb.buf.len();
        let release_at =
            holding.then(|| Instant::now() + Duration::from_millis(BUFFER_RELEASE_IDLE_MS));
        // read_buf is cancel safe: a timeout loses no bytes.
        let got = match earliest(release_at, deadline) {
            Some(at) => tokio::time::timeout_at(at.into(), s.read_buf(&mut rb.buf))
                .await
                .ok(),
            None => Some(s.read_buf(&mut rb.buf).await),
        };
        match got {
            Some(Ok(0)) => return Ok(Got::Eof),
            Some(Ok(n)) => {
                if n == spare && rb.chunk < TCP_READ_BYTES {
                    rb.chunk *= 2;
                }
                return Ok(Got::Bytes);
            }
            Some(Err(e)) => return Err(io(e)),
            None => {
                if let Some(closed) = late(Instant::now(), idle, partial, t, rb.buf.len(), line) {
                    return Ok(Got::Late(closed));
                }
                if holding {
                    rb.release();
                    holding = false;
                }
            }
        }
    }
}

async fn read_more_plain(
    sock: &TcpStream,
    rb: &mut ReadBuf,
    t: &Timeouts,
    last_bytes: Instant,
    partial_since: Option<Instant>,
    line: u64,
) -> Result<Got, TpError> {
    let io = |e: std::io::Error| TpError::Io(e.to_string());
    let (idle, partial, deadline) = t.deadlines(last_bytes, partial_since);
    // Try a read before waiting: while bytes flow, the socket has more.
    let mut try_now = true;
    // Whether the buffer may hold spare capacity to give back.
    let mut holding = true;
    loop {
        if try_now {
            if let Some(n) = rb.try_read(sock).map_err(io)? {
                return Ok(if n == 0 { Got::Eof } else { Got::Bytes });
            }
        }
        let release_at =
            holding.then(|| Instant::now() + Duration::from_millis(BUFFER_RELEASE_IDLE_MS));
        let ready = match earliest(release_at, deadline) {
            Some(at) => tokio::time::timeout_at(at.into(), sock.readable())
                .await
                .ok(),
            None => Some(sock.readable().await),
        };
        match ready {
            Some(r) => {
                r.map_err(io)?;
                try_now = true;
                holding = true;
            }
            None => {
                if let Some(closed) = late(Instant::now(), idle, partial, t, rb.buf.len(), line) {
                    return Ok(Got::Late(closed));
                }
                if holding {
                    rb.release();
                    holding = false;
                }
                try_now = false;
            }
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn connection(mut conn: Conn, tp: &Tickerplant, first: Vec<u8>) -> Result<Closed, TpError> {
    let cfg = tp.config();
    let line_bytes_max = cfg.line_bytes_max;
    let opts = || IlpOptions {
        precision: Precision::Nanos,
        now_ns: crate::now_ns(),
        line_bytes_max,
    };
    let timeouts = Timeouts {
        idle_s: cfg.ilp_idle_timeout_s,
        partial_line_s: cfg.ilp_partial_line_timeout_s,
    };
    let mut rb = ReadBuf::new();
    // Lines that came with the authentication exchange.
    rb.buf = first;
    let mut line_no: u64 = 1;
    let mut last_bytes = Instant::now();
    // When the bytes of the unfinished line at the front of the buffer
    // began to arrive.
    let mut partial_since: Option<Instant> = None;
    // Set after --ilp-auto-create changed the schema: the lines left in
    // the buffer are parsed again before more are read.
    let mut reparse: Option<bool> = None;
    loop {
        let eof = match reparse.take() {
            Some(eof) => eof,
            None => {
                let got = read_more(
                    &mut conn,
                    &mut rb,
                    &timeouts,
                    last_bytes,
                    partial_since,
                    line_no,
                )
                .await?;
                match got {
                    Got::Late(closed) => return Ok(closed),
                    Got::Eof => true,
                    Got::Bytes => {
                        last_bytes = Instant::now();
                        false
                    }
                }
            }
        };
        let buf = &mut rb.buf;
        // Read again for every buffer: a table or column created at run
        // time is taken from the next line on.
        let schema = tp.schema();
        let mut batcher = IlpBatcher::new(&schema, opts());
        let (consumed, lines, err) = if eof {
            // End of stream: a last line without a newline still counts.
            let (c, l, e) = batcher.push_buffer(buf, line_no);
            if e.is_none() && c < buf.len() {
                let rest = &buf[c..];
                match batcher.push_line(rest, line_no + l) {
                    Ok(()) => (buf.len(), l + 1, None),
                    Err(e) => (c, l, Some(e)),
                }
            } else {
                (c, l, e)
            }
        } else {
            batcher.push_buffer(buf, line_no)
        };
        line_no += lines;
        buf.drain(..consumed);
        partial_since = match (buf.is_empty(), consumed > 0, partial_since) {
            (true, _, _) => None,
            // The old unfinished line completed; what is left began now.
            (false, true, _) | (false, false, None) => Some(last_bytes),
            (false, false, since) => since,
        };
        if batcher.rows() > 0 {
            tp.write(batcher.finish()).await?;
        }
        if let Some(e) = err {
            let e = line_error(e);
            // The bad line is now first in the buffer: once the tables and
            // columns it names exist, it is parsed again.
            if crate::ingest::names_unknown(&e) && tp.auto_create(&rb.buf).await? {
                reparse = Some(eof);
                continue;
            }
            return Err(e);
        }
        if eof {
            return Ok(Closed::ByPeer);
        }
    }
}
