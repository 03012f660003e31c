//! verify: a clean HDB passes; each kind of damage is a problem naming its
//! path; row counts are compared with the journal.

mod common;

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use common::*;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use tickdb_core::codec::encode_to_vec;
use tickdb_core::{Batch, BatchBuilder};
use tickdb_hdb::{date_dir, part_arrow_schema, verify, VerifyReport};
use tickdb_journal::{FsyncPolicy, Journal, JournalOptions};

fn some_rows(n: usize) -> Vec<Row> {
    (0..n)
        .map(|i| row(i as i64, Some(["A", "B", "C"][i % 3]), i as f64, i as i64))
        .collect()
}

fn find<'a>(rep: &'a VerifyReport, path: &Path) -> Vec<&'a str> {
    rep.problems
        .iter()
        .filter(|p| p.path == path)
        .map(|p| p.what.as_str())
        .collect()
}

#[test]
fn clean_hdb_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_day(root, date(2024, 1, 2), "eod:5", &some_rows(100));
    write_day(root, date(2024, 1, 2), "import:a.csv:9", &some_rows(10));
    write_day(root, date(2024, 1, 3), "eod:9", &some_rows(7));
    let rep = verify(root, &schema(), None, false).unwrap();
    assert!(rep.ok(), "{:?}", rep.problems);
    assert_eq!(rep.files_checked, 3);
    assert_eq!(rep.rows, 117);
}

#[test]
fn damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let d = date(2024, 1, 2);
    let good = write_day(root, d, "eod:5", &some_rows(1000)).path;

    // Truncated copy.
    let trunc = date_dir(root, "trade", d).join("part-00001.parquet");
    std::fs::copy(&good, &trunc).unwrap();
    let len = std::fs::metadata(&trunc).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&trunc)
        .unwrap()
        .set_len(len / 2)
        .unwrap();

    // Corrupt footer: garbage over the footer's thrift bytes, magic intact.
    let corrupt = date_dir(root, "trade", d).join("part-00002.parquet");
    let mut bytes = std::fs::read(&good).unwrap();
    let n = bytes.len();
    let flen = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    for b in &mut bytes[n - 8 - flen..n - 8] {
        *b = 0xff;
    }
    std::fs::write(&corrupt, &bytes).unwrap();

    // A foreign file, a bad date directory, staging, an unknown table.
    let foreign = date_dir(root, "trade", d).join("notes.txt");
    std::fs::write(&foreign, b"hello").unwrap();
    let bad_dir = root.join("trade/date=2024-13-01");
    std::fs::create_dir(&bad_dir).unwrap();
    let staging = root.join("trade/.tmp-date=2024-01-05-1-0");
    std::fs::create_dir(&staging).unwrap();
    let unknown = root.join("orders");
    std::fs::create_dir(&unknown).unwrap();

    // An unsorted file, written with parquet directly.
    let unsorted = date_dir(root, "trade", d).join("part-00003.parquet");
    write_raw(&unsorted, &[(5, "B"), (6, "A")], "2024-01-02", "2");
    // Metadata that disagrees: tickdb.rows and tickdb.date.
    let liar = date_dir(root, "trade", d).join("part-00004.parquet");
    write_raw(&liar, &[(5, "A"), (6, "A")], "2024-01-09", "3");

    let rep = verify(root, &schema(), None, false).unwrap();
    assert!(!rep.ok());
    let all = rep
        .problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let one = |p: &Path, needle: &str| {
        let w = find(&rep, p);
        assert!(
            w.iter().any(|w| w.contains(needle)),
            "{} wants '{needle}' in:\n{all}",
            p.display()
        );
    };
    one(&trunc, "footer");
    one(&corrupt, "footer");
    one(&foreign, "foreign");
    one(&bad_dir, "not a date directory");
    one(&staging, "uncommitted staging left by a crash");
    one(&unknown, "unknown table");
    one(&unsorted, "not sorted");
    one(&liar, "tickdb.rows");
    one(&liar, "tickdb.date");
    assert!(find(&rep, &good).is_empty(), "{all}");
    assert_eq!(rep.problems.len(), 9, "{all}");
}

