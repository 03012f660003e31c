//! Graceful drain, on SIGTERM or `POST /admin/drain`: the node stops
//! accepting connections (its listeners close; with
//! `net.ipv4.tcp_migrate_req` on, connections still in its accept queues
//! move to the other members of each query group instead of being reset),
//! every server ends its idle connections the way its protocol allows and
//! lets the busy ones finish, and the node waits for them up to
//! `--drain-timeout-s` before it stops.

use crate::node::Node;
use std::time::{Duration, Instant};

/// `--drain-timeout-s` by default, in seconds.
pub const DRAIN_TIMEOUT_S_DEFAULT: u64 = 30;
/// How often the drain looks at what is still open.
const DRAIN_POLL_MS: u64 = 20;

/// Drains `node` (see the module's doc); returns when every connection has
/// ended or `timeout` has passed.
pub async fn drain(node: &Node, timeout: Duration, why: &str) {
    let start = Instant::now();
    node.life.draining();
    if let Some(p) = node.ports() {
        p.close_all();
    }
    node.drain.cancel();
    let open = || node.ports().map(|p| p.open_connections()).unwrap_or(0);
    let queries = || node.query().map(|q| q.pool_stats());
    let q = queries();
    tracing::info!(
        "draining ({why}): no new connections; {} connection(s) open, {} queries running; waiting up to {} s (--drain-timeout-s)",
        open(),
        q.map(|l| l.running).unwrap_or(0),
        timeout.as_secs()
    );
    loop {
        let n = open();
        if n == 0 {
            tracing::info!("drained in {:.3} s", start.elapsed().as_secs_f64());
            return;
        }
        if start.elapsed() >= timeout {
            let q = queries();
            tracing::warn!(
                "drain timeout ({} s, --drain-timeout-s) expired with {} queries still running (the longest for {:.1} s) and {n} connection(s) open: stopping anyway; their clients see the connection close",
                timeout.as_secs(),
                q.as_ref().map(|l| l.running + l.waiting).unwrap_or(0),
                q.and_then(|l| l.longest_running_ms).unwrap_or(0) as f64 / 1000.0,
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
}
