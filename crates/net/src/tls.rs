//! TLS with rustls (the ring provider), for every port a node serves over
//! TCP but kdb+ IPC: HTTP, PostgreSQL wire, ILP TCP, the tp's subscription
//! port and the replication port. The server side is a certificate chain
//! and its key, PEM, from `--tls-cert` and `--tls-key`; with them a port
//! speaks only TLS, and a plaintext client gets an answer it can read
//! saying so (HTTP 400 in plain HTTP, PostgreSQL FATAL 28000, the
//! subscription protocol's Error frame, the replication protocol's Refuse),
//! never a hang or garbage. The client side (tickdb's own clients of the
//! subscription and replication ports) trusts the CA certificates of one
//! PEM file and checks the server's name against the host it dialled.

use crate::stream::Stream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

pub use tokio_rustls::server::TlsStream;
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The first byte of a TLS record carrying a handshake: how a port tells
/// a TLS client from a plaintext one without consuming anything.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// A TLS record header's version bytes: major 3 (SSL 3.0 to TLS 1.3 all
/// write 3.x there).
const TLS_VERSION_MAJOR: u8 = 0x03;
const TLS_VERSION_MINOR_MAX: u8 = 0x04;
/// Bytes of a record header a server looks at to tell a ClientHello from a
/// tickdb frame: the content type and the version. One byte is not enough
/// there: a tickdb frame starts with its length, and a 22-byte `Login`
/// starts with 0x16 too.
const SNIFF_BYTES: usize = 3;
/// A peek that found the first byte but not the next ones looks again
/// after this long, in milliseconds (the rest is on its way).
const SNIFF_RETRY_MS: u64 = 5;
/// How long a server waits for a client's first bytes before taking it for
/// a plaintext client, on a port where the server speaks first
/// (replication: a plaintext standby waits for the primary's challenge,
/// while a TLS client sends its ClientHello as soon as it has connected),
/// in milliseconds.
pub const CLIENT_HELLO_WAIT_MS: u64 = 1_000;
/// After telling a plaintext client that its port speaks TLS only, the
/// server reads and drops what the client had sent, at most this long and
/// this much: a close with unread bytes is a reset, and a reset can destroy
/// the refusal before the client has read it.
pub const REFUSAL_DRAIN_MS: u64 = 500;
pub const REFUSAL_DRAIN_BYTES_MAX: usize = 64 * 1024;
/// Read buffer of that drain.
const REFUSAL_DRAIN_CHUNK_BYTES: usize = 4096;
/// How long a client waits for the server's side of the TLS handshake, in
/// milliseconds. A server that does not speak TLS may take the ClientHello
/// for the start of a long frame and wait for the rest: the client says
/// so instead of waiting as long.
pub const CLIENT_HANDSHAKE_TIMEOUT_MS: u64 = 2_000;

/// A server config from PEM files; the error names the file and what is
/// wrong with it.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: no CERTIFICATE in it (PEM expected)",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--tls-key {}: {e} (a PEM private key: PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert and --tls-key do not make a server identity: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Whether the next byte on `sock` starts a TLS handshake (None: closed
/// before sending anything).
pub async fn starts_tls(sock: &tokio::net::TcpStream) -> std::io::Result<Option<bool>> {
    let mut b = [0u8; 1];
    let n = sock.peek(&mut b).await?;
    Ok((n == 1).then_some(b[0] == TLS_HANDSHAKE_BYTE))
}

/// Whether `b`, the first bytes a client sent, start a TLS handshake
/// record (content type 22, version 3.x). A tickdb frame could start with
/// these bytes only if its length were 0x0316 plus a multiple of 2^16
/// bytes; on a TLS port such a plaintext client would fail its handshake
/// instead of being told to use TLS, which is all that could go wrong.
pub fn looks_like_client_hello(b: &[u8]) -> bool {
    b.len() >= SNIFF_BYTES
        && b[0] == TLS_HANDSHAKE_BYTE
        && b[1] == TLS_VERSION_MAJOR
        && b[2] <= TLS_VERSION_MINOR_MAX
}

/// A server's TLS (`--tls-cert`), for settings that derive `Debug`: it
/// prints as `ServerTls`, nothing of the certificate.
#[derive(Clone)]
pub struct ServerTls(pub TlsAcceptor);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

/// What a new connection on a TLS port turned out to be.
pub enum Accepted {
    /// A TLS session, its handshake done.
    Tls(Stream),
    /// A client speaking plaintext: its first bytes are not a ClientHello,
    /// or it sent nothing within the wait (it waits for the server to speak
    /// first). The caller tells it why it is refused, in the port's own
    /// protocol, with `refuse_plaintext`.
    Plaintext(TcpStream),
    /// Closed, failed or timed out during the handshake: why, for the log.
    Failed(String),
}

