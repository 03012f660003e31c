//! The market simulator: a seeded, reproducible stream of trades and quotes
//! over a symbol universe with skewed activity.
//!
//! - Activity is Zipf-like: symbol i (0-based rank) is picked with weight
//!   1/(i+1)^skew, so with the defaults (2000 symbols, skew 1) the most
//!   active symbol gets about 12% of all updates and the median one a few
//!   hundredths of a percent, like a real tape.
//! - Exactly one update in `UPDATES_PER_TRADE` is a trade, the rest quotes:
//!   the 1:10 ratio of the Intel Optane kdb+ market-data study, at any rate.
//! - The most active names are real tickers (SPY, AAPL, MSFT, ...) and start
//!   within 1% of a plausible recent price from a fixed table (SPY near
//!   $450, AAPL near $190, NVDA near $120, ...); the rest are synthetic
//!   four-letter names with log-uniform starting prices of $5–$500. These are
//!   made-up prices near recent levels, not a replay of any real day.
//! - Each symbol's mid price follows a mean-reverting random walk in log
//!   space (Ornstein–Uhlenbeck) that stays near its start: a standard
//!   deviation of `STATIONARY_SD` (0.5%) around it, so a day's range is a
//!   couple of percent. Each symbol's step size and pull scale with its
//!   share of the updates, so every name wanders on the same clock: at the
//!   default 48,000 updates/s the walk's memory is about half an hour,
//!   whatever the symbol's activity (the liquid names move a fraction of a
//!   cent per quote, the rarely quoted ones more per quote).
//! - Prices are whole cents. A quote's spread is the symbol's typical
//!   spread four times in five and wider otherwise: one cent for the most
//!   liquid names (SPY, AAPL, MSFT, QQQ, ...), a few cents for high-priced
//!   ones (META, NFLX), and for synthetic names a few basis points of the
//!   price, wider the less active the name (at least a cent). The bid is
//!   always below the ask, and a trade prints at the bid, the ask or in
//!   between.
//! - Sizes: quotes 100–2000 a side in round lots; trades mostly round lots
//!   with a geometric tail, one in five an odd lot.
//!
//! The stream is a pure function of (seed, symbols, skew), whatever the
//! rate; the caller stamps each update with its generation time.

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
/// The standard deviation of a log mid around its start, once the walk has
/// forgotten where it began.
const STATIONARY_SD: f64 = 0.005;
/// The walk's memory, in updates over the whole universe: 30 minutes at
/// the default 48,000 updates/s. A symbol with share p of the updates is
/// pulled back to its start by `1 / (RELAX_UPDATES * p)` of its distance per
/// update of its own, so every symbol relaxes on the same clock.
const RELAX_UPDATES: f64 = 48_000.0 * 1800.0;
/// The largest per-update pull (for names quoted once in a blue moon).
const PULL_MAX: f64 = 0.05;
/// A starting price of a real ticker is its table price within this
/// fraction either way, by the seed.
const REAL_JITTER: f64 = 0.01;
/// Synthetic names start log-uniform in this range, in dollars.
const PRICE_MIN_DOLLARS: f64 = 5.0;
const PRICE_MAX_DOLLARS: f64 = 500.0;
/// Synthetic names' typical spread, in basis points of the price: this at
/// the first synthetic rank, growing by `SPREAD_BPS_PER_DECADE` for every
/// tenfold lower activity rank.
const SPREAD_BPS_MIN: f64 = 2.0;
const SPREAD_BPS_PER_DECADE: f64 = 4.0;
/// One quote in this many is wider than the symbol's typical spread.
const WIDE_QUOTE_ONE_IN: u32 = 5;
/// The most active names get real tickers, in order of activity, each with
/// a plausible recent price in dollars and its typical spread in cents; the
/// rest get synthetic names.
const REAL_TICKERS: [(&str, f64, i64); 24] = [
    ("SPY", 450.0, 1),
    ("AAPL", 190.0, 1),
    ("MSFT", 420.0, 1),
    ("AMZN", 180.0, 1),
    ("TSLA", 250.0, 2),
    ("QQQ", 440.0, 1),
    ("META", 480.0, 3),
    ("NVDA", 120.0, 1),
    ("AMD", 160.0, 1),
    ("BAC", 38.0, 1),
    ("GOOGL", 170.0, 1),
    ("NFLX", 620.0, 5),
    ("INTC", 31.0, 1),
    ("BA", 180.0, 3),
    ("XOM", 115.0, 1),
    ("JPM", 200.0, 2),
    ("CSCO", 48.0, 1),
    ("DIS", 100.0, 1),
    ("WFC", 58.0, 1),
    ("C", 62.0, 1),
    ("T", 18.0, 1),
    ("PFE", 28.0, 1),
    ("KO", 62.0, 1),
    ("GE", 160.0, 2),
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
    /// Per symbol: the walk's pull back to the start per update, and its
    /// step's standard deviation.
    pull: Vec<f64>,
    step_sd: Vec<f64>,
    /// Per symbol: the typical quoted spread in cents (at least 1).
    spread: Vec<i64>,
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
    let mut names: Vec<String> = REAL_TICKERS
        .iter()
        .take(n)
        .map(|(s, _, _)| s.to_string())
        .collect();
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
        Self::with_memory(cfg, RELAX_UPDATES)
    }

    /// A simulator whose walks forget their past over `relax_updates`
    /// updates of the universe (tests speed the clock up with it).
    fn with_memory(cfg: SimConfig, relax_updates: f64) -> Result<MarketSim> {
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
        let weights: Vec<f64> = (0..cfg.symbols)
            .map(|i| 1.0 / ((i + 1) as f64).powf(cfg.skew))
            .collect();
        let mut cumulative = Vec::with_capacity(cfg.symbols);
        let mut acc = 0.0;
        for w in &weights {
            acc += w;
            cumulative.push(acc);
        }
        let total = acc;
        let (lo, hi) = (PRICE_MIN_DOLLARS.ln(), PRICE_MAX_DOLLARS.ln());
        let jitter = (1.0 + REAL_JITTER).ln();
        let mut log_mid0 = Vec::with_capacity(cfg.symbols);
        let mut spread = Vec::with_capacity(cfg.symbols);
        for i in 0..cfg.symbols {
            match REAL_TICKERS.get(i) {
                Some(&(_, dollars, cents)) => {
                    log_mid0.push(dollars.ln() + rng.random_range(-jitter..jitter));
                    spread.push(cents);
                }
                None => {
                    let lm: f64 = rng.random_range(lo..hi);
                    let bps = SPREAD_BPS_MIN
                        + SPREAD_BPS_PER_DECADE
                            * ((i + 1) as f64 / REAL_TICKERS.len() as f64).log10();
                    let cents = lm.exp() * CENTS_PER_DOLLAR as f64 * bps / 10_000.0;
                    log_mid0.push(lm);
                    spread.push((cents.round() as i64).max(1));
                }
            }
        }
        // An Ornstein–Uhlenbeck walk x' = x + sd * z - pull * x has the
        // stationary variance sd^2 / (2 pull - pull^2).
        let pull: Vec<f64> = weights
            .iter()
            .map(|w| (total / w / relax_updates).min(PULL_MAX))
            .collect();
        let step_sd = pull
            .iter()
            .map(|k| STATIONARY_SD * (2.0 * k - k * k).sqrt())
            .collect();
        Ok(MarketSim {
            rng,
            names,
            cumulative,
            log_mid: log_mid0.clone(),
            log_mid0,
            pull,
            step_sd,
            spread,
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

    /// One step of symbol `s`'s walk.
    fn walk(&mut self, s: usize) {
        let z = self.normalish();
        let lm = self.log_mid[s];
        self.log_mid[s] = lm + self.step_sd[s] * z - self.pull[s] * (lm - self.log_mid0[s]);
    }

    /// The next update.
    pub fn next_tick(&mut self) -> Tick {
        let s = self.pick();
        self.walk(s);
        let mid_cents = self.log_mid[s].exp() * CENTS_PER_DOLLAR as f64;
        let typical = self.spread[s];
        let spread_cents = if self.rng.random_range(0..WIDE_QUOTE_ONE_IN) == 0 {
            typical + self.rng.random_range(1..=typical.max(2))
        } else {
            typical
        };
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
        tickdb_core::testing::seed("market simulator")
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
                    // Typical spreads reach 10 bp in a 2000-name universe,
                    // a wide quote twice that: at most 25 bp (or 4 cents,
                    // for the rounding of cheap names).
                    assert!(ask - bid <= (ask / 400).max(4), "spread too wide: {t:?}");
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

    /// Updates a day at the default rate: 48,000 a second for 6.5 hours.
    const DAY_UPDATES: f64 = 48_000.0 * 6.5 * 3600.0;

    fn share(sim: &MarketSim, s: usize) -> f64 {
        let total = *sim.cumulative.last().unwrap();
        let below = if s == 0 { 0.0 } else { sim.cumulative[s - 1] };
        (sim.cumulative[s] - below) / total
    }

    #[test]
    fn real_tickers_stay_within_a_few_percent_of_their_prices_over_a_day() {
        // A day at the default rate takes SPY's walk 137M steps and AAPL's
        // 69M: half a minute in a debug build. The test runs the day on a
        // clock sped up SPEEDUP times instead, the walk's memory and the
        // day's updates both divided by it: the same 13 memories a day and
        // the same spread around the start, in steps SPEEDUP^0.5 larger.
        const SPEEDUP: f64 = 50.0;
        let s = seed();
        let cfg = SimConfig {
            seed: s,
            symbols: 2000,
            skew: 1.0,
        };
        let real = MarketSim::new(cfg).unwrap();
        let mut sim = MarketSim::with_memory(cfg, RELAX_UPDATES / SPEEDUP).unwrap();
        for (sym, name, dollars) in [(0, "SPY", 450.0f64), (1, "AAPL", 190.0)] {
            assert_eq!(sim.name(sym as u32), name);
            assert_eq!(sim.log_mid[sym], real.log_mid[sym]);
            assert!((sim.log_mid[sym] - dollars.ln()).abs() <= (1.0 + REAL_JITTER).ln());
            // At the real clock, a quote moves the mid a fraction of a cent.
            assert!(
                real.step_sd[sym] * dollars * 100.0 < 0.2,
                "{}",
                real.step_sd[sym]
            );
            let steps = (DAY_UPDATES * share(&sim, sym) / SPEEDUP) as u64;
            let (mut lo, mut hi) = (f64::MAX, f64::MIN);
            for _ in 0..steps {
                sim.walk(sym);
                lo = lo.min(sim.log_mid[sym]);
                hi = hi.max(sim.log_mid[sym]);
            }
            let (low, high) = (lo.exp(), hi.exp());
            println!("{name}: {steps} steps, low {low:.2} high {high:.2}");
            assert!(
                low > dollars * 0.96 && high < dollars * 1.04,
                "{name} wandered to {low:.2}..{high:.2} over a day"
            );
            // It moves, by a day's range of a couple of percent.
            let range = high / low - 1.0;
            assert!((0.003..0.06).contains(&range), "{name}: day range {range}");
        }
    }

    #[test]
    fn top_names_quote_real_prices_mostly_a_cent_wide() {
        let s = seed();
        let mut sim = MarketSim::new(SimConfig {
            seed: s,
            symbols: 2000,
            skew: 1.0,
        })
        .unwrap();
        // (quotes, one-cent quotes) of SPY, AAPL, MSFT, AMZN.
        let mut counts = [(0u64, 0u64); 4];
        for _ in 0..200_000 {
            let t = sim.next_tick();
            let sym = t.sym() as usize;
            let Some(&(name, dollars, _)) = REAL_TICKERS.get(sym) else {
                continue;
            };
            let cents = (dollars * CENTS_PER_DOLLAR as f64) as i64;
            let near = cents * 97 / 100..=cents * 103 / 100;
            match t {
                Tick::Quote { bid, ask, .. } => {
                    assert!(near.contains(&bid) && near.contains(&ask), "{name}: {t:?}");
                    if let Some(c) = counts.get_mut(sym) {
                        c.0 += 1;
                        c.1 += u64::from(ask - bid == 1);
                    }
                }
                Tick::Trade { price, .. } => assert!(near.contains(&price), "{name}: {t:?}"),
            }
        }
        for (i, (quotes, one_cent)) in counts.iter().enumerate() {
            let frac = *one_cent as f64 / *quotes as f64;
            assert!(
                *quotes > 1000 && (0.7..0.9).contains(&frac),
                "{}: {one_cent} of {quotes} quotes one cent wide",
                REAL_TICKERS[i].0
            );
        }
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
