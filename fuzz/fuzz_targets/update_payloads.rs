//! The batch codec (tickdb-core codec::decode): the payload of a journal
//! record, a tp Update, a subscriber's Write and a replication Snapshot.
//! Asserts: no panic; what decodes re-encodes to bytes that decode again
//! and re-encode to the same bytes (the codec's fixed point); a payload
//! that decodes against a schema decodes without one to the same batches;
//! what decodes widened (a record from before `ALTER TABLE ... ADD COLUMN`,
//! `codec::decode_widened`) holds every column of its tables, and equals the
//! strict decode where that succeeds. Schema-change markers (`.u.schema`)
//! are among the seeds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_core::codec::{decode, decode_widened, encode_to_vec};
use tickdb_core::Schema;

fn check(data: &[u8], schema: Option<&Schema>) {
    let Ok(batches) = decode(data, schema) else {
        return;
    };
    let enc = encode_to_vec(&batches);
    let again = decode(&enc, schema).expect("re-encoded batches decode");
    assert_eq!(encode_to_vec(&again), enc);
    if schema.is_some() {
        let free = decode(data, None).expect("what decodes with a schema decodes without one");
        assert_eq!(encode_to_vec(&free), enc);
    }
}

fn widened(data: &[u8], schema: &Schema) {
    let Ok(w) = decode_widened(data, schema) else {
        return;
    };
    let enc = encode_to_vec(&w);
    decode(&enc, Some(schema)).expect("widened batches decode strictly");
    if let Ok(strict) = decode(data, Some(schema)) {
        assert_eq!(encode_to_vec(&strict), enc);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data, None);
    check(data, Some(tickdb_fuzz::schema()));
    widened(data, tickdb_fuzz::schema());
});
