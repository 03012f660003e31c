//! Who may do what on a tickdb node.
//!
//! - `role`: the three roles, `read` (queries), `write` (ingest) and
//!   `admin` (clear, trim, checkpoint, promote, drain, end of day), and
//!   what each allows;
//! - `verifier`: passwords are stored as PostgreSQL's SCRAM-SHA-256
//!   verifiers (salted, iterated, never the password), which both HTTP
//!   basic auth and the PostgreSQL wire's SCRAM exchange check against;
//! - `ilp_key`: QuestDB's ILP TCP keys (ECDSA P-256; the server holds only
//!   the public point);
//! - `users`: the users file (`--users FILE`, TOML): names, roles, password
//!   verifiers and hashed bearer tokens;
//! - `limiter`: failed logins are logged and, per client address, slowed
//!   down and then refused for a while.

mod error;
pub mod ilp_key;
pub mod limiter;
pub mod role;
pub mod users;
pub mod verifier;

pub use error::AuthError;
pub use ilp_key::IlpKey;
pub use limiter::{LoginLimiter, Refusal};
pub use role::Role;
pub use users::{new_token, pg_md5, pg_md5_salted, token_hash, User, Users, DEFAULT_PASSWORD};
pub use verifier::ScramVerifier;
