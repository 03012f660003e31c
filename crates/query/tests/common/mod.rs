#![allow(dead_code)]

use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::domain::Domains;
use tickdb_core::store::Store;
use tickdb_core::Schema;
use tickdb_query::{QueryEngine, QueryOptions};

pub const SYMS: &[&str] = &["AAPL", "MSFT", "IBM", "GOOG", "TSLA"];
/// 2024-01-02T00:00:00Z in ns.
pub const T0: i64 = 1_704_153_600_000_000_000;

/// One generated trade row, as plain Rust values (the brute-force model).
#[derive(Debug, Clone)]
pub struct Trade {
    pub time: i64,
    pub sym: &'static str,
    pub price: Option<f64>,
    pub size: i64,
}

/// Trades with times mostly rising but with some out-of-order arrivals,
/// and a null price every 11th row.
pub fn gen_trades(n: usize) -> Vec<Trade> {
    (0..n)
        .map(|i| {
            let jitter = if i % 17 == 0 { -(5_000_000i64) } else { 0 };
            Trade {
                time: T0 + i as i64 * 1_000_000 + jitter,
                sym: SYMS[(i * 7 + i / 3) % SYMS.len()],
                price: if i % 11 == 0 {
                    None
                } else {
                    Some(100.0 + (i % 97) as f64 * 0.25)
                },
                size: (i % 13) as i64 + 1,
            }
        })
        .collect()
}

pub fn store_with(trades: &[Trade]) -> Arc<Store> {
    let schema = Arc::new(Schema::default_schema());
    let store = Arc::new(Store::new(schema, Domains::new(None).unwrap()).unwrap());
    apply_trades(&store, trades);
    store
}

/// Appends `trades` to the store's trade table, in batches.
pub fn apply_trades(store: &Store, trades: &[Trade]) {
    let schema = store.schema().clone();
    let def = schema.table("trade").unwrap();
    for part in trades.chunks(9_973) {
        let mut b = BatchBuilder::new(def);
        for t in part {
            b.set(0, Value::Timestamp(t.time));
            b.set(1, Value::Symbol(t.sym));
            if let Some(p) = t.price {
                b.set(2, Value::F64(p));
            }
            b.set(3, Value::I64(t.size));
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
    }
}

pub fn engine(store: Arc<Store>) -> QueryEngine {
    QueryEngine::new(store, QueryOptions::default()).unwrap()
}

/// The store's schema with a symbol column `venue` added to `trade`.
pub fn venue_added(store: &Store) -> Arc<Schema> {
    use tickdb_core::schema_change::{apply, NewColumn, SchemaOp};
    let next = apply(
        &store.schema(),
        &[SchemaOp::AddColumn {
            table: "trade".into(),
            column: NewColumn {
                name: "venue".into(),
                ty: tickdb_core::ColumnType::Symbol,
            },
            if_not_exists: false,
        }],
    )
    .unwrap()
    .unwrap();
    Arc::new(next)
}
