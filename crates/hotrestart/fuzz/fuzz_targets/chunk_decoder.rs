//! libFuzzer target: any bytes as a chunk file, and any bytes behind a valid
//! header of either kind. The decoder must answer with records or an error
//! naming an offset inside the input, never panic, and never report a record
//! that reaches past the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_hotrestart::format::{self, ChunkKind};

fn check(file: &[u8]) {
    match format::decode_chunk(file) {
        Ok((_, recs)) => {
            for r in recs {
                assert!(r.key.len() + r.value.len() <= file.len());
            }
        }
        Err((off, _)) => assert!(off <= file.len()),
    }
    let mut at = 0;
    while at < file.len() {
        match format::decode_record(&file[at..]) {
            Ok((_, len)) if len > 0 => at += len,
            _ => break,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    for kind in [ChunkKind::Value, ChunkKind::Tombstone] {
        let mut file = format::encode_header(kind, 0, 9).to_vec();
        file.extend_from_slice(data);
        check(&file);
    }
});
