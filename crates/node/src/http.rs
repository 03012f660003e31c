//! The HTTP port. A tp serves writes (`/write`, `/api/v2/write`, and
//! `/settings` for the QuestDB client); an rdb serves queries (`/exec`);
//! both serve `/health`, `/status` and Prometheus `/metrics`. `tickdb up`
//! serves all of them on one port. The port is served from the start, so
//! `/health` and `/status` answer while the node loads; every other path
//! answers 503 "not ready" (JSON, with how far loading has got) until the
//! part it needs is open and, for queries, until the tables are complete.

use crate::http_server::HttpLimits;
use crate::node::{Node, Role};
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;
use std::fmt::Write as _;
use std::sync::Arc;
use tickdb_ilp::Precision;
use tickdb_query::encode::{Encoder, Format};
use tickdb_query::QueryError;
use tickdb_tp::TpError;

#[derive(Clone)]
pub struct AppState {
    pub node: Arc<Node>,
    pub limits: HttpLimits,
}

pub fn router(state: AppState) -> Router {
    let role = state.node.role;
    let mut r = Router::new()
        .route("/health", get(health))
        .route("/status", get(status))
        .route("/metrics", get(metrics));
    if role.has_tp() {
        r = r
            .route("/write", post(write))
            .route("/api/v2/write", post(write))
            .route("/settings", get(settings))
            .route("/clear", post(clear));
    }
    if role.has_rdb() {
        r = r
            .route("/exec", get(exec).post(exec))
            .route("/checkpoint", post(checkpoint));
    }
    if role == Role::Tp {
        // A tp without tables runs schema changes only (docs/sql.md).
        r = r.route("/exec", get(exec_ddl_only).post(exec_ddl_only));
    }
    if role == Role::Up {
        r = r.route("/journal/trim", post(trim_journal));
    }
    r = r.route("/admin/drain", post(admin_drain));
    if role.has_tp() {
        r = r.route("/admin/eod", post(admin_eod));
    }
    if role.has_rdb() {
        r = r.route("/admin/hdb/reload", post(admin_hdb_reload));
    }
    if role.has_tp() {
        r = r
            .route("/admin/promote", post(admin_promote))
            .route("/admin/switchover", post(admin_switchover));
    }
    // Which member of a query group answered: every response says. The
    // gate (cross-site refusal, users and roles) runs before any handler.
    r.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        crate::http_auth::guard,
    ))
    .layer(axum::middleware::map_response(member_header))
    .with_state(state)
}

/// The header naming the process that answered (`rp,PORT` groups).
pub const MEMBER_HEADER: &str = "x-tickdb-member";

async fn member_header(mut r: Response) -> Response {
    r.headers_mut().insert(
        MEMBER_HEADER,
        axum::http::HeaderValue::from(std::process::id()),
    );
    r
}

/// `POST /admin/drain`: stop accepting connections, finish what is in
/// flight (within --drain-timeout-s), close idle sessions, exit.
async fn admin_drain(State(s): State<AppState>) -> Response {
    if s.node.role == Role::Tp {
        return json_error(
            StatusCode::CONFLICT,
            "not_a_query_node",
            "a tp serves no query group and does not drain; stop it with SIGTERM".into(),
            json!({}),
        );
    }
    let already = s.node.drain_requested.is_cancelled();
    s.node.drain_requested.cancel();
    (
        StatusCode::ACCEPTED,
        [(header::CONTENT_TYPE, "application/json")],
        json!({
            "draining": true,
            "already": already,
            "pid": std::process::id(),
            "message": "no new connections; requests in flight finish, idle sessions close, then the node exits",
        })
        .to_string(),
    )
        .into_response()
}

#[derive(Deserialize)]
struct EodParams {
    /// YYYY-MM-DD; default: today in --eod-tz.
    date: Option<String>,
}

