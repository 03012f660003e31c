//! The PostgreSQL wire protocol front of the engine, on `pgwire` and
//! `datafusion-postgres`, so that psql, psycopg, JDBC and pandas talk to an
//! RDB unchanged.
//!
//! What is ours and what is borrowed:
//! - `datafusion-postgres` brings the Arrow → Postgres type mapping,
//!   `SET`/`SHOW`/transaction statements and the `pg_catalog` tables psql's
//!   `\d` and `\dt` query; `pgwire` the message codec and handling.
//! - `connection` is the per-connection loop: message size bound, startup
//!   and idle-session timeouts, registration for cancel requests.
//! - `TickHook` plans every other statement through `QueryEngine`, so pgwire
//!   gets exactly what HTTP gets: readiness, admission, the statement
//!   limits, the ASOF JOIN rewrite, read-only checks, and the time and
//!   memory limits, with the session's `statement_timeout` when shorter.
//! - `encode_rows` encodes a query's rows, a batch at a time, in the text
//!   or binary formats the client asked for (the library's encoder for
//!   the column types it does not cover).
//! - `TickErrors` turns DataFusion errors into Postgres errors with a
//!   SQLSTATE a client can branch on and the position in the message.
//! - `TickStartup` is password authentication: with a users file
//!   (`--users`), SCRAM-SHA-256 against each user's stored verifier, MD5
//!   for users with a `pg_md5` entry under `--pg-auth md5` (`scram`);
//!   without one, MD5 for the one `--pg-user` (which psql, psycopg and JDBC
//!   all speak); none only when the operator explicitly turned it off.
//!
//! Everything here runs on the engine's query threads (`serve` is spawned
//! there), so a PostgreSQL client never occupies the ingest threads.

mod cancel;
mod connection;
mod encode_rows;
mod framing;
pub mod scram;

pub use connection::ConnLimits;
pub use scram::{PgAuthMethod, PgUsers};

