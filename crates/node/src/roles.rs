//! Starting each role: bind every listener first (so a port conflict fails
//! start-up at once with one clear line), open the journal, start the
//! servers, and stop cleanly on SIGINT/SIGTERM (final journal sync).

use crate::config::{
    EodArgs, FsyncArg, GroupArgs, HdbArgs, HotArgs, HttpArgs, IpcArgs, MemArgs, NetArgs, PgArgs,
    QueryArgs, SchemaArgs, TpArgs,
};
use crate::http::{self, AppState};
use crate::node::{Node, Role};
use crate::query_group::QueryPorts;
use clap::Args;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tickdb_core::domain::{Domain, Domains};
use tickdb_core::store::Store;
use tickdb_core::Schema;
use tickdb_journal::{FsyncPolicy, RecoveryMode};
use tickdb_net::acceptor::Acceptor;
use tickdb_net::ListenSpec;
use tickdb_query::QueryEngine;
use tickdb_rdb::remote::{self, Interest};
use tickdb_tp::{Tickerplant, TpConfig};
use tokio::net::TcpListener;

#[derive(Args, Debug)]
#[command(after_help = crate::config::LISTEN_HELP)]
pub struct UpArgs {
    #[command(flatten)]
    pub net: NetArgs,
    /// HTTP: /write (ILP), /exec (SQL), /status, /metrics, /health.
    #[arg(long, default_value = "8700", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub http_port: ListenSpec,
    #[command(flatten)]
    pub http: HttpArgs,
    /// PostgreSQL wire protocol (psql, psycopg, JDBC): SQL like /exec.
    #[arg(long, default_value = "8712", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub pg_port: ListenSpec,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub ipc: IpcArgs,
    #[command(flatten)]
    pub group: GroupArgs,
    #[command(flatten)]
    pub tp: TpArgs,
    #[command(flatten)]
    pub schema: SchemaArgs,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub query: QueryArgs,
    #[command(flatten)]
    pub hot: HotArgs,
    #[command(flatten)]
    pub eod: EodArgs,
    #[command(flatten)]
    pub hdb: HdbArgs,
    /// With --hot-restart: after each durable checkpoint, remove the journal
    /// segments whose records it covers (POST /journal/trim does it on
    /// command). Subscribers that need those records (a remote rdb replaying
    /// from the start, a late aggregation engine) can then no longer get them.
    #[arg(long)]
    pub trim_journal: bool,
    /// Run a built-in simulated feed at RATE updates/s (trades and quotes
    /// 1:10 at made-up prices near real ones: SPY about $450, AAPL about
    /// $190), so data flows at once.
    #[arg(long, value_name = "RATE")]
    pub demo_feed: Option<u64>,
}

/// The ports of a query node, from its flags.
macro_rules! query_flags {
    ($t:ty) => {
        impl $t {
            fn query_flags(&self) -> QueryFlags<'_> {
                QueryFlags {
                    http_port: &self.http_port,
                    http: &self.http,
                    pg_port: &self.pg_port,
                    ipc: &self.ipc,
                    group: &self.group,
                    query: &self.query,
                }
            }
        }
    };
}
query_flags!(UpArgs);
query_flags!(RdbArgs);
query_flags!(HdbServeArgs);

#[derive(Args, Debug)]
#[command(after_help = crate::config::LISTEN_HELP)]
pub struct TpOnlyArgs {
    #[command(flatten)]
    pub net: NetArgs,
    /// HTTP: /write (ILP), /settings, /status, /metrics, /health.
    #[arg(long, default_value = "8700", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub http_port: ListenSpec,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub ipc: IpcArgs,
    #[command(flatten)]
    pub tp: TpArgs,
    #[command(flatten)]
    pub schema: SchemaArgs,
    #[command(flatten)]
    pub eod: EodArgs,
}

#[derive(Args, Debug)]
#[command(after_help = crate::config::LISTEN_HELP)]
pub struct RdbArgs {
    /// The tp's subscription address (its --tp-port), or several (the nodes
    /// of a failover group): the rdb subscribes at the primary among them
    /// (a standby when none is), resumes on the new primary after a
    /// failover by (epoch, sequence), and stops with the reason when that
    /// primary never had its last records (docs/failover.md).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    pub tp: String,
    #[command(flatten)]
    pub net: NetArgs,
    /// HTTP: /exec (SQL), /status, /metrics, /health. Use rp,PORT to let
    /// several rdbs share one query port.
    #[arg(long, default_value = "8701", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub http_port: ListenSpec,
    #[command(flatten)]
    pub http: HttpArgs,
    /// PostgreSQL wire protocol (psql, psycopg, JDBC): SQL like /exec.
    #[arg(long, default_value = "8713", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub pg_port: ListenSpec,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub ipc: IpcArgs,
    #[command(flatten)]
    pub group: GroupArgs,
    #[command(flatten)]
    pub login: tickdb_stack::tp_login::TpLoginArgs,
    /// Subscribe to these tables only (repeatable; default all).
    #[arg(long = "table")]
    pub tables: Vec<String>,
    /// Subscribe to these symbols only (repeatable; default all).
    #[arg(long = "symbol")]
    pub symbols: Vec<String>,
    #[command(flatten)]
    pub mem: MemArgs,
    #[command(flatten)]
    pub query: QueryArgs,
    #[command(flatten)]
    pub hot: HotArgs,
    #[command(flatten)]
    pub eod: EodArgs,
    #[command(flatten)]
    pub hdb: HdbArgs,
}

