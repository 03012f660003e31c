//! The apply path publishes first and leaves the table's upkeep (sealing a
//! chunk an apply filled, allocating the next chunk, touching pages ahead
//! of the writer) for after: readers see every row either way, in order,
//! whether or not the upkeep ran; and each table's memory is counted in its
//! own figures as well as the store's.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use std::sync::Arc;
use tickdb_core::batch::{BatchBuilder, Value};
use tickdb_core::domain::{Domain, Domains};
use tickdb_core::store::{Store, CHUNK_ROWS_MAX, CHUNK_ROWS_MIN};
use tickdb_core::Schema;

fn trades(schema: &Schema, start: i64, n: i64) -> tickdb_core::Batch {
    let mut b = BatchBuilder::new(schema.table("trade").unwrap());
    for i in start..start + n {
        b.set(0, Value::Timestamp(i));
        b.set(1, Value::Symbol(["A", "B", "C", "D"][(i % 4) as usize]));
        b.set(2, Value::F64(1.0));
        b.set(3, Value::I64(i));
        b.end_row();
    }
    b.finish()
}

/// Every `size` value of the trade table in snapshot order.
fn sizes(store: &Store) -> Vec<i64> {
    let snap = store.snapshot("trade").unwrap();
    let mut out = Vec::with_capacity(snap.rows);
    for c in &snap.chunks {
        out.extend_from_slice(c.batch.column(3).as_primitive::<Int64Type>().values());
    }
    assert_eq!(out.len(), snap.rows);
    out
}

/// A small xorshift generator: the test prints its seed and reruns from
/// TICKDB_TEST_SEED.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn seed() -> u64 {
    // Odd: the generator's state must not be zero.
    tickdb_core::testing::seed("store upkeep") | 1
}

/// Random batch sizes, from one row to several chunks, applied with the
/// upkeep, before it with the upkeep after, or before it with no upkeep
/// at all: the rows read back are always exactly the rows applied, in
/// order, and once the upkeep has run every chunk but the active one is
/// sealed with its symbol index.
#[test]
fn rows_read_back_in_order_with_or_without_upkeep() {
    let mut rng = Rng(seed());
    for placement in [Domain::Dram, Domain::Fsmem] {
        let dir = tempfile::tempdir().unwrap();
        let mut schema = Schema::default_schema();
        if placement == Domain::Fsmem {
            schema.place(&["trade".into()], Domain::Fsmem).unwrap();
        }
        let schema = Arc::new(schema);
        let store = Store::new(schema.clone(), Domains::new(Some(dir.path())).unwrap()).unwrap();
        let mut at = 0i64;
        while at < 3 * CHUNK_ROWS_MAX as i64 {
            let n = match rng.next(4) {
                0 => 1 + rng.next(8),
                1 => 1 + rng.next(2_000),
                2 => 1 + rng.next(CHUNK_ROWS_MAX as u64 * 2),
                // Exactly what fills the smallest chunk: a chunk that ends
                // with the batch.
                _ => CHUNK_ROWS_MIN as u64,
            } as i64;
            let b = trades(&schema, at, n);
            match rng.next(3) {
                0 => store.apply(&b).unwrap(),
                1 => {
                    store.apply_before_upkeep(&b).unwrap();
                    store.upkeep().unwrap();
                }
                _ => store.apply_before_upkeep(&b).unwrap(),
            }
            at += n;
            let got = sizes(&store);
            assert_eq!(got.len() as i64, at, "{placement:?}");
            assert!(
                got.iter().enumerate().all(|(i, v)| *v == i as i64),
                "{placement:?}: rows out of order after {at}"
            );
        }
        store.upkeep().unwrap();
        let snap = store.snapshot("trade").unwrap();
        let unindexed = snap.chunks.iter().filter(|c| c.sym_index.is_none()).count();
        assert!(
            unindexed <= 1,
            "{placement:?}: {unindexed} chunks not sealed"
        );
        assert!(
            snap.chunks[..snap.chunks.len() - 1]
                .iter()
                .all(|c| c.sym_index.is_some()),
            "{placement:?}: only the last (active) chunk may be unsealed"
        );
    }
}

