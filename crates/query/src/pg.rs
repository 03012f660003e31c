//! The PostgreSQL wire protocol front of the engine, on `pgwire` and
//! `datafusion-postgres`, so that psql, psycopg, JDBC and pandas talk to an
//! RDB unchanged.
//!
//! What is ours and what is borrowed:
//! - `datafusion-postgres` brings the protocol loop, the Arrow → Postgres
//!   type mapping, `SET`/`SHOW`/transaction statements and the `pg_catalog`
//!   tables psql's `\d` and `\dt` query.
//! - `TickHook` plans every other statement through `QueryEngine`, so pgwire
//!   gets exactly what HTTP gets: the ASOF JOIN rewrite, read-only checks,
//!   and (through the engine's query planner) the time and memory limits.
//! - `TickErrors` turns DataFusion errors into Postgres errors with a
//!   SQLSTATE a client can branch on and the position in the message.
//! - `TickStartup` is password authentication (MD5, which psql, psycopg and
//!   JDBC all speak) unless the operator explicitly turned it off.

use crate::{QueryEngine, QueryError};
use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_postgres::arrow_pg::datatypes::df::encode_dataframe;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire;
use datafusion_postgres::{DfSessionService, QueryHook};
use futures::Sink;
use pgwire::api::auth::md5pass::{hash_md5_password, Md5PasswordAuthStartupHandler};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{FieldInfo, Response};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ErrorHandler, PgWireServerHandlers, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::types::format::FormatOptions;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Default credentials (documented in docs/sql.md and `--help`).
pub const PG_USER_DEFAULT: &str = "tickdb";
pub const PG_PASSWORD_DEFAULT: &str = "tickdb";

/// How clients authenticate.
#[derive(Debug, Clone)]
pub enum PgAuth {
    /// MD5 password authentication for one user.
    Password { user: String, password: String },
    /// No authentication at all (`--pg-no-auth`).
    Trust,
}

/// Serves the PostgreSQL protocol on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, engine: QueryEngine, auth: PgAuth) {
    let handlers = Arc::new(TickPgHandlers::new(engine, auth));
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let _ = socket.set_nodelay(true);
                let h = handlers.clone();
                tokio::spawn(async move {
                    if let Err(e) = pgwire::tokio::process_socket(socket, None, h).await {
                        tracing::debug!("pgwire connection {peer}: {e}");
                    }
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

struct TickPgHandlers {
    service: Arc<DfSessionService>,
    auth: PgAuth,
    timeout: std::time::Duration,
}

impl TickPgHandlers {
    fn new(engine: QueryEngine, auth: PgAuth) -> Self {
        let ctx = Arc::new(engine.session().clone());
        let timeout = engine.options().timeout;
        // The library's own statement hooks first (they answer SET, SHOW,
        // BEGIN/COMMIT and cursors without planning), then ours for the
        // rest, so nothing reaches the library's unrestricted default path.
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(SetShowHook),
            Arc::new(TransactionStatementHook),
            Arc::new(CursorStatementHook),
            Arc::new(TickHook { engine }),
        ];
        TickPgHandlers {
            service: Arc::new(DfSessionService::new_with_hooks(ctx, hooks)),
            auth,
            timeout,
        }
    }
}

impl PgWireServerHandlers for TickPgHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::new(WithPositions {
            inner: self.service.clone(),
            parser: Arc::new(TickParser {
                inner: self.service.query_parser(),
            }),
        })
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::new(WithPositions {
            inner: self.service.clone(),
            parser: Arc::new(TickParser {
                inner: self.service.query_parser(),
            }),
        })
    }

    /// Called once per connection: the MD5 handler keeps the connection's
    /// expected hash between its two messages, so it must not be shared.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(match &self.auth {
            PgAuth::Trust => TickStartup::Trust(TrustStartup),
            PgAuth::Password { user, password } => {
                TickStartup::Md5(Box::new(Md5PasswordAuthStartupHandler::new(
                    Arc::new(OneUser {
                        user: user.clone(),
                        password: password.clone(),
                    }),
                    Arc::new(DefaultServerParameterProvider::default()),
                )))
            }
        })
    }

    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(TickErrors {
            timeout: self.timeout,
        })
    }
}

// ---------------------------------------------------------------------------
// Statements
// ---------------------------------------------------------------------------

struct TickHook {
    engine: QueryEngine,
}

#[async_trait]
impl QueryHook for TickHook {
    async fn handle_simple_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let df = match self.engine.plan_statement(statement.clone()).await {
            Ok(df) => df,
            Err(e) => return Some(Err(pg_error(&e))),
        };
        let opts = Arc::new(FormatOptions::from_client_metadata(client.metadata()));
        Some(
            encode_dataframe(df, &Format::UnifiedText, Some(opts))
                .await
                .map(Response::Query),
        )
    }

    async fn handle_extended_parse_query(
        &self,
        statement: &Statement,
        _ctx: &SessionContext,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        Some(
            self.engine
                .plan_statement(statement.clone())
                .await
                .map(|df| df.into_parts().1)
                .map_err(|e| pg_error(&e)),
        )
    }

    /// Execution of a prepared plan stays with the library, which binds
    /// the parameters and honours the result formats the client asked
    /// for; the plan it runs is ours (rewritten and checked at parse), and
    /// the engine's query planner adds the deadline to it.
    async fn handle_extended_query(
        &self,
        _statement: &Statement,
        _plan: &LogicalPlan,
        _params: &ParamValues,
        _ctx: &SessionContext,
        _client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        None
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
    parser: Arc<TickParser>,
}

type DfStatement = (String, Option<(Statement, LogicalPlan)>);

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
        self.inner
            .parse_sql(client, sql, types)
            .await
            .map_err(|e| locate_syntax_error(sql, e))
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
        SimpleQueryHandler::do_query(self.inner.as_ref(), client, query)
            .await
            .map_err(|e| locate_syntax_error(query, e))
    }
}

#[async_trait]
impl ExtendedQueryHandler for WithPositions {
    type Statement = DfStatement;
    type QueryParser = TickParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
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
        ExtendedQueryHandler::do_query(self.inner.as_ref(), client, portal, max_rows).await
    }
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
        QueryError::Timeout(_) => "57014",
        QueryError::ResourcesExhausted(_) => "53200",
        QueryError::Execution(_) => "22000",
        QueryError::Internal(_) => "XX000",
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
        }
    }
}