/// `tickdb hdb serve`: a historical database served alone, with no tp
/// (a kdb+ HDB process).
#[derive(Args, Debug)]
#[command(after_help = crate::config::LISTEN_HELP)]
pub struct HdbServeArgs {
    /// The historical database directory (DIR/<table>/date=YYYY-MM-DD/).
    pub dir: std::path::PathBuf,
    #[command(flatten)]
    pub net: NetArgs,
    /// HTTP: /exec (SQL), /status, /metrics, /health.
    #[arg(long, default_value = "8702", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub http_port: ListenSpec,
    #[command(flatten)]
    pub http: HttpArgs,
    /// PostgreSQL wire protocol (psql, psycopg, JDBC): SQL like /exec.
    #[arg(long, default_value = "8714", value_name = "[rp,]PORT", value_parser = |s: &str| ListenSpec::parse(s).map_err(|e| e.to_string()))]
    pub pg_port: ListenSpec,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub ipc: IpcArgs,
    #[command(flatten)]
    pub group: GroupArgs,
    #[command(flatten)]
    pub schema: SchemaArgs,
    #[command(flatten)]
    pub query: QueryArgs,
    /// The time zone of the dates in the HDB (an IANA name).
    #[arg(long, default_value = "UTC", value_name = "ZONE")]
    pub eod_tz: String,
}

async fn bind(ip: IpAddr, spec: &ListenSpec, what: &str) -> Result<TcpListener, String> {
    let std_listener = tickdb_net::bind_tcp(ip, spec, what).map_err(|e| e.to_string())?;
    TcpListener::from_std(std_listener).map_err(|e| format!("{what} listener: {e}"))
}

fn load_schema(args: &SchemaArgs) -> Result<(Schema, String), String> {
    match &args.schema {
        // Regular files only, a bounded read, errors that never quote the
        // file (see tickdb_core::schema::Schema::load).
        Some(p) => Schema::load(p).map_err(|e| e.to_string()),
        None => Ok((
            Schema::default_schema(),
            tickdb_core::schema::DEFAULT_SCHEMA_TOML.to_string(),
        )),
    }
}

/// Where the schema came from, for the tp's messages (the journal's schema
/// history names it when it refuses a schema).
fn schema_origin(args: &SchemaArgs) -> String {
    match &args.schema {
        Some(p) => p.display().to_string(),
        None => "the built-in schema".to_string(),
    }
}

fn tp_config(
    a: &TpArgs,
    schema: Arc<Schema>,
    schema_toml: String,
    schema_origin: String,
) -> TpConfig {
    TpConfig {
        journal_dir: a.data_dir.join("journal"),
        schema,
        schema_toml,
        schema_origin,
        fsync: match a.fsync {
            FsyncArg::Always => FsyncPolicy::Always,
            FsyncArg::Interval => FsyncPolicy::IntervalMs(a.fsync_interval_ms.max(1)),
            FsyncArg::Never => FsyncPolicy::Never,
        },
        recovery: if a.recover_point_in_time {
            RecoveryMode::PointInTime
        } else {
            RecoveryMode::Strict
        },
        segment_bytes_max: a.segment_bytes_max,
        publish_interval_ms: a.publish_interval_ms,
        line_bytes_max: a.line_bytes_max,
        request_bytes_max: a.request_bytes_max,
        sub_queue_bytes_max: a.sub_queue_bytes_max,
        sub_memory_bytes_max: a.sub_memory_bytes_max,
        sub_connections_max: a.sub_connections_max,
        sub_handshake_timeout_s: a.sub_handshake_timeout_s,
        publisher_idle_timeout_s: a.publisher_idle_timeout_s,
        ilp_idle_timeout_s: a.ilp_idle_timeout_s,
        ilp_partial_line_timeout_s: a.ilp_partial_line_timeout_s,
        ilp_connections_max: a.ilp_connections_max,
        ilp_auto_create: a.ilp_auto_create,
        standby_of: crate::replication::standby_of(&a.repl),
        sync: a.repl.sync_policy(),
        first_seq: None,
        start_fenced: None,
    }
}

/// A standby takes its schema from its primary: `--schema` would be a
/// second truth.
fn standby_flags_fit(tp: &TpArgs, schema: &SchemaArgs) -> Result<(), String> {
    if tp.repl.standby_of.is_some() && schema.schema.is_some() {
        return Err("--schema cannot be given with --standby-of: a standby adopts its primary's schema (it is shipped with the journal)".into());
    }
    Ok(())
}

