//! The crate's one error type. Every variant that comes from talking to etcd
//! names the endpoint (and the gateway path) so an operator reading a log
//! line knows which member failed and at what.

use std::fmt;

/// gRPC status codes the gateway reports in `code` that the client acts on.
pub(crate) const GRPC_NOT_FOUND: i64 = 5;
/// Unavailable: etcd's "no leader", "request timed out", "server stopped".
pub(crate) const GRPC_UNAVAILABLE: i64 = 14;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client was set up wrongly (no endpoints, a zero timeout).
    #[error("etcd client: {reason}")]
    Config { reason: String },

    /// An endpoint that does not parse as `host:port` or `http://host:port`.
    #[error("etcd endpoint '{endpoint}': {reason}; expected host:port or http://host:port")]
    BadEndpoint { endpoint: String, reason: String },

    /// TCP connect failed (refused, unreachable, name did not resolve).
    #[error("etcd {endpoint}: cannot connect: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },

    /// The whole exchange (connect, send, read the response) took longer
    /// than the client's request timeout.
    #[error("etcd {endpoint}: POST {path}: no complete response within {timeout_ms} ms")]
    Timeout {
        endpoint: String,
        path: &'static str,
        timeout_ms: u64,
    },

    /// The connection failed after it was open (reset, broken pipe).
    #[error("etcd {endpoint}: POST {path}: {source}")]
    Io {
        endpoint: String,
        path: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// The bytes that came back are not an HTTP/1.1 response we can frame.
    #[error("etcd {endpoint}: POST {path}: malformed HTTP response: {reason}")]
    Malformed {
        endpoint: String,
        path: &'static str,
        reason: String,
    },

    /// The response was bigger than the client is willing to hold.
    #[error("etcd {endpoint}: POST {path}: response larger than {limit_bytes} bytes")]
    TooLarge {
        endpoint: String,
        path: &'static str,
        limit_bytes: usize,
    },

    /// etcd answered with an error: a non-2xx status, or an `error` object
    /// inside a streamed response. `code` is the gRPC status code when the
    /// gateway gave one.
    #[error("etcd {endpoint}: POST {path}: HTTP {status}{}: {message}", fmt_code(*code))]
    Server {
        endpoint: String,
        path: &'static str,
        status: u16,
        code: Option<i64>,
        message: String,
    },

    /// A 2xx response whose JSON is not the shape the gateway documents.
    #[error("etcd {endpoint}: POST {path}: unexpected response body: {reason}")]
    Decode {
        endpoint: String,
        path: &'static str,
        reason: String,
    },

    /// No endpoint could be reached; one error per endpoint tried, in the
    /// order tried.
    #[error("etcd: no endpoint answered ({}): {}", .errors.len(), JoinErrors(.errors))]
    Unreachable { errors: Vec<Error> },
}

impl Error {
    /// Whether this failure belongs to the endpoint rather than the request,
    /// so the same request may go to the next endpoint. A member that cannot
    /// reach its leader answers 503 / Unavailable: another member may still
    /// be in the quorum.
    pub fn is_endpoint_failure(&self) -> bool {
        match self {
            Error::Connect { .. }
            | Error::Timeout { .. }
            | Error::Io { .. }
            | Error::Malformed { .. } => true,
            Error::Server { status, code, .. } => *status == 503 || *code == Some(GRPC_UNAVAILABLE),
            Error::Unreachable { .. } => true,
            Error::Config { .. }
            | Error::BadEndpoint { .. }
            | Error::TooLarge { .. }
            | Error::Decode { .. } => false,
        }
    }

    /// Whether etcd said the lease does not exist (expired or revoked), e.g.
    /// on a put under a lease that ran out: the caller lost what it held.
    pub fn is_lease_not_found(&self) -> bool {
        matches!(self, Error::Server { code: Some(GRPC_NOT_FOUND), message, .. }
            if message.contains("lease not found"))
    }
}

fn fmt_code(code: Option<i64>) -> String {
    match code {
        Some(c) => format!(" (gRPC code {c})"),
        None => String::new(),
    }
}

struct JoinErrors<'a>(&'a [Error]);

impl fmt::Display for JoinErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
