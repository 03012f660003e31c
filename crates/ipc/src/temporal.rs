//! q's temporal encodings, all counted from 2000.01.01 (UTC), against Unix
//! nanoseconds.

/// Nanoseconds from 1970.01.01 to 2000.01.01.
pub const Q_EPOCH_NS: i64 = 946_684_800_000_000_000;
/// Days from 1970.01.01 to 2000.01.01.
pub const Q_EPOCH_DAYS: i64 = 10_957;
pub const NS_PER_DAY: i64 = 86_400_000_000_000;

/// A q timestamp (ns since 2000.01.01) from Unix ns; nulls stay null.
pub fn timestamp_from_unix_ns(ns: i64) -> i64 {
    if ns == i64::MIN {
        ns
    } else {
        ns.saturating_sub(Q_EPOCH_NS)
    }
}

/// Unix ns from a q timestamp; None for the null and the infinities.
pub fn unix_ns_from_timestamp(q: i64) -> Option<i64> {
    if q == i64::MIN || q == i64::MAX || q == -i64::MAX {
        None
    } else {
        q.checked_add(Q_EPOCH_NS)
    }
}

/// Unix ns from a q date (days since 2000.01.01).
pub fn unix_ns_from_date(days: i32) -> Option<i64> {
    if days == i32::MIN || days == i32::MAX || days == -i32::MAX {
        return None;
    }
    (days as i64 + Q_EPOCH_DAYS).checked_mul(NS_PER_DAY)
}

/// Unix ns from a q datetime (fractional days since 2000.01.01).
pub fn unix_ns_from_datetime(days: f64) -> Option<i64> {
    if !days.is_finite() {
        return None;
    }
    let ns = (days * NS_PER_DAY as f64).round() + Q_EPOCH_NS as f64;
    (ns.abs() < i64::MAX as f64).then_some(ns as i64)
}

/// The q date of Unix ns.
pub fn date_from_unix_ns(ns: i64) -> i32 {
    (ns.div_euclid(NS_PER_DAY) - Q_EPOCH_DAYS) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_q_epoch_is_2000_01_01() {
        assert_eq!(unix_ns_from_timestamp(0), Some(946_684_800_000_000_000));
        assert_eq!(unix_ns_from_date(0), Some(946_684_800_000_000_000));
        assert_eq!(
            unix_ns_from_datetime(1.5),
            Some(946_684_800_000_000_000 + 36 * 3_600_000_000_000)
        );
        assert_eq!(date_from_unix_ns(946_684_800_000_000_000 + 1), 0);
        assert_eq!(unix_ns_from_timestamp(i64::MIN), None);
    }
}
