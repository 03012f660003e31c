//! Command-line flags shared by the roles. Every port takes `PORT` or
//! `rp,PORT` (SO_REUSEPORT: several processes share the port) and binds
//! `--bind` (127.0.0.1 unless told otherwise).

use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use tickdb_net::ListenSpec;

/// Shown after each role's flags: what every port flag accepts.
pub const LISTEN_HELP: &str = "Ports: every port flag takes PORT, or rp,PORT to set SO_REUSEPORT \
so that several processes share the port (e.g. several rdbs behind one query port). Without rp, \
a port already in use fails start-up with one line naming it. Listeners bind --bind (127.0.0.1 \
by default). On rdb and up, a shared (rp) query port (HTTP, PostgreSQL, kdb+ IPC) is bound at \
start but listened on only once the node is ready, so a query group's new member never answers \
with partial tables; use --admin-port for a member's own /health and /status while it loads. \
SIGTERM drains (docs/sharding.md). Log level: TICKDB_LOG=debug|info|warn.";

fn listen_spec(s: &str) -> Result<ListenSpec, String> {
    ListenSpec::parse(s).map_err(|e| e.to_string())
}

/// How the journal is made durable before a write is acknowledged.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncArg {
    /// Acknowledge (HTTP 204, WriteAck) only after the fdatasync that covers
    /// the rows (group commit: concurrent writers share one fsync): an
    /// acknowledged row survives a tp crash, an OS crash and power loss.
    Always,
    /// Acknowledge after write(); fdatasync every --fsync-interval-ms. An
    /// acknowledged row survives a tp crash; power loss may lose the last
    /// interval.
    Interval,
    /// Acknowledge after write(); never fdatasync (the OS flushes when it
    /// likes). Survives a tp crash, not an OS crash or power loss.
    Never,
}