/// `POST /admin/eod[?date=YYYY-MM-DD]`: ends the trading day now (kdb+'s
/// `.u.end`): the tp journals an end-of-day marker and every rdb with a
/// historical database writes the day. Answers once the marker is
/// journaled, with its sequence; `/status` `eod` shows the write.
async fn admin_eod(State(s): State<AppState>, Query(p): Query<EodParams>) -> Response {
    let Some(tp) = s.node.tp().cloned() else {
        return not_ready(&s.node);
    };
    let date = match p.date.as_deref() {
        Some(d) => match chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d") {
            Ok(d) => crate::eod_clock::days(d),
            Err(_) => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    "bad_date",
                    format!("date {d:?} is not a date as YYYY-MM-DD"),
                    json!({}),
                )
            }
        },
        None => match s.node.clock() {
            Some(c) => c.today(),
            None => tickdb_core::store::utc_today(),
        },
    };
    match tp.end_of_day(date).await {
        Ok(seq) => {
            let date = tickdb_core::store::date_string(date);
            tracing::info!("end of day {date} on command: marker journaled at seq {seq}");
            json_ok(json!({ "date": date, "seq": seq }))
        }
        Err(e) => tp_error(e),
    }
}

/// `POST /admin/hdb/reload`: reads the historical database's committed
/// parts again (after `tickdb hdb import` into it).
async fn admin_hdb_reload(State(s): State<AppState>) -> Response {
    let Some(eod) = s.node.eod().cloned() else {
        return json_error(
            StatusCode::CONFLICT,
            "no_hdb",
            "this node has no historical database (start it with --hdb DIR)".into(),
            json!({}),
        );
    };
    match tokio::task::spawn_blocking(move || eod.reload()).await {
        Ok(Ok(dates)) => json_ok(json!({ "history_dates": dates })),
        Ok(Err(e)) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "hdb_unreadable",
            e,
            json!({}),
        ),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error",
            e.to_string(),
            json!({}),
        ),
    }
}

/// 503 with the lifecycle: what the node is doing and how far it has got.
fn not_ready(node: &Node) -> Response {
    let st = node.life.status();
    let message = node
        .life
        .check()
        .err()
        .unwrap_or_else(|| "the node is still opening this part".to_string());
    let mut r = json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_ready",
        message,
        json!({ "phase": st.phase, "done": st.done, "total": st.total }),
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    r
}

