//! The HTTP port. A tp serves writes (`/write`, `/api/v2/write`, and
//! `/settings` for the QuestDB client); an rdb serves queries (`/exec`);
//! both serve `/health`, `/status` and Prometheus `/metrics`. `tickdb up`
//! serves all of them on one port.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tickdb_ilp::Precision;
use tickdb_query::{QueryEngine, QueryError};
use tickdb_rdb::Rdb;
use tickdb_tp::{Tickerplant, TpError};

#[derive(Clone)]
pub struct AppState {
    pub tp: Option<Arc<Tickerplant>>,
    pub rdb: Option<Arc<Rdb>>,
    pub query: Option<QueryEngine>,
    /// False while the rdb replays at start; `/health` answers 503 until then.
    pub ready: Arc<AtomicBool>,
}

pub fn router(state: AppState) -> Router {
    let mut r = Router::new()
        .route("/health", get(health))
        .route("/status", get(status))
        .route("/metrics", get(metrics));
    if state.tp.is_some() {
        r = r
            .route("/write", post(write))
            .route("/api/v2/write", post(write))
            .route("/settings", get(settings))
            .route("/clear", post(clear));
    }
    if state.query.is_some() {
        r = r.route("/exec", get(exec).post(exec));
    }
    if state.rdb.is_some() {
        r = r.route("/checkpoint", post(checkpoint));
    }
    if state.rdb.is_some() && state.tp.is_some() {
        r = r.route("/journal/trim", post(trim_journal));
    }
    r.with_state(state)
}

fn json_error(
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

async fn health(State(s): State<AppState>) -> Response {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "replaying the journal\n").into_response()
    }
}

#[derive(Deserialize)]
struct WriteParams {
    precision: Option<String>,
}

/// ILP over HTTP. Answers 204 only once every row of the request is
/// journaled under the fsync policy; any bad line rejects the whole request
/// (400, JSON naming the line) and nothing of it is applied.
async fn write(State(s): State<AppState>, Query(p): Query<WriteParams>, body: Body) -> Response {
    let Some(tp) = s.tp.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
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
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request too large",
                format!("request body is over the bound of {limit} bytes (--request-bytes-max); split it into smaller requests"),
                json!({}),
            )
        }
    };
    let schema = tp.schema().clone();
    let line_max = tp.config().line_bytes_max;
    // Parsing 10k-line requests is CPU work: keep it off the I/O threads.
    let parsed = tokio::task::spawn_blocking(move || {
        tickdb_tp::ingest::parse_request(&schema, &bytes, precision, line_max)
    })
    .await;
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
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
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
        TpError::Journal(_) | TpError::Shutdown | TpError::Io(_) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "internal error",
            e.to_string(),
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
    let Some(tp) = s.tp.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
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
    let Some(rdb) = s.rdb.clone() else {
        return StatusCode::NOT_FOUND.into_response();
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
    let (Some(tp), Some(rdb)) = (s.tp.clone(), s.rdb.clone()) else {
        return StatusCode::NOT_FOUND.into_response();
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
    if let Some(rdb) = &s.rdb {
        body = serde_json::to_value(rdb.status()).unwrap_or_default();
    }
    if let Some(tp) = &s.tp {
        body["tp"] = serde_json::to_value(tp.status()).unwrap_or_default();
    }
    body["ready"] = json!(s.ready.load(Ordering::Acquire));
    // The process's resident memory: what a monitor compares across DRAM
    // and fsmem rdbs (file-backed fsmem pages count as RSS, not anonymous).
    if let Some(m) = tickdb_stack::procfs::self_mem() {
        body["process"] = json!({
            "pid": std::process::id(),
            "rss_bytes": m.rss_bytes,
            "rss_anon_bytes": m.rss_anon_bytes,
            "rss_file_bytes": m.rss_file_bytes,
        });
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn metrics(State(s): State<AppState>) -> Response {
    let mut out = String::new();
    if let Some(tp) = &s.tp {
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
    }
    if let Some(rdb) = &s.rdb {
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

#[derive(Deserialize)]
struct ExecParams {
    query: Option<String>,
    format: Option<String>,
}

/// SQL over HTTP: JSON (QuestDB-like), `format=csv`, or `format=arrow`
/// (an Arrow IPC stream).
async fn exec(State(s): State<AppState>, Query(p): Query<ExecParams>) -> Response {
    let Some(engine) = s.query.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(sql) = p.query.filter(|q| !q.trim().is_empty()) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "missing query: GET /exec?query=SELECT...".into(),
            json!({}),
        );
    };
    let format = p.format.as_deref().unwrap_or("json").to_ascii_lowercase();
    if !matches!(format.as_str(), "json" | "csv" | "arrow") {
        return json_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("unknown format '{format}' (json, csv or arrow)"),
            json!({}),
        );
    }
    let result = match engine.query(&sql).await {
        Ok(r) => r,
        Err(e) => return query_error(&sql, e),
    };
    match format.as_str() {
        "csv" => (
            [(header::CONTENT_TYPE, "text/csv")],
            tickdb_query::encode::csv(&result),
        )
            .into_response(),
        "arrow" => (
            [(header::CONTENT_TYPE, "application/vnd.apache.arrow.stream")],
            tickdb_query::encode::arrow_ipc(&result),
        )
            .into_response(),
        _ => {
            let mut v = tickdb_query::encode::json(&result);
            v["query"] = json!(sql);
            ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
        }
    }
}

fn query_error(sql: &str, e: QueryError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut extra = json!({ "query": sql });
    if let Some((line, col)) = e.position() {
        extra["line"] = json!(line);
        extra["position"] = json!(col);
    }
    json_error(status, e.kind(), e.to_string(), extra)
}
