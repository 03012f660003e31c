//! Query time limits that hold for CPU-bound plans.
//!
//! An outer `tokio::time::timeout` is not enough: DataFusion operators such
//! as a nested-loop join or a sort can run for seconds without returning
//! `Pending`, so a dropped query keeps its worker threads busy and, with
//! every worker busy, the timer that should cancel it never fires. Instead
//! every node of the physical plan is wrapped in a `DeadlineExec` that
//! checks the clock on each batch passing through and fails the stream once
//! the deadline has passed; the error travels up and ends every task.

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
use std::time::{Duration, Instant};

/// Text every deadline error carries, so the engine can tell it from other
/// failures however DataFusion wraps it on the way up.
pub const DEADLINE_MESSAGE: &str = "tickdb query deadline exceeded";

pub fn is_deadline(e: &DataFusionError) -> bool {
    e.to_string().contains(DEADLINE_MESSAGE)
}

#[derive(Debug)]
pub struct DeadlineExec {
    input: Arc<dyn ExecutionPlan>,
    deadline: Instant,
    timeout: Duration,
}

/// Wraps every node of `plan` (bottom up) in a deadline check.
pub fn wrap(
    plan: Arc<dyn ExecutionPlan>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(Transformed::yes(Arc::new(DeadlineExec {
            input: node,
            deadline,
            timeout,
        }) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

impl DisplayAs for DeadlineExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DeadlineExec: {:?}", self.timeout)
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
            deadline: self.deadline,
            timeout: self.timeout,
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
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let deadline = self.deadline;
        let timeout = self.timeout;
        let expired =
            move || DataFusionError::Execution(format!("{DEADLINE_MESSAGE} ({timeout:?})"));
        if Instant::now() >= deadline {
            return Err(expired());
        }
        let input = self.input.execute(partition, ctx)?;
        let schema = input.schema();
        let stream = futures::stream::unfold((input, false), move |(mut input, done)| async move {
            if done {
                return None;
            }
            if Instant::now() >= deadline {
                return Some((Err(expired()), (input, true)));
            }
            let item = input.next().await?;
            if Instant::now() >= deadline {
                return Some((Err(expired()), (input, true)));
            }
            Some((item, (input, false)))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
