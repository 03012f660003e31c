//! One query's running limits: when it must end (its deadline, from the
//! engine's timeout or a shorter per-session one such as PostgreSQL's
//! `statement_timeout`) and whether a client asked to stop it (PostgreSQL
//! cancel, a dropped HTTP connection).
//!
//! The context rides in the query's DataFusion session config, so the
//! engine's physical planner can wrap every node of the plan in a check of
//! it (`deadline::DeadlineExec`), whichever front planned the query.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

tokio::task_local! {
    /// The context of the statement a front is running in this task, for
    /// plans a library builds from its own session (the PostgreSQL
    /// front's prepared statements): the physical planner looks here when
    /// the session carries no context.
    pub static CURRENT_QUERY: QueryCtx;
}

/// Why a query was stopped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Its deadline passed.
    Deadline,
    /// A client cancelled it.
    Cancelled,
}

#[derive(Debug)]
struct Inner {
    started: Instant,
    deadline: Instant,
    timeout: Duration,
    cancel: CancellationToken,
}

/// A running query's deadline and cancellation. Cheap to clone; clones share
/// the cancellation.
#[derive(Debug, Clone)]
pub struct QueryCtx {
    inner: Arc<Inner>,
}

impl QueryCtx {
    /// A query that must end `timeout` from now.
    pub fn new(timeout: Duration) -> QueryCtx {
        let started = Instant::now();
        QueryCtx {
            inner: Arc::new(Inner {
                started,
                deadline: started + timeout,
                timeout,
                cancel: CancellationToken::new(),
            }),
        }
    }

    pub fn deadline(&self) -> Instant {
        self.inner.deadline
    }

    /// The time limit the deadline was set from (named in errors).
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    pub fn started(&self) -> Instant {
        self.inner.started
    }

    /// Asks the query to stop; every plan node sees it at its next batch.
    pub fn cancel(&self) {
        self.inner.cancel.cancel();
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves once the query is cancelled.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// Whether the query must stop now, and why.
    pub fn stop(&self) -> Option<Stop> {
        if self.is_cancelled() {
            Some(Stop::Cancelled)
        } else if Instant::now() >= self.inner.deadline {
            Some(Stop::Deadline)
        } else {
            None
        }
    }

    /// Cancels the query when the returned guard is dropped: a front holds
    /// it for as long as its client waits, so a client that goes away stops
    /// the work it started.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Cancels its query when dropped.
#[derive(Debug)]
pub struct CancelOnDrop(QueryCtx);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