/// Before the journal opens: the data directory checked, the replication
/// secret, and on a standby the meeting with its primary (which may reseed
/// it when `hot` is given, i.e. the node holds tables) and its schema.
async fn prepare_replication(
    tp: &TpArgs,
    advertised: &crate::failover::Advertised,
    node: &Node,
    hot: Option<&Path>,
    (schema, toml): (Schema, String),
) -> Result<(crate::replication::Prepared, Schema, String), String> {
    check_data_dir(&tp.data_dir)?;
    let prepared = crate::replication::prepare(
        &tp.repl,
        &tp.data_dir,
        advertised,
        &node.life,
        hot.is_some() || node.role == Role::Up,
        hot,
    )
    .await?;
    let (schema, toml) = standby_schema(&prepared, schema, toml)?;
    Ok((prepared, schema, toml))
}

/// The schema a node runs with: a standby's is its primary's.
fn standby_schema(
    prepared: &crate::replication::Prepared,
    schema: Schema,
    toml: String,
) -> Result<(Schema, String), String> {
    match &prepared.standby {
        Some((text, _)) => {
            let s = Schema::parse(text, "the primary's schema").map_err(|e| e.to_string())?;
            Ok((s, text.clone()))
        }
        None => Ok((schema, toml)),
    }
}

/// Where other nodes reach this one: --advertise, else --bind (loopback
/// when --bind is the wildcard address).
fn advertised(net: &NetArgs, tp: &TpArgs, http_port: u16) -> crate::failover::Advertised {
    let host = tp.repl.advertise.clone().unwrap_or_else(|| {
        if net.bind.is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            net.bind.to_string()
        }
    });
    let at = |port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    crate::failover::Advertised {
        http: at(http_port),
        repl: at(tp.repl.repl_port.port),
        ilp: at(tp.ilp_port.port),
        sub: at(tp.tp_port.port),
    }
}

/// For the start-up line.
fn describe_replication(tp: &TpArgs) -> String {
    match &crate::replication::standby_of(&tp.repl) {
        Some(p) => format!("standby of {p}"),
        None => format!("primary, {} shipping", tp.repl.mode().name()),
    }
}

