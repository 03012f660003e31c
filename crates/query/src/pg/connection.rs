//! One PostgreSQL connection, start to end: the protocol library's message
//! handling (`pgwire::tokio::server::process_message`) inside a loop of our
//! own, which adds what a server exposed to any client needs:
//!
//! - a bound on each message's size (`framing`), checked before buffering;
//! - a startup timeout: authentication must finish within
//!   `startup_timeout`, or the connection is closed;
//! - an idle-session timeout: a session that sends nothing for
//!   `idle_timeout` between queries is ended with FATAL 57P05, as
//!   PostgreSQL's `idle_session_timeout` does;
//! - registration for cancel requests (`cancel`), keyed by the process id
//!   and secret key the client received at startup.

use super::cancel::{Connections, Session};
use super::framing::{Guarded, MessageGuard, TOO_LARGE};
use super::TickPgHandlers;
use datafusion_postgres::pgwire;
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::PgWireBackendMessage;
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

/// Limits of one connection.
#[derive(Clone)]
pub struct ConnLimits {
    pub startup_timeout: Duration,
    /// Zero: no idle timeout.
    pub idle_timeout: Duration,
    pub message_bytes_max: usize,
    /// With TLS (`--tls-cert`), only TLS sessions are served: a plaintext
    /// startup gets FATAL 28000 saying so.
    pub tls: Option<tickdb_net::tls::TlsAcceptor>,
}

impl std::fmt::Debug for ConnLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnLimits")
            .field("startup_timeout", &self.startup_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("message_bytes_max", &self.message_bytes_max)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Sends a FATAL error and ends the connection.
async fn fatal<S>(framed: &mut S, code: &str, message: String)
where
    S: futures::Sink<PgWireBackendMessage> + Unpin,
{
    let info = ErrorInfo::new("FATAL".to_string(), code.to_string(), message);
    let _ = framed
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await;
    let _ = framed.close().await;
}

/// What a session is told when the node drains, as PostgreSQL's shutdown
/// tells it.
const DRAIN_MESSAGE: &str =
    "terminating connection due to administrator command (the node is draining; reconnect to reach another member)";

pub(super) async fn run(
    socket: TcpStream,
    handlers: Arc<TickPgHandlers>,
    connections: Arc<Connections>,
    limits: ConnLimits,
    drain: tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let startup_deadline = Instant::now() + limits.startup_timeout;
    let negotiated = tokio::time::timeout_at(
        startup_deadline.into(),
        negotiate_tls::<super::DfStatement>(socket, limits.tls.clone()),
    )
    .await;
    let framed = match negotiated {
        Err(_) => return Err("no startup message within the startup timeout".into()),
        Ok(Err(e)) => return Err(format!("negotiating: {e}")),
        // A direct TLS handshake without TLS configured: nothing to say.
        Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(f))) => f,
    };
    // Re-frame over the guarded stream; bytes already read go through the
    // guard first.
    let parts = framed.into_parts();
    let mut guard = MessageGuard::new(limits.message_bytes_max);
    if let Err(e) = guard.observe(&parts.read_buf) {
        return Err(e.to_string());
    }
    let mut new_parts = FramedParts::new(Guarded::new(parts.io, guard), parts.codec);
    new_parts.read_buf = parts.read_buf;
    new_parts.write_buf = parts.write_buf;
    let mut framed = Framed::from_parts(new_parts);
    if limits.tls.is_some() && !framed.is_secure() {
        fatal(
            &mut framed,
            "28000",
            "this server accepts only SSL/TLS connections (--tls-cert): connect with sslmode=require".into(),
        )
        .await;
        return Err("a plaintext client on the TLS port; told to use sslmode=require".into());
    }

    let startup = handlers.startup();
    let queries = handlers.queries();
    let copy = Arc::new(pgwire::api::NoopHandler);
    let cancel = handlers.cancel();
    let errors = handlers.errors();
    let mut session: Option<Session> = None;

    loop {
        let state = framed.state();
        let starting = matches!(
            state,
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        if !starting && session.is_none() {
            // Authenticated: the client now holds its pid and secret key.
            let (pid, key) = framed.pid_and_secret_key();
            let s = connections.register(pid, &key);
            framed.session_extensions().insert(s.slot());
            session = Some(s);
        }
        let wait_until = if starting {
            Some(startup_deadline)
        } else if matches!(state, PgWireConnectionState::ReadyForQuery)
            && !limits.idle_timeout.is_zero()
        {
            Some(Instant::now() + limits.idle_timeout)
        } else {
            None
        };
        // Between statements a draining node ends the session; a statement
        // under way (or a startup) finishes first.
        let idle = matches!(state, PgWireConnectionState::ReadyForQuery);
        if idle && drain.is_cancelled() {
            fatal(&mut framed, "57P01", DRAIN_MESSAGE.into()).await;
            return Ok(());
        }
        let next_msg = async {
            if idle {
                tokio::select! {
                    m = framed.next() => Some(m),
                    _ = drain.cancelled() => None,
                }
            } else {
                Some(framed.next().await)
            }
        };
        let next = match wait_until {
            Some(t) => match tokio::time::timeout_at(t.into(), next_msg).await {
                Ok(m) => m,
                Err(_) if starting => {
                    fatal(
                        &mut framed,
                        "08P01",
                        "authentication did not finish within the startup timeout".into(),
                    )
                    .await;
                    return Err("startup timeout".into());
                }
                Err(_) => {
                    fatal(
                        &mut framed,
                        "57P05",
                        format!(
                            "terminating connection due to idle-session timeout ({} s, --pg-idle-timeout-s)",
                            limits.idle_timeout.as_secs()
                        ),
                    )
                    .await;
                    return Err("idle-session timeout".into());
                }
            },
            None => next_msg.await,
        };
        let Some(next) = next else {
            fatal(&mut framed, "57P01", DRAIN_MESSAGE.into()).await;
            return Ok(());
        };
        let msg = match next {
            None => return Ok(()),
            Some(Ok(m)) => m,
            Some(Err(PgWireError::IoError(e))) if e.to_string().contains(TOO_LARGE) => {
                fatal(&mut framed, "54000", e.to_string()).await;
                return Err(e.to_string());
            }
            Some(Err(e)) => return Err(e.to_string()),
        };
        // Terminate: the client is leaving and may wait for us to close.
        if matches!(msg, pgwire::messages::PgWireFrontendMessage::Terminate(_)) {
            return Ok(());
        }
        let extended_query = match framed.state() {
            PgWireConnectionState::CopyInProgress(x) => x,
            _ => msg.is_extended_query(),
        };
        if let Err(mut e) = process_message(
            msg,
            &mut framed,
            startup.clone(),
            queries.clone(),
            queries.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await
        {
            errors.on_error(&framed, &mut e);
            process_error(&mut framed, e, extended_query)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
}
