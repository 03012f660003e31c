//! Query time limits and cancellation that hold for CPU-bound plans.
//!
//! An outer `tokio::time::timeout` is not enough: DataFusion operators such
//! as a nested-loop join or a sort can run for seconds without returning
//! `Pending`, so a dropped query keeps its worker threads busy. Instead
//! every node of the physical plan is wrapped in a `DeadlineExec` that
//! checks the query's context (`context::QueryCtx`: deadline and
//! cancellation) on each batch passing through, and also while it waits for
//! one, and fails the stream once the deadline has passed or the query was
//! cancelled; the error travels up and ends every task.

use crate::context::{QueryCtx, Stop};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions,
};
use futures::StreamExt;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Text every deadline error carries, so the engine can tell it from other
/// failures however DataFusion wraps it on the way up.
pub const DEADLINE_MESSAGE: &str = "tickdb query deadline exceeded";
/// Text every cancellation error carries, for the same reason.
pub const CANCEL_MESSAGE: &str = "tickdb query cancelled";

pub fn is_deadline(e: &DataFusionError) -> bool {
    e.to_string().contains(DEADLINE_MESSAGE)
}

pub fn is_cancel(e: &DataFusionError) -> bool {
    e.to_string().contains(CANCEL_MESSAGE)
}

/// Which stop, if any, an error from a plan reports.
pub fn stop_of(e: &DataFusionError) -> Option<Stop> {
    let text = e.to_string();
    if text.contains(CANCEL_MESSAGE) {
        Some(Stop::Cancelled)
    } else if text.contains(DEADLINE_MESSAGE) {
        Some(Stop::Deadline)
    } else {
        None
    }
}

/// The error a stopped query's stream ends with.
pub fn stop_error(stop: Stop, timeout: Duration) -> DataFusionError {
    match stop {
        Stop::Deadline => DataFusionError::Execution(format!("{DEADLINE_MESSAGE} ({timeout:?})")),
        Stop::Cancelled => DataFusionError::Execution(CANCEL_MESSAGE.to_string()),
    }
}

#[derive(Debug)]
pub struct DeadlineExec {
    input: Arc<dyn ExecutionPlan>,
    ctx: QueryCtx,
}

/// Wraps every node of `plan` (bottom up) in a check of `ctx`.
pub fn wrap(plan: Arc<dyn ExecutionPlan>, ctx: &QueryCtx) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(Transformed::yes(Arc::new(DeadlineExec {
            input: node,
            ctx: ctx.clone(),
        }) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

impl DisplayAs for DeadlineExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DeadlineExec: {:?}", self.ctx.timeout())
    }
}

impl ExecutionPlan for DeadlineExec {
    fn name(&self) -> &'static str {
        "DeadlineExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("DeadlineExec takes one child".into()))?;
        Ok(Arc::new(DeadlineExec {
            input,
            ctx: self.ctx.clone(),
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        task: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let ctx = self.ctx.clone();
        if let Some(stop) = ctx.stop() {
            return Err(stop_error(stop, ctx.timeout()));
        }
        let input = self.input.execute(partition, task)?;
        let schema = input.schema();
        let stream = futures::stream::unfold(
            (input, ctx, false),
            move |(mut input, ctx, done)| async move {
                if done {
                    return None;
                }
                if let Some(stop) = ctx.stop() {
                    return Some((Err(stop_error(stop, ctx.timeout())), (input, ctx, true)));
                }
                // Waiting for the input is raced against the deadline and a
                // cancel, so a node blocked on a slow child still ends on
                // time.
                let item = tokio::select! {
                    biased;
                    _ = ctx.cancelled() => Err(Stop::Cancelled),
                    _ = tokio::time::sleep_until(ctx.deadline().into()) => Err(Stop::Deadline),
                    item = input.next() => Ok(item),
                };
                match item {
                    Err(stop) => Some((Err(stop_error(stop, ctx.timeout())), (input, ctx, true))),
                    Ok(None) => None,
                    Ok(Some(item)) => {
                        if let Some(stop) = ctx.stop() {
                            return Some((
                                Err(stop_error(stop, ctx.timeout())),
                                (input, ctx, true),
                            ));
                        }
                        Some((item, (input, ctx, false)))
                    }
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
