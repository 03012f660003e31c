//! kdb+ IPC message compression.
//!
//! KX documents when kdb+ compresses (over 2000 bytes, not on loopback, only
//! when it at least halves the message) and publishes the algorithm only as
//! the `z` and `u` methods of its Java client. It is an LZ77 variant:
//!
//! - The compressed message is the 8-byte header (byte 2 set to 1, bytes
//!   4..8 the compressed length), a 4-byte uncompressed length (the whole
//!   message, header included, in the header's byte order), then a stream.
//! - The stream is groups of up to eight steps, each group led by a flag
//!   byte whose bits (lowest first) say, per step, literal (0) or copy (1).
//! - A literal step is one byte, copied out as it is.
//! - A copy step is two bytes: `h`, an index into a 256-entry table of
//!   earlier positions in the output, and `n`: copy `2 + n` bytes from that
//!   position (byte by byte, so a copy may overlap what it writes).
//! - The table is keyed by the XOR of two adjacent output bytes. Both sides
//!   update it identically: after each step, every position `q` from where
//!   the last update stopped up to (but not including) the last byte
//!   written is stored under `out[q] ^ out[q+1]`; after a copy, the
//!   positions inside the copied bytes are skipped.
//!
//! Both sides here are written from that description; the decoder checks
//! every index, so a hostile message can fail but never read out of
//! bounds, and its output is bounded by the caller's limit.

use crate::error::{IpcError, Result};
use crate::HEADER_BYTES;

/// Messages at most this long are sent as they are (KX's rule).
pub const COMPRESS_BYTES_MIN: usize = 2000;
/// Bytes before the stream: the header and the uncompressed length.
const PREFIX_BYTES: usize = HEADER_BYTES + 4;
/// The longest copy a step can express: 2 + 255.
const COPY_BYTES_MAX: usize = 2 + 255;

fn hash(b: &[u8], q: usize) -> usize {
    (b[q] ^ b[q + 1]) as usize
}

/// Decompresses a whole compressed message (its header included) into the
/// whole uncompressed message (header with byte 2 cleared and the full
/// length), refusing one whose stated size is over `max_bytes`.
pub fn decompress(msg: &[u8], big_endian: bool, max_bytes: usize) -> Result<Vec<u8>> {
    let bad = |why: String| IpcError::BadCompression(why);
    if msg.len() < PREFIX_BYTES {
        return Err(bad(format!(
            "{} bytes: shorter than a header and a length",
            msg.len()
        )));
    }
    let mut l = [0u8; 4];
    l.copy_from_slice(&msg[HEADER_BYTES..PREFIX_BYTES]);
    let total = if big_endian {
        u32::from_be_bytes(l)
    } else {
        u32::from_le_bytes(l)
    } as usize;
    if total > max_bytes {
        return Err(IpcError::TooLarge {
            len: total as u64,
            max: max_bytes,
        });
    }
    if total <= HEADER_BYTES {
        return Err(bad(format!("uncompressed length {total} is too short")));
    }
    let mut out = vec![0u8; total];
    out[..HEADER_BYTES].copy_from_slice(&msg[..HEADER_BYTES]);
    out[2] = 0;
    let len_bytes = if big_endian {
        (total as u32).to_be_bytes()
    } else {
        (total as u32).to_le_bytes()
    };
    out[4..8].copy_from_slice(&len_bytes);
    let src = &msg[PREFIX_BYTES..];
    let mut d = 0usize;
    let mut next = |what: &str| -> Result<u8> {
        let b = src.get(d).copied().ok_or_else(|| {
            bad(format!(
                "the stream ends (at byte {}) before {what}",
                d + PREFIX_BYTES
            ))
        })?;
        d += 1;
        Ok(b)
    };
    let mut table = [0usize; 256];
    let mut s = HEADER_BYTES;
    let mut p = HEADER_BYTES;
    let mut flags = 0u8;
    let mut bit = 0u16;
    while s < total {
        if bit == 0 {
            flags = next("a flag byte")?;
            bit = 1;
        }
        if flags as u16 & bit != 0 {
            let h = next("a copy's table index")? as usize;
            let n = next("a copy's length")? as usize;
            let r = table[h];
            if r == 0 || r >= s {
                return Err(bad(format!(
                    "a copy at output byte {s} refers to an empty table entry {h}"
                )));
            }
            let len = 2 + n;
            if s + len > total {
                return Err(bad(format!(
                    "a copy of {len} bytes at output byte {s} runs past the stated length {total}"
                )));
            }
            for k in 0..len {
                out[s + k] = out[r + k];
            }
            while p <= s {
                table[hash(&out, p)] = p;
                p += 1;
            }
            s += len;
            p = s;
        } else {
            out[s] = next("a literal")?;
            s += 1;
            while p + 1 < s {
                table[hash(&out, p)] = p;
                p += 1;
            }
        }
        bit = if bit == 128 { 0 } else { bit << 1 };
    }
    Ok(out)
}

