//! PostgreSQL query cancellation. A client that wants to stop its running
//! query (psql's Ctrl-C, psycopg's `cancel()`, JDBC's `Statement.cancel`)
//! opens a second connection and sends a CancelRequest with the process id
//! and secret key it got at startup. Each authenticated connection is
//! registered here under that pair with a slot holding its current query's
//! context; the cancel handler cancels that context, which every node of
//! the running plan checks.

use crate::context::QueryCtx;
use async_trait::async_trait;
use datafusion_postgres::pgwire;
use parking_lot::Mutex;
use pgwire::api::cancel::CancelHandler;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The code a CancelRequest carries where a startup packet carries its
/// protocol version.
const CANCEL_REQUEST_CODE: i32 = 80_877_102;
/// Length, code and process id of a CancelRequest, in bytes; the secret
/// key follows.
const CANCEL_REQUEST_HEAD_BYTES: usize = 12;
/// Longest secret key a CancelRequest may carry (protocol 3.2; 3.0's is
/// 4 bytes).
const CANCEL_SECRET_BYTES_MAX: usize = 256;

/// The query a connection is running, if any.
#[derive(Debug, Default)]
pub struct Slot {
    current: Mutex<Option<QueryCtx>>,
}

impl Slot {
    /// Records the query now running on the connection.
    pub fn start(&self, ctx: &QueryCtx) {
        *self.current.lock() = Some(ctx.clone());
    }

    fn cancel(&self) -> bool {
        match self.current.lock().as_ref() {
            Some(ctx) => {
                ctx.cancel();
                true
            }
            None => false,
        }
    }
}

type Key = (i32, Vec<u8>);

/// Every authenticated connection's slot, by (pid, secret key).
#[derive(Debug, Default)]
pub struct Connections {
    map: Mutex<HashMap<Key, Arc<Slot>>>,
}

impl Connections {
    /// Registers a connection; it stays registered while the `Session`
    /// lives.
    pub fn register(self: &Arc<Self>, pid: i32, key: &SecretKey) -> Session {
        let k = (pid, key.to_bytes().to_vec());
        let slot = Arc::new(Slot::default());
        self.map.lock().insert(k.clone(), slot.clone());
        Session {
            key: k,
            slot,
            connections: self.clone(),
        }
    }

    /// Cancels the query of the connection `pid` and `key` name, if it
    /// runs one. As in PostgreSQL, a request naming no connection (or an
    /// idle one) is ignored.
    fn cancel(&self, pid: i32, key: &SecretKey) {
        let k = (pid, key.to_bytes().to_vec());
        let slot = self.map.lock().get(&k).cloned();
        if slot.is_some_and(|s| s.cancel()) {
            tracing::info!("pgwire: query of connection {pid} cancelled by its client");
        }
    }
}

/// A registered connection; unregisters when dropped.
pub struct Session {
    key: Key,
    slot: Arc<Slot>,
    connections: Arc<Connections>,
}

impl Session {
    /// The slot, which the query hooks find in the connection's session
    /// extensions.
    pub fn slot(&self) -> SlotRef {
        SlotRef(self.slot.clone())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connections.map.lock().remove(&self.key);
    }
}

/// The connection's slot as stored in its session extensions.
#[derive(Debug, Clone)]
pub struct SlotRef(pub Arc<Slot>);

/// Cancels the query of the connection a CancelRequest names. As in
/// PostgreSQL, a request naming no connection (or an idle one) is ignored
/// and nothing is answered.
#[derive(Debug)]
pub struct TickCancel {
    pub connections: Arc<Connections>,
}

#[async_trait]
impl CancelHandler for TickCancel {
    async fn on_cancel_request(&self, r: CancelRequest) {
        self.connections.cancel(r.pid, &r.secret_key);
    }
}

/// How a new connection opened.
#[derive(Debug, PartialEq, Eq)]
pub enum Opening {
    /// With a CancelRequest, now answered (nothing is sent back, as in
    /// PostgreSQL), or closed before sending anything: drop it.
    Done,
    /// With anything else, left unread for the session to handle.
    Startup,
    /// With nothing within the wait: drop it.
    Silent,
}