/// A batch that fills its chunk is visible at once, before the seal; the
/// upkeep seals it (with its index) without changing what readers see.
#[test]
fn a_filled_chunk_is_visible_before_its_seal() {
    let schema = Arc::new(Schema::default_schema());
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    store
        .apply_before_upkeep(&trades(&schema, 0, CHUNK_ROWS_MIN as i64))
        .unwrap();
    let before = store.snapshot("trade").unwrap();
    assert_eq!(before.rows, CHUNK_ROWS_MIN);
    assert_eq!(before.chunks.len(), 1);
    assert!(before.chunks[0].sym_index.is_none(), "not sealed yet");
    store.upkeep().unwrap();
    let after = store.snapshot("trade").unwrap();
    assert_eq!(after.chunks.len(), 1);
    assert_eq!(after.chunks[0].sym_index.as_ref().unwrap().symbols(), 4);
    assert_eq!(
        sizes(&store),
        (0..CHUNK_ROWS_MIN as i64).collect::<Vec<_>>()
    );
}

/// The next chunk is allocated by the upkeep once the active one is
/// mostly full, so the apply that starts it allocates nothing.
#[test]
fn the_next_chunk_is_ready_before_it_is_needed() {
    let schema = Arc::new(Schema::default_schema());
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    let first = CHUNK_ROWS_MIN as i64;
    // Fill the first chunk (1024 rows) to 90%: its upkeep allocates the
    // 2048-row chunk after it.
    store.apply(&trades(&schema, 0, first * 9 / 10)).unwrap();
    let with_spare = store.memory().breakdown.columns;
    // The rest of the first chunk and the start of the second: the apply
    // itself allocates no column memory.
    store
        .apply_before_upkeep(&trades(&schema, first * 9 / 10, first / 5))
        .unwrap();
    assert_eq!(store.memory().breakdown.columns, with_spare);
    assert_eq!(sizes(&store).len() as i64, first * 9 / 10 + first / 5);
}

/// Each table's figures are its own, and the tables' add up to the store's.
#[test]
fn per_table_memory_adds_up_to_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut schema = Schema::default_schema();
    schema.place(&["quote".into()], Domain::Fsmem).unwrap();
    let schema = Arc::new(schema);
    let store = Store::new(schema.clone(), Domains::new(Some(dir.path())).unwrap()).unwrap();
    store.apply(&trades(&schema, 0, 100_000)).unwrap();
    let mut q = BatchBuilder::new(schema.table("quote").unwrap());
    for i in 0..50_000i64 {
        q.set(0, Value::Timestamp(i));
        q.set(1, Value::Symbol("Q"));
        q.end_row();
    }
    store.apply(&q.finish()).unwrap();
    let per: std::collections::HashMap<String, _> = store.table_memory().into_iter().collect();
    let total = store.memory();
    assert_eq!(per.values().map(|m| m.dram).sum::<u64>(), total.dram);
    assert_eq!(per.values().map(|m| m.fsmem).sum::<u64>(), total.fsmem);
    // trade: 28 bytes a row of columns and 4 of index, in DRAM only.
    assert!(per["trade"].dram >= 100_000 * 32, "{per:?}");
    assert_eq!(per["trade"].fsmem, 0);
    // quote: 44 bytes a row, in fsmem; its symbols stay in DRAM.
    assert!(per["quote"].fsmem >= 50_000 * 44, "{per:?}");
    assert!(per["quote"].dram < per["quote"].fsmem / 100, "{per:?}");
    assert_eq!(per["daily"].fsmem, 0);
    store.clear("trade").unwrap();
    store.clear("quote").unwrap();
    let per: std::collections::HashMap<String, _> = store.table_memory().into_iter().collect();
    assert_eq!(per["quote"].fsmem, 0);
    // What is left of trade is its symbol dictionary.
    assert!(per["trade"].dram < 64 * 1024, "{per:?}");
}

