//! Where queries run, and how many at once.
//!
//! Queries get threads of their own: a tokio runtime separate from the one
//! that parses ingest, journals, acknowledges and publishes, so no query
//! can occupy the threads a write needs (kdb+ shops run the tickerplant
//! apart from the query processes for the same reason). The query threads
//! run under Linux's `SCHED_IDLE` policy (and at `QUERY_THREAD_NICE` where
//! that policy is refused), so on a busy machine the kernel gives the
//! ingest threads the CPU first, and with
//! large stacks, so deep (but accepted, see `limits`) statements plan
//! without overflowing.
//!
//! Admission: at most `concurrency` queries run; up to `queue_max` more
//! wait their turn (within their own deadline); beyond that a query is
//! refused at once with a "busy" error instead of piling up.

use crate::context::QueryCtx;
use crate::QueryError;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Stack of each query thread. Reserved address space, not memory: pages
/// are touched only as deep as a plan really recurses.
pub const QUERY_THREAD_STACK_BYTES: usize = 256 * 1024 * 1024;
/// Scheduling priority of the query threads (nice value, 0..=19; higher
/// is lower priority). Ingest threads keep the default 0.
pub const QUERY_THREAD_NICE: i32 = 10;
/// Queries that may run at once, by default.
pub const QUERY_CONCURRENCY_DEFAULT: usize = 4;
/// Queries that may wait for a turn, by default; more are refused as busy.
pub const QUERY_QUEUE_MAX_DEFAULT: usize = 64;

/// The query threads and the admission gate.
pub struct QueryPool {
    runtime: Option<Runtime>,
    handle: Handle,
    gate: Arc<Gate>,
    threads: usize,
}

struct Gate {
    running: Arc<Semaphore>,
    concurrency: usize,
    queue_max: usize,
    waiting: AtomicUsize,
    admitted: AtomicU64,
    refused_busy: AtomicU64,
    expired_waiting: AtomicU64,
    /// When each running query was admitted, by admission number: the
    /// first entry is the longest running (busy steering reads it).
    running_since: parking_lot::Mutex<std::collections::BTreeMap<u64, Instant>>,
}

/// What /status and /metrics report about the pool.
#[derive(Debug, Clone, Serialize)]
pub struct PoolStats {
    pub threads: usize,
    pub concurrency: usize,
    pub queue_max: usize,
    pub running: usize,
    pub waiting: usize,
    pub admitted_total: u64,
    pub refused_busy_total: u64,
    pub expired_waiting_total: u64,
    /// How long the longest-running query has run, in ms (busy steering
    /// reads it).
    pub longest_running_ms: Option<u64>,
}

/// A query's turn; the next waiting query runs when it is dropped.
pub struct Permit {
    _permit: OwnedSemaphorePermit,
    gate: Arc<Gate>,
    number: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.running_since.lock().remove(&self.number);
    }
}

