//! Writing and committing parts: the file's format, order and row groups,
//! idempotency, staging.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;

use common::*;
use parquet::basic::{Compression, Encoding, LogicalType, TimeUnit, Type as PhysicalType};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader, SortingColumn};
use tickdb_hdb::{
    cleanup_staging, committed_dates, date_dir, has_source, stage_day, CommitOutcome, StageOutcome,
    WriteOptions,
};

/// A small deterministic shuffle (no rand dependency needed).
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (seed >> 33) as usize % (i + 1);
        v.swap(i, j);
    }
}

#[test]
fn part_format_order_and_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Symbol sizes around floor 10 / cap 25; "B" is longer than the cap.
    let counts: [(&str, usize); 7] = [
        ("A", 3),
        ("B", 60),
        ("C", 12),
        ("D", 5),
        ("E", 8),
        ("F", 25),
        ("G", 1),
    ];
    let mut rows: Vec<Row> = Vec::new();
    for (s, n) in counts {
        for i in 0..n {
            // Times repeat (i / 3) so that stability is visible through `size`.
            rows.push(row(1_000 + (i / 3) as i64, Some(s), i as f64, 0));
        }
    }
    rows.push(row(5, None, 0.0, 0));
    rows.push(row(4, None, 0.0, 0));
    shuffle(&mut rows, 7);
    // `size` = input position, so equal (sym, time) rows must come out
    // in increasing size.
    for (i, r) in rows.iter_mut().enumerate() {
        r.3 = i as i64;
    }
    // Several batches, each with its own dictionary.
    let batches: Vec<_> = rows.chunks(17).map(trade_batch).collect();
    let opts = WriteOptions {
        fsync: true,
        row_group_rows_floor: 10,
        row_group_rows_cap: 25,
    };
    let day = date(2024, 1, 2);
    let staged = match stage_day(root, &trade(), day, "eod:42", &batches, &opts).unwrap() {
        StageOutcome::Staged(s) => s,
        o => panic!("{o:?}"),
    };
    assert_eq!(staged.report().rows, rows.len() as u64);
    assert!(staged
        .report()
        .path
        .to_string_lossy()
        .contains("/.tmp-date=2024-01-02-"));
    let rep = match staged.commit().unwrap() {
        CommitOutcome::Committed(r) => r,
        o => panic!("{o:?}"),
    };
    let path = date_dir(root, "trade", day).join("part-00000.parquet");
    assert_eq!(rep.path, path);
    assert!(rep.file_bytes > 0 && rep.input_bytes > 0);

    // Footer.
    let f = File::open(&path).unwrap();
    let md = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Required)
        .parse_and_finish(&f)
        .unwrap();
    assert_eq!(md.num_row_groups(), rep.row_groups);
    let kv: BTreeMap<String, String> = md
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .filter(|k| k.key.starts_with("tickdb."))
        .map(|k| (k.key.clone(), k.value.clone().unwrap()))
        .collect();
    let want: BTreeMap<String, String> = [
        ("tickdb.version", "1"),
        ("tickdb.table", "trade"),
        ("tickdb.date", "2024-01-02"),
        ("tickdb.rows", &rows.len().to_string()),
        ("tickdb.source", "eod:42"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(kv, want);
    let sd = md.file_metadata().schema_descr();
    let time = sd.column(0);
    assert_eq!(time.physical_type(), PhysicalType::INT64);
    assert_eq!(
        time.logical_type_ref(),
        Some(&LogicalType::timestamp(false, TimeUnit::NANOS))
    );
    let sym = sd.column(1);
    assert_eq!(sym.physical_type(), PhysicalType::BYTE_ARRAY);
    assert_eq!(sym.logical_type_ref(), Some(&LogicalType::String));
    let sorting = vec![
        SortingColumn {
            column_idx: 1,
            descending: false,
            nulls_first: true,
        },
        SortingColumn {
            column_idx: 0,
            descending: false,
            nulls_first: true,
        },
    ];
    for rg in md.row_groups() {
        assert_eq!(rg.sorting_columns(), Some(&sorting));
        assert!(rg.num_rows() <= 25, "row group of {} rows", rg.num_rows());
        for c in rg.columns() {
            assert!(
                matches!(c.compression(), Compression::ZSTD(_)),
                "{:?}",
                c.compression()
            );
            assert!(c.statistics().is_some());
        }
        let encs: Vec<Encoding> = rg.column(1).encodings().collect();
        assert!(
            encs.contains(&Encoding::RLE_DICTIONARY),
            "sym encodings {encs:?}"
        );
        assert!(rg.column(1).dictionary_page_offset().is_some());
    }
    let ci = md.column_index().expect("column index");
    let oi = md.offset_index().expect("offset index");
    assert_eq!(ci.len(), md.num_row_groups());
    assert_eq!(oi.len(), md.num_row_groups());
    for g in 0..md.num_row_groups() {
        assert_eq!(ci[g].len(), 4);
        assert!(!matches!(
            ci[g][0],
            parquet::file::page_index::column_index::ColumnIndexMetaData::NONE
        ));
        assert!(!oi[g][0].page_locations().is_empty());
    }

    // Rows: all there, sorted by (sym nulls first, time), stable.
    let groups = read_groups(&path);
    let out: Vec<Row> = groups.iter().flatten().cloned().collect();
    assert_eq!(out.len(), rows.len());
    let mut expect = rows.clone();
    expect.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0))); // stable
    assert_eq!(out, expect);

    // Row groups follow symbols: each symbol of <= cap rows in one group;
    // groups close at >= floor rows.
    let mut where_: BTreeMap<Option<String>, BTreeSet<usize>> = BTreeMap::new();
    for (g, rows) in groups.iter().enumerate() {
        for r in rows {
            where_.entry(r.1.clone()).or_default().insert(g);
        }
    }
    for (s, n) in counts {
        let gs = &where_[&Some(s.to_string())];
        if n <= 25 {
            assert_eq!(gs.len(), 1, "{s} in groups {gs:?}");
        } else {
            assert_eq!(gs.len(), n.div_ceil(25), "{s} in groups {gs:?}");
        }
    }
    let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
    // null(2) A(3) -> 5; +B: B is cut 25,25,10; C 12; D 5 + E 8 = 13; F 25; G 1.
    assert_eq!(sizes, vec![5, 25, 25, 10, 12, 13, 25, 1]);
}

