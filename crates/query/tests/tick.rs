//! Tick SQL extensions: ASOF JOIN against brute force, vwap, time buckets.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value as V};
use tickdb_core::store::Store;
use tickdb_query::encode;
use tickdb_query::QueryEngine;

#[derive(Debug, Clone)]
struct Quote {
    time: i64,
    sym: &'static str,
    bid: f64,
}

/// Quotes for all symbols but TSLA, plus one trades never have; times
/// interleave with the trades' and some repeat (ties keep arrival order).
fn gen_quotes(n: usize) -> Vec<Quote> {
    let syms = ["AAPL", "MSFT", "IBM", "GOOG", "NFLX"];
    (0..n)
        .map(|i| Quote {
            time: T0 + (i as i64 * 1_370_000)
                - if i % 13 == 0 { 40_000_000 } else { 0 }
                - (i as i64 % 3) * 1_000,
            sym: syms[(i * 3 + i / 7) % syms.len()],
            bid: i as f64,
        })
        .collect()
}

fn add_quotes(store: &Store, quotes: &[Quote]) {
    let schema = store.schema().clone();
    let def = schema.table("quote").unwrap();
    for part in quotes.chunks(7_001) {
        let mut b = BatchBuilder::new(def);
        for q in part {
            b.set(0, V::Timestamp(q.time));
            b.set(1, V::Symbol(q.sym));
            b.set(2, V::F64(q.bid));
            b.set(3, V::F64(q.bid + 0.5));
            b.set(4, V::I64(1));
            b.set(5, V::I64(2));
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
    }
}

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

fn sorted(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by_key(|a| a.to_string());
    v
}

/// The brute-force as-of match: index of the chosen quote.
fn brute(t: &Trade, quotes: &[Quote], op: &str) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, q) in quotes.iter().enumerate() {
        if q.sym != t.sym {
            continue;
        }
        let ok = match op {
            ">=" => q.time <= t.time,
            ">" => q.time < t.time,
            "<=" => q.time >= t.time,
            "<" => q.time > t.time,
            _ => unreachable!(),
        };
        if !ok {
            continue;
        }
        best = match best {
            None => Some(i),
            Some(b) => {
                let bt = quotes[b].time;
                let better = match op {
                    // Latest; among equal times the last to arrive.
                    ">=" | ">" => q.time >= bt,
                    // Earliest; among equal times the first to arrive.
                    _ => q.time < bt,
                };
                Some(if better { i } else { b })
            }
        };
    }
    best
}

/// Quotes in time order over several column-store chunks (so the join
/// walks them with a cursor), three to a time (ties keep arrival order).
fn gen_ordered_quotes(n: usize) -> Vec<Quote> {
    let syms = ["AAPL", "MSFT", "IBM", "GOOG", "NFLX"];
    (0..n)
        .map(|i| Quote {
            time: T0 - 2_000_000 + (i as i64 / 3) * 60_000,
            sym: syms[(i * 3 + i / 7) % syms.len()],
            bid: i as f64,
        })
        .collect()
}

