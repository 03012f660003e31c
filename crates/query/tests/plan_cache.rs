//! Statements run again reuse their optimized plans (`plan_cache`), and a
//! reused plan answers exactly what planning the statement again would:
//! the rows there are now, the columns the table has now, the time now.

mod common;

use common::*;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::store::Store;
use tickdb_query::QueryResult;

fn cells(r: &QueryResult) -> Vec<String> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in &r.batches {
        for c in b.columns() {
            let f = ArrayFormatter::try_new(c.as_ref(), &opts).unwrap();
            for i in 0..b.num_rows() {
                out.push(f.value(i).to_string());
            }
        }
    }
    out
}

/// One quote of `sym` at `time` with bid `bid`.
fn quote(store: &Store, time: i64, sym: &str, bid: f64) {
    let schema = store.schema().clone();
    let def = schema.table("quote").unwrap();
    let mut b = BatchBuilder::new(def);
    b.set(0, Value::Timestamp(time));
    b.set(1, Value::Symbol(sym));
    b.set(2, Value::F64(bid));
    b.end_row();
    store.apply(&b.finish()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_plan_reads_the_rows_there_now() {
    let trades = gen_trades(3_000);
    let store = store_with(&trades[..2_000]);
    let engine = engine(store.clone());
    let sql = "SELECT count(*), sum(size) FROM trade WHERE sym = 'IBM'";
    let want = |n: usize| {
        let ibm: Vec<&Trade> = trades[..n].iter().filter(|t| t.sym == "IBM").collect();
        vec![
            ibm.len().to_string(),
            ibm.iter().map(|t| t.size).sum::<i64>().to_string(),
        ]
    };
    assert_eq!(cells(&engine.query(sql).await.unwrap()), want(2_000));
    assert_eq!(engine.cached_plans(), 1);
    apply_trades(&store, &trades[2_000..]);
    assert_eq!(cells(&engine.query(sql).await.unwrap()), want(3_000));
    assert_eq!(engine.cached_plans(), 1, "the same statement, one entry");

    // An as-of join polled while quotes arrive: each run joins the
    // quotes there are.
    let asof = "SELECT count(*), sum(q.bid) FROM trade t ASOF JOIN quote q \
                MATCH_CONDITION (t.time >= q.time) ON t.sym = q.sym WHERE t.sym = 'IBM'";
    assert_eq!(
        cells(&engine.query(asof).await.unwrap()),
        vec![want(3_000)[0].clone(), "NULL".to_string()]
    );
    quote(&store, T0 - 1, "IBM", 2.5);
    let got = cells(&engine.query(asof).await.unwrap());
    let n: f64 = want(3_000)[0].parse().unwrap();
    assert_eq!(got[0], want(3_000)[0]);
    assert_eq!(got[1].parse::<f64>().unwrap(), 2.5 * n);
    assert_eq!(engine.cached_plans(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_empties_the_cache() {
    let store = store_with(&gen_trades(100));
    let engine = engine(store.clone());
    let all = "SELECT * FROM trade LIMIT 1";
    let r = engine.query(all).await.unwrap();
    assert_eq!(r.batches[0].num_columns(), 4);
    assert_eq!(engine.cached_plans(), 1);
    assert!(store.change_schema(&venue_added(&store)).unwrap());
    let r = engine.query(all).await.unwrap();
    assert_eq!(
        r.batches[0].num_columns(),
        5,
        "the new column, not the cached plan's"
    );
    assert_eq!(engine.cached_plans(), 1, "emptied, then this statement");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_that_hold_the_moment_they_were_planned_are_not_kept() {
    let trades = gen_trades(500);
    let store = store_with(&trades);
    let engine = engine(store.clone());
    // now() is folded into the plan: each run must take its own.
    let a = cells(&engine.query("SELECT now()").await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let b = cells(&engine.query("SELECT now()").await.unwrap());
    assert_ne!(a, b);
    // latest() reads its rows while the SQL is planned.
    let latest = "SELECT count(*) FROM latest('trade')";
    assert_eq!(cells(&engine.query(latest).await.unwrap()), vec!["5"]);
    let more = vec![Trade {
        time: T0 + 1_000_000_000,
        sym: "NEWSYM",
        price: Some(1.0),
        size: 1,
    }];
    apply_trades(&store, &more);
    assert_eq!(cells(&engine.query(latest).await.unwrap()), vec!["6"]);
    // Nor EXPLAIN, nor information_schema.
    engine
        .query("EXPLAIN SELECT count(*) FROM trade")
        .await
        .unwrap();
    engine
        .query("SELECT count(*) FROM information_schema.tables")
        .await
        .unwrap();
    assert_eq!(engine.cached_plans(), 0);
}