#[derive(Args, Debug, Clone)]
pub struct NetArgs {
    /// Address every listener binds. Off loopback, protected mode refuses
    /// to start unless every port asks for credentials that are not the
    /// defaults (--users; see --no-protected-mode).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Users file (TOML): names, roles (read, write, admin), SCRAM-SHA-256
    /// password verifiers, hashed bearer tokens and ILP public keys;
    /// `tickdb user add` prints entries. With it, every port asks for a
    /// user and checks the role: HTTP basic auth or a bearer token (except
    /// /health and /settings), PostgreSQL wire SCRAM-SHA-256 (--pg-auth),
    /// ILP TCP QuestDB's key challenge, kdb+ IPC the handshake's user and
    /// password, the subscription port a Login (tickdb rdb and agg:
    /// --tp-user); --pg-user and --pg-password are then unused. See
    /// docs/security.md.
    #[arg(long, value_name = "FILE")]
    pub users: Option<PathBuf>,
    /// Serve a non-loopback --bind even with ports open to anyone or
    /// default credentials (protected mode refuses that by default, as
    /// Redis does).
    #[arg(long)]
    pub no_protected_mode: bool,
    /// Certificate chain (PEM) for TLS; with --tls-key, every port of the
    /// node but kdb+ IPC speaks only TLS and tells a plaintext client so:
    /// HTTP (https://), PostgreSQL wire (sslmode=require), ILP TCP
    /// (tcps::), the tp subscription port (tickdb rdb and agg:
    /// --tp-tls-ca) and the replication port (standbys: --primary-tls-ca).
    /// See docs/security.md.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct SchemaArgs {
    /// Schema file (TOML, see docs/schema.md). Default: the built-in
    /// trade and quote tables.
    #[arg(long)]
    pub schema: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct TpArgs {
    /// Data directory; the journal lives in DIR/journal.
    #[arg(long, default_value = "./tickdb-data")]
    pub data_dir: PathBuf,
    /// ILP over TCP (InfluxDB line protocol, as QuestDB's 9009).
    #[arg(long, default_value = "8709", value_name = "[rp,]PORT", value_parser = listen_spec)]
    pub ilp_port: ListenSpec,
    /// Subscription port: remote rdbs and the aggregation engine connect here.
    #[arg(long, default_value = "8710", value_name = "[rp,]PORT", value_parser = listen_spec)]
    pub tp_port: ListenSpec,
    /// When a write is acknowledged; see docs/journal.md.
    #[arg(long, value_enum, default_value = "always")]
    pub fsync: FsyncArg,
    /// fdatasync period under --fsync interval.
    #[arg(long, default_value_t = 100)]
    pub fsync_interval_ms: u64,
    /// 0 publishes each update to subscribers as soon as it is journaled
    /// (zero-latency); N>0 publishes in batches every N ms (kdb+ tp timer).
    #[arg(long, default_value_t = 0)]
    pub publish_interval_ms: u64,
    /// Journal segment size bound in bytes; segments also roll at midnight UTC.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub segment_bytes_max: u64,
    /// Longest ILP line accepted, in bytes.
    #[arg(long, default_value_t = tickdb_tp::ingest::LINE_BYTES_MAX)]
    pub line_bytes_max: usize,
    /// Largest HTTP write request body accepted, in bytes.
    #[arg(long, default_value_t = tickdb_tp::ingest::REQUEST_BYTES_MAX)]
    pub request_bytes_max: usize,
    /// Bytes queued for one subscriber (or taken by its writer but not yet
    /// written to its socket) before it is cut off as too slow.
    #[arg(long, default_value_t = tickdb_tp::hub::SUB_QUEUE_BYTES_MAX)]
    pub sub_queue_bytes_max: usize,
    /// Bytes held for all subscribers together: queued updates, updates
    /// being written, and journal records read ahead for catch-ups (an
    /// update shared by many subscribers counts once). Publishing never
    /// waits: an update that does not fit cuts off the subscriber holding
    /// the most; catch-ups wait for room.
    #[arg(long, default_value_t = tickdb_tp::sub_memory::SUB_MEMORY_BYTES_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub sub_memory_bytes_max: usize,
    /// Connections open at once on the subscription port; more are sent
    /// an Error frame and closed.
    #[arg(long, default_value_t = tickdb_tp::sub_server::SUB_CONNECTIONS_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub sub_connections_max: usize,
    /// Seconds a new subscription-port connection has to send its first
    /// message (Subscribe or Write) before it is closed.
    #[arg(long, default_value_t = tickdb_tp::sub_server::SUB_HANDSHAKE_TIMEOUT_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub sub_handshake_timeout_s: u64,
    /// Seconds a publisher (Write frames on the subscription port, e.g.
    /// tickdb agg) may send nothing before it is closed; 0 = never.
    /// Subscribers are never timed out for being quiet.
    #[arg(long, default_value_t = tickdb_tp::sub_server::PUBLISHER_IDLE_TIMEOUT_S)]
    pub publisher_idle_timeout_s: u64,
    /// Seconds an ILP TCP connection may send nothing before it is closed;
    /// 0 = never.
    #[arg(long, default_value_t = tickdb_tp::ilp_tcp::ILP_IDLE_TIMEOUT_S)]
    pub ilp_idle_timeout_s: u64,
    /// Seconds the bytes of an unfinished ILP TCP line have to complete it
    /// before the connection is closed (slowloris clients); 0 = never.
    #[arg(long, default_value_t = tickdb_tp::ilp_tcp::ILP_PARTIAL_LINE_TIMEOUT_S)]
    pub ilp_partial_line_timeout_s: u64,
    /// ILP TCP connections open at once; more are closed at once (ILP TCP
    /// has no replies) with a log line.
    #[arg(long, default_value_t = tickdb_tp::ilp_tcp::TCP_CONNECTIONS_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub ilp_connections_max: usize,
    /// Create the tables and columns an ILP line names that the schema
    /// lacks, as QuestDB and InfluxDB do, instead of refusing the line:
    /// tags become symbol columns, `1.5` f64, `1i` i64, `"s"` string, `t`
    /// bool, `1t`/`1n` timestamp; a new table's designated timestamp is
    /// `timestamp`. Each change is journaled like ALTER TABLE (docs/ilp.md).
    #[arg(long)]
    pub ilp_auto_create: bool,
    /// Start even if the journal has corruption followed by valid records,
    /// a missing segment or a sequence gap: keep the longest consistent
    /// prefix and report what was dropped (moved aside, not deleted).
    #[arg(long)]
    pub recover_point_in_time: bool,
    #[command(flatten)]
    pub repl: ReplArgs,
}

/// How records are shipped to standbys.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationArg {
    /// Each record is shipped as soon as it is journaled; a write is
    /// acknowledged without waiting for the standbys (a primary lost with
    /// its disk may lose what they had not received: the lag in /status).
    Async,
    /// Records are shipped every --forward-interval-s (the log-forwarding
    /// helper of Zero-Impact Crash Recovery for kdb+ ships every 10 s).
    Interval,
    /// A write is acknowledged only once --sync-standbys standbys have it
    /// fsynced (RPO 0, as PostgreSQL's synchronous_commit = on).
    SemiSync,
}

