//! `tickdb up --demo-feed RATE`: a built-in simulated feed, so a newcomer
//! sees data flow at once. Trades and quotes 1:10, a skewed symbol universe,
//! random-walk mid prices with bid below ask. (The full simulator with
//! prestress and a seed is `tickdb feed`'s job.)

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_tp::Tickerplant;

/// Symbols in the demo universe.
pub const DEMO_SYMBOLS: usize = 100;
/// The feed writes one update per tick.
pub const TICK_MS: u64 = 10;

pub async fn run(tp: Arc<Tickerplant>, rate: u64) {
    let schema = tp.schema().clone();
    let (Some(trade), Some(quote)) = (schema.table("trade"), schema.table("quote")) else {
        tracing::error!("--demo-feed needs the default trade and quote tables in the schema");
        return;
    };
    let mut rng = StdRng::seed_from_u64(48_000);
    let syms: Vec<String> = (0..DEMO_SYMBOLS).map(|i| format!("S{i:03}")).collect();
    // Zipf-like activity: symbol i is picked with weight 1/(i+1).
    let weights: Vec<f64> = (0..DEMO_SYMBOLS).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let total_w: f64 = weights.iter().sum();
    let mut mid: Vec<f64> = (0..DEMO_SYMBOLS).map(|i| 20.0 + (i as f64) * 3.0).collect();
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
            let mut pick = rng.random::<f64>() * total_w;
            let mut s = 0;
            while s + 1 < DEMO_SYMBOLS && pick > weights[s] {
                pick -= weights[s];
                s += 1;
            }
            mid[s] = (mid[s] * (1.0 + (rng.random::<f64>() - 0.5) * 0.001)).max(0.01);
            let now = tickdb_tp::now_ns();
            let px = (mid[s] * 100.0).round() / 100.0;
            if rng.random_range(0..11) == 0 {
                t.set(0, Value::Timestamp(now));
                t.set(1, Value::Symbol(&syms[s]));
                t.set(2, Value::F64(px));
                t.set(3, Value::I64(rng.random_range(1..50) * 100));
                t.end_row();
            } else {
                let half = 0.01 * rng.random_range(1..4) as f64;
                q.set(0, Value::Timestamp(now));
                q.set(1, Value::Symbol(&syms[s]));
                q.set(2, Value::F64(((px - half) * 100.0).round() / 100.0));
                q.set(3, Value::F64(((px + half) * 100.0).round() / 100.0));
                q.set(4, Value::I64(rng.random_range(1..20) * 100));
                q.set(5, Value::I64(rng.random_range(1..20) * 100));
                q.end_row();
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