pub(crate) fn json_error(
    status: StatusCode,
    code: &str,
    message: String,
    extra: serde_json::Value,
) -> Response {
    let mut body = json!({ "code": code, "message": message });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// 200 `ok` once the node answers everything it serves; 503 with the
/// reason (and progress) before.
async fn health(State(s): State<AppState>) -> Response {
    match s.node.life.check() {
        Ok(()) if s.node.serving() => (StatusCode::OK, "ok\n").into_response(),
        // Ready, but not yet listening on every shared port.
        Ok(()) if s.node.life.is_ready() => (
            StatusCode::SERVICE_UNAVAILABLE,
            "ready; joining the query groups\n",
        )
            .into_response(),
        Ok(()) => (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

#[derive(Deserialize)]
struct WriteParams {
    precision: Option<String>,
}

/// ILP over HTTP. Answers 204 only once every row of the request is
/// journaled under the fsync policy; any bad line rejects the whole request
/// (400, JSON naming the line) and nothing of it is applied.
async fn write(
    State(s): State<AppState>,
    Query(p): Query<WriteParams>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(tp) = s.node.tp() else {
        return not_ready(&s.node);
    };
    // Compressed bodies are not decoded: say so rather than parse their
    // bytes as lines (and quote them back).
    if let Some(enc) = headers.get(header::CONTENT_ENCODING) {
        let enc = enc
            .to_str()
            .unwrap_or("(not text)")
            .trim()
            .to_ascii_lowercase();
        if enc != "identity" {
            return json_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported",
                format!(
                    "Content-Encoding '{enc}' is not supported: send the ILP body uncompressed"
                ),
                json!({}),
            );
        }
    }
    let limit = tp.config().request_bytes_max;
    let precision = match p.precision.as_deref() {
        None => Precision::Nanos,
        Some(x) => match Precision::parse(x) {
            Some(p) => p,
            None => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!("unknown precision '{x}' (n, u, ms or s)"),
                    json!({}),
                )
            }
        },
    };
    let bytes = match read_body(&s, body, limit, || {
        json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request too large",
            format!("request body is over the bound of {limit} bytes (--request-bytes-max); split it into smaller requests"),
            json!({}),
        )
    })
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    let line_max = tp.config().line_bytes_max;
    // Parsing 10k-line requests is CPU work: keep it off the I/O threads.
    let parse = |schema: Arc<tickdb_core::Schema>, bytes: bytes::Bytes| {
        tokio::task::spawn_blocking(move || {
            tickdb_tp::ingest::parse_request(&schema, &bytes, precision, line_max)
        })
    };
    let mut parsed = parse(tp.schema(), bytes.clone()).await;
    // --ilp-auto-create: the tables and columns the lines name are created
    // (one journaled schema change), and the request parsed again.
    if let Ok(Err(e)) = &parsed {
        if tickdb_tp::ingest::names_unknown(e) {
            match tp.auto_create(&bytes).await {
                Ok(true) => parsed = parse(tp.schema(), bytes.clone()).await,
                Ok(false) => {}
                Err(e) => return tp_error(e),
            }
        }
    }
    let batches = match parsed {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return tp_error(e),
        Err(e) => {
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error",
                e.to_string(),
                json!({}),
            )
        }
    };
    if batches.iter().all(|b| b.rows == 0) {
        return StatusCode::NO_CONTENT.into_response();
    }
    match tp.write(batches).await {
        // Where the update went: a client that follows a failover can check
        // its acknowledgements against the journals (docs/failover.md).
        Ok(seq) => (
            StatusCode::NO_CONTENT,
            [
                ("x-tickdb-seq", seq.to_string()),
                ("x-tickdb-epoch", tp.epoch_at(seq).to_string()),
            ],
        )
            .into_response(),
        Err(e) => tp_error(e),
    }
}

fn tp_error(e: TpError) -> Response {
    match &e {
        TpError::BadLine { line, .. } => json_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            e.to_string(),
            json!({ "line": line }),
        ),
        TpError::BadInput(_) => {
            json_error(StatusCode::BAD_REQUEST, "invalid", e.to_string(), json!({}))
        }
        TpError::TooLarge(_) => json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request too large",
            e.to_string(),
            json!({}),
        ),
        TpError::Standby { primary, http, ilp } => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "standby",
            e.to_string(),
            json!({ "primary": primary, "primary_http": http, "primary_ilp": ilp }),
        ),
        TpError::Fenced { primary, .. } => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "fenced",
            e.to_string(),
            json!({ "primary": primary }),
        ),
        TpError::NotReplicated(_) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_replicated",
            e.to_string(),
            json!({}),
        ),
        TpError::Journal(_) | TpError::Shutdown | TpError::Io(_) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "internal error",
            e.to_string(),
            json!({}),
        ),
    }
}

#[derive(Deserialize)]
struct PromoteParams {
    /// Refuse unless this standby's journal holds this sequence.
    min_seq: Option<u64>,
    why: Option<String>,
}

/// Makes this standby the primary (`tickdb promote`).
async fn admin_promote(State(s): State<AppState>, Query(p): Query<PromoteParams>) -> Response {
    let why = p.why.unwrap_or_else(|| "an operator's promote".into());
    admin_answer(crate::failover::promote(&s.node, p.min_seq, None, &why).await)
}

#[derive(Deserialize)]
struct SwitchoverParams {
    /// The standby to hand over to (its name, HTTP or peer address).
    to: Option<String>,
    timeout_ms: Option<u64>,
}

/// Hands this primary's role to a standby, losing nothing (`tickdb
/// switchover`).
async fn admin_switchover(
    State(s): State<AppState>,
    Query(p): Query<SwitchoverParams>,
) -> Response {
    let timeout = std::time::Duration::from_millis(
        p.timeout_ms
            .unwrap_or(crate::failover::SWITCHOVER_TIMEOUT_MS),
    );
    admin_answer(crate::failover::switchover(&s.node, p.to.as_deref(), timeout).await)
}