#[derive(Args, Debug, Clone)]
pub struct ReplArgs {
    /// Replication: standbys connect here to follow this node's journal
    /// (every node serves it, a standby too: chained standbys).
    #[arg(long, default_value = "8711", value_name = "[rp,]PORT", value_parser = listen_spec)]
    pub repl_port: ListenSpec,
    /// Run as a standby of the primary whose --repl-port is HOST:PORT: its
    /// journal is appended to this node's, byte for byte; this node refuses
    /// writes (naming the primary) and answers queries from what it has.
    /// The schema comes from the primary (--schema is not allowed). Several
    /// addresses (HOST:PORT,HOST:PORT) name the nodes of a failover group:
    /// the standby follows the one that is the primary. With --etcd, etcd
    /// says who the primary is and this flag is not needed.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    pub standby_of: Option<String>,
    /// Connect to the primary's replication port with TLS, trusting the CA
    /// certificates (PEM) in FILE: needed when the primary has --tls-cert,
    /// whose certificate must be signed by one of them and name the host
    /// the standby dials (of --standby-of, or of etcd's leader record: an
    /// IP address or a DNS name). There is no default trust store: without
    /// this flag a standby connects in plaintext. In a failover group give
    /// every node --tls-cert, --tls-key and this flag, since any of them
    /// may come to follow another; a primary handing its role over in a
    /// switchover also calls the standby's HTTP API over TLS with it.
    #[arg(long, value_name = "FILE")]
    pub primary_tls_ca: Option<PathBuf>,
    /// How this node ships records to its standbys.
    #[arg(long, value_enum, default_value = "async")]
    pub replication: ReplicationArg,
    /// The shipping period under --replication interval.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub forward_interval_s: u64,
    /// Under --replication semi-sync: standbys that must hold a write
    /// durably (fsynced) before it is acknowledged.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub sync_standbys: usize,
    /// Under --replication semi-sync: how long a write waits for
    /// --sync-standbys standbys before it is refused (journaled here, shipped
    /// later, but not acknowledged: the client gets an error saying so).
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub sync_timeout_ms: u64,
    /// Under --replication semi-sync: after --sync-timeout-ms, acknowledge
    /// without the standbys (async) until they catch up, instead of
    /// refusing writes. Logged, and shown in /status and /metrics while it
    /// lasts.
    #[arg(long)]
    pub sync_degrade: bool,
    /// File holding the replication secret shared by a primary and its
    /// standbys (else $TICKDB_REPL_SECRET, else DATA_DIR/repl-secret,
    /// generated at first start: copy it to the standbys).
    #[arg(long, value_name = "PATH")]
    pub repl_secret_file: Option<PathBuf>,
    /// This node's name in replication status (default: its advertised
    /// host and replication port).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// The host other nodes and clients reach this node at (its standby's
    /// primary address, a switchover's target, etcd's leader record).
    /// Default: --bind, or 127.0.0.1 when --bind is 0.0.0.0.
    #[arg(long, value_name = "HOST")]
    pub advertise: Option<String>,
    /// Automatic failover: the etcd cluster (its client URLs, e.g.
    /// http://10.0.0.9:2379,http://10.0.0.10:2379). The node holding the
    /// leader key, under a lease, is the primary; the others follow it, and
    /// when the lease expires the standby with the highest (epoch,
    /// sequence) takes over. Without etcd there is no automatic failover
    /// (two nodes cannot tell a dead peer from a cut link): use `tickdb
    /// promote`. See docs/failover.md.
    #[arg(long, value_name = "URL[,URL...]")]
    pub etcd: Option<String>,
    /// The name of this failover group in etcd (its keys live under
    /// /tickdb/NAME/). Every node of the group gives the same one.
    #[arg(long, default_value = "tickdb", value_name = "NAME")]
    pub cluster: String,
    /// The leader lease's time to live (etcd counts it in whole seconds
    /// and may raise it to its own minimum). A dead primary is replaced
    /// about this long after it stopped renewing.
    #[arg(long, default_value_t = 2, value_name = "SECONDS")]
    pub lease_ttl_s: u64,
    /// The primary stops acknowledging writes this long before its lease
    /// could expire, if it has not renewed it (self-fencing on a monotonic
    /// clock; the margin covers clock drift and the time a renewal takes).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub fence_margin_ms: u64,
    /// How often every node looks at the leader key (and renews its lease
    /// a few times per TTL): with the TTL, the detection time.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub failover_check_ms: u64,
}

