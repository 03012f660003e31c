//! A size check, ignored by default: `cargo test --release -p tickdb-hdb
//! --test large -- --ignored --nocapture` (HDB_ROWS sets the rows).

mod common;

use std::sync::Arc;

use arrow_array::{
    DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
    UInt32Array,
};
use common::*;
use tickdb_hdb::{stage_day, verify, CommitOutcome, StageOutcome};

fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .map_or(0, |kib| kib / 1024)
}

#[test]
#[ignore]
fn large_day() {
    let rows: usize = std::env::var("HDB_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000_000);
    let nsym = 1000u32;
    let dict = Arc::new(StringArray::from(
        (0..nsym)
            .map(|i| format!("S{:04}", (i * 7919) % nsym))
            .collect::<Vec<_>>(),
    ));
    let def = trade();
    let aschema = tickdb_core::store::arrow_schema(&def);
    let mut batches = Vec::new();
    let mut seed = 1u64;
    let mut t = 1_704_189_600_000_000_000i64;
    let chunk = 65_536;
    let mut at = 0;
    while at < rows {
        let n = chunk.min(rows - at);
        let mut keys = Vec::with_capacity(n);
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Zipf-ish: low keys far more often.
            let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
            keys.push(((nsym as f64).powf(u) as u32).min(nsym - 1));
            t += 1000;
            times.push(t);
        }
        let sym = DictionaryArray::new(UInt32Array::from(keys), dict.clone());
        batches.push(
            RecordBatch::try_new(
                aschema.clone(),
                vec![
                    Arc::new(TimestampNanosecondArray::from(times)),
                    Arc::new(sym),
                    Arc::new(Float64Array::from(vec![100.25; n])),
                    Arc::new(Int64Array::from(vec![100; n])),
                ],
            )
            .unwrap(),
        );
        at += n;
    }
    let input: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
    eprintln!(
        "input {rows} rows, {} MiB, peak RSS so far {} MiB",
        input >> 20,
        peak_rss_mib()
    );
    // HDB_OUT keeps the HDB for a look with other readers.
    let tmp = tempfile::tempdir().unwrap();
    let out = std::env::var_os("HDB_OUT").map(std::path::PathBuf::from);
    let root = out.as_deref().unwrap_or(tmp.path());
    let t0 = std::time::Instant::now();
    let s = match stage_day(root, &def, date(2024, 1, 2), "eod:1", &batches, &fast()).unwrap() {
        StageOutcome::Staged(s) => s,
        o => panic!("{o:?}"),
    };
    let CommitOutcome::Committed(r) = s.commit().unwrap() else {
        panic!()
    };
    eprintln!(
        "sort {:.2}s write {:.2}s total {:.2}s, {} row groups, {} MiB file, peak RSS {} MiB",
        r.sort_secs,
        r.write_secs,
        t0.elapsed().as_secs_f64(),
        r.row_groups,
        r.file_bytes >> 20,
        peak_rss_mib()
    );
    let t1 = std::time::Instant::now();
    let v = verify(root, &schema(), None, false).unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    assert_eq!(v.rows, rows as u64);
    eprintln!("verify {:.2}s", t1.elapsed().as_secs_f64());
}
