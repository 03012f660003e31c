//! The kdb+ IPC protocol, as KX's "Interprocess communication" and
//! "Serialization examples" pages describe it: the handshake, message
//! frames in either byte order, the serialization of q objects, and
//! compression. docs/ipc.md documents the format byte by byte.
//!
//! This crate is bytes only: what a node does with a message (writes,
//! subscriptions, queries) lives with the node.

pub mod compress;
pub mod decode;
pub mod encode;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod qsql;
pub mod temporal;
pub mod value;

pub use error::{IpcError, Result};
pub use frame::{decode_message, encode_message, Header, Limits, MsgType};
pub use value::{Atom, Kind, Table, Vector, K};

/// Every message starts with an 8-byte header.
pub const HEADER_BYTES: usize = 8;
/// Default bound on one message, in bytes (--ipc-message-bytes-max).
pub const MESSAGE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Default bound on nesting (--ipc-depth-max): a tick table is 3 deep.
pub const DEPTH_MAX: usize = 64;
