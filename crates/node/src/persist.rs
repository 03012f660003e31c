//! `--hot-restart DIR` for the roles that hold tables (`up`, `rdb`): open the
//! store, rebuild the column store from it, checkpoint on a schedule, and take
//! a last checkpoint at shutdown. The store logic is tickdb-rdb's `hot`.

use crate::config::{HotArgs, MemArgs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::Schema;
use tickdb_rdb::hot::{self, CheckpointReport, HotRestart, Schedule};
use tickdb_rdb::Rdb;

/// Opens the store `--hot-restart` names (none without the flag), logging
/// what the reload found.
pub fn open(a: &HotArgs) -> Result<Option<HotRestart>, String> {
    let Some(opts) = a.options() else {
        return Ok(None);
    };
    tracing::info!("hot restart: reloading {}", opts.dir.display());
    let h = HotRestart::open(&opts).map_err(|e| e.to_string())?;
    let r = h.reload_report();
    match h.checkpoint_found() {
        Some(m) => tracing::info!(
            "hot restart: reloaded {} records ({:.1} MB) in {:.2}s ({:.0} MB/s); checkpoint at journal seq {}",
            r.records_loaded,
            r.bytes_loaded as f64 / 1e6,
            r.elapsed.as_secs_f64(),
            r.bytes_per_sec() / 1e6,
            m.seq
        ),
        None => tracing::info!("hot restart: no checkpoint yet in {}", opts.dir.display()),
    }
    Ok(Some(h))
}

/// An rdb over a new column store for `schema`, restored from `hot` when
/// given (it then applies updates after the checkpoint's sequence).
pub fn rdb(
    hot: Option<HotRestart>,
    schema: &Schema,
    mem: &MemArgs,
    tables: &[String],
    symbols: &[String],
) -> Result<Arc<Rdb>, String> {
    let Some(hot) = hot else {
        return Ok(Rdb::new(crate::roles::make_store(schema, mem)?));
    };
    // A checkpoint taken before a run-time schema change (tables or columns
    // added since) is restored under its own schema: the journal after it
    // holds the change, and replaying it brings the store up to `schema`.
    let stored = hot
        .checkpoint_found()
        .and_then(|m| Schema::parse(&m.schema_toml, "hot restart checkpoint").ok())
        .filter(|stored| {
            tickdb_core::schema_change::extension(stored, schema)
                .is_ok_and(|added| !added.is_empty())
        });
    let store = crate::roles::make_store(stored.as_ref().unwrap_or(schema), mem)?;
    let started = Instant::now();
    let report = hot
        .restore(&store, tables, symbols)
        .map_err(|e| e.to_string())?;
    if report.seq > 0 {
        let rows: u64 = report.rows.values().sum();
        tracing::info!(
            "hot restart: restored {rows} rows ({} records) in {:.2}s; replaying the journal from seq {}",
            report.records,
            started.elapsed().as_secs_f64(),
            report.seq + 1
        );
    }
    let rdb = Rdb::restored(store, report.seq);
    rdb.attach_hot_restart(Arc::new(hot));
    Ok(rdb)
}

/// Starts scheduled checkpoints when the rdb persists; `after` runs after
/// each durable one.
pub fn schedule(
    rdb: &Arc<Rdb>,
    a: &HotArgs,
    after: Box<dyn Fn(&CheckpointReport) + Send>,
) -> Result<Option<Schedule>, String> {
    if rdb.hot_restart().is_none() {
        return Ok(None);
    }
    let every = Duration::from_secs(a.checkpoint_interval_s.max(1));
    hot::spawn_schedule(rdb.clone(), every, after)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The checkpoint at shutdown, so that the next start replays nothing.
pub fn final_checkpoint(rdb: &Rdb) {
    match rdb.checkpoint() {
        Ok(Some(r)) => hot::log_checkpoint("final", &r),
        Ok(None) => {}
        Err(e) => tracing::error!(
            "final checkpoint failed: {e}; the next start replays more of the journal"
        ),
    }
}
