//! The end-of-day clock: the time zone the HDB's dates are in, and the
//! local time the tp ends the day at (`--eod-time`, `--eod-tz`).
//!
//! The date an end of day closes is the local date of the instant just
//! before it: an end of day at 00:00 closes the day that just ended, one at
//! 17:00 (an FX close) or on command closes the day in progress. Two ends
//! of day on one date (a command, then the schedule) both write to that
//! date, as separate parts.

use chrono::{DateTime, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use std::sync::Arc;
use std::time::Duration;
use tickdb_tp::Tickerplant;

#[derive(Clone)]
pub struct EodClock {
    tz: Tz,
    at: Option<NaiveTime>,
}

impl EodClock {
    /// From the flags: `zone` an IANA name (`America/New_York`, `UTC`),
    /// `at` HH:MM or None for no schedule.
    pub fn new(zone: &str, at: Option<&str>) -> Result<EodClock, String> {
        let tz: Tz = zone.parse().map_err(|_| {
            format!("--eod-tz {zone:?}: not a time zone name (IANA names such as UTC, America/New_York, Europe/London)")
        })?;
        let at = match at {
            None => None,
            Some(s) => Some(NaiveTime::parse_from_str(s, "%H:%M").map_err(|_| {
                format!("--eod-time {s:?}: not a time of day as HH:MM (00:00 to 23:59)")
            })?),
        };
        Ok(EodClock { tz, at })
    }

    pub fn zone_name(&self) -> String {
        self.tz.name().to_string()
    }

    pub fn scheduled(&self) -> Option<NaiveTime> {
        self.at
    }

    /// The local date of an instant, as days since 1970-01-01.
    pub fn date_of(&self, t: DateTime<Utc>) -> i32 {
        days(t.with_timezone(&self.tz).date_naive())
    }

    /// Today's local date: the date an end of day now would close.
    pub fn today(&self) -> i32 {
        self.date_of(Utc::now())
    }

    /// The first scheduled end of day after `now`. On a day when the local
    /// time does not exist (a daylight-saving gap), the first instant after
    /// the gap.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = self.at?;
        let mut date = now.with_timezone(&self.tz).date_naive();
        for _ in 0..3 {
            let local = date.and_time(at);
            let t = self
                .tz
                .from_local_datetime(&local)
                .earliest()
                .or_else(|| {
                    self.tz
                        .from_local_datetime(&(local + chrono::Duration::hours(1)))
                        .earliest()
                })
                .map(|t| t.with_timezone(&Utc));
            if let Some(t) = t.filter(|t| *t > now) {
                return Some(t);
            }
            date = date.succ_opt()?;
        }
        None
    }
}

/// Days since 1970-01-01 (Arrow's Date32).
pub fn days(d: NaiveDate) -> i32 {
    d.signed_duration_since(NaiveDate::default()).num_days() as i32
}

/// Ends the day at the tp every day at the clock's time. Only a primary
/// journals it; a standby's tp refuses and logs why, and its rdb ends the
/// day when its primary's marker arrives.
pub fn spawn_schedule(tp: Arc<Tickerplant>, clock: EodClock) {
    let Some(at) = clock.scheduled() else {
        return;
    };
    tracing::info!(
        "end of day every day at {} {}",
        at.format("%H:%M"),
        clock.zone_name()
    );
    tokio::spawn(async move {
        loop {
            let now = Utc::now();
            let Some(next) = clock.next_after(now) else {
                tracing::error!("end of day: no next time could be computed; the schedule stops");
                return;
            };
            let wait = (next - now).to_std().unwrap_or(Duration::ZERO);
            tokio::time::sleep(wait).await;
            // The instant just before the boundary names the day it closes.
            let date = clock.date_of(next - chrono::Duration::nanoseconds(1));
            match tp.end_of_day(date).await {
                Ok(seq) => tracing::info!(
                    "end of day {}: marker journaled at seq {seq}",
                    tickdb_core::store::date_string(date)
                ),
                Err(e) => tracing::warn!(
                    "end of day {}: not journaled here: {e}",
                    tickdb_core::store::date_string(date)
                ),
            }
            // Past the boundary before looking for the next one.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn midnight_closes_the_day_that_ended_and_five_pm_the_day_in_progress() {
        let c = EodClock::new("America/New_York", Some("00:00")).unwrap();
        let next = c.next_after(utc("2026-11-24T12:00:00Z")).unwrap();
        assert_eq!(next, utc("2026-11-25T05:00:00Z"));
        let closed = c.date_of(next - chrono::Duration::nanoseconds(1));
        assert_eq!(tickdb_core::store::date_string(closed), "2026-11-24");
        let c = EodClock::new("America/New_York", Some("17:00")).unwrap();
        let next = c.next_after(utc("2026-11-24T12:00:00Z")).unwrap();
        assert_eq!(next, utc("2026-11-24T22:00:00Z"));
        assert_eq!(
            tickdb_core::store::date_string(c.date_of(next)),
            "2026-11-24"
        );
    }

    #[test]
    fn a_daylight_saving_gap_moves_the_time_past_it() {
        // 2026-03-08 02:30 does not exist in New York.
        let c = EodClock::new("America/New_York", Some("02:30")).unwrap();
        let next = c.next_after(utc("2026-03-08T05:00:00Z")).unwrap();
        assert_eq!(next, utc("2026-03-08T07:30:00Z"));
    }

    #[test]
    fn bad_flags_say_what_is_wrong() {
        assert!(EodClock::new("Mars/Olympus", None)
            .err()
            .unwrap()
            .contains("--eod-tz"));
        assert!(EodClock::new("UTC", Some("25:00"))
            .err()
            .unwrap()
            .contains("--eod-time"));
    }
}