use crate::context::{QueryCtx, CURRENT_QUERY};
use crate::{QueryEngine, QueryError};
use async_trait::async_trait;
use cancel::{Connections, SlotRef, TickCancel};
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire;
use datafusion_postgres::{DfSessionService, QueryHook};
use encode_rows::encode_dataframe;
use futures::Sink;
use futures::{SinkExt, StreamExt};
use pgwire::api::auth::md5pass::{hash_md5_password, Md5PasswordAuthStartupHandler};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::portal::PortalExecutionState;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::QueryResponse;
use pgwire::api::results::{FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::Entry;
use pgwire::api::store::PortalStore;
use pgwire::api::DEFAULT_NAME;
use pgwire::api::{ClientInfo, ClientPortalStore, ErrorHandler, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::types::format::FormatOptions;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Default credentials (documented in docs/sql.md and `--help`).
pub const PG_USER_DEFAULT: &str = "tickdb";
pub const PG_PASSWORD_DEFAULT: &str = "tickdb";

/// How clients authenticate.
#[derive(Debug, Clone)]
pub enum PgAuth {
    /// MD5 password authentication for one user (no users file).
    Password { user: String, password: String },
    /// The users file: SCRAM-SHA-256 (and MD5 for `pg_md5` entries with
    /// `--pg-auth md5`), the `read` role to connect, failed logins limited.
    Users(PgUsers),
    /// No authentication at all (`--pg-no-auth`).
    Trust,
}

/// Connections the PostgreSQL port serves at once, by default; more are
/// refused with SQLSTATE 53300.
pub const PG_CONNECTIONS_MAX_DEFAULT: usize = 256;
/// Time a new connection has to authenticate, by default.
pub const PG_STARTUP_TIMEOUT_S_DEFAULT: u64 = 10;
/// Time a session may sit idle between queries, by default (PostgreSQL's
/// `idle_session_timeout`); zero turns it off.
pub const PG_IDLE_TIMEOUT_S_DEFAULT: u64 = 3600;
/// Largest protocol message accepted, by default. A statement is bounded
/// at `limits::QUERY_TEXT_BYTES_MAX` anyway; this also bounds bind
/// parameters and what one connection may make the server buffer.
pub const PG_MESSAGE_BYTES_MAX_DEFAULT: usize = 8 * 1024 * 1024;

/// How the PostgreSQL port serves.
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub auth: PgAuth,
    pub connections_max: usize,
    pub limits: ConnLimits,
}

impl PgOptions {
    pub fn new(auth: PgAuth) -> PgOptions {
        PgOptions {
            auth,
            connections_max: PG_CONNECTIONS_MAX_DEFAULT,
            limits: ConnLimits {
                startup_timeout: std::time::Duration::from_secs(PG_STARTUP_TIMEOUT_S_DEFAULT),
                idle_timeout: std::time::Duration::from_secs(PG_IDLE_TIMEOUT_S_DEFAULT),
                message_bytes_max: PG_MESSAGE_BYTES_MAX_DEFAULT,
                tls: None,
            },
        }
    }
}

/// Serves the PostgreSQL protocol on the connections `acceptor` hands over
/// until it is done (the node drains) or the task is dropped. Spawn it on
/// the node's own runtime, not the query threads: it accepts there and
/// answers cancel requests there (`cancel::answer_cancel_request`), so a
/// cancel reaches its query even while queries hold every query thread;
/// every other connection is served on the engine's query threads
/// (`QueryEngine::runtime`). When the node
/// drains, every session ends politely as PostgreSQL's smart shutdown
/// does: an idle one at once, a busy one after its query's answer, each
/// with FATAL 57P01 ("terminating connection due to administrator
/// command"), which clients show and reconnect on.
pub async fn serve(
    mut acceptor: tickdb_net::acceptor::Acceptor,
    engine: QueryEngine,
    opts: PgOptions,
) {
    let connections = Arc::new(Connections::default());
    let query_threads = engine.runtime().clone();
    let handlers = Arc::new(TickPgHandlers::new(
        engine,
        opts.auth.clone(),
        connections.clone(),
    ));
    let open = Arc::new(tokio::sync::Semaphore::new(opts.connections_max.max(1)));
    let (drain, conns) = (acceptor.drain(), acceptor.conns());
    while let Some(accepted) = acceptor.accept().await {
        match accepted {
            Ok((mut socket, peer)) => {
                let _ = socket.set_nodelay(true);
                // Taken at once, so that connections that say nothing count
                // against the limit while they wait, cancel requests too.
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    tracing::warn!(
                        "pgwire: refusing {peer}: {} connections open (--pg-connections-max)",
                        opts.connections_max
                    );
                    tokio::spawn(refuse(socket, opts.connections_max));
                    continue;
                };
                let (h, c, mut limits) =
                    (handlers.clone(), connections.clone(), opts.limits.clone());
                let (drain, counted) = (drain.clone(), conns.enter());
                let query_threads = query_threads.clone();
                let accepted_at = std::time::Instant::now();
                tokio::spawn(async move {
                    match cancel::answer_cancel_request(&mut socket, &c, limits.startup_timeout)
                        .await
                    {
                        cancel::Opening::Done => return,
                        cancel::Opening::Silent => {
                            tracing::debug!(
                                "pgwire connection {peer}: no startup message within the startup timeout"
                            );
                            return;
                        }
                        cancel::Opening::Startup => {}
                    }
                    // The startup timeout counts from the accept.
                    limits.startup_timeout =
                        limits.startup_timeout.saturating_sub(accepted_at.elapsed());
                    // Re-registered with the query threads' reactor: the
                    // session's reads and writes are woken there, where
                    // its queries run, not on the node's runtime.
                    let socket = match socket.into_std() {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::debug!("pgwire connection {peer}: {e}");
                            return;
                        }
                    };
                    query_threads.spawn(async move {
                        let run = match tokio::net::TcpStream::from_std(socket) {
                            Ok(socket) => connection::run(socket, h, c, limits, drain).await,
                            Err(e) => Err(e.to_string()),
                        };
                        if let Err(e) = run {
                            tracing::debug!("pgwire connection {peer}: {e}");
                        }
                        drop(permit);
                        drop(counted);
                    });
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: say so, back off,
                // keep serving the connections that exist.
                tracing::warn!("pgwire accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// Startup packets read at most from a connection being refused.
const REFUSAL_PACKET_BYTES_MAX: usize = 10_000;
/// Time a refused connection gets to send its startup packet.
const REFUSAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// The codes of the SSL and GSSAPI encryption requests, which come before
/// a startup packet and are answered 'N' (not supported here).
const SSL_REQUEST_CODE: i32 = 80_877_103;
const GSSENC_REQUEST_CODE: i32 = 80_877_104;

/// Answers a connection over the limit the way PostgreSQL does: decline
/// encryption if asked, read the startup packet, then an ErrorResponse
/// with SQLSTATE 53300, which clients show as "too many clients".
async fn refuse(mut socket: tokio::net::TcpStream, max: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let handshake = async {
        for _ in 0..3 {
            let mut len = [0u8; 4];
            socket.read_exact(&mut len).await?;
            let len = i32::from_be_bytes(len) as usize;
            if !(8..=REFUSAL_PACKET_BYTES_MAX).contains(&len) {
                break;
            }
            let mut rest = vec![0u8; len - 4];
            socket.read_exact(&mut rest).await?;
            let code = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            if code == SSL_REQUEST_CODE || code == GSSENC_REQUEST_CODE {
                socket.write_all(b"N").await?;
                continue;
            }
            break;
        }
        let msg =
            format!("sorry, too many clients already ({max} connections, --pg-connections-max)");
        let mut body = Vec::new();
        for (code, text) in [
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "53300"),
            (b'M', msg.as_str()),
        ] {
            body.push(code);
            body.extend_from_slice(text.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut frame = vec![b'E'];
        frame.extend(((body.len() + 4) as i32).to_be_bytes());
        frame.extend(body);
        socket.write_all(&frame).await
    };
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, handshake).await;
}

struct TickPgHandlers {
    service: Arc<DfSessionService>,
    auth: PgAuth,
    /// Backend pids and cancel keys, one sequence for every connection.
    keys: Arc<dyn pgwire::api::PidSecretKeyGenerator>,
    engine: QueryEngine,
    connections: Arc<Connections>,
}

type DfStatement = (String, Option<(Statement, LogicalPlan)>);

impl TickPgHandlers {
    fn new(engine: QueryEngine, auth: PgAuth, connections: Arc<Connections>) -> Self {
        let ctx = Arc::new(engine.session().clone());
        // The library's own statement hooks first (they answer SET, SHOW,
        // BEGIN/COMMIT and cursors without planning), then ours for the
        // rest, so nothing reaches the library's unrestricted default path.
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(StatementTimeoutHook),
            Arc::new(SetShowHook),
            Arc::new(TransactionStatementHook),
            Arc::new(CursorStatementHook),
            Arc::new(DdlHook {
                engine: engine.clone(),
            }),
            Arc::new(TickHook {
                engine: engine.clone(),
            }),
        ];
        TickPgHandlers {
            service: Arc::new(DfSessionService::new_with_hooks(ctx, hooks)),
            auth,
            keys: Arc::new(pgwire::api::RandomPidSecretKeyGenerator::default()),
            engine,
            connections,
        }
    }
}

/// The handlers of one connection, by their concrete types (the
/// connection loop needs the extended handler's statement type).
impl TickPgHandlers {
    fn queries(&self) -> Arc<WithPositions> {
        Arc::new(WithPositions {
            inner: self.service.clone(),
            engine: self.engine.clone(),
            parser: Arc::new(TickParser {
                inner: self.service.query_parser(),
            }),
        })
    }

    /// Called once per connection: the MD5 handler keeps the connection's
    /// expected hash between its two messages, so it must not be shared.
    fn startup(&self) -> Arc<TickStartup> {
        Arc::new(match &self.auth {
            PgAuth::Trust => TickStartup::Trust(TrustStartup),
            PgAuth::Users(users) => TickStartup::Users(Box::new(scram::UsersStartup::new(
                users.clone(),
                self.keys.clone(),
                Arc::new(DefaultServerParameterProvider::default()),
            ))),
            PgAuth::Password { user, password } => {
                // The shared generator: the library's own, made per
                // handler, gave every connection the same process id.
                TickStartup::Md5(Box::new(
                    Md5PasswordAuthStartupHandler::new(
                        Arc::new(OneUser {
                            user: user.clone(),
                            password: password.clone(),
                        }),
                        Arc::new(DefaultServerParameterProvider::default()),
                    )
                    .with_pid_secret_key_generator(self.keys.clone()),
                ))
            }
        })
    }

    fn errors(&self) -> Arc<TickErrors> {
        Arc::new(TickErrors {
            timeout: self.engine.options().timeout,
        })
    }

    fn cancel(&self) -> Arc<TickCancel> {
        Arc::new(TickCancel {
            connections: self.connections.clone(),
        })
    }
}

// ---------------------------------------------------------------------------
// Statements
// ---------------------------------------------------------------------------

struct TickHook {
    engine: QueryEngine,
}

/// The client's `statement_timeout` (milliseconds in the session's
/// metadata, where `datafusion-postgres`'s `SHOW` reads it too).
const STATEMENT_TIMEOUT_KEY: &str = "statement_timeout_ms";

fn statement_timeout<C: ClientInfo + ?Sized>(client: &C) -> Option<Duration> {
    client
        .metadata()
        .get(STATEMENT_TIMEOUT_KEY)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

/// A context for the statement a client is about to run, recorded as its
/// connection's current query so a cancel request can reach it.
fn start_query<C: ClientInfo + ?Sized>(engine: &QueryEngine, client: &C) -> QueryCtx {
    let ctx = engine.new_ctx(statement_timeout(client));
    if let Some(slot) = client.session_extensions().get::<SlotRef>() {
        slot.0.start(&ctx);
    }
    ctx
}

#[async_trait]
impl QueryHook for TickHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _session: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let ctx = start_query(&self.engine, client);
        let permit = match self.engine.enter(&ctx).await {
            Ok(p) => p,
            Err(e) => return Some(Err(pg_error(&e))),
        };
        let df = match self.engine.plan_statement(statement.clone(), &ctx).await {
            Ok(df) => df,
            Err(e) => return Some(Err(pg_error(&e))),
        };
        let opts = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        Some(
            encode_dataframe(df, &Format::UnifiedText, Some(opts))
                .await
                .map(|r| Response::Query(guarded(r, permit, ctx.clone())))
                .map_err(|e| classify(e, &ctx)),
        )
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _session: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        // Planning only: the statement's own context starts at Execute.
        let ctx = self.engine.new_ctx(None);
        Some(
            self.engine
                .plan_statement(statement.clone(), &ctx)
                .await
                .map(|df| df.into_parts().1)
                .map_err(|e| pg_error(&e)),
        )
    }

    /// The library binds the parameters of a prepared plan (ours,
    /// rewritten and checked at parse); a query then runs here with its
    /// rows in the formats of the portal `WithPositions` offered
    /// (`encode_rows`), anything else with the library. `WithPositions`
    /// runs both inside the statement's context (readiness, admission,
    /// deadline, cancel).
    async fn handle_extended_query(
        &self,
        statement: &Statement,
        plan: &LogicalPlan,
        params: &ParamValues,
        session: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        encode_rows::execute_query(statement, plan, params, session, client).await
    }
}

/// `CREATE TABLE` and `ALTER TABLE ... ADD COLUMN`: schema changes the
/// node's tp runs, as the logged-in user (an admin, on a node with users;
/// see `crate::ddl`). Prepared (psycopg's extended protocol) they plan to
/// nothing and run at Execute.
struct DdlHook {
    engine: QueryEngine,
}

#[async_trait]
impl QueryHook for DdlHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _session: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let ops = match crate::ddl::from_statement(statement, None) {
            Ok(None) => return None,
            Ok(Some(ops)) => ops,
            Err(e) => return Some(Err(pg_error(&e))),
        };
        let user = client.metadata().get(pgwire::api::METADATA_USER).cloned();
        Some(
            match self
                .engine
                .exec_ddl(ops, &statement.to_string(), user.as_deref())
                .await
            {
                Ok(done) => Ok(Response::Execution(pgwire::api::results::Tag::new(
                    done.tag,
                ))),
                Err(e) => Err(pg_error(&e)),
            },
        )
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _session: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        match crate::ddl::from_statement(statement, None) {
            Ok(None) => None,
            Ok(Some(_)) => Some(Ok(LogicalPlan::EmptyRelation(
                datafusion::logical_expr::EmptyRelation {
                    produce_one_row: false,
                    schema: Arc::new(datafusion::common::DFSchema::empty()),
                },
            ))),
            Err(e) => Some(Err(pg_error(&e))),
        }
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        session: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.handle_simple_query(statement, session, client).await
    }
}

/// `SET statement_timeout`, checked: PostgreSQL's units (`us`, `ms`, `s`,
/// `min`, `h`, `d`; a bare number is milliseconds), `0` or `DEFAULT` for
/// none, and a clear error for anything else (the library's own handler
/// accepted any text and then applied no timeout).
struct StatementTimeoutHook;

/// Parses a `statement_timeout` value into milliseconds (0 = none).
fn parse_timeout_ms(text: &str) -> Option<u64> {
    let t = text.trim().trim_matches(|c| c == '\'' || c == '"').trim();
    if t.eq_ignore_ascii_case("default") {
        return Some(0);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let ms = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => n,
        "us" => n / 1000.0,
        "s" => n * 1000.0,
        "min" => n * 60_000.0,
        "h" => n * 3_600_000.0,
        "d" => n * 86_400_000.0,
        _ => return None,
    };
    if !ms.is_finite() || ms < 0.0 || ms > u64::MAX as f64 {
        return None;
    }
    // PostgreSQL rounds a positive fraction of a millisecond up to 1 ms.
    Some(if ms > 0.0 { ms.ceil() as u64 } else { 0 })
}

#[async_trait]
impl QueryHook for StatementTimeoutHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _session: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        use datafusion::sql::sqlparser::ast::Set;
        let Statement::Set(Set::SingleAssignment {
            variable, values, ..
        }) = statement
        else {
            return None;
        };
        if !variable
            .to_string()
            .eq_ignore_ascii_case("statement_timeout")
        {
            return None;
        }
        let text = values
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        match parse_timeout_ms(&text) {
            Some(0) => {
                client.metadata_mut().remove(STATEMENT_TIMEOUT_KEY);
            }
            Some(ms) => {
                client
                    .metadata_mut()
                    .insert(STATEMENT_TIMEOUT_KEY.to_string(), ms.to_string());
            }
            None => {
                return Some(Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".to_string(),
                    "22023".to_string(),
                    format!(
                        "invalid value for parameter \"statement_timeout\": {text} \
                         (a number of milliseconds, or with a unit: us, ms, s, min, h, d)"
                    ),
                )))))
            }
        }
        Some(Ok(Response::Execution(pgwire::api::results::Tag::new(
            "SET",
        ))))
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _session: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        use datafusion::sql::sqlparser::ast::Set;
        match statement {
            Statement::Set(Set::SingleAssignment { variable, .. })
                if variable
                    .to_string()
                    .eq_ignore_ascii_case("statement_timeout") =>
            {
                Some(Ok(LogicalPlan::EmptyRelation(
                    datafusion::logical_expr::EmptyRelation {
                        produce_one_row: false,
                        schema: Arc::new(datafusion::common::DFSchema::empty()),
                    },
                )))
            }
            _ => None,
        }
    }

    async fn handle_extended_query(
        &self,
        statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        session: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.handle_simple_query(statement, session, client).await
    }
}

