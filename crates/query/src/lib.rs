//! tickdb-query owns SQL over the column store: a DataFusion session with
//! one table provider per store table (symbol-index and time-range
//! pushdown), the tick SQL extensions (vwap, first/last, time buckets,
//! ASOF JOIN), query limits (time, memory) and the result encodings.
//!
//! DataFusion stays behind this crate: the rest of the workspace sees
//! `QueryEngine`, `QueryResult`, `QueryError` and `encode`.

pub mod asof;
mod asof_merge;
pub mod checked;
pub mod context;
pub mod ddl;
pub mod deadline;
pub mod encode;
mod error;
pub mod history;
pub mod history_latest;
pub mod history_scan;
pub mod latest;
pub mod limits;
pub mod minmax;
pub mod pg;
pub mod pgfns;
mod plan_cache;
pub mod pool;
pub mod provider;
mod sym_group;
mod sym_order;
mod sym_scan;
pub mod udf;

pub use context::QueryCtx;
pub use error::{Position, QueryError};
pub use history_scan::{history_scan_metrics, HistoryScanMetrics};
pub use pool::PoolStats;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DataFusionError;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use std::num::NonZeroUsize;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tickdb_core::store::Store;
use tokio::sync::{mpsc, oneshot};

/// Default time limit of one query.
pub const QUERY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default memory limit shared by all running queries, in bytes.
pub const QUERY_MEMORY_BYTES_DEFAULT: usize = 1 << 30;
/// Default number of partitions a scan is split into (threads per query).
pub const TARGET_PARTITIONS_DEFAULT: usize = 2;
/// Result batches a running query computes ahead of its reader (an HTTP
/// body, PostgreSQL rows): a slow reader holds the query back instead of
/// letting results pile up in memory.
pub const RESULT_BATCHES_AHEAD: usize = 2;
/// A statement up to this long is parsed and planned on its query worker;
/// a longer one off it (`pool::off_worker`).
const PLAN_ON_WORKER_SQL_BYTES_MAX: usize = 2048;
/// How often a query waiting for the node to be ready looks again.
const READY_POLL: Duration = Duration::from_millis(20);
/// Time the outer timer waits past the deadline for the plan's own checks
/// to end the query cleanly.
const DEADLINE_GRACE: Duration = Duration::from_millis(500);
/// Memory consumers named in an out-of-memory error.
const MEMORY_CONSUMERS_REPORTED: usize = 5;

#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// Wall-clock limit of one query, planning and execution together.
    pub timeout: Duration,
    /// Memory pool shared by the engine's running queries. Spilling to disk
    /// is off: an RDB answers from memory, and a query over the limit fails
    /// with `QueryError::ResourcesExhausted` instead.
    pub memory_limit_bytes: usize,
    /// Partitions a scan is split into (parallelism of one query).
    pub target_partitions: usize,
    /// Query threads (a runtime of their own, apart from ingest).
    pub threads: usize,
    /// Queries that run at once.
    pub concurrency: usize,
    /// Queries that may wait for a turn; more are refused as busy.
    pub queue_max: usize,
    /// How long a query may wait for the node to become ready (journal
    /// replay, reload) before it is refused as not ready; zero refuses at
    /// once.
    pub ready_wait: Duration,
    /// The historical database's root (`ROOT/<table>/date=YYYY-MM-DD/
    /// part-*.parquet`). When set, every append table spans today and
    /// history and gets a derived `date` column (`history`); when None,
    /// tables are today's rows only, with no date column.
    pub hdb: Option<std::path::PathBuf>,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            timeout: QUERY_TIMEOUT_DEFAULT,
            memory_limit_bytes: QUERY_MEMORY_BYTES_DEFAULT,
            target_partitions: TARGET_PARTITIONS_DEFAULT,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            concurrency: pool::QUERY_CONCURRENCY_DEFAULT,
            queue_max: pool::QUERY_QUEUE_MAX_DEFAULT,
            ready_wait: Duration::ZERO,
            hdb: None,
        }
    }
}

/// A query's full answer.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// The SQL text that produced it (echoed by the JSON encoding).
    pub query: String,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// Whether the node may answer queries; the node's lifecycle implements it.
pub trait Readiness: Send + Sync {
    /// `Ok` when the tables are complete; otherwise why not, in words a
    /// client can act on (what is loading, how far it has got).
    fn check(&self) -> Result<(), String>;
}