/// Reads a new connection's first packet if it is a CancelRequest, and
/// cancels the query it names. Runs where connections are accepted, not
/// on the query threads: a client cancels because its query holds a
/// query thread, and with every query thread busy a cancel handled there
/// would wait for the query it is meant to stop. Anything else (a startup
/// packet, an SSL request, a cancel inside TLS) is left unread, for the
/// session on the query threads, which also answers a cancel it meets.
pub async fn answer_cancel_request(
    socket: &mut TcpStream,
    connections: &Connections,
    wait: Duration,
) -> Opening {
    let mut head = [0u8; CANCEL_REQUEST_HEAD_BYTES];
    // A client sends its cancel in one write; a first read shorter than
    // the head is no cancel worth waiting for.
    let peeked = match tokio::time::timeout(wait, socket.peek(&mut head)).await {
        Err(_) => return Opening::Silent,
        Ok(Err(_)) | Ok(Ok(0)) => return Opening::Done,
        Ok(Ok(n)) => n,
    };
    let be = |i: usize| i32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    if peeked < CANCEL_REQUEST_HEAD_BYTES || be(4) != CANCEL_REQUEST_CODE {
        return Opening::Startup;
    }
    let len = be(0);
    let secret_len = usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_sub(CANCEL_REQUEST_HEAD_BYTES))
        .filter(|n| (4..=CANCEL_SECRET_BYTES_MAX).contains(n));
    let Some(secret_len) = secret_len else {
        tracing::debug!("pgwire: a cancel request of {len} bytes ignored");
        return Opening::Done;
    };
    let mut packet = vec![0u8; CANCEL_REQUEST_HEAD_BYTES + secret_len];
    match tokio::time::timeout(wait, socket.read_exact(&mut packet)).await {
        Ok(Ok(_)) => {}
        _ => return Opening::Done,
    }
    let pid = be(8);
    let secret = &packet[CANCEL_REQUEST_HEAD_BYTES..];
    let key = SecretKey::Bytes(bytes::Bytes::copy_from_slice(secret));
    connections.cancel(pid, &key);
    Opening::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_millis(200);

    /// A server socket whose client sent `bytes` (and stays open).
    async fn opened_with(bytes: &[u8]) -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client = TcpStream::connect(l.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = l.accept().await.expect("accept");
        client.write_all(bytes).await.expect("write");
        (server, client)
    }

    fn cancel_request(pid: i32, secret: &[u8]) -> Vec<u8> {
        let mut b = ((12 + secret.len()) as i32).to_be_bytes().to_vec();
        b.extend(CANCEL_REQUEST_CODE.to_be_bytes());
        b.extend(pid.to_be_bytes());
        b.extend(secret);
        b
    }

    fn running(connections: &Arc<Connections>, pid: i32, key: i32) -> (Session, QueryCtx) {
        let session = connections.register(pid, &SecretKey::I32(key));
        let ctx = QueryCtx::new(Duration::from_secs(60));
        session.slot().0.start(&ctx);
        (session, ctx)
    }

    #[tokio::test]
    async fn a_cancel_request_stops_the_query_it_names_and_no_other() {
        let connections = Arc::new(Connections::default());
        let (_a, a) = running(&connections, 7, 0x1234_5678);
        let (_b, b) = running(&connections, 8, 0x1234_5678);
        let (mut s, _c) = opened_with(&cancel_request(7, &0x1234_5678i32.to_be_bytes())).await;
        assert_eq!(
            answer_cancel_request(&mut s, &connections, WAIT).await,
            Opening::Done
        );
        assert!(a.is_cancelled() && !b.is_cancelled());
        // The wrong secret, and a 32-byte key (protocol 3.2) no one holds.
        for secret in [&0x1234_5679i32.to_be_bytes()[..], &[9u8; 32][..]] {
            let (mut s, _c) = opened_with(&cancel_request(8, secret)).await;
            assert_eq!(
                answer_cancel_request(&mut s, &connections, WAIT).await,
                Opening::Done
            );
        }
        assert!(!b.is_cancelled());
    }

    #[tokio::test]
    async fn anything_else_is_left_unread_for_the_session() {
        let connections = Arc::new(Connections::default());
        // A protocol 3.0 startup packet's head, and an SSL request.
        for opening in [
            &[0, 0, 0, 40, 0, 3, 0, 0, b'u', b's', b'e', b'r'][..],
            &[0, 0, 0, 8, 4, 210, 22, 47][..],
        ] {
            let (mut s, _c) = opened_with(opening).await;
            assert_eq!(
                answer_cancel_request(&mut s, &connections, WAIT).await,
                Opening::Startup
            );
            let mut back = vec![0u8; opening.len()];
            s.read_exact(&mut back).await.expect("still there");
            assert_eq!(back, opening);
        }
    }

    #[tokio::test]
    async fn a_bad_cancel_length_or_silence_ends_the_connection() {
        let connections = Arc::new(Connections::default());
        let (_a, a) = running(&connections, 7, 1);
        // Claims a secret longer than any protocol allows.
        let mut huge = cancel_request(7, &1i32.to_be_bytes());
        huge[..4].copy_from_slice(&100_000i32.to_be_bytes());
        let (mut s, _c) = opened_with(&huge).await;
        assert_eq!(
            answer_cancel_request(&mut s, &connections, WAIT).await,
            Opening::Done
        );
        assert!(!a.is_cancelled());
        let (mut s, _c) = opened_with(&[]).await;
        assert_eq!(
            answer_cancel_request(&mut s, &connections, WAIT).await,
            Opening::Silent
        );
    }
}
