//! The tp subscription protocol (crates/net/src/proto.rs): any bytes as a
//! stream of frames, decoded by `decode_frame` (from a buffer) and by
//! `read_message_max` (from a socket), whose answers must agree.
//! Asserts: no panic; a decoded frame re-encodes to exactly its bytes and
//! passes `Message::check`; the socket reader returns the same messages
//! and fails or ends where the buffer decoder does; an Update's or Write's
//! payload goes through the batch codec without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_fuzz::ready;
use tickdb_net::proto::{decode_frame, encode_message, read_message_max, Message, FRAME_BYTES_MAX};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    let mut msgs = Vec::new();
    let end = loop {
        match decode_frame(&data[at..]) {
            Ok(Some((m, n))) => {
                assert!(n >= 5 && at + n <= data.len());
                let mut enc = Vec::new();
                encode_message(&m, &mut enc);
                assert_eq!(
                    enc,
                    &data[at..at + n],
                    "{} re-encodes to its bytes",
                    m.name()
                );
                assert!(m.check().is_ok());
                match &m {
                    Message::Update { payload, .. } => {
                        let _ = tickdb_core::codec::decode(payload, None);
                    }
                    Message::Write { payload, .. } => {
                        let _ = tickdb_core::codec::decode(payload, None);
                    }
                    _ => {}
                }
                msgs.push(m);
                at += n;
            }
            // A partial frame: a socket reader sees the stream end inside it
            // (or, with nothing left, a clean end).
            Ok(None) => break at == data.len(),
            Err(_) => break false,
        }
    };

    let mut r: &[u8] = data;
    for m in &msgs {
        let got = ready(read_message_max(&mut r, FRAME_BYTES_MAX));
        assert_eq!(
            got.expect("the socket reader reads what decode_frame did")
                .as_ref(),
            Some(m)
        );
    }
    let last = ready(read_message_max(&mut r, FRAME_BYTES_MAX));
    if end {
        assert!(matches!(last, Ok(None)), "a clean end at a frame boundary");
    } else {
        assert!(
            last.is_err(),
            "the socket reader fails where decode_frame stopped"
        );
    }
});