/// Checks the data directory is usable before anything else happens there.
fn check_data_dir(dir: &Path) -> Result<(), String> {
    let journal = dir.join("journal");
    std::fs::create_dir_all(&journal)
        .map_err(|e| format!("journal directory {} is not usable: {e}", journal.display()))?;
    let probe = journal.join(".write-probe");
    std::fs::write(&probe, b"probe").map_err(|e| {
        format!(
            "journal directory {} is not writable: {e}",
            journal.display()
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// How a node's tp opens: where its journal starts (a reseed), whom it
/// follows, and whether it opens fenced (elected, its epoch not begun).
struct OpenAs {
    first_seq: Option<u64>,
    standby_of: Option<String>,
    start_fenced: Option<String>,
}

impl OpenAs {
    fn of(prepared: &crate::replication::Prepared) -> OpenAs {
        OpenAs {
            first_seq: prepared.reseeded.as_ref().map(|r| r.journal_from),
            standby_of: prepared.standby_of.clone(),
            start_fenced: prepared
                .elected
                .map(|e| format!("elected primary by etcd; beginning epoch {e}")),
        }
    }
}

fn open_tp(
    a: &TpArgs,
    schema: Arc<Schema>,
    schema_toml: String,
    schema_origin: String,
    open_as: OpenAs,
) -> Result<Arc<Tickerplant>, String> {
    check_data_dir(&a.data_dir)?;
    let mut cfg = tp_config(a, schema, schema_toml, schema_origin);
    cfg.first_seq = open_as.first_seq;
    cfg.standby_of = open_as.standby_of;
    cfg.start_fenced = open_as.start_fenced;
    let (tp, report) = Tickerplant::open(cfg).map_err(|e| e.to_string())?;
    tracing::info!("journal {}: {report}", a.data_dir.join("journal").display());
    Ok(tp)
}

pub(crate) fn make_store(schema: &Schema, mem: &MemArgs) -> Result<Arc<Store>, String> {
    let mut schema = schema.clone();
    schema
        .place(&mem.fsmem, Domain::Fsmem)
        .map_err(|e| format!("--fsmem: {e}"))?;
    let domains = Domains::new(mem.fsmem_dir.as_deref()).map_err(|e| e.to_string())?;
    Store::new(Arc::new(schema), domains)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

fn query_engine(
    store: Arc<Store>,
    q: &QueryArgs,
    hdb: Option<&Path>,
) -> Result<QueryEngine, String> {
    let mut opts = q.options();
    opts.hdb = hdb_root(hdb)?;
    QueryEngine::new(store, opts).map_err(|e| e.to_string())
}

/// --hdb as an absolute path, created if missing: the Parquet reader
/// addresses files by absolute location.
fn hdb_root(dir: Option<&Path>) -> Result<Option<std::path::PathBuf>, String> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("--hdb {}: cannot create it: {e}", dir.display()))?;
    std::fs::canonicalize(dir)
        .map(Some)
        .map_err(|e| format!("--hdb {}: {e}", dir.display()))
}

/// With --hdb: the end-of-day writer, opened before the rdb applies
/// anything (a replayed end-of-day marker must find it).
fn open_eod(
    node: &Arc<Node>,
    rdb: &Arc<tickdb_rdb::Rdb>,
    hdb: &HdbArgs,
    tp: Option<Arc<Tickerplant>>,
    clock: crate::eod_clock::EodClock,
) -> Result<(), String> {
    let Some(root) = hdb_root(hdb.hdb.as_deref())? else {
        return Ok(());
    };
    let eod = crate::eod::Eod::open(rdb.clone(), root, tp, hdb.eod_keep_journal, clock)?;
    node.set_eod(eod.clone());
    tokio::spawn(eod.run());
    Ok(())
}

/// Serves HTTP for `node` on `acceptor`: `/health` and `/status` answer
/// during start-up, everything else says "not ready" until it is.
fn start_http(acceptor: Acceptor, node: &Arc<Node>, http: &HttpArgs) {
    let limits = http.limits();
    let state = AppState {
        node: node.clone(),
        limits: limits.clone(),
    };
    tokio::spawn(crate::http_server::serve(
        acceptor,
        http::router(state),
        limits,
        node.security().tls().cloned(),
    ));
}

/// The flags a query node's ports come from (`up`, `rdb`).
struct QueryFlags<'a> {
    http_port: &'a ListenSpec,
    http: &'a HttpArgs,
    pg_port: &'a ListenSpec,
    ipc: &'a IpcArgs,
    group: &'a GroupArgs,
    query: &'a QueryArgs,
}

/// The PostgreSQL and kdb+ IPC ports, served once their parts are open.
struct QueryListeners {
    pg: Acceptor,
    ipc: Option<Acceptor>,
}

/// Binds a query node's ports (HTTP, PostgreSQL, kdb+ IPC and the admin
/// port; shared ones listen once the node is ready), serves HTTP on them
/// at once, and starts joining the query groups when ready, busy steering
/// and the group watch.
fn open_query_ports(node: &Arc<Node>, ip: IpAddr, f: QueryFlags) -> Result<QueryListeners, String> {
    let ports = QueryPorts::new(node.drain.clone());
    let admin = match f.group.admin_port {
        Some(port) => {
            let spec = ListenSpec {
                port,
                reuse_port: false,
            };
            Some(ports.add(ip, &spec, "admin HTTP")?)
        }
        None => None,
    };
    let http = ports.add(ip, f.http_port, "HTTP")?;
    let l = QueryListeners {
        pg: ports.add(ip, f.pg_port, "PostgreSQL")?,
        ipc: match &f.ipc.ipc_port {
            Some(spec) => Some(ports.add(ip, spec, "kdb+ IPC")?),
            None => None,
        },
    };
    node.set_ports(ports.clone());
    start_http(http, node, f.http);
    if let Some(admin) = admin {
        start_http(admin, node, f.http);
    }
    let steering = f.group.steering(f.query);
    ports.log_kernel_settings(&steering);
    let (n, p) = (node.clone(), ports.clone());
    tokio::spawn(async move {
        while !n.life.is_ready() {
            if n.drain.is_cancelled() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(READY_POLL_MS)).await;
        }
        if let Err(e) = p.join() {
            tracing::error!("joining the query groups: {e}");
        }
    });
    let n = node.clone();
    tokio::spawn(
        ports
            .clone()
            .steer(steering, move || n.query().map(|q| q.pool_stats())),
    );
    tokio::spawn(ports.watch_groups());
    Ok(l)
}

/// How often a starting node checks whether it is ready to join its query
/// groups, in milliseconds.
const READY_POLL_MS: u64 = 10;

/// Waits for SIGTERM, SIGINT or `POST /admin/drain`; says which.
async fn stop_requested(node: &Node) -> &'static str {
    tokio::select! {
        _ = shutdown_signal() => "a signal",
        _ = node.drain_requested.cancelled() => "POST /admin/drain",
    }
}

/// Serves kdb+ IPC when the node has the port.
fn start_ipc(acceptor: Option<Acceptor>, node: &Arc<Node>, a: &IpcArgs, pg: Option<&PgArgs>) {
    if let Some(acc) = acceptor {
        let opts = a.options(pg, &node.security());
        tokio::spawn(crate::ipc::serve(acc, node.clone(), opts));
    }
}

/// Serves PostgreSQL: accepts (and answers cancel requests) on the node's
/// runtime, runs each session on the query threads.
fn start_pg(acceptor: Acceptor, engine: &QueryEngine, pg: &PgArgs, node: &Node) {
    tokio::spawn(tickdb_query::pg::serve(
        acceptor,
        engine.clone(),
        pg.options(&node.security()),
    ));
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Runs `f` on a blocking thread (a long open or reload), so the runtime
/// keeps serving `/health` meanwhile.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("{what} failed: {e}")))
}

