//! `tickdb up --demo-feed RATE`: a built-in simulated feed, so a newcomer
//! sees data flow at once. It draws from the same simulator as `tickdb
//! feed` (tickdb-stack's `gen`: trades and quotes 1:10, skewed symbol
//! activity, prices near real ones with bid below ask) and writes in process,
//! without a network hop. (`tickdb feed` adds prestress, a seed flag, ILP
//! over TCP or HTTP and a summary.)

use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_stack::clock::TickClock;
use tickdb_stack::gen::{dollars, MarketSim, SimConfig, Tick};
use tickdb_tp::Tickerplant;

/// Symbols in the demo universe.
pub const DEMO_SYMBOLS: usize = 100;
/// The demo's fixed seed: the same symbols and prices every time.
pub const DEMO_SEED: u64 = 48_000;
/// The feed writes one update per tick.
pub const TICK_MS: u64 = 10;

pub async fn run(tp: Arc<Tickerplant>, rate: u64) {
    let schema = tp.schema().clone();
    let (Some(trade), Some(quote)) = (schema.table("trade"), schema.table("quote")) else {
        tracing::error!("--demo-feed needs the default trade and quote tables in the schema");
        return;
    };
    let mut sim = match MarketSim::new(SimConfig {
        seed: DEMO_SEED,
        symbols: DEMO_SYMBOLS,
        skew: 1.0,
    }) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("demo feed: {e}");
            return;
        }
    };
    let mut clock = TickClock::default();
    let per_tick = (rate as f64 * TICK_MS as f64 / 1000.0).max(1.0);
    let mut carry = 0.0f64;
    let started = Instant::now();
    let mut sent: u64 = 0;
    let mut last_log = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tracing::info!("demo feed: {rate} updates/s over {DEMO_SYMBOLS} symbols, trades:quotes 1:10");
    loop {
        tick.tick().await;
        carry += per_tick;
        let n = carry as usize;
        carry -= n as f64;
        let mut t = BatchBuilder::new(trade);
        let mut q = BatchBuilder::new(quote);
        for _ in 0..n {
            let tk = sim.next_tick();
            let now = clock.stamp();
            let sym = sim.name(tk.sym());
            match tk {
                Tick::Trade { price, size, .. } => {
                    t.set(0, Value::Timestamp(now));
                    t.set(1, Value::Symbol(sym));
                    t.set(2, Value::F64(dollars(price)));
                    t.set(3, Value::I64(size));
                    t.end_row();
                }
                Tick::Quote {
                    bid,
                    ask,
                    bsize,
                    asize,
                    ..
                } => {
                    q.set(0, Value::Timestamp(now));
                    q.set(1, Value::Symbol(sym));
                    q.set(2, Value::F64(dollars(bid)));
                    q.set(3, Value::F64(dollars(ask)));
                    q.set(4, Value::I64(bsize));
                    q.set(5, Value::I64(asize));
                    q.end_row();
                }
            }
        }
        let batches: Vec<_> = [t.finish(), q.finish()]
            .into_iter()
            .filter(|b| b.rows > 0)
            .collect();
        if batches.is_empty() {
            continue;
        }
        sent += batches.iter().map(|b| b.rows as u64).sum::<u64>();
        if let Err(e) = tp.write(batches).await {
            tracing::error!("demo feed stopped: {e}");
            return;
        }
        if last_log.elapsed() >= Duration::from_secs(5) {
            last_log = Instant::now();
            tracing::info!(
                "demo feed: {sent} updates in {:.0}s ({:.0}/s), tp seq {}",
                started.elapsed().as_secs_f64(),
                sent as f64 / started.elapsed().as_secs_f64(),
                tp.seq()
            );
        }
    }
}
