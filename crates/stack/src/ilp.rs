//! Ticks as InfluxDB line protocol for the built-in `trade` and `quote`
//! tables: `trade,sym=AAPL price=187.53,size=100i 1583782200000000000`.
//! Prices are written from whole cents with integer formatting, so the text
//! is exact and an ILP parser reads back the same f64 as `gen::dollars`.

use crate::gen::{Tick, CENTS_PER_DOLLAR};
use std::io::Write;

/// Appends `cents` as `units.cc`.
fn push_price(out: &mut Vec<u8>, cents: i64) {
    let _ = write!(
        out,
        "{}.{:02}",
        cents / CENTS_PER_DOLLAR,
        cents % CENTS_PER_DOLLAR
    );
}

/// Appends one line for `tick`, stamped `time_ns`.
pub fn push_line(out: &mut Vec<u8>, tick: &Tick, sym: &str, time_ns: i64) {
    match *tick {
        Tick::Trade { price, size, .. } => {
            out.extend_from_slice(b"trade,sym=");
            out.extend_from_slice(sym.as_bytes());
            out.extend_from_slice(b" price=");
            push_price(out, price);
            let _ = writeln!(out, ",size={size}i {time_ns}");
        }
        Tick::Quote {
            bid,
            ask,
            bsize,
            asize,
            ..
        } => {
            out.extend_from_slice(b"quote,sym=");
            out.extend_from_slice(sym.as_bytes());
            out.extend_from_slice(b" bid=");
            push_price(out, bid);
            out.extend_from_slice(b",ask=");
            push_price(out, ask);
            let _ = writeln!(out, ",bsize={bsize}i,asize={asize}i {time_ns}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{dollars, MarketSim, SimConfig};
    use tickdb_core::batch::ColumnData;
    use tickdb_core::Schema;
    use tickdb_ilp::{IlpBatcher, IlpOptions, Precision};

    #[test]
    fn lines_parse_under_the_default_schema_to_the_same_values() {
        let schema = Schema::default_schema();
        let mut sim = MarketSim::new(SimConfig {
            seed: 7,
            symbols: 50,
            skew: 1.0,
        })
        .unwrap();
        let ticks: Vec<Tick> = (0..2000).map(|_| sim.next_tick()).collect();
        let mut text = Vec::new();
        for (i, t) in ticks.iter().enumerate() {
            push_line(&mut text, t, sim.name(t.sym()), 1_000 + i as i64);
        }
        let mut b = IlpBatcher::new(
            &schema,
            IlpOptions {
                precision: Precision::Nanos,
                now_ns: 0,
                line_bytes_max: 1 << 16,
            },
        );
        for (i, line) in text.split(|&c| c == b'\n').enumerate() {
            if !line.is_empty() {
                b.push_line(line, i as u64 + 1).unwrap();
            }
        }
        let batches = b.finish();
        let trade = batches.iter().find(|b| b.table == "trade").unwrap();
        let want: Vec<f64> = ticks
            .iter()
            .filter_map(|t| match t {
                Tick::Trade { price, .. } => Some(dollars(*price)),
                _ => None,
            })
            .collect();
        assert_eq!(trade.columns[2].data, ColumnData::F64(want));
        let quote = batches.iter().find(|b| b.table == "quote").unwrap();
        assert_eq!(quote.rows + trade.rows, 2000);
        // A cents value that ends in 0x: the leading zero is kept.
        let mut one = Vec::new();
        push_line(
            &mut one,
            &Tick::Trade {
                sym: 0,
                price: 10_005,
                size: 1,
            },
            "X",
            5,
        );
        assert_eq!(one, b"trade,sym=X price=100.05,size=1i 5\n");
    }
}