fn admin_answer(r: Result<serde_json::Value, crate::failover::AdminError>) -> Response {
    match r {
        Ok(v) => json_ok(v),
        Err(e) => json_error(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e.code,
            e.message,
            json!({}),
        ),
    }
}

#[derive(Deserialize)]
struct ClearParams {
    tables: Option<String>,
}

/// Empties tables in every subscriber at one journal sequence (end of day,
/// an operator's clear): `tables=trade,quote`, or `tables=*` for all.
async fn clear(State(s): State<AppState>, Query(p): Query<ClearParams>) -> Response {
    let Some(tp) = s.node.tp() else {
        return not_ready(&s.node);
    };
    let tables: Vec<String> = match p.tables.as_deref().map(str::trim) {
        None | Some("") => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "name the tables to clear: tables=trade,quote (or tables=* for every table)".into(),
                json!({}),
            )
        }
        Some("*") => Vec::new(),
        Some(list) => list.split(',').map(|t| t.trim().to_string()).collect(),
    };
    match tp.clear_tables(&tables).await {
        Ok(seq) => json_ok(json!({ "seq": seq, "tables": if tables.is_empty() {
            tp.schema().tables.iter().map(|t| t.name.clone()).collect()
        } else { tables } })),
        Err(e) => tp_error(e),
    }
}

fn json_ok(v: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// A checkpoint now (Hot Restart): answers once the store is durable up to
/// the sequence it reports.
async fn checkpoint(State(s): State<AppState>) -> Response {
    let Some(rdb) = s.node.rdb().cloned() else {
        return not_ready(&s.node);
    };
    if rdb.hot_restart().is_none() {
        return json_error(
            StatusCode::CONFLICT,
            "not persisted",
            "this rdb was not started with --hot-restart DIR: there is nothing to checkpoint"
                .into(),
            json!({}),
        );
    }
    match tokio::task::spawn_blocking(move || rdb.checkpoint()).await {
        Ok(Ok(Some(r))) => {
            tickdb_rdb::hot::log_checkpoint("requested", &r);
            json_ok(serde_json::to_value(&r).unwrap_or_default())
        }
        Ok(Ok(None)) => StatusCode::NOT_FOUND.into_response(),
        Ok(Err(e)) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "checkpoint failed",
            e.to_string(),
            json!({}),
        ),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error",
            e.to_string(),
            json!({}),
        ),
    }
}

/// Logs a journal trim's outcome.
pub fn log_trim(r: Result<tickdb_journal::TrimReport, TpError>) {
    match r {
        Ok(t) if t.segments_removed.is_empty() => {}
        Ok(t) => tracing::info!("journal: {t}"),
        Err(e) => tracing::error!("journal trim failed: {e}"),
    }
}

/// Removes the journal segments behind the rdb's last durable checkpoint.
async fn trim_journal(State(s): State<AppState>) -> Response {
    let (Some(tp), Some(rdb)) = (s.node.tp().cloned(), s.node.rdb().cloned()) else {
        return not_ready(&s.node);
    };
    let durable = rdb.hot_restart().map(|h| h.durable_seq()).unwrap_or(0);
    if durable == 0 {
        return json_error(
            StatusCode::CONFLICT,
            "no checkpoint",
            "the journal can only be trimmed behind a durable checkpoint; start with --hot-restart DIR and POST /checkpoint first".into(),
            json!({}),
        );
    }
    match tokio::task::spawn_blocking(move || tp.trim_journal(durable)).await {
        Ok(Ok(r)) => {
            log_trim(Ok(r.clone()));
            json_ok(json!({
                "upto_seq": r.upto_seq,
                "segments_removed": r.segments_removed.len(),
                "bytes_removed": r.bytes_removed,
                "first_seq_kept": r.first_seq_kept,
            }))
        }
        Ok(Err(e)) => tp_error(e),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error",
            e.to_string(),
            json!({}),
        ),
    }
}

