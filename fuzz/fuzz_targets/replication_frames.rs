//! The replication protocol (crates/replication protocol.rs): any bytes as
//! a stream of frames, read as a standby or a primary reads them
//! (`read_message`, with the handshake bound when sel & 1, else the full
//! one), and each body also decoded on its own (`Message::decode`). The
//! bulk bodies go to their own decoders: Records as journal records (as
//! the standby's journal thread splits them), SchemaHistory as a journal
//! SCHEMA file, Snapshot through the batch codec.
//! Asserts: no panic; the socket reader and the body decoder agree; a
//! decoded message encodes, and its encoding decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tickdb_fuzz::ready;
use tickdb_journal::format::{check_record, RecordCheck};
use tickdb_replication::protocol::{
    read_message, Message, FRAME_BYTES_MAX, FRAME_HEADER_BYTES, HANDSHAKE_FRAME_BYTES_MAX,
};

fn records(bytes: &[u8]) {
    let mut at = 0usize;
    while at < bytes.len() {
        match check_record(bytes, at) {
            RecordCheck::Ok(h) => {
                at += h.total_len() as usize;
                assert!(at <= bytes.len());
            }
            _ => return,
        }
    }
}

fn bulk(m: &Message) {
    match m {
        Message::Records { bytes } => records(bytes),
        Message::SchemaHistory { bytes } => {
            let _ = tickdb_journal::SchemaHistory::decode(bytes, Path::new("SCHEMA"));
        }
        Message::Snapshot { payload } => {
            let _ = tickdb_core::codec::decode(payload, None);
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, data)) = data.split_first() else {
        return;
    };
    let max = if sel & 1 != 0 {
        HANDSHAKE_FRAME_BYTES_MAX
    } else {
        FRAME_BYTES_MAX
    };
    let mut r: &[u8] = data;
    let mut at = 0usize;
    loop {
        let got = ready(read_message(&mut r, max));
        let rest = &data[at..];
        match got {
            Ok(Some(m)) => {
                let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                assert!(len <= max);
                let body = rest[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len].to_vec();
                let alone = Message::decode(rest[4], body).expect("the body decodes on its own");
                assert_eq!(alone, m);
                let enc = m.encode().expect("a decoded message encodes");
                let back = Message::decode(enc[4], enc[FRAME_HEADER_BYTES..].to_vec())
                    .expect("an encoded message decodes");
                assert_eq!(back, m, "decode(encode(m)) == m for {}", m.name());
                bulk(&m);
                at += FRAME_HEADER_BYTES + len;
                assert_eq!(r.len(), data.len() - at);
            }
            Ok(None) => {
                assert!(rest.is_empty());
                return;
            }
            Err(_) => return,
        }
    }
});