/// The as-of merge (a cursor over time-ordered quotes) answers as brute
/// force does: for trades in time order (whole batches merged at once),
/// and for trades that go back in time (every 17th), which it answers row
/// by row, from per-key runs where the cursor has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asof_join_over_time_ordered_quotes_matches_brute_force() {
    let quotes = gen_ordered_quotes(3 * tickdb_core::store::CHUNK_ROWS_MAX / 2);
    // Per symbol, the quotes' indices in arrival order.
    let mut by_sym: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, q) in quotes.iter().enumerate() {
        by_sym.entry(q.sym).or_default().push(i);
    }
    let jittered = gen_trades(3_000);
    let mut in_order = jittered.clone();
    in_order.sort_by_key(|t| t.time);
    for (trades, op) in [
        (&jittered, ">="),
        (&jittered, ">"),
        (&in_order, ">="),
        (&in_order, ">"),
    ] {
        let store = store_with(trades);
        add_quotes(&store, &quotes);
        let e = engine(store);
        let sql = format!(
            "SELECT t.time, t.sym, t.size, q.bid FROM trade t \
             ASOF JOIN quote q MATCH_CONDITION (t.time {op} q.time) ON t.sym = q.sym"
        );
        let got = sorted(rows(&e, &sql).await);
        let want = sorted(
            trades
                .iter()
                .map(|t| {
                    let ix = by_sym.get(t.sym).map(Vec::as_slice).unwrap_or(&[]);
                    let p = ix.partition_point(|&i| match op {
                        ">=" => quotes[i].time <= t.time,
                        _ => quotes[i].time < t.time,
                    });
                    let m = p.checked_sub(1).map(|k| ix[k]);
                    json!([
                        encode::rfc3339_nanos(t.time),
                        t.sym,
                        t.size,
                        m.map(|i| json!(quotes[i].bid)).unwrap_or(Value::Null),
                    ])
                })
                .collect(),
        );
        assert_eq!(got.len(), trades.len(), "{op}");
        assert_eq!(got, want, "{op}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asof_join_matches_brute_force() {
    let trades = gen_trades(3_000);
    let quotes = gen_quotes(4_000);
    let store = store_with(&trades);
    add_quotes(&store, &quotes);
    let e = engine(store);
    for op in [">=", ">", "<=", "<"] {
        let sql = format!(
            "SELECT t.time, t.sym, t.size, q.bid, q.sym FROM trade t \
             ASOF JOIN quote q MATCH_CONDITION (t.time {op} q.time) ON t.sym = q.sym"
        );
        let got = sorted(rows(&e, &sql).await);
        let want = sorted(
            trades
                .iter()
                .map(|t| {
                    let m = brute(t, &quotes, op);
                    json!([
                        encode::rfc3339_nanos(t.time),
                        t.sym,
                        t.size,
                        m.map(|i| json!(quotes[i].bid)).unwrap_or(Value::Null),
                        m.map(|i| json!(quotes[i].sym)).unwrap_or(Value::Null),
                    ])
                })
                .collect(),
        );
        assert_eq!(got.len(), trades.len(), "{op}");
        assert_eq!(got, want, "{op}");
    }
    // A tolerance drops matches farther than it, inclusive with <=,
    // exclusive with <; in both directions of the comparison.
    for (op, diff, tol_op, tol) in [
        (">=", "t.time - q.time", "<=", 2_000_000i64),
        (">=", "t.time - q.time", "<", 2_000_000),
        ("<=", "q.time - t.time", "<=", 1_500_000),
    ] {
        let sql = format!(
            "SELECT t.time, t.sym, t.size, q.bid FROM trade t ASOF JOIN quote q \
             MATCH_CONDITION (t.time {op} q.time AND {diff} {tol_op} {tol}) ON t.sym = q.sym"
        );
        let got = sorted(rows(&e, &sql).await);
        let mut dropped = 0;
        let want = sorted(
            trades
                .iter()
                .map(|t| {
                    let m = brute(t, &quotes, op).filter(|&i| {
                        let d = (t.time - quotes[i].time).abs();
                        let ok = if tol_op == "<" { d < tol } else { d <= tol };
                        dropped += usize::from(!ok);
                        ok
                    });
                    json!([
                        encode::rfc3339_nanos(t.time),
                        t.sym,
                        t.size,
                        m.map(|i| json!(quotes[i].bid)).unwrap_or(Value::Null),
                    ])
                })
                .collect(),
        );
        assert!(dropped > 0, "{sql}: the tolerance dropped nothing");
        assert_eq!(got, want, "{sql}");
    }
    let iv = sorted(
        rows(
            &e,
            "SELECT t.time, q.bid FROM trade t ASOF JOIN quote q \
             MATCH_CONDITION (t.time >= q.time AND t.time - q.time <= INTERVAL '2 milliseconds') ON t.sym = q.sym",
        )
        .await,
    );
    let ns = sorted(
        rows(
            &e,
            "SELECT t.time, q.bid FROM trade t ASOF JOIN quote q \
             MATCH_CONDITION (t.time >= q.time AND t.time - q.time <= 2000000) ON t.sym = q.sym",
        )
        .await,
    );
    assert_eq!(iv, ns);
    let err = e
        .query("SELECT * FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time AND q.time - t.time <= 5) ON t.sym = q.sym")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tolerance"), "{err}");
    // The condition written right-to-left means the same.
    let a = sorted(
        rows(
            &e,
            "SELECT t.time, q.bid FROM trade t ASOF JOIN quote q MATCH_CONDITION (q.time <= t.time) ON q.sym = t.sym",
        )
        .await,
    );
    let b = sorted(
        rows(
            &e,
            "SELECT t.time, q.bid FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym",
        )
        .await,
    );
    assert_eq!(a, b);
    let c = sorted(
        rows(
            &e,
            "SELECT t.time, q.bid FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) USING (sym)",
        )
        .await,
    );
    assert_eq!(a, c);
    // Filters on the left side, aggregates over the result, and the plan.
    let want = trades
        .iter()
        .filter(|t| t.sym == "IBM")
        .filter(|t| brute(t, &quotes, ">=").is_some())
        .count();
    assert_eq!(
        rows(
            &e,
            "SELECT count(q.bid) FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) \
             ON t.sym = q.sym WHERE t.sym = 'IBM'"
        )
        .await,
        vec![json!([want])]
    );
    let plan = format!(
        "{:?}",
        rows(
            &e,
            "EXPLAIN SELECT t.price, q.bid FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym"
        )
        .await
    );
    assert!(plan.contains("AsofJoinExec"), "{plan}");
    // A symbol filter on the left reaches both scans (the right one through
    // the join key), so one symbol's as-of join reads one symbol's rows.
    let plan = format!(
        "{:?}",
        rows(
            &e,
            "EXPLAIN SELECT t.price, q.bid FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) \
             ON t.sym = q.sym WHERE t.sym = 'IBM' AND q.bid > 0"
        )
        .await
    );
    assert!(plan.contains("full_filters=[trade.sym"), "{plan}");
    assert!(plan.contains("full_filters=[quote.sym IN"), "{plan}");
    // The right-side condition stays above the join (left-join semantics).
    assert!(plan.contains("Filter: q.bid > "), "{plan}");
    assert!(
        !plan.contains("HashJoinExec") && !plan.contains("NestedLoopJoinExec"),
        "{plan}"
    );
    // A bad condition is a plan error.
    let err = e
        .query("SELECT * FROM trade t ASOF JOIN quote q MATCH_CONDITION (t.time = q.time) ON t.sym = q.sym")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "plan", "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asof_join_over_sealed_chunks() {
    // Enough rows for sealed chunks (symbol index) on both sides.
    let trades = gen_trades(150_000);
    let quotes = gen_quotes(140_000);
    let store: Arc<Store> = store_with(&trades);
    add_quotes(&store, &quotes);
    let e = engine(store);
    let got = rows(
        &e,
        "SELECT t.sym, count(*), count(q.bid), sum(q.bid) FROM trade t \
         ASOF JOIN quote q MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym GROUP BY t.sym ORDER BY t.sym",
    )
    .await;
    // Brute force per symbol with a sorted merge (the quotes of a symbol
    // are in time order apart from the shifted ones, so sort them).
    let mut by_sym: BTreeMap<&str, Vec<(i64, usize)>> = BTreeMap::new();
    for (i, q) in quotes.iter().enumerate() {
        by_sym.entry(q.sym).or_default().push((q.time, i));
    }
    for v in by_sym.values_mut() {
        v.sort_by_key(|(t, _)| *t);
    }
    let mut want: BTreeMap<&str, (i64, i64, f64)> = BTreeMap::new();
    for t in &trades {
        let w = want.entry(t.sym).or_default();
        w.0 += 1;
        if let Some(v) = by_sym.get(t.sym) {
            let p = v.partition_point(|(qt, _)| *qt <= t.time);
            if p > 0 {
                w.1 += 1;
                w.2 += quotes[v[p - 1].1].bid;
            }
        }
    }
    let want: Vec<Value> = want
        .iter()
        .map(|(s, (n, m, b))| json!([s, n, m, if *m == 0 { Value::Null } else { json!(b) }]))
        .collect();
    assert_eq!(got, want);
}

/// `latest('quote')` gives each symbol's last row by arrival, found through
/// the symbol index of sealed chunks plus a backward scan of the active one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_row_per_symbol_through_the_index() {
    let trades = gen_trades(10);
    // Enough quotes for sealed chunks, and a symbol that only appears early
    // (so the walk must reach old chunks for it).
    let mut quotes = vec![Quote {
        time: T0 - 1,
        sym: "EARLY",
        bid: -1.0,
    }];
    quotes.extend(gen_quotes(140_000));
    let store: Arc<Store> = store_with(&trades);
    add_quotes(&store, &quotes);
    let e = engine(store);
    let mut want: BTreeMap<&str, f64> = BTreeMap::new();
    for q in &quotes {
        want.insert(q.sym, q.bid);
    }
    let want: Vec<Value> = want.iter().map(|(s, b)| json!([s, b])).collect();
    let got = rows(&e, "SELECT sym, bid FROM latest('quote') ORDER BY sym").await;
    assert_eq!(got, want);
    // The general form covers the same symbols.
    let general = rows(
        &e,
        "SELECT sym, last_value(bid ORDER BY time) FROM quote GROUP BY sym ORDER BY sym",
    )
    .await;
    assert_eq!(got.len(), general.len());
    let err = e.query("SELECT * FROM latest('nope')").await.unwrap_err();
    assert!(err.to_string().contains("no such table"), "{err}");
}

