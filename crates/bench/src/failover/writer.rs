//! A client writing continuously: one `trade` row per `POST /write`, each
//! with a unique id in `size` and a symbol of its own, about one request a
//! millisecond, to whichever node takes writes (a refusal or a broken
//! connection sends it to the other node). Every acknowledgement is logged
//! outside the database, with the node, the epoch and sequence it reported,
//! and when it arrived.

use crate::http::HttpConn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One request may take this long (a semi-sync refusal takes the node's
/// --sync-timeout-ms, 2 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Between requests.
const PAUSE: Duration = Duration::from_millis(1);
/// After a refusal or a broken connection, before trying the other node.
const SWITCH_PAUSE: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy)]
pub struct Ack {
    pub id: u64,
    pub node: usize,
    pub at: Instant,
    /// The epoch the node acknowledged in (`x-tickdb-epoch`).
    pub epoch: u64,
}

#[derive(Debug, Default)]
pub struct WriterLog {
    pub acks: Vec<Ack>,
    /// Requests refused or broken (not acknowledged: the row may or may
    /// not be there; it is not counted either way).
    pub failed: u64,
    /// The next id not used.
    pub next_id: u64,
}

pub struct Writer {
    stop: Arc<AtomicBool>,
    /// Acknowledgements so far, per node.
    acked: Arc<[AtomicU64; 2]>,
    handle: Option<JoinHandle<WriterLog>>,
}

impl Writer {
    /// Starts writing rows `sym` with ids from `first_id`, to node `first`
    /// first.
    pub fn start(nodes: [SocketAddr; 2], first: usize, sym: &str, first_id: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let (stop2, acked2, sym) = (stop.clone(), acked.clone(), sym.to_string());
        let handle = std::thread::spawn(move || {
            let mut log = WriterLog {
                next_id: first_id,
                ..Default::default()
            };
            let mut conns: [Option<HttpConn>; 2] = [None, None];
            let mut at = first;
            while !stop2.load(Ordering::Relaxed) {
                let id = log.next_id;
                log.next_id += 1;
                let body = format!("trade,sym={sym} price=1.0,size={id}i\n");
                let conn = match conns[at].take() {
                    Some(c) => Ok(c),
                    None => HttpConn::connect_to(nodes[at], REQUEST_TIMEOUT),
                };
                let answer = conn.and_then(|mut c| {
                    let r = c.request_full("POST", "/write", body.as_bytes());
                    if r.is_ok() {
                        conns[at] = Some(c);
                    }
                    r
                });
                match answer {
                    Ok(r) if r.status == 204 => {
                        let num = |h: &str| r.header(h).and_then(|v| v.parse().ok()).unwrap_or(0);
                        log.acks.push(Ack {
                            id,
                            node: at,
                            at: Instant::now(),
                            epoch: num("x-tickdb-epoch"),
                        });
                        acked2[at].fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(PAUSE);
                    }
                    _ => {
                        log.failed += 1;
                        conns[at] = None;
                        at = 1 - at;
                        std::thread::sleep(SWITCH_PAUSE);
                    }
                }
            }
            log
        });
        Writer {
            stop,
            acked,
            handle: Some(handle),
        }
    }

    /// Acknowledgements so far from node `i`.
    pub fn acked_by(&self, i: usize) -> u64 {
        self.acked[i].load(Ordering::Relaxed)
    }

    /// Stops after the request in flight; the log.
    pub fn halt(mut self) -> WriterLog {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What a writer's log shows against the rows a node holds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Tally {
    pub acked: u64,
    /// Acknowledged ids missing from the node.
    pub lost: u64,
    /// Ids the node holds more than once.
    pub duplicated: u64,
    /// Acknowledgements in an older epoch than one acknowledged before
    /// (two primaries taking writes: split brain).
    pub stale: u64,
}

/// Tallies `acks` against `present` (id → copies on the node).
pub fn tally(acks: &[Ack], present: &std::collections::HashMap<u64, u32>) -> Tally {
    let mut newest = 0;
    let mut stale = 0;
    for a in acks {
        if a.epoch < newest {
            stale += 1;
        }
        newest = newest.max(a.epoch);
    }
    Tally {
        acked: acks.len() as u64,
        lost: acks.iter().filter(|a| !present.contains_key(&a.id)).count() as u64,
        duplicated: present.values().filter(|&&n| n > 1).count() as u64,
        stale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_losses_copies_and_stale_epochs() {
        let t0 = Instant::now();
        let ack = |id, epoch| Ack {
            id,
            node: 0,
            at: t0,
            epoch,
        };
        let acks = [ack(1, 1), ack(2, 2), ack(3, 1), ack(4, 2)];
        let present = [(1, 1), (2, 2), (4, 1), (9, 1)].into_iter().collect();
        let t = tally(&acks, &present);
        assert_eq!((t.acked, t.lost, t.duplicated, t.stale), (4, 1, 1, 1));
    }
}