#[test]
fn idempotent_by_source() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let day = date(2024, 1, 2);
    let rows = vec![row(2, Some("X"), 1.0, 1), row(1, Some("X"), 2.0, 2)];
    let r = write_day(root, day, "eod:10", &rows);
    assert!(r.path.ends_with("trade/date=2024-01-02/part-00000.parquet"));

    // The same source again: nothing is written.
    match stage_day(
        root,
        &trade(),
        day,
        "eod:10",
        &[trade_batch(&rows)],
        &fast(),
    )
    .unwrap()
    {
        StageOutcome::AlreadyCommitted(p) => assert_eq!(p, r.path),
        o => panic!("{o:?}"),
    }
    assert!(has_source(root, "trade", day, "eod:10").unwrap());
    assert!(!has_source(root, "trade", day, "eod:11").unwrap());

    // Another source on the same date: the next part.
    let r2 = write_day(root, day, "import:x.csv:10", &rows);
    assert!(r2
        .path
        .ends_with("trade/date=2024-01-02/part-00001.parquet"));

    // Two writers staged the same source before either committed: the
    // second commit finds the first's part and removes its copy.
    let s1 = stage_day(
        root,
        &trade(),
        day,
        "eod:20",
        &[trade_batch(&rows)],
        &fast(),
    )
    .unwrap();
    let s2 = stage_day(
        root,
        &trade(),
        day,
        "eod:20",
        &[trade_batch(&rows)],
        &fast(),
    )
    .unwrap();
    let (StageOutcome::Staged(s1), StageOutcome::Staged(s2)) = (s1, s2) else {
        panic!("both should stage");
    };
    let CommitOutcome::Committed(c1) = s1.commit().unwrap() else {
        panic!()
    };
    match s2.commit().unwrap() {
        CommitOutcome::AlreadyCommitted(p) => assert_eq!(p, c1.path),
        o => panic!("{o:?}"),
    }
    // The same race on a new date (the directory rename path).
    let day2 = date(2024, 1, 3);
    let s1 = stage_day(
        root,
        &trade(),
        day2,
        "eod:30",
        &[trade_batch(&rows)],
        &fast(),
    )
    .unwrap();
    let s2 = stage_day(
        root,
        &trade(),
        day2,
        "eod:30",
        &[trade_batch(&rows)],
        &fast(),
    )
    .unwrap();
    let (StageOutcome::Staged(s1), StageOutcome::Staged(s2)) = (s1, s2) else {
        panic!("both should stage");
    };
    assert!(matches!(s2.commit().unwrap(), CommitOutcome::Committed(_)));
    assert!(matches!(
        s1.commit().unwrap(),
        CommitOutcome::AlreadyCommitted(_)
    ));

    let names = |d| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(date_dir(root, "trade", d))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(day),
        [
            "part-00000.parquet",
            "part-00001.parquet",
            "part-00002.parquet"
        ]
    );
    assert_eq!(names(day2), ["part-00000.parquet"]);
    assert_eq!(
        committed_dates(root, "trade").unwrap(),
        [day, day2].into_iter().collect()
    );
    // No staging left behind.
    let left: Vec<_> = std::fs::read_dir(root.join("trade"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn concurrent_commits_of_one_source_leave_one_part() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let day = date(2024, 2, 1);
    let rows = vec![row(1, Some("X"), 1.0, 1)];
    write_day(&root, day, "eod:1", &rows);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let root = root.clone();
            let rows = rows.clone();
            std::thread::spawn(move || {
                match stage_day(
                    &root,
                    &trade(),
                    day,
                    "eod:2",
                    &[trade_batch(&rows)],
                    &fast(),
                )
                .unwrap()
                {
                    StageOutcome::Staged(s) => {
                        matches!(s.commit().unwrap(), CommitOutcome::Committed(_))
                    }
                    _ => false,
                }
            })
        })
        .collect();
    let committed = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|&c| c)
        .count();
    assert_eq!(committed, 1);
    assert_eq!(
        std::fs::read_dir(date_dir(&root, "trade", day))
            .unwrap()
            .count(),
        2
    );
}

