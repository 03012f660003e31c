//! Who may use a node's ports, and protected mode.
//!
//! A node started with `--users FILE` asks every HTTP request (except
//! `/health` and `/settings`) for a user's password (basic auth) or bearer
//! token, and lets each user do what their roles allow. Without a users
//! file the HTTP port is open, which protected mode allows only on
//! loopback: on any other address the node refuses to start unless every
//! port asks for credentials that are not the defaults, or
//! `--no-protected-mode` says the operator means it (as Redis's
//! `protected-mode no`).

use crate::config::NetArgs;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use tickdb_auth::{LoginLimiter, Users};

/// The node's users (none: open) and its failed-login limiter, shared by
/// every port.
pub struct Security {
    users: Option<Arc<Users>>,
    limiter: Arc<LoginLimiter>,
    /// TLS for every port but kdb+ IPC (`--tls-cert`, `--tls-key`).
    tls: Option<tickdb_net::tls::TlsAcceptor>,
}

impl Security {
    /// No users: every port open (loopback, or `--no-protected-mode`).
    pub fn open() -> Security {
        Security::new(None, None)
    }

    pub fn new(users: Option<Users>, tls: Option<tickdb_net::tls::TlsAcceptor>) -> Security {
        Security {
            users: users.map(Arc::new),
            limiter: Arc::new(LoginLimiter::new()),
            tls,
        }
    }

    pub fn tls(&self) -> Option<&tickdb_net::tls::TlsAcceptor> {
        self.tls.as_ref()
    }

    pub fn users(&self) -> Option<&Arc<Users>> {
        self.users.as_ref()
    }

    pub fn limiter(&self) -> &Arc<LoginLimiter> {
        &self.limiter
    }

    /// The gate of ILP TCP and the subscription port: None without a users
    /// file (they are open).
    pub fn login_gate(&self) -> Option<Arc<tickdb_tp::ilp_auth::LoginGate>> {
        self.users.as_ref().map(|u| {
            Arc::new(tickdb_tp::ilp_auth::LoginGate {
                users: u.clone(),
                limiter: self.limiter.clone(),
            })
        })
    }
}

/// What a role's flags open without a password; each entry names the flag
/// (`--pg-no-auth`) or the default it relies on.
#[derive(Default)]
pub struct OpenDoors {
    pub doors: Vec<String>,
}

impl OpenDoors {
    pub fn add(&mut self, open: bool, what: &str) {
        if open {
            self.doors.push(what.to_string());
        }
    }
}

pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Loads the users file and applies protected mode: the node's security,
/// or why it must not start.
pub fn start(net: &NetArgs, mut open: OpenDoors) -> Result<Arc<Security>, String> {
    let users = match &net.users {
        Some(path) => Some(load(path)?),
        None => None,
    };
    if users.is_none() {
        open.doors
            .insert(0, "HTTP and ILP TCP (no --users file)".to_string());
    }
    let defaults = users
        .as_ref()
        .map(Users::with_default_passwords)
        .unwrap_or_default();
    if !defaults.is_empty() {
        open.doors.push(format!(
            "users with the default password or their own name as password: {}",
            defaults.join(", ")
        ));
    }
    if !is_loopback(net.bind) && !open.doors.is_empty() {
        if !net.no_protected_mode {
            return Err(format!(
                "protected mode: refusing to listen on {} (not loopback) with ports that ask for no password or take default credentials: {}. \
                 Anyone who reaches this address could read, write and delete every table. \
                 Give --users FILE with your own passwords (docs/security.md), or --no-protected-mode to serve like this on purpose.",
                net.bind,
                open.doors.join("; ")
            ));
        }
        tracing::warn!(
            "--no-protected-mode: listening on {} with open doors: {}",
            net.bind,
            open.doors.join("; ")
        );
    }
    let tls = match (&net.tls_cert, &net.tls_key) {
        (Some(cert), Some(key)) => Some(tickdb_net::tls::acceptor(cert, key)?),
        _ => None,
    };
    if let Some(u) = &users {
        tracing::info!(
            "users: {} from {}",
            u.len(),
            net.users
                .as_deref()
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_default()
        );
    }
    if tls.is_some() {
        tracing::info!(
            "TLS on HTTP, PostgreSQL wire, ILP TCP, the subscription port and the replication port (--tls-cert)"
        );
    }
    Ok(Arc::new(Security::new(users, tls)))
}

fn load(path: &Path) -> Result<Users, String> {
    Users::load(path).map_err(|e| e.to_string())
}
