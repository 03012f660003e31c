//! The HTTP listener: accepts connections up to a bound, and serves each
//! with limits a slow or idle client cannot get around: the request head
//! must arrive within `header_timeout` (this also closes keep-alive
//! connections idle that long), and it may be at most
//! `HTTP_HEAD_BYTES_MAX`. Request bodies have their own timeout, applied
//! where they are read (`http::write`).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tickdb_net::acceptor::Acceptor;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Connections served at once, by default; more get 503 and are closed.
pub const HTTP_CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Time a client has to send a request head, by default; also how long an
/// idle keep-alive connection is kept.
pub const HTTP_HEADER_TIMEOUT_S_DEFAULT: u64 = 30;
/// Time a client has to send a request body, by default.
pub const HTTP_BODY_TIMEOUT_S_DEFAULT: u64 = 60;
/// Largest request head (request line and headers), in bytes. hyper's read
/// buffer bound: a head larger than this is refused with 431.
pub const HTTP_HEAD_BYTES_MAX: usize = 64 * 1024;
/// Time allowed to write the refusal to a client over the connection bound.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Limits of the HTTP port.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub connections_max: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connections_max: HTTP_CONNECTIONS_MAX_DEFAULT,
            header_timeout: Duration::from_secs(HTTP_HEADER_TIMEOUT_S_DEFAULT),
            body_timeout: Duration::from_secs(HTTP_BODY_TIMEOUT_S_DEFAULT),
        }
    }
}

/// Serves `router` on the connections `acceptor` hands over, until it is
/// done. When the node drains, each connection ends the way HTTP/1.1
/// allows: an idle keep-alive connection is closed at once, one with a
/// request under way answers it (with `connection: close`) and then
/// closes.
///
/// With `tls`, every connection must start a TLS handshake; a plaintext
/// one is answered 400 in plain HTTP, saying to use https, and closed.
pub async fn serve(
    mut acceptor: Acceptor,
    router: Router,
    limits: HttpLimits,
    tls: Option<tickdb_net::tls::TlsAcceptor>,
) {
    let open = Arc::new(Semaphore::new(limits.connections_max.max(1)));
    let (drain, conns) = (acceptor.drain(), acceptor.conns());
    while let Some(accepted) = acceptor.accept().await {
        let (sock, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep
                // serving the connections that exist.
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::warn!(
                "HTTP: refusing {peer}: {} connections open (--http-connections-max)",
                limits.connections_max
            );
            tokio::spawn(refuse(sock, limits.connections_max));
            continue;
        };
        let _ = sock.set_nodelay(true);
        // The gate needs the client's address (failed-login limits).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(crate::http_auth::PeerAddr(peer));
                req
            },
        ));
        let header_timeout = limits.header_timeout;
        let (drain, counted) = (drain.clone(), conns.enter());
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(sock, service, header_timeout, drain, peer).await,
                Some(tls) => {
                    // The handshake has the head's time to finish.
                    let accepted = tokio::time::timeout(header_timeout, async {
                        match tickdb_net::tls::starts_tls(&sock).await {
                            Ok(Some(true)) => tls.accept(sock).await.map_err(|e| e.to_string()),
                            Ok(Some(false)) => {
                                plaintext_refusal(sock).await;
                                Err("a plaintext request on the TLS port; told to use https".into())
                            }
                            Ok(None) => Err("closed before sending anything".into()),
                            Err(e) => Err(e.to_string()),
                        }
                    })
                    .await;
                    match accepted {
                        Ok(Ok(stream)) => {
                            connection(stream, service, header_timeout, drain, peer).await
                        }
                        Ok(Err(e)) => tracing::debug!("HTTP connection {peer}: TLS: {e}"),
                        Err(_) => {
                            tracing::debug!("HTTP connection {peer}: TLS handshake timed out")
                        }
                    }
                }
            }
            drop(permit);
            drop(counted);
        });
    }
}

/// Serves HTTP/1.1 on one connection (plain or TLS) until it ends or the
/// node drains.
async fn connection<I, S>(
    io: I,
    service: S,
    header_timeout: Duration,
    drain: tokio_util::sync::CancellationToken,
    peer: std::net::SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(HTTP_HEAD_BYTES_MAX);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let done = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = drain.cancelled() => None,
    };
    let result = match done {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("HTTP connection {peer}: {e}");
    }
}

/// What a plaintext HTTP client on the TLS port reads.
async fn plaintext_refusal(mut sock: TcpStream) {
    let body = serde_json::json!({
        "code": "tls_required",
        "message": "this port speaks HTTPS only (--tls-cert): use https://",
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, sock.write_all(response.as_bytes())).await;
}

/// A minimal 503 to a client over the connection bound, then close.
async fn refuse(mut sock: TcpStream, max: usize) {
    let body = serde_json::json!({
        "code": "busy",
        "message": format!("{max} HTTP connections are open, the most this node serves (--http-connections-max); retry shortly"),
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, sock.write_all(response.as_bytes())).await;
}
