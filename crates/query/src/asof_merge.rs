//! The as-of merge: ASOF JOIN over a right side held in time order.
//!
//! An rdb table's rows arrive in time order, so its chunks, taken by their
//! first time, are one time-ordered sequence. Over such a right side a left
//! stream that is itself in time order needs no per-key index at all: one
//! cursor walks the right rows up to each left row's time and remembers,
//! per key, the last right row it passed. Each right row is read once per
//! left partition, sequentially, and each left row costs one look-up in a
//! small array (one entry per key), where searching per-key runs costs a
//! few cache misses per left row and building the runs a scattered write
//! per right row.
//!
//! A left row earlier than one the cursor has already passed (a left side
//! that is not in time order) cannot be answered by the cursor; the caller
//! answers it from the per-key runs instead, so the result is the same
//! either way.

use datafusion::arrow::array::{Array, Int64Array};

/// A right row whose key is null, or whose time is null.
pub(crate) const NO_KEY: u32 = u32::MAX;

/// `last` entry of a key the cursor has not passed a row of.
pub(crate) const NO_ROW: u64 = u64::MAX;

/// One batch of the right side: its place among the side's batches (the
/// index `interleave` takes), its times, and each row's key id.
pub(crate) struct MergeBatch {
    pub src: u32,
    pub times: Int64Array,
    pub ids: Vec<u32>,
}

impl MergeBatch {
    fn first(&self) -> Option<i64> {
        self.times.values().first().copied()
    }

    fn last(&self) -> Option<i64> {
        self.times.values().last().copied()
    }
}

/// The right side's batches in sequence: ordered by their first time (ties
/// keep their arrival order: `src` counts batches as they arrived), and whether that sequence is in time order
/// row by row with no null time, so that a cursor can walk it.
pub(crate) struct Merge {
    batches: Vec<MergeBatch>,
    ordered: bool,
    /// The key every right row has, if they all have one and the same (a
    /// join filtered to one symbol).
    one_key: Option<u32>,
}

impl Merge {
    pub(crate) fn new(mut batches: Vec<MergeBatch>) -> Merge {
        batches.retain(|b| !b.times.is_empty());
        // Time-ordered chunks sort back into arrival order: by first time,
        // then last (a chunk of one repeated time before the next one
        // starting there), then arrival.
        batches.sort_by_key(|b| {
            (
                b.first().unwrap_or(i64::MIN),
                b.last().unwrap_or(i64::MIN),
                b.src,
            )
        });
        let inner = batches
            .iter()
            .all(|b| b.times.null_count() == 0 && b.times.values().is_sorted());
        let across = batches
            .windows(2)
            .all(|w| w[0].last().unwrap_or(i64::MIN) <= w[1].first().unwrap_or(i64::MIN));
        // An OR over the ids' differences rather than `all`: no early
        // exit, so it vectorizes.
        let one_key = batches
            .iter()
            .find_map(|b| b.ids.first().copied())
            .filter(|&k| k != NO_KEY)
            .filter(|&k| {
                batches
                    .iter()
                    .all(|b| b.ids.iter().fold(0u32, |a, &id| a | (id ^ k)) == 0)
            });
        Merge {
            ordered: inner && across,
            one_key,
            batches,
        }
    }

    pub(crate) fn ordered(&self) -> bool {
        self.ordered
    }

    /// The batches, in the sequence that defines arrival order among rows
    /// of equal time.
    pub(crate) fn batches(&self) -> &[MergeBatch] {
        &self.batches
    }
}

/// One left stream's walk over an ordered `Merge`.
pub(crate) struct Cursor {
    batch: usize,
    row: usize,
    /// The latest time walked to; earlier times cannot be answered.
    watermark: Option<i64>,
    /// Take right rows of time < t (`>`) rather than <= t (`>=`).
    strict: bool,
    /// Per key: the last right row passed, as (batch src << 32 | row), and
    /// its time. One more slot than keys: rows without a key (`NO_KEY`)
    /// write there and nothing reads it as an answer.
    last: Vec<(u64, i64)>,
}

