//! The bar arithmetic of the aggregation engine, pure and order-robust.
//!
//! What the fields mean (also in docs/stack.md):
//! - A trade bar covers one symbol's trades whose `time` falls in one
//!   minute [start, start + 60 s). open/close are the prices of the trades
//!   with the earliest/latest `time` (on equal times: the first to arrive
//!   opens, the last to arrive closes), high/low the extremes, volume the
//!   sum of sizes, vwap = Σ price·size / Σ size, trades the number of
//!   trades.
//! - A quote bar covers one symbol's quotes in one minute: quotes is their
//!   number, bid/ask the latest quote's, mid = (bid + ask) / 2 with
//!   open/high/low/close as for trades, avg_spread the plain mean of
//!   (ask − bid) over the quotes (each quote update counts once; not
//!   time-weighted).
//! - Daily stats are a trade bar and a quote bar over one UTC day.
//! - `last_time` is the latest `time` folded in: the generation time of
//!   the newest tick behind the row, which the monitor measures
//!   aggregated-row latency from.

use crate::clock::{NS_PER_DAY, NS_PER_MINUTE};

/// The start of the minute holding `t` (ns since the epoch).
pub fn minute_start(t: i64) -> i64 {
    t - t.rem_euclid(NS_PER_MINUTE)
}

/// The start of the UTC day holding `t`.
pub fn day_start(t: i64) -> i64 {
    t - t.rem_euclid(NS_PER_DAY)
}

#[derive(Debug, Clone, PartialEq)]
pub struct TradeBar {
    pub open: f64,
    pub high: f64,
    pub low: f64,
    pub close: f64,
    pub volume: i64,
    /// Σ price·size, for the vwap.
    pub notional: f64,
    pub trades: i64,
    pub first_time: i64,
    pub last_time: i64,
}

impl TradeBar {
    pub fn new(price: f64, size: i64, time: i64) -> TradeBar {
        TradeBar {
            open: price,
            high: price,
            low: price,
            close: price,
            volume: size,
            notional: price * size as f64,
            trades: 1,
            first_time: time,
            last_time: time,
        }
    }

    /// Folds in one trade (any arrival order).
    pub fn add(&mut self, price: f64, size: i64, time: i64) {
        if time < self.first_time {
            self.first_time = time;
            self.open = price;
        }
        if time >= self.last_time {
            self.last_time = time;
            self.close = price;
        }
        self.high = self.high.max(price);
        self.low = self.low.min(price);
        self.volume = self.volume.saturating_add(size);
        self.notional += price * size as f64;
        self.trades += 1;
    }

    /// Volume-weighted average price; None when the volume is zero.
    pub fn vwap(&self) -> Option<f64> {
        (self.volume != 0).then(|| self.notional / self.volume as f64)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct QuoteBar {
    pub quotes: i64,
    /// The latest quote's bid and ask.
    pub bid: f64,
    pub ask: f64,
    pub mid_open: f64,
    pub mid_high: f64,
    pub mid_low: f64,
    pub mid_close: f64,
    /// Σ (ask − bid), for the average spread.
    pub spread_sum: f64,
    pub first_time: i64,
    pub last_time: i64,
}

impl QuoteBar {
    pub fn new(bid: f64, ask: f64, time: i64) -> QuoteBar {
        let mid = (bid + ask) / 2.0;
        QuoteBar {
            quotes: 1,
            bid,
            ask,
            mid_open: mid,
            mid_high: mid,
            mid_low: mid,
            mid_close: mid,
            spread_sum: ask - bid,
            first_time: time,
            last_time: time,
        }
    }

    pub fn add(&mut self, bid: f64, ask: f64, time: i64) {
        let mid = (bid + ask) / 2.0;
        if time < self.first_time {
            self.first_time = time;
            self.mid_open = mid;
        }
        if time >= self.last_time {
            self.last_time = time;
            self.mid_close = mid;
            self.bid = bid;
            self.ask = ask;
        }
        self.mid_high = self.mid_high.max(mid);
        self.mid_low = self.mid_low.min(mid);
        self.spread_sum += ask - bid;
        self.quotes += 1;
    }

    pub fn avg_spread(&self) -> f64 {
        self.spread_sum / self.quotes as f64
    }
}

/// What happened to a tick folded into daily stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    Applied,
    /// The tick belongs to a day before the current one: ignored.
    Late,
}

/// One symbol's stats over one UTC day; a tick of a later day starts over.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyStats {
    pub day: i64,
    pub trade: Option<TradeBar>,
    pub quote: Option<QuoteBar>,
}

impl DailyStats {
    pub fn new(time: i64) -> DailyStats {
        DailyStats {
            day: day_start(time),
            trade: None,
            quote: None,
        }
    }

    fn roll(&mut self, time: i64) -> Fold {
        let day = day_start(time);
        if day < self.day {
            return Fold::Late;
        }
        if day > self.day {
            *self = DailyStats::new(time);
        }
        Fold::Applied
    }

    pub fn add_trade(&mut self, price: f64, size: i64, time: i64) -> Fold {
        if self.roll(time) == Fold::Late {
            return Fold::Late;
        }
        match &mut self.trade {
            Some(b) => b.add(price, size, time),
            None => self.trade = Some(TradeBar::new(price, size, time)),
        }
        Fold::Applied
    }

