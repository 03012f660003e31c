//! Append tables spanning today, closing days and the HDB (Parquet).

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tickdb_core::domain::Domains;
use tickdb_core::store::Store;
use tickdb_core::Schema as TickSchema;
use tickdb_query::history::date_dir;
use tickdb_query::{QueryEngine, QueryOptions};

const NS_PER_DAY: i64 = 86_400_000_000_000;
/// 2024-01-02.
const D0: i32 = 19_724;
use common::SYMS;

mod common;
use common::{apply_trades as apply, Trade};

fn day_start(d: i32) -> i64 {
    d as i64 * NS_PER_DAY
}

/// `n` trades of date `d`, syms skewed so runs differ in length.
fn gen_day(d: i32, n: usize) -> Vec<Trade> {
    (0..n)
        .map(|i| Trade {
            time: day_start(d) + 3_600_000_000_000 + i as i64 * 1_000_000 + (d as i64 % 7),
            sym: SYMS[(i * 7 + i / 3 + d as usize) % SYMS.len()],
            price: if i % 11 == 0 {
                None
            } else {
                Some(100.0 + ((i + d as usize) % 97) as f64 * 0.25)
            },
            size: ((i + d as usize) % 13) as i64 + 1,
        })
        .collect()
}

fn new_store() -> Arc<Store> {
    let schema = Arc::new(TickSchema::default_schema());
    Arc::new(Store::new(schema, Domains::new(None).unwrap()).unwrap())
}

fn file_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        ),
        Field::new("sym", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
        Field::new("size", DataType::Int64, true),
    ]))
}

/// Writes one part as the HDB does: sorted by (sym, time), row groups of
/// at most `rg_rows` following symbol runs (unless `pack`: groups cut
/// every `rg_rows` rows regardless of symbol), small pages.
fn write_part(
    root: &Path,
    table: &str,
    d: i32,
    file: &str,
    rows: &[Trade],
    rg_rows: usize,
    pack: bool,
) {
    let dir = root.join(table).join(date_dir(d));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| (a.sym, a.time).cmp(&(b.sym, b.time)));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rg_rows))
        .set_data_page_row_count_limit(64)
        .set_write_batch_size(64)
        .build();
    let f = std::fs::File::create(dir.join(file)).unwrap();
    let mut w = ArrowWriter::try_new(f, file_schema(), Some(props)).unwrap();
    let mut runs: Vec<&[Trade]> = Vec::new();
    if pack {
        runs.push(&rows);
    } else {
        let mut start = 0;
        for i in 1..=rows.len() {
            if i == rows.len() || rows[i].sym != rows[start].sym {
                runs.push(&rows[start..i]);
                start = i;
            }
        }
    }
    for run in runs {
        for chunk in run.chunks(rg_rows) {
            let cols: Vec<ArrayRef> = vec![
                Arc::new(TimestampNanosecondArray::from(
                    chunk.iter().map(|t| t.time).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    chunk.iter().map(|t| t.sym).collect::<Vec<_>>(),
                )),
                Arc::new(Float64Array::from(
                    chunk.iter().map(|t| t.price).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    chunk.iter().map(|t| t.size).collect::<Vec<_>>(),
                )),
            ];
            w.write(&RecordBatch::try_new(file_schema(), cols).unwrap())
                .unwrap();
            if !pack {
                w.flush().unwrap();
            }
        }
    }
    w.close().unwrap();
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Arc<Store>,
    clock: Arc<AtomicI32>,
    engine: QueryEngine,
    /// The same rows, all in memory, without an HDB.
    reference: QueryEngine,
    all: Vec<Trade>,
}

fn engine_with_hdb(store: Arc<Store>, root: &Path) -> QueryEngine {
    QueryEngine::new(
        store,
        QueryOptions {
            hdb: Some(root.to_path_buf()),
            ..QueryOptions::default()
        },
    )
    .unwrap()
}

