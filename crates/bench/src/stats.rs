//! Medians of repeated runs, and whether the spread says the machine was noisy.

/// Runs whose max/min exceeds this are flagged as noisy in reports.
pub const NOISY_SPREAD: f64 = 1.3;

#[derive(Debug, Clone, Default)]
pub struct Samples(pub Vec<f64>);

impl Samples {
    pub fn push(&mut self, x: f64) {
        self.0.push(x);
    }

    pub fn median(&self) -> Option<f64> {
        let mut v = self.0.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// The p-th percentile (0 < p ≤ 100) by nearest rank: the smallest
    /// sample with at least p% of the samples at or below it (with 20
    /// samples, p99 is the largest).
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let mut v = self.0.clone();
        if v.is_empty() || !(p > 0.0 && p <= 100.0) {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        Some(v[rank.clamp(1, v.len()) - 1])
    }

    pub fn min(&self) -> Option<f64> {
        self.0.iter().copied().reduce(f64::min)
    }

    pub fn max(&self) -> Option<f64> {
        self.0.iter().copied().reduce(f64::max)
    }

    pub fn noisy(&self) -> bool {
        match (self.min(), self.max()) {
            (Some(lo), Some(hi)) if lo > 0.0 => hi / lo > NOISY_SPREAD,
            _ => false,
        }
    }

    /// "1.23M (1.10M–1.30M)", with a `*` when noisy.
    pub fn describe(&self, fmt: fn(f64) -> String) -> String {
        let mark = if self.0.len() > 1 && self.noisy() {
            " *"
        } else {
            ""
        };
        format!("{}{mark}", self.range(fmt))
    }

    /// "1.23M (1.10M–1.30M)", without the mark (for a sentence that says
    /// the spread in words).
    pub fn range(&self, fmt: fn(f64) -> String) -> String {
        match (self.median(), self.min(), self.max()) {
            (Some(m), Some(lo), Some(hi)) if self.0.len() > 1 => {
                format!("{} ({}–{})", fmt(m), fmt(lo), fmt(hi))
            }
            (Some(m), _, _) => fmt(m),
            _ => "n/a".into(),
        }
    }
}

impl FromIterator<f64> for Samples {
    fn from_iter<I: IntoIterator<Item = f64>>(it: I) -> Samples {
        Samples(it.into_iter().collect())
    }
}

/// The distinct keys of `items`, in the order they first appear: the rows
/// of a report whose cells ran round after round.
pub fn in_order<T, K: PartialEq + Copy>(items: &[T], key: impl Fn(&T) -> K) -> Vec<K> {
    let mut out: Vec<K> = Vec::new();
    for x in items {
        let k = key(x);
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// The item whose `key` is the median (the lower middle one for an even
/// count): the run a report takes its other, unaggregated figures from.
pub fn median_item<'a, T>(items: &[&'a T], key: impl Fn(&T) -> f64) -> Option<&'a T> {
    let mut by_key = items.to_vec();
    by_key.sort_by(|a, b| key(a).total_cmp(&key(b)));
    by_key.get((by_key.len().max(1) - 1) / 2).copied()
}

pub fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_noise() {
        let s = Samples(vec![3.0, 1.0, 2.0]);
        assert_eq!(s.median(), Some(2.0));
        assert!(s.noisy());
        let s = Samples(vec![10.0, 11.0, 12.0, 10.5]);
        assert_eq!(s.median(), Some(10.75));
        assert!(!s.noisy());
        assert_eq!(Samples::default().median(), None);
        let s = Samples((1..=20).map(f64::from).collect());
        assert_eq!(s.percentile(50.0), Some(10.0));
        assert_eq!(s.percentile(99.0), Some(20.0));
        assert_eq!(s.percentile(90.0), Some(18.0));
        let s = Samples((1..=200).map(f64::from).collect());
        assert_eq!(s.percentile(99.0), Some(198.0));
        assert_eq!(Samples::default().percentile(50.0), None);
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(ratio(Some(2.0), Some(1.0)), "2.00×");
    }

    #[test]
    fn median_item_is_the_middle_one_or_the_lower_middle() {
        let v = [3.0, 1.0, 2.0, 9.0];
        let refs: Vec<&f64> = v.iter().collect();
        assert_eq!(median_item(&refs, |x| *x), Some(&2.0));
        assert_eq!(median_item(&refs[..3], |x| *x), Some(&2.0));
        assert_eq!(median_item(&refs[..1], |x| *x), Some(&3.0));
        assert_eq!(median_item::<f64>(&[], |x| *x), None);
    }
}