impl ReplArgs {
    pub fn mode(&self) -> tickdb_replication::protocol::Mode {
        match self.replication {
            ReplicationArg::Async => tickdb_replication::protocol::Mode::Async,
            ReplicationArg::Interval => tickdb_replication::protocol::Mode::Interval,
            ReplicationArg::SemiSync => tickdb_replication::protocol::Mode::SemiSync,
        }
    }

    pub fn sync_policy(&self) -> Option<tickdb_tp::sync_gate::SyncPolicy> {
        (self.replication == ReplicationArg::SemiSync).then(|| tickdb_tp::sync_gate::SyncPolicy {
            standbys: self.sync_standbys.max(1),
            timeout: std::time::Duration::from_millis(self.sync_timeout_ms.max(1)),
            degrade: self.sync_degrade,
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct MemArgs {
    /// Directory for file-backed memory (a DAX/PMEM mount in production).
    /// Needed when any column is placed in fsmem.
    #[arg(long)]
    pub fsmem_dir: Option<PathBuf>,
    /// Place a table or one column in fsmem, like kdb+'s `.m` namespace:
    /// `--fsmem quote` or `--fsmem quote.bsize`. Repeatable.
    #[arg(long)]
    pub fsmem: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct QueryArgs {
    /// A query running longer than this is stopped with an error (waiting
    /// for a turn counts). A PostgreSQL session's statement_timeout may
    /// make it shorter, never longer.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub query_timeout_ms: u64,
    /// Memory queries may use, in bytes: what running queries hold for
    /// sorts, joins and aggregates together, and the most one function
    /// call (repeat, lpad, ||, ...) may build. Over it a query fails with
    /// "out of memory"; nothing spills to disk.
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES")]
    pub query_memory_bytes: usize,
    /// Threads that run queries, apart from ingest and at the lowest
    /// scheduling priority (SCHED_IDLE): ingest always gets the CPU first.
    /// Default: one per core.
    #[arg(long, value_name = "N")]
    pub query_threads: Option<usize>,
    /// Queries that run at once; more wait for a turn.
    #[arg(long, default_value_t = tickdb_query::pool::QUERY_CONCURRENCY_DEFAULT, value_name = "N")]
    pub query_concurrency: usize,
    /// Queries that may wait for a turn; beyond that a query is refused at
    /// once as busy (HTTP 503, SQLSTATE 53000).
    #[arg(long, default_value_t = tickdb_query::pool::QUERY_QUEUE_MAX_DEFAULT, value_name = "N")]
    pub query_queue_max: usize,
    /// How long a query arriving while the node loads (journal replay,
    /// Hot Restart reload, catch-up) waits for it before it is refused as
    /// not ready (HTTP 503, SQLSTATE 57P03). 0 refuses at once.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub query_ready_wait_ms: u64,
}

impl QueryArgs {
    pub fn options(&self) -> tickdb_query::QueryOptions {
        let d = tickdb_query::QueryOptions::default();
        tickdb_query::QueryOptions {
            timeout: std::time::Duration::from_millis(self.query_timeout_ms),
            memory_limit_bytes: self.query_memory_bytes,
            threads: self.query_threads.unwrap_or(d.threads).max(1),
            concurrency: self.query_concurrency.max(1),
            queue_max: self.query_queue_max,
            ready_wait: std::time::Duration::from_millis(self.query_ready_wait_ms),
            ..d
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// HTTP connections served at once; more get 503 and are closed.
    #[arg(long, default_value_t = crate::http_server::HTTP_CONNECTIONS_MAX_DEFAULT, value_name = "N")]
    pub http_connections_max: usize,
    /// Seconds a client has to send a request's head; also how long an
    /// idle keep-alive connection is kept open.
    #[arg(long, default_value_t = crate::http_server::HTTP_HEADER_TIMEOUT_S_DEFAULT, value_name = "SECONDS")]
    pub http_header_timeout_s: u64,
    /// Seconds a client has to send a request's body (408 after).
    #[arg(long, default_value_t = crate::http_server::HTTP_BODY_TIMEOUT_S_DEFAULT, value_name = "SECONDS")]
    pub http_body_timeout_s: u64,
}

impl HttpArgs {
    pub fn limits(&self) -> crate::http_server::HttpLimits {
        crate::http_server::HttpLimits {
            connections_max: self.http_connections_max.max(1),
            header_timeout: std::time::Duration::from_secs(self.http_header_timeout_s.max(1)),
            body_timeout: std::time::Duration::from_secs(self.http_body_timeout_s.max(1)),
        }
    }
}

/// `--pg-auth`: how PostgreSQL clients log in with a users file.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgAuthArg {
    /// SCRAM-SHA-256 for every user (PostgreSQL's scram-sha-256).
    Scram,
    /// MD5 for users whose entry has a pg_md5, SCRAM-SHA-256 for the rest
    /// (PostgreSQL's md5): for clients too old for SCRAM.
    Md5,
}

#[derive(Args, Debug, Clone)]
pub struct PgArgs {
    /// Without --users: the one user PostgreSQL clients log in as (MD5
    /// password authentication). With --users, the users file's users log
    /// in instead.
    #[arg(long, default_value = tickdb_query::pg::PG_USER_DEFAULT)]
    pub pg_user: String,
    /// Password of --pg-user (without --users). Prefer the environment
    /// variable, which keeps it out of `ps`.
    #[arg(
        long,
        env = "TICKDB_PG_PASSWORD",
        hide_env_values = true,
        default_value = tickdb_query::pg::PG_PASSWORD_DEFAULT
    )]
    pub pg_password: String,
    /// Accept PostgreSQL clients with no password at all (trust), even with
    /// --users. Off unless given; meant for loopback-only test setups.
    #[arg(long)]
    pub pg_no_auth: bool,
    /// With --users: `scram` (default) asks every user for SCRAM-SHA-256;
    /// `md5` asks users whose entry has a pg_md5 (`tickdb user add --md5`)
    /// for an MD5 password instead, for clients too old for SCRAM, and
    /// everyone else for SCRAM. Either way a user needs the read role.
    /// Without --users it changes nothing.
    #[arg(long, value_enum, default_value = "scram", value_name = "METHOD")]
    pub pg_auth: PgAuthArg,
    /// PostgreSQL connections served at once; more are refused (SQLSTATE
    /// 53300, "too many clients").
    #[arg(long, default_value_t = tickdb_query::pg::PG_CONNECTIONS_MAX_DEFAULT, value_name = "N")]
    pub pg_connections_max: usize,
    /// Seconds a new PostgreSQL connection has to authenticate.
    #[arg(long, default_value_t = tickdb_query::pg::PG_STARTUP_TIMEOUT_S_DEFAULT, value_name = "SECONDS")]
    pub pg_startup_timeout_s: u64,
    /// Seconds a PostgreSQL session may sit idle between statements before
    /// it is ended (FATAL 57P05, as PostgreSQL's idle_session_timeout). 0
    /// keeps idle sessions forever.
    #[arg(long, default_value_t = tickdb_query::pg::PG_IDLE_TIMEOUT_S_DEFAULT, value_name = "SECONDS")]
    pub pg_idle_timeout_s: u64,
    /// Largest PostgreSQL protocol message accepted, in bytes; a larger one
    /// ends the connection (SQLSTATE 54000) before it is buffered.
    #[arg(long, default_value_t = tickdb_query::pg::PG_MESSAGE_BYTES_MAX_DEFAULT, value_name = "BYTES")]
    pub pg_message_bytes_max: usize,
}

impl PgArgs {
    /// The port's options; `security` gives the users file, if any.
    pub fn options(&self, security: &crate::security::Security) -> tickdb_query::pg::PgOptions {
        let mut o = tickdb_query::pg::PgOptions::new(self.auth(security));
        o.limits.tls = security.tls().cloned();
        o.connections_max = self.pg_connections_max.max(1);
        o.limits.startup_timeout = std::time::Duration::from_secs(self.pg_startup_timeout_s.max(1));
        o.limits.idle_timeout = std::time::Duration::from_secs(self.pg_idle_timeout_s);
        // Below a few KB not even psql's catalog queries fit.
        o.limits.message_bytes_max = self.pg_message_bytes_max.max(64 * 1024);
        o
    }

    pub fn auth(&self, security: &crate::security::Security) -> tickdb_query::pg::PgAuth {
        if self.pg_no_auth {
            tickdb_query::pg::PgAuth::Trust
        } else if let Some(users) = security.users() {
            tickdb_query::pg::PgAuth::Users(tickdb_query::pg::PgUsers {
                users: users.clone(),
                limiter: security.limiter().clone(),
                method: match self.pg_auth {
                    PgAuthArg::Scram => tickdb_query::pg::PgAuthMethod::Scram,
                    PgAuthArg::Md5 => tickdb_query::pg::PgAuthMethod::Md5,
                },
            })
        } else {
            tickdb_query::pg::PgAuth::Password {
                user: self.pg_user.clone(),
                password: self.pg_password.clone(),
            }
        }
    }

    /// For the start-up line: how clients log in (never the password).
    pub fn describe(&self, users: bool) -> String {
        if self.pg_no_auth {
            "no authentication".to_string()
        } else if users {
            match self.pg_auth {
                PgAuthArg::Scram => "users file, SCRAM-SHA-256".to_string(),
                PgAuthArg::Md5 => "users file, SCRAM-SHA-256 (MD5 for pg_md5 entries)".to_string(),
            }
        } else {
            format!("user {}, md5 password", self.pg_user)
        }
    }
}

/// A query node's place in its query groups (the KX socket sharding
/// whitepaper): its own admin port, drain, and busy steering.
#[derive(Args, Debug, Clone)]
pub struct GroupArgs {
    /// This member's own HTTP port, never shared: every HTTP endpoint
    /// (/health, /status, /exec, POST /admin/drain), answering at once,
    /// also while the node loads and its shared ports are not yet
    /// listening. How an operator reaches one member of a query group.
    #[arg(long, value_name = "PORT")]
    pub admin_port: Option<u16>,
    /// On SIGTERM or POST /admin/drain the node stops accepting
    /// connections, closes idle ones (HTTP keep-alive, PostgreSQL sessions
    /// with FATAL 57P01, kdb+ IPC handles) and waits this long for requests
    /// in flight before it stops anyway, logging what was still running.
    #[arg(long, default_value_t = crate::drain::DRAIN_TIMEOUT_S_DEFAULT, value_name = "SECONDS")]
    pub drain_timeout_s: u64,
    /// Busy steering: with this many queries running plus waiting, the
    /// member closes its shared (rp) listeners so the kernel sends new
    /// connections to the other members, and reopens them when it has
    /// capacity again. 0: --query-concurrency. Needs
    /// net.ipv4.tcp_migrate_req=1 (queued connections then move to the
    /// other members rather than being reset); a member never leaves when
    /// it is the port's last listener.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub busy_queries_max: usize,
    /// Busy steering: a query running longer than this also makes the
    /// member leave its query groups until it ends. 0: only
    /// --busy-queries-max counts.
    #[arg(long, default_value_t = BUSY_QUERY_MS_DEFAULT, value_name = "MS")]
    pub busy_query_ms: u64,
    /// Turn busy steering off: the kernel keeps handing new connections to
    /// this member however busy it is (plain SO_REUSEPORT, as kdb+ does).
    #[arg(long)]
    pub no_busy_steering: bool,
}

/// `--busy-query-ms` by default.
pub const BUSY_QUERY_MS_DEFAULT: u64 = 2000;

impl GroupArgs {
    pub fn steering(&self, q: &QueryArgs) -> crate::query_group::Steering {
        crate::query_group::Steering {
            enabled: !self.no_busy_steering,
            queries_max: if self.busy_queries_max == 0 {
                q.query_concurrency.max(1)
            } else {
                self.busy_queries_max
            },
            query_ms: self.busy_query_ms,
        }
    }

    pub fn drain_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.drain_timeout_s)
    }
}

#[derive(Args, Debug, Clone)]
pub struct IpcArgs {
    /// kdb+ IPC (as a q process's -p): feed handlers call .u.upd, rdbs and
    /// CEP engines .u.sub, quants query with hopen (docs/ipc.md). Off unless
    /// given.
    #[arg(long, value_name = "[rp,]PORT", value_parser = listen_spec)]
    pub ipc_port: Option<ListenSpec>,
    /// Accept kdb+ IPC clients with any user and password, even with
    /// --users. Off unless given: with --users, clients log in as a user of
    /// the file (queries and .u.sub need the read role, .u.upd and insert
    /// the write role); without, as the PostgreSQL wire user and password
    /// (--pg-user, TICKDB_PG_PASSWORD; on a tp, which has no PostgreSQL
    /// port, the user tickdb and TICKDB_PG_PASSWORD, default tickdb).
    #[arg(long)]
    pub ipc_no_auth: bool,
    /// Largest kdb+ IPC message accepted, in bytes, on the wire and once
    /// decompressed; a larger one gets an error and the connection is closed.
    #[arg(long, default_value_t = 64 * 1024 * 1024, value_name = "BYTES")]
    pub ipc_message_bytes_max: usize,
    /// Deepest nesting of lists, dictionaries and tables in one message.
    #[arg(long, default_value_t = tickdb_ipc::DEPTH_MAX, value_name = "N")]
    pub ipc_depth_max: usize,
    /// kdb+ IPC connections open at once; more are closed at once.
    #[arg(long, default_value_t = crate::ipc::IPC_CONNECTIONS_MAX_DEFAULT, value_name = "N")]
    pub ipc_connections_max: usize,
}

impl IpcArgs {
    /// The listener's options; `security` gives the users file, if any,
    /// and without one `pg` the user and password.
    pub fn options(
        &self,
        pg: Option<&PgArgs>,
        security: &crate::security::Security,
    ) -> crate::ipc::IpcOptions {
        let auth = match (self.ipc_no_auth, pg) {
            (true, _) => crate::ipc::IpcAuth::Anonymous,
            (false, _) if security.users().is_some() => crate::ipc::IpcAuth::Users,
            (false, Some(pg)) => crate::ipc::IpcAuth::Password {
                user: pg.pg_user.clone(),
                password: pg.pg_password.clone(),
            },
            (false, None) => crate::ipc::IpcAuth::Password {
                user: tickdb_query::pg::PG_USER_DEFAULT.to_string(),
                password: std::env::var("TICKDB_PG_PASSWORD")
                    .unwrap_or_else(|_| tickdb_query::pg::PG_PASSWORD_DEFAULT.to_string()),
            },
        };
        crate::ipc::IpcOptions {
            auth,
            limits: tickdb_ipc::Limits {
                // A tick update needs a few KB at least.
                message_bytes_max: self.ipc_message_bytes_max.max(64 * 1024),
                depth_max: self.ipc_depth_max.max(4),
            },
            connections_max: self.ipc_connections_max.max(1),
        }
    }

    /// For the start-up line.
    pub fn describe(&self, users: bool) -> String {
        match &self.ipc_port {
            None => "off".into(),
            Some(p) if self.ipc_no_auth => format!("{p} (no authentication)"),
            Some(p) if users => format!("{p} (users file)"),
            Some(p) => format!("{p}"),
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct HotArgs {
    /// Persist the rdb's tables in a Hot Restart store in DIR (log-structured
    /// chunk files; append tables as chunk images in Arrow's layout, see
    /// docs/hot-restart.md). A restart maps DIR's files, serves the restored
    /// chunks from them without re-appending a row, and replays only the
    /// journal after the last checkpoint. DIR must
    /// belong to this rdb alone; it remembers the schema, the subscription
    /// and the journal position, and a mismatch refuses to start.
    #[arg(long, value_name = "DIR")]
    pub hot_restart: Option<PathBuf>,
    /// Seconds between checkpoints (a consistent cut made durable in the
    /// store). Also on `POST /checkpoint` and at shutdown.
    #[arg(long, default_value_t = tickdb_rdb::hot::CHECKPOINT_INTERVAL_S_DEFAULT, value_name = "SECONDS")]
    pub checkpoint_interval_s: u64,
    /// Threads reloading the store at start: N read (map) whole chunk files
    /// while N others check and decode the files read; also the threads
    /// checking the restored chunk images.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub hot_restart_parallelism: usize,
}

impl HotArgs {
    pub fn options(&self) -> Option<tickdb_rdb::hot::HotOptions> {
        let dir = self.hot_restart.as_ref()?;
        let mut o = tickdb_rdb::hot::HotOptions::new(dir);
        o.parallelism = self.hot_restart_parallelism.clamp(1, 64);
        o.progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Some(o)
    }
}

#[derive(Args, Debug, Clone)]
pub struct EodArgs {
    /// End the trading day every day at this local time (HH:MM, in
    /// --eod-tz): the tp journals an end-of-day marker (kdb+'s `.u.end`),
    /// rolls its journal and tells every subscriber; rdbs with --hdb write
    /// the day to Parquet. The day closed is the local date just before
    /// this time, so 00:00 closes the day that ended. Default: only on
    /// command (`tickdb eod`, POST /admin/eod).
    #[arg(long, value_name = "HH:MM")]
    pub eod_time: Option<String>,
    /// The time zone of --eod-time and of the dates in the historical
    /// database (an IANA name: UTC, America/New_York, Europe/London).
    #[arg(long, default_value = "UTC", value_name = "ZONE")]
    pub eod_tz: String,
}

impl EodArgs {
    pub fn clock(&self) -> Result<crate::eod_clock::EodClock, String> {
        crate::eod_clock::EodClock::new(&self.eod_tz, self.eod_time.as_deref())
    }
}

#[derive(Args, Debug, Clone)]
pub struct HdbArgs {
    /// The historical database (docs/history.md): at end of day the rdb
    /// writes the day here as date-partitioned Parquet
    /// (DIR/<table>/date=YYYY-MM-DD/part-NNNNN.parquet) and drops it from
    /// memory; SQL then spans today and every date here, with a derived
    /// `date` column. Without it an end of day leaves the day in memory.
    #[arg(long, value_name = "DIR")]
    pub hdb: Option<PathBuf>,
    /// Keep the journal after end of day. By default, with --hot-restart,
    /// the journal up to the end-of-day marker is removed once the day is
    /// committed to the HDB and a checkpoint covers it.
    #[arg(long)]
    pub eod_keep_journal: bool,
}
