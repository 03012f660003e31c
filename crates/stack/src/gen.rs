//! The market simulator: a seeded, reproducible stream of trades and quotes
//! over a symbol universe with skewed activity.
//!
//! - Activity is Zipf-like: symbol i (0-based rank) is picked with weight
//!   1/(i+1)^skew, so with the defaults (2000 symbols, skew 1) the most
//!   active symbol gets about 12% of all updates and the median one a few
//!   hundredths of a percent, like a real tape.
//! - Exactly one update in `UPDATES_PER_TRADE` is a trade, the rest quotes:
//!   the seed's 1:10 ratio at any rate.
//! - Each symbol's mid price follows a slowly mean-reverting random walk in
//!   log space (it stays within about ±10% of where it started over a day);
//!   prices are whole cents, a quote's bid is always below its ask, and a
//!   trade prints at the bid, the ask or in between.
//! - Sizes: quotes 100–2000 a side in round lots; trades mostly round lots
//!   with a geometric tail, one in five an odd lot.
//!
//! The stream is a pure function of (seed, symbols, skew); the caller
//! stamps each update with its generation time.

use crate::error::{Result, StackError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;

/// One update in this many is a trade: trades and quotes 1:10.
pub const UPDATES_PER_TRADE: u64 = 11;
/// Prices are whole cents.
pub const CENTS_PER_DOLLAR: i64 = 100;
/// The largest symbol universe accepted (4-letter names run out past 26^4).
pub const SYMBOLS_MAX: usize = 200_000;
/// Per-update volatility of the log mid price.
const STEP_SIGMA: f64 = 0.0004;
/// Pull of the log mid back to where it started, per update; with
/// STEP_SIGMA the walk's stationary spread is about ±9%.
const MEAN_REVERSION: f64 = 1e-5;
/// Typical quoted spread, in basis points of the mid (at least one cent).
const SPREAD_BPS: f64 = 3.0;
/// Starting prices are log-uniform in this range, in dollars.
const PRICE_MIN_DOLLARS: f64 = 5.0;
const PRICE_MAX_DOLLARS: f64 = 500.0;
/// The most active names get real tickers; the rest synthetic ones.
const REAL_TICKERS: [&str; 24] = [
    "SPY", "AAPL", "MSFT", "AMZN", "TSLA", "QQQ", "FB", "NVDA", "AMD", "BAC", "GOOGL", "NFLX",
    "INTC", "BA", "XOM", "JPM", "CSCO", "DIS", "WFC", "C", "T", "PFE", "KO", "GE",
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tick {
    Trade {
        sym: u32,
        /// Cents.
        price: i64,
        size: i64,
    },
    Quote {
        sym: u32,
        /// Cents; bid < ask.
        bid: i64,
        ask: i64,
        bsize: i64,
        asize: i64,
    },
}

impl Tick {
    pub fn sym(&self) -> u32 {
        match self {
            Tick::Trade { sym, .. } | Tick::Quote { sym, .. } => *sym,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    pub seed: u64,
    pub symbols: usize,
    /// Zipf exponent of symbol activity: 0 = uniform, 1 = classic Zipf.
    pub skew: f64,
}

pub struct MarketSim {
    rng: StdRng,
    names: Vec<String>,
    /// Cumulative activity weights, for picking a symbol by binary search.
    cumulative: Vec<f64>,
    log_mid: Vec<f64>,
    log_mid0: Vec<f64>,
    updates: u64,
}

/// Cents as a price in dollars (the nearest f64, the same value an ILP
/// parser reads back from the text `units.cents`).
pub fn dollars(cents: i64) -> f64 {
    cents as f64 / CENTS_PER_DOLLAR as f64
}

/// The symbol names of a universe of `n`: real tickers first, then
/// distinct synthetic four-letter ones. Deterministic.
pub fn symbol_names(n: usize) -> Vec<String> {
    let mut names: Vec<String> = REAL_TICKERS.iter().take(n).map(|s| s.to_string()).collect();
    let mut seen: HashSet<String> = names.iter().cloned().collect();
    // Multiplying by a number coprime to 26^4 permutes the 4-letter space,
    // so the names spread over the alphabet and never repeat.
    const SPACE: u64 = 26 * 26 * 26 * 26;
    let mut k: u64 = 0;
    while names.len() < n {
        let mut x = (k * 7919 + 12_345) % SPACE;
        k += 1;
        let mut s = String::with_capacity(4);
        for _ in 0..4 {
            s.push((b'A' + (x % 26) as u8) as char);
            x /= 26;
        }
        if seen.insert(s.clone()) {
            names.push(s);
        }
    }
    names
}

impl MarketSim {
    pub fn new(cfg: SimConfig) -> Result<MarketSim> {
        if cfg.symbols == 0 || cfg.symbols > SYMBOLS_MAX {
            return Err(StackError::BadInput(format!(
                "--symbols {} must be 1 to {SYMBOLS_MAX}",
                cfg.symbols
            )));
        }
        if !(0.0..=4.0).contains(&cfg.skew) {
            return Err(StackError::BadInput(format!(
                "--skew {} must be between 0 and 4",
                cfg.skew
            )));
        }
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let names = symbol_names(cfg.symbols);
        let mut cumulative = Vec::with_capacity(cfg.symbols);
        let mut acc = 0.0;
        for i in 0..cfg.symbols {
            acc += 1.0 / ((i + 1) as f64).powf(cfg.skew);
            cumulative.push(acc);
        }
        let (lo, hi) = (PRICE_MIN_DOLLARS.ln(), PRICE_MAX_DOLLARS.ln());
        let log_mid0: Vec<f64> = (0..cfg.symbols).map(|_| rng.random_range(lo..hi)).collect();
        Ok(MarketSim {
            rng,
            names,
            cumulative,
            log_mid: log_mid0.clone(),
            log_mid0,
            updates: 0,
        })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn name(&self, sym: u32) -> &str {
        &self.names[sym as usize]
    }

    /// Picks a symbol by activity weight.
    fn pick(&mut self) -> usize {
        let total = *self.cumulative.last().unwrap_or(&1.0);
        let x = self.rng.random::<f64>() * total;
        self.cumulative
            .partition_point(|&c| c <= x)
            .min(self.cumulative.len() - 1)
    }

    /// An approximately standard normal draw (Irwin–Hall of 4 uniforms):
    /// cheap and needs no distribution crate.
    fn normalish(&mut self) -> f64 {
        let s: f64 = (0..4).map(|_| self.rng.random::<f64>()).sum();
        (s - 2.0) * 3.0f64.sqrt()
    }

    /// The next update.
    pub fn next_tick(&mut self) -> Tick {
        let s = self.pick();
        let z = self.normalish();
        let lm = self.log_mid[s];
        self.log_mid[s] = lm + STEP_SIGMA * z - MEAN_REVERSION * (lm - self.log_mid0[s]);
        let mid_cents = self.log_mid[s].exp() * CENTS_PER_DOLLAR as f64;
        let spread_cents = ((mid_cents * SPREAD_BPS / 10_000.0) * self.rng.random_range(0.5..1.5))
            .round()
            .max(1.0) as i64;
        let bid = ((mid_cents - spread_cents as f64 / 2.0).round() as i64).max(1);
        let ask = bid + spread_cents;
        self.updates += 1;
        let sym = s as u32;
        if self.updates.is_multiple_of(UPDATES_PER_TRADE) {
            let price = self.rng.random_range(bid..=ask);
            let size = if self.rng.random_range(0..5) == 0 {
                self.rng.random_range(1..100)
            } else {
                // Round lots with a geometric tail: P(k+1 lots) = 0.7^k * 0.3.
                let mut lots = 1;
                while lots < 100 && self.rng.random::<f64>() < 0.7 {
                    lots += 1;
                }
                lots * 100
            };
            Tick::Trade { sym, price, size }
        } else {
            Tick::Quote {
                sym,
                bid,
                ask,
                bsize: self.rng.random_range(1..=20) * 100,
                asize: self.rng.random_range(1..=20) * 100,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> u64 {
        let s = std::env::var("TICKDB_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| crate::clock::now_ns() as u64);
        println!("seed {s} (rerun with TICKDB_SEED={s})");
        s
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let s = seed();
        let cfg = SimConfig {
            seed: s,
            symbols: 500,
            skew: 1.0,
        };
        let mut a = MarketSim::new(cfg).unwrap();
        let mut b = MarketSim::new(cfg).unwrap();
        let xs: Vec<Tick> = (0..20_000).map(|_| a.next_tick()).collect();
        let ys: Vec<Tick> = (0..20_000).map(|_| b.next_tick()).collect();
        assert_eq!(xs, ys);
        let mut c = MarketSim::new(SimConfig {
            seed: s.wrapping_add(1),
            ..cfg
        })
        .unwrap();
        let zs: Vec<Tick> = (0..20_000).map(|_| c.next_tick()).collect();
        assert_ne!(xs, zs);
    }

    #[test]
    fn ratio_prices_sizes_and_skew_are_plausible() {
        let s = seed();
        let mut sim = MarketSim::new(SimConfig {
            seed: s,
            symbols: 2000,
            skew: 1.0,
        })
        .unwrap();
        let n = 110_000;
        let mut trades = 0;
        let mut per_sym = vec![0u64; 2000];
        for _ in 0..n {
            let t = sim.next_tick();
            per_sym[t.sym() as usize] += 1;
            match t {
                Tick::Trade { price, size, .. } => {
                    trades += 1;
                    assert!(price >= 1 && (1..=10_000).contains(&size), "{t:?}");
                }
                Tick::Quote {
                    bid,
                    ask,
                    bsize,
                    asize,
                    ..
                } => {
                    assert!(bid >= 1 && bid < ask, "{t:?}");
                    assert!(ask - bid <= 1 + ask / 1000, "spread too wide: {t:?}");
                    assert!(bsize >= 100 && asize >= 100 && bsize % 100 == 0, "{t:?}");
                }
            }
        }
        assert_eq!(trades, n / 11, "exactly one update in 11 is a trade");
        // Zipf: the top symbol gets about 1/H(2000) ≈ 12% of the updates,
        // far more than the median symbol.
        let top = per_sym[0] as f64 / n as f64;
        assert!((0.09..0.16).contains(&top), "top share {top}");
        let mut sorted = per_sym.clone();
        sorted.sort();
        assert!(sorted[1000] * 50 < per_sym[0], "median {}", sorted[1000]);
    }

    #[test]
    fn names_are_distinct_tickers() {
        let names = symbol_names(5000);
        let set: HashSet<_> = names.iter().collect();
        assert_eq!(set.len(), 5000);
        assert_eq!(names[0], "SPY");
        assert!(names
            .iter()
            .all(|n| !n.is_empty() && n.len() <= 5 && n.bytes().all(|b| b.is_ascii_uppercase())));
    }

    #[test]
    fn bad_configs_are_refused() {
        for (symbols, skew) in [(0, 1.0), (SYMBOLS_MAX + 1, 1.0), (10, -1.0)] {
            assert!(MarketSim::new(SimConfig {
                seed: 1,
                symbols,
                skew
            })
            .is_err());
        }
    }
}
