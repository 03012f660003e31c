//! Optimized logical plans of recently run statements, by their exact text.
//!
//! A monitor polls the same statement again and again (one symbol's as-of
//! join, every few seconds). Parsing it, planning it from SQL and running
//! DataFusion's analyzer and optimizer over it costs about as much CPU as
//! reading a quiet symbol's rows out of a 50M-row rdb. A statement seen
//! before skips all of that and goes straight to physical planning, which
//! still runs every time: that is where each table is snapshotted, so a
//! cached plan reads the rows that are there when it runs, never the rows
//! there were when it was cached.
//!
//! Only plans whose meaning cannot change between runs are kept:
//! - every scan is of a tickdb table (today's rows, or today's and
//!   history's), whose `scan` snapshots at physical planning. Not a
//!   `latest('t')` call, whose rows are taken while the SQL is planned, nor
//!   `information_schema` or `pg_catalog`;
//! - no function that is not immutable: `now()`, `random()` and the like
//!   are folded to a value by the optimizer, so their plan holds that value;
//! - no `EXPLAIN`, whose output is the plan text itself.
//!
//! Entries follow the tables the engine has registered: a schema change
//! (a table created, a column added) empties the cache, so no plan names
//! a table as it was.

use crate::asof::AsofJoinNode;
use crate::history::HistTable;
use crate::provider::TickTable;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Statements kept; the oldest goes first. A monitor or dashboard polls a
/// handful of statements; a client sending a new text every time (a time
/// literal in it) only turns the cache over.
pub const PLAN_CACHE_ENTRIES_MAX: usize = 256;

/// Longer statements are not kept: their text would be most of an
/// entry's memory, and they are rarely polled.
pub const PLAN_CACHE_SQL_BYTES_MAX: usize = 4096;

/// The cache of one engine.
#[derive(Default)]
pub(crate) struct PlanCache {
    state: parking_lot::Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    /// The tables version the entries were planned against.
    version: u64,
    plans: HashMap<Arc<str>, Arc<LogicalPlan>>,
    /// Insertion order, for eviction.
    order: VecDeque<Arc<str>>,
}

impl PlanCache {
    /// The plan of `sql` planned against tables `version`, if kept.
    pub(crate) fn get(&self, version: u64, sql: &str) -> Option<Arc<LogicalPlan>> {
        let s = self.state.lock();
        if s.version != version {
            return None;
        }
        s.plans.get(sql).cloned()
    }

    /// Keeps `optimized`, the optimized plan of `sql` planned against
    /// tables `version`, when it may be reused: when `planned` (the plan
    /// from the SQL, before the optimizer folds `now()` into a value) is
    /// `reusable`.
    pub(crate) fn put(
        &self,
        version: u64,
        sql: &str,
        planned: &LogicalPlan,
        optimized: &Arc<LogicalPlan>,
    ) {
        if sql.len() > PLAN_CACHE_SQL_BYTES_MAX || !reusable(planned) {
            return;
        }
        let mut s = self.state.lock();
        if s.version != version {
            if version < s.version {
                // Planned against tables that have changed since.
                return;
            }
            s.plans.clear();
            s.order.clear();
            s.version = version;
        }
        if s.plans.contains_key(sql) {
            return;
        }
        while s.plans.len() >= PLAN_CACHE_ENTRIES_MAX {
            let Some(old) = s.order.pop_front() else {
                break;
            };
            s.plans.remove(&old);
        }
        let key: Arc<str> = Arc::from(sql);
        s.order.push_back(key.clone());
        s.plans.insert(key, optimized.clone());
    }

    pub(crate) fn len(&self) -> usize {
        self.state.lock().plans.len()
    }
}

/// Whether running `plan` (as planned from SQL, not yet optimized) again
/// later means what planning its SQL again would (the module's rules),
/// subqueries included.
pub(crate) fn reusable(plan: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|node| {
        ok = node_reusable(node)
            && !node
                .expressions()
                .iter()
                .any(|e| e.exists(|e| Ok(!expr_reusable(e))).unwrap_or(true));
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

fn node_reusable(node: &LogicalPlan) -> bool {
    match node {
        LogicalPlan::TableScan(t) => {
            source_as_provider(&t.source).is_ok_and(|p| p.is::<TickTable>() || p.is::<HistTable>())
        }
        LogicalPlan::Extension(e) => e.node.as_any().is::<AsofJoinNode>(),
        LogicalPlan::Explain(_)
        | LogicalPlan::Analyze(_)
        | LogicalPlan::Statement(_)
        | LogicalPlan::Dml(_)
        | LogicalPlan::Ddl(_)
        | LogicalPlan::Copy(_)
        | LogicalPlan::DescribeTable(_) => false,
        _ => true,
    }
}

fn expr_reusable(e: &Expr) -> bool {
    match e {
        Expr::ScalarFunction(f) => f.func.signature().volatility == Volatility::Immutable,
        Expr::ScalarVariable(..) | Expr::Placeholder(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{lit, LogicalPlanBuilder};
    use datafusion::prelude::SessionContext;

    fn values() -> Arc<LogicalPlan> {
        Arc::new(
            LogicalPlanBuilder::values(vec![vec![lit(1i64)]])
                .expect("values")
                .build()
                .expect("plan"),
        )
    }

    #[test]
    fn keeps_per_version_and_evicts_the_oldest() {
        let c = PlanCache::default();
        let p = values();
        c.put(1, "select 1", &p, &p);
        assert!(c.get(1, "select 1").is_some());
        assert!(c.get(2, "select 1").is_none(), "another tables version");
        // A plan from older tables than the cache's is not kept.
        c.put(2, "select 2", &p, &p);
        c.put(1, "select 3", &p, &p);
        assert!(c.get(2, "select 1").is_none(), "emptied at version 2");
        assert!(c.get(2, "select 2").is_some());
        assert!(c.get(1, "select 3").is_none() && c.get(2, "select 3").is_none());
        for i in 0..PLAN_CACHE_ENTRIES_MAX + 10 {
            c.put(2, &format!("select {i} + 100"), &p, &p);
        }
        assert_eq!(c.len(), PLAN_CACHE_ENTRIES_MAX);
        assert!(c.get(2, "select 2").is_none(), "the oldest went first");
        let last = format!("select {} + 100", PLAN_CACHE_ENTRIES_MAX + 9);
        assert!(c.get(2, &last).is_some());
        c.put(2, &"x".repeat(PLAN_CACHE_SQL_BYTES_MAX + 1), &p, &p);
        assert!(c
            .get(2, &"x".repeat(PLAN_CACHE_SQL_BYTES_MAX + 1))
            .is_none());
    }

    #[tokio::test]
    async fn volatile_functions_and_explain_are_not_reused() {
        let ctx = SessionContext::new();
        let plan = |sql: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.state().create_logical_plan(sql).await.expect("plans") }
        };
        assert!(reusable(&plan("select 1 + 2").await));
        assert!(!reusable(&plan("select now()").await));
        assert!(!reusable(&plan("select random()").await));
        assert!(!reusable(&plan("explain select 1").await));
        assert!(!reusable(
            &plan("select 1 where 1 in (select 1 where now() > now())").await
        ));
        // A scan of a table that is not a tickdb table (a MemTable here:
        // what `latest()` plans) is not reused.
        ctx.sql("create table m as values (1)").await.expect("ddl");
        assert!(!reusable(&plan("select * from m").await));
    }
}
