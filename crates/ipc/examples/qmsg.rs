//! Writes one tick-like table of ROWS rows as a kdb+ IPC message, twice:
//! as it is and compressed. Output: u32 (little-endian) length of the raw
//! message, the raw message, then the compressed one. tests/test_ipc.py
//! checks the compressed form with aiokdb's independent decompressor.
//!
//!     cargo run -p tickdb-ipc --example qmsg -- ROWS

use std::io::Write;
use tickdb_ipc::{compress, encode_message, Kind, MsgType, Vector, K};

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let syms = ["AAPL", "MSFT", "IBM", "GOOG", "SPY"];
    let table = K::table(
        vec!["time".into(), "sym".into(), "price".into(), "size".into()],
        vec![
            K::vector(Vector::Long(
                Kind::Timestamp,
                (0..rows as i64)
                    .map(|i| 757_000_000_000_000_000 + i * 1_000_000)
                    .collect(),
            )),
            K::vector(Vector::Symbol(
                (0..rows)
                    .map(|i| syms[(i * 7 + i / 3) % 5].to_string())
                    .collect(),
            )),
            K::vector(Vector::Float(
                Kind::Float,
                (0..rows).map(|i| 100.0 + (i % 50) as f64 * 0.01).collect(),
            )),
            K::vector(Vector::Long(
                Kind::Long,
                (0..rows as i64).map(|i| 100 * (i % 9)).collect(),
            )),
        ],
    );
    let raw = match encode_message(MsgType::Async, &table, false) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let zipped = compress::compress(&raw).unwrap_or_else(|| raw.clone());
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&(raw.len() as u32).to_le_bytes());
    let _ = out.write_all(&raw);
    let _ = out.write_all(&zipped);
}