/// Time the row stream waits past a statement's deadline for the plan's own
/// checks to end it cleanly, before it ends the stream itself.
const ROWS_DEADLINE_GRACE: Duration = Duration::from_millis(500);

/// A query's rows with its turn in the pool held until the last row is
/// sent (or the stream dropped, which also cancels the query), errors
/// classified, and the deadline kept even while one batch computes.
fn guarded(resp: QueryResponse, permit: crate::pool::Permit, ctx: QueryCtx) -> QueryResponse {
    let sleep = Box::pin(tokio::time::sleep_until(
        (ctx.deadline() + ROWS_DEADLINE_GRACE).into(),
    ));
    let rows = GuardedRows {
        rows: resp.data_rows,
        _permit: permit,
        _cancel: ctx.cancel_on_drop(),
        ctx,
        sleep,
        done: false,
    };
    let mut out = QueryResponse::new(resp.row_schema, rows);
    out.set_command_tag(&resp.command_tag);
    out
}

struct GuardedRows {
    rows: pgwire::api::results::SendableRowStream,
    _permit: crate::pool::Permit,
    _cancel: crate::context::CancelOnDrop,
    ctx: QueryCtx,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    done: bool,
}

impl futures::Stream for GuardedRows {
    type Item = PgWireResult<pgwire::messages::data::DataRow>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.done {
            return Poll::Ready(None);
        }
        match self.rows.as_mut().poll_next(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                let e = classify(e, &self.ctx);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            // The timer is only polled while the rows wait.
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.done = true;
                    self.ctx.cancel();
                    Poll::Ready(Some(Err(pg_error(&QueryError::Timeout(
                        self.ctx.timeout(),
                    )))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// A library error from a query's execution, classified under its context
/// (the deadline named is the statement's own).
fn classify(e: PgWireError, ctx: &QueryCtx) -> PgWireError {
    match e {
        PgWireError::ApiError(inner) => {
            match inner.downcast::<datafusion::common::DataFusionError>() {
                Ok(df) => {
                    let q = match crate::deadline::stop_of(&df) {
                        Some(crate::context::Stop::Deadline) => QueryError::Timeout(ctx.timeout()),
                        Some(crate::context::Stop::Cancelled) => QueryError::Cancelled,
                        None => QueryError::from(*df),
                    };
                    pg_error(&q)
                }
                Err(other) => PgWireError::ApiError(other),
            }
        }
        other => other,
    }
}

// ---------------------------------------------------------------------------
// Syntax error positions
// ---------------------------------------------------------------------------

/// The library's handlers, with syntax errors given their position: its
/// Postgres-compatibility parser rewrites tokens and loses their
/// locations, so a failed parse is repeated with DataFusion's parser on
/// the client's text, which knows where it failed.
struct WithPositions {
    inner: Arc<DfSessionService>,
    engine: QueryEngine,
    parser: Arc<TickParser>,
}

struct TickParser {
    inner: Arc<datafusion_postgres::Parser>,
}

fn locate_syntax_error(sql: &str, e: PgWireError) -> PgWireError {
    let PgWireError::ApiError(inner) = &e else {
        return e;
    };
    let Some(original) = inner.downcast_ref::<ParserError>() else {
        return e;
    };
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let df = match datafusion::sql::parser::DFParser::parse_sql_with_dialect(sql, &dialect) {
        Err(found) => found,
        Ok(_) => datafusion::common::DataFusionError::SQL(Box::new(original.clone()), None),
    };
    let q = crate::error::with_sql(crate::error::from_df(df), sql);
    pg_error_in(&q, Some(sql))
}

#[async_trait]
impl QueryParser for TickParser {
    type Statement = DfStatement;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        // Checking and parsing (with the planning of the statement the
        // library's parse includes) is CPU work: off the worker.
        crate::pool::off_worker(async {
            check_limits(sql)?;
            self.inner
                .parse_sql(client, sql, types)
                .await
                .map_err(|e| locate_syntax_error(sql, e))
        })
        .await
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        self.inner.get_parameter_types(stmt)
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        self.inner.get_result_schema(stmt, column_format)
    }
}

#[async_trait]
impl SimpleQueryHandler for WithPositions {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Parsing and planning (the rows are computed later, as they are
        // sent) off the worker.
        crate::pool::off_worker(async {
            check_limits(query)?;
            SimpleQueryHandler::do_query(self.inner.as_ref(), client, query)
                .await
                .map_err(|e| locate_syntax_error(query, e))
        })
        .await
    }
}

#[async_trait]
impl ExtendedQueryHandler for WithPositions {
    type Statement = DfStatement;
    type QueryParser = TickParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    /// Execute, with the rows of a query streamed as they are computed. The
    /// library's own Execute first gathers every row of the portal into
    /// memory (its `Portal::fetch` with no row limit collects them all), so
    /// the common case (a query portal run to its end: psycopg, JDBC and
    /// pandas all do that) is sent here row by row, under the connection's
    /// write backpressure. Row-limited executes and resumed portals keep the
    /// library's path.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(p)) => Some(p),
            _ => None,
        };
        let streamable = match &portal {
            Some(p) => {
                message.max_rows == 0
                    && matches!(
                        client.state(),
                        pgwire::api::PgWireConnectionState::ReadyForQuery
                    )
                    && matches!(&p.statement.statement.1, Some((Statement::Query(_), _)))
                    && matches!(*p.state().lock().await, PortalExecutionState::Initial)
            }
            None => false,
        };
        let Some(portal) = portal.filter(|_| streamable) else {
            return self._on_execute(client, message).await;
        };
        let status = client.transaction_status();
        client.set_state(pgwire::api::PgWireConnectionState::QueryInProgress);
        match ExtendedQueryHandler::do_query(self, client, &portal, 0).await? {
            Response::Query(mut q) => {
                *portal.state().lock().await = PortalExecutionState::Finished;
                let tag = q.command_tag().to_owned();
                let mut rows = 0usize;
                while let Some(row) = q.data_rows().next().await {
                    client.feed(PgWireBackendMessage::DataRow(row?)).await?;
                    rows += 1;
                }
                let done = pgwire::api::results::Tag::new(&tag).with_rows(rows);
                client
                    .send(PgWireBackendMessage::CommandComplete(done.into()))
                    .await?;
            }
            Response::Execution(tag) => {
                pgwire::api::query::send_execution_response(client, tag).await?;
            }
            _ => {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "ERROR".to_string(),
                    "0A000".to_string(),
                    "this statement cannot run through the extended protocol here; send it as a simple query".to_string(),
                ))))
            }
        }
        client.set_state(pgwire::api::PgWireConnectionState::ReadyForQuery);
        client.set_transaction_status(status);
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        whole_numbers_for_integers(portal)?;
        // The library binds the parameters and plans the execution; the
        // physical planner finds this statement's context in the task.
        let ctx = start_query(&self.engine, client);
        let permit = self.engine.enter(&ctx).await.map_err(|e| pg_error(&e))?;
        encode_rows::offer_portal_format(client, Some(portal.result_column_format.clone()));
        let run = ExtendedQueryHandler::do_query(self.inner.as_ref(), client, portal, max_rows);
        let run = crate::pool::off_worker(CURRENT_QUERY.scope(ctx.clone(), run));
        let done = run.await;
        encode_rows::offer_portal_format(client, None);
        match done {
            Ok(Response::Query(q)) => Ok(Response::Query(guarded(q, permit, ctx))),
            Ok(other) => Ok(other),
            Err(e) => Err(classify(e, &ctx)),
        }
    }
}