/// Accepts a connection on a port that speaks only TLS. `hello_wait`: how
/// long to wait for the client's first bytes; `handshake`: how long the
/// TLS handshake may then take.
pub async fn accept(
    sock: TcpStream,
    acceptor: &TlsAcceptor,
    hello_wait: Duration,
    handshake: Duration,
) -> Accepted {
    match sniff(&sock, hello_wait).await {
        Err(e) => Accepted::Failed(e.to_string()),
        Ok(None) => Accepted::Failed("closed before sending anything".into()),
        Ok(Some(false)) => Accepted::Plaintext(sock),
        Ok(Some(true)) => match tokio::time::timeout(handshake, acceptor.accept(sock)).await {
            Ok(Ok(s)) => Accepted::Tls(Stream::TlsServer(Box::new(s))),
            Ok(Err(e)) => Accepted::Failed(format!("TLS handshake failed: {e}")),
            Err(_) => Accepted::Failed(format!(
                "no TLS handshake within {} ms",
                handshake.as_millis()
            )),
        },
    }
}

/// Whether the client's first bytes start a TLS handshake: None when it
/// closed before sending anything; Some(false) when it sent something else,
/// or nothing within `wait`. Nothing is consumed.
async fn sniff(sock: &TcpStream, wait: Duration) -> std::io::Result<Option<bool>> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut b = [0u8; SNIFF_BYTES];
    loop {
        let n = match tokio::time::timeout_at(deadline, sock.peek(&mut b)).await {
            Ok(r) => r?,
            Err(_) => return Ok(Some(false)),
        };
        if n == 0 {
            return Ok(None);
        }
        if b[0] != TLS_HANDSHAKE_BYTE || n >= SNIFF_BYTES {
            return Ok(Some(looks_like_client_hello(&b[..n])));
        }
        // A peek returns at once while any byte is there: wait for the rest
        // instead of spinning on it.
        if tokio::time::Instant::now() >= deadline {
            return Ok(Some(false));
        }
        tokio::time::sleep(Duration::from_millis(SNIFF_RETRY_MS)).await;
    }
}

