//! `tickdb agg`: the aggregation engine of the Optane kdb+ study. It subscribes to the
//! tp's `trade` and `quote` (replaying the journal from `--from-seq`, then
//! live), keeps minute bars per symbol and daily stats per symbol
//! (`bars`), and publishes the bars that changed back through the tp as
//! keyed tables `trade_1m`, `quote_1m` and `daily`, every `--publish-ms`
//! in one `Write`, so every rdb holds them. At most one Write is in flight:
//! while the tp has not acknowledged it, changes accumulate and go in the
//! next, so the agg adds bounded load whatever the feed rate.
//!
//! After a broken link (tp restart, network) it re-subscribes from the
//! next sequence it has not folded; the journal fills the gap.

use crate::bars::{minute_start, DailyStats, Fold, QuoteBar, TradeBar};
use crate::clock::{now_ns, NS_PER_MINUTE};
use crate::error::{Result, StackError};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tickdb_core::batch::{Batch, BatchBuilder, ColumnData, Value};
use tickdb_core::schema::{ColumnType, Schema, TableDef, TableKind};
use tickdb_net::proto::{read_message, write_message, Message};
use tickdb_net::stream::Stream;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Messages read ahead of the folding loop from the subscription socket.
pub const SUB_QUEUE_MESSAGES_MAX: usize = 256;
/// Writes handed to the publisher and not yet acknowledged: one, so a slow
/// tp makes the agg publish bigger batches less often, never queue more.
pub const PUBLISH_IN_FLIGHT_MAX: usize = 1;
/// Most distinct symbols the agg tracks; a feed beyond this is refused.
pub const AGG_SYMBOLS_MAX: usize = 1_000_000;
/// Wait between reconnect attempts, doubling up to the max.
pub const RECONNECT_DELAY_MS_MIN: u64 = 50;
pub const RECONNECT_DELAY_MS_MAX: u64 = 2000;
/// How long the final publish at shutdown may wait for its ack.
const FINAL_PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How often progress is logged.
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug, Clone)]
pub struct AggArgs {
    /// The tp's subscription address (its --tp-port), or several (the nodes
    /// of a failover group): the agg subscribes at the primary among them
    /// and publishes to it, and follows a failover to the new primary.
    #[arg(
        long,
        default_value = "127.0.0.1:8710",
        value_name = "HOST:PORT[,HOST:PORT...]"
    )]
    pub tp: String,
    #[command(flatten)]
    pub login: crate::tp_login::TpLoginArgs,
    /// Changed bars are published back to the tp at most this often, all in
    /// one write.
    #[arg(long, default_value_t = 100)]
    pub publish_ms: u64,
    /// First journal sequence to fold: 1 rebuilds the day's bars from the
    /// start of the journal, then follows live.
    #[arg(long, default_value_t = 1)]
    pub from_seq: u64,
    /// Minute bars are kept in memory this many minutes behind the newest
    /// tick, then dropped (after being published); a trade or quote older
    /// than that is counted as late and left out of the minute bars.
    #[arg(long, default_value_t = 10)]
    pub keep_minutes: i64,
}

/// Where the fields are in the tp's schema: input and output tables.
#[derive(Debug, Clone)]
struct Layout {
    trade: [usize; 4],
    quote: [usize; 4],
    trade_1m: TableDef,
    quote_1m: TableDef,
    daily: TableDef,
    t1m: HashMap<&'static str, usize>,
    q1m: HashMap<&'static str, usize>,
    d: HashMap<&'static str, usize>,
}