/// What the QuestDB client asks before writing over HTTP: we speak ILP
/// protocol version 1 (text) only.
async fn settings() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "config": { "line.proto.support.versions": [1] } }).to_string(),
    )
        .into_response()
}

async fn status(State(s): State<AppState>) -> Response {
    let mut body = json!({});
    if let Some(rdb) = s.node.rdb() {
        body = serde_json::to_value(rdb.status()).unwrap_or_default();
    }
    if let Some(tp) = s.node.tp() {
        body["tp"] = serde_json::to_value(tp.status()).unwrap_or_default();
    }
    if let Some(q) = s.node.query() {
        body["queries"] = serde_json::to_value(q.pool_stats()).unwrap_or_default();
    }
    if let (Some(r), Some(tp)) = (s.node.replication(), s.node.tp()) {
        let applied = s.node.rdb().map(|r| r.applied_seq()).unwrap_or(0);
        body["replication"] = r.status(tp, applied);
    }
    if let Some(e) = s.node.eod() {
        body["eod"] = serde_json::to_value(e.status()).unwrap_or_default();
    }
    body["role"] = json!(s.node.role.name());
    body["member"] = json!({
        "pid": std::process::id(),
        "ports": s.node.ports().map(|p| p.status()),
        "draining": s.node.drain.is_cancelled(),
    });
    body["lifecycle"] = serde_json::to_value(s.node.life.status()).unwrap_or_default();
    body["ready"] = json!(s.node.serving());
    // The process's resident memory: what a monitor compares across DRAM
    // and fsmem rdbs (file-backed fsmem pages count as RSS, not anonymous).
    if let Some(m) = tickdb_stack::procfs::self_mem() {
        body["process"] = json!({
            "pid": std::process::id(),
            "rss_bytes": m.rss_bytes,
            "rss_anon_bytes": m.rss_anon_bytes,
            "rss_file_bytes": m.rss_file_bytes,
            "malloc": malloc_status(),
        });
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The C allocator's thresholds as `crate::malloc::tune` left them.
fn malloc_status() -> serde_json::Value {
    let st = crate::malloc::state();
    let tuned = st == crate::malloc::State::Tuned;
    json!({
        "state": st.name(),
        "mmap_threshold_bytes": tuned.then_some(crate::malloc::MMAP_THRESHOLD_BYTES),
        "trim_threshold_bytes": tuned.then_some(crate::malloc::TRIM_THRESHOLD_BYTES),
    })
}

async fn metrics(State(s): State<AppState>) -> Response {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# TYPE tickdb_ready gauge\ntickdb_ready {}",
        s.node.life.is_ready() as u8
    );
    if let Some(q) = s.node.query() {
        let p = q.pool_stats();
        let _ = writeln!(
            out,
            "# TYPE tickdb_queries_running gauge\ntickdb_queries_running {}\n\
             # TYPE tickdb_queries_waiting gauge\ntickdb_queries_waiting {}\n\
             # TYPE tickdb_queries_admitted_total counter\ntickdb_queries_admitted_total {}\n\
             # TYPE tickdb_queries_refused_busy_total counter\ntickdb_queries_refused_busy_total {}\n\
             # TYPE tickdb_queries_expired_waiting_total counter\ntickdb_queries_expired_waiting_total {}",
            p.running, p.waiting, p.admitted_total, p.refused_busy_total, p.expired_waiting_total
        );
    }
    if let Some(tp) = s.node.tp() {
        let st = tp.status();
        let _ = writeln!(out, "# TYPE tickdb_tp_seq gauge\ntickdb_tp_seq {}", st.seq);
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_synced_seq gauge\ntickdb_tp_synced_seq {}",
            st.synced_seq
        );
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_rows_total counter\ntickdb_tp_rows_total {}",
            st.rows
        );
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_updates_total counter\ntickdb_tp_updates_total {}",
            st.updates
        );
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_journal_bytes_total counter\ntickdb_tp_journal_bytes_total {}",
            st.bytes
        );
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_commits_total counter\ntickdb_tp_commits_total {}",
            st.commits
        );
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_poisoned gauge\ntickdb_tp_poisoned {}",
            st.poisoned.is_some() as u8
        );
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_subscribers gauge\ntickdb_tp_subscribers {}",
            st.subscribers.len()
        );
        let m = &st.subscriber_memory;
        let c = &st.connections;
        let _ = writeln!(
            out,
            "# TYPE tickdb_tp_subscriber_memory_bytes gauge\ntickdb_tp_subscriber_memory_bytes {}\n\
             # TYPE tickdb_tp_subscriber_cut_offs_total counter\ntickdb_tp_subscriber_cut_offs_total {}\n\
             # TYPE tickdb_connections gauge\n\
             tickdb_connections{{port=\"ilp_tcp\"}} {}\ntickdb_connections{{port=\"subscription\"}} {}\n\
             # TYPE tickdb_connections_refused_total counter\n\
             tickdb_connections_refused_total{{port=\"ilp_tcp\"}} {}\ntickdb_connections_refused_total{{port=\"subscription\"}} {}",
            m.bytes, m.cut_offs, c.ilp_tcp, c.subscription, c.ilp_tcp_refused, c.subscription_refused
        );
    }
    if let (Some(r), Some(tp)) = (s.node.replication(), s.node.tp()) {
        let applied = s.node.rdb().map(|r| r.applied_seq()).unwrap_or(0);
        r.metrics(tp, applied, &mut out);
    }
    if let Some(rdb) = s.node.rdb() {
        let st = rdb.status();
        let _ = writeln!(
            out,
            "# TYPE tickdb_rdb_seq gauge\ntickdb_rdb_seq {}",
            st.seq
        );
        let _ = writeln!(out, "# TYPE tickdb_rdb_rows gauge");
        for (t, ts) in &st.tables {
            let _ = writeln!(out, "tickdb_rdb_rows{{table=\"{t}\"}} {}", ts.rows);
        }
        let _ = writeln!(out, "# TYPE tickdb_memory_bytes gauge");
        let _ = writeln!(
            out,
            "tickdb_memory_bytes{{domain=\"dram\"}} {}",
            st.memory.dram
        );
        let _ = writeln!(
            out,
            "tickdb_memory_bytes{{domain=\"fsmem\"}} {}",
            st.memory.fsmem
        );
        let b = &st.memory.breakdown;
        let _ = writeln!(out, "# TYPE tickdb_memory_dram_bytes gauge");
        for (part, v) in [
            ("columns", b.columns),
            ("symbols", b.symbols),
            ("indexes", b.indexes),
            ("keyed_cache", b.keyed_cache),
        ] {
            let _ = writeln!(out, "tickdb_memory_dram_bytes{{part=\"{part}\"}} {v}");
        }
        if let Some(h) = &st.hot_restart {
            let gauges: [(&str, &str, f64); 10] = [
                (
                    "tickdb_hotrestart_durable_seq",
                    "gauge",
                    h.durable_seq as f64,
                ),
                ("tickdb_checkpoints_total", "counter", h.checkpoints as f64),
                (
                    "tickdb_checkpoint_failures_total",
                    "counter",
                    h.checkpoint_failures as f64,
                ),
                (
                    "tickdb_checkpoint_pause_seconds",
                    "gauge",
                    h.last_checkpoint
                        .as_ref()
                        .map(|c| c.pause_us as f64 / 1e6)
                        .unwrap_or(0.0),
                ),
                (
                    "tickdb_checkpoint_duration_seconds",
                    "gauge",
                    h.last_checkpoint
                        .as_ref()
                        .map(|c| c.duration_ms as f64 / 1e3)
                        .unwrap_or(0.0),
                ),
                (
                    "tickdb_hotrestart_disk_bytes",
                    "gauge",
                    h.store.disk_bytes as f64,
                ),
                (
                    "tickdb_hotrestart_garbage_bytes",
                    "gauge",
                    h.store.garbage_bytes as f64,
                ),
                (
                    "tickdb_hotrestart_write_amplification",
                    "gauge",
                    h.store.write_amplification,
                ),
                (
                    "tickdb_hotrestart_gc_runs_total",
                    "counter",
                    h.store.gc_runs as f64,
                ),
                (
                    "tickdb_hotrestart_reload_seconds",
                    "gauge",
                    h.reload_seconds,
                ),
            ];
            for (name, kind, v) in gauges {
                let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {v}");
            }
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// Characters of a failed statement echoed in its error.
const SQL_ECHO_CHARS_MAX: usize = 4096;

#[derive(Deserialize)]
struct ExecParams {
    query: Option<String>,
    format: Option<String>,
}

/// `/exec` on a tp without tables (`tickdb tp`): `CREATE TABLE` and `ALTER
/// TABLE ... ADD COLUMN` only, by an admin; a query is refused, saying
/// where queries go.
async fn exec_ddl_only(
    State(s): State<AppState>,
    Query(p): Query<ExecParams>,
    logged_in: Option<axum::Extension<crate::http_auth::LoggedIn>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(tp) = s.node.tp() else {
        return not_ready(&s.node);
    };
    let (sql, _) = match exec_statement(&s, p, &headers, body).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let ops =
        match tickdb_query::ddl::parse(&sql) {
            Ok(Some(ops)) => ops,
            Ok(None) => return json_error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "this node is a tickerplant without tables: it runs CREATE TABLE and ALTER TABLE \
                 ... ADD COLUMN; send queries to an rdb (tickdb rdb) or a node started with \
                 tickdb up"
                    .into(),
                json!({}),
            ),
            Err(e) => return query_error(&sql, e),
        };
    let ddl = crate::ddl::TpDdl {
        tp: tp.clone(),
        rdb: None,
        security: s.node.security(),
    };
    let user = logged_in.map(|u| u.0 .0.clone());
    use tickdb_query::ddl::DdlExec;
    match ddl.exec(ops, sql.clone(), user).await {
        Ok(done) => json_ok(json!({ "ddl": "OK", "seq": done.seq })),
        Err(e) => query_error(&sql, e),
    }
}

/// The statement (and the format asked for) of an `/exec` request: the
/// `query` parameter, or a POST body (a form, or the SQL as it is).
async fn exec_statement(
    s: &AppState,
    mut p: ExecParams,
    headers: &HeaderMap,
    body: Body,
) -> Result<(String, Option<String>), Response> {
    if p.query.is_none() {
        // POST: the statement in the body, as a form (query=...) or as is.
        let b = exec_body(s, headers, body).await?;
        if let Some(q) = b.query {
            p.query = Some(q);
        }
        if b.format.is_some() {
            p.format = b.format;
        }
    }
    match p.query.filter(|q| !q.trim().is_empty()) {
        Some(sql) => Ok((sql, p.format)),
        None => Err(json_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "missing query: GET /exec?query=SELECT..., or POST it in the body".into(),
            json!({}),
        )),
    }
}