impl Cursor {
    pub(crate) fn new(keys: usize, strict: bool) -> Cursor {
        Cursor {
            batch: 0,
            row: 0,
            watermark: None,
            strict,
            last: vec![(NO_ROW, 0); keys + 1],
        }
    }

    fn keys(&self) -> usize {
        self.last.len() - 1
    }

    /// Whether `walk_sorted` can take a left batch with these times: in
    /// order, and not before a time already walked to.
    pub(crate) fn can_walk(&self, times: &[i64]) -> bool {
        match (times.first(), self.watermark) {
            (None, _) => false,
            (Some(&first), Some(w)) if first < w => false,
            _ => times.is_sorted(),
        }
    }

    /// Answers a whole left batch in time order (`can_walk`) in one merge
    /// of its times with the right rows: for each left row, the last right
    /// row of its key as (src << 32 | row, time), or `NO_ROW`. The merge
    /// has no data-dependent branch: whether the next step takes a right
    /// row or answers a left row is about as random as the interleaving of
    /// trades and quotes, so a branch there would be mispredicted half the
    /// time; both sides are updated every step and the comparison selects
    /// which one counts.
    pub(crate) fn walk_sorted(
        &mut self,
        m: &Merge,
        ids: &[u32],
        times: &[i64],
        out: &mut Vec<(u64, i64)>,
    ) {
        let one = m.one_key.map(|k| k as usize).filter(|&k| k < self.keys());
        match (self.strict, one) {
            (true, Some(k)) => self.gallop_batch::<true>(m, k, ids, times, out),
            (false, Some(k)) => self.gallop_batch::<false>(m, k, ids, times, out),
            (true, None) => self.merge_batch::<true>(m, ids, times, out),
            (false, None) => self.merge_batch::<false>(m, ids, times, out),
        }
    }

    /// `walk_sorted` where every right row has key `key` (one symbol's
    /// quotes): only the last right row at or before each left row counts,
    /// so the cursor skips to it by exponential then binary search instead
    /// of stepping through every right row (about nine quotes a trade).
    fn gallop_batch<const STRICT: bool>(
        &mut self,
        m: &Merge,
        key: usize,
        ids: &[u32],
        times: &[i64],
        out: &mut Vec<(u64, i64)>,
    ) {
        let n = times.len().min(ids.len());
        out.clear();
        out.resize(n, (NO_ROW, 0));
        let sentinel = self.keys();
        for i in 0..n {
            let t = times[i];
            let taken = |x: &i64| if STRICT { *x < t } else { *x <= t };
            while let Some(b) = m.batches.get(self.batch) {
                let rest = &b.times.values()[self.row..];
                let k = gallop(rest, taken);
                if k > 0 {
                    let at = self.row + k - 1;
                    self.last[key] = ((u64::from(b.src) << 32) | at as u64, rest[k - 1]);
                }
                if k < rest.len() {
                    self.row += k;
                    break;
                }
                self.batch += 1;
                self.row = 0;
            }
            out[i] = self.last[(ids[i] as usize).min(sentinel)];
        }
        self.walked_to(&times[..n]);
    }

    /// After a batch walk: left times before the batch's last cannot be
    /// answered by the cursor any more.
    fn walked_to(&mut self, times: &[i64]) {
        if let Some(&t) = times.last() {
            self.watermark = Some(self.watermark.map_or(t, |w| w.max(t)));
        }
    }

    fn merge_batch<const STRICT: bool>(
        &mut self,
        m: &Merge,
        ids: &[u32],
        times: &[i64],
        out: &mut Vec<(u64, i64)>,
    ) {
        let n = times.len().min(ids.len());
        out.clear();
        out.resize(n, (NO_ROW, 0));
        let sentinel = self.keys();
        let last = &mut self.last[..];
        let mut i = 0;
        while i < n {
            let Some(b) = m.batches.get(self.batch) else {
                break;
            };
            let rt = b.times.values();
            let rid = &b.ids[..rt.len().min(b.ids.len())];
            let src = u64::from(b.src) << 32;
            let mut j = self.row;
            while i < n && j < rid.len() {
                let (t, x) = (times[i], rt[j]);
                let take = if STRICT { x < t } else { x <= t };
                // The right row's key slot when it is taken, the sentinel
                // when not: an index chosen by a mask, then one unconditional
                // store (a select on the stored value compiles to a branch).
                let mask = usize::from(take).wrapping_neg();
                let k = ((rid[j] as usize).min(sentinel) & mask) | (sentinel & !mask);
                last[k] = (src | j as u64, x);
                // Final once the step answers row i (take is false).
                out[i] = last[(ids[i] as usize).min(sentinel)];
                j += usize::from(take);
                i += usize::from(!take);
            }
            if j >= rid.len() {
                self.batch += 1;
                self.row = 0;
            } else {
                self.row = j;
            }
        }
        // The right side ran out: the rest see the last rows as they are.
        for k in i..n {
            out[k] = last[(ids[k] as usize).min(sentinel)];
        }
        self.walked_to(&times[..n]);
    }