/// Strings longer than a chunk reserves per row end chunks early (their
/// data does not fit): with a filled chunk waiting for its seal, every row
/// still reads back in order with its own string.
#[test]
fn long_strings_ending_chunks_early_keep_the_order() {
    let mut rng = Rng(seed());
    let schema = Arc::new(
        Schema::parse(
            r#"[[table]]
            name = "note"
            column = [{ name = "time", type = "timestamp" }, { name = "sym", type = "symbol" },
                      { name = "text", type = "string" }]"#,
            "t",
        )
        .unwrap(),
    );
    let store = Store::new(schema.clone(), Domains::new(None).unwrap()).unwrap();
    let rows = |from: i64, n: i64, text: &dyn Fn(i64) -> String| {
        let mut b = BatchBuilder::new(schema.table("note").unwrap());
        for i in from..from + n {
            b.set(0, Value::Timestamp(i));
            b.set(1, Value::Symbol("S"));
            b.set(2, Value::Str(&text(i)));
            b.end_row();
        }
        b.finish()
    };
    let read = |store: &Store| -> Vec<String> {
        let snap = store.snapshot("note").unwrap();
        let mut out = Vec::new();
        for c in &snap.chunks {
            let texts = c.batch.column(2).as_string::<i32>();
            out.extend((0..texts.len()).map(|r| texts.value(r).to_string()));
        }
        out
    };
    // One batch: short rows that fill the first chunk (which then waits
    // for its seal), a few more, then one too long for the second chunk.
    let first = CHUNK_ROWS_MIN as i64 + 10;
    let one = |i: i64| {
        if i == first {
            "y".repeat(1 << 20)
        } else {
            i.to_string()
        }
    };
    store
        .apply_before_upkeep(&rows(0, first + 5, &one))
        .unwrap();
    let want: Vec<String> = (0..first + 5).map(one).collect();
    assert_eq!(read(&store), want);
    store.clear("note").unwrap();
    // Mostly short strings (chunks fill by rows), now and then one far
    // longer than a chunk reserves (it ends its chunk early).
    let text = |i: i64| {
        let long = if i % 700 == 699 { 1 << 20 } else { 0 };
        format!("{i}:{}", "x".repeat(long))
    };
    let mut at = 0i64;
    while at < 3 * CHUNK_ROWS_MIN as i64 * 4 {
        let n = 1 + rng.next(CHUNK_ROWS_MIN as u64 * 2) as i64;
        let mut b = BatchBuilder::new(schema.table("note").unwrap());
        for i in at..at + n {
            b.set(0, Value::Timestamp(i));
            b.set(1, Value::Symbol("S"));
            b.set(2, Value::Str(&text(i)));
            b.end_row();
        }
        if rng.next(2) == 0 {
            store.apply(&b.finish()).unwrap();
        } else {
            store.apply_before_upkeep(&b.finish()).unwrap();
        }
        at += n;
        let snap = store.snapshot("note").unwrap();
        let mut i = 0i64;
        for c in &snap.chunks {
            let texts = c.batch.column(2).as_string::<i32>();
            for r in 0..texts.len() {
                assert_eq!(texts.value(r), text(i), "row {i} after {at} rows");
                i += 1;
            }
        }
        assert_eq!(i, at);
    }
}

/// A table with fsmem columns gets its next chunk from the store's
/// allocator thread: the upkeep asks for it, picks it up once it is ready,
/// and the apply that starts it creates no file.
#[test]
fn an_fsmem_tables_next_chunk_comes_from_the_allocator_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut schema = Schema::default_schema();
    schema.place(&["trade".into()], Domain::Fsmem).unwrap();
    let schema = Arc::new(schema);
    let store = Store::new(schema.clone(), Domains::new(Some(dir.path())).unwrap()).unwrap();
    let first = CHUNK_ROWS_MIN as i64;
    // Without its upkeep, so no spare is asked for yet: with `apply`, the
    // allocator thread could finish before `bytes_before` is read, and the
    // wait below would wait for a change that had already happened.
    store
        .apply_before_upkeep(&trades(&schema, 0, first * 9 / 10))
        .unwrap();
    let files = || std::fs::read_dir(dir.path()).unwrap().count();
    let (bytes_before, files_before) = (store.memory().fsmem, files());
    // The allocation happens on the other thread: wait for its regions,
    // then give the upkeep time to pick the chunk up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.memory().fsmem == bytes_before {
        assert!(std::time::Instant::now() < deadline, "no chunk allocated");
        store.upkeep().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for _ in 0..100 {
        store.upkeep().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (with_spare, files_with_spare) = (store.memory().fsmem, files());
    assert!(files_with_spare > files_before);
    store
        .apply_before_upkeep(&trades(&schema, first * 9 / 10, first / 5))
        .unwrap();
    assert_eq!(store.memory().fsmem, with_spare);
    assert_eq!(files(), files_with_spare);
    assert_eq!(sizes(&store).len() as i64, first * 9 / 10 + first / 5);
    // Clearing waits for nothing in flight and leaves no file behind.
    store
        .apply(&trades(&schema, first * 11 / 10, first))
        .unwrap();
    store.clear("trade").unwrap();
    assert_eq!(store.memory().fsmem, 0);
    assert_eq!(files(), 0);
}