/// Sends a plaintext client `refusal` (a frame of the port's protocol that
/// says TLS is required), then closes the connection so that the client
/// reads the refusal before the end of the stream.
pub async fn refuse_plaintext(mut sock: TcpStream, refusal: &[u8]) {
    let _ = tokio::time::timeout(Duration::from_millis(REFUSAL_DRAIN_MS), async {
        sock.write_all(refusal).await?;
        sock.shutdown().await?;
        let mut buf = [0u8; REFUSAL_DRAIN_CHUNK_BYTES];
        let mut left = REFUSAL_DRAIN_BYTES_MAX;
        while left > 0 {
            let n = sock.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// A client's TLS settings: the CA certificates it trusts, from the PEM
/// file given to `flag` (named in its errors).
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    flag: String,
    file: PathBuf,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientTls({} {})", self.flag, self.file.display())
    }
}

/// A client that trusts the CA certificates in `ca` (PEM), given to the
/// flag `flag` (e.g. "--tp-tls-ca"); the error names the flag and the file.
pub fn client(ca: &Path, flag: &str) -> Result<ClientTls, String> {
    let bad = |e: &dyn std::fmt::Display| format!("{flag} {}: {e}", ca.display());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .map_err(|e| bad(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c).map_err(|e| bad(&e))?;
    }
    if roots.is_empty() {
        return Err(bad(
            &"no CERTIFICATE in it (PEM expected: the CA that signed the server's --tls-cert)",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(ClientTls {
        connector: TlsConnector::from(Arc::new(config)),
        flag: flag.to_string(),
        file: ca.to_path_buf(),
    })
}

/// The name a server's certificate must carry: the host part of `addr`
/// (HOST:PORT, [IPv6]:PORT). An IP address is checked against the
/// certificate's IP addresses, a name against its DNS names.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = match addr.rsplit_once(':') {
        Some((host, _port)) => host,
        None => addr,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(ServerName::from(ip));
    }
    ServerName::try_from(host.to_string())
        .map_err(|_| format!("'{host}' (of {addr}) is not a host name or IP address TLS can check"))
}

impl ClientTls {
    /// The TLS session over `sock`, connected to `addr`; Err says why in
    /// words an operator can act on.
    pub async fn connect(&self, addr: &str, sock: TcpStream) -> Result<Stream, String> {
        let name = server_name(addr)?;
        let handshake = self.connector.connect(name, sock);
        match tokio::time::timeout(Duration::from_millis(CLIENT_HANDSHAKE_TIMEOUT_MS), handshake).await {
            Ok(Ok(s)) => Ok(Stream::TlsClient(Box::new(s))),
            Ok(Err(e)) => Err(self.explain(addr, &e)),
            Err(_) => Err(format!(
                "TLS to {addr}: no answer to the handshake within {CLIENT_HANDSHAKE_TIMEOUT_MS} ms: the server probably does not speak TLS on this port (a tickdb node does only when started with --tls-cert)"
            )),
        }
    }

    fn explain(&self, addr: &str, e: &std::io::Error) -> String {
        let ca = format!("{} {}", self.flag, self.file.display());
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidCertificate(_)) => format!(
                "TLS to {addr}: {e}: the server's certificate must be signed by a CA in {ca} and name the host of {addr}"
            ),
            // What rustls makes of bytes that are not TLS records: a
            // plaintext protocol's greeting or error frame.
            Some(
                rustls::Error::InvalidMessage(_)
                | rustls::Error::InappropriateMessage { .. }
                | rustls::Error::InappropriateHandshakeMessage { .. }
                | rustls::Error::PeerMisbehaved(_),
            ) => format!(
                "the server at {addr} does not speak TLS on this port ({e}): a tickdb node does only when started with --tls-cert; to reach a plaintext port, leave out {}",
                self.flag
            ),
            _ if e.kind() == std::io::ErrorKind::UnexpectedEof => format!(
                "TLS to {addr}: the server closed the connection during the handshake (does it speak TLS on this port?)"
            ),
            _ => format!("TLS to {addr}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{read_message, write_message, Message, TYPE_LOGIN};
    use std::net::SocketAddr;
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(5);

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tls")
            .join(name)
    }

    fn server() -> TlsAcceptor {
        acceptor(&fixture("cert.pem"), &fixture("key.pem")).unwrap()
    }

    async fn listen() -> (TcpListener, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

    fn error(message: &str) -> Vec<u8> {
        let mut frame = Vec::new();
        crate::proto::encode_message(
            &Message::Error {
                message: message.into(),
            },
            &mut frame,
        );
        frame
    }

    #[test]
    fn a_client_hello_is_told_from_frames() {
        assert!(looks_like_client_hello(&[0x16, 0x03, 0x01, 0x00, 0xf0]));
        assert!(looks_like_client_hello(&[0x16, 0x03, 0x03]));
        // A 22-byte Login starts with 0x16 too: one byte is not enough.
        assert!(!looks_like_client_hello(&[22, 0, 0, 0, TYPE_LOGIN]));
        assert!(!looks_like_client_hello(&[0x16, 0x03]));
        assert!(!looks_like_client_hello(&[0x16, 0x03, 0x05]));
        assert!(!looks_like_client_hello(b"GET / HTTP/1.1"));
    }

    #[test]
    fn server_names_come_from_the_host_part() {
        let ip = |s: &str| match server_name(s).unwrap() {
            ServerName::IpAddress(a) => std::net::IpAddr::from(a).to_string(),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(ip("127.0.0.1:8710"), "127.0.0.1");
        assert_eq!(ip("[::1]:8710"), "::1");
        assert_eq!(ip("10.1.2.3"), "10.1.2.3");
        match server_name("tp-1.example.com:8710").unwrap() {
            ServerName::DnsName(d) => assert_eq!(d.as_ref(), "tp-1.example.com"),
            other => panic!("{other:?}"),
        }
        let e = server_name("bad host:1").unwrap_err();
        assert!(e.contains("bad host"), "{e}");
    }

    #[test]
    fn a_bad_ca_file_is_named_with_its_flag() {
        let e = client(&fixture("missing.pem"), "--tp-tls-ca").unwrap_err();
        assert!(
            e.starts_with("--tp-tls-ca ") && e.contains("missing.pem"),
            "{e}"
        );
        let e = client(&fixture("README.md"), "--primary-tls-ca").unwrap_err();
        assert!(
            e.contains("--primary-tls-ca") && e.contains("no CERTIFICATE"),
            "{e}"
        );
    }

    /// A TLS client and server exchange frames over split halves.
    #[tokio::test]
    async fn frames_cross_a_tls_session_both_ways() {
        let (l, addr) = listen().await;
        let tls = server();
        let srv = tokio::spawn(async move {
            let (sock, _) = l.accept().await.unwrap();
            let Accepted::Tls(s) = accept(sock, &tls, WAIT, WAIT).await else {
                panic!("not accepted as TLS");
            };
            assert!(s.is_tls());
            let (mut rd, mut wr) = s.into_split();
            while let Some(m) = read_message(&mut rd).await.unwrap() {
                write_message(&mut wr, &m).await.unwrap();
                wr.flush().await.unwrap();
            }
        });
        let c = client(&fixture("ca.pem"), "--tp-tls-ca").unwrap();
        let sock = TcpStream::connect(addr).await.unwrap();
        let mut s = c.connect(&addr.to_string(), sock).await.unwrap();
        assert!(s.is_tls());
        for i in 0..3u64 {
            let m = Message::Update {
                seq: i,
                payload: bytes::Bytes::from(vec![i as u8; 100_000]),
            };
            write_message(&mut s, &m).await.unwrap();
            s.flush().await.unwrap();
            match read_message(&mut s).await.unwrap() {
                Some(Message::Update { seq, payload }) => {
                    assert_eq!((seq, payload.len()), (i, 100_000));
                }
                other => panic!("{other:?}"),
            }
        }
        s.shutdown().await.unwrap();
        drop(s);
        srv.await.unwrap();
    }

    /// A plaintext client that speaks first reads the refusal.
    #[tokio::test]
    async fn a_plaintext_client_reads_why_it_is_refused() {
        let (l, addr) = listen().await;
        let tls = server();
        let srv = tokio::spawn(async move {
            let (sock, _) = l.accept().await.unwrap();
            let Accepted::Plaintext(sock) = accept(sock, &tls, WAIT, WAIT).await else {
                panic!("not taken for plaintext");
            };
            refuse_plaintext(sock, &error("TLS only")).await;
        });
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A Login of 22 bytes (its first byte is 0x16, as a ClientHello's).
        let login = Message::Login {
            user: "u".repeat(9),
            password: "p".repeat(9),
        };
        write_message(&mut s, &login).await.unwrap();
        match read_message(&mut s).await.unwrap() {
            Some(Message::Error { message }) => assert_eq!(message, "TLS only"),
            other => panic!("{other:?}"),
        }
        assert!(read_message(&mut s).await.unwrap().is_none());
        srv.await.unwrap();
    }

    /// On a port where the server speaks first, a silent client is a
    /// plaintext one.
    #[tokio::test]
    async fn a_silent_client_is_taken_for_plaintext() {
        let (l, addr) = listen().await;
        let tls = server();
        let _c = TcpStream::connect(addr).await.unwrap();
        let (sock, _) = l.accept().await.unwrap();
        let wait = Duration::from_millis(100);
        assert!(matches!(
            accept(sock, &tls, wait, WAIT).await,
            Accepted::Plaintext(_)
        ));
    }

    /// A TLS client on a plaintext port that answers in plaintext (as the
    /// replication primary's challenge, or the tp's Error frame) is told
    /// the port does not speak TLS.
    #[tokio::test]
    async fn a_tls_client_on_a_plaintext_port_says_so() {
        let (l, addr) = listen().await;
        let srv = tokio::spawn(async move {
            let (mut sock, _) = l.accept().await.unwrap();
            let _ = sock.write_all(&error("expected Subscribe")).await;
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
        });
        let c = client(&fixture("ca.pem"), "--tp-tls-ca").unwrap();
        let sock = TcpStream::connect(addr).await.unwrap();
        let e = c.connect(&addr.to_string(), sock).await.err().unwrap();
        assert!(e.contains("does not speak TLS on this port"), "{e}");
        assert!(e.contains("--tp-tls-ca"), "{e}");
        srv.await.unwrap();
    }

    /// A certificate from a CA the client does not trust is refused, and
    /// the error names the CA flag.
    #[tokio::test]
    async fn an_untrusted_certificate_is_refused() {
        let (l, addr) = listen().await;
        let tls = server();
        let srv = tokio::spawn(async move {
            let (sock, _) = l.accept().await.unwrap();
            match accept(sock, &tls, WAIT, WAIT).await {
                Accepted::Failed(why) => why,
                _ => panic!("accepted"),
            }
        });
        let c = client(&fixture("other-ca.pem"), "--primary-tls-ca").unwrap();
        let sock = TcpStream::connect(addr).await.unwrap();
        let e = c.connect(&addr.to_string(), sock).await.err().unwrap();
        assert!(
            e.contains("certificate") && e.contains("--primary-tls-ca"),
            "{e}"
        );
        let why = srv.await.unwrap();
        assert!(why.contains("TLS handshake failed"), "{why}");
    }
}