#[test]
fn empty_keyed_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let day = date(2024, 1, 2);
    assert!(matches!(
        stage_day(root, &trade(), day, "eod:1", &[], &fast()).unwrap(),
        StageOutcome::Empty
    ));
    assert!(matches!(
        stage_day(root, &trade(), day, "eod:1", &[trade_batch(&[])], &fast()).unwrap(),
        StageOutcome::Empty
    ));
    let mut keyed = trade();
    keyed.kind = tickdb_core::TableKind::Keyed { key: vec![1] };
    let e = stage_day(
        root,
        &keyed,
        day,
        "eod:1",
        &[trade_batch(&[row(1, Some("A"), 1.0, 1)])],
        &fast(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("keyed"), "{e}");
    // A batch of another table's schema.
    let quote = schema().table("quote").unwrap().clone();
    let e = stage_day(
        root,
        &quote,
        day,
        "eod:1",
        &[trade_batch(&[row(1, Some("A"), 1.0, 1)])],
        &fast(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("columns"), "{e}");
    assert!(committed_dates(root, "trade").unwrap().is_empty());
}

#[test]
fn staging_is_invisible_and_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let day = date(2024, 1, 2);
    write_day(root, day, "eod:1", &[row(1, Some("A"), 1.0, 1)]);
    // A crash's leftover.
    let left = root.join("trade/.tmp-date=2024-01-03-999999-0");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("part-00000.parquet"), b"half a file").unwrap();
    // Another process sharing the HDB, alive (pid 1 always is), writing now.
    let live = root.join("trade/.tmp-date=2024-01-03-1-0");
    std::fs::create_dir_all(&live).unwrap();
    assert_eq!(
        committed_dates(root, "trade").unwrap(),
        [day].into_iter().collect()
    );

    // A staged but uncommitted part is removed when dropped.
    let s = stage_day(
        root,
        &trade(),
        date(2024, 1, 4),
        "eod:2",
        &[trade_batch(&[row(1, Some("A"), 1.0, 1)])],
        &fast(),
    )
    .unwrap();
    let StageOutcome::Staged(s) = s else { panic!() };
    let staging = s.report().path.parent().unwrap().to_path_buf();
    assert!(staging.exists());
    drop(s);
    assert!(!staging.exists());

    assert_eq!(cleanup_staging(root).unwrap(), vec![left.clone()]);
    assert!(!left.exists());
    assert!(live.exists(), "a live writer's staging was removed");
    std::fs::remove_dir(&live).unwrap();
    assert!(cleanup_staging(root).unwrap().is_empty());
    // A bad name in a table directory is an error naming it.
    std::fs::create_dir(root.join("trade/date=2024-1-5")).unwrap();
    let e = committed_dates(root, "trade").unwrap_err();
    assert!(e.to_string().contains("date=2024-1-5"), "{e}");
}
