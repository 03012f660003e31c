//! tickdb-net owns how tickdb roles meet on the network: listener specs
//! (`PORT` or `rp,PORT`, the KX socket sharding whitepaper), binding a TCP listener
//! with the right socket options, and the tp subscription wire protocol
//! (`proto`) that rdbs, the aggregation engine and other subscribers speak,
//! over plain TCP or TLS (`stream`, `tls`).

pub mod acceptor;
pub mod follow;
pub mod group;
pub mod proto;
pub mod stream;
pub mod tls;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::fmt;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::str::FromStr;

/// Pending connections the kernel queues per listener before `accept`.
pub const LISTEN_BACKLOG: i32 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Bad input from the operator: a listen spec that does not parse.
    #[error("{0}")]
    BadSpec(String),
    /// A listener could not be opened; one line naming the role, the
    /// address and the reason.
    #[error("cannot listen for {what} on {addr}: {reason}")]
    Listen {
        what: String,
        addr: SocketAddr,
        reason: String,
        #[source]
        source: std::io::Error,
    },
    /// The connection failed underneath us (reset, closed, timed out).
    #[error("network I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent bytes that are not a valid frame: a corrupt or
    /// truncated stream, or a peer that speaks something else.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A TLS session could not be made: the peer does not speak TLS on
    /// that port, or its certificate is not trusted; says which.
    #[error("{0}")]
    Tls(String),
}

/// Where a role listens: a port, and whether the port is shared with other
/// processes through `SO_REUSEPORT` (written `rp,PORT`, as in kdb+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenSpec {
    pub port: u16,
    pub reuse_port: bool,
}

impl ListenSpec {
    /// Parses `PORT` or `rp,PORT` (port 0 asks for an ephemeral port).
    pub fn parse(s: &str) -> Result<ListenSpec, NetError> {
        let bad = |why: &str| {
            NetError::BadSpec(format!(
                "bad listen spec '{s}': {why}; expected PORT or rp,PORT with PORT in 0..=65535 (e.g. 8709 or rp,8709)"
            ))
        };
        let t = s.trim();
        let (reuse_port, port) = match t.split_once(',') {
            Some((prefix, port)) => {
                if !prefix.trim().eq_ignore_ascii_case("rp") {
                    return Err(bad(&format!("unknown prefix '{}'", prefix.trim())));
                }
                (true, port.trim())
            }
            None => (false, t),
        };
        if port.is_empty() {
            return Err(bad("no port"));
        }
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(&format!("'{port}' is not a port number")));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| bad(&format!("{port} is out of range")))?;
        Ok(ListenSpec { port, reuse_port })
    }
}

impl FromStr for ListenSpec {
    type Err = NetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ListenSpec::parse(s)
    }
}

impl fmt::Display for ListenSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reuse_port {
            write!(f, "rp,{}", self.port)
        } else {
            write!(f, "{}", self.port)
        }
    }
}

/// Opens a TCP listener on `ip` per `spec`, for the role named by `what`
/// (used in the error message, e.g. "ILP TCP"). `SO_REUSEADDR` is always
/// set (a restarted role rebinds at once despite TIME_WAIT); `SO_REUSEPORT`
/// when the spec says `rp,`. The listener is non-blocking, ready for
/// `tokio::net::TcpListener::from_std`.
pub fn bind_tcp(ip: IpAddr, spec: &ListenSpec, what: &str) -> Result<TcpListener, NetError> {
    let socket = bind_socket(ip, spec, what)?;
    listen_socket(socket, ip, spec, what)
}

/// Binds a TCP socket on `ip` per `spec` without listening: the address is
/// taken (a conflict with a process that holds the port without
/// `SO_REUSEPORT` is reported now), but the kernel hands the socket no
/// connection until `listen_socket`. A query-group member binds this way at
/// start and listens once its tables are complete.
pub fn bind_socket(ip: IpAddr, spec: &ListenSpec, what: &str) -> Result<Socket, NetError> {
    let addr = SocketAddr::new(ip, spec.port);
    let fail = |source| listen_error(addr, spec, what, source);
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(fail)?;
    socket.set_reuse_address(true).map_err(fail)?;
    if spec.reuse_port {
        socket.set_reuse_port(true).map_err(fail)?;
    }
    socket.bind(&SockAddr::from(addr)).map_err(fail)?;
    Ok(socket)
}