/// One-second bars per symbol, computed without DataFusion's shuffle (each
/// partition holds whole symbols), against brute force: over sealed chunks
/// and the active one, with symbol and time filters, and the plan checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bars_per_symbol_group_without_a_shuffle() {
    let mut trades = gen_trades(150_000);
    // Unique times, so that first and last are well defined.
    for (i, t) in trades.iter_mut().enumerate() {
        if i % 17 == 0 {
            t.time += 1;
        }
    }
    let e = engine(store_with(&trades));
    let lo = T0 + 20_000 * 1_000_000;
    let filters = [
        ("TRUE".to_string(), None, i64::MIN),
        (
            "sym IN ('IBM', 'AAPL')".to_string(),
            Some(["IBM", "AAPL"]),
            i64::MIN,
        ),
        (format!("time >= to_timestamp_nanos({lo})"), None, lo),
    ];
    for (filter, syms, from) in filters {
        // (sym, bucket) -> (first (time, price), high, low, last, volume, count)
        type Bar = (
            (i64, Option<f64>),
            Option<f64>,
            Option<f64>,
            (i64, Option<f64>),
            i64,
            i64,
        );
        let mut bars: BTreeMap<(&str, i64), Bar> = BTreeMap::new();
        for t in &trades {
            if syms.is_some_and(|s| !s.contains(&t.sym)) || t.time < from {
                continue;
            }
            let b = t.time.div_euclid(1_000_000_000) * 1_000_000_000;
            let e = bars.entry((t.sym, b)).or_insert((
                (i64::MAX, None),
                None,
                None,
                (i64::MIN, None),
                0,
                0,
            ));
            if t.time < e.0 .0 {
                e.0 = (t.time, t.price);
            }
            if t.time > e.3 .0 {
                e.3 = (t.time, t.price);
            }
            if let Some(p) = t.price {
                e.1 = Some(e.1.map_or(p, |h: f64| h.max(p)));
                e.2 = Some(e.2.map_or(p, |l: f64| l.min(p)));
            }
            e.4 += t.size;
            e.5 += 1;
        }
        let want: Vec<Value> = bars
            .iter()
            .map(|((s, b), (o, h, l, c, v, n))| {
                json!([s, encode::rfc3339_nanos(*b), o.1, h, l, c.1, v, n])
            })
            .collect();
        let sql = format!(
            "SELECT sym, time_bucket(INTERVAL '1 second', time) AS b, \
             first(price ORDER BY time) AS o, max(price) AS h, min(price) AS l, \
             last(price ORDER BY time) AS c, sum(size) AS v, count(*) AS n \
             FROM trade WHERE {filter} GROUP BY b, sym ORDER BY sym, b"
        );
        assert_eq!(rows(&e, &sql).await, want, "{filter}");
        let plan = format!("{:?}", rows(&e, &format!("EXPLAIN {sql}")).await);
        assert!(plan.contains("SymGroupExec"), "{filter}: {plan}");
        assert!(plan.contains("SymScanExec"), "{filter}: {plan}");
        assert!(!plan.contains("RepartitionExec"), "{filter}: {plan}");
    }
    // Not grouped by the symbol column itself: planned as DataFusion does.
    let plan = format!(
        "{:?}",
        rows(
            &e,
            "EXPLAIN SELECT time_bucket(INTERVAL '1 second', time) AS b, lower(sym) AS s, \
             count(*) FROM trade GROUP BY b, s"
        )
        .await
    );
    assert!(!plan.contains("mode=SinglePartitioned"), "{plan}");
    assert!(!plan.contains("SymGroupExec"), "{plan}");
}

