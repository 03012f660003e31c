//! The crate's error: every way bytes from a client can be wrong, each
//! naming what was wrong and where (the byte offset in the message).

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum IpcError {
    /// The message ends before the object does.
    #[error("truncated message: {what} needs {need} byte(s) at offset {at}, but the message ends at {len}")]
    Truncated {
        what: &'static str,
        need: usize,
        at: usize,
        len: usize,
    },
    /// A type byte this server does not read.
    #[error("unknown or unsupported type {ty} at offset {at}")]
    UnknownType { ty: i8, at: usize },
    /// Objects nested deeper than the bound.
    #[error("objects nested more than {max} deep at offset {at} (--ipc-depth-max)")]
    TooDeep { max: usize, at: usize },
    /// A message larger than the bound.
    #[error("message of {len} bytes is over the bound of {max} bytes (--ipc-message-bytes-max)")]
    TooLarge { len: u64, max: usize },
    /// The header is not a kdb+ message header.
    #[error("bad message header: {0}")]
    BadHeader(String),
    /// The bytes are not a well-formed object.
    #[error("malformed object at offset {at}: {why}")]
    Malformed { at: usize, why: String },
    /// A compressed message that does not decompress to its stated size.
    #[error("bad compressed message: {0}")]
    BadCompression(String),
    /// The handshake is not `user:password` + capability + NUL.
    #[error("bad handshake: {0}")]
    BadHandshake(String),
}

pub type Result<T> = std::result::Result<T, IpcError>;
