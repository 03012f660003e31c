//! Hot Restart chunk files (crates/hotrestart format.rs): any bytes as a
//! chunk file, and any bytes behind a valid header of either kind, both as
//! they are and with every record's CRC32C fixed up (so that mutations reach
//! the checks behind the checksum: kind, reserved bytes, key length).
//! Asserts: no panic; the decoder answers with records or an error naming
//! an offset inside the input, never a record that reaches past the input;
//! a decoded record re-encodes to its exact bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_hotrestart::format::{self, ChunkKind, CHUNK_HEADER_BYTES, RECORD_BYTES_MAX};

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
            Ok((r, len)) if len > 0 => {
                assert!(at + len <= file.len());
                assert_eq!(len, format::encoded_len(r.key.len(), r.value.len()));
                let mut enc = Vec::new();
                format::encode_record(&mut enc, r.seq, r.kind, r.key, r.value);
                assert_eq!(
                    enc,
                    &file[at..at + len],
                    "a decoded record re-encodes to its bytes"
                );
                at += len;
            }
            _ => break,
        }
    }
}

fn fixed(mut file: Vec<u8>, from: usize) -> Vec<u8> {
    tickdb_fuzz::fix_crcs(&mut file, from, 4, 8, |len| {
        (len as usize <= RECORD_BYTES_MAX).then_some(len as usize)
    });
    file
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&fixed(data.to_vec(), CHUNK_HEADER_BYTES.min(data.len())));
    for kind in [ChunkKind::Value, ChunkKind::Tombstone] {
        let mut file = format::encode_header(kind, 0, 9).to_vec();
        file.extend_from_slice(data);
        check(&file);
        check(&fixed(file, CHUNK_HEADER_BYTES));
    }
});