/// Serves ILP TCP and the subscription port of an open tp, behind the
/// node's users and TLS.
fn serve_tp_ports(
    ilp: tokio::net::TcpListener,
    sub: tokio::net::TcpListener,
    tp: &Arc<Tickerplant>,
    node: &Node,
) {
    let security = node.security();
    tokio::spawn(tickdb_tp::ilp_tcp::serve(
        ilp,
        tp.clone(),
        security.login_gate(),
        security.tls().cloned(),
    ));
    tokio::spawn(tickdb_tp::sub_server::serve(
        sub,
        tp.clone(),
        security.login_gate(),
        security.tls().cloned(),
    ));
}

/// What a node's flags leave open to anyone (protected mode's list). With
/// a users file (`users`), PostgreSQL wire and kdb+ IPC log its users in,
/// so the default --pg-password opens nothing; --pg-no-auth and
/// --ipc-no-auth still do.
fn open_doors(users: bool, pg: Option<&PgArgs>, ipc: &IpcArgs) -> crate::security::OpenDoors {
    let mut d = crate::security::OpenDoors::default();
    if let Some(pg) = pg {
        d.add(pg.pg_no_auth, "PostgreSQL wire (--pg-no-auth)");
        d.add(
            !users && !pg.pg_no_auth && pg.pg_password == tickdb_query::pg::PG_PASSWORD_DEFAULT,
            "PostgreSQL wire with the default --pg-password",
        );
    }
    if ipc.ipc_port.is_some() {
        d.add(ipc.ipc_no_auth, "kdb+ IPC (--ipc-no-auth)");
        let pg_default = pg.is_none_or(|p| p.pg_password == tickdb_query::pg::PG_PASSWORD_DEFAULT);
        d.add(
            !users && !ipc.ipc_no_auth && pg_default,
            "kdb+ IPC with the default password",
        );
    }
    d
}

