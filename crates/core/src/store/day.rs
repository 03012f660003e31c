//! Where each day's rows are: today's in the store's tables, a closing day's
//! frozen in memory while its Parquet is written, earlier days' in the
//! historical database (HDB).
//!
//! End of day moves a table's rows from the store into a closing day in one
//! step, and committing the day's Parquet moves them from the closing day
//! into history in one step. Both steps, and every reader's `DaySnapshot`,
//! take one lock, so a query sees each row exactly once: in today, in a
//! closing day, or in history, never in two and never in none. The lock is
//! held only for `Arc` copies, never for I/O.

use super::snapshot::TableSnapshot;
use crate::error::Result;
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A table's history: per date (days since 1970-01-01), the committed part
/// files' names in that date's directory. Readers read exactly these files,
/// so a part committed while a query runs is not read twice.
pub type History = BTreeMap<i32, Vec<String>>;

/// Today's date for rows still in the store: the date an end of day now
/// would give them.
pub type Clock = Box<dyn Fn() -> i32 + Send + Sync>;

/// A day that has ended but whose Parquet is not committed yet.
pub struct ClosingDay {
    /// Days since 1970-01-01 (Arrow's Date32).
    pub date: i32,
    /// The journal sequence of its end-of-day marker.
    pub seq: u64,
    /// Every append table's rows of that day, as appended.
    pub tables: Vec<TableSnapshot>,
    /// How long the tables' writer waited while the day was moved out.
    pub pause: std::time::Duration,
}

impl ClosingDay {
    pub fn table(&self, name: &str) -> Option<&TableSnapshot> {
        self.tables.iter().find(|t| t.def.name == name)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_print_as_the_calendar_has_them() {
        assert_eq!(super::date_string(0), "1970-01-01");
        assert_eq!(super::date_string(20_416), "2025-11-24");
        assert_eq!(super::date_string(11_016), "2000-02-29");
        assert_eq!(super::date_string(-1), "1969-12-31");
    }
}

#[derive(Default)]
struct Days {
    /// In end-of-day order (an end of day can come before the previous
    /// one's Parquet is committed).
    closing: Vec<Arc<ClosingDay>>,
    /// Per table, what is committed to the HDB.
    history: BTreeMap<String, Arc<History>>,
    /// Per table, the end-of-day sequences whose parts are in `history`. A
    /// restart replays an end of day whose parts were committed before the
    /// crash: its closing day then holds rows `history` has already, and
    /// readers skip it for those tables.
    committed: BTreeMap<String, BTreeSet<u64>>,
}

/// One table's rows as of one moment, across days.
#[derive(Clone)]
pub struct DaySnapshot {
    pub today: TableSnapshot,
    /// Closing days' rows of this table, oldest first, with their dates.
    pub closing: Vec<(i32, TableSnapshot)>,
    /// This table's committed parts in the HDB.
    pub history: Arc<History>,
    /// The date of `today`'s rows.
    pub today_date: i32,
}

pub struct DayState {
    days: RwLock<Days>,
    clock: RwLock<Clock>,
}

impl Default for DayState {
    fn default() -> Self {
        DayState {
            days: RwLock::default(),
            clock: RwLock::new(Box::new(utc_today)),
        }
    }
}

/// A date (days since 1970-01-01) as YYYY-MM-DD.
pub fn date_string(days: i32) -> String {
    // Civil-from-days (Howard Hinnant's algorithm): no calendar crate here.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Today's date in UTC, as days since 1970-01-01.
pub fn utc_today() -> i32 {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    (ns / 86_400) as i32
}

impl DayState {
    /// Moves today's rows into a closing day: `take` pins and empties every
    /// append table; it runs under the write lock so no reader sees the
    /// rows both in the store and in the closing day, or in neither.
    pub(crate) fn end_day(
        &self,
        date: i32,
        seq: u64,
        take: impl FnOnce() -> Result<Vec<TableSnapshot>>,
    ) -> Result<Arc<ClosingDay>> {
        let started = std::time::Instant::now();
        let mut days = self.days.write();
        let tables = take()?;
        let day = Arc::new(ClosingDay {
            date,
            seq,
            tables,
            pause: started.elapsed(),
        });
        days.closing.push(day.clone());
        Ok(day)
    }

    /// Sets how today's date is found (the end-of-day time zone's date).
    pub fn set_clock(&self, clock: Clock) {
        *self.clock.write() = clock;
    }

    /// The date of the rows in the store now.
    pub fn today(&self) -> i32 {
        (self.clock.read())()
    }

    /// The closing day of end-of-day marker `seq` is in the HDB now:
    /// `parts` are its committed files (table, date, file name), and
    /// readers find its rows there from now on, in the same step that
    /// takes them out of the closing day.
    pub fn commit(&self, seq: u64, parts: &[(String, i32, String)]) {
        let mut days = self.days.write();
        days.closing.retain(|d| d.seq != seq);
        for (table, date, file) in parts {
            days.committed.entry(table.clone()).or_default().insert(seq);
            let h = days.history.entry(table.clone()).or_default();
            let mut next = h.as_ref().clone();
            let files = next.entry(*date).or_default();
            if !files.contains(file) {
                files.push(file.clone());
                files.sort();
            }
            *h = Arc::new(next);
        }
    }

    /// Sets a table's committed parts (read from the HDB at start and on
    /// reload), and the end-of-day sequences they came from.
    pub fn set_history(&self, table: &str, history: History, eod_seqs: BTreeSet<u64>) {
        let mut days = self.days.write();
        days.history.insert(table.to_string(), Arc::new(history));
        days.committed.insert(table.to_string(), eod_seqs);
    }

    /// Whether `table`'s part of end of day `seq` is in the HDB.
    pub fn is_committed(&self, table: &str, seq: u64) -> bool {
        self.days
            .read()
            .committed
            .get(table)
            .is_some_and(|s| s.contains(&seq))
    }

    /// Days that ended and are not committed yet, oldest first.
    pub fn closing(&self) -> Vec<Arc<ClosingDay>> {
        self.days.read().closing.clone()
    }

    /// `table`'s committed parts in the HDB.
    pub fn history(&self, table: &str) -> Arc<History> {
        self.days
            .read()
            .history
            .get(table)
            .cloned()
            .unwrap_or_default()
    }

    /// `today` is taken under the read lock, with the closing days and
    /// history of the same moment.
    pub(crate) fn snapshot(
        &self,
        table: &str,
        today: impl FnOnce() -> Result<TableSnapshot>,
    ) -> Result<DaySnapshot> {
        let today_date = self.today();
        let days = self.days.read();
        let today = today()?;
        let done = days.committed.get(table);
        let closing = days
            .closing
            .iter()
            .filter(|d| !done.is_some_and(|s| s.contains(&d.seq)))
            .filter_map(|d| d.table(table).map(|t| (d.date, t.clone())))
            .collect();
        Ok(DaySnapshot {
            today,
            closing,
            history: days.history.get(table).cloned().unwrap_or_default(),
            today_date,
        })
    }
}
