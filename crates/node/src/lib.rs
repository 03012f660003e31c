//! tickdb-node owns a running node: its roles (`up`, `tp`, `rdb`) wired
//! from their parts, its lifecycle (starting, loading, ready, draining,
//! stopping) that every listener consults, and its HTTP API. The `tickdb`
//! binary is a thin command line over it.
//!
//! - `config`: the flags of every role (clap), and what they turn into
//! - `config_file`: the config file and the `TICKDB_*` environment, under
//!   the flags
//! - `lifecycle`: readiness and drain, one state per node
//! - `node`: the role and the parts (tp, rdb, query engine) once open
//! - `roles`: starting each role and stopping it cleanly
//! - `http`, `http_server`: the HTTP API and its listener's limits
//! - `security`, `http_auth`: users, roles and protected mode; the HTTP
//!   port's authentication and cross-site request refusal
//! - `ddl`: `CREATE TABLE` and `ALTER TABLE ... ADD COLUMN` by an admin,
//!   run by the tp
//! - `query_group`: the query ports as members of `rp,PORT` groups: join
//!   when ready, busy steering, group changes logged
//! - `drain`: graceful drain on SIGTERM or `POST /admin/drain`
//! - `replication`: the replication port every node serves, and a
//!   standby's follower
//! - `eod`, `eod_clock`: end of day (the Parquet history it writes,
//!   its schedule and time zone)
//! - `malloc`: the C allocator's thresholds, set at process start
//! - `embedded_rdb`, `persist`, `demo_feed`: the rdb inside `up`, Hot
//!   Restart wiring, and the built-in simulated feed

pub mod config;
pub mod config_file;
mod ddl;
mod demo_feed;
pub mod drain;
mod embedded_rdb;
pub mod eod;
pub mod eod_clock;
pub mod failover;
pub mod http;
pub mod http_auth;
pub mod http_server;
pub mod ipc;
pub mod leader;
pub mod lifecycle;
pub mod malloc;
pub mod node;
mod persist;
pub mod query_group;
pub mod replication;
pub mod roles;
pub mod security;
