//! tickdb-hdb owns the historical database (HDB): each day of each append
//! table as Hive-partitioned Parquet that DuckDB, Spark, Trino, Polars and
//! pyarrow read as it is.
//!
//! ```text
//! ROOT/<table>/date=YYYY-MM-DD/part-NNNNN.parquet
//! ```
//!
//! Rows are sorted by (sym, time), row groups follow symbol runs (kdb+'s
//! `p#`), and a part is published with one no-replace rename after it was
//! written and fsynced in a dot-prefixed staging directory. Every part
//! carries its `tickdb.source` (`eod:<seq>`, `import:<name>:<size>`), the
//! key that makes writing it again a no-op. The layout is documented in
//! `docs/history.md`.
//!
//! - [`stage_day`] + [`Staged::commit`]: write and publish a day.
//! - [`committed_dates`], [`has_source`], [`cleanup_staging`]: the layout.
//! - [`verify`]: check every file (and row counts against the journal).
//! - [`import`]: CSV or Parquet files into the HDB, split by date.

pub mod error;
pub mod import;
pub mod layout;
mod sort;
pub mod verify;
pub mod write;

pub use error::HdbError;
pub use import::{import, ImportOptions, ImportReport, ImportedFile};
pub use layout::{
    cleanup_staging, committed_dates, committed_parts, date_dir, date_from_days, days_from_date,
    has_source, parse_date_dir, part_source,
};
pub use verify::{verify, JournalCheck, Problem, VerifyReport};
pub use write::{
    part_arrow_schema, stage_day, CommitOutcome, PartReport, StageOutcome, Staged, WriteOptions,
    DATA_PAGE_ROWS_MAX, ROW_GROUP_ROWS_CAP, ROW_GROUP_ROWS_FLOOR, ZSTD_LEVEL,
};
