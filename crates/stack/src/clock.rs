//! Generation time: nanoseconds since the Unix epoch (CLOCK_REALTIME), the
//! clock every latency in the stack is measured against (same host).

/// Now, in ns since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Strictly increasing generation times: a feed stamps every row with its
/// generation time, and two rows never share one, so "first" and "last" in
/// a bar are the same by time as by arrival.
#[derive(Debug, Default)]
pub struct TickClock {
    last: i64,
}

impl TickClock {
    pub fn stamp(&mut self) -> i64 {
        let t = now_ns().max(self.last + 1);
        self.last = t;
        t
    }
}

pub const NS_PER_MINUTE: i64 = 60_000_000_000;
pub const NS_PER_DAY: i64 = 86_400_000_000_000;

/// Today's date (UTC) as YYYY-MM-DD.
pub fn date_utc(ns: i64) -> String {
    let (y, m, d) = civil_from_days(ns.div_euclid(NS_PER_DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_strictly_increasing() {
        let mut c = TickClock::default();
        let mut prev = 0;
        for _ in 0..10_000 {
            let t = c.stamp();
            assert!(t > prev);
            prev = t;
        }
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(date_utc(1_583_712_000_000_000_000), "2020-03-09");
    }
}
