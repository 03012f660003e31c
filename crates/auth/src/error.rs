use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("users file {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("users file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("not a SCRAM-SHA-256 verifier ({0}); `tickdb user add` prints one")]
    BadVerifier(String),
    #[error("ILP key: {0}")]
    BadKey(String),
    #[error("unknown role `{0}` (roles: read, write, admin)")]
    UnknownRole(String),
}