struct Inner {
    ctx: SessionContext,
    opts: QueryOptions,
    store: Arc<Store>,
    pool: pool::QueryPool,
    readiness: OnceLock<Arc<dyn Readiness>>,
    /// The store's schema version the registered tables follow.
    tables_version: std::sync::atomic::AtomicU64,
    /// Held while one query registers the tables of a schema change.
    registering: parking_lot::Mutex<()>,
    /// Runs `CREATE TABLE` and `ALTER TABLE` (`ddl`): set on a node with a
    /// tp; without one they are refused.
    ddl: OnceLock<Arc<dyn ddl::DdlExec>>,
    /// Optimized plans of statements run before (`plan_cache`).
    plans: plan_cache::PlanCache,
}

/// A running query's batches, computed on the query threads a few ahead
/// of the reader. Dropping it cancels the query.
pub struct ResultStream<T = RecordBatch> {
    schema: SchemaRef,
    rx: mpsc::Receiver<Result<T, QueryError>>,
    ctx: QueryCtx,
    _cancel: context::CancelOnDrop,
}

impl<T> ResultStream<T> {
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The next item, an error, or `None` at the end. Never waits past
    /// the query's deadline (plus a short grace for the plan's own checks
    /// to end it cleanly), even when one batch takes longer to compute.
    pub async fn next(&mut self) -> Option<Result<T, QueryError>> {
        let until = self.ctx.deadline() + DEADLINE_GRACE;
        match tokio::time::timeout_at(until.into(), self.rx.recv()).await {
            Ok(item) => item,
            Err(_) => {
                self.ctx.cancel();
                self.rx.close();
                Some(Err(QueryError::Timeout(self.ctx.timeout())))
            }
        }
    }

    pub fn ctx(&self) -> &QueryCtx {
        &self.ctx
    }
}

/// Turns a query's batches into what its reader consumes (encoded bytes
/// for HTTP), on the query threads.
pub trait ResultSink: Send + 'static {
    type Item: Send + 'static;
    /// Called once with the result's schema, before any batch.
    fn start(&mut self, schema: &SchemaRef) -> Result<Option<Self::Item>, QueryError>;
    fn batch(&mut self, batch: RecordBatch) -> Result<Option<Self::Item>, QueryError>;
    /// Called once after the last batch.
    fn finish(&mut self) -> Result<Option<Self::Item>, QueryError>;
}

/// The batches as they are.
pub struct Batches;

impl ResultSink for Batches {
    type Item = RecordBatch;
    fn start(&mut self, _: &SchemaRef) -> Result<Option<RecordBatch>, QueryError> {
        Ok(None)
    }
    fn batch(&mut self, b: RecordBatch) -> Result<Option<RecordBatch>, QueryError> {
        Ok(Some(b))
    }
    fn finish(&mut self) -> Result<Option<RecordBatch>, QueryError> {
        Ok(None)
    }
}

/// The SQL engine of one store. Cheap to clone; share it between
/// connections.
#[derive(Clone)]
pub struct QueryEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine")
            .field("opts", &self.inner.opts)
            .finish()
    }
}