    /// Walks the right rows up to time `t`. False when `t` is before a
    /// time already walked to: the cursor cannot go back.
    #[inline]
    pub(crate) fn seek(&mut self, m: &Merge, t: i64) -> bool {
        match self.watermark {
            Some(w) if t < w => return false,
            Some(w) if t == w => return true,
            _ => {}
        }
        self.watermark = Some(t);
        if self.strict {
            self.walk::<true>(m, t)
        } else {
            self.walk::<false>(m, t)
        }
        true
    }

    /// The walk itself, with the comparison fixed at compile time: it runs
    /// once per right row, so it is kept to a load of the time, a compare,
    /// and a store into the key's slot.
    fn walk<const STRICT: bool>(&mut self, m: &Merge, t: i64) {
        let last = &mut self.last[..];
        while let Some(b) = m.batches.get(self.batch) {
            let times = b.times.values();
            let ids = &b.ids[..times.len().min(b.ids.len())];
            let src = u64::from(b.src) << 32;
            for (r, (&x, &id)) in times.iter().zip(ids).enumerate().skip(self.row) {
                if if STRICT { x >= t } else { x > t } {
                    self.row = r;
                    return;
                }
                // NO_KEY is past the end of `last`: skipped.
                if let Some(slot) = last.get_mut(id as usize) {
                    *slot = (src | r as u64, x);
                }
            }
            self.batch += 1;
            self.row = 0;
        }
    }

    /// The last right row of key `id` walked past: (batch src, row, time).
    #[inline]
    pub(crate) fn last(&self, id: u32) -> Option<(u32, u32, i64)> {
        let (at, time) = *self.last[..self.keys()].get(id as usize)?;
        (at != NO_ROW).then_some(((at >> 32) as u32, at as u32, time))
    }
}