/// A trade part written with parquet directly, rows as given.
fn write_raw(path: &Path, rows: &[(i64, &str)], day: &str, kv_rows: &str) {
    let def = trade();
    let schema = part_arrow_schema(&def);
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(vec![1.0; rows.len()])),
            Arc::new(Int64Array::from(vec![1; rows.len()])),
        ],
    )
    .unwrap();
    let kv = |k: &str, v: &str| KeyValue::new(k.to_string(), v.to_string());
    let props = WriterProperties::builder()
        .set_key_value_metadata(Some(vec![
            kv("tickdb.version", "1"),
            kv("tickdb.table", "trade"),
            kv("tickdb.date", day),
            kv("tickdb.rows", kv_rows),
            kv("tickdb.source", "test"),
        ]))
        .build();
    let f = File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, schema, Some(props)).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
}

/// An update of `n` trade rows, encoded as the tp journals it.
fn trade_update(n: usize) -> Vec<u8> {
    let def = trade();
    let mut b = BatchBuilder::new(&def);
    for i in 0..n {
        b.set(0, tickdb_core::batch::Value::Timestamp(i as i64));
        b.set(1, tickdb_core::batch::Value::Symbol("A"));
        b.set(2, tickdb_core::batch::Value::F64(1.0));
        b.set(3, tickdb_core::batch::Value::I64(1));
        b.end_row();
    }
    encode_to_vec(&[b.finish()])
}

#[test]
fn rows_are_compared_with_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hdb");
    let jdir = dir.path().join("journal");
    let (mut j, _) = Journal::open(
        &jdir,
        JournalOptions {
            fsync: FsyncPolicy::Never,
            ..JournalOptions::default()
        },
    )
    .unwrap();
    // Day 1: seq 1 (3 rows), seq 2 (a quote-less, other-table record:
    // a clear marker), seq 3 (4 rows), seq 4 the end of day.
    // Day 2: seq 5 (2 rows), seq 6 the end of day.
    let marker = encode_to_vec(&[Batch::clear_marker("quote")]);
    j.append(0, 3, 0, &trade_update(3)).unwrap();
    j.append(0, 0, 0, &marker).unwrap();
    j.append(0, 4, 0, &trade_update(4)).unwrap();
    j.append(0, 0, 0, &marker).unwrap();
    j.append(0, 2, 0, &trade_update(2)).unwrap();
    j.append(0, 0, 0, &marker).unwrap();
    j.commit().unwrap();
    j.close().unwrap();

    // Day 1 matches; day 2's part lost a row.
    write_day(&root, date(2024, 1, 2), "eod:4", &some_rows(7));
    write_day(&root, date(2024, 1, 3), "eod:6", &some_rows(1));
    let rep = verify(&root, &schema(), Some(&jdir), false).unwrap();
    assert_eq!(rep.journal_checked.len(), 2, "{:?}", rep.journal_checked);
    let c1 = &rep.journal_checked[0];
    assert_eq!(
        (c1.after_seq, c1.eod_seq, c1.hdb_rows, c1.journal_rows),
        (0, 4, 7, Some(7))
    );
    let c2 = &rep.journal_checked[1];
    assert_eq!(
        (c2.after_seq, c2.eod_seq, c2.hdb_rows, c2.journal_rows),
        (4, 6, 1, Some(2))
    );
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    let p = &rep.problems[0];
    assert_eq!(p.path, date_dir(&root, "trade", date(2024, 1, 3)));
    assert!(p.what.contains("1 rows in the HDB, 2 rows"), "{}", p.what);

    // A source the journal does not reach yet is not compared.
    write_day(&root, date(2024, 1, 4), "eod:99", &some_rows(1));
    let rep = verify(&root, &schema(), Some(&jdir), false).unwrap();
    let c3 = rep
        .journal_checked
        .iter()
        .find(|c| c.eod_seq == 99)
        .unwrap();
    assert_eq!(c3.journal_rows, None);
    assert!(c3.note.contains("holds seq 1..=6"), "{}", c3.note);
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
}