/// Compresses a whole uncompressed little-endian message (header
/// included). None when the result would not be under half the size (then
/// the message goes as it is, as kdb+ does).
pub fn compress(msg: &[u8]) -> Option<Vec<u8>> {
    let t = msg.len();
    if t <= COMPRESS_BYTES_MIN || t > u32::MAX as usize {
        return None;
    }
    let budget = t / 2;
    let mut out = Vec::with_capacity(budget + 16);
    out.extend_from_slice(&msg[..HEADER_BYTES]);
    out[0] = 1;
    out[2] = 1;
    out.extend_from_slice(&(t as u32).to_le_bytes());
    let mut table = [0usize; 256];
    let mut s = HEADER_BYTES;
    let mut p = HEADER_BYTES;
    let mut flag_at = 0usize;
    let mut bit = 0u16;
    while s < t {
        if bit == 0 {
            flag_at = out.len();
            out.push(0);
            bit = 1;
        }
        let mut copied = false;
        if s + 2 <= t {
            let h = hash(msg, s);
            let r = table[h];
            if r != 0 && msg[r] == msg[s] && msg[r + 1] == msg[s + 1] {
                let mut len = 2;
                while len < COPY_BYTES_MAX && s + len < t && msg[r + len] == msg[s + len] {
                    len += 1;
                }
                out[flag_at] |= bit as u8;
                out.push(h as u8);
                out.push((len - 2) as u8);
                while p <= s {
                    table[hash(msg, p)] = p;
                    p += 1;
                }
                s += len;
                p = s;
                copied = true;
            }
        }
        if !copied {
            out.push(msg[s]);
            s += 1;
            while p + 1 < s {
                table[hash(msg, p)] = p;
                p += 1;
            }
        }
        bit = if bit == 128 { 0 } else { bit << 1 };
        if out.len() >= budget {
            return None;
        }
    }
    let n = out.len() as u32;
    out[4..8].copy_from_slice(&n.to_le_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: &[u8]) -> Vec<u8> {
        let mut m = vec![1, 0, 0, 0];
        m.extend_from_slice(&((body.len() + 8) as u32).to_le_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn round_trips_repetitive_data() {
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 7) as u8).collect();
        let m = message(&body);
        let z = compress(&m).expect("repetitive data compresses");
        assert!(z.len() < m.len() / 2);
        assert_eq!(decompress(&z, false, 1 << 20).unwrap(), m);
    }

    #[test]
    fn small_and_random_messages_are_not_compressed() {
        assert!(compress(&message(&[7u8; 100])).is_none());
        let mut x = 0x2545F4914F6CDD1Du64;
        let body: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(compress(&message(&body)).is_none());
    }

    #[test]
    fn a_stated_size_over_the_bound_is_refused_before_allocating() {
        let mut z = vec![1, 0, 1, 0, 16, 0, 0, 0];
        z.extend_from_slice(&(u32::MAX).to_le_bytes());
        z.extend_from_slice(&[0, 0, 0, 0]);
        assert!(matches!(
            decompress(&z, false, 1 << 20),
            Err(IpcError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_copy_from_an_empty_entry_is_an_error() {
        let mut z = vec![1, 0, 1, 0, 15, 0, 0, 0];
        z.extend_from_slice(&100u32.to_le_bytes());
        z.extend_from_slice(&[1, 5, 3]);
        assert!(matches!(
            decompress(&z, false, 1 << 20),
            Err(IpcError::BadCompression(_))
        ));
    }
}
