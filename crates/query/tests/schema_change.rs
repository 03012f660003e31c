//! SQL over a store whose schema changes at run time: a column added to a
//! live table reads as null in the rows before it (sealed chunks and the
//! chunk being filled alike) and as its values after; a table created at
//! run time is queryable at once; a query planned before the change still
//! runs; the DDL parser names what it refuses.

mod common;

use common::*;
use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::schema_change::{apply, NewColumn, SchemaOp};
use tickdb_core::ColumnType;
use tickdb_query::QueryError;

fn rows(r: &tickdb_query::QueryResult) -> Vec<Vec<String>> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    let mut out = Vec::new();
    let opts = FormatOptions::default().with_null("NULL");
    for b in &r.batches {
        let fs: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            out.push(fs.iter().map(|f| f.value(i).to_string()).collect());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_column_is_null_before_and_set_after() {
    // More rows than one chunk holds, so sealed chunks and the active one
    // both get the new column.
    let trades = gen_trades(3_000);
    let store = store_with(&trades);
    let engine = engine(store.clone());
    // Planned before the change: it still runs afterwards, with the
    // columns it planned.
    let before = engine.plan("SELECT * FROM trade").await.unwrap();
    let next = venue_added(&store);
    assert!(store.change_schema(&next).unwrap());
    // Applying the same schema again changes nothing.
    assert!(!store.change_schema(&next).unwrap());
    let old = before.collect().await.unwrap();
    assert_eq!(old[0].num_columns(), 4);
    assert_eq!(old.iter().map(|b| b.num_rows()).sum::<usize>(), 3_000);
    let def = store.schema().table("trade").unwrap().clone();
    let mut b = BatchBuilder::new(&def);
    b.set(0, Value::Timestamp(T0 + 10_000_000_000));
    b.set(1, Value::Symbol("AAPL"));
    b.set(2, Value::F64(1.0));
    b.set(3, Value::I64(7));
    b.set(4, Value::Symbol("XNYS"));
    b.end_row();
    store.apply(&b.finish()).unwrap();
    let r = engine
        .query("SELECT count(*) AS n, count(venue) AS v FROM trade")
        .await
        .unwrap();
    assert_eq!(rows(&r), vec![vec!["3001".to_string(), "1".to_string()]]);
    let r = engine
        .query("SELECT size, venue FROM trade WHERE sym = 'AAPL' ORDER BY time DESC LIMIT 2")
        .await
        .unwrap();
    let got = rows(&r);
    assert_eq!(got[0], vec!["7".to_string(), "XNYS".to_string()]);
    assert_eq!(got[1][1], "NULL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_table_is_queryable_at_once() {
    let store = store_with(&gen_trades(10));
    let engine = engine(store.clone());
    let ops = tickdb_query::ddl::parse(
        "CREATE TABLE news (time TIMESTAMP, sym SYMBOL, headline VARCHAR, score DOUBLE)",
    )
    .unwrap()
    .unwrap();
    let next = apply(&store.schema(), &ops).unwrap().unwrap();
    assert!(store.change_schema(&next).unwrap());
    let r = engine.query("SELECT count(*) FROM news").await.unwrap();
    assert_eq!(rows(&r), vec![vec!["0".to_string()]]);
    // Without a tp the engine refuses to run DDL, saying where to.
    let e = engine
        .run_ddl("ALTER TABLE news ADD COLUMN x DOUBLE", None)
        .await
        .unwrap_err();
    assert!(matches!(e, QueryError::Ddl(_)), "{e}");
    assert!(e.to_string().contains("no tickerplant"), "{e}");
    // A query is not DDL.
    assert!(engine.run_ddl("SELECT 1", None).await.unwrap().is_none());
}

/// Queries running while columns are added one after another never miss
/// the table: the engine swaps the whole set of tables in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_during_schema_changes_always_find_the_table() {
    let trades = gen_trades(500);
    let store = store_with(&trades);
    let engine = engine(store.clone());
    let changes_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let changes = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                std::thread::sleep(std::time::Duration::from_micros(200));
                let next = apply(
                    &store.schema(),
                    &[SchemaOp::AddColumn {
                        table: "trade".into(),
                        column: NewColumn {
                            name: format!("c{i}"),
                            ty: ColumnType::F64,
                        },
                        if_not_exists: false,
                    }],
                )
                .unwrap()
                .unwrap();
                store.change_schema(&next).unwrap();
            }
        })
    };
    // Several queries at once: one of them registers the tables again
    // after a change while the others plan.
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (engine, done) = (engine.clone(), changes_done.clone());
        tasks.push(tokio::spawn(async move {
            let mut queries = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) || queries == 0 {
                let r = engine.query("SELECT count(*) AS n FROM trade").await;
                let r = r.unwrap_or_else(|e| panic!("task {t}, query {queries}: {e}"));
                assert_eq!(rows(&r), vec![vec!["500".to_string()]]);
                queries += 1;
            }
            queries
        }));
    }
    changes.join().unwrap();
    changes_done.store(true, std::sync::atomic::Ordering::Release);
    let mut queries = 0;
    for t in tasks {
        queries += t.await.unwrap();
    }
    eprintln!("{queries} queries ran during the changes");
    let r = engine
        .query("SELECT count(c199) AS n FROM trade")
        .await
        .unwrap();
    assert_eq!(rows(&r), vec![vec!["0".to_string()]]);
}
