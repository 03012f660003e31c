//! Column store behaviour: chunking, nulls, strings, keyed upserts, fsmem
//! placement and readers running beside the writer.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt32Type};
use arrow_array::Array;
use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::domain::{Domain, Domains};
use tickdb_core::store::Store;
use tickdb_core::Schema;

fn trades(schema: &Schema, start: i64, n: i64, syms: &[&str]) -> tickdb_core::Batch {
    let mut b = BatchBuilder::new(schema.table("trade").unwrap());
    for i in start..start + n {
        b.set(0, Value::Timestamp(i));
        b.set(1, Value::Symbol(syms[(i as usize) % syms.len()]));
        if i % 7 != 0 {
            b.set(2, Value::F64(i as f64 * 0.25));
        }
        b.set(3, Value::I64(i));
        b.end_row();
    }
    b.finish()
}

fn sum_size(store: &Store) -> (usize, i64) {
    let snap = store.snapshot("trade").unwrap();
    let mut n = 0;
    let mut s = 0;
    for c in &snap.chunks {
        let a = c.batch.column(3).as_primitive::<Int64Type>();
        n += a.len();
        s += a.values().iter().sum::<i64>();
    }
    (n, s)
}

#[test]
fn appends_across_chunks_with_nulls_and_index() {
    let schema = Arc::new(Schema::default_schema());
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    let total = 300_000i64;
    let mut at = 0;
    while at < total {
        let n = 7_919.min(total - at);
        store
            .apply(&trades(&schema, at, n, &["A", "B", "C"]))
            .unwrap();
        at += n;
    }
    let (n, s) = sum_size(&store);
    assert_eq!(n as i64, total);
    assert_eq!(s, total * (total - 1) / 2);
    let snap = store.snapshot("trade").unwrap();
    assert!(snap.chunks.len() > 4, "chunks: {}", snap.chunks.len());
    let b_id = snap.symbol_id("B").unwrap();
    let mut via_index = 0;
    let mut nulls = 0;
    for c in &snap.chunks {
        assert!(c.min_time <= c.max_time);
        let price = c.batch.column(2).as_primitive::<Float64Type>();
        nulls += price.null_count();
        match &c.sym_index {
            Some(ix) => via_index += ix.rows(b_id).len(),
            None => {
                let keys = c
                    .batch
                    .column(1)
                    .as_dictionary::<UInt32Type>()
                    .keys()
                    .clone();
                via_index += keys.values().iter().filter(|k| **k == b_id).count();
            }
        }
    }
    assert_eq!(via_index as i64, total / 3);
    assert_eq!(
        nulls as i64,
        (0..total).filter(|i| i % 7 == 0).count() as i64
    );
}

#[test]
fn snapshot_is_a_consistent_cut_while_writing() {
    let schema = Arc::new(Schema::default_schema());
    let store = Arc::new(Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap());
    let writer = {
        let store = store.clone();
        let schema = schema.clone();
        std::thread::spawn(move || {
            for k in 0..400 {
                store
                    .apply(&trades(&schema, k * 500, 500, &["X", "Y"]))
                    .unwrap();
            }
        })
    };
    let mut seen = 0;
    while seen < 200_000 {
        let (n, s) = sum_size(&store);
        // Every snapshot holds a whole number of 500-row batches in order:
        // rows 0..n, so the sum is exactly the triangular number.
        assert_eq!(n % 500, 0);
        assert_eq!(s as i128, (n as i128) * (n as i128 - 1) / 2);
        seen = n;
    }
    writer.join().unwrap();
}