/// Starts listening on a socket from `bind_socket`; non-blocking.
pub fn listen_socket(
    socket: Socket,
    ip: IpAddr,
    spec: &ListenSpec,
    what: &str,
) -> Result<TcpListener, NetError> {
    let addr = SocketAddr::new(ip, spec.port);
    let fail = |source| listen_error(addr, spec, what, source);
    socket.listen(LISTEN_BACKLOG).map_err(fail)?;
    socket.set_nonblocking(true).map_err(fail)?;
    Ok(socket.into())
}

fn listen_error(
    addr: SocketAddr,
    spec: &ListenSpec,
    what: &str,
    source: std::io::Error,
) -> NetError {
    let reason = if source.kind() == std::io::ErrorKind::AddrInUse {
        if spec.reuse_port {
            format!(
                "address already in use (a process holds it without SO_REUSEPORT; every process sharing the port must use rp,{})",
                spec.port
            )
        } else {
            format!(
                "address already in use (another process holds it; use rp,{} to share the port with SO_REUSEPORT)",
                spec.port
            )
        }
    } else {
        source.to_string()
    };
    NetError::Listen {
        what: what.to_string(),
        addr,
        reason,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn specs_parse_and_print() {
        for (text, port, rp) in [
            ("8709", 8709, false),
            ("rp,8709", 8709, true),
            ("0", 0, false),
            ("RP, 65535", 65535, true),
        ] {
            let s = ListenSpec::parse(text).unwrap();
            assert_eq!((s.port, s.reuse_port), (port, rp), "{text}");
            assert_eq!(ListenSpec::parse(&s.to_string()).unwrap(), s);
        }
        assert_eq!(ListenSpec::parse("rp,8709").unwrap().to_string(), "rp,8709");
        assert_eq!("8709".parse::<ListenSpec>().unwrap().to_string(), "8709");
        for bad in ["", "rp,", "x,1", "65536", "-1", "80a", "rp,8709,1", "rp"] {
            let e = ListenSpec::parse(bad).unwrap_err();
            assert!(matches!(e, NetError::BadSpec(_)));
            let e = e.to_string();
            assert!(e.contains("expected PORT or rp,PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn two_reuse_port_binds_share_a_port() {
        let a = bind_tcp(
            LOCALHOST,
            &ListenSpec {
                port: 0,
                reuse_port: true,
            },
            "test",
        )
        .unwrap();
        let port = a.local_addr().unwrap().port();
        let b = bind_tcp(
            LOCALHOST,
            &ListenSpec {
                port,
                reuse_port: true,
            },
            "test",
        )
        .unwrap();
        assert_eq!(b.local_addr().unwrap().port(), port);
    }

    #[test]
    fn plain_bind_on_a_used_port_says_why() {
        let a = bind_tcp(
            LOCALHOST,
            &ListenSpec {
                port: 0,
                reuse_port: false,
            },
            "ILP TCP",
        )
        .unwrap();
        let port = a.local_addr().unwrap().port();
        let e = bind_tcp(
            LOCALHOST,
            &ListenSpec {
                port,
                reuse_port: false,
            },
            "ILP TCP",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot listen for ILP TCP on 127.0.0.1:{port}: address already in use (another process holds it; use rp,{port} to share the port with SO_REUSEPORT)"
            )
        );
        assert!(!e.to_string().contains('\n'));
        // rp against a holder without SO_REUSEPORT fails too, and says so.
        let e = bind_tcp(
            LOCALHOST,
            &ListenSpec {
                port,
                reuse_port: true,
            },
            "ILP TCP",
        )
        .unwrap_err();
        assert!(e.to_string().contains("without SO_REUSEPORT"), "{e}");
    }

    #[tokio::test]
    async fn listener_works_with_tokio() {
        let std_l = bind_tcp(
            LOCALHOST,
            &ListenSpec {
                port: 0,
                reuse_port: false,
            },
            "test",
        )
        .unwrap();
        let addr = std_l.local_addr().unwrap();
        let l = tokio::net::TcpListener::from_std(std_l).unwrap();
        let client =
            tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await.unwrap() });
        let (_sock, _) = l.accept().await.unwrap();
        client.await.unwrap();
    }
}
