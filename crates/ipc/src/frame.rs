//! Message frames: the 8-byte header, and whole messages in and out.
//!
//! ```text
//! byte 0     byte order of everything after: 0 big-endian, 1 little-endian
//! byte 1     message type: 0 async, 1 sync, 2 response
//! byte 2     1 when the message is compressed (see `compress`), else 0
//! byte 3     reserved (0)
//! bytes 4-8  the whole message's length, header included (u32, in byte 0's order)
//! ```

use crate::compress;
use crate::decode::decode;
use crate::encode::encode_into;
use crate::error::{IpcError, Result};
use crate::value::K;
use crate::HEADER_BYTES;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgType {
    Async,
    Sync,
    Response,
}

impl MsgType {
    pub fn code(self) -> u8 {
        match self {
            MsgType::Async => 0,
            MsgType::Sync => 1,
            MsgType::Response => 2,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub big_endian: bool,
    pub msg_type: MsgType,
    pub compressed: bool,
    /// The whole message's length on the wire, header included.
    pub len: usize,
}

/// The bounds on what a peer may send.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest message, on the wire and once decompressed, in bytes.
    pub message_bytes_max: usize,
    /// The deepest nesting of lists, dictionaries and tables.
    pub depth_max: usize,
}

impl Header {
    pub fn parse(h: &[u8; HEADER_BYTES], limits: &Limits) -> Result<Header> {
        let big_endian = match h[0] {
            0 => true,
            1 => false,
            b => {
                return Err(IpcError::BadHeader(format!(
                    "byte 0 (byte order) is {b}, not 0 or 1"
                )))
            }
        };
        let msg_type = match h[1] {
            0 => MsgType::Async,
            1 => MsgType::Sync,
            2 => MsgType::Response,
            b => {
                return Err(IpcError::BadHeader(format!(
                    "byte 1 (message type) is {b}, not 0 (async), 1 (sync) or 2 (response)"
                )))
            }
        };
        let compressed = match h[2] {
            0 => false,
            1 => true,
            b => {
                return Err(IpcError::BadHeader(format!(
                    "byte 2 (compression) is {b}: only 0 and 1 are spoken here (capability 3)"
                )))
            }
        };
        let l = [h[4], h[5], h[6], h[7]];
        let len = if big_endian {
            u32::from_be_bytes(l)
        } else {
            u32::from_le_bytes(l)
        } as usize;
        if len > limits.message_bytes_max {
            return Err(IpcError::TooLarge {
                len: len as u64,
                max: limits.message_bytes_max,
            });
        }
        if len <= HEADER_BYTES {
            return Err(IpcError::BadHeader(format!(
                "message length {len} leaves no room for an object after the 8-byte header"
            )));
        }
        Ok(Header {
            big_endian,
            msg_type,
            compressed,
            len,
        })
    }
}

/// Decodes the object of a whole message (`msg` includes the header
/// `h` was parsed from).
pub fn decode_message(h: &Header, msg: &[u8], limits: &Limits) -> Result<K> {
    if h.compressed {
        let whole = compress::decompress(msg, h.big_endian, limits.message_bytes_max)?;
        decode(&whole[HEADER_BYTES..], h.big_endian, limits.depth_max)
    } else {
        decode(&msg[HEADER_BYTES..], h.big_endian, limits.depth_max)
    }
}

/// The whole message carrying `k`, little-endian; compressed when
/// `may_compress` (the peer is not on loopback and speaks capability 1 or
/// more) and compression at least halves it.
pub fn encode_message(t: MsgType, k: &K, may_compress: bool) -> Result<Vec<u8>> {
    let mut out = vec![1, t.code(), 0, 0, 0, 0, 0, 0];
    encode_into(k, &mut out);
    if out.len() > i32::MAX as usize {
        return Err(IpcError::TooLarge {
            len: out.len() as u64,
            max: i32::MAX as usize,
        });
    }
    let n = out.len() as u32;
    out[4..8].copy_from_slice(&n.to_le_bytes());
    if may_compress {
        if let Some(z) = compress::compress(&out) {
            return Ok(z);
        }
    }
    Ok(out)
}
