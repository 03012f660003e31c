//! Whether this tp takes writes: a primary does, in its epoch; a standby
//! takes its primary's records only; a fenced primary takes nothing, because
//! it can no longer be sure it is the primary (its lease is about to expire,
//! a newer epoch was seen, or a switchover is handing over). Every write
//! path asks here, and the journal thread asks again before it acknowledges,
//! so no write is acknowledged after the fence goes up.

use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Primary,
    /// Follows the primary at this (replication) address.
    Standby {
        primary: String,
    },
    /// Was the primary; takes no writes. `primary` is the new primary's
    /// address once known.
    Fenced {
        reason: String,
        primary: Option<String>,
    },
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Standby { .. } => "standby",
            Role::Fenced { .. } => "fenced",
        }
    }
}

/// The tp's role, read on every write (an atomic) and changed rarely.
pub struct RoleCell {
    role: RwLock<Role>,
    accepting: AtomicBool,
    /// With a leader lease (etcd): writes are taken only before this
    /// instant, in ns after `base` (0: no lease, no deadline). Read on the
    /// write and acknowledgement paths themselves, so a primary that was
    /// paused past its lease (SIGSTOP, a long stall) refuses the moment it
    /// runs again, before any timer has had a chance to fence it.
    lease_deadline_ns: AtomicU64,
    base: Instant,
    /// Where clients write to the primary (HTTP, ILP TCP), as a standby
    /// last heard from it: named in its refusals.
    primary_endpoints: parking_lot::Mutex<Option<(String, String)>>,
}

impl RoleCell {
    pub fn new(role: Role) -> RoleCell {
        let accepting = role == Role::Primary;
        RoleCell {
            role: RwLock::new(role),
            accepting: AtomicBool::new(accepting),
            lease_deadline_ns: AtomicU64::new(0),
            base: Instant::now(),
            primary_endpoints: parking_lot::Mutex::new(None),
        }
    }

    /// True while writes may be journaled and acknowledged here.
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::Acquire) && !self.lease_expired()
    }

    fn lease_expired(&self) -> bool {
        let d = self.lease_deadline_ns.load(Ordering::Acquire);
        d != 0 && self.base.elapsed().as_nanos() as u64 >= d
    }

    /// Writes are taken only until `until` (a leader lease's end, less a
    /// margin); None: no lease.
    pub fn set_lease_deadline(&self, until: Option<Instant>) {
        let ns = match until {
            None => 0,
            Some(t) => (t.saturating_duration_since(self.base).as_nanos() as u64).max(1),
        };
        self.lease_deadline_ns.store(ns, Ordering::Release);
    }

    /// How long the lease still lets this primary take writes (None: no
    /// lease).
    pub fn lease_left(&self) -> Option<std::time::Duration> {
        let d = self.lease_deadline_ns.load(Ordering::Acquire);
        (d != 0).then(|| {
            std::time::Duration::from_nanos(d.saturating_sub(self.base.elapsed().as_nanos() as u64))
        })
    }

    pub fn get(&self) -> Role {
        self.role.read().clone()
    }

    pub fn set(&self, role: Role) {
        let mut r = self.role.write();
        // Lowered before the role changes and raised after it: a reader
        // that sees `accepting` true sees a primary.
        self.accepting.store(false, Ordering::Release);
        let accept = role == Role::Primary;
        *r = role;
        if accept {
            self.accepting.store(true, Ordering::Release);
        }
    }

    pub fn set_primary_endpoints(&self, http: &str, ilp: &str) {
        *self.primary_endpoints.lock() = Some((http.to_string(), ilp.to_string()));
    }

    /// The primary's HTTP and ILP TCP addresses, when a standby knows them.
    pub fn primary_endpoints(&self) -> Option<(String, String)> {
        self.primary_endpoints.lock().clone()
    }

    /// The error a write gets when this tp does not take writes.
    pub fn refusal(&self) -> Option<crate::error::TpError> {
        if self.accepting() {
            return None;
        }
        match self.get() {
            Role::Primary => Some(crate::error::TpError::Fenced {
                reason: "its leader lease could not be renewed in time (etcd not reached)".into(),
                primary: None,
            }),
            Role::Standby { primary } => {
                let ep = self.primary_endpoints().filter(|(h, _)| !h.is_empty());
                Some(crate::error::TpError::Standby {
                    primary,
                    http: ep.as_ref().map(|e| e.0.clone()),
                    ilp: ep.map(|e| e.1),
                })
            }
            Role::Fenced { reason, primary } => {
                Some(crate::error::TpError::Fenced { reason, primary })
            }
        }
    }
}
