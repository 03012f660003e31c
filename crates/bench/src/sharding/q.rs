//! The kdb+ IPC client of the socket sharding benchmark: q's `hopen` (TCP
//! connect and the login), one sync message out and its answer in, with a
//! timeout on every step and errors that say which step failed, so a client
//! can tell a refused connect from a connection the server closed (a member
//! that drains) and from an error answer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tickdb_ipc::{Atom, Header, Limits, MsgType, Vector, HEADER_BYTES, K};

/// The login: the PostgreSQL wire user and password every member is given.
pub const USER: &str = "tickdb";
pub const PASSWORD: &str = "tickdb";

const LIMITS: Limits = Limits {
    message_bytes_max: 64 * 1024 * 1024,
    depth_max: tickdb_ipc::DEPTH_MAX,
};

/// Why a client step failed.
#[derive(Debug, Clone, PartialEq)]
pub enum QError {
    /// The TCP connect failed (refused: nothing listens on the port).
    Connect(String),
    /// The server closed the connection (EOF or reset), at the login or
    /// before the answer.
    Closed(String),
    /// No answer within the time allowed.
    Timeout(String),
    /// The server answered with a q error.
    Server(String),
    /// Bytes that are not a q message.
    Protocol(String),
}

impl std::fmt::Display for QError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QError::Connect(m) => write!(f, "connect: {m}"),
            QError::Closed(m) => write!(f, "closed by the server: {m}"),
            QError::Timeout(m) => write!(f, "timed out: {m}"),
            QError::Server(m) => write!(f, "q error '{m}"),
            QError::Protocol(m) => write!(f, "protocol: {m}"),
        }
    }
}

fn io_error(what: &str, e: std::io::Error) -> QError {
    use std::io::ErrorKind::*;
    match e.kind() {
        WouldBlock | TimedOut => QError::Timeout(what.to_string()),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
            QError::Closed(format!("{what}: {e}"))
        }
        _ => QError::Closed(format!("{what}: {e}")),
    }
}

/// One open kdb+ IPC connection.
pub struct Q {
    sock: TcpStream,
}

impl Q {
    /// q's `hopen`: connect and log in (capability 3), within `timeout`.
    pub fn connect(port: u16, timeout: Duration) -> Result<Q, QError> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let sock = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| QError::Connect(format!("127.0.0.1:{port}: {e}")))?;
        let _ = sock.set_nodelay(true);
        let _ = sock.set_write_timeout(Some(timeout));
        let _ = sock.set_read_timeout(Some(timeout));
        let mut q = Q { sock };
        match tickdb_ipc::handshake::login(&mut q.sock, USER, PASSWORD) {
            Ok(Some(_)) => Ok(q),
            Ok(None) => Err(QError::Closed(
                "the login (closed before the capability byte)".into(),
            )),
            Err(e) => Err(io_error("the login", e)),
        }
    }

    /// Sends `text` as a sync message (a q string), not waiting.
    pub fn send(&mut self, text: &str) -> Result<(), QError> {
        let msg = tickdb_ipc::encode_message(MsgType::Sync, &K::string(text), false)
            .map_err(|e| QError::Protocol(format!("encoding: {e}")))?;
        self.sock
            .write_all(&msg)
            .map_err(|e| io_error("sending", e))
    }

    /// The answer to the last sync message, waiting at most `timeout`.
    pub fn answer(&mut self, timeout: Duration) -> Result<K, QError> {
        let end = Instant::now() + timeout;
        let mut h = [0u8; HEADER_BYTES];
        self.read_exact_by(&mut h, end)?;
        let header =
            Header::parse(&h, &LIMITS).map_err(|e| QError::Protocol(format!("a header: {e}")))?;
        let mut msg = vec![0u8; header.len];
        msg[..HEADER_BYTES].copy_from_slice(&h);
        self.read_exact_by(&mut msg[HEADER_BYTES..], end)?;
        let k = tickdb_ipc::decode_message(&header, &msg, &LIMITS)
            .map_err(|e| QError::Protocol(format!("a message: {e}")))?;
        if header.msg_type != MsgType::Response {
            return Err(QError::Protocol(format!(
                "expected the answer, got a {:?} message",
                header.msg_type
            )));
        }
        match k {
            K::Error(e) => Err(QError::Server(e)),
            k => Ok(k),
        }
    }

    /// `send`, then `answer`.
    pub fn query(&mut self, text: &str, timeout: Duration) -> Result<K, QError> {
        self.send(text)?;
        self.answer(timeout)
    }

    fn read_exact_by(&mut self, buf: &mut [u8], end: Instant) -> Result<(), QError> {
        let mut at = 0;
        while at < buf.len() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(QError::Timeout("waiting for the answer".into()));
            }
            let _ = self.sock.set_read_timeout(Some(left));
            match self.sock.read(&mut buf[at..]) {
                Ok(0) => return Err(QError::Closed("before the answer (EOF)".into())),
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("reading the answer", e)),
            }
        }
        Ok(())
    }
}

/// An integer atom (`.z.i` is an int, -6), or the one cell of a one-row,
/// one-column table (`s)select pg_backend_pid()`).
pub fn int_of(k: &K) -> Option<i64> {
    match k {
        K::Atom(Atom::Int(_, v)) => Some(i64::from(*v)),
        K::Atom(Atom::Long(_, v)) => Some(*v),
        K::Atom(Atom::Short(v)) => Some(i64::from(*v)),
        K::Table(t) if t.rows() == 1 && t.columns.len() == 1 => match &t.columns[0] {
            K::Vector {
                v: Vector::Int(_, v),
                ..
            } => v.first().map(|x| i64::from(*x)),
            K::Vector {
                v: Vector::Long(_, v),
                ..
            } => v.first().copied(),
            _ => None,
        },
        _ => None,
    }
}

/// A table of exactly one row (`s)select pg_sleep(2)` answers one row, NULL).
pub fn one_row(k: &K) -> bool {
    matches!(k, K::Table(t) if t.rows() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickdb_ipc::Kind;

    #[test]
    fn reads_pids_and_counts() {
        assert_eq!(int_of(&K::Atom(Atom::Int(Kind::Int, 42))), Some(42));
        let t = K::table(
            vec!["pg_backend_pid".into()],
            vec![K::vector(Vector::Int(Kind::Int, vec![7]))],
        );
        assert_eq!(int_of(&t), Some(7));
        assert!(one_row(&t));
        let two = K::table(
            vec!["n".into()],
            vec![K::vector(Vector::Long(Kind::Long, vec![1, 2]))],
        );
        assert_eq!(int_of(&two), None);
        assert!(!one_row(&two));
        assert_eq!(int_of(&K::Null), None);
    }

    #[test]
    fn a_refused_connect_is_told_apart() {
        let port = crate::child::free_port().unwrap();
        match Q::connect(port, Duration::from_secs(2)) {
            Err(QError::Connect(_)) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("connected to a closed port"),
        }
    }
}
