//! The HTTP port's gate: cross-site requests refused, then, on a node
//! with a users file, the request's user and role checked.
//!
//! - **Cross-site requests** (a browser page on another origin posting to
//!   `/clear`, say) are refused on every path but `/health`: a request
//!   whose `Origin` is not the host it was sent to, or that the browser
//!   marks `Sec-Fetch-Site: cross-site` or `same-site`, gets 403. Clients
//!   that are not browsers send neither header. This holds with or without
//!   a users file, since a browser on the operator's own machine can reach
//!   loopback.
//! - **Authentication**: `Authorization: Basic` (user and password, as the
//!   `questdb` client's `username`/`password` send it) or `Authorization:
//!   Bearer TOKEN` (its `token`). Missing: 401 with `WWW-Authenticate`.
//!   Wrong: 401, logged, and counted against the client's address
//!   (`tickdb_auth::limiter`: 429 with `Retry-After` once it is refused).
//! - **Roles**: `/write` and `/api/v2/write` need `write`; `/exec`,
//!   `/status` and `/metrics` need `read`; `/clear`, `/checkpoint`,
//!   `/journal/trim` and `/admin/*` need `admin`. `/health` and
//!   `/settings` (the `questdb` client's protocol probe) need nothing.

use crate::http::{json_error, AppState};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use tickdb_auth::{Role, User};

/// The client's address, put on each request by the connection's server.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// The logged-in user, put on the request for the handlers.
#[derive(Clone, Debug)]
pub struct LoggedIn(pub String);

/// What a path needs; None: anyone.
pub fn needed(path: &str) -> Option<Role> {
    match path {
        "/health" | "/settings" => None,
        "/write" | "/api/v2/write" => Some(Role::Write),
        "/clear" | "/checkpoint" | "/journal/trim" => Some(Role::Admin),
        p if p.starts_with("/admin/") => Some(Role::Admin),
        // /exec, /status, /metrics, and a path that does not exist (its
        // 404 is not for strangers either).
        _ => Some(Role::Read),
    }
}

/// Why a request comes from another site's page, if it does.
pub fn cross_site(headers: &HeaderMap) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
            return Some(format!("the browser marks it Sec-Fetch-Site: {site}"));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("(not text)");
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let authority = origin.split_once("://").map(|(_, a)| a).unwrap_or("");
    if !host.is_empty() && authority.eq_ignore_ascii_case(host) {
        return None;
    }
    Some(format!("its Origin {origin} is not this server ({host})"))
}

enum Credential {
    Basic { user: String, password: String },
    Bearer(String),
}

/// The credential in `Authorization`, if any; Err says what is malformed.
fn credential(headers: &HeaderMap) -> Option<Result<Credential, &'static str>> {
    let v = headers.get(header::AUTHORIZATION)?;
    let Ok(v) = v.to_str() else {
        return Some(Err("Authorization is not text"));
    };
    let (scheme, rest) = v.trim().split_once(' ').unwrap_or((v, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(rest) else {
            return Some(Err("basic credentials are not base64"));
        };
        let Ok(text) = String::from_utf8(bytes) else {
            return Some(Err("basic credentials are not UTF-8"));
        };
        let Some((user, password)) = text.split_once(':') else {
            return Some(Err(
                "basic credentials have no `:` between user and password",
            ));
        };
        return Some(Ok(Credential::Basic {
            user: user.to_string(),
            password: password.to_string(),
        }));
    }
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(Ok(Credential::Bearer(rest.to_string())));
    }
    Some(Err("Authorization is neither Basic nor Bearer"))
}

fn unauthorized(message: String) -> Response {
    let mut r = json_error(StatusCode::UNAUTHORIZED, "unauthorized", message, json!({}));
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"tickdb\", charset=\"UTF-8\""),
    );
    r
}

/// The gate, as an axum middleware over every route.
pub async fn guard(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    // Every write passes here: nothing is allocated until a request is
    // refused or a users file asks for a login.
    let path = req.uri().path();
    if path != "/health" {
        if let Some(why) = cross_site(req.headers()) {
            tracing::warn!("HTTP: refused a cross-site request to {path}: {why}");
            return json_error(
                StatusCode::FORBIDDEN,
                "cross_site_request",
                format!("refused: a browser page on another site sent this request ({why}); tickdb takes no requests from other sites' pages"),
                json!({}),
            );
        }
    }
    let security = s.node.security();
    let Some(users) = security.users().cloned() else {
        return next.run(req).await;
    };
    let Some(role) = needed(path) else {
        return next.run(req).await;
    };
    let path = path.to_string();
    let peer = req
        .extensions()
        .get::<PeerAddr>()
        .map(|p| p.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    if let Err(refusal) = security.limiter().check(peer) {
        let mut r = json_error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_logins",
            refusal.to_string(),
            json!({}),
        );
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(refusal.retry_after.as_secs().max(1)),
        );
        return r;
    }
    let (who, user): (String, Option<User>) = match credential(req.headers()) {
        None => {
            return unauthorized(format!(
                "{path} needs a user with the {role} role: send basic auth (user and password) or a bearer token"
            ))
        }
        Some(Err(why)) => {
            security.limiter().failed("HTTP", peer, "?", why);
            return unauthorized(format!("malformed credentials: {why}"));
        }
        Some(Ok(Credential::Basic { user, password })) => {
            // PBKDF2 (4096 rounds) on a cache miss: off the async threads.
            let u = users.clone();
            let name = user.clone();
            let found = tokio::task::spawn_blocking(move || u.check_password(&name, &password).cloned())
                .await
                .ok()
                .flatten();
            (user, found)
        }
        Some(Ok(Credential::Bearer(token))) => ("(token)".to_string(), users.check_token(&token).cloned()),
    };
    let Some(user) = user else {
        security
            .limiter()
            .failed("HTTP", peer, &who, "wrong user, password or token");
        return unauthorized("wrong user, password or token".to_string());
    };
    security.limiter().succeeded(peer);
    if !user.may(role) {
        let held: Vec<&str> = user.roles.iter().map(|r| r.name()).collect();
        return json_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "user `{}` has the roles [{}]; {path} needs {role}",
                user.name,
                held.join(", ")
            ),
            json!({}),
        );
    }
    req.extensions_mut().insert(LoggedIn(user.name));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn foreign_origins_and_cross_site_fetches_are_refused() {
        assert!(cross_site(&headers(&[("host", "127.0.0.1:8700")])).is_none());
        assert!(cross_site(&headers(&[
            ("host", "127.0.0.1:8700"),
            ("origin", "http://127.0.0.1:8700")
        ]))
        .is_none());
        assert!(cross_site(&headers(&[
            ("host", "127.0.0.1:8700"),
            ("origin", "http://evil.example")
        ]))
        .is_some());
        assert!(cross_site(&headers(&[("host", "127.0.0.1:8700"), ("origin", "null")])).is_some());
        assert!(cross_site(&headers(&[
            ("host", "127.0.0.1:8700"),
            ("origin", "http://127.0.0.1:8701")
        ]))
        .is_some());
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])).is_some());
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-origin")])).is_none());
    }

    #[test]
    fn paths_need_their_roles() {
        assert_eq!(needed("/health"), None);
        assert_eq!(needed("/settings"), None);
        assert_eq!(needed("/write"), Some(Role::Write));
        assert_eq!(needed("/exec"), Some(Role::Read));
        assert_eq!(needed("/clear"), Some(Role::Admin));
        assert_eq!(needed("/admin/drain"), Some(Role::Admin));
        assert_eq!(needed("/nope"), Some(Role::Read));
    }
}
