//! What the fuzz targets share: the ILP test schema, a poll for futures that
//! never wait (async readers over a byte slice), and a CRC fix-up so that
//! mutated records get past their checksum to the checks behind it.

use std::future::Future;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

/// A schema with every column type, a keyed table, a table whose time
/// column is not `time`, and a symbol-only table: the ILP parser's paths.
pub const SCHEMA_TOML: &str = r#"
[[table]]
name = "trade"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "price", type = "f64" },
  { name = "size", type = "i64" },
]

[[table]]
name = "all"
column = [
  { name = "ts", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "f", type = "f64" },
  { name = "l", type = "i64" },
  { name = "i", type = "i32" },
  { name = "b", type = "bool" },
  { name = "s", type = "string" },
  { name = "raw", type = "bytes" },
  { name = "other_ts", type = "timestamp" },
]
timestamp = "ts"

[[table]]
name = "cache"
kind = "keyed"
key = ["k1", "k2"]
column = [
  { name = "time", type = "timestamp" },
  { name = "k1", type = "symbol" },
  { name = "k2", type = "i64" },
  { name = "v", type = "f64" },
]

[[table]]
name = "ref"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "exch", type = "symbol" },
  { name = "note", type = "string" },
]
"#;

/// `SCHEMA_TOML`, parsed once per process.
pub fn schema() -> &'static tickdb_core::Schema {
    static S: OnceLock<tickdb_core::Schema> = OnceLock::new();
    S.get_or_init(|| {
        tickdb_core::Schema::parse(SCHEMA_TOML, "fuzz").expect("the fuzz schema parses")
    })
}

/// Runs a future that cannot wait (an async reader over a byte slice) to
/// its end; a future that would wait is a bug in the harness or the reader.
pub fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a read from a byte slice waited"),
    }
}

/// Walks length-prefixed records (u32 little-endian length at the start of
/// each) and rewrites each one's CRC32C at `crc_at` over `crc_from..` its
/// end. `len_of` turns the length field into the record's whole length (or
/// None to stop). Stops at the first record that does not fit.
pub fn fix_crcs(
    buf: &mut [u8],
    mut at: usize,
    crc_at: usize,
    crc_from: usize,
    len_of: impl Fn(u32) -> Option<usize>,
) {
    while at + crc_from <= buf.len() {
        let len32 = u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let Some(len) = len_of(len32) else { return };
        if len < crc_from || at + len > buf.len() {
            return;
        }
        let crc = crc32c_of(&buf[at + crc_from..at + len]);
        buf[at + crc_at..at + crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        at += len;
    }
}

/// CRC32C (Castagnoli), bitwise: the harness's own, independent of the
/// crates' (they use the crc32c crate).
pub fn crc32c_of(b: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