pub async fn up(a: UpArgs) -> Result<(), String> {
    standby_flags_fit(&a.tp, &a.schema)?;
    let (schema, toml) = load_schema(&a.schema)?;
    let clock = a.eod.clock()?;
    if a.trim_journal && a.hot.hot_restart.is_none() {
        return Err("--trim-journal needs --hot-restart: the journal may only be trimmed behind a durable checkpoint".into());
    }
    let security = crate::security::start(
        &a.net,
        open_doors(a.net.users.is_some(), Some(&a.pg), &a.ipc),
    )?;
    let node = Node::new(Role::Up);
    node.set_security(security);
    node.set_clock(clock.clone());
    let ilp_l = bind(a.net.bind, &a.tp.ilp_port, "ILP TCP").await?;
    let sub_l = bind(a.net.bind, &a.tp.tp_port, "tp subscriptions").await?;
    let repl_l = bind(a.net.bind, &a.tp.repl.repl_port, "replication").await?;
    let ql = open_query_ports(&node, a.net.bind, a.query_flags())?;
    let adv = advertised(&a.net, &a.tp, a.http_port.port);
    let (prepared, schema, toml) = prepare_replication(
        &a.tp,
        &adv,
        &node,
        a.hot.hot_restart.as_deref(),
        (schema, toml),
    )
    .await?;
    let reseeded = prepared.reseeded.clone();
    let open_as = OpenAs::of(&prepared);
    let elected = prepared.elected;
    node.life
        .starting("opening the journal and the Hot Restart store");
    // The journal's recovery scan and the Hot Restart store's reload read
    // different directories and need each other only afterwards: a restart's
    // two longest reads run side by side.
    let (hot_args, tp_args, tp_schema, tp_toml, origin) = (
        a.hot.clone(),
        a.tp.clone(),
        Arc::new(schema.clone()),
        toml.clone(),
        schema_origin(&a.schema),
    );
    let (hot, tp) = blocking("opening the journal", move || {
        Ok(std::thread::scope(|s| {
            let hot = std::thread::Builder::new()
                .name("hot-restart-reload".into())
                .spawn_scoped(s, || crate::persist::open(&hot_args));
            let tp = open_tp(&tp_args, tp_schema, tp_toml, origin, open_as);
            let hot = match hot {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err("the Hot Restart reload thread panicked".into())),
                Err(e) => Err(format!("spawning the Hot Restart reload thread: {e}")),
            };
            (hot, tp)
        }))
    })
    .await?;
    let hot = hot?;
    let tp = tp?;
    // The schema the tp runs under: the given one, or the journal's when it
    // grew at run time (CREATE TABLE, ALTER TABLE ... ADD COLUMN).
    let schema = (*tp.schema()).clone();
    if let Some(h) = &hot {
        h.check_compatible(&schema, &[], &[], tp.seq())
            .map_err(|e| e.to_string())?;
    }
    // The tp is open: writes are journaled (and acknowledged) while the
    // rdb below is still loading, as before.
    node.set_tp(tp.clone());
    serve_tp_ports(ilp_l, sub_l, &tp, &node);
    // Writes and subscriptions are served from here on; queries answer
    // once the tables below are loaded (the engine checks readiness).
    start_ipc(ql.ipc, &node, &a.ipc, Some(&a.pg));
    node.life
        .loading("restoring tables from the Hot Restart store", 0);
    let applied_rdb: Arc<std::sync::OnceLock<Arc<tickdb_rdb::Rdb>>> = Arc::default();
    let (mem, schema2) = (a.mem.clone(), schema.clone());
    let rdb = blocking("restoring the rdb", move || {
        crate::persist::rdb(hot, &schema2, &mem, &[], &[])
    })
    .await?;
    if let Some(r) = &reseeded {
        node.life
            .loading("loading the reseeded tables (rows)", r.rows);
        let (rdb2, r2) = (rdb.clone(), r.clone());
        blocking("loading the reseed", move || {
            crate::replication::load_reseed(&rdb2, &r2)?;
            // Durable at once: a restart needs neither the primary nor
            // the reseed again.
            crate::persist::final_checkpoint(&rdb2);
            Ok(())
        })
        .await?;
    }
    node.set_rdb(rdb.clone());
    let _ = applied_rdb.set(rdb.clone());
    {
        let applied: Arc<dyn Fn() -> u64 + Send + Sync> = {
            let r = applied_rdb.clone();
            Arc::new(move || r.get().map(|r| r.applied_seq()).unwrap_or(0))
        };
        let snapshots: Arc<dyn tickdb_replication::reseed::SnapshotSource> =
            Arc::new(crate::replication::RdbSnapshots(rdb.clone()));
        let repl = crate::replication::start(
            repl_l,
            node.security().tls().cloned(),
            &tp,
            &a.tp.repl,
            prepared,
            applied,
            Some(snapshots),
            adv,
        );
        if let Some(e) = repl.etcd.clone() {
            tokio::spawn(crate::leader::run(e, node.clone(), elected));
        }
        node.set_replication(repl);
    }
    let mut schedule = {
        let tp = tp.clone();
        let trim = a.trim_journal;
        crate::persist::schedule(
            &rdb,
            &a.hot,
            Box::new(move |r| {
                if trim {
                    crate::http::log_trim(tp.trim_journal(r.seq));
                }
            }),
        )?
    };
    open_eod(&node, &rdb, &a.hdb, Some(tp.clone()), clock.clone())?;
    let engine = query_engine(rdb.store().clone(), &a.query, a.hdb.hdb.as_deref())?;
    // CREATE TABLE and ALTER TABLE over /exec and PostgreSQL wire go to
    // this node's tp.
    engine.set_ddl(Arc::new(crate::ddl::TpDdl {
        tp: tp.clone(),
        rdb: Some(rdb.clone()),
        security: node.security(),
    }));
    node.set_query(engine.clone());
    start_pg(ql.pg, &engine, &a.pg, &node);
    crate::eod_clock::spawn_schedule(tp.clone(), clock);
    let rdb_thread = {
        let (tp, rdb, life) = (tp.clone(), rdb.clone(), node.life.clone());
        std::thread::Builder::new()
            .name("rdb-apply".into())
            .spawn(move || crate::embedded_rdb::run(tp, rdb, life))
            .map_err(|e| format!("spawning rdb thread: {e}"))?
    };
    tracing::info!(
        "tickdb up: HTTP {}:{} (/write, /exec), ILP TCP {}, subscriptions {}, PostgreSQL {} ({}), kdb+ IPC {}, replication {} ({}), data {}",
        a.net.bind,
        a.http_port,
        a.tp.ilp_port,
        a.tp.tp_port,
        a.pg_port,
        a.pg.describe(a.net.users.is_some()),
        a.ipc.describe(a.net.users.is_some()),
        a.tp.repl.repl_port,
        describe_replication(&a.tp),
        a.tp.data_dir.display()
    );
    if let Some(rate) = a.demo_feed {
        let tp = tp.clone();
        let life = node.life.clone();
        tokio::spawn(async move {
            while !life.is_ready() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            crate::demo_feed::run(tp, rate).await
        });
    }
    let why = stop_requested(&node).await;
    crate::drain::drain(&node, a.group.drain_timeout(), why).await;
    node.life.stopping();
    tracing::info!("stopping: final journal sync");
    let tp2 = tp.clone();
    let _ = tokio::task::spawn_blocking(move || tp2.shutdown()).await;
    let _ = rdb_thread.join();
    if let Some(s) = schedule.as_mut() {
        s.stop();
    }
    let _ = tokio::task::spawn_blocking(move || crate::persist::final_checkpoint(&rdb)).await;
    Ok(())
}

