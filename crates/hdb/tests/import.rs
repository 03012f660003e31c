//! import: CSV and Parquet files into dated parts, all or nothing per file,
//! idempotent by file name and size.

mod common;

use std::fs::File;
use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use common::*;
use parquet::arrow::ArrowWriter;
use tickdb_hdb::{committed_dates, date_dir, import, verify, ImportOptions};

fn opts() -> ImportOptions {
    ImportOptions {
        fsync: false,
        progress: false,
    }
}

#[test]
fn csv_with_wrong_columns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hdb");
    let f = dir.path().join("trades.csv");
    std::fs::write(&f, "time,sym,price,qty\n1,A,1.0,5\n").unwrap();
    let e = import(
        &root,
        &trade(),
        std::slice::from_ref(&f),
        chrono_tz::UTC,
        &opts(),
    )
    .unwrap_err();
    let m = e.to_string();
    assert!(m.contains("trades.csv"), "{m}");
    assert!(
        m.contains("missing [size]") && m.contains("extra [qty]"),
        "{m}"
    );
    assert!(committed_dates(&root, "trade").unwrap().is_empty());
}

#[test]
fn csv_spanning_two_dates_and_reimport() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hdb");
    let f = dir.path().join("day.csv");
    // Columns in another order; times as nanoseconds, RFC 3339 and naive
    // local (New York) times. 2024-01-02 23:30 New York is 01-03 04:30 UTC.
    std::fs::write(
        &f,
        "sym,size,time,price\n\
         B,1,2024-01-02T10:00:00-05:00,10.5\n\
         A,2,2024-01-02T15:00:00Z,11\n\
         A,3,2024-01-02 23:30:00,12\n\
         B,4,1704294000000000000,13\n",
    )
    .unwrap();
    let ny = chrono_tz::America::New_York;
    let rep = import(&root, &trade(), std::slice::from_ref(&f), ny, &opts()).unwrap();
    assert_eq!(rep.parts_committed(), 2);
    assert_eq!(rep.rows_committed(), 4);
    assert_eq!(
        committed_dates(&root, "trade").unwrap(),
        [date(2024, 1, 2), date(2024, 1, 3)].into_iter().collect()
    );
    let d1 = read_rows(&date_dir(&root, "trade", date(2024, 1, 2)).join("part-00000.parquet"));
    let d2 = read_rows(&date_dir(&root, "trade", date(2024, 1, 3)).join("part-00000.parquet"));
    // Day 1 sorted by sym: A (15:00 UTC), A (23:30 NY = 04:30 UTC next day)
    // is day 1 in New York; B at 10:00 NY.
    assert_eq!(
        d1.iter()
            .map(|r| (r.1.clone().unwrap(), r.3))
            .collect::<Vec<_>>(),
        vec![("A".into(), 2), ("A".into(), 3), ("B".into(), 1)]
    );
    assert_eq!(d1[0].0, 1_704_207_600_000_000_000);
    assert_eq!(d1[1].0, 1_704_256_200_000_000_000);
    // 1704294000 s = 2024-01-03 15:00 UTC = 10:00 New York.
    assert_eq!(d2.len(), 1);
    assert_eq!(d2[0].2, 13.0);

    // Again: every date is skipped, nothing written.
    let rep = import(&root, &trade(), std::slice::from_ref(&f), ny, &opts()).unwrap();
    assert_eq!(rep.parts_committed(), 0);
    assert_eq!(rep.parts_skipped(), 2);
    assert_eq!(
        std::fs::read_dir(date_dir(&root, "trade", date(2024, 1, 2)))
            .unwrap()
            .count(),
        1
    );
    let src = &rep.files[0].source;
    assert_eq!(
        src,
        &format!("import:day.csv:{}", std::fs::metadata(&f).unwrap().len())
    );
    assert!(verify(&root, &schema(), None, false).unwrap().ok());
}

#[test]
fn a_bad_value_names_line_and_column_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hdb");
    let f = dir.path().join("bad.csv");
    std::fs::write(
        &f,
        "time,sym,price,size\n\
         2024-01-02T10:00:00Z,A,1,1\n\
         2024-01-03T10:00:00Z,A,1,1\n\
         2024-01-03T11:00:00Z,A,x1,1\n",
    )
    .unwrap();
    let e = import(
        &root,
        &trade(),
        std::slice::from_ref(&f),
        chrono_tz::UTC,
        &opts(),
    )
    .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("bad.csv") && m.contains("line 4, column 'price'") && m.contains("x1"),
        "{m}"
    );
    assert!(committed_dates(&root, "trade").unwrap().is_empty());

    std::fs::write(&f, "time,sym,price,size\nnoon,A,1,1\n").unwrap();
    let m = import(
        &root,
        &trade(),
        std::slice::from_ref(&f),
        chrono_tz::UTC,
        &opts(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        m.contains("line 2, column 'time'") && m.contains("noon"),
        "{m}"
    );
}

#[test]
fn parquet_with_castable_types() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hdb");
    let f = dir.path().join("t.parquet");
    // Utf8 sym, a zoned timestamp in microseconds, i32-able sizes as i64.
    let schema = Arc::new(ArrowSchema::new(vec![
        Field::new("sym", DataType::Utf8, true),
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("price", DataType::Float64, true),
        Field::new("size", DataType::Int64, true),
    ]));
    let micros = arrow_array::TimestampMicrosecondArray::from(vec![
        1_704_189_600_000_000i64, // 2024-01-02 10:00 UTC
        1_704_189_500_000_000,
    ])
    .with_timezone("UTC");
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["B", "A"])),
            Arc::new(micros),
            Arc::new(Float64Array::from(vec![1.0, 2.0])),
            Arc::new(Int64Array::from(vec![1, 2])),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(File::create(&f).unwrap(), schema, None).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();

    let rep = import(
        &root,
        &trade(),
        std::slice::from_ref(&f),
        chrono_tz::UTC,
        &opts(),
    )
    .unwrap();
    assert_eq!(rep.parts_committed(), 1);
    let rows = read_rows(&date_dir(&root, "trade", date(2024, 1, 2)).join("part-00000.parquet"));
    // The instant is kept (no shift to a wall clock).
    assert_eq!(rows[0], row(1_704_189_500_000_000_000, Some("A"), 2.0, 2));
    assert_eq!(rows[1], row(1_704_189_600_000_000_000, Some("B"), 1.0, 1));
}
