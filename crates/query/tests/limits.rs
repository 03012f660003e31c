//! The engine's guards against hostile or careless queries: deep
//! statements, allocating functions, admission, cancellation, readiness.
//! Each reproduces a query that crashed, outran or stalled the node before.

mod common;

use common::{gen_trades, store_with};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_query::{QueryEngine, QueryError, QueryOptions, Readiness};

fn engine_with(opts: QueryOptions) -> QueryEngine {
    QueryEngine::new(store_with(&gen_trades(20_000)), opts).unwrap()
}

async fn scalar(e: &QueryEngine, sql: &str) -> serde_json::Value {
    let r = e
        .query(sql)
        .await
        .unwrap_or_else(|err| panic!("{sql}: {err}"));
    tickdb_query::encode::json(&r)["dataset"][0][0].clone()
}

fn chain(op: &str, term: &str, n: usize) -> String {
    vec![term; n].join(op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_expressions_answer_or_are_refused_never_crash() {
    let e = engine_with(QueryOptions::default());
    // 3,000 terms overflowed a thread's stack and aborted the process.
    let sql = format!("select {}", chain("+", "1", 3000));
    assert_eq!(scalar(&e, &sql).await, serde_json::json!(3000));
    let sql = format!(
        "select count(*) from trade where {}",
        chain(" or ", "price = 1", 3000)
    );
    assert_eq!(scalar(&e, &sql).await, serde_json::json!(0));
    // Past the limit: a clear error, and the engine goes on.
    let sql = format!("select {}", chain("+", "1", 10_000));
    let err = e.query(&sql).await.unwrap_err();
    assert!(matches!(err, QueryError::TooComplex(_)), "{err}");
    assert!(err.to_string().contains("levels deep"), "{err}");
    let sql = format!("select {}", chain("+", "1", 600_000));
    let err = e.query(&sql).await.unwrap_err();
    assert!(matches!(err, QueryError::TooComplex(_)), "{err}");
    assert_eq!(scalar(&e, "select 1").await, serde_json::json!(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocating_functions_stop_at_the_memory_limit() {
    let e = engine_with(QueryOptions {
        memory_limit_bytes: 64 << 20,
        ..QueryOptions::default()
    });
    for sql in [
        "select repeat('a', 2000000000)",
        "select length(repeat('a', 2000000000))",
        "select lpad('x', 1000000000)",
        "select rpad('x', 1000000000, 'yz')",
        "select replace(repeat('a', 1000000), 'a', repeat('b', 1000))",
        "select regexp_replace(repeat('a', 100000), 'a', repeat('b', 10000), 'g')",
        "select array_repeat(1, 100000000)",
        "select range(1000000000)",
        "select generate_series(1, 1000000000)",
        // A small string repeated per row of a table.
        "select repeat(sym, 100000) from trade",
        // Doubling by nesting: 2^30 bytes from 1 byte.
        "select length(x30) from (select x29 || x29 as x30 from (select x28 || x28 as x29 from (select x27 || x27 as x28 from (select x26 || x26 as x27 from (select x25 || x25 as x26 from (select repeat('a', 33554432) as x25))))))",
        "select concat(repeat('a', 40000000), repeat('b', 40000000))",
        // A large scalar concatenated to every row.
        "select repeat('a', 10000) || sym from trade",
    ] {
        let t = Instant::now();
        let err = e.query(sql).await.unwrap_err();
        assert!(
            matches!(err, QueryError::ResourcesExhausted(_)),
            "{sql}: {err:?}"
        );
        assert!(
            err.to_string().contains("query memory limit"),
            "{sql}: {err}"
        );
        // A bound, not a timing: refused, not run to the end (a debug build
        // on a busy 2-core machine took 14 s for the largest).
        assert!(t.elapsed() < Duration::from_secs(60), "{sql}: {:?}", t.elapsed());
    }
    // What fits still works, with the operator's NULL rule for ||.
    assert_eq!(
        scalar(&e, "select length(repeat('ab', 1000))").await,
        serde_json::json!(2000)
    );
    assert_eq!(
        scalar(&e, "select 'a' || 'b' || 'c'").await,
        serde_json::json!("abc")
    );
    assert_eq!(
        scalar(&e, "select 'a' || NULL").await,
        serde_json::Value::Null
    );
    assert_eq!(
        scalar(
            &e,
            "select max(sym || '.' || cast(size as varchar)) from trade"
        )
        .await,
        serde_json::json!("TSLA.9")
    );
    assert_eq!(
        scalar(&e, "select replace('aXbXc', 'X', '--')").await,
        serde_json::json!("a--b--c")
    );
    assert_eq!(
        scalar(&e, "select array_length(make_array(1, 2, 3))").await,
        serde_json::json!(3)
    );
    assert_eq!(
        scalar(&e, "select cardinality([1, 2, 3] || [4])").await,
        serde_json::json!(4)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_refused_as_busy() {
    let e = engine_with(QueryOptions {
        concurrency: 1,
        queue_max: 1,
        timeout: Duration::from_secs(20),
        ..QueryOptions::default()
    });
    let slow =
        "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price";
    let running = {
        let e = e.clone();
        tokio::spawn(async move { e.query(slow).await.map(|_| ()) })
    };
    while e.pool_stats().running == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiting = {
        let e = e.clone();
        tokio::spawn(async move { e.query("select 1").await.map(|_| ()) })
    };
    while e.pool_stats().waiting == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let err = e.query("select 2").await.unwrap_err();
    assert!(matches!(err, QueryError::Busy(_)), "{err}");
    assert!(err.to_string().contains("--query-concurrency"), "{err}");
    assert_eq!(err.kind(), "busy");
    assert_eq!(err.http_status(), 503);
    running.abort();
    let _ = running.await;
    // The aborted caller's query is cancelled; the waiting one gets its turn.
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting query ran once the slot was free")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_query() {
    let e = engine_with(QueryOptions::default());
    let ctx = e.new_ctx(None);
    let slow =
        "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price";
    let run = {
        let (e, ctx) = (e.clone(), ctx.clone());
        tokio::spawn(async move { e.query_with(slow, ctx).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    ctx.cancel();
    let err = run.await.unwrap().unwrap_err();
    assert!(matches!(err, QueryError::Cancelled), "{err}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Its slot is free again.
    tokio::time::timeout(Duration::from_secs(5), async {
        while e.pool_stats().running > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_timeout_shorter_than_the_engines_applies() {
    let e = engine_with(QueryOptions::default());
    let ctx = e.new_ctx(Some(Duration::from_millis(100)));
    let t = Instant::now();
    let err = e
        .query_with(
            "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price",
            ctx,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, QueryError::Timeout(d) if d == Duration::from_millis(100)),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

struct Gate(AtomicBool);

impl Readiness for Gate {
    fn check(&self) -> Result<(), String> {
        if self.0.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("replaying the journal: 158100 of 3000000".into())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_before_the_node_is_ready() {
    let e = engine_with(QueryOptions::default());
    let gate = Arc::new(Gate(AtomicBool::new(false)));
    e.set_readiness(gate.clone());
    let err = e.query("select count(*) from trade").await.unwrap_err();
    assert!(matches!(err, QueryError::NotReady(_)), "{err}");
    assert!(err.to_string().contains("158100 of 3000000"), "{err}");
    assert_eq!(err.http_status(), 503);
    gate.0.store(true, Ordering::Relaxed);
    assert_eq!(
        scalar(&e, "select count(*) from trade").await,
        serde_json::json!(20_000)
    );
    // With a wait bound, a query arriving during the load waits for it.
    let e = engine_with(QueryOptions {
        ready_wait: Duration::from_secs(5),
        ..QueryOptions::default()
    });
    let gate = Arc::new(Gate(AtomicBool::new(false)));
    e.set_readiness(gate.clone());
    let opener = {
        let gate = gate.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            gate.0.store(true, Ordering::Relaxed);
        })
    };
    assert_eq!(
        scalar(&e, "select count(*) from trade").await,
        serde_json::json!(20_000)
    );
    opener.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_stream_batch_by_batch() {
    let e = engine_with(QueryOptions::default());
    let mut s = e
        .stream_into(
            "select * from trade",
            e.new_ctx(None),
            tickdb_query::encode::Encoder::new(tickdb_query::encode::Format::Json, "q"),
        )
        .await
        .unwrap();
    let mut chunks = 0;
    let mut body = Vec::new();
    while let Some(c) = s.next().await {
        body.extend_from_slice(&c.unwrap());
        chunks += 1;
    }
    assert!(chunks > 1, "one chunk per batch, got {chunks}");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["count"], serde_json::json!(20_000));
    assert_eq!(v["dataset"].as_array().unwrap().len(), 20_000);
}