impl QueryEngine {
    /// A session over every table of `store`, with the tick extensions.
    pub fn new(store: Arc<Store>, opts: QueryOptions) -> Result<Self, QueryError> {
        let mut config = SessionConfig::new()
            .with_target_partitions(opts.target_partitions.max(1))
            .with_information_schema(true);
        // Spans let plan errors point at the offending identifier.
        config.options_mut().sql_parser.collect_spans = true;
        // The scans' row counts are exact, and a filter's estimate is at
        // most its input's: a plan whose rows fit one batch (a poll of the
        // newest rows) then runs on one thread, instead of being spread
        // over the query threads at the cost of a task and a wake-up each.
        config
            .options_mut()
            .execution
            .use_row_number_estimates_to_optimize_partitioning = true;
        let pool = TrackConsumersPool::new(
            GreedyMemoryPool::new(opts.memory_limit_bytes),
            NonZeroUsize::new(MEMORY_CONSUMERS_REPORTED).expect("non-zero"),
        );
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(pool))
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
            )
            .build_arc()
            .map_err(|e| QueryError::Internal(format!("runtime: {e}")))?;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_query_planner(Arc::new(asof::TickQueryPlanner::new(opts.timeout)))
            .with_physical_optimizer_rule(Arc::new(sym_order::SymbolAggregateRule))
            .build();
        let ctx = SessionContext::new_with_state(state);
        let pool = pool::QueryPool::new(opts.threads, opts.concurrency, opts.queue_max)?;
        let version = store.schema_version();
        register_tables(&ctx, &store, &opts)?;
        udf::register(&ctx);
        asof::register(&ctx);
        checked::install(&ctx, opts.memory_limit_bytes);
        // pg_catalog (pg_class, pg_attribute, ...) and the functions psql's
        // \d and \dt call; harmless to HTTP users, who may query it too.
        datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog(
            &ctx,
            "datafusion",
            datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider,
        )
        .map_err(|e| QueryError::Internal(format!("pg_catalog: {e}")))?;
        // After pg_catalog: its pg_backend_pid() answers a constant 1.
        pgfns::register(&ctx);
        Ok(QueryEngine {
            inner: Arc::new(Inner {
                ctx,
                opts,
                store,
                pool,
                readiness: OnceLock::new(),
                tables_version: std::sync::atomic::AtomicU64::new(version),
                registering: parking_lot::Mutex::new(()),
                ddl: OnceLock::new(),
                plans: plan_cache::PlanCache::default(),
            }),
        })
    }

    /// Registers the tables again once the store's schema changed (a table
    /// created, columns added at run time): called before every query is
    /// planned; one comparison when nothing changed. A query planned before
    /// the change keeps the table as it was (`TickTable::scan` reads only
    /// the columns it planned).
    fn sync_tables(&self) {
        use std::sync::atomic::Ordering;
        let i = &self.inner;
        let now = i.store.schema_version();
        if i.tables_version.load(Ordering::Acquire) == now {
            return;
        }
        let _one = i.registering.lock();
        if i.tables_version.load(Ordering::Acquire) == now {
            return;
        }
        match register_tables(&i.ctx, &i.store, &i.opts) {
            Ok(()) => i.tables_version.store(now, Ordering::Release),
            Err(e) => tracing::error!("registering the tables after a schema change: {e}"),
        }
    }

    /// Sets what runs `CREATE TABLE` and `ALTER TABLE` (the node's tp).
    pub fn set_ddl(&self, d: Arc<dyn ddl::DdlExec>) {
        let _ = self.inner.ddl.set(d);
    }

    /// Runs a `CREATE TABLE` or `ALTER TABLE ... ADD COLUMN` statement as
    /// `user` (None: a node without users, where everyone may). `Ok(None)`
    /// when `sql` is not such a statement (the caller runs it as a query).
    pub async fn run_ddl(
        &self,
        sql: &str,
        user: Option<&str>,
    ) -> Result<Option<ddl::DdlOutcome>, QueryError> {
        if !ddl::looks_like_ddl(sql) {
            return Ok(None);
        }
        limits::check_text(sql)?;
        let Some(ops) = ddl::parse(sql)? else {
            return Ok(None);
        };
        self.exec_ddl(ops, sql, user).await.map(Some)
    }

    /// Runs parsed schema changes (see `run_ddl`).
    pub async fn exec_ddl(
        &self,
        ops: Vec<tickdb_core::schema_change::SchemaOp>,
        sql: &str,
        user: Option<&str>,
    ) -> Result<ddl::DdlOutcome, QueryError> {
        let Some(d) = self.inner.ddl.get() else {
            return Err(QueryError::Ddl(
                "this node has no tickerplant: run CREATE TABLE and ALTER TABLE on the node that takes writes (tickdb up or tickdb tp)".into(),
            ));
        };
        let outcome = d
            .exec(ops, sql.trim().to_string(), user.map(str::to_string))
            .await?;
        // The embedded rdb applies the change from the tp's stream; a
        // query right after the statement must see it, so wait (briefly)
        // for this node's store to catch up to the change's seq.
        if let Some(seq) = outcome.seq {
            d.wait_applied(seq).await;
        }
        self.sync_tables();
        Ok(outcome)
    }
}