/// SQL over HTTP: JSON (QuestDB-like), `format=csv`, or `format=arrow`
/// (an Arrow IPC stream). The result streams: each batch is encoded on the
/// query threads and sent as it comes, so memory stays bounded whatever
/// the result's size. Errors before the first batch get their status code;
/// a failure after the first bytes have gone out (a timeout, say) aborts
/// the response, so a client never mistakes part of an answer for all of
/// it.
async fn exec(
    State(s): State<AppState>,
    Query(p): Query<ExecParams>,
    logged_in: Option<axum::Extension<crate::http_auth::LoggedIn>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(engine) = s.node.query() else {
        return not_ready(&s.node);
    };
    let (sql, format) = match exec_statement(&s, p, &headers, body).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    // CREATE TABLE and ALTER TABLE ... ADD COLUMN: run by the tp, by an
    // admin (docs/sql.md, "Schema changes"); QuestDB answers {"ddl":"OK"}.
    let user = logged_in.map(|u| u.0 .0.clone());
    match engine.run_ddl(&sql, user.as_deref()).await {
        Ok(None) => {}
        Ok(Some(done)) => {
            return json_ok(json!({ "ddl": "OK", "seq": done.seq }));
        }
        Err(e) => return query_error(&sql, e),
    }
    let name = format.as_deref().unwrap_or("json");
    let Some(format) = Format::parse(name) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("unknown format '{name}' (json, csv or arrow)"),
            json!({}),
        );
    };
    let ctx = engine.new_ctx(None);
    let mut results = match engine
        .stream_into(&sql, ctx, Encoder::new(format, &sql))
        .await
    {
        Ok(r) => r,
        Err(QueryError::NotReady(_)) => return not_ready(&s.node),
        Err(e) => return query_error(&sql, e),
    };
    let first = match results.next().await {
        None => bytes::Bytes::new(),
        Some(Ok(b)) => b,
        Some(Err(e)) => return query_error(&sql, e),
    };
    let rest = futures::stream::unfold((results, sql), |(mut r, sql)| async move {
        match r.next().await {
            None => None,
            Some(Ok(b)) => Some((Ok(b), (r, sql))),
            Some(Err(e)) => {
                tracing::warn!("query failed after its first rows were sent, response aborted: {e}; query: {sql}");
                Some((Err(std::io::Error::other(e.to_string())), (r, sql)))
            }
        }
    });
    let body = futures::StreamExt::chain(
        futures::stream::once(async move { Ok::<_, std::io::Error>(first) }),
        rest,
    );
    (
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from_stream(body),
    )
        .into_response()
}

