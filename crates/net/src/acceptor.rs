//! Where a server takes its connections from. A query-group member's
//! listening socket comes and goes: it is opened only once the member is
//! ready, closed while the member is busy (so the kernel hands new
//! connections to the other members) and reopened when it has capacity,
//! and closed for good when the member drains. The servers (HTTP,
//! PostgreSQL wire, kdb+ IPC) accept through an `Acceptor`, which follows
//! those changes, and learn from it when to drain and count their open
//! connections in it, so the drain knows when they are done.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The state of one listening socket.
#[derive(Clone, Debug)]
pub enum Slot {
    /// Not listening now (not ready yet, or steered away while busy).
    Closed,
    Open(Arc<TcpListener>),
    /// Closed for good: the server stops accepting.
    Done,
}

/// Connections a server has open: the drain waits for them to end.
#[derive(Clone, Default, Debug)]
pub struct OpenConns(Arc<AtomicUsize>);

/// One open connection; dropping it ends the count.
#[derive(Debug)]
pub struct ConnGuard(Arc<AtomicUsize>);

impl OpenConns {
    pub fn enter(&self) -> ConnGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        ConnGuard(self.0.clone())
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The server's side: accepts while the slot is open.
pub struct Acceptor {
    rx: watch::Receiver<Slot>,
    /// Kept by acceptors over a fixed listener, so the slot never closes.
    _fixed: Option<watch::Sender<Slot>>,
    drain: CancellationToken,
    open: OpenConns,
}

/// The owner's side: opens, closes and ends the slot.
#[derive(Clone, Debug)]
pub struct AcceptorCtl {
    tx: Arc<watch::Sender<Slot>>,
}

/// A slot starting as `initial`, with the node's drain signal and the
/// connection count the server keeps.
pub fn acceptor(
    initial: Slot,
    drain: CancellationToken,
    open: OpenConns,
) -> (AcceptorCtl, Acceptor) {
    let (tx, rx) = watch::channel(initial);
    (
        AcceptorCtl { tx: Arc::new(tx) },
        Acceptor {
            rx,
            _fixed: None,
            drain,
            open,
        },
    )
}

impl Acceptor {
    /// An acceptor over a listener that stays open for the process's life
    /// (a port that is not part of a query group), with no drain.
    pub fn fixed(listener: TcpListener) -> Acceptor {
        let (tx, rx) = watch::channel(Slot::Open(Arc::new(listener)));
        Acceptor {
            rx,
            _fixed: Some(tx),
            drain: CancellationToken::new(),
            open: OpenConns::default(),
        }
    }

    /// The next connection; `None` once the slot is done (drain).
    pub async fn accept(&mut self) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
        loop {
            let slot = self.rx.borrow_and_update().clone();
            match slot {
                Slot::Done => return None,
                Slot::Closed => {
                    if self.rx.changed().await.is_err() {
                        return None;
                    }
                }
                Slot::Open(l) => {
                    tokio::select! {
                        biased;
                        c = self.rx.changed() => {
                            // The owner is gone: keep the listener we have.
                            if c.is_err() {
                                return Some(l.accept().await);
                            }
                            // Otherwise `l` is dropped here, so a closed
                            // slot really closes the socket.
                        }
                        r = l.accept() => return Some(r),
                    }
                }
            }
        }
    }

    /// Cancelled when the node drains: idle connections close, busy ones
    /// finish what they are doing first.
    pub fn drain(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Counts the server's open connections for the drain.
    pub fn conns(&self) -> OpenConns {
        self.open.clone()
    }
}

impl AcceptorCtl {
    pub fn set(&self, slot: Slot) {
        self.tx.send_replace(slot);
    }

    pub fn is_open(&self) -> bool {
        matches!(*self.tx.borrow(), Slot::Open(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_slot_closes_the_socket_and_a_reopened_one_accepts() {
        let std_l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std_l.local_addr().unwrap();
        std_l.set_nonblocking(true).unwrap();
        let l = TcpListener::from_std(std_l).unwrap();
        let (ctl, mut acc) = acceptor(
            Slot::Open(Arc::new(l)),
            CancellationToken::new(),
            OpenConns::default(),
        );
        let task = tokio::spawn(async move {
            let mut n = 0;
            while let Some(r) = acc.accept().await {
                r.unwrap();
                n += 1;
            }
            n
        });
        let _c = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        ctl.set(Slot::Closed);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "closed slot still listens"
        );
        let again = std::net::TcpListener::bind(addr).unwrap();
        again.set_nonblocking(true).unwrap();
        ctl.set(Slot::Open(Arc::new(TcpListener::from_std(again).unwrap())));
        let _d = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        ctl.set(Slot::Done);
        assert_eq!(task.await.unwrap(), 2);
    }
}
