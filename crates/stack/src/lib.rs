//! tickdb-stack: the market-data test stack of the Optane kdb+ study, shipped as product
//! commands that users run to size their own systems.
//!
//! - `gen`: the seeded market simulator (symbols with skewed activity,
//!   prices near real ones that wander a couple of percent a day, trades
//!   and quotes 1:10); `tickdb feed` and the
//!   built-in `tickdb up --demo-feed` both draw from it
//! - `feed`: `tickdb feed`, the simulator publishing ILP at a paced rate,
//!   with `--prestress`
//! - `bars`: the pure arithmetic of minute bars and daily stats
//! - `agg`: `tickdb agg`, the aggregation engine: subscribes to trade and
//!   quote, publishes `trade_1m`, `quote_1m` and `daily` back through the tp
//! - `monitor`: `tickdb monitor`, polls an rdb for latency, query time and
//!   memory; writes CSV, a JSON summary and SVG plots (`plot`, `csv`)
//! - `http`, `procfs`, `signal`, `clock`: the small pieces they share
//!
//! Nothing here depends on the SQL engine: the monitor talks to an rdb over
//! HTTP like any other client.

pub mod agg;
pub mod bars;
pub mod client_auth;
pub mod clock;
pub mod csv;
pub mod error;
pub mod feed;
pub mod gen;
pub mod http;
pub mod ilp;
pub mod ipc_feed;
pub mod monitor;
pub mod plot;
pub mod procfs;
pub mod signal;
pub mod tp_login;

pub use error::{Result, StackError};