/// Registers every table of `store`'s schema, replacing what was there,
/// and the `latest` table function over them.
fn register_tables(
    ctx: &SessionContext,
    store: &Arc<Store>,
    opts: &QueryOptions,
) -> Result<(), QueryError> {
    // Every table goes into a new `public` schema, swapped in whole: a
    // query planned while the tables change (a DDL) sees all the old
    // providers or all the new ones, never a name missing between a
    // deregister and a register.
    use datafusion::catalog::SchemaProvider;
    let public = datafusion::catalog::MemorySchemaProvider::new();
    let mut tables = std::collections::HashMap::new();
    let mut hist = std::collections::HashMap::new();
    for t in &store.schema().tables {
        let append = matches!(t.kind, tickdb_core::schema::TableKind::Append);
        let registered: Arc<dyn datafusion::catalog::TableProvider> = match &opts.hdb {
            Some(root) if append => {
                let h = Arc::new(history::HistTable::new(
                    store.clone(),
                    t,
                    root,
                    opts.target_partitions,
                )?);
                tables.insert(t.name.clone(), h.tick().clone());
                hist.insert(t.name.clone(), h.clone());
                h
            }
            _ => {
                let p = Arc::new(provider::TickTable::new(
                    store.clone(),
                    t,
                    opts.target_partitions,
                ));
                tables.insert(t.name.clone(), p.clone());
                p
            }
        };
        public
            .register_table(t.name.clone(), registered)
            .map_err(|e| QueryError::Internal(format!("registering table '{}': {e}", t.name)))?;
    }
    let catalog = ctx
        .catalog("datafusion")
        .ok_or_else(|| QueryError::Internal("no catalog 'datafusion'".into()))?;
    catalog
        .register_schema("public", Arc::new(public))
        .map_err(|e| QueryError::Internal(format!("registering the tables: {e}")))?;
    ctx.register_udtf(latest::NAME, Arc::new(latest::LatestFunc { tables, hist }));
    Ok(())
}

impl QueryEngine {
    /// How many statements' plans the engine keeps for reuse
    /// (`plan_cache`): for tests and diagnostics.
    pub fn cached_plans(&self) -> usize {
        self.inner.plans.len()
    }

    /// From now on every query first asks `r` whether the node is ready.
    pub fn set_readiness(&self, r: Arc<dyn Readiness>) {
        let _ = self.inner.readiness.set(r);
    }

