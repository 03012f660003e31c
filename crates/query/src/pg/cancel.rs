//! PostgreSQL query cancellation. A client that wants to stop its running
//! query (psql's Ctrl-C, psycopg's `cancel()`, JDBC's `Statement.cancel`)
//! opens a second connection and sends a CancelRequest with the process id
//! and secret key it got at startup. Each authenticated connection is
//! registered here under that pair with a slot holding its current query's
//! context; the cancel handler cancels that context, which every node of
//! the running plan checks.

use crate::context::QueryCtx;
use async_trait::async_trait;
use datafusion_postgres::pgwire;
use parking_lot::Mutex;
use pgwire::api::cancel::CancelHandler;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use std::collections::HashMap;
use std::sync::Arc;

/// The query a connection is running, if any.
#[derive(Debug, Default)]
pub struct Slot {
    current: Mutex<Option<QueryCtx>>,
}

impl Slot {
    /// Records the query now running on the connection.
    pub fn start(&self, ctx: &QueryCtx) {
        *self.current.lock() = Some(ctx.clone());
    }

    fn cancel(&self) -> bool {
        match self.current.lock().as_ref() {
            Some(ctx) => {
                ctx.cancel();
                true
            }
            None => false,
        }
    }
}

type Key = (i32, Vec<u8>);

/// Every authenticated connection's slot, by (pid, secret key).
#[derive(Debug, Default)]
pub struct Connections {
    map: Mutex<HashMap<Key, Arc<Slot>>>,
}

impl Connections {
    /// Registers a connection; it stays registered while the `Session`
    /// lives.
    pub fn register(self: &Arc<Self>, pid: i32, key: &SecretKey) -> Session {
        let k = (pid, key.to_bytes().to_vec());
        let slot = Arc::new(Slot::default());
        self.map.lock().insert(k.clone(), slot.clone());
        Session {
            key: k,
            slot,
            connections: self.clone(),
        }
    }

    fn cancel(&self, pid: i32, key: &SecretKey) -> bool {
        let k = (pid, key.to_bytes().to_vec());
        let slot = self.map.lock().get(&k).cloned();
        slot.map(|s| s.cancel()).unwrap_or(false)
    }
}

/// A registered connection; unregisters when dropped.
pub struct Session {
    key: Key,
    slot: Arc<Slot>,
    connections: Arc<Connections>,
}

impl Session {
    /// The slot, which the query hooks find in the connection's session
    /// extensions.
    pub fn slot(&self) -> SlotRef {
        SlotRef(self.slot.clone())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connections.map.lock().remove(&self.key);
    }
}

/// The connection's slot as stored in its session extensions.
#[derive(Debug, Clone)]
pub struct SlotRef(pub Arc<Slot>);

/// Cancels the query of the connection a CancelRequest names. As in
/// PostgreSQL, a request naming no connection (or an idle one) is ignored
/// and nothing is answered.
#[derive(Debug)]
pub struct TickCancel {
    pub connections: Arc<Connections>,
}

#[async_trait]
impl CancelHandler for TickCancel {
    async fn on_cancel_request(&self, r: CancelRequest) {
        if self.connections.cancel(r.pid, &r.secret_key) {
            tracing::info!(
                "pgwire: query of connection {} cancelled by its client",
                r.pid
            );
        }
    }
}
