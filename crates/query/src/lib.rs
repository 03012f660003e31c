//! tickdb-query owns SQL over the column store: a DataFusion session with
//! one table provider per store table (symbol-index and time-range
//! pushdown), the tick SQL extensions (vwap, first/last, time buckets,
//! ASOF JOIN), query limits (time, memory) and the result encodings.
//!
//! DataFusion stays behind this crate: the rest of the workspace sees
//! `QueryEngine`, `QueryResult`, `QueryError` and `encode`.

pub mod asof;
pub mod deadline;
pub mod encode;
mod error;
pub mod latest;
pub mod pg;
pub mod provider;
pub mod udf;

pub use error::{Position, QueryError};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DataFusionError;
use datafusion::common::TableReference;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SQLOptions, SessionConfig, SessionContext};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tickdb_core::store::Store;

/// Default time limit of one query.
pub const QUERY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default memory limit shared by all running queries, in bytes.
pub const QUERY_MEMORY_BYTES_DEFAULT: usize = 1 << 30;
/// Default number of partitions a scan is split into (threads per query).
pub const TARGET_PARTITIONS_DEFAULT: usize = 2;
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
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            timeout: QUERY_TIMEOUT_DEFAULT,
            memory_limit_bytes: QUERY_MEMORY_BYTES_DEFAULT,
            target_partitions: TARGET_PARTITIONS_DEFAULT,
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

struct Inner {
    ctx: SessionContext,
    opts: QueryOptions,
    store: Arc<Store>,
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
            .build();
        let ctx = SessionContext::new_with_state(state);
        let mut tables = std::collections::HashMap::new();
        for t in &store.schema().tables {
            let provider = Arc::new(provider::TickTable::new(
                store.clone(),
                t,
                opts.target_partitions,
            ));
            tables.insert(t.name.clone(), provider.clone());
            ctx.register_table(TableReference::bare(t.name.as_str()), provider)
                .map_err(|e| {
                    QueryError::Internal(format!("registering table '{}': {e}", t.name))
                })?;
        }
        ctx.register_udtf(latest::NAME, Arc::new(latest::LatestFunc { tables }));
        udf::register(&ctx);
        asof::register(&ctx);
        // pg_catalog (pg_class, pg_attribute, ...) and the functions psql's
        // \d and \dt call; harmless to HTTP users, who may query it too.
        datafusion_postgres::datafusion_pg_catalog::setup_pg_catalog(
            &ctx,
            "datafusion",
            datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider,
        )
        .map_err(|e| QueryError::Internal(format!("pg_catalog: {e}")))?;
        Ok(QueryEngine {
            inner: Arc::new(Inner { ctx, opts, store }),
        })
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

    /// Parses, rewrites the tick extensions, and plans one read-only
    /// statement.
    pub async fn plan(&self, sql: &str) -> Result<DataFrame, QueryError> {
        self.plan_df(sql).await.map_err(QueryError::from)
    }

    /// Plans a statement parsed elsewhere (the pgwire front parses with
    /// its Postgres-compatible parser) exactly as `plan` would.
    pub async fn plan_statement(
        &self,
        statement: datafusion::sql::sqlparser::ast::Statement,
    ) -> Result<DataFrame, QueryError> {
        let statement = datafusion::sql::parser::Statement::Statement(Box::new(statement));
        self.plan_parsed(statement).await.map_err(QueryError::from)
    }

    async fn plan_df(&self, sql: &str) -> Result<DataFrame, DataFusionError> {
        let state = self.inner.ctx.state();
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(sql, &dialect)?;
        self.plan_parsed(statement).await
    }

    async fn plan_parsed(
        &self,
        mut statement: datafusion::sql::parser::Statement,
    ) -> Result<DataFrame, DataFusionError> {
        let state = self.inner.ctx.state();
        asof::rewrite(&mut statement)?;
        let plan = state.statement_to_plan(statement).await?;
        SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false)
            .verify_plan(&plan)?;
        self.inner.ctx.execute_logical_plan(plan).await
    }

    /// Plans a statement into a physical plan; the engine's query planner
    /// wraps every node in a deadline check (`deadline`), whichever front
    /// (HTTP, pgwire) asked for the plan.
    async fn physical(
        &self,
        sql: &str,
    ) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>), DataFusionError> {
        let df = self.plan_df(sql).await?;
        let (state, logical) = df.into_parts();
        let plan = state.create_physical_plan(&logical).await?;
        Ok((plan, Arc::new(TaskContext::from(&state))))
    }

    fn error(&self, e: DataFusionError, sql: &str) -> QueryError {
        if deadline::is_deadline(&e) {
            return QueryError::Timeout(self.inner.opts.timeout);
        }
        error::with_sql(e.into(), sql)
    }

    /// Runs a query to completion under the time and memory limits.
    pub async fn query(&self, sql: &str) -> Result<QueryResult, QueryError> {
        let timeout = self.inner.opts.timeout;
        let run = async {
            let (plan, task) = self.physical(sql).await?;
            let schema = plan.schema();
            let batches = datafusion::physical_plan::collect(plan, task).await?;
            Ok::<_, DataFusionError>((schema, batches))
        };
        // The outer timeout is a backstop; the plan's own deadline checks
        // are what stop a busy query.
        match tokio::time::timeout(timeout + DEADLINE_GRACE, run).await {
            Err(_) => Err(QueryError::Timeout(timeout)),
            Ok(Err(e)) => Err(self.error(e, sql)),
            Ok(Ok((schema, batches))) => Ok(QueryResult {
                query: sql.to_string(),
                schema,
                batches,
            }),
        }
    }

    /// Plans a query and returns its batches as a stream. The time limit
    /// covers planning and the whole stream: once it passes, the stream
    /// ends with an error whose text contains `deadline::DEADLINE_MESSAGE`
    /// (`QueryEngine::classify` turns it into `QueryError::Timeout`).
    pub async fn stream(
        &self,
        sql: &str,
    ) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
        let timeout = self.inner.opts.timeout;
        let planned = async {
            let (plan, task) = self.physical(sql).await?;
            datafusion::physical_plan::execute_stream(plan, task)
        };
        let stream = match tokio::time::timeout(timeout + DEADLINE_GRACE, planned).await {
            Err(_) => return Err(QueryError::Timeout(timeout)),
            Ok(Err(e)) => return Err(self.error(e, sql)),
            Ok(Ok(s)) => s,
        };
        Ok((stream.schema(), stream))
    }

    /// Maps an error from a `stream` to the engine's error classes.
    pub fn classify(&self, e: DataFusionError, sql: &str) -> QueryError {
        self.error(e, sql)
    }
}
