//! Chunk images (tickdb-core store/image.rs, Hot Restart's column records):
//! any bytes decoded as an image of the fuzz schema's `all` table (every
//! column type) and of `trade`, against a dictionary of a few names, taking
//! every row and taking fewer. Asserts: no panic; what decodes has the rows
//! asked for, and re-encodes to an image that decodes to the same rows and
//! encodes to the same bytes again (canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use tickdb_core::domain::Domains;
use tickdb_core::store::{image, Store};

const NAMES: [&str; 4] = ["A", "BB", "", "MSFT"];

fn store() -> &'static Store {
    static S: OnceLock<Store> = OnceLock::new();
    S.get_or_init(|| {
        let store = Store::new(Arc::new(tickdb_fuzz::schema().clone()), Domains::new(None).unwrap())
            .expect("the fuzz schema makes a store");
        for t in ["all", "trade"] {
            store
                .restore_symbols(t, 0, NAMES.iter().copied())
                .expect("names restore");
        }
        store
    })
}

fn check(table: &str, bytes: &[u8], take: usize) {
    let restorer = store().chunk_restorer(table).unwrap();
    let image: Arc<[u8]> = Arc::from(bytes);
    let Ok(r) = restorer.decode(image, take) else {
        return;
    };
    assert_eq!(r.rows, r.chunk.batch.num_rows());
    assert!(r.rows <= take);
    let mut again = Vec::new();
    image::encode(restorer.def(), &r.chunk, &mut again).expect("a decoded chunk encodes");
    let again: Arc<[u8]> = Arc::from(again);
    let back = restorer
        .decode(again.clone(), usize::MAX)
        .expect("a re-encoded image decodes");
    assert_eq!(back.chunk.batch, r.chunk.batch);
    let mut third = Vec::new();
    image::encode(restorer.def(), &back.chunk, &mut third).unwrap();
    assert_eq!(&third[..], &again[..], "encoding is canonical");
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let table = if sel & 1 == 0 { "all" } else { "trade" };
    check(table, rest, usize::MAX);
    check(table, rest, (sel >> 1) as usize);
});
