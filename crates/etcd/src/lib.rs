//! tickdb-etcd: a minimal etcd v3 client for leader election (a leader key
//! held under a lease, as Patroni does), speaking etcd's JSON gRPC gateway
//! (`POST http://host:port/v3/...`) over plain HTTP/1.1, so the node carries
//! no gRPC stack.
//!
//! - `client`: the KV, lease and txn calls, and endpoint failover
//! - `http`: the wire: one request per connection, response framing
//!   (Content-Length, chunked, read-to-close) under a size bound
//! - `gateway`: the gateway's JSON (base64 bytes, int64 as strings)
//! - `endpoint`: endpoint strings as operators write them
//! - `error`: the crate's one error type
//!
//! Tested against etcd 3.4 (`tests/live.rs` runs a real one when `etcd` is
//! on PATH).

pub mod client;
pub mod endpoint;
pub mod error;
mod gateway;
pub mod http;

pub use client::{Client, Compare, Kv, Op, OpResponse, Range, TxnResult};
pub use error::{Error, Result};
pub use http::{HEAD_BYTES_MAX, RESPONSE_BYTES_MAX};