pub async fn tp(a: TpOnlyArgs) -> Result<(), String> {
    standby_flags_fit(&a.tp, &a.schema)?;
    let (schema, toml) = load_schema(&a.schema)?;
    let clock = a.eod.clock()?;
    let security = crate::security::start(&a.net, open_doors(a.net.users.is_some(), None, &a.ipc))?;
    let http_l = bind(a.net.bind, &a.http_port, "HTTP").await?;
    let ilp_l = bind(a.net.bind, &a.tp.ilp_port, "ILP TCP").await?;
    let sub_l = bind(a.net.bind, &a.tp.tp_port, "tp subscriptions").await?;
    let repl_l = bind(a.net.bind, &a.tp.repl.repl_port, "replication").await?;
    let ipc_l = match &a.ipc.ipc_port {
        Some(spec) => Some(Acceptor::fixed(bind(a.net.bind, spec, "kdb+ IPC").await?)),
        None => None,
    };
    let node = Node::new(Role::Tp);
    node.set_security(security);
    node.set_clock(clock.clone());
    start_http(Acceptor::fixed(http_l), &node, &a.http);
    let adv = advertised(&a.net, &a.tp, a.http_port.port);
    // A tp has no tables: it cannot take a reseed.
    let (prepared, schema, toml) =
        prepare_replication(&a.tp, &adv, &node, None, (schema, toml)).await?;
    node.life.starting("opening the journal");
    let (tp_args, origin) = (a.tp.clone(), schema_origin(&a.schema));
    let open_as = OpenAs::of(&prepared);
    let elected = prepared.elected;
    let tp = blocking("opening the journal", move || {
        open_tp(&tp_args, Arc::new(schema), toml, origin, open_as)
    })
    .await?;
    node.set_tp(tp.clone());
    let repl = crate::replication::start(
        repl_l,
        node.security().tls().cloned(),
        &tp,
        &a.tp.repl,
        prepared,
        Arc::new(|| 0),
        None,
        adv,
    );
    if let Some(e) = repl.etcd.clone() {
        tokio::spawn(crate::leader::run(e, node.clone(), elected));
    }
    node.set_replication(repl);
    node.life.ready();
    serve_tp_ports(ilp_l, sub_l, &tp, &node);
    start_ipc(ipc_l, &node, &a.ipc, None);
    crate::eod_clock::spawn_schedule(tp.clone(), clock);
    tracing::info!(
        "tickdb tp: HTTP {}:{} (/write), ILP TCP {}, subscriptions {}, kdb+ IPC {}, replication {} ({}), journal {}",
        a.net.bind,
        a.http_port,
        a.tp.ilp_port,
        a.tp.tp_port,
        a.ipc.describe(a.net.users.is_some()),
        a.tp.repl.repl_port,
        describe_replication(&a.tp),
        a.tp.data_dir.join("journal").display()
    );
    shutdown_signal().await;
    node.life.stopping();
    tracing::info!("stopping: final journal sync");
    let _ = tokio::task::spawn_blocking(move || tp.shutdown()).await;
    Ok(())
}