    pub fn add_quote(&mut self, bid: f64, ask: f64, time: i64) -> Fold {
        if self.roll(time) == Fold::Late {
            return Fold::Late;
        }
        match &mut self.quote {
            Some(b) => b.add(bid, ask, time),
            None => self.quote = Some(QuoteBar::new(bid, ask, time)),
        }
        Fold::Applied
    }

    /// The newest tick time folded in.
    pub fn last_time(&self) -> i64 {
        let t = self.trade.as_ref().map_or(i64::MIN, |b| b.last_time);
        let q = self.quote.as_ref().map_or(i64::MIN, |b| b.last_time);
        t.max(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bars the slow, obvious way from a list sorted by time (stable).
    fn naive_trade_bar(mut v: Vec<(f64, i64, i64)>) -> TradeBar {
        v.sort_by_key(|x| x.2);
        let high = v.iter().map(|x| x.0).fold(f64::MIN, f64::max);
        let low = v.iter().map(|x| x.0).fold(f64::MAX, f64::min);
        let volume: i64 = v.iter().map(|x| x.1).sum();
        let notional: f64 = v.iter().map(|x| x.0 * x.1 as f64).sum();
        TradeBar {
            open: v[0].0,
            high,
            low,
            close: v[v.len() - 1].0,
            volume,
            notional,
            trades: v.len() as i64,
            first_time: v[0].2,
            last_time: v[v.len() - 1].2,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    proptest! {
        /// Folding trades in any arrival order gives the bar computed from
        /// the time-sorted list (times distinct, as the feed makes them).
        #[test]
        fn trade_bar_is_independent_of_arrival_order(
            rows in prop::collection::vec((1u32..100_000, 1i64..10_000), 1..200),
            seed in any::<u64>(),
        ) {
            let v: Vec<(f64, i64, i64)> = rows
                .iter()
                .enumerate()
                .map(|(i, (p, s))| (*p as f64 / 100.0, *s, 1_000 + i as i64 * 7))
                .collect();
            let mut shuffled = v.clone();
            // A deterministic shuffle from the case's seed.
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut bar = TradeBar::new(shuffled[0].0, shuffled[0].1, shuffled[0].2);
            for r in &shuffled[1..] {
                bar.add(r.0, r.1, r.2);
            }
            let want = naive_trade_bar(v);
            prop_assert_eq!(bar.open, want.open);
            prop_assert_eq!(bar.close, want.close);
            prop_assert_eq!(bar.high, want.high);
            prop_assert_eq!(bar.low, want.low);
            prop_assert_eq!(bar.volume, want.volume);
            prop_assert_eq!(bar.trades, want.trades);
            prop_assert_eq!(bar.last_time, want.last_time);
            prop_assert!(close(bar.vwap().unwrap(), want.notional / want.volume as f64));
        }
    }

    #[test]
    fn quote_bar_mid_spread_and_last_quote() {
        let mut b = QuoteBar::new(10.00, 10.02, 5);
        b.add(10.01, 10.02, 6);
        b.add(9.99, 10.03, 4); // arrives late, earlier time: becomes the open
        assert_eq!(b.quotes, 3);
        assert!(close(b.mid_open, 10.01));
        assert!(close(b.mid_close, 10.015));
        assert_eq!((b.bid, b.ask), (10.01, 10.02));
        assert!(close(b.mid_high, 10.015));
        assert!(close(b.mid_low, 10.01));
        assert!(close(b.avg_spread(), (0.02 + 0.01 + 0.04) / 3.0));
        assert_eq!(b.last_time, 6);
    }

    #[test]
    fn equal_times_open_with_the_first_and_close_with_the_last() {
        let mut b = TradeBar::new(1.0, 1, 10);
        b.add(2.0, 1, 10);
        b.add(3.0, 1, 10);
        assert_eq!((b.open, b.close), (1.0, 3.0));
    }

    #[test]
    fn minutes_days_and_daily_roll() {
        let t = 1_583_782_245_123_456_789; // 2020-03-09 19:30:45.123456789 UTC
        assert_eq!(minute_start(t), 1_583_782_200_000_000_000);
        assert_eq!(day_start(t), 1_583_712_000_000_000_000);
        assert_eq!(minute_start(-1), -NS_PER_MINUTE);
        let mut d = DailyStats::new(t);
        assert_eq!(d.add_trade(10.0, 100, t), Fold::Applied);
        assert_eq!(d.add_quote(9.99, 10.01, t + 1), Fold::Applied);
        assert_eq!(d.last_time(), t + 1);
        // The previous day is late; the next day starts over.
        assert_eq!(d.add_trade(11.0, 100, t - NS_PER_DAY), Fold::Late);
        assert_eq!(d.trade.as_ref().unwrap().trades, 1);
        assert_eq!(d.add_trade(12.0, 5, t + NS_PER_DAY), Fold::Applied);
        assert_eq!(d.day, day_start(t + NS_PER_DAY));
        assert_eq!(d.trade.as_ref().unwrap().volume, 5);
        assert!(d.quote.is_none());
        assert_eq!(TradeBar::new(1.0, 0, 0).vwap(), None);
    }
}
