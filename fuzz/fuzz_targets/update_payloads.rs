//! The batch codec (tickdb-core codec::decode): the payload of a journal
//! record, a tp Update, a subscriber's Write and a replication Snapshot.
//! Asserts: no panic; what decodes re-encodes to bytes that decode again
//! and re-encode to the same bytes (the codec's fixed point); a payload
//! that decodes against a schema decodes without one to the same batches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_core::codec::{decode, encode_to_vec};
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

fuzz_target!(|data: &[u8]| {
    check(data, None);
    check(data, Some(tickdb_fuzz::schema()));
});