impl QueryPool {
    /// Starts `threads` query threads (at least one) admitting
    /// `concurrency` queries at once with `queue_max` waiting.
    pub fn new(threads: usize, concurrency: usize, queue_max: usize) -> Result<Self, QueryError> {
        let threads = threads.max(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("tickdb-query")
            .thread_stack_size(QUERY_THREAD_STACK_BYTES)
            .on_thread_start(lower_priority)
            .enable_all()
            .build()
            .map_err(|e| QueryError::Internal(format!("starting the query threads: {e}")))?;
        let handle = runtime.handle().clone();
        let concurrency = concurrency.max(1);
        Ok(QueryPool {
            runtime: Some(runtime),
            handle,
            gate: Arc::new(Gate {
                running: Arc::new(Semaphore::new(concurrency)),
                concurrency,
                queue_max,
                waiting: AtomicUsize::new(0),
                admitted: AtomicU64::new(0),
                refused_busy: AtomicU64::new(0),
                expired_waiting: AtomicU64::new(0),
                running_since: parking_lot::Mutex::new(std::collections::BTreeMap::new()),
            }),
            threads,
        })
    }

    /// The query runtime: spawn query work here, never on the I/O threads.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Waits for a turn, until the query's deadline; refuses at once when
    /// the queue is full.
    pub async fn admit(&self, ctx: &QueryCtx) -> Result<Permit, QueryError> {
        let g = &self.gate;
        if let Ok(p) = g.running.clone().try_acquire_owned() {
            return Ok(self.permit(p));
        }
        if g.waiting.fetch_add(1, Ordering::AcqRel) >= g.queue_max {
            g.waiting.fetch_sub(1, Ordering::AcqRel);
            g.refused_busy.fetch_add(1, Ordering::Relaxed);
            return Err(QueryError::Busy(format!(
                "{} queries running and {} waiting, the most this node admits \
                 (--query-concurrency, --query-queue-max); retry shortly",
                g.concurrency, g.queue_max
            )));
        }
        let waited = tokio::select! {
            p = g.running.clone().acquire_owned() => Ok(p),
            _ = tokio::time::sleep_until(ctx.deadline().into()) => Err(crate::context::Stop::Deadline),
            _ = ctx.cancelled() => Err(crate::context::Stop::Cancelled),
        };
        g.waiting.fetch_sub(1, Ordering::AcqRel);
        match waited {
            Ok(Ok(p)) => Ok(self.permit(p)),
            Ok(Err(_closed)) => Err(QueryError::Internal("the query pool is closed".into())),
            Err(crate::context::Stop::Deadline) => {
                g.expired_waiting.fetch_add(1, Ordering::Relaxed);
                Err(QueryError::Timeout(ctx.timeout()))
            }
            Err(crate::context::Stop::Cancelled) => Err(QueryError::Cancelled),
        }
    }

    fn permit(&self, p: OwnedSemaphorePermit) -> Permit {
        let number = self.gate.admitted.fetch_add(1, Ordering::Relaxed);
        self.gate
            .running_since
            .lock()
            .insert(number, Instant::now());
        Permit {
            _permit: p,
            gate: self.gate.clone(),
            number,
        }
    }

    pub fn stats(&self) -> PoolStats {
        let g = &self.gate;
        PoolStats {
            threads: self.threads,
            concurrency: g.concurrency,
            queue_max: g.queue_max,
            running: g.concurrency - g.running.available_permits(),
            waiting: g.waiting.load(Ordering::Relaxed),
            admitted_total: g.admitted.load(Ordering::Relaxed),
            refused_busy_total: g.refused_busy.load(Ordering::Relaxed),
            expired_waiting_total: g.expired_waiting.load(Ordering::Relaxed),
            longest_running_ms: g
                .running_since
                .lock()
                .values()
                .next()
                .map(|t| t.elapsed().as_millis() as u64),
        }
    }
}

thread_local! {
    /// Set while this thread runs a stretch handed off by `off_worker`.
    static OFF_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, a stretch of query work that can hold the CPU for long without
/// yielding (parsing and planning a statement thousands of terms deep),
/// without holding a query worker thread: on the multi-threaded query
/// runtime the worker hands its other tasks to a fresh worker for the
/// duration (`block_in_place`), so PostgreSQL connections, timers and other
/// queries keep running. Elsewhere (a test's runtime) it simply awaits.
pub async fn off_worker<F: std::future::Future>(f: F) -> F::Output {
    let multi = tokio::runtime::Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    match multi {
        Some(h) if !OFF_WORKER.with(|o| o.get()) => tokio::task::block_in_place(|| {
            OFF_WORKER.with(|o| o.set(true));
            let out = h.block_on(f);
            OFF_WORKER.with(|o| o.set(false));
            out
        }),
        _ => f.await,
    }
}

impl Drop for QueryPool {
    /// A runtime may not be dropped from async code (an engine can be
    /// dropped inside a test's runtime): let its threads wind down alone.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread's scheduling priority (Linux applies nice
/// values and policies per thread). `SCHED_IDLE` rather than nice alone:
/// a nice-10 thread still keeps its slice when an ingest thread wakes, and
/// on two cores that wait showed in the write acknowledgements' p99 under
/// a query storm (`tickdb bench robustness`: about 16 ms at nice 10, about
/// 9-11 ms with `SCHED_IDLE`); the kernel preempts an idle-policy thread
/// as soon as a normal one wants its core. Queries still progress, at a
/// small share, while ingest keeps the CPU busy. Failing either call is
/// harmless: the thread keeps the default priority.
fn lower_priority() {
    // SAFETY: gettid, setpriority and sched_setscheduler only change this
    // thread's own scheduling attributes; `param` outlives the call.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, QUERY_THREAD_NICE);
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_IDLE, &param);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn admits_up_to_concurrency_queues_then_refuses() {
        let pool = QueryPool::new(1, 2, 1).unwrap();
        let ctx = QueryCtx::new(Duration::from_secs(5));
        let a = pool.admit(&ctx).await.unwrap();
        let _b = pool.admit(&ctx).await.unwrap();
        assert_eq!(pool.stats().running, 2);
        // The third waits; a fourth finds the queue full.
        let pool = Arc::new(pool);
        let waiter = {
            let (pool, ctx) = (pool.clone(), ctx.clone());
            tokio::spawn(async move { pool.admit(&ctx).await.map(|_| ()) })
        };
        while pool.stats().waiting == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let e = pool.admit(&ctx).await.err().unwrap();
        assert!(matches!(e, QueryError::Busy(_)), "{e}");
        assert_eq!(pool.stats().refused_busy_total, 1);
        drop(a);
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_waiting_query_ends_at_its_deadline() {
        let pool = QueryPool::new(1, 1, 4).unwrap();
        let long = QueryCtx::new(Duration::from_secs(5));
        let _held = pool.admit(&long).await.unwrap();
        let short = QueryCtx::new(Duration::from_millis(50));
        let e = pool.admit(&short).await.err().unwrap();
        assert!(matches!(e, QueryError::Timeout(_)), "{e}");
        assert_eq!(pool.stats().expired_waiting_total, 1);
        assert_eq!(pool.stats().waiting, 0);
    }

    #[tokio::test]
    async fn the_longest_running_query_is_the_oldest_admitted_still_running() {
        let pool = QueryPool::new(1, 2, 1).unwrap();
        let ctx = QueryCtx::new(Duration::from_secs(5));
        assert_eq!(pool.stats().longest_running_ms, None);
        let first = pool.admit(&ctx).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let second = pool.admit(&ctx).await.unwrap();
        assert!(pool.stats().longest_running_ms.unwrap() >= 60);
        drop(first);
        assert!(pool.stats().longest_running_ms.unwrap() < 60);
        drop(second);
        assert_eq!(pool.stats().longest_running_ms, None);
    }

    #[test]
    fn query_threads_run_at_lower_priority() {
        let pool = QueryPool::new(1, 1, 1).unwrap();
        let nice = pool
            .handle()
            .block_on(async {
                tokio::spawn(async {
                    // SAFETY: reads this thread's own priority.
                    unsafe {
                        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                        libc::getpriority(libc::PRIO_PROCESS, tid)
                    }
                })
                .await
            })
            .unwrap();
        assert!(nice >= QUERY_THREAD_NICE, "nice {nice}");
        let policy = pool
            .handle()
            .block_on(async {
                tokio::spawn(async {
                    // SAFETY: reads this thread's own policy.
                    unsafe { libc::sched_getscheduler(0) }
                })
                .await
            })
            .unwrap();
        assert_eq!(
            policy,
            libc::SCHED_IDLE,
            "query threads run under SCHED_IDLE"
        );
    }
}