const TRADE_IN: [(&str, ColumnType); 4] = [
    ("time", ColumnType::Timestamp),
    ("sym", ColumnType::Symbol),
    ("price", ColumnType::F64),
    ("size", ColumnType::I64),
];
const QUOTE_IN: [(&str, ColumnType); 4] = [
    ("time", ColumnType::Timestamp),
    ("sym", ColumnType::Symbol),
    ("bid", ColumnType::F64),
    ("ask", ColumnType::F64),
];
const TS: ColumnType = ColumnType::Timestamp;
const F: ColumnType = ColumnType::F64;
const I: ColumnType = ColumnType::I64;
const SYM: ColumnType = ColumnType::Symbol;
pub const TRADE_1M_COLUMNS: [(&str, ColumnType); 11] = [
    ("time", TS),
    ("sym", SYM),
    ("open", F),
    ("high", F),
    ("low", F),
    ("close", F),
    ("volume", I),
    ("vwap", F),
    ("trades", I),
    ("last_time", TS),
    ("pub_time", TS),
];
pub const QUOTE_1M_COLUMNS: [(&str, ColumnType); 12] = [
    ("time", TS),
    ("sym", SYM),
    ("quotes", I),
    ("bid", F),
    ("ask", F),
    ("mid_open", F),
    ("mid_high", F),
    ("mid_low", F),
    ("mid_close", F),
    ("avg_spread", F),
    ("last_time", TS),
    ("pub_time", TS),
];
pub const DAILY_COLUMNS: [(&str, ColumnType); 15] = [
    ("time", TS),
    ("sym", SYM),
    ("open", F),
    ("high", F),
    ("low", F),
    ("close", F),
    ("volume", I),
    ("vwap", F),
    ("trades", I),
    ("quotes", I),
    ("avg_spread", F),
    ("bid", F),
    ("ask", F),
    ("last_time", TS),
    ("pub_time", TS),
];

fn table<'a>(schema: &'a Schema, name: &str) -> Result<&'a TableDef> {
    schema.table(name).ok_or_else(|| {
        StackError::BadInput(format!(
            "the tp's schema has no table '{name}': run the tp with the built-in schema, or add \
             the stack's tables to yours (docs/stack.md)"
        ))
    })
}

fn columns<const N: usize>(t: &TableDef, want: &[(&str, ColumnType); N]) -> Result<[usize; N]> {
    let mut out = [0usize; N];
    for (i, (name, ty)) in want.iter().enumerate() {
        let c = t.column_index(name).ok_or_else(|| {
            StackError::BadInput(format!("table '{}' has no column '{name}'", t.name))
        })?;
        if t.columns[c].ty != *ty {
            return Err(StackError::BadInput(format!(
                "table '{}' column '{name}' is {}, the agg needs {}",
                t.name,
                t.columns[c].ty.name(),
                ty.name()
            )));
        }
        out[i] = c;
    }
    Ok(out)
}

