//! kdb+ IPC (crates/ipc): the first byte picks what the rest is:
//!   sel % 4 == 0  a handshake (`user:password` + capability, before its NUL)
//!   sel % 4 == 1  a stream of messages, read as the node reads them: an
//!                 8-byte header (Header::parse, the node's default limits),
//!                 then the whole message, decoded (decompressed if flagged)
//!   sel % 4 == 2  a compressed message body: decompress it as it is, and
//!                 compress a message made of these bytes, then decompress it
//!   sel % 4 == 3  a q object body (decode) in either byte order
//! Asserts: no panic; a decoded object (one without functions, which are
//! kept only to be named in an error) re-encodes (little- and big-endian)
//! to bytes that decode to an object that re-encodes to the same bytes;
//! whatever compresses decompresses to the exact message; a decompressed
//! message has the length it claims and never exceeds the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickdb_ipc::compress::{compress, decompress};
use tickdb_ipc::decode::decode;
use tickdb_ipc::encode::encode_ordered;
use tickdb_ipc::{
    decode_message, encode_message, handshake, Header, Limits, MsgType, DEPTH_MAX, HEADER_BYTES, K,
    MESSAGE_BYTES_MAX,
};

const LIMITS: Limits = Limits {
    message_bytes_max: MESSAGE_BYTES_MAX,
    depth_max: DEPTH_MAX,
};

/// Whether `k` holds a function anywhere: the server keeps one only to name
/// it in an error and would send it as its text (a char vector), so an
/// object holding one does not round-trip by design.
fn has_function(k: &K) -> bool {
    match k {
        K::Function { .. } => true,
        K::List(items) => items.iter().any(has_function),
        K::Dict { keys, values, .. } => has_function(keys) || has_function(values),
        K::Table(t) => t.columns.iter().any(has_function),
        _ => false,
    }
}

/// The object `k` must survive encoding in both byte orders.
fn round_trip(k: &K) {
    if has_function(k) {
        return;
    }
    let msg = encode_message(MsgType::Sync, k, false).expect("a decoded object encodes");
    let h = Header::parse(msg[..HEADER_BYTES].try_into().unwrap(), &LIMITS).expect("own header");
    assert_eq!(h.len, msg.len());
    let back = decode_message(&h, &msg, &LIMITS).expect("a re-encoded object decodes");
    let msg2 = encode_message(MsgType::Sync, &back, false).unwrap();
    assert_eq!(msg2, msg, "encode(decode(encode(k))) == encode(k)");

    let mut big = Vec::new();
    encode_ordered(k, true, &mut big);
    let from_big = decode(&big, true, DEPTH_MAX).expect("big-endian re-encoding decodes");
    assert_eq!(
        encode_message(MsgType::Sync, &from_big, false).unwrap(),
        msg
    );

    // Compression, where it applies (large messages), is lossless.
    if let Some(z) = compress(&msg) {
        assert!(z.len() < msg.len());
        assert_eq!(
            decompress(&z, false, LIMITS.message_bytes_max).unwrap(),
            msg
        );
    }
}

fn messages(mut data: &[u8]) {
    while data.len() >= HEADER_BYTES {
        let h: &[u8; HEADER_BYTES] = data[..HEADER_BYTES].try_into().unwrap();
        let Ok(header) = Header::parse(h, &LIMITS) else {
            return;
        };
        let Some(msg) = data.get(..header.len) else {
            return;
        };
        if let Ok(k) = decode_message(&header, msg, &LIMITS) {
            round_trip(&k);
        }
        data = &data[header.len..];
    }
}

fn compression(data: &[u8]) {
    for big in [false, true] {
        if let Ok(out) = decompress(data, big, 1 << 20) {
            assert!(out.len() > HEADER_BYTES && out.len() <= 1 << 20);
            assert_eq!(out[2], 0);
            let mut l = [0u8; 4];
            l.copy_from_slice(&out[4..8]);
            let n = if big {
                u32::from_be_bytes(l)
            } else {
                u32::from_le_bytes(l)
            };
            assert_eq!(n as usize, out.len());
        }
    }
    // A message of these bytes (repeated past the size kdb+ compresses
    // from, so that compression is tried).
    if data.is_empty() {
        return;
    }
    let mut msg = vec![1u8, 1, 0, 0, 0, 0, 0, 0];
    while msg.len() < 2100 {
        msg.extend_from_slice(data);
    }
    let n = msg.len() as u32;
    msg[4..8].copy_from_slice(&n.to_le_bytes());
    if let Some(z) = compress(&msg) {
        assert_eq!(z[2], 1);
        assert_eq!(
            decompress(&z, false, msg.len()).expect("own compression"),
            msg
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, data)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            if let Ok(h) = handshake::parse(data) {
                assert!(h.user.len() + h.password.len() <= data.len());
                assert!(h.agreed() <= handshake::CAPABILITY);
            }
        }
        1 => messages(data),
        2 => compression(data),
        _ => {
            if let Ok(k) = decode(data, sel & 4 != 0, DEPTH_MAX) {
                round_trip(&k);
            }
        }
    }
});
