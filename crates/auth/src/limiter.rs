//! Failed logins: each is logged (port, client address, user, why), and a
//! client address that keeps failing is refused for a while before its
//! credentials are even checked, so passwords cannot be guessed at line
//! rate and a guessing client cannot make the node spend its CPU on
//! PBKDF2.
//!
//! - The first `LOGIN_FAILURES_FREE` failures from an address cost
//!   nothing more;
//! - each failure after them blocks the address for `LOGIN_BLOCK_MS_FIRST`,
//!   doubling per failure up to `LOGIN_BLOCK_MS_MAX`;
//! - an address with no failure for `LOGIN_FAILURE_MEMORY_S` is forgotten,
//!   and a success forgets it at once.
//!
//! One limiter is shared by every port of a node.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub const LOGIN_FAILURES_FREE: u32 = 10;
pub const LOGIN_BLOCK_MS_FIRST: u64 = 1_000;
pub const LOGIN_BLOCK_MS_MAX: u64 = 60_000;
pub const LOGIN_FAILURE_MEMORY_S: u64 = 600;
/// Addresses remembered at once; past it the oldest are dropped (a flood
/// of addresses cannot grow the node's memory).
pub const LOGIN_LIMITER_ADDRS_MAX: usize = 65_536;

struct Failures {
    count: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

#[derive(Default)]
pub struct LoginLimiter {
    by_addr: Mutex<HashMap<IpAddr, Failures>>,
}

/// A login refused without checking it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub retry_after: Duration,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "too many failed logins from this address; retry in {} s",
            self.retry_after.as_secs().max(1)
        )
    }
}

impl LoginLimiter {
    pub fn new() -> LoginLimiter {
        LoginLimiter::default()
    }

    /// Whether `addr` may try to log in now.
    pub fn check(&self, addr: IpAddr) -> Result<(), Refusal> {
        let now = Instant::now();
        let map = self.by_addr.lock();
        match map.get(&addr).and_then(|f| f.blocked_until) {
            Some(until) if until > now => Err(Refusal {
                retry_after: until - now,
            }),
            _ => Ok(()),
        }
    }

    /// Records and logs a failed login.
    pub fn failed(&self, port: &str, addr: IpAddr, user: &str, why: &str) {
        let now = Instant::now();
        let memory = Duration::from_secs(LOGIN_FAILURE_MEMORY_S);
        let mut map = self.by_addr.lock();
        if map.len() >= LOGIN_LIMITER_ADDRS_MAX && !map.contains_key(&addr) {
            map.retain(|_, f| now.duration_since(f.last) < memory);
            if map.len() >= LOGIN_LIMITER_ADDRS_MAX {
                if let Some(oldest) = map.iter().min_by_key(|(_, f)| f.last).map(|(a, _)| *a) {
                    map.remove(&oldest);
                }
            }
        }
        let f = map.entry(addr).or_insert(Failures {
            count: 0,
            last: now,
            blocked_until: None,
        });
        if now.duration_since(f.last) >= memory {
            f.count = 0;
        }
        f.count = f.count.saturating_add(1);
        f.last = now;
        let over = f.count.saturating_sub(LOGIN_FAILURES_FREE);
        let block = if over == 0 {
            None
        } else {
            let ms = LOGIN_BLOCK_MS_FIRST
                .saturating_mul(1u64 << (over - 1).min(16))
                .min(LOGIN_BLOCK_MS_MAX);
            f.blocked_until = Some(now + Duration::from_millis(ms));
            Some(ms)
        };
        let count = f.count;
        drop(map);
        match block {
            None => tracing::warn!("{port}: failed login from {addr} as `{user}`: {why} ({count} in a row)"),
            Some(ms) => tracing::warn!(
                "{port}: failed login from {addr} as `{user}`: {why} ({count} in a row; the address is refused for {ms} ms)"
            ),
        }
    }

    /// A successful login forgets the address's failures.
    pub fn succeeded(&self, addr: IpAddr) {
        self.by_addr.lock().remove(&addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_that_keeps_failing_is_refused_and_a_success_forgets_it() {
        let l = LoginLimiter::new();
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        for _ in 0..LOGIN_FAILURES_FREE {
            assert!(l.check(a).is_ok());
            l.failed("test", a, "u", "wrong password");
        }
        assert!(l.check(a).is_ok());
        l.failed("test", a, "u", "wrong password");
        let r = l.check(a).expect_err("blocked");
        assert!(r.retry_after <= Duration::from_millis(LOGIN_BLOCK_MS_FIRST));
        assert!(r.to_string().contains("too many failed logins"));
        assert!(l.check(b).is_ok(), "other addresses are not affected");
        l.succeeded(a);
        assert!(l.check(a).is_ok());
    }
}