/// Bytes of a POSTed statement read at most: a little over the longest
/// statement the engine accepts, so that one is refused with its own
/// clear error.
const EXEC_BODY_BYTES_MAX: usize = tickdb_query::limits::QUERY_TEXT_BYTES_MAX + 64 * 1024;

/// A request body, within `--http-body-timeout-s` (408 after) and `limit`
/// bytes (`too_large` answers past it).
async fn read_body(
    s: &AppState,
    body: Body,
    limit: usize,
    too_large: impl FnOnce() -> Response,
) -> Result<bytes::Bytes, Response> {
    match tokio::time::timeout(s.limits.body_timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(_)) => Err(too_large()),
        Err(_) => Err(json_error(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!(
                "the request body did not arrive within {} s (--http-body-timeout-s)",
                s.limits.body_timeout.as_secs()
            ),
            json!({}),
        )),
    }
}

/// The statement (and format) of a POST /exec: a form body
/// (`query=...&format=...`) or the SQL text itself.
async fn exec_body(s: &AppState, headers: &HeaderMap, body: Body) -> Result<ExecParams, Response> {
    let bytes = read_body(s, body, EXEC_BODY_BYTES_MAX, || {
        json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_complex",
            format!(
                "statement is over the limit of {} bytes",
                tickdb_query::limits::QUERY_TEXT_BYTES_MAX
            ),
            json!({}),
        )
    })
    .await?;
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if form {
        return serde_urlencoded::from_bytes::<ExecParams>(&bytes).map_err(|e| {
            json_error(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("the form body does not parse: {e}"),
                json!({}),
            )
        });
    }
    match String::from_utf8(bytes.to_vec()) {
        Ok(sql) => Ok(ExecParams {
            query: Some(sql),
            format: None,
        }),
        Err(e) => Err(json_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!(
                "the statement is not UTF-8 (byte {})",
                e.utf8_error().valid_up_to()
            ),
            json!({}),
        )),
    }
}

fn query_error(sql: &str, e: QueryError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    // The statement is echoed back: a long one only in part.
    let sql = match sql.char_indices().nth(SQL_ECHO_CHARS_MAX) {
        Some((at, _)) => &sql[..at],
        None => sql,
    };
    let mut extra = json!({ "query": sql });
    if let Some((line, col)) = e.position() {
        extra["line"] = json!(line);
        extra["position"] = json!(col);
    }
    json_error(status, e.kind(), e.to_string(), extra)
}