fn output(
    schema: &Schema,
    name: &str,
    want: &[(&'static str, ColumnType)],
    key: &[&str],
) -> Result<(TableDef, HashMap<&'static str, usize>)> {
    let t = table(schema, name)?;
    let mut map = HashMap::new();
    for (col, ty) in want {
        let c = t
            .column_index(col)
            .ok_or_else(|| StackError::BadInput(format!("table '{name}' has no column '{col}'")))?;
        if t.columns[c].ty != *ty {
            return Err(StackError::BadInput(format!(
                "table '{name}' column '{col}' is {}, the agg writes {}",
                t.columns[c].ty.name(),
                ty.name()
            )));
        }
        map.insert(*col, c);
    }
    let want_key: Vec<usize> = key.iter().map(|k| map[k]).collect();
    match &t.kind {
        TableKind::Keyed { key } if {
            let mut a = key.clone();
            let mut b = want_key.clone();
            a.sort();
            b.sort();
            a == b
        } => {}
        _ => {
            return Err(StackError::BadInput(format!(
                "table '{name}' must be keyed by {key:?} (kind = \"keyed\"), so a newer bar replaces the older"
            )))
        }
    }
    Ok((t.clone(), map))
}

impl Layout {
    fn new(schema: &Schema) -> Result<Layout> {
        let trade = columns(table(schema, "trade")?, &TRADE_IN)?;
        let quote = columns(table(schema, "quote")?, &QUOTE_IN)?;
        let (trade_1m, t1m) = output(schema, "trade_1m", &TRADE_1M_COLUMNS, &["sym", "time"])?;
        let (quote_1m, q1m) = output(schema, "quote_1m", &QUOTE_1M_COLUMNS, &["sym", "time"])?;
        let (daily, d) = output(schema, "daily", &DAILY_COLUMNS, &["sym"])?;
        Ok(Layout {
            trade,
            quote,
            trade_1m,
            quote_1m,
            daily,
            t1m,
            q1m,
            d,
        })
    }
}

/// Running totals, for the log and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AggCounters {
    pub trades: u64,
    pub quotes: u64,
    /// Ticks left out of the minute bars (older than --keep-minutes) or
    /// the daily stats (an earlier day), or with a null field.
    pub late: u64,
    pub skipped_nulls: u64,
    pub rows_published: u64,
    pub writes: u64,
}

/// The agg's state: bars by (symbol, minute), daily stats by symbol, and
/// which of them changed since the last publish. No I/O: `fold` takes the
/// tp's batches, `take_changes` returns the batches to publish.
pub struct Aggregator {
    layout: Layout,
    syms: Vec<String>,
    sym_ids: HashMap<String, u32>,
    trade_bars: HashMap<(u32, i64), TradeBar>,
    quote_bars: HashMap<(u32, i64), QuoteBar>,
    daily: HashMap<u32, DailyStats>,
    dirty_trade: HashSet<(u32, i64)>,
    dirty_quote: HashSet<(u32, i64)>,
    dirty_daily: HashSet<u32>,
    newest_minute: i64,
    keep_minutes: i64,
    pub counters: AggCounters,
}

fn f64_col(b: &Batch, c: usize, row: usize) -> Option<f64> {
    let col = &b.columns[c];
    match &col.data {
        ColumnData::F64(v) if col.is_valid(row) => v.get(row).copied(),
        _ => None,
    }
}

fn i64_col(b: &Batch, c: usize, row: usize) -> Option<i64> {
    let col = &b.columns[c];
    match &col.data {
        ColumnData::I64(v) | ColumnData::Timestamp(v) if col.is_valid(row) => v.get(row).copied(),
        _ => None,
    }
}

impl Aggregator {
    /// Checks the tp's schema has the tables the agg reads and writes.
    pub fn new(schema: &Schema, keep_minutes: i64) -> Result<Aggregator> {
        Ok(Aggregator {
            layout: Layout::new(schema)?,
            syms: Vec::new(),
            sym_ids: HashMap::new(),
            trade_bars: HashMap::new(),
            quote_bars: HashMap::new(),
            daily: HashMap::new(),
            dirty_trade: HashSet::new(),
            dirty_quote: HashSet::new(),
            dirty_daily: HashSet::new(),
            newest_minute: i64::MIN,
            keep_minutes: keep_minutes.max(1),
            counters: AggCounters::default(),
        })
    }

    fn sym_id(&mut self, s: &str) -> Result<u32> {
        if let Some(id) = self.sym_ids.get(s) {
            return Ok(*id);
        }
        if self.syms.len() >= AGG_SYMBOLS_MAX {
            return Err(StackError::BadInput(format!(
                "more than {AGG_SYMBOLS_MAX} symbols: the agg's bound"
            )));
        }
        let id = self.syms.len() as u32;
        self.syms.push(s.to_string());
        self.sym_ids.insert(s.to_string(), id);
        Ok(id)
    }

    /// Minute bars older than this are no longer kept.
    fn horizon(&self) -> i64 {
        self.newest_minute
            .saturating_sub(self.keep_minutes.saturating_mul(NS_PER_MINUTE))
    }

    /// Folds one batch of the tp's; tables other than trade and quote are
    /// ignored.
    pub fn fold(&mut self, b: &Batch) -> Result<()> {
        let is_trade = b.table == "trade";
        if !is_trade && b.table != "quote" {
            return Ok(());
        }
        let cols = if is_trade {
            self.layout.trade
        } else {
            self.layout.quote
        };
        let [tc, sc, ac, bc] = cols;
        for row in 0..b.rows {
            let sym = match &b.columns[sc].data {
                ColumnData::Symbol { .. } if b.columns[sc].is_valid(row) => {
                    b.columns[sc].data.symbol(row)
                }
                _ => None,
            };
            let (Some(time), Some(sym), Some(x)) = (i64_col(b, tc, row), sym, f64_col(b, ac, row))
            else {
                self.counters.skipped_nulls += 1;
                continue;
            };
            let y = if is_trade {
                i64_col(b, bc, row).map(|v| v as f64)
            } else {
                f64_col(b, bc, row)
            };
            let Some(y) = y else {
                self.counters.skipped_nulls += 1;
                continue;
            };
            let id = self.sym_id(sym)?;
            let minute = minute_start(time);
            if minute > self.newest_minute {
                self.newest_minute = minute;
            }
            let in_window = minute >= self.horizon();
            let key = (id, minute);
            let daily = self
                .daily
                .entry(id)
                .or_insert_with(|| DailyStats::new(time));
            let fold = if is_trade {
                self.counters.trades += 1;
                let size = y as i64;
                if in_window {
                    match self.trade_bars.get_mut(&key) {
                        Some(bar) => bar.add(x, size, time),
                        None => {
                            self.trade_bars.insert(key, TradeBar::new(x, size, time));
                        }
                    }
                    self.dirty_trade.insert(key);
                }
                daily.add_trade(x, size, time)
            } else {
                self.counters.quotes += 1;
                if in_window {
                    match self.quote_bars.get_mut(&key) {
                        Some(bar) => bar.add(x, y, time),
                        None => {
                            self.quote_bars.insert(key, QuoteBar::new(x, y, time));
                        }
                    }
                    self.dirty_quote.insert(key);
                }
                daily.add_quote(x, y, time)
            };
            if fold == Fold::Applied {
                self.dirty_daily.insert(id);
            }
            if !in_window || fold == Fold::Late {
                self.counters.late += 1;
            }
        }
        Ok(())
    }

    pub fn has_changes(&self) -> bool {
        !(self.dirty_trade.is_empty() && self.dirty_quote.is_empty() && self.dirty_daily.is_empty())
    }

    /// The changed bars and daily rows as batches of `trade_1m`, `quote_1m`
    /// and `daily` stamped `pub_time`; then minute bars behind the window
    /// are dropped (they were published in this or an earlier call).
    pub fn take_changes(&mut self, pub_time: i64) -> Vec<Batch> {
        let mut out = Vec::new();
        let l = &self.layout;
        let mut keys: Vec<(u32, i64)> = self.dirty_trade.drain().collect();
        keys.sort_by_key(|&(s, m)| (m, s));
        if !keys.is_empty() {
            let m = &l.t1m;
            let mut b = BatchBuilder::new(&l.trade_1m);
            for k in &keys {
                let Some(bar) = self.trade_bars.get(k) else {
                    continue;
                };
                b.set(m["time"], Value::Timestamp(k.1));
                b.set(m["sym"], Value::Symbol(&self.syms[k.0 as usize]));
                b.set(m["open"], Value::F64(bar.open));
                b.set(m["high"], Value::F64(bar.high));
                b.set(m["low"], Value::F64(bar.low));
                b.set(m["close"], Value::F64(bar.close));
                b.set(m["volume"], Value::I64(bar.volume));
                if let Some(v) = bar.vwap() {
                    b.set(m["vwap"], Value::F64(v));
                }
                b.set(m["trades"], Value::I64(bar.trades));
                b.set(m["last_time"], Value::Timestamp(bar.last_time));
                b.set(m["pub_time"], Value::Timestamp(pub_time));
                b.end_row();
            }
            out.push(b.finish());
        }
        let mut keys: Vec<(u32, i64)> = self.dirty_quote.drain().collect();
        keys.sort_by_key(|&(s, m)| (m, s));
        if !keys.is_empty() {
            let m = &l.q1m;
            let mut b = BatchBuilder::new(&l.quote_1m);
            for k in &keys {
                let Some(bar) = self.quote_bars.get(k) else {
                    continue;
                };
                b.set(m["time"], Value::Timestamp(k.1));
                b.set(m["sym"], Value::Symbol(&self.syms[k.0 as usize]));
                b.set(m["quotes"], Value::I64(bar.quotes));
                b.set(m["bid"], Value::F64(bar.bid));
                b.set(m["ask"], Value::F64(bar.ask));
                b.set(m["mid_open"], Value::F64(bar.mid_open));
                b.set(m["mid_high"], Value::F64(bar.mid_high));
                b.set(m["mid_low"], Value::F64(bar.mid_low));
                b.set(m["mid_close"], Value::F64(bar.mid_close));
                b.set(m["avg_spread"], Value::F64(bar.avg_spread()));
                b.set(m["last_time"], Value::Timestamp(bar.last_time));
                b.set(m["pub_time"], Value::Timestamp(pub_time));
                b.end_row();
            }
            out.push(b.finish());
        }
        let mut ids: Vec<u32> = self.dirty_daily.drain().collect();
        ids.sort_unstable();
        if !ids.is_empty() {
            let m = &l.d;
            let mut b = BatchBuilder::new(&l.daily);
            for id in &ids {
                let Some(d) = self.daily.get(id) else {
                    continue;
                };
                b.set(m["time"], Value::Timestamp(d.day));
                b.set(m["sym"], Value::Symbol(&self.syms[*id as usize]));
                if let Some(t) = &d.trade {
                    b.set(m["open"], Value::F64(t.open));
                    b.set(m["high"], Value::F64(t.high));
                    b.set(m["low"], Value::F64(t.low));
                    b.set(m["close"], Value::F64(t.close));
                    b.set(m["volume"], Value::I64(t.volume));
                    if let Some(v) = t.vwap() {
                        b.set(m["vwap"], Value::F64(v));
                    }
                }
                b.set(
                    m["trades"],
                    Value::I64(d.trade.as_ref().map_or(0, |t| t.trades)),
                );
                b.set(
                    m["quotes"],
                    Value::I64(d.quote.as_ref().map_or(0, |q| q.quotes)),
                );
                if let Some(q) = &d.quote {
                    b.set(m["avg_spread"], Value::F64(q.avg_spread()));
                    b.set(m["bid"], Value::F64(q.bid));
                    b.set(m["ask"], Value::F64(q.ask));
                }
                b.set(m["last_time"], Value::Timestamp(d.last_time()));
                b.set(m["pub_time"], Value::Timestamp(pub_time));
                b.end_row();
            }
            out.push(b.finish());
        }
        let horizon = self.horizon();
        self.trade_bars.retain(|k, _| k.1 >= horizon);
        self.quote_bars.retain(|k, _| k.1 >= horizon);
        self.counters.rows_published += out.iter().map(|b| b.rows as u64).sum::<u64>();
        out
    }

    /// Marks every bar and daily row held as changed: after a broken link
    /// a write may have been lost before its ack, so the next publish sends
    /// everything held again (upserts: sending a row twice is harmless).
    pub fn mark_all_changed(&mut self) {
        self.dirty_trade.extend(self.trade_bars.keys().copied());
        self.dirty_quote.extend(self.quote_bars.keys().copied());
        self.dirty_daily.extend(self.daily.keys().copied());
    }

    /// Minute bars held in memory now.
    pub fn bars_held(&self) -> usize {
        self.trade_bars.len() + self.quote_bars.len()
    }
}

/// Waits for SIGINT or SIGTERM.
async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs the agg until Ctrl-C or SIGTERM, reconnecting after broken links.
pub async fn run(a: AggArgs) -> Result<()> {
    a.login.apply().map_err(StackError::BadInput)?;
    if a.publish_ms == 0 {
        return Err(StackError::BadInput(
            "--publish-ms must be at least 1".into(),
        ));
    }
    let mut agg: Option<Aggregator> = None;
    let mut next_seq = a.from_seq.max(1);
    let mut delay = RECONNECT_DELAY_MS_MIN;
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        // The session borrows the state; it is dropped at the end of this
        // block, before the state is used for the final publish.
        let broken = {
            let session = session(&a, &mut agg, &mut next_seq, &mut delay);
            tokio::select! {
                e = session => Some(e),
                _ = &mut stop => None,
            }
        };
        match broken {
            None => {
                if let Some(agg) = agg.as_mut() {
                    final_publish(&a.tp, agg).await;
                }
                return Ok(());
            }
            Some(e @ StackError::BadInput(_)) => return Err(e),
            Some(e) => tracing::warn!("agg: {e}; reconnecting from seq {next_seq} in {delay} ms"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
            _ = &mut stop => return Ok(()),
        }
        delay = (delay * 2).min(RECONNECT_DELAY_MS_MAX);
    }
}

async fn connect(addr: &str) -> Result<Stream> {
    let mut s = tickdb_net::follow::connect(addr)
        .await
        .map_err(|e| match e {
            tickdb_net::NetError::Io(source) => StackError::Io {
                what: format!("connecting to the tp at {addr}"),
                source,
            },
            e => StackError::Protocol(format!("tp publish link: {e}")),
        })?;
    tickdb_net::follow::send_login(&mut s)
        .await
        .map_err(|e| StackError::Protocol(format!("tp publish link: {e}")))?;
    Ok(s)
}

/// Publishes what is left at shutdown, on a fresh connection.
async fn final_publish(addr: &str, agg: &mut Aggregator) {
    if !agg.has_changes() {
        return;
    }
    let batches = agg.take_changes(now_ns());
    let payload = tickdb_core::codec::encode_to_vec(&batches);
    // The primary among the addresses takes it; a standby refuses.
    let r = tokio::time::timeout(FINAL_PUBLISH_TIMEOUT, async {
        let mut last = Err(StackError::BadInput(format!("no tp address in '{addr}'")));
        for a in tickdb_net::follow::addresses(addr) {
            last = match connect(&a).await {
                Ok(mut s) => write_one(&mut s, u64::MAX, payload.clone()).await,
                Err(e) => Err(e),
            };
            if last.is_ok() {
                break;
            }
        }
        last
    })
    .await;
    match r {
        Ok(Ok(_)) => tracing::info!("agg: published the last changes"),
        Ok(Err(e)) => tracing::warn!("agg: last changes not published: {e}"),
        Err(_) => tracing::warn!("agg: last changes not acknowledged in {FINAL_PUBLISH_TIMEOUT:?}"),
    }
}

/// Sends one Write and waits for its WriteAck: the journal sequence.
async fn write_one(s: &mut Stream, request_id: u64, payload: Vec<u8>) -> Result<u64> {
    let proto = |e: tickdb_net::NetError| StackError::Protocol(format!("tp publish link: {e}"));
    write_message(
        s,
        &Message::Write {
            request_id,
            payload,
        },
    )
    .await
    .map_err(proto)?;
    // A TLS session may hold the tail of a write until flushed.
    s.flush().await.map_err(|e| proto(e.into()))?;
    match read_message(s).await.map_err(proto)? {
        Some(Message::WriteAck {
            request_id: id,
            seq,
            error: None,
        }) if id == request_id => Ok(seq),
        Some(Message::WriteAck { error: Some(e), .. }) => Err(StackError::Server(format!(
            "the tp refused the agg's write: {e}"
        ))),
        Some(other) => Err(StackError::Protocol(format!(
            "expected WriteAck {request_id}, got {}",
            other.name()
        ))),
        None => Err(StackError::Protocol(
            "the tp closed the publish link".into(),
        )),
    }
}

/// One connection to the tp: subscribe, fold, publish, until the link
/// breaks; returns why.
async fn session(
    a: &AggArgs,
    agg_slot: &mut Option<Aggregator>,
    next_seq: &mut u64,
    delay: &mut u64,
) -> StackError {
    match session_inner(a, agg_slot, next_seq, delay).await {
        Err(e) => e,
        Ok(never) => match never {},
    }
}

async fn session_inner(
    a: &AggArgs,
    agg_slot: &mut Option<Aggregator>,
    next_seq: &mut u64,
    delay: &mut u64,
) -> Result<std::convert::Infallible> {
    // The primary among --tp's addresses (a standby when none is).
    let tables = vec!["trade".to_string(), "quote".to_string()];
    let found = tickdb_net::follow::subscribe_any(
        &a.tp,
        *next_seq,
        &tables,
        &[],
        tickdb_net::proto::EPOCH_UNKNOWN,
    )
    .await
    .map_err(|e| StackError::Protocol(format!("tp subscription: {e}")))?;
    let tp_addr = found.addr.clone();
    let current_seq = found.current_seq;
    let mut schema = Schema::parse(&found.schema_toml, &format!("schema from tp {tp_addr}"))
        .map_err(|e| StackError::Protocol(e.to_string()))?;
    let mut sub = found.stream;
    match agg_slot {
        None => *agg_slot = Some(Aggregator::new(&schema, a.keep_minutes)?),
        Some(agg) => agg.mark_all_changed(),
    }
    let agg = agg_slot.as_mut().expect("set above");
    let mut publisher = connect(&tp_addr).await?;
    tracing::info!(
        "agg: subscribed to trade and quote at tp {} from seq {} (tp at {current_seq}); publishing trade_1m, quote_1m, daily every {} ms",
        tp_addr,
        next_seq,
        a.publish_ms
    );
    *delay = RECONNECT_DELAY_MS_MIN;

    // The socket is read by its own task: read_message is not
    // cancellation-safe, so it must not sit in a select! with the timer.
    let (tx, mut rx) = mpsc::channel::<Result<Message>>(SUB_QUEUE_MESSAGES_MAX);
    let reader = tokio::spawn(async move {
        loop {
            let m = read_message(&mut sub).await;
            let (m, stop) = match m {
                Ok(Some(m)) => (Ok(m), false),
                Ok(None) => (
                    Err(StackError::Protocol(
                        "the tp closed the subscription".into(),
                    )),
                    true,
                ),
                Err(e) => (
                    Err(StackError::Protocol(format!("tp subscription: {e}"))),
                    true,
                ),
            };
            if tx.send(m).await.is_err() || stop {
                return;
            }
        }
    });
    let _reader_guard = AbortOnDrop(reader);
    let (pub_tx, mut pub_rx) = mpsc::channel::<(u64, Vec<u8>)>(PUBLISH_IN_FLIGHT_MAX);
    let publisher_task = tokio::spawn(async move {
        while let Some((id, payload)) = pub_rx.recv().await {
            write_one(&mut publisher, id, payload).await?;
        }
        Ok::<(), StackError>(())
    });
    let mut publisher_task = AbortOnDrop(publisher_task);
    let mut tick = tokio::time::interval(Duration::from_millis(a.publish_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut request_id: u64 = 0;
    let mut last_log = std::time::Instant::now();
    loop {
        tokio::select! {
            m = rx.recv() => {
                let Some(m) = m else {
                    return Err(StackError::Protocol("subscription reader stopped".into()));
                };
                match m? {
                    Message::Update { seq, payload } => {
                        if seq < *next_seq {
                            continue;
                        }
                        if seq > *next_seq {
                            return Err(StackError::Protocol(format!(
                                "sequence gap: expected {}, got {seq}", *next_seq
                            )));
                        }
                        // Under the newest schema seen: an update from
                        // before a column was added has nulls in it.
                        let batches = tickdb_core::codec::decode_widened(&payload, &schema)
                            .map_err(|e| StackError::Protocol(format!("update {seq}: {e}")))?;
                        for b in &batches {
                            // A schema change (CREATE TABLE, ALTER TABLE):
                            // the updates after it follow the new schema.
                            if let Some((toml, _)) = b.schema_change_text() {
                                schema = Schema::parse(toml, &format!("schema change at seq {seq}"))
                                    .map_err(|e| StackError::Protocol(e.to_string()))?;
                                continue;
                            }
                            agg.fold(b)?;
                        }
                        *next_seq = seq + 1;
                    }
                    Message::Heartbeat { .. } | Message::Epoch { .. } => {}
                    Message::Error { message } => {
                        return Err(StackError::Server(format!("tp: {message}")));
                    }
                    other => {
                        return Err(StackError::Protocol(format!(
                            "unexpected {} on the subscription", other.name()
                        )));
                    }
                }
            }
            _ = tick.tick() => {
                if agg.has_changes() && pub_tx.capacity() > 0 {
                    let batches = agg.take_changes(now_ns());
                    request_id += 1;
                    let payload = tickdb_core::codec::encode_to_vec(&batches);
                    if pub_tx.send((request_id, payload)).await.is_err() {
                        break;
                    }
                    agg.counters.writes += 1;
                }
                if last_log.elapsed() >= LOG_EVERY {
                    last_log = std::time::Instant::now();
                    let c = agg.counters;
                    tracing::info!(
                        "agg: folded {} trades, {} quotes ({} late, {} with nulls); published {} rows in {} writes; {} minute bars held; at seq {}",
                        c.trades, c.quotes, c.late, c.skipped_nulls, c.rows_published, c.writes, agg.bars_held(), *next_seq - 1
                    );
                }
            }
            r = &mut publisher_task.0 => {
                return match r {
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(())) => Err(StackError::Protocol("publisher stopped".into())),
                    Err(e) => Err(StackError::Protocol(format!("publisher task: {e}"))),
                };
            }
        }
    }
    Err(StackError::Protocol("publish link closed".into()))
}

/// Aborts a task when its handle goes out of scope (a session ending
/// takes its socket tasks with it).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(schema: &Schema, table: &str, rows: &[(i64, &str, f64, f64)]) -> Batch {
        let def = schema.table(table).unwrap();
        let mut b = BatchBuilder::new(def);
        for &(t, s, x, y) in rows {
            b.set(0, Value::Timestamp(t));
            b.set(1, Value::Symbol(s));
            b.set(2, Value::F64(x));
            if table == "trade" {
                b.set(3, Value::I64(y as i64));
            } else {
                b.set(3, Value::F64(y));
                b.set(4, Value::I64(100));
                b.set(5, Value::I64(100));
            }
            b.end_row();
        }
        b.finish()
    }

    fn rows_of(b: &Batch) -> usize {
        b.rows
    }

    #[test]
    fn folds_publishes_changes_only_and_evicts_old_minutes() {
        let schema = Schema::default_schema();
        let mut agg = Aggregator::new(&schema, 2).unwrap();
        let m0 = 1_583_782_200_000_000_000i64;
        agg.fold(&batch(
            &schema,
            "trade",
            &[
                (m0 + 1, "A", 10.0, 100.0),
                (m0 + 2, "A", 11.0, 300.0),
                (m0 + 3, "B", 5.0, 10.0),
            ],
        ))
        .unwrap();
        agg.fold(&batch(&schema, "quote", &[(m0 + 4, "A", 9.99, 10.01)]))
            .unwrap();
        let out = agg.take_changes(42);
        let names: Vec<&str> = out.iter().map(|b| b.table.as_str()).collect();
        assert_eq!(names, ["trade_1m", "quote_1m", "daily"]);
        assert_eq!(out.iter().map(rows_of).collect::<Vec<_>>(), [2, 1, 2]);
        let t = &out[0];
        // Row 0 is A (first symbol seen), minute m0.
        assert_eq!(t.columns[2].data, ColumnData::F64(vec![10.0, 5.0])); // open
        assert_eq!(t.columns[5].data, ColumnData::F64(vec![11.0, 5.0])); // close
        assert_eq!(t.columns[6].data, ColumnData::I64(vec![400, 10])); // volume
        assert_eq!(t.columns[7].data, ColumnData::F64(vec![10.75, 5.0])); // vwap
        assert_eq!(
            t.columns[9].data,
            ColumnData::Timestamp(vec![m0 + 2, m0 + 3])
        );
        assert_eq!(t.columns[10].data, ColumnData::Timestamp(vec![42, 42]));
        // The daily row of B has no quote: its quote fields are null.
        let d = &out[2];
        assert_eq!(d.columns[9].data, ColumnData::I64(vec![1, 0])); // quotes
        assert!(!d.columns[10].is_valid(1));
        assert!(!agg.has_changes());
        assert!(agg.take_changes(43).is_empty());
        // Only B changes next.
        agg.fold(&batch(&schema, "trade", &[(m0 + 5, "B", 6.0, 10.0)]))
            .unwrap();
        let out = agg.take_changes(44);
        assert_eq!(out.iter().map(rows_of).collect::<Vec<_>>(), [1, 1]);
        // Three minutes later the first minute's bars are dropped; a tick
        // for it is late (kept out of the minute bars, counted).
        let m3 = m0 + 3 * NS_PER_MINUTE;
        agg.fold(&batch(&schema, "trade", &[(m3, "A", 12.0, 1.0)]))
            .unwrap();
        agg.take_changes(45);
        assert_eq!(agg.bars_held(), 1);
        agg.fold(&batch(&schema, "trade", &[(m0 + 9, "A", 1.0, 1.0)]))
            .unwrap();
        assert_eq!(agg.counters.late, 1);
        assert_eq!(agg.counters.trades, 6);
        let out = agg.take_changes(46);
        assert_eq!(
            out.iter().map(|b| b.table.as_str()).collect::<Vec<_>>(),
            ["daily"]
        );
    }

    #[test]
    fn after_a_broken_link_everything_held_is_sent_again() {
        let schema = Schema::default_schema();
        let mut agg = Aggregator::new(&schema, 10).unwrap();
        agg.fold(&batch(
            &schema,
            "trade",
            &[(1, "A", 1.0, 1.0), (2, "B", 1.0, 1.0)],
        ))
        .unwrap();
        agg.fold(&batch(&schema, "quote", &[(3, "A", 1.0, 1.1)]))
            .unwrap();
        assert_eq!(agg.take_changes(4).iter().map(rows_of).sum::<usize>(), 5);
        agg.mark_all_changed();
        assert_eq!(agg.take_changes(5).iter().map(rows_of).sum::<usize>(), 5);
    }

    #[test]
    fn payload_decodes_against_the_default_schema() {
        let schema = Schema::default_schema();
        let mut agg = Aggregator::new(&schema, 10).unwrap();
        agg.fold(&batch(&schema, "trade", &[(1, "A", 1.0, 1.0)]))
            .unwrap();
        let enc = tickdb_core::codec::encode_to_vec(&agg.take_changes(2));
        let back = tickdb_core::codec::decode(&enc, Some(&schema)).unwrap();
        assert_eq!(back.len(), 2);
    }

    #[test]
    fn schema_without_the_tables_is_refused_with_a_hint() {
        let s = Schema::parse(
            "[[table]]\nname='trade'\ncolumn=[{name='time',type='timestamp'},{name='sym',type='symbol'},{name='price',type='f64'},{name='size',type='i64'}]\n\
             [[table]]\nname='quote'\ncolumn=[{name='time',type='timestamp'},{name='sym',type='symbol'},{name='bid',type='f64'},{name='ask',type='f64'}]",
            "t",
        )
        .unwrap();
        let e = Aggregator::new(&s, 10).err().unwrap().to_string();
        assert!(e.contains("no table 'trade_1m'"), "{e}");
    }
}