/// History: D0 (one part), D0+1 (two parts), D0+2, D0+3 (one part each);
/// closing: D0+4; today: D0+5.
fn fixture(n: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let store = new_store();
    let clock = Arc::new(AtomicI32::new(D0 + 4));
    let c = clock.clone();
    store
        .days()
        .set_clock(Box::new(move || c.load(Ordering::SeqCst)));
    let mut all = Vec::new();
    let mut history: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for d in D0..D0 + 4 {
        let rows = gen_day(d, n);
        if d == D0 + 1 {
            let (a, b) = rows.split_at(n / 3);
            write_part(&root, "trade", d, "part-00000.parquet", a, 100, false);
            write_part(&root, "trade", d, "part-00001.parquet", b, 100, false);
            history.insert(
                d,
                vec!["part-00000.parquet".into(), "part-00001.parquet".into()],
            );
        } else {
            write_part(&root, "trade", d, "part-00000.parquet", &rows, 100, false);
            history.insert(d, vec!["part-00000.parquet".into()]);
        }
        all.extend(rows);
    }
    store
        .days()
        .set_history("trade", history, Default::default());
    let closing = gen_day(D0 + 4, n);
    apply(&store, &closing);
    store.end_day(D0 + 4, 4).unwrap();
    clock.store(D0 + 5, Ordering::SeqCst);
    let today = gen_day(D0 + 5, n);
    apply(&store, &today);
    all.extend(closing);
    all.extend(today);

    let ref_store = new_store();
    apply(&ref_store, &all);
    let reference = QueryEngine::new(ref_store, QueryOptions::default()).unwrap();
    let engine = engine_with_hdb(store.clone(), &root);
    Fixture {
        _dir: dir,
        root,
        store,
        clock,
        engine,
        reference,
        all,
    }
}

fn date_str(d: i32) -> String {
    date_dir(d).trim_start_matches("date=").to_string()
}

async fn text(e: &QueryEngine, sql: &str) -> String {
    let r = e
        .query(sql)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"));
    pretty_format_batches(&r.batches).unwrap().to_string()
}

