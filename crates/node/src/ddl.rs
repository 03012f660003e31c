//! Schema changes on a node with a tp (`tickdb up`): `CREATE TABLE` and
//! `ALTER TABLE ... ADD COLUMN` from HTTP `/exec` and PostgreSQL wire, by an
//! admin, run by the tp (`Tickerplant::change_schema`: checked, recorded
//! and journaled in order with the data). The query engine parses; this
//! checks the role and hands the change to the tp.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tickdb_core::schema_change::SchemaOp;
use tickdb_query::ddl::{DdlExec, DdlOutcome};
use tickdb_query::QueryError;
use tickdb_rdb::Rdb;
use tickdb_tp::{Tickerplant, TpError};

/// How long a statement waits for this node's rdb to apply its change
/// before it answers (the change is journaled either way).
pub const DDL_APPLIED_WAIT_MS: u64 = 5_000;
/// How often that wait looks.
const DDL_APPLIED_POLL_MS: u64 = 2;

pub struct TpDdl {
    pub tp: Arc<Tickerplant>,
    /// This node's rdb (`tickdb up`); None on a tp without tables.
    pub rdb: Option<Arc<Rdb>>,
    pub security: Arc<crate::security::Security>,
}

impl TpDdl {
    /// Only an admin changes the schema, on a node with users; on a node
    /// without users anyone who reaches the port may (as `/clear`).
    fn check_role(&self, user: Option<&str>) -> Result<(), QueryError> {
        let Some(users) = self.security.users() else {
            return Ok(());
        };
        let who = user.unwrap_or("(nobody)");
        match user.and_then(|u| users.get(u)) {
            Some(u) if u.may(tickdb_auth::Role::Admin) => Ok(()),
            Some(u) => {
                let held: Vec<&str> = u.roles.iter().map(|r| r.name()).collect();
                Err(QueryError::Forbidden(format!(
                    "user `{who}` has the roles [{}]; CREATE TABLE and ALTER TABLE need admin",
                    held.join(", ")
                )))
            }
            None => Err(QueryError::Forbidden(format!(
                "`{who}` is not a user of this node; CREATE TABLE and ALTER TABLE need admin"
            ))),
        }
    }
}

impl DdlExec for TpDdl {
    fn exec(
        &self,
        ops: Vec<SchemaOp>,
        sql: String,
        user: Option<String>,
    ) -> BoxFuture<'_, Result<DdlOutcome, QueryError>> {
        Box::pin(async move {
            self.check_role(user.as_deref())?;
            let tag = match ops.first() {
                Some(SchemaOp::CreateTable { .. }) => "CREATE TABLE",
                _ => "ALTER TABLE",
            };
            let what = SchemaOp::describe_all(&ops);
            let seq = self
                .tp
                .change_schema(ops, &what)
                .await
                .map_err(|e| match e {
                    TpError::BadInput(m) => QueryError::Ddl(m),
                    e => QueryError::Ddl(format!("the tp did not journal it: {e}")),
                })?;
            match seq {
                Some(seq) => tracing::info!(
                    "schema change at seq {seq} by {}: {what} ({})",
                    user.as_deref().unwrap_or("(no users)"),
                    sql.chars().take(200).collect::<String>()
                ),
                None => tracing::info!("schema change asked, nothing to change: {what}"),
            }
            Ok(DdlOutcome { seq, tag })
        })
    }

    fn wait_applied(&self, seq: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(rdb) = &self.rdb else {
                return;
            };
            let until = Instant::now() + Duration::from_millis(DDL_APPLIED_WAIT_MS);
            while rdb.applied_seq() < seq && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(DDL_APPLIED_POLL_MS)).await;
            }
        })
    }
}
