//! Helpers shared by the HDB's integration tests.
#![allow(dead_code)]

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampNanosecondType, UInt32Type};
use arrow_array::{
    Array, DictionaryArray, Float64Array, Int64Array, RecordBatch, TimestampNanosecondArray,
};
use chrono::NaiveDate;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tickdb_core::{Schema, TableDef};
use tickdb_hdb::{stage_day, CommitOutcome, StageOutcome, WriteOptions};

/// (time, sym, price, size)
pub type Row = (i64, Option<String>, f64, i64);

pub fn schema() -> Schema {
    Schema::default_schema()
}

pub fn trade() -> TableDef {
    schema().table("trade").expect("trade").clone()
}

pub fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("date")
}

pub fn row(t: i64, sym: Option<&str>, price: f64, size: i64) -> Row {
    (t, sym.map(str::to_string), price, size)
}

/// A trade batch in the table's Arrow schema (sym dictionary-encoded).
pub fn trade_batch(rows: &[Row]) -> RecordBatch {
    let def = trade();
    let time = TimestampNanosecondArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
    let sym: DictionaryArray<UInt32Type> = rows.iter().map(|r| r.1.as_deref()).collect();
    let price = Float64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>());
    let size = Int64Array::from(rows.iter().map(|r| r.3).collect::<Vec<_>>());
    RecordBatch::try_new(
        tickdb_core::store::arrow_schema(&def),
        vec![
            Arc::new(time),
            Arc::new(sym),
            Arc::new(price),
            Arc::new(size),
        ],
    )
    .expect("batch")
}

/// Reads a written trade part back, row group by row group.
pub fn read_groups(path: &Path) -> Vec<Vec<Row>> {
    let f = File::open(path).expect("open");
    let b = ParquetRecordBatchReaderBuilder::try_new(f).expect("footer");
    let n = b.metadata().num_row_groups();
    (0..n)
        .map(|g| {
            let f = File::open(path).expect("open");
            let r = ParquetRecordBatchReaderBuilder::try_new(f)
                .expect("footer")
                .with_row_groups(vec![g])
                .build()
                .expect("reader");
            let mut rows = Vec::new();
            for b in r {
                let b = b.expect("batch");
                let t = b.column(0).as_primitive::<TimestampNanosecondType>();
                let s = b.column(1).as_string::<i32>();
                let p = b.column(2).as_primitive::<Float64Type>();
                let z = b.column(3).as_primitive::<Int64Type>();
                for i in 0..b.num_rows() {
                    rows.push((
                        t.value(i),
                        s.is_valid(i).then(|| s.value(i).to_string()),
                        p.value(i),
                        z.value(i),
                    ));
                }
            }
            rows
        })
        .collect()
}

pub fn read_rows(path: &Path) -> Vec<Row> {
    read_groups(path).into_iter().flatten().collect()
}

pub fn fast() -> WriteOptions {
    WriteOptions {
        fsync: false,
        ..WriteOptions::default()
    }
}

/// Stages and commits; panics unless it was committed.
pub fn write_day(
    root: &Path,
    day: NaiveDate,
    source: &str,
    rows: &[Row],
) -> tickdb_hdb::PartReport {
    let staged = match stage_day(root, &trade(), day, source, &[trade_batch(rows)], &fast())
        .expect("stage")
    {
        StageOutcome::Staged(s) => s,
        other => panic!("not staged: {other:?}"),
    };
    match staged.commit().expect("commit") {
        CommitOutcome::Committed(r) => r,
        other => panic!("not committed: {other:?}"),
    }
}