#[test]
fn keyed_table_keeps_latest_row_per_key() {
    let schema = Arc::new(
        Schema::parse(
            r#"[[table]]
            name = "last"
            kind = "keyed"
            key = ["sym"]
            column = [{ name = "time", type = "timestamp" }, { name = "sym", type = "symbol" },
                      { name = "px", type = "f64" }, { name = "note", type = "string" }]"#,
            "t",
        )
        .unwrap(),
    );
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    for round in 0..3 {
        let mut b = BatchBuilder::new(schema.table("last").unwrap());
        for (i, s) in ["A", "B", "C", "A"].iter().enumerate() {
            b.set(0, Value::Timestamp(round * 10 + i as i64));
            b.set(1, Value::Symbol(s));
            b.set(2, Value::F64((round * 10 + i as i64) as f64));
            b.set(3, Value::Str(&"x".repeat(i + 1)));
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
    }
    let snap = store.snapshot("last").unwrap();
    assert_eq!(snap.rows, 3);
    let mut got: Vec<(String, f64, String)> = Vec::new();
    for c in &snap.chunks {
        let sym = arrow_cast_sym(c.batch.column(1).as_ref());
        let px = c.batch.column(2).as_primitive::<Float64Type>();
        let note = c.batch.column(3).as_string::<i32>();
        for (r, s) in sym.iter().enumerate() {
            got.push((s.clone(), px.value(r), note.value(r).to_string()));
        }
    }
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("A".into(), 23.0, "xxxx".into()),
            ("B".into(), 21.0, "xx".into()),
            ("C".into(), 22.0, "xxx".into())
        ]
    );
}

fn arrow_cast_sym(a: &dyn Array) -> Vec<String> {
    let d = a.as_dictionary::<UInt32Type>();
    let values = d.values().as_string::<i32>();
    d.keys()
        .values()
        .iter()
        .map(|k| values.value(*k as usize).to_string())
        .collect()
}

#[test]
fn fsmem_tables_use_file_backed_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut schema = Schema::default_schema();
    schema
        .place(&["trade".into(), "quote.bid".into()], Domain::Fsmem)
        .unwrap();
    let schema = Arc::new(schema);
    let store = Store::new(schema.clone(), Domains::new(Some(dir.path())).unwrap()).unwrap();
    store.apply(&trades(&schema, 0, 100_000, &["A"])).unwrap();
    let m = store.memory();
    assert!(m.fsmem > 800_000 * 3, "fsmem bytes {}", m.fsmem);
    assert!(m.dram < m.fsmem / 10, "dram {} fsmem {}", m.dram, m.fsmem);
    assert!(std::fs::read_dir(dir.path()).unwrap().count() > 0);
    assert_eq!(sum_size(&store), (100_000, 100_000 * 99_999 / 2));
    store.clear("trade").unwrap();
    assert_eq!(store.memory().fsmem, 0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn fsmem_placement_without_dir_is_refused() {
    let mut schema = Schema::default_schema();
    schema.place(&["trade".into()], Domain::Fsmem).unwrap();
    let e = Store::new(Arc::new(schema), Domains::new(None).unwrap())
        .err()
        .unwrap();
    assert!(e.to_string().contains("--fsmem-dir"), "{e}");
}

#[test]
fn clear_markers_empty_a_table_and_pins_keep_their_moment() {
    let schema = Arc::new(Schema::default_schema());
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    store.apply(&trades(&schema, 0, 5000, &["A", "B"])).unwrap();
    let pin = store.pin("trade").unwrap();
    store
        .apply(&tickdb_core::Batch::clear_marker("trade"))
        .unwrap();
    assert_eq!(sum_size(&store), (0, 0));
    let now = store.raw_snapshot("trade").unwrap();
    assert_eq!((now.rows, now.generation), (0, 1));
    // The pin still sees the rows as they were, in the old generation.
    let then = pin.raw_snapshot().unwrap();
    assert_eq!((then.rows, then.generation), (5000, 0));
    store.apply(&trades(&schema, 0, 10, &["C"])).unwrap();
    assert_eq!(sum_size(&store), (10, 45));
    assert!(store
        .apply(&tickdb_core::Batch::clear_marker("nosuch"))
        .is_err());
}