/// Grouped by symbol and a key that is not in time order within a symbol
/// (the size), with a FILTER and an average, through `SymGroupExec` (its
/// table, not only its same-key-as-the-row-before path), against brute
/// force; and grouped by symbol and a text key, left to DataFusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symbol_and_unordered_key_groups_match_brute_force() {
    let trades = gen_trades(120_000);
    let e = engine(store_with(&trades));
    // (sym, size) -> (count, count with a price over 100, sum of prices, priced)
    let mut want: BTreeMap<(&str, i64), (i64, i64, f64, i64)> = BTreeMap::new();
    for t in &trades {
        let g = want.entry((t.sym, t.size)).or_default();
        g.0 += 1;
        if let Some(p) = t.price {
            g.1 += i64::from(p > 100.0);
            g.2 += p;
            g.3 += 1;
        }
    }
    let sql = "SELECT sym, size, count(*), count(*) FILTER (WHERE price > 100), avg(price) \
               FROM trade GROUP BY size, sym ORDER BY sym, size";
    let got = rows(&e, sql).await;
    assert_eq!(got.len(), want.len());
    for (row, ((s, z), (n, big, sum, priced))) in got.iter().zip(&want) {
        assert_eq!(row[0], json!(s), "{row}");
        assert_eq!(row[1], json!(z), "{row}");
        assert_eq!(row[2], json!(n), "{row}");
        assert_eq!(row[3], json!(big), "{row}");
        if *priced == 0 {
            assert_eq!(row[4], json!(null), "{row}");
        } else {
            let avg = sum / *priced as f64;
            assert!((row[4].as_f64().unwrap() - avg).abs() < 1e-9, "{row}");
        }
    }
    let plan = format!("{:?}", rows(&e, &format!("EXPLAIN {sql}")).await);
    assert!(plan.contains("SymGroupExec"), "{plan}");
    // A group per row or two: far more groups than a batch, so finished
    // symbols' groups are emitted while the next symbol's still grow.
    let mut want: BTreeMap<(&str, i64), (i64, i64)> = BTreeMap::new();
    for t in &trades {
        let g = want.entry((t.sym, t.time)).or_default();
        g.0 += 1;
        g.1 += t.size;
    }
    let want: Vec<Value> = want
        .iter()
        .map(|((s, t), (n, v))| json!([s, encode::rfc3339_nanos(*t), n, v]))
        .collect();
    let sql =
        "SELECT sym, time, count(*), sum(size) FROM trade GROUP BY sym, time ORDER BY sym, time";
    assert_eq!(rows(&e, sql).await, want);
    let plan = format!(
        "{:?}",
        rows(
            &e,
            "EXPLAIN SELECT sym, lower(sym) AS s, count(*) FROM trade GROUP BY sym, s"
        )
        .await
    );
    // DataFusion groups that by the symbol alone (the lower-case name is
    // computed above the aggregate): keyed, not gathered.
    assert!(!plan.contains("SymGroupExec"), "{plan}");
    assert!(plan.contains("symbol_keys(sym"), "{plan}");
}

