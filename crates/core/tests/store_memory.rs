//! The store's memory figures count what it holds: column chunks, symbol
//! tables (interned names and their hash table), per-chunk symbol indexes
//! and the keyed tables' latest-row cache, and give it all back when freed.

use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::domain::Domains;
use tickdb_core::store::Store;
use tickdb_core::Schema;

/// Applies `n` trades, each with a symbol of its own `len` bytes long.
fn distinct_symbols(store: &Store, schema: &Schema, n: usize, len: usize) {
    let per = 2000;
    let mut i = 0;
    while i < n {
        let mut b = BatchBuilder::new(schema.table("trade").unwrap());
        for k in i..(i + per).min(n) {
            b.set(0, Value::Timestamp(k as i64));
            let s = format!("{k:0len$}");
            b.set(1, Value::Symbol(&s));
            b.set(2, Value::F64(1.0));
            b.set(3, Value::I64(k as i64));
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
        i += per;
    }
}

#[test]
fn distinct_symbols_are_counted() {
    let schema = Arc::new(Schema::default_schema());
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    let (n, len) = (200_000usize, 48usize);
    distinct_symbols(&store, &schema, n, len);
    let m = store.memory();
    // The columns: time, price, size (8 bytes each) and the symbol ids (4).
    let column_bytes = (n * 28) as u64;
    // The names alone, without offsets, hash table or indexes.
    let name_bytes = (n * len) as u64;
    assert!(
        m.dram >= column_bytes + name_bytes,
        "dram {} < columns {column_bytes} + symbol names {name_bytes}: {m:?}",
        m.dram
    );
}

#[test]
fn the_breakdown_adds_up_and_goes_back_to_zero() {
    let schema = Arc::new(Schema::default_schema());
    let domains = Domains::new(None).unwrap();
    let store = Store::new(schema.clone(), domains.clone()).unwrap();
    let n = 150_000;
    distinct_symbols(&store, &schema, n, 12);
    let m = store.memory();
    let b = m.breakdown;
    assert_eq!(
        m.dram,
        b.columns + b.symbols + b.indexes + b.keyed_cache,
        "{m:?}"
    );
    assert!(b.columns >= (n * 28) as u64, "{m:?}");
    // Names, 4-byte offsets and at least a 4-byte id per hash table slot.
    assert!(b.symbols >= (n * (12 + 4 + 4)) as u64, "{m:?}");
    // Sealed chunks (all but the active one) hold one row id per row.
    assert!(b.indexes >= ((n - 65_536) * 4) as u64, "{m:?}");
    // Doubling keeps the symbol regions within a small factor of the names.
    assert!(b.symbols <= (n * (12 + 4 + 4)) as u64 * 4, "{m:?}");
    // A keyed table's cached latest rows are counted while cached.
    let mut k = BatchBuilder::new(schema.table("daily").unwrap());
    for i in 0..1000i64 {
        k.set(0, Value::Timestamp(i));
        k.set(1, Value::Symbol(if i % 2 == 0 { "A" } else { "B" }));
        k.end_row();
    }
    store.apply(&k.finish()).unwrap();
    assert_eq!(store.snapshot("daily").unwrap().rows, 2);
    assert!(
        store.memory().breakdown.keyed_cache > 0,
        "{:?}",
        store.memory()
    );
    // Everything is given back with the store (the accounting does not leak).
    drop(store);
    let s = domains.stats();
    use tickdb_core::domain::MemUse;
    for u in [
        MemUse::Symbols,
        MemUse::Index(tickdb_core::domain::Domain::Dram),
        MemUse::Cache,
    ] {
        assert_eq!(s.use_bytes(u), 0, "{u:?}");
    }
    assert_eq!(s.bytes(tickdb_core::domain::Domain::Dram), 0);
}

/// A table placed in fsmem keeps its symbol index there too: its DRAM
/// figure is the symbol table alone.
#[test]
fn an_fsmem_table_keeps_its_index_in_fsmem() {
    let dir = tempfile::tempdir().unwrap();
    let mut schema = Schema::default_schema();
    schema
        .place(&["trade".into()], tickdb_core::domain::Domain::Fsmem)
        .unwrap();
    let schema = Arc::new(schema);
    let store = Store::new(schema.clone(), Domains::new(Some(dir.path())).unwrap()).unwrap();
    let n = 200_000;
    distinct_symbols(&store, &schema, n, 8);
    let m = store.memory();
    assert_eq!(m.breakdown.columns, 0, "{m:?}");
    assert_eq!(m.breakdown.indexes, 0, "{m:?}");
    assert!(m.fsmem >= (n * (28 + 4)) as u64 - 65_536 * 4, "{m:?}");
    assert_eq!(m.dram, m.breakdown.symbols);
}