    /// The query threads: fronts run their query work here.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        self.inner.pool.handle()
    }

    pub fn pool_stats(&self) -> PoolStats {
        self.inner.pool.stats()
    }

    /// A context for one query: the engine's timeout, or `session_timeout`
    /// when that is shorter (PostgreSQL's `statement_timeout`).
    pub fn new_ctx(&self, session_timeout: Option<Duration>) -> QueryCtx {
        let t = match session_timeout {
            Some(s) if !s.is_zero() => s.min(self.inner.opts.timeout),
            _ => self.inner.opts.timeout,
        };
        QueryCtx::new(t)
    }

    /// Waits (up to `ready_wait`, never past the deadline) until the node
    /// is ready; refuses with how far loading has got otherwise.
    pub async fn ready(&self, ctx: &QueryCtx) -> Result<(), QueryError> {
        let Some(r) = self.inner.readiness.get() else {
            return Ok(());
        };
        let until = (Instant::now() + self.inner.opts.ready_wait).min(ctx.deadline());
        loop {
            match r.check() {
                Ok(()) => return Ok(()),
                Err(why) if Instant::now() >= until => return Err(QueryError::NotReady(why)),
                Err(_) => tokio::time::sleep(READY_POLL).await,
            }
        }
    }

    /// Readiness, then a turn in the pool: what every query goes through
    /// before it is planned.
    pub async fn enter(&self, ctx: &QueryCtx) -> Result<pool::Permit, QueryError> {
        self.ready(ctx).await?;
        self.inner.pool.admit(ctx).await
    }

    pub fn options(&self) -> &QueryOptions {
        &self.inner.opts
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    /// The DataFusion session (for the pgwire front, which plans itself).
    pub fn session(&self) -> &SessionContext {
        &self.inner.ctx
    }

    /// The session state one query plans and runs with: the engine's, with
    /// the query's context attached for the physical planner.
    fn state_for(&self, ctx: &QueryCtx) -> SessionState {
        self.sync_tables();
        let mut state = self.inner.ctx.state();
        state.config_mut().set_extension(Arc::new(ctx.clone()));
        state
    }

    /// Parses, rewrites the tick extensions, and plans one read-only
    /// statement (no deadline: for tools and tests that only plan).
    pub async fn plan(&self, sql: &str) -> Result<DataFrame, QueryError> {
        let ctx = self.new_ctx(None);
        limits::check_text(sql)?;
        let state = self.state_for(&ctx);
        let statement = Self::parse(&state, sql).map_err(QueryError::from)?;
        limits::check_depth(&statement)?;
        let plan = Self::logical(&state, statement)
            .await
            .map_err(QueryError::from)?;
        Ok(DataFrame::new(state, plan))
    }

    /// Plans a statement parsed elsewhere (the pgwire front parses with its
    /// Postgres-compatible parser) exactly as a query is, under `ctx`; the
    /// caller runs the frame (its physical plan gets `ctx`'s checks).
    pub async fn plan_statement(
        &self,
        statement: datafusion::sql::sqlparser::ast::Statement,
        ctx: &QueryCtx,
    ) -> Result<DataFrame, QueryError> {
        let statement = datafusion::sql::parser::Statement::Statement(Box::new(statement));
        limits::check_depth(&statement)?;
        let state = self.state_for(ctx);
        let plan = Self::logical(&state, statement)
            .await
            .map_err(|e| self.error(e, "", ctx))?;
        Ok(DataFrame::new(state, plan))
    }

    /// A frame over an already planned (and checked) logical plan, under
    /// `ctx`: the pgwire front's prepared statements.
    pub fn frame(&self, plan: LogicalPlan, ctx: &QueryCtx) -> DataFrame {
        DataFrame::new(self.state_for(ctx), plan)
    }

    fn parse(
        state: &SessionState,
        sql: &str,
    ) -> Result<datafusion::sql::parser::Statement, DataFusionError> {
        let dialect = state.config().options().sql_parser.dialect;
        state.sql_to_statement(sql, &dialect)
    }

    async fn logical(
        state: &SessionState,
        mut statement: datafusion::sql::parser::Statement,
    ) -> Result<LogicalPlan, DataFusionError> {
        asof::rewrite(&mut statement)?;
        let plan = state.statement_to_plan(statement).await?;
        SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false)
            .verify_plan(&plan)?;
        Ok(plan)
    }

    fn error(&self, e: DataFusionError, sql: &str, ctx: &QueryCtx) -> QueryError {
        match deadline::stop_of(&e) {
            Some(context::Stop::Deadline) => QueryError::Timeout(ctx.timeout()),
            Some(context::Stop::Cancelled) => QueryError::Cancelled,
            None => error::with_sql(e.into(), sql),
        }
    }

    /// Everything up to the first batch: readiness, a turn, the limits on
    /// the statement, planning, and the start of execution. Runs on the
    /// query threads.
    async fn start(
        &self,
        sql: &str,
        ctx: &QueryCtx,
    ) -> Result<(SendableRecordBatchStream, pool::Permit), QueryError> {
        let permit = self.enter(ctx).await?;
        limits::check_text(sql)?;
        let state = self.state_for(ctx);
        // After state_for: the version of the tables this query plans with.
        let version = self
            .inner
            .tables_version
            .load(std::sync::atomic::Ordering::Acquire);
        let planned = async {
            let plan = match self.inner.plans.get(version, sql) {
                Some(plan) => plan,
                None => {
                    let statement =
                        Self::parse(&state, sql).map_err(|e| self.error(e, sql, ctx))?;
                    limits::check_depth(&statement)?;
                    let plan = Self::logical(&state, statement)
                        .await
                        .map_err(|e| self.error(e, sql, ctx))?;
                    let optimized =
                        Arc::new(state.optimize(&plan).map_err(|e| self.error(e, sql, ctx))?);
                    self.inner.plans.put(version, sql, &plan, &optimized);
                    optimized
                }
            };
            // What SessionState::create_physical_plan does after optimizing.
            state
                .query_planner()
                .create_physical_plan(&plan, &state)
                .await
                .map_err(|e| self.error(e, sql, ctx))
        };
        // Parsing and planning a large statement is CPU work with no
        // yield point: off the worker, so the query threads stay live. A
        // short one plans in well under a millisecond, less than handing
        // the worker's tasks to another thread costs (a thread woken on
        // another core): it plans here.
        let physical = if sql.len() <= PLAN_ON_WORKER_SQL_BYTES_MAX {
            planned.await?
        } else {
            pool::off_worker(planned).await?
        };
        let task = Arc::new(TaskContext::from(&state));
        let stream = datafusion::physical_plan::execute_stream(physical, task)
            .map_err(|e| self.error(e, sql, ctx))?;
        Ok((stream, permit))
    }

    /// Runs a query to completion under its limits (the engine's timeout).
    pub async fn query(&self, sql: &str) -> Result<QueryResult, QueryError> {
        self.query_with(sql, self.new_ctx(None)).await
    }

    /// Runs a query to completion under `ctx`.
    pub async fn query_with(&self, sql: &str, ctx: QueryCtx) -> Result<QueryResult, QueryError> {
        let mut s = self.stream(sql, ctx).await?;
        let schema = s.schema().clone();
        let mut batches = Vec::new();
        while let Some(b) = s.next().await {
            batches.push(b?);
        }
        Ok(QueryResult {
            query: sql.to_string(),
            schema,
            batches,
        })
    }

    /// Starts a query on the query threads and returns its batches as they
    /// come, `RESULT_BATCHES_AHEAD` at most computed ahead of the reader.
    /// Errors before the first batch (not ready, busy, syntax, plan) are
    /// returned here; later ones end the stream.
    pub async fn stream(&self, sql: &str, ctx: QueryCtx) -> Result<ResultStream, QueryError> {
        self.stream_into(sql, ctx, Batches).await
    }

    /// `stream`, with each batch turned into `sink`'s items on the query
    /// threads (HTTP encodes there, so the I/O threads only copy bytes).
    pub async fn stream_into<S: ResultSink>(
        &self,
        sql: &str,
        ctx: QueryCtx,
        mut sink: S,
    ) -> Result<ResultStream<S::Item>, QueryError> {
        let (started_tx, started_rx) = oneshot::channel::<Result<SchemaRef, QueryError>>();
        let (tx, rx) = mpsc::channel::<Result<S::Item, QueryError>>(RESULT_BATCHES_AHEAD);
        let cancel = ctx.cancel_on_drop();
        let engine = self.clone();
        let (sql_owned, task_ctx) = (sql.to_string(), ctx.clone());
        self.inner.pool.handle().spawn(async move {
            let (sql, ctx) = (sql_owned, task_ctx);
            let (mut stream, _permit) = match engine.start(&sql, &ctx).await {
                Ok(s) => s,
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return;
                }
            };
            let schema = stream.schema();
            let head = sink.start(&schema);
            if started_tx.send(Ok(schema)).is_err() {
                return;
            }
            let send = |item: Result<Option<S::Item>, QueryError>| {
                let tx = tx.clone();
                async move {
                    match item {
                        Ok(None) => true,
                        Ok(Some(v)) => tx.send(Ok(v)).await.is_ok(),
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            false
                        }
                    }
                }
            };
            if !send(head).await {
                return;
            }
            while let Some(item) = stream.next().await {
                let item = match item {
                    Ok(b) => sink.batch(b),
                    Err(e) => Err(engine.error(e, &sql, &ctx)),
                };
                if !send(item).await {
                    return;
                }
            }
            let _ = send(sink.finish()).await;
        });
        let until = ctx.deadline() + DEADLINE_GRACE;
        match tokio::time::timeout_at(until.into(), started_rx).await {
            Err(_) => Err(QueryError::Timeout(ctx.timeout())),
            Ok(Err(_)) => Err(QueryError::Internal(
                "the query ended without an answer".into(),
            )),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Ok(Ok(schema))) => Ok(ResultStream {
                schema,
                rx,
                ctx,
                _cancel: cancel,
            }),
        }
    }

    /// Runs a query to completion (no pool turn: for benchmarks and tests)
    /// and returns its row count with what its history scans read and
    /// pruned (`history_scan_metrics` of the executed plan).
    pub async fn explain_analyze_metrics(
        &self,
        sql: &str,
    ) -> Result<(usize, HistoryScanMetrics), QueryError> {
        let ctx = self.new_ctx(None);
        let frame = self.plan(sql).await?;
        let task = frame.task_ctx();
        let plan = frame
            .create_physical_plan()
            .await
            .map_err(|e| self.error(e, sql, &ctx))?;
        let batches = datafusion::physical_plan::collect(plan.clone(), Arc::new(task))
            .await
            .map_err(|e| self.error(e, sql, &ctx))?;
        let rows = batches.iter().map(|b| b.num_rows()).sum();
        Ok((rows, history_scan_metrics(&plan)))
    }

    /// Maps an error from a query's plan to the engine's error classes.
    pub fn classify(&self, e: DataFusionError, sql: &str, ctx: &QueryCtx) -> QueryError {
        self.error(e, sql, ctx)
    }
}