/// How many leading values of `v` satisfy `taken` (which holds for a
/// prefix): probes 1, 2, 4, … ahead, then a binary search between the last
/// two probes, so a short skip costs a few comparisons.
fn gallop(v: &[i64], taken: impl Fn(&i64) -> bool) -> usize {
    if v.first().is_none_or(|x| !taken(x)) {
        return 0;
    }
    // taken(v[lo]) holds; `hi` is the first probe that failed or the end.
    let mut lo = 0;
    let mut hi = 1;
    while hi < v.len() && taken(&v[hi]) {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let hi = hi.min(v.len());
    lo + 1 + v[lo + 1..hi].partition_point(taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The brute-force answer: the latest right row of the key at or
    /// before (strictly before) t, in the merge's sequence order.
    fn model(m: &Merge, id: u32, t: i64, strict: bool) -> Option<(u32, u32, i64)> {
        let mut best = None;
        for b in m.batches() {
            for (r, &x) in b.times.values().iter().enumerate() {
                if b.ids[r] == id && (x < t || (!strict && x == t)) {
                    best = Some((b.src, r as u32, x));
                }
            }
        }
        best
    }

    #[test]
    fn the_cursor_finds_what_a_scan_of_every_row_finds() {
        let seed = tickdb_core::testing::seed("as-of merge");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut single_key_cases = 0;
        for _ in 0..300 {
            let keys = rng.random_range(1..6u32);
            // Some right sides with a key on every row: with one key used,
            // the batch walk gallops (`gallop_batch`).
            let null_keys = rng.random_range(0..2) == 0;
            // Time-ordered rows, cut into batches handed over shuffled.
            let n = rng.random_range(0..120);
            let mut times: Vec<i64> = (0..n).map(|_| rng.random_range(0..40)).collect();
            times.sort();
            let mut batches = Vec::new();
            let mut at = 0;
            while at < times.len() {
                let len = rng.random_range(1..10).min(times.len() - at);
                let ids = (0..len)
                    .map(|_| {
                        if null_keys && rng.random_range(0..10) == 0 {
                            NO_KEY
                        } else {
                            rng.random_range(0..keys)
                        }
                    })
                    .collect();
                batches.push(MergeBatch {
                    src: batches.len() as u32,
                    times: Int64Array::from(times[at..at + len].to_vec()),
                    ids,
                });
                at += len;
            }
            // Partitions hand batches over in any order: the sort restores
            // arrival order.
            for i in (1..batches.len()).rev() {
                batches.swap(i, rng.random_range(0..=i));
            }
            let m = Merge::new(batches);
            assert!(m.ordered());
            single_key_cases += usize::from(m.one_key.is_some());
            assert!(m.batches().windows(2).all(|w| w[0].src < w[1].src));
            for strict in [false, true] {
                let mut c = Cursor::new(keys as usize, strict);
                let (mut t, mut walked) = (-3, -3);
                while t < 45 {
                    assert!(c.seek(&m, t));
                    walked = t;
                    for id in 0..keys {
                        assert_eq!(c.last(id), model(&m, id, t, strict), "t {t} id {id}");
                    }
                    t += rng.random_range(0..4);
                }
                assert!(!c.seek(&m, walked - 1), "a cursor cannot go back");
                // Whole left batches in time order, merged in one pass.
                let mut c = Cursor::new(keys as usize, strict);
                let mut t = -3;
                let mut out = Vec::new();
                while t < 45 {
                    let len = rng.random_range(1..8);
                    let times: Vec<i64> = (0..len)
                        .map(|_| {
                            t += rng.random_range(0..3);
                            t
                        })
                        .collect();
                    let ids: Vec<u32> = (0..len)
                        .map(|_| rng.random_range(0..=keys).min(keys - 1))
                        .collect();
                    assert!(c.can_walk(&times));
                    c.walk_sorted(&m, &ids, &times, &mut out);
                    for ((&id, &t), &(at, time)) in ids.iter().zip(&times).zip(&out) {
                        let got = (at != NO_ROW).then_some(((at >> 32) as u32, at as u32, time));
                        assert_eq!(got, model(&m, id, t, strict), "batch: t {t} id {id}");
                    }
                }
                assert!(!c.can_walk(&[t - 1]), "a cursor cannot go back");
            }
        }
        assert!(single_key_cases > 0, "no one-key right side was generated");
    }

    #[test]
    fn gallop_counts_the_prefix_that_is_taken() {
        let v: Vec<i64> = (0..100).map(|x| x / 3).collect();
        for t in -1..40 {
            let want = v.iter().filter(|&&x| x <= t).count();
            assert_eq!(gallop(&v, |x| *x <= t), want, "t {t}");
            let want = v.iter().filter(|&&x| x < t).count();
            assert_eq!(gallop(&v, |x| *x < t), want, "t {t}");
        }
        assert_eq!(gallop(&[], |_| true), 0);
    }

    #[test]
    fn a_right_side_out_of_time_order_is_not_walked() {
        let b = |src: u32, times: Vec<i64>| MergeBatch {
            src,
            ids: vec![0; times.len()],
            times: Int64Array::from(times),
        };
        assert!(Merge::new(vec![b(1, vec![5, 6]), b(0, vec![1, 2])]).ordered());
        assert!(!Merge::new(vec![b(0, vec![1, 5]), b(1, vec![3, 7])]).ordered());
        assert!(!Merge::new(vec![b(0, vec![2, 1])]).ordered());
        let nulls = MergeBatch {
            src: 0,
            ids: vec![0, 0],
            times: Int64Array::from(vec![Some(1), None]),
        };
        assert!(!Merge::new(vec![nulls]).ordered());
    }
}
