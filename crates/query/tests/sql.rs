//! SQL over the store: aggregates, pushed-down filters checked against
//! brute force, errors, limits and encodings.

mod common;

use common::*;
use datafusion::arrow::compute::concat_batches;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tickdb_query::encode::{self, rfc3339_nanos};
use tickdb_query::provider::{
    partition, scan_batches, Pruning, PARALLEL_GATHER_ROWS_MIN, PARTITION_ROWS_MIN,
};
use tickdb_query::{QueryEngine, QueryError, QueryOptions};

const ROWS: usize = 200_000;

async fn rows(e: &QueryEngine, sql: &str) -> Vec<Value> {
    let r = e
        .query(sql)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"));
    match encode::json(&r)["dataset"].clone() {
        Value::Array(a) => a,
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_match_brute_force() {
    let trades = gen_trades(ROWS);
    let store = store_with(&trades);
    assert!(
        store
            .snapshot("trade")
            .unwrap()
            .chunks
            .iter()
            .filter(|c| c.sym_index.is_some())
            .count()
            >= 2
    );
    let e = engine(store);

    let total: i64 = trades.iter().map(|t| t.size).sum();
    assert_eq!(
        rows(&e, "SELECT count(*), sum(size) FROM trade").await,
        vec![json!([ROWS, total])]
    );

    let mut by_sym: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for t in &trades {
        let s = by_sym.entry(t.sym).or_default();
        s.0 += 1;
        s.1 += t.size;
    }
    let want: Vec<Value> = by_sym.iter().map(|(s, (n, z))| json!([s, n, z])).collect();
    assert_eq!(
        rows(
            &e,
            "SELECT sym, count(*), sum(size) FROM trade GROUP BY sym ORDER BY sym"
        )
        .await,
        want
    );
    // Null prices are skipped by count(price).
    let priced = trades.iter().filter(|t| t.price.is_some()).count();
    assert_eq!(
        rows(&e, "SELECT count(price) FROM trade").await,
        vec![json!([priced])]
    );
    // An empty table answers too.
    assert_eq!(
        rows(&e, "SELECT count(*) FROM quote").await,
        vec![json!([0])]
    );
}

/// Each filtered query must equal the same filter written so that it
/// cannot be pushed down (`sym || ''`, `time + 0`), and a Rust count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_down_filters_equal_unpushed() {
    let trades = gen_trades(ROWS);
    let e = engine(store_with(&trades));
    let ts = |ns: i64| rfc3339_nanos(ns);
    let lo = T0 + 70_000 * 1_000_000;
    let hi = T0 + 140_000 * 1_000_000;
    let cases: Vec<(String, String, usize)> = vec![
        (
            "sym = 'IBM'".into(),
            "sym || '' = 'IBM'".into(),
            trades.iter().filter(|t| t.sym == "IBM").count(),
        ),
        (
            "'IBM' = sym".into(),
            "sym || '' = 'IBM'".into(),
            trades.iter().filter(|t| t.sym == "IBM").count(),
        ),
        (
            "sym IN ('IBM', 'TSLA', 'NOPE')".into(),
            "sym || '' IN ('IBM', 'TSLA', 'NOPE')".into(),
            trades.iter().filter(|t| t.sym == "IBM" || t.sym == "TSLA").count(),
        ),
        (
            "(sym = 'AAPL' OR sym = 'GOOG')".into(),
            "(sym || '' = 'AAPL' OR sym || '' = 'GOOG')".into(),
            trades.iter().filter(|t| t.sym == "AAPL" || t.sym == "GOOG").count(),
        ),
        ("sym = 'NOPE'".into(), "sym || '' = 'NOPE'".into(), 0),
        (
            format!("time >= '{}' AND time < '{}'", ts(lo), ts(hi)),
            format!("time + INTERVAL '0 seconds' >= '{}' AND time + INTERVAL '0 seconds' < '{}'", ts(lo), ts(hi)),
            trades.iter().filter(|t| t.time >= lo && t.time < hi).count(),
        ),
        (
            format!("time BETWEEN '{}' AND '{}' AND sym = 'MSFT'", ts(lo), ts(hi)),
            format!("time + INTERVAL '0 seconds' BETWEEN '{}' AND '{}' AND sym || '' = 'MSFT'", ts(lo), ts(hi)),
            trades.iter().filter(|t| t.time >= lo && t.time <= hi && t.sym == "MSFT").count(),
        ),
        (
            format!("time > to_timestamp_nanos({lo}) AND sym IN ('AAPL', 'IBM')"),
            format!("time + INTERVAL '0 seconds' > to_timestamp_nanos({lo}) AND sym || '' IN ('AAPL', 'IBM')"),
            trades.iter().filter(|t| t.time > lo && (t.sym == "AAPL" || t.sym == "IBM")).count(),
        ),
        (
            format!("'{}' > time", ts(lo)),
            format!("'{}' > time + INTERVAL '0 seconds'", ts(lo)),
            trades.iter().filter(|t| t.time < lo).count(),
        ),
    ];
    for (pushed, unpushed, n) in cases {
        let q = |w: &str| {
            format!(
                "SELECT count(*), sum(size), min(time), max(time), sum(price) FROM trade WHERE {w}"
            )
        };
        let a = rows(&e, &q(&pushed)).await;
        let b = rows(&e, &q(&unpushed)).await;
        assert_eq!(a, b, "{pushed} vs {unpushed}");
        assert_eq!(a[0][0], json!(n), "{pushed}");
        // No column projected at all: the scan passes row counts only.
        let c = rows(&e, &format!("SELECT count(*) FROM trade WHERE {pushed}")).await;
        assert_eq!(c[0][0], json!(n), "count(*) alone, {pushed}");
        // Row order and contents, not just aggregates.
        let r = |w: &str| {
            format!("SELECT time, sym, price, size FROM trade WHERE {w} ORDER BY time, size")
        };
        assert_eq!(
            rows(&e, &r(&pushed)).await,
            rows(&e, &r(&unpushed)).await,
            "{pushed}"
        );
    }
    // The symbol filter is exact: no FilterExec stays above the scan.
    let plan = rows(&e, "EXPLAIN SELECT price FROM trade WHERE sym = 'IBM'").await;
    let text = format!("{plan:?}");
    assert!(!text.contains("FilterExec"), "{text}");
    // Time pruning skips chunks but keeps the exact filter.
    let plan = rows(
        &e,
        &format!("EXPLAIN SELECT price FROM trade WHERE time >= '{}'", ts(lo)),
    )
    .await;
    assert!(format!("{plan:?}").contains("FilterExec"));
}

/// A scan under a time range cuts the chunks the range starts or ends in
/// to the rows around it: never a row of the range lost, out-of-order
/// rows or not, and a poll of the last moments reads about their rows, not
/// their chunk's (so its plan runs on one thread). Random ranges; the seed
/// is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_ranges_cut_chunks_to_the_rows_around_them() {
    let trades = gen_trades(ROWS);
    let store = store_with(&trades);
    let e = engine(store.clone());
    let snap = store.snapshot("trade").unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    println!("time_ranges_cut_chunks_to_the_rows_around_them: seed {seed}");
    let mut x = seed;
    let mut next = move |n: i64| {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as i64
    };
    let span = ROWS as i64 * 1_000_000;
    for round in 0..40 {
        // Bounds on row times (jittered ones included) or between them.
        let a = T0 - 10_000_000 + next(span + 20_000_000);
        let b = a + next(span / 4);
        let (lo, hi) = if round % 5 == 0 {
            (a, i64::MAX)
        } else {
            (a, b)
        };
        let syms = match round % 3 {
            0 => None,
            1 => Some(vec!["IBM"]),
            _ => Some(vec!["AAPL", "TSLA"]),
        };
        let keep = |t: &Trade| {
            t.time >= lo && t.time <= hi && syms.as_ref().is_none_or(|s| s.contains(&t.sym))
        };
        let want = trades.iter().filter(|t| keep(t)).count();
        let pruning = Pruning {
            syms: syms
                .as_ref()
                .map(|s| s.iter().map(|s| s.to_string()).collect()),
            time_lo: lo,
            time_hi: hi,
        };
        let b = scan_batches(&snap, &pruning, None, 8192, 2).unwrap();
        let got = concat_batches(&snap.schema, &b).unwrap();
        let times = got
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::TimestampNanosecondArray>()
            .unwrap();
        let inside = times
            .values()
            .iter()
            .filter(|t| **t >= lo && **t <= hi)
            .count();
        assert_eq!(
            inside, want,
            "seed {seed} round {round}: [{lo}, {hi}] {syms:?}"
        );
        // What the scan keeps outside the range is at most the
        // out-of-order rows near its ends (one row in 17 arrives 5 ms
        // late), not whole chunks.
        let extra = got.num_rows() - inside;
        assert!(
            extra <= 64,
            "seed {seed} round {round}: {extra} rows outside [{lo}, {hi}]"
        );
        let filter = match &syms {
            None => format!("time >= to_timestamp_nanos({lo})"),
            Some(s) => format!(
                "time >= to_timestamp_nanos({lo}) AND sym IN ({})",
                s.iter()
                    .map(|s| format!("'{s}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let filter = if hi == i64::MAX {
            filter
        } else {
            format!("{filter} AND time <= to_timestamp_nanos({hi})")
        };
        let n = rows(&e, &format!("SELECT count(*) FROM trade WHERE {filter}")).await;
        assert_eq!(
            n,
            vec![json!([want])],
            "seed {seed} round {round}: {filter}"
        );
    }
    // The newest rows alone: one partition, no repartitioning.
    let last = trades.iter().map(|t| t.time).max().unwrap();
    let plan = rows(
        &e,
        &format!(
            "EXPLAIN SELECT max(time), count(*) FROM trade WHERE time > to_timestamp_nanos({})",
            last - 50_000_000
        ),
    )
    .await;
    let text = format!("{plan:?}");
    assert!(text.contains("partitions=1"), "{text}");
    assert!(!text.contains("RepartitionExec"), "{text}");
}

/// A small scan stays one partition (a second would cost a thread's
/// wake-up for less work than that); a large one spreads over them all,
/// each a contiguous run of the batches in their order.
#[test]
fn small_scans_stay_one_partition() {
    let trades = gen_trades(ROWS);
    let store = store_with(&trades);
    let snap = store.snapshot("trade").unwrap();
    let all = scan_batches(&snap, &Pruning::default(), None, 1000, 1).unwrap();
    let rows_of = |b: &[datafusion::arrow::array::RecordBatch]| -> usize {
        b.iter().map(|b| b.num_rows()).sum()
    };
    let first = |rows: usize| {
        let mut out = Vec::new();
        let mut n = 0;
        for b in &all {
            if n + b.num_rows() > rows {
                break;
            }
            out.push(b.clone());
            n += b.num_rows();
        }
        out
    };
    let few = first(PARTITION_ROWS_MIN);
    assert_eq!(partition(few, 4).len(), 1);
    let more = first(2 * PARTITION_ROWS_MIN);
    assert_eq!(partition(more, 4).len(), 2);
    let parts = partition(all.clone(), 4);
    assert_eq!(parts.len(), 4);
    let flat: Vec<_> = parts.into_iter().flatten().collect();
    assert_eq!(rows_of(&flat), ROWS);
    let whole = concat_batches(&snap.schema, &all).unwrap();
    assert_eq!(concat_batches(&snap.schema, &flat).unwrap(), whole);
    assert_eq!(partition(Vec::new(), 4).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_by_sym_with_index_filter_and_projection() {
    let trades = gen_trades(ROWS);
    let e = engine(store_with(&trades));
    let want: f64 = trades
        .iter()
        .filter(|t| t.sym == "TSLA")
        .filter_map(|t| t.price)
        .sum();
    let got = rows(
        &e,
        "SELECT sym, sum(price) FROM trade WHERE sym = 'TSLA' GROUP BY sym",
    )
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0][0], json!("TSLA"));
    assert!((got[0][1].as_f64().unwrap() - want).abs() < 1e-6 * want);
    // LIMIT with a pushed symbol filter.
    let got = rows(&e, "SELECT sym FROM trade WHERE sym = 'GOOG' LIMIT 5").await;
    assert_eq!(got, vec![json!(["GOOG"]); 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_clear() {
    let e = engine(store_with(&gen_trades(100)));
    match e.query("SELEC * FROM trade").await {
        Err(QueryError::Syntax { message, position }) => {
            assert_eq!(position, Some((1, 1)), "{message}");
            assert!(message.contains("SELEC"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match e.query("SELECT * FROM trade WHERE").await {
        Err(err @ QueryError::Syntax { .. }) => {
            assert_eq!(err.kind(), "syntax");
            assert!(err.position().is_some(), "{err}");
        }
        other => panic!("{other:?}"),
    }
    match e.query("SELECT * FROM trad").await {
        Err(err @ QueryError::Plan { .. }) => {
            assert!(err.to_string().contains("table 'trad' not found"), "{err}");
            assert_eq!(err.position(), Some((1, 15)));
        }
        other => panic!("{other:?}"),
    }
    match e.query("SELECT prce FROM trade").await {
        Err(err @ QueryError::Plan { .. }) => {
            let m = err.to_string();
            assert!(m.contains("column 'prce' not found in 'trade'"), "{m}");
            assert!(m.contains("did you mean 'price'"), "{m}");
            assert_eq!(err.position(), Some((1, 8)), "{m}");
        }
        other => panic!("{other:?}"),
    }
    match e.query("SELECT price + sym FROM trade").await {
        Err(err @ QueryError::Plan { .. }) => assert_eq!(err.kind(), "plan"),
        other => panic!("{other:?}"),
    }
    match e.query("SELECT sum(sym) FROM trade").await {
        Err(err @ QueryError::Plan { .. }) => assert!(err.to_string().contains("sum"), "{err}"),
        other => panic!("{other:?}"),
    }
    // Read-only: no DDL, DML or SET.
    for sql in [
        "CREATE TABLE x (a INT)",
        "DROP TABLE trade",
        "INSERT INTO trade VALUES (1)",
    ] {
        let err = e.query(sql).await.unwrap_err();
        assert!(matches!(err, QueryError::Plan { .. }), "{sql}: {err:?}");
    }
    assert_eq!(
        rows(&e, "SELECT count(*) FROM trade").await,
        vec![json!([100])]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_query_times_out() {
    let store = store_with(&gen_trades(ROWS));
    let opts = QueryOptions {
        timeout: Duration::from_millis(100),
        ..QueryOptions::default()
    };
    let e = QueryEngine::new(store, opts).unwrap();
    let t = Instant::now();
    let err = e
        .query(
            "SELECT sum(a.size * b.size) FROM trade a CROSS JOIN trade b WHERE a.price > b.price",
        )
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::Timeout(_)), "{err:?}");
    assert_eq!(err.kind(), "timeout");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The engine still answers afterwards.
    assert_eq!(
        rows(&e, "SELECT count(*) FROM trade").await,
        vec![json!([ROWS])]
    );
    // Streams time out too.
    let mut s = e
        .stream(
            "SELECT a.size FROM trade a CROSS JOIN trade b WHERE a.price > b.price + 1000",
            e.new_ctx(None),
        )
        .await
        .unwrap();
    let t = Instant::now();
    let mut failed = false;
    while let Some(b) = s.next().await {
        if let Err(err) = b {
            assert!(matches!(err, QueryError::Timeout(_)), "{err:?}");
            failed = true;
            break;
        }
    }
    assert!(failed);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_is_enforced() {
    let store = store_with(&gen_trades(ROWS));
    let opts = QueryOptions {
        memory_limit_bytes: 256 * 1024,
        ..QueryOptions::default()
    };
    let e = QueryEngine::new(store, opts).unwrap();
    let err = e
        .query("SELECT * FROM trade ORDER BY price, time")
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::ResourcesExhausted(_)), "{err:?}");
    let err = e
        .query("SELECT time, size, count(*) FROM trade GROUP BY time, size")
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::ResourcesExhausted(_)), "{err:?}");
    assert_eq!(err.kind(), "resources_exhausted");
    // Small queries still run.
    assert_eq!(
        rows(&e, "SELECT count(*) FROM trade").await,
        vec![json!([ROWS])]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encodings_round_trip() {
    let trades = gen_trades(70_000);
    let e = engine(store_with(&trades));
    let sql = "SELECT time, sym, price, size, price / 0.0 AS inf, 'x,\"y' AS s FROM trade ORDER BY time, size LIMIT 12";
    let r = e.query(sql).await.unwrap();
    let mut model: Vec<&Trade> = trades.iter().collect();
    model.sort_by_key(|t| (t.time, t.size));
    let model = &model[..12];

    let j = encode::json(&r);
    assert_eq!(j["query"], json!(sql));
    assert_eq!(j["count"], json!(12));
    assert_eq!(
        j["columns"],
        json!([
            {"name": "time", "type": "TIMESTAMP"},
            {"name": "sym", "type": "SYMBOL"},
            {"name": "price", "type": "DOUBLE"},
            {"name": "size", "type": "LONG"},
            {"name": "inf", "type": "DOUBLE"},
            {"name": "s", "type": "VARCHAR"},
        ])
    );
    for (row, t) in j["dataset"].as_array().unwrap().iter().zip(model) {
        assert_eq!(row[0], json!(rfc3339_nanos(t.time)));
        assert_eq!(row[1], json!(t.sym));
        assert_eq!(row[2], t.price.map(|p| json!(p)).unwrap_or(Value::Null));
        assert_eq!(row[3], json!(t.size));
        assert_eq!(row[4], Value::Null, "inf and NaN become null");
        assert_eq!(row[5], json!("x,\"y"));
    }

    let csv = String::from_utf8(encode::csv(&r)).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "time,sym,price,size,inf,s");
    assert_eq!(lines.len(), 13);
    let t = model[1];
    assert!(
        lines[2].starts_with(&format!("{},{},", rfc3339_nanos(t.time), t.sym)),
        "{}",
        lines[2]
    );
    assert!(lines[2].ends_with("\"x,\"\"y\""), "{}", lines[2]);

    let ipc = encode::arrow_ipc(&r);
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None)
            .unwrap();
    assert_eq!(reader.schema(), r.schema);
    let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    assert_eq!(batches, r.batches);

    // Whole-table encodings (many batches, dictionaries from several chunks).
    let r = e.query("SELECT * FROM trade").await.unwrap();
    let ipc = encode::arrow_ipc(&r);
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None)
            .unwrap();
    let n: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(n, 70_000);
    assert_eq!(
        encode::csv(&r).iter().filter(|b| **b == b'\n').count(),
        70_001
    );
    assert_eq!(encode::json(&r)["count"], json!(70_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_see_a_snapshot_while_ingest_goes_on() {
    let trades = gen_trades(50_000);
    let store = store_with(&trades[..10_000]);
    let e = engine(store.clone());
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            let schema = store.schema().clone();
            let def = schema.table("trade").unwrap();
            for part in trades[10_000..].chunks(1_000) {
                let mut b = tickdb_core::BatchBuilder::new(def);
                for t in part {
                    b.set(0, tickdb_core::batch::Value::Timestamp(t.time));
                    b.set(1, tickdb_core::batch::Value::Symbol(t.sym));
                    b.set(3, tickdb_core::batch::Value::I64(t.size));
                    b.end_row();
                }
                store.apply(&b.finish()).unwrap();
            }
        })
    };
    let mut last = 0;
    for _ in 0..20 {
        let r = rows(&e, "SELECT count(*), count(size) FROM trade").await;
        let n = r[0][0].as_i64().unwrap();
        // Whole batches only: a query sees a cut between two applies.
        assert_eq!(r[0][0], r[0][1]);
        assert!(n >= last && n % 1_000 == 0, "{n}");
        last = n;
    }
    writer.join().unwrap();
    assert_eq!(
        rows(&e, "SELECT count(*) FROM trade").await,
        vec![json!([50_000])]
    );
}

/// A symbol filter over many chunks, where quiet symbols have a few rows
/// in each chunk (gathered across chunks into shared batches) and a busy
/// one has a chunk's worth (a batch per chunk; its 300,000 rows are more
/// than `PARALLEL_GATHER_ROWS_MIN`, so two threads gather them), alone and
/// mixed, with the active chunk too: the rows, their arrival order and
/// their symbols equal brute force, and so does an ASOF JOIN of one quiet
/// symbol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symbol_filters_over_many_chunks_equal_brute_force() {
    let names: Vec<&'static str> = (0..300)
        .map(|i| &*Box::leak(format!("Q{i:03}").into_boxed_str()))
        .collect();
    let trades: Vec<Trade> = (0..600_000usize)
        .map(|i| Trade {
            time: T0 + i as i64 * 1_000,
            // Every other row the busy symbol, the rest spread thinly.
            sym: if i % 2 == 0 {
                "HOT"
            } else {
                names[(i / 2) % names.len()]
            },
            price: if i % 11 == 0 {
                None
            } else {
                Some(i as f64 * 0.5)
            },
            size: (i % 7) as i64,
        })
        .collect();
    let store = store_with(&trades);
    let e = engine(store.clone());
    let brute = |syms: &[&str]| -> Vec<Value> {
        trades
            .iter()
            .filter(|t| syms.contains(&t.sym))
            .map(|t| json!([rfc3339_nanos(t.time), t.sym, t.price, t.size]))
            .collect()
    };
    for syms in [
        vec!["Q007"],
        vec!["Q299", "Q000", "Q150"],
        vec!["HOT"],
        vec!["Q042", "HOT"],
        vec!["NOPE", "Q001"],
    ] {
        let list: Vec<String> = syms.iter().map(|s| format!("'{s}'")).collect();
        let filter = format!("sym IN ({})", list.join(", "));
        let got = rows(
            &e,
            &format!("SELECT time, sym, price, size FROM trade WHERE {filter} ORDER BY time"),
        )
        .await;
        assert_eq!(got, brute(&syms), "{filter}");
        let n = rows(&e, &format!("SELECT count(*) FROM trade WHERE {filter}")).await;
        assert_eq!(n, vec![json!([brute(&syms).len()])], "{filter}");
    }
    // The scan itself: gathered by two threads or by one, the same rows in
    // the same (arrival) order, the busy symbol alone and mixed.
    let snap = store.snapshot("trade").unwrap();
    for syms in [vec!["HOT"], vec!["Q042", "HOT"], vec!["Q007"]] {
        let pruning = Pruning {
            syms: Some(syms.iter().map(|s| s.to_string()).collect()),
            ..Pruning::default()
        };
        let scan = |threads| {
            let b = scan_batches(&snap, &pruning, None, 8192, threads).unwrap();
            concat_batches(&snap.schema, &b).unwrap()
        };
        let (one, two) = (scan(1), scan(2));
        assert_eq!(one, two, "{syms:?}");
        assert_eq!(one.num_rows(), brute(&syms).len(), "{syms:?}");
        if syms == ["HOT"] {
            assert!(one.num_rows() >= PARALLEL_GATHER_ROWS_MIN);
        }
    }
    // One quiet symbol's trades, each joined to itself (the latest trade of
    // that symbol at or before it): the symbol column is read as a key.
    let q: Vec<&Trade> = trades.iter().filter(|t| t.sym == "Q123").collect();
    let want: Vec<Value> = q
        .iter()
        .map(|t| json!([rfc3339_nanos(t.time), t.sym, t.size]))
        .collect();
    let got = rows(
        &e,
        "SELECT a.time, b.sym, b.size FROM trade a ASOF JOIN trade b \
         MATCH_CONDITION (a.time >= b.time) ON a.sym = b.sym WHERE a.sym = 'Q123' ORDER BY a.time",
    )
    .await;
    assert_eq!(got, want);
    // Aggregated, as a monitor asks it: a join of a few hundred rows runs
    // on one thread, start to end, and counts every left row.
    let sql = "SELECT count(*), sum(b.size) FROM trade a ASOF JOIN trade b \
               MATCH_CONDITION (a.time >= b.time) ON a.sym = b.sym WHERE a.sym = 'Q123'";
    let sum: i64 = q.iter().map(|t| t.size).sum();
    assert_eq!(rows(&e, sql).await, vec![json!([q.len(), sum])]);
    let plan = format!("{:?}", rows(&e, &format!("EXPLAIN {sql}")).await);
    assert!(!plan.contains("RepartitionExec"), "{plan}");
}