/// A float parameter with a fraction, bound where the statement needs an
/// integer (psycopg sends Python floats as float8), is refused naming the
/// parameter and its real value; the library truncated it first and then
/// reported "FLOAT value 1 is out of range" for 1.5.
fn whole_numbers_for_integers(portal: &Portal<DfStatement>) -> PgWireResult<()> {
    let Some((_, plan)) = &portal.statement.statement.1 else {
        return Ok(());
    };
    let inferred = plan.get_parameter_types().unwrap_or_default();
    for (i, sent) in portal.statement.parameter_types.iter().enumerate() {
        let Some(sent) = sent else { continue };
        if *sent != Type::FLOAT4 && *sent != Type::FLOAT8 {
            continue;
        }
        let Some(Some(target)) = inferred.get(&format!("${}", i + 1)) else {
            continue;
        };
        if !target.is_integer() {
            continue;
        }
        let Some(Some(raw)) = portal.parameters.get(i) else {
            continue;
        };
        let value = if portal.parameter_format.is_binary(i) {
            match raw.len() {
                8 => <[u8; 8]>::try_from(&raw[..]).ok().map(f64::from_be_bytes),
                4 => <[u8; 4]>::try_from(&raw[..])
                    .ok()
                    .map(|b| f32::from_be_bytes(b) as f64),
                _ => None,
            }
        } else {
            std::str::from_utf8(raw)
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
        };
        if let Some(v) = value.filter(|v| !v.is_finite() || v.fract() != 0.0) {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "ERROR".to_string(),
                "22023".to_string(),
                format!(
                    "parameter ${}: {v} ({}) is not a whole number, but the statement uses it as {target}; \
                     send an integer, or cast the other side (e.g. size::double precision = ${})",
                    i + 1,
                    sent.name(),
                    i + 1
                ),
            ))));
        }
    }
    Ok(())
}

