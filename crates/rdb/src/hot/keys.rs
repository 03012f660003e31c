//! The key layout of the RDB's records in the Hot Restart store.
//!
//! ```text
//! "t/" table 0x00 generation:u64be 'a' first_row:u64be   an append table's column
//!                                                        chunk starting at first_row,
//!                                                        as a chunk image
//! "t/" table 0x00 generation:u64be 'd' first_id:u64be    an append table's symbol
//!                                                        names from id first_id on
//! "t/" table 0x00 generation:u64be 'k' key bytes          a keyed table's row
//! "t/" table 0x00 generation:u64be 'c' first_row:u64be   an append table's rows
//!                                                        first_row .. first_row+n as
//!                                                        a codec update (stores written
//!                                                        before chunk images; read only)
//! ```
//!
//! Table names never contain 0x00, so `"t/" table 0x00` is a prefix of that
//! table's records only; with the generation added it is the prefix of one
//! generation, which a clear of the table removes with one prefix tombstone.
//! Big-endian numbers make key order the numeric order, so a table's segments
//! come back sorted by row.

use arrow_array::RecordBatch;
use tickdb_core::store::SymbolBytes;

/// The first bytes of every table record: nothing else in the store starts so.
pub const TABLES_PREFIX: &[u8] = b"t/";
const KIND_SEGMENT: u8 = b'c';
const KIND_IMAGE: u8 = b'a';
const KIND_SYMBOLS: u8 = b'd';
const KIND_ROW: u8 = b'k';

/// `"t/" table 0x00`: every generation of a table.
pub fn table_prefix(table: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(TABLES_PREFIX.len() + table.len() + 1);
    k.extend_from_slice(TABLES_PREFIX);
    k.extend_from_slice(table.as_bytes());
    k.push(0);
    k
}

/// `"t/" table 0x00 generation`: one generation of a table.
pub fn generation_prefix(table: &str, generation: u64) -> Vec<u8> {
    let mut k = table_prefix(table);
    k.extend_from_slice(&generation.to_be_bytes());
    k
}

/// The key of an append table's segment starting at `first_row` (stores
/// written before chunk images hold these; the tests build such stores).
#[cfg(test)]
pub fn segment_key(table: &str, generation: u64, first_row: u64) -> Vec<u8> {
    let mut k = generation_prefix(table, generation);
    k.push(KIND_SEGMENT);
    k.extend_from_slice(&first_row.to_be_bytes());
    k
}

/// The key of an append table's column chunk starting at `first_row`.
pub fn image_key(table: &str, generation: u64, first_row: u64) -> Vec<u8> {
    let mut k = generation_prefix(table, generation);
    k.push(KIND_IMAGE);
    k.extend_from_slice(&first_row.to_be_bytes());
    k
}

/// The key of an append table's symbol names from id `first_id` on.
pub fn symbols_key(table: &str, generation: u64, first_id: u64) -> Vec<u8> {
    let mut k = generation_prefix(table, generation);
    k.push(KIND_SYMBOLS);
    k.extend_from_slice(&first_id.to_be_bytes());
    k
}

/// The key of a keyed table's row, from its key columns' bytes (`row_key`).
pub fn row_key(table: &str, generation: u64, key: &[u8]) -> Vec<u8> {
    let mut k = generation_prefix(table, generation);
    k.push(KIND_ROW);
    k.extend_from_slice(key);
    k
}

/// What one record key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey<'a> {
    Segment {
        table: &'a str,
        generation: u64,
        first_row: u64,
    },
    Image {
        table: &'a str,
        generation: u64,
        first_row: u64,
    },
    Symbols {
        table: &'a str,
        generation: u64,
        first_id: u64,
    },
    Row {
        table: &'a str,
        generation: u64,
        key: &'a [u8],
    },
}

impl RecordKey<'_> {
    pub fn table(&self) -> &str {
        match self {
            RecordKey::Segment { table, .. }
            | RecordKey::Image { table, .. }
            | RecordKey::Symbols { table, .. }
            | RecordKey::Row { table, .. } => table,
        }
    }

    pub fn generation(&self) -> u64 {
        match self {
            RecordKey::Segment { generation, .. }
            | RecordKey::Image { generation, .. }
            | RecordKey::Symbols { generation, .. }
            | RecordKey::Row { generation, .. } => *generation,
        }
    }
}

/// Parses a record key; `None` if it is not one of ours.
pub fn parse(key: &[u8]) -> Option<RecordKey<'_>> {
    let rest = key.strip_prefix(TABLES_PREFIX)?;
    let nul = rest.iter().position(|b| *b == 0)?;
    let table = std::str::from_utf8(&rest[..nul]).ok()?;
    let rest = &rest[nul + 1..];
    if rest.len() < 9 {
        return None;
    }
    let generation = u64::from_be_bytes(rest[..8].try_into().ok()?);
    let body = &rest[9..];
    match rest[8] {
        KIND_SEGMENT if body.len() == 8 => Some(RecordKey::Segment {
            table,
            generation,
            first_row: u64::from_be_bytes(body.try_into().ok()?),
        }),
        KIND_IMAGE if body.len() == 8 => Some(RecordKey::Image {
            table,
            generation,
            first_row: u64::from_be_bytes(body.try_into().ok()?),
        }),
        KIND_SYMBOLS if body.len() == 8 => Some(RecordKey::Symbols {
            table,
            generation,
            first_id: u64::from_be_bytes(body.try_into().ok()?),
        }),
        KIND_ROW => Some(RecordKey::Row {
            table,
            generation,
            key: body,
        }),
        _ => None,
    }
}

/// The bytes of row `row`'s key columns, symbols by their text so that the
/// bytes do not depend on a process's symbol ids (the layout is
/// tickdb-core's `row_key_bytes`). Two rows have the same bytes exactly when
/// the keyed table treats them as the same key.
pub fn row_key_bytes(batch: &RecordBatch, key_columns: &[usize], row: usize, out: &mut Vec<u8>) {
    tickdb_core::store::row_key_bytes(batch, key_columns, row, SymbolBytes::Text, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_back_and_sort_by_row() {
        let a = segment_key("trade", 3, 10);
        let b = segment_key("trade", 3, 65_536);
        assert!(a < b);
        assert_eq!(
            parse(&b),
            Some(RecordKey::Segment {
                table: "trade",
                generation: 3,
                first_row: 65_536
            })
        );
        let r = row_key("daily", 0, b"\x01abc");
        assert_eq!(
            parse(&r),
            Some(RecordKey::Row {
                table: "daily",
                generation: 0,
                key: b"\x01abc"
            })
        );
        assert!(r.starts_with(&generation_prefix("daily", 0)));
        assert!(!r.starts_with(&table_prefix("dail")));
        assert_eq!(
            parse(&image_key("quote", 1, 131_072)),
            Some(RecordKey::Image {
                table: "quote",
                generation: 1,
                first_row: 131_072
            })
        );
        assert_eq!(
            parse(&symbols_key("quote", 1, 2000)),
            Some(RecordKey::Symbols {
                table: "quote",
                generation: 1,
                first_id: 2000
            })
        );
        assert!(image_key("quote", 1, 1) < image_key("quote", 1, 65_536));
        assert_eq!(parse(b"t/x"), None);
        assert_eq!(parse(b"other"), None);
    }
}