async fn count(e: &QueryEngine, sql: &str) -> i64 {
    let r = e
        .query(sql)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"));
    r.batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

/// Runs `sql` with `{d}` as `date` on the HDB engine and as the date of
/// `time` on the all-in-memory reference, and compares.
async fn same(f: &Fixture, sql: &str) {
    let got = text(&f.engine, &sql.replace("{d}", "date")).await;
    let want = text(&f.reference, &sql.replace("{d}", "CAST(time AS DATE)")).await;
    assert_eq!(got, want, "{sql}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_equal_the_same_rows_in_memory() {
    let f = fixture(3_000);
    let d1 = date_str(D0 + 1);
    let d3 = date_str(D0 + 3);
    let d4 = date_str(D0 + 4);
    let d5 = date_str(D0 + 5);
    for sql in [
        "SELECT {d} AS d, sym, count(*), sum(size), min(price), max(price), count(price) \
         FROM trade GROUP BY 1, 2 ORDER BY 1, 2"
            .to_string(),
        "SELECT min(time), max(time), count(*), sum(size) FROM trade".to_string(),
        "SELECT {d} AS d, count(*), sum(size) FROM trade WHERE sym = 'IBM' GROUP BY 1 ORDER BY 1"
            .to_string(),
        format!(
            "SELECT {{d}} AS d, sym, count(*) FROM trade WHERE sym IN ('MSFT', 'TSLA') \
             AND time >= '{d1}T01:00:00.5' AND time < '{d4}T01:00:01.2' GROUP BY 1, 2 ORDER BY 1, 2"
        ),
        format!("SELECT count(*), sum(size) FROM trade WHERE {{d}} = '{d1}'"),
        format!("SELECT count(*), sum(size) FROM trade WHERE {{d}} = '{d4}'"),
        format!("SELECT count(*), sum(size) FROM trade WHERE {{d}} = '{d5}'"),
        format!("SELECT {{d}} AS d, count(*) FROM trade WHERE {{d}} IN ('{d1}', '{d3}', '{d5}') GROUP BY 1 ORDER BY 1"),
        format!("SELECT {{d}} AS d, count(*) FROM trade WHERE {{d}} BETWEEN '{d3}' AND '{d4}' GROUP BY 1 ORDER BY 1"),
        format!("SELECT {{d}} AS d, count(*) FROM trade WHERE {{d}} > '{d1}' AND sym = 'GOOG' GROUP BY 1 ORDER BY 1"),
        format!("SELECT time, sym, price, size, {{d}} AS d FROM trade WHERE sym = 'AAPL' AND {{d}} = '{d3}' ORDER BY time"),
        "SELECT time, sym, price, size FROM trade WHERE price > 120 AND size = 3 ORDER BY time, sym"
            .to_string(),
        "SELECT sym, time_bucket(INTERVAL '1 day', time) AS b, count(*), sum(size) \
         FROM trade GROUP BY 1, 2 ORDER BY 1, 2"
            .to_string(),
    ] {
        same(&f, &sql).await;
    }
    assert_eq!(
        count(&f.engine, "SELECT count(*) FROM trade").await,
        f.all.len() as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_has_a_date_column_only_with_an_hdb() {
    let f = fixture(100);
    let r = f.engine.query("SELECT * FROM trade LIMIT 1").await.unwrap();
    let names: Vec<_> = r.schema.fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, ["time", "sym", "price", "size", "date"]);
    assert_eq!(r.schema.field(4).data_type(), &DataType::Date32);
    assert!(!r.schema.field(4).is_nullable());
    assert!(matches!(
        r.schema.field(1).data_type(),
        DataType::Dictionary(_, _)
    ));
    // Keyed tables are unchanged.
    let r = f
        .engine
        .query("SELECT * FROM trade_1m LIMIT 1")
        .await
        .unwrap();
    assert!(r.schema.field_with_name("date").is_err());
    // Without an HDB: no date column.
    let r = f
        .reference
        .query("SELECT * FROM trade LIMIT 1")
        .await
        .unwrap();
    assert_eq!(r.schema.fields().len(), 4);
    assert!(f.reference.query("SELECT date FROM trade").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_reads_one_file_and_few_row_groups() {
    let f = fixture(3_000);
    let d2 = date_str(D0 + 2);
    let sql = format!("SELECT count(*), sum(size) FROM trade WHERE sym = 'IBM' AND date = '{d2}'");
    let (rows, m) = f.engine.explain_analyze_metrics(&sql).await.unwrap();
    assert_eq!(rows, 1);
    assert_eq!(m.scans, 1, "{m:?}");
    assert_eq!(m.files, 1, "{m:?}");
    assert_eq!(m.dates, 1, "{m:?}");
    // 3000 rows, 5 syms, groups of <= 100 rows per symbol run: 30+ groups,
    // 6 or 7 of IBM.
    assert!(m.row_groups_total >= 30, "{m:?}");
    assert!(m.row_groups_read <= 8, "{m:?}");
    assert_eq!(
        m.row_groups_read + m.row_groups_pruned_by_stats,
        m.row_groups_total
    );
    same(&f, &sql.replace("date =", "{d} =")).await;

    // A time range inside IBM's groups prunes pages too.
    let lo = day_start(D0 + 2) + 3_600_000_000_000 + 1_000_000_000;
    let sql = format!(
        "SELECT count(*) FROM trade WHERE sym = 'IBM' AND date = '{d2}' \
         AND time >= to_timestamp_nanos({lo}) AND time < to_timestamp_nanos({})",
        lo + 200_000_000
    );
    let (_, m) = f.engine.explain_analyze_metrics(&sql).await.unwrap();
    assert!(m.row_groups_read <= 2, "{m:?}");
    same(&f, &sql.replace("date =", "{d} =")).await;

    // The plan shows the pruning: one file, a predicate, the date gone.
    let r = f.engine.query(&format!("EXPLAIN {}", sql)).await.unwrap();
    let plan = pretty_format_batches(&r.batches).unwrap().to_string();
    assert!(plan.contains("predicate="), "{plan}");
    assert!(plan.contains(&date_dir(D0 + 2)), "{plan}");
    assert!(!plan.contains(&date_dir(D0 + 1)), "{plan}");

    // No date filter: every file of history, nothing of today pruned.
    let (_, m) = f
        .engine
        .explain_analyze_metrics("SELECT count(*) FROM trade WHERE sym = 'IBM'")
        .await
        .unwrap();
    assert_eq!(m.files, 5, "{m:?}");
    assert_eq!(m.dates, 4, "{m:?}");

    // Today only: no parquet at all.
    let d5 = date_str(D0 + 5);
    let (_, m) = f
        .engine
        .explain_analyze_metrics(&format!("SELECT count(*) FROM trade WHERE date = '{d5}'"))
        .await
        .unwrap();
    assert_eq!(m.scans, 0, "{m:?}");
}

/// Ends day `d` on `f`'s store: the rows go to a closing day, then to a
/// Parquet part, then the part is committed.
fn end_day(f: &Fixture, d: i32, rows: &[Trade]) -> impl FnOnce() {
    f.store.end_day(d, d as u64).unwrap();
    f.clock.store(d + 1, Ordering::SeqCst);
    let (root, store) = (f.root.clone(), f.store.clone());
    let rows = rows.to_vec();
    move || {
        write_part(&root, "trade", d, "part-00000.parquet", &rows, 100, false);
        store.days().commit(
            d as u64,
            &[("trade".to_string(), d, "part-00000.parquet".to_string())],
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_across_an_end_of_day_sees_every_row_once() {
    let f = fixture(1_000);
    let total = f.all.len() as i64;
    let sql = "SELECT count(*) FROM trade";
    let today = gen_day(D0 + 5, 1_000);

    // Planned before the end of day, run after the commit.
    let frame = f.engine.plan(sql).await.unwrap();
    let task = Arc::new(frame.task_ctx());
    let before = frame.create_physical_plan().await.unwrap();
    let commit = end_day(&f, D0 + 5, &today);
    // Planned between the end of day and the commit.
    let frame = f.engine.plan(sql).await.unwrap();
    let between = frame.create_physical_plan().await.unwrap();
    commit();
    // Planned after the commit.
    let frame = f.engine.plan(sql).await.unwrap();
    let after = frame.create_physical_plan().await.unwrap();
    for plan in [before, between, after] {
        let b = datafusion::physical_plan::collect(plan, task.clone())
            .await
            .unwrap();
        let n = b[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, total);
    }
    // New rows today are counted too, and the old today is history now.
    let more = gen_day(D0 + 6, 10);
    apply(&f.store, &more);
    assert_eq!(count(&f.engine, sql).await, total + 10);
    let d5 = date_str(D0 + 5);
    assert_eq!(
        count(
            &f.engine,
            &format!("SELECT count(*) FROM trade WHERE date = '{d5}'")
        )
        .await,
        1_000
    );
    let (_, m) = f
        .engine
        .explain_analyze_metrics(&format!("SELECT count(*) FROM trade WHERE date = '{d5}'"))
        .await
        .unwrap();
    assert_eq!((m.scans, m.files), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_committed_after_the_snapshot_is_not_read() {
    let f = fixture(500);
    let d3 = D0 + 3;
    let sql = format!("SELECT count(*) FROM trade WHERE date = '{}'", date_str(d3));
    let frame = f.engine.plan(&sql).await.unwrap();
    let task = Arc::new(frame.task_ctx());
    let plan = frame.create_physical_plan().await.unwrap();
    // A late part of an existing date.
    let late = gen_day(d3, 50);
    write_part(
        &f.root,
        "trade",
        d3,
        "part-00001.parquet",
        &late,
        100,
        false,
    );
    f.store.days().commit(
        99,
        &[("trade".to_string(), d3, "part-00001.parquet".to_string())],
    );
    let b = datafusion::physical_plan::collect(plan, task)
        .await
        .unwrap();
    let n = b[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(n, 500);
    assert_eq!(count(&f.engine, &sql).await, 550);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_takes_missing_symbols_from_history() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = new_store();
    store.days().set_clock(Box::new(|| D0 + 3));
    let t = |d: i32, s: &'static str, k: i64, size: i64| Trade {
        time: day_start(d) + k * 1_000_000_000,
        sym: s,
        price: Some(k as f64),
        size,
    };
    // D0: AAPL, MSFT, IBM, GOOG packed in one row group (several syms).
    let d0 = vec![
        t(D0, "AAPL", 1, 1),
        t(D0, "AAPL", 5, 2),
        t(D0, "MSFT", 2, 3),
        t(D0, "IBM", 9, 4),
        t(D0, "GOOG", 3, 5),
        t(D0, "GOOG", 4, 6),
    ];
    write_part(root, "trade", D0, "part-00000.parquet", &d0, 1000, true);
    // D0+1: MSFT in its own row groups, two parts; the later time wins.
    let p0 = vec![t(D0 + 1, "MSFT", 1, 7), t(D0 + 1, "MSFT", 7, 8)];
    let p1 = vec![t(D0 + 1, "MSFT", 3, 9)];
    write_part(root, "trade", D0 + 1, "part-00000.parquet", &p0, 1, false);
    write_part(root, "trade", D0 + 1, "part-00001.parquet", &p1, 1, false);
    store.days().set_history(
        "trade",
        BTreeMap::from([
            (D0, vec!["part-00000.parquet".to_string()]),
            (
                D0 + 1,
                vec![
                    "part-00000.parquet".to_string(),
                    "part-00001.parquet".to_string(),
                ],
            ),
        ]),
        Default::default(),
    );
    // Closing D0+2: IBM. Today D0+3: AAPL.
    apply(&store, &[t(D0 + 2, "IBM", 4, 10)]);
    store.end_day(D0 + 2, 1).unwrap();
    apply(&store, &[t(D0 + 3, "AAPL", 2, 11)]);
    let e = engine_with_hdb(store, root);
    let got = text(
        &e,
        "SELECT sym, size, date FROM latest('trade') ORDER BY sym",
    )
    .await;
    let want = [
        "+------+------+------------+",
        "| sym  | size | date       |",
        "+------+------+------------+",
        "| AAPL | 11   | 2024-01-05 |",
        "| GOOG | 6    | 2024-01-02 |",
        "| IBM  | 10   | 2024-01-04 |",
        "| MSFT | 8    | 2024-01-03 |",
        "+------+------+------------+",
    ]
    .join("\n");
    assert_eq!(got, want);
}

fn quote_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        ),
        Field::new("sym", DataType::Utf8, true),
        Field::new("bid", DataType::Float64, true),
        Field::new("ask", DataType::Float64, true),
        Field::new("bsize", DataType::Int64, true),
        Field::new("asize", DataType::Int64, true),
    ]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asof_join_and_buckets_span_history() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = new_store();
    store.days().set_clock(Box::new(|| D0 + 1));
    // Yesterday's quotes in history: IBM at 10:00 and 23:00.
    let qdir = root.join("quote").join(date_dir(D0));
    std::fs::create_dir_all(&qdir).unwrap();
    let q = RecordBatch::try_new(
        quote_schema(),
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![
                day_start(D0) + 10 * 3_600_000_000_000,
                day_start(D0) + 23 * 3_600_000_000_000,
            ])),
            Arc::new(StringArray::from(vec!["IBM", "IBM"])),
            Arc::new(Float64Array::from(vec![10.0, 11.0])),
            Arc::new(Float64Array::from(vec![10.5, 11.5])),
            Arc::new(Int64Array::from(vec![1, 2])),
            Arc::new(Int64Array::from(vec![1, 2])),
        ],
    )
    .unwrap();
    let f = std::fs::File::create(qdir.join("part-00000.parquet")).unwrap();
    let mut w = ArrowWriter::try_new(f, quote_schema(), None).unwrap();
    w.write(&q).unwrap();
    w.close().unwrap();
    store.days().set_history(
        "quote",
        BTreeMap::from([(D0, vec!["part-00000.parquet".to_string()])]),
        Default::default(),
    );
    // Yesterday's trades in history too, today's in memory.
    write_part(
        root,
        "trade",
        D0,
        "part-00000.parquet",
        &[Trade {
            time: day_start(D0) + 12 * 3_600_000_000_000,
            sym: "IBM",
            price: Some(1.0),
            size: 5,
        }],
        100,
        false,
    );
    store.days().set_history(
        "trade",
        BTreeMap::from([(D0, vec!["part-00000.parquet".to_string()])]),
        Default::default(),
    );
    apply(
        &store,
        &[Trade {
            time: day_start(D0 + 1) + 3_600_000_000_000,
            sym: "IBM",
            price: Some(2.0),
            size: 7,
        }],
    );
    let e = engine_with_hdb(store, root);
    let got = text(
        &e,
        "SELECT t.date, t.size, q.bid, q.date AS qdate FROM trade t \
         ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym ORDER BY t.time",
    )
    .await;
    let want = [
        "+------------+------+------+------------+",
        "| date       | size | bid  | qdate      |",
        "+------------+------+------+------------+",
        "| 2024-01-02 | 5    | 10.0 | 2024-01-02 |",
        "| 2024-01-03 | 7    | 11.0 | 2024-01-02 |",
        "+------------+------+------+------------+",
    ]
    .join("\n");
    assert_eq!(got, want);
    let got = text(
        &e,
        "SELECT time_bucket(INTERVAL '1 day', time) AS b, sum(size) FROM trade GROUP BY 1 ORDER BY 1",
    )
    .await;
    assert!(got.contains("2024-01-02T00:00:00 | 5"), "{got}");
    assert!(got.contains("2024-01-03T00:00:00 | 7"), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_or_missing_part_is_a_query_error_naming_it() {
    let f = fixture(300);
    let bad = f
        .root
        .join("trade")
        .join(date_dir(D0 + 2))
        .join("part-00000.parquet");
    std::fs::write(&bad, b"not a parquet file at all, just bytes").unwrap();
    let err = f
        .engine
        .query("SELECT count(*), sum(size) FROM trade")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("part-00000.parquet"), "{err}");
    assert!(err.to_string().contains(&date_dir(D0 + 2)), "{err}");
    // Other dates still answer.
    let d1 = date_str(D0 + 1);
    assert_eq!(
        count(
            &f.engine,
            &format!("SELECT count(*) FROM trade WHERE date = '{d1}'")
        )
        .await,
        300
    );
    // latest() names it too.
    let err = f
        .engine
        .query("SELECT * FROM latest('trade')")
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&date_dir(D0 + 2)), "{err}");

    let gone = f
        .root
        .join("trade")
        .join(date_dir(D0 + 3))
        .join("part-00000.parquet");
    std::fs::remove_file(&gone).unwrap();
    let err = f
        .engine
        .query(&format!("SELECT count(*) FROM trade WHERE date >= '{d1}'"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&date_dir(D0 + 3)), "{err}");
    // Truncated: a footer that is not there.
    let cut = f
        .root
        .join("trade")
        .join(date_dir(D0 + 1))
        .join("part-00001.parquet");
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = f
        .engine
        .query(&format!("SELECT count(*) FROM trade WHERE date = '{d1}'"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("part-00001.parquet"), "{err}");
    // Today still answers.
    let d5 = date_str(D0 + 5);
    assert_eq!(
        count(
            &f.engine,
            &format!("SELECT count(*) FROM trade WHERE date = '{d5}'")
        )
        .await,
        300
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cast_of_time_to_date_is_not_a_time_range() {
    // Without an HDB: `CAST(time AS DATE) = d` must not prune chunks as
    // if it were `time = d 00:00`.
    let f = fixture(2_000);
    let d = D0 + 1;
    let want = f
        .all
        .iter()
        .filter(|t| t.time.div_euclid(NS_PER_DAY) == d as i64)
        .count();
    let sql = format!(
        "SELECT count(*) FROM trade WHERE CAST(time AS DATE) = '{}'",
        date_str(d)
    );
    assert_eq!(count(&f.reference, &sql).await, want as i64);
    let sql = format!(
        "SELECT count(*) FROM trade WHERE CAST(time AS DATE) <= '{}'",
        date_str(d)
    );
    let want = f
        .all
        .iter()
        .filter(|t| t.time.div_euclid(NS_PER_DAY) <= d as i64)
        .count();
    assert_eq!(count(&f.reference, &sql).await, want as i64);
    assert_eq!(count(&f.engine, &sql).await, want as i64);
}