/// The statement limits (`limits`), checked on the client's text before
/// the library parses it: its parser and rewrites recurse as deep as the
/// statement nests.
fn check_limits(sql: &str) -> PgWireResult<()> {
    crate::limits::check_sql(
        sql,
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .map_err(|e| pg_error(&e))
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// SQLSTATE of a query error class.
pub fn sqlstate(e: &QueryError) -> &'static str {
    match e {
        QueryError::Syntax { .. } => "42601",
        QueryError::Plan { message, .. } => {
            if message.starts_with("table") && message.contains("not found") {
                "42P01"
            } else if message.starts_with("column") && message.contains("not found") {
                "42703"
            } else if message.starts_with("not supported") {
                "0A000"
            } else {
                "42804"
            }
        }
        QueryError::Timeout(_) | QueryError::Cancelled => "57014",
        QueryError::ResourcesExhausted(_) => "53200",
        QueryError::TooComplex(_) => "54001",
        QueryError::Busy(_) => "53000",
        QueryError::NotReady(_) => "57P03",
        QueryError::Execution(_) => "22000",
        QueryError::Internal(_) => "XX000",
        // syntax_error_or_access_rule_violation; insufficient_privilege.
        QueryError::Ddl(_) => "42000",
        QueryError::Forbidden(_) => "42501",
    }
}

/// A Postgres error for a query error: the message names the position as
/// "at line L, column C" (the statement a hook sees is re-printed from the
/// parse, so a character offset into the client's text would be wrong).
pub fn pg_error(e: &QueryError) -> PgWireError {
    pg_error_in(e, None)
}

/// With the client's SQL text the position also goes in the protocol's
/// position field (psql then draws its `^` under the spot).
fn pg_error_in(e: &QueryError, sql: Option<&str>) -> PgWireError {
    let mut message = e.to_string();
    let mut info = ErrorInfo::new("ERROR".to_string(), sqlstate(e).to_string(), String::new());
    if let Some((line, col)) = e.position() {
        message.push_str(&format!(" at line {line}, column {col}"));
        if let Some(sql) = sql {
            info.position = char_offset(sql, line, col).map(|o| o.to_string());
        }
    }
    info.message = message;
    PgWireError::UserError(Box::new(info))
}

/// 1-based character offset of a 1-based (line, column) in `sql`.
fn char_offset(sql: &str, line: u64, col: u64) -> Option<usize> {
    let mut offset = 0usize;
    for (i, l) in sql.split('\n').enumerate() {
        if i as u64 + 1 == line {
            return Some(offset + col as usize);
        }
        offset += l.chars().count() + 1;
    }
    None
}

/// Rewrites the library's opaque errors (DataFusion's, the SQL parser's)
/// into classified ones before they are sent.
struct TickErrors {
    /// The engine's time limit, named in timeout errors.
    timeout: std::time::Duration,
}

impl ErrorHandler for TickErrors {
    fn on_error<C>(&self, _client: &C, error: &mut PgWireError)
    where
        C: ClientInfo,
    {
        if let PgWireError::ApiError(inner) = error {
            let classified =
                if let Some(df) = inner.downcast_ref::<datafusion::common::DataFusionError>() {
                    if crate::deadline::is_deadline(df) {
                        *error = pg_error(&QueryError::Timeout(self.timeout));
                        return;
                    }
                    // DataFusionError is not Clone; its message carries what the
                    // classification needs once re-wrapped.
                    Some(crate::error::from_df(reparse(df)))
                } else {
                    inner.downcast_ref::<ParserError>().map(|p| {
                        crate::error::from_df(datafusion::common::DataFusionError::SQL(
                            Box::new(p.clone()),
                            None,
                        ))
                    })
                };
            if let Some(q) = classified {
                *error = pg_error(&q);
            }
        }
        tracing::debug!("pgwire error: {error}");
    }
}

/// A classifiable copy of a DataFusion error seen by reference.
fn reparse(e: &datafusion::common::DataFusionError) -> datafusion::common::DataFusionError {
    use datafusion::common::DataFusionError as E;
    let root = e.find_root();
    let text = root.to_string();
    match root {
        E::ResourcesExhausted(m) => E::ResourcesExhausted(m.clone()),
        E::Plan(m) => E::Plan(m.clone()),
        E::NotImplemented(m) => E::NotImplemented(m.clone()),
        E::Internal(m) => E::Internal(m.clone()),
        E::SQL(p, _) => E::SQL(p.clone(), None),
        _ => E::Execution(text),
    }
}

// ---------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------

/// The one configured user's MD5 hash, salted per connection.
#[derive(Debug)]
struct OneUser {
    user: String,
    password: String,
}

#[async_trait]
impl AuthSource for OneUser {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        if user != self.user {
            // Same answer as a wrong password: no hint which users exist.
            return Err(PgWireError::InvalidPassword(user.to_string()));
        }
        let salt: [u8; 4] = rand::random();
        let hash = hash_md5_password(&self.user, &self.password, &salt);
        Ok(Password::new(Some(salt.to_vec()), hash.into_bytes()))
    }
}

struct TrustStartup;

#[async_trait]
impl NoopStartupHandler for TrustStartup {}

enum TickStartup {
    Trust(TrustStartup),
    Md5(Box<Md5PasswordAuthStartupHandler<OneUser, DefaultServerParameterProvider>>),
    Users(Box<scram::UsersStartup>),
}

#[async_trait]
impl StartupHandler for TickStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            TickStartup::Trust(h) => h.on_startup(client, message).await,
            TickStartup::Md5(h) => h.on_startup(client, message).await,
            TickStartup::Users(h) => h.on_startup(client, message).await,
        }
    }
}