pub async fn rdb(a: RdbArgs) -> Result<(), String> {
    if a.eod.eod_time.is_some() {
        return Err("--eod-time is the tp's: it journals the end of day, and every rdb ends the day at its marker; give an rdb --eod-tz only".into());
    }
    let clock = a.eod.clock()?;
    let security = crate::security::start(
        &a.net,
        open_doors(a.net.users.is_some(), Some(&a.pg), &a.ipc),
    )?;
    // Every connection to the tp logs in as --tp-user, when given.
    a.login.apply()?;
    let node = Node::new(Role::Rdb);
    node.set_security(security);
    node.life.starting("reloading the Hot Restart store");
    let ql = open_query_ports(&node, a.net.bind, a.query_flags())?;
    let interest = Interest {
        tables: a.tables.clone(),
        symbols: a.symbols.clone(),
    };
    // With a checkpoint in the Hot Restart store the rdb restores it and asks
    // the tp only for what came after.
    let hot_args = a.hot.clone();
    let hot = blocking("reloading the Hot Restart store", move || {
        crate::persist::open(&hot_args)
    })
    .await?;
    let from_seq = hot
        .as_ref()
        .and_then(|h| h.checkpoint_found())
        .map(|m| m.seq + 1)
        .unwrap_or(1);
    // The tp's schema arrives with the subscription; keep trying until the
    // tp answers, saying so.
    node.life
        .starting(&format!("connecting to the tp at {}", a.tp));
    let mut delay = remote::RECONNECT_DELAY_MS_MIN;
    let first = loop {
        // A Hot Restart store keeps no epoch: not checked.
        match remote::link(&a.tp, from_seq, tickdb_net::proto::EPOCH_UNKNOWN, &interest).await {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!("{e}; retrying in {delay} ms");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                    _ = stop_requested(&node) => return Ok(()),
                }
                delay = (delay * 2).min(remote::RECONNECT_DELAY_MS_MAX);
            }
        }
    };
    let schema = Schema::parse(&first.schema_toml, &format!("schema from tp {}", a.tp))
        .map_err(|e| e.to_string())?;
    if let Some(h) = &hot {
        h.check_compatible(&schema, &a.tables, &a.symbols, first.current_seq)
            .map_err(|e| e.to_string())?;
    }
    node.life
        .loading("restoring tables from the Hot Restart store", 0);
    let (mem, tables, symbols, schema2) = (
        a.mem.clone(),
        a.tables.clone(),
        a.symbols.clone(),
        schema.clone(),
    );
    let rdb = blocking("restoring the rdb", move || {
        crate::persist::rdb(hot, &schema2, &mem, &tables, &symbols)
    })
    .await?;
    node.set_rdb(rdb.clone());
    open_eod(&node, &rdb, &a.hdb, None, clock)?;
    let mut schedule = crate::persist::schedule(&rdb, &a.hot, Box::new(|_| {}))?;
    let engine = query_engine(rdb.store().clone(), &a.query, a.hdb.hdb.as_deref())?;
    node.set_query(engine.clone());
    // Ready once caught up with the tp's sequence at subscription; until
    // then every query path says how far catch-up has got.
    let target = first.current_seq;
    let start = rdb.applied_seq();
    node.life.loading(
        &format!("catching up with the tp at {} (records)", a.tp),
        target.saturating_sub(start),
    );
    {
        let (rdb, life) = (rdb.clone(), node.life.clone());
        tokio::spawn(async move {
            loop {
                let applied = rdb.applied_seq();
                life.progress(applied.saturating_sub(start));
                if applied >= target {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            life.ready();
        });
    }
    start_pg(ql.pg, &engine, &a.pg, &node);
    start_ipc(ql.ipc, &node, &a.ipc, Some(&a.pg));
    tracing::info!(
        "tickdb rdb: following tp {}, HTTP {}:{}, PostgreSQL {} ({}), kdb+ IPC {}",
        a.tp,
        a.net.bind,
        a.http_port,
        a.pg_port,
        a.pg.describe(a.net.users.is_some()),
        a.ipc.describe(a.net.users.is_some())
    );
    let mut follow = tokio::spawn(remote::follow(
        rdb.clone(),
        a.tp.clone(),
        interest,
        Some(first),
        Arc::new(remote::EpochTrack::default()),
    ));
    let result = tokio::select! {
        why = stop_requested(&node) => {
            // Still following while the queries in flight finish.
            crate::drain::drain(&node, a.group.drain_timeout(), why).await;
            follow.abort();
            Ok(())
        }
        r = &mut follow => match r {
            Ok(e) => Err(e.to_string()),
            Err(e) => Err(format!("rdb follower stopped: {e}")),
        },
    };
    node.life.stopping();
    if let Some(s) = schedule.as_mut() {
        s.stop();
    }
    // Whatever was applied is consistent: the last checkpoint keeps it.
    let _ = tokio::task::spawn_blocking(move || crate::persist::final_checkpoint(&rdb)).await;
    result
}

/// `tickdb hdb serve`: SQL, PostgreSQL wire and kdb+ IPC over a historical
/// database alone. The tables are empty today; every date in DIR is there.
pub async fn hdb(a: HdbServeArgs) -> Result<(), String> {
    let (schema, _) = load_schema(&a.schema)?;
    let clock = crate::eod_clock::EodClock::new(&a.eod_tz, None)?;
    if !a.dir.is_dir() {
        return Err(format!(
            "historical database {}: not a directory",
            a.dir.display()
        ));
    }
    let dir = std::fs::canonicalize(&a.dir).map_err(|e| format!("{}: {e}", a.dir.display()))?;
    let security = crate::security::start(
        &a.net,
        open_doors(a.net.users.is_some(), Some(&a.pg), &a.ipc),
    )?;
    let node = Node::new(Role::Rdb);
    node.set_security(security);
    node.life.starting("reading the historical database");
    let ql = open_query_ports(&node, a.net.bind, a.query_flags())?;
    let mem = MemArgs {
        fsmem_dir: None,
        fsmem: Vec::new(),
    };
    let store = make_store(&schema, &mem)?;
    let rdb = tickdb_rdb::Rdb::new(store);
    // Served read-only: nothing ends a day here, so nothing is written.
    let eod = crate::eod::Eod::open_read_only(rdb.clone(), dir.clone(), clock)?;
    node.set_eod(eod);
    node.set_rdb(rdb.clone());
    let engine = query_engine(rdb.store().clone(), &a.query, Some(&dir))?;
    node.set_query(engine.clone());
    node.life.ready();
    start_pg(ql.pg, &engine, &a.pg, &node);
    start_ipc(ql.ipc, &node, &a.ipc, Some(&a.pg));
    tracing::info!(
        "tickdb hdb: serving {} on HTTP {}:{}, PostgreSQL {} ({}), kdb+ IPC {}",
        a.dir.display(),
        a.net.bind,
        a.http_port,
        a.pg_port,
        a.pg.describe(a.net.users.is_some()),
        a.ipc.describe(a.net.users.is_some())
    );
    let why = stop_requested(&node).await;
    crate::drain::drain(&node, a.group.drain_timeout(), why).await;
    node.life.stopping();
    Ok(())
}