/// Grouped by the symbol alone: both phases group on the symbol's keys
/// over the scan in arrival order (no gather), through sealed chunks and
/// the active one, with symbols first seen late (the dictionary grew
/// between chunks) and rows without a symbol, against brute force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symbol_alone_groups_on_keys_match_brute_force() {
    const NAMES: [&str; 8] = ["ZEN", "AAPL", "MSFT", "IBM", "BRK", "GOOG", "TSLA", "ACME"];
    let n = 150_000usize;
    // (time, symbol, price, size); symbols 4.. first appear after 50k rows.
    let rows_in: Vec<(i64, Option<&str>, Option<f64>, i64)> = (0..n)
        .map(|i| {
            let k = if i < 50_000 { 4 } else { NAMES.len() };
            let sym = (i % 101 != 0).then(|| NAMES[(i * 7 + i / 3) % k]);
            let price = (i % 11 != 0).then_some(100.0 + (i % 97) as f64 * 0.25);
            (T0 + i as i64 * 1_000_000, sym, price, (i % 13) as i64 + 1)
        })
        .collect();
    let schema = Arc::new(tickdb_core::schema::Schema::default_schema());
    let store = Arc::new(
        Store::new(
            schema.clone(),
            tickdb_core::domain::Domains::new(None).unwrap(),
        )
        .unwrap(),
    );
    let def = schema.table("trade").unwrap();
    for part in rows_in.chunks(9_973) {
        let mut b = BatchBuilder::new(def);
        for &(time, sym, price, size) in part {
            b.set(0, V::Timestamp(time));
            if let Some(s) = sym {
                b.set(1, V::Symbol(s));
            }
            if let Some(p) = price {
                b.set(2, V::F64(p));
            }
            b.set(3, V::I64(size));
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
    }
    let e = engine(store);
    let lo = T0 + 70_000 * 1_000_000;
    let by_time = format!("time >= to_timestamp_nanos({lo})");
    // A filter on the symbol never keeps a row without one.
    let picked = |s: Option<&str>| s.is_some_and(|s| ["IBM", "ACME", "ZEN"].contains(&s));
    type Keep<'a> = &'a dyn Fn(Option<&str>, i64) -> bool;
    // One symbol selected: the scan repeats its id instead of reading the
    // column, and the keys must still be the table's ids (ACME is late).
    let cases: [(&str, Keep); 4] = [
        ("TRUE", &|_, _| true),
        ("sym IN ('IBM', 'ACME', 'ZEN')", &|s, _| picked(s)),
        ("sym = 'ACME'", &|s, _| s == Some("ACME")),
        (&by_time, &|_, t| t >= lo),
    ];
    for (filter, keep) in cases {
        // sym -> (count, count over 110, volume, min, max, sum of prices, priced)
        type G = (i64, i64, i64, Option<f64>, Option<f64>, f64, i64);
        let mut want: BTreeMap<Option<&str>, G> = BTreeMap::new();
        for &(time, sym, price, size) in &rows_in {
            if !keep(sym, time) {
                continue;
            }
            let g = want.entry(sym).or_default();
            g.0 += 1;
            g.2 += size;
            if let Some(p) = price {
                g.1 += i64::from(p > 110.0);
                g.3 = Some(g.3.map_or(p, |m: f64| m.min(p)));
                g.4 = Some(g.4.map_or(p, |m: f64| m.max(p)));
                g.5 += p;
                g.6 += 1;
            }
        }
        let sql = format!(
            "SELECT sym, count(*), count(*) FILTER (WHERE price > 110), sum(size), \
             min(price), max(price), avg(price) FROM trade WHERE {filter} \
             GROUP BY sym ORDER BY sym NULLS FIRST"
        );
        let got = rows(&e, &sql).await;
        assert_eq!(got.len(), want.len(), "{filter}: {got:?}");
        for (row, (s, g)) in got.iter().zip(&want) {
            assert_eq!(row[0], json!(s), "{filter}: {row}");
            assert_eq!(row[1], json!(g.0), "{filter}: {row}");
            assert_eq!(row[2], json!(g.1), "{filter}: {row}");
            assert_eq!(row[3], json!(g.2), "{filter}: {row}");
            assert_eq!(row[4], json!(g.3), "{filter}: {row}");
            assert_eq!(row[5], json!(g.4), "{filter}: {row}");
            let avg = g.5 / g.6 as f64;
            assert!(
                (row[6].as_f64().unwrap() - avg).abs() < 1e-9,
                "{filter}: {row}"
            );
        }
        let plan = format!("{:?}", rows(&e, &format!("EXPLAIN {sql}")).await);
        assert!(plan.contains("symbol_keys(sym"), "{filter}: {plan}");
        assert!(plan.contains("symbols(sym"), "{filter}: {plan}");
        assert!(!plan.contains("SymScanExec"), "{filter}: {plan}");
    }
    // Ordered by the count: the monitor's most active symbol.
    let got = rows(
        &e,
        "SELECT sym, count(*) AS n FROM trade GROUP BY sym ORDER BY n DESC, sym LIMIT 1",
    )
    .await;
    let mut counts: BTreeMap<Option<&str>, i64> = BTreeMap::new();
    for &(_, sym, _, _) in &rows_in {
        *counts.entry(sym).or_default() += 1;
    }
    let (top, n) = counts
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        .unwrap();
    assert_eq!(got, vec![json!([top, n])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vwap_and_buckets() {
    let trades = gen_trades(100_000);
    let e = engine(store_with(&trades));
    let mut w: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for t in &trades {
        if let Some(p) = t.price {
            let e = w.entry(t.sym).or_default();
            e.0 += p * t.size as f64;
            e.1 += t.size as f64;
        }
    }
    let got = rows(
        &e,
        "SELECT sym, vwap(price, size) FROM trade GROUP BY sym ORDER BY sym",
    )
    .await;
    assert_eq!(got.len(), w.len());
    for (row, (s, (pv, v))) in got.iter().zip(&w) {
        assert_eq!(row[0], json!(s));
        assert!((row[1].as_f64().unwrap() - pv / v).abs() < 1e-9, "{row}");
    }
    assert_eq!(
        rows(&e, "SELECT vwap(price, size) FROM trade WHERE sym = 'NOPE'").await,
        vec![json!([null])]
    );

    let mut buckets: BTreeMap<i64, i64> = BTreeMap::new();
    for t in &trades {
        *buckets
            .entry(t.time.div_euclid(1_000_000_000) * 1_000_000_000)
            .or_default() += 1;
    }
    let want: Vec<Value> = buckets
        .iter()
        .map(|(b, n)| json!([encode::rfc3339_nanos(*b), n]))
        .collect();
    for f in [
        "time_bucket(INTERVAL '1 second', time)",
        "xbar(INTERVAL '1 second', time)",
        "xbar(1000000000, time)",
        "date_bin(INTERVAL '1 second', time)",
    ] {
        let got = rows(
            &e,
            &format!("SELECT {f} AS b, count(*) FROM trade GROUP BY b ORDER BY b"),
        )
        .await;
        assert_eq!(got, want, "{f}");
    }
    // Numeric xbar, kdb+ style.
    assert_eq!(
        rows(
            &e,
            "SELECT xbar(5, size) AS b, count(*) FROM trade WHERE size < 7 GROUP BY b ORDER BY b"
        )
        .await
        .len(),
        2
    );
    assert_eq!(rows(&e, "SELECT xbar(2.5, 7.4)").await, vec![json!([5.0])]);
    // first/last exist (aliases of first_value/last_value).
    let got = rows(
        &e,
        "SELECT first(size ORDER BY time), last(size ORDER BY time) FROM trade",
    )
    .await;
    let mut by_time: Vec<&Trade> = trades.iter().collect();
    by_time.sort_by_key(|t| t.time);
    assert_eq!(got[0][0], json!(by_time[0].size));
    assert_eq!(got[0][1], json!(by_time[by_time.len() - 1].size));
}
