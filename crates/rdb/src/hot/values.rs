//! The RDB's record values, as the Hot Restart store keeps them: not as bytes
//! but as references to the rows in the column store, encoded when the store
//! needs the bytes (when the record is written, and when GC copies it). So the
//! persisted state costs no second copy of the day's data in RAM.
//!
//! ```text
//! append table chunk:    a chunk image (tickdb-core `store::image`): the
//!                        column chunk's rows in Arrow's layout
//! append table symbols:  u32 count, then per name u32 length + UTF-8: the
//!                        table's symbol names with ids first_id .. (the key)
//! keyed table row:       u64 ordinal (LE), then a codec update of one row
//! append table segment:  codec update holding one batch: the rows (stores
//!                        written before chunk images; read, never written)
//! ```
//!
//! The ordinal is the row's place in the order rows arrived, so that a reload
//! puts a keyed table's rows back in that order. Encoding is deterministic and
//! does not depend on how the rows are split across column-store chunks
//! (`from_arrow`), so a value rebuilt after a reload encodes to the bytes that
//! were stored.

use crate::error::RdbError;
use arrow_array::{Array, RecordBatch, StringArray};
use std::sync::Arc;
use tickdb_core::from_arrow::batch_from_arrow;
use tickdb_core::store::{image, ChunkSnapshot};
use tickdb_core::{codec, Batch, Schema, TableDef};
use tickdb_hotrestart::ValueSource;

/// Codec bytes of the rows of `pieces` (consecutive rows of one table) as one batch.
fn encode_rows(table: &str, pieces: &[RecordBatch], out: &mut Vec<u8>) {
    let parts: Result<Vec<Batch>, _> = pieces.iter().map(|p| batch_from_arrow(table, p)).collect();
    match parts.map(|p| Batch::concat(&p)) {
        Ok(Some(b)) => codec::encode(&[b], out),
        Ok(None) => codec::encode(&[], out),
        // The column store only holds types the conversion knows, so this is a
        // bug; an empty update makes the restore report a gap instead of
        // loading wrong rows.
        Err(e) => {
            tracing::error!("hot restart: cannot encode rows of table '{table}': {e}");
            codec::encode(&[], out)
        }
    }
}

/// Rows `first_row ..` of an append table, as they lie in column-store chunks.
pub struct SegmentValue {
    pub table: Arc<str>,
    pub pieces: Vec<RecordBatch>,
}

impl ValueSource for SegmentValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_rows(&self.table, &self.pieces, out);
    }
}

/// An append table's column chunk, from its first row to the rows it held
/// at the cut: encoded as a chunk image when the store needs the bytes.
pub struct ImageValue {
    pub def: Arc<TableDef>,
    pub chunk: ChunkSnapshot,
}

impl ValueSource for ImageValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        // Only a chunk whose columns are not the table's fails, which is a
        // bug; the restore then reports the empty image instead of loading
        // wrong rows.
        if let Err(e) = image::encode(&self.def, &self.chunk, out) {
            tracing::error!(
                "hot restart: cannot encode a chunk of table '{}': {e}",
                self.def.name
            );
            out.truncate(start);
        }
    }
}

/// An append table's symbol names with ids `from..to`, from its dictionary
/// as of the cut.
pub struct SymbolsValue {
    pub names: Arc<StringArray>,
    pub from: usize,
    pub to: usize,
}

impl ValueSource for SymbolsValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&((self.to - self.from) as u32).to_le_bytes());
        for i in self.from..self.to {
            let name = if self.names.is_null(i) {
                ""
            } else {
                self.names.value(i)
            };
            out.extend_from_slice(&(name.len() as u32).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
        }
    }
}

/// The names of a symbols record, in id order.
pub fn decode_symbols<'a>(table: &str, bytes: &'a [u8]) -> Result<Vec<&'a str>, RdbError> {
    let bad = |at: usize, why: &str| {
        RdbError::Restore(format!(
            "table '{table}': a symbols record, byte {at}: {why}"
        ))
    };
    let u32_at = |at: usize| -> Result<usize, RdbError> {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| bad(at, "cut short"))
    };
    let count = u32_at(0)?;
    let mut names = Vec::with_capacity(count.min(bytes.len() / 4));
    let mut at = 4;
    for _ in 0..count {
        let len = u32_at(at)?;
        let text = bytes
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| bad(at, "a name runs past the record"))?;
        names.push(std::str::from_utf8(text).map_err(|_| bad(at + 4, "a name is not UTF-8"))?);
        at += 4 + len;
    }
    if at != bytes.len() {
        return Err(bad(at, "bytes after the last name"));
    }
    Ok(names)
}

/// One row of a keyed table: a row of a column-store chunk, shared by every
/// row value of that chunk.
pub struct RowValue {
    pub table: Arc<str>,
    pub ordinal: u64,
    pub chunk: Arc<RecordBatch>,
    pub row: usize,
}

impl ValueSource for RowValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ordinal.to_le_bytes());
        encode_rows(&self.table, &[self.chunk.slice(self.row, 1)], out);
    }
}

/// The one batch of `table` a record holds, checked against the schema,
/// and whether it was widened: rows persisted before a column was added
/// hold a prefix of the table's columns and read as nulls in the rest (such
/// a record no longer encodes to the table's rows as they are now).
fn one_batch(
    table: &str,
    bytes: &[u8],
    schema: &Schema,
    what: &str,
) -> Result<(Batch, bool), RdbError> {
    let (mut batches, widened) = match codec::decode(bytes, Some(schema)) {
        Ok(b) => (b, false),
        Err(_) => (
            codec::decode_widened(bytes, schema).map_err(|e| {
                RdbError::Restore(format!("table '{table}': {what} does not decode: {e}"))
            })?,
            true,
        ),
    };
    match (batches.pop(), batches.is_empty()) {
        (Some(b), true) if b.table == table && !b.is_clear_marker() => Ok((b, widened)),
        _ => Err(RdbError::Restore(format!(
            "table '{table}': {what} does not hold exactly one batch of the table"
        ))),
    }
}

/// Decodes an append table's segment record (and whether it was widened,
/// see `one_batch`).
pub fn decode_segment(
    table: &str,
    bytes: &[u8],
    schema: &Schema,
) -> Result<(Batch, bool), RdbError> {
    one_batch(table, bytes, schema, "a segment record")
}

/// Decodes a keyed table's row record: (ordinal, the one-row batch, whether
/// it was widened).
pub fn decode_row(
    table: &str,
    bytes: &[u8],
    schema: &Schema,
) -> Result<(u64, Batch, bool), RdbError> {
    let (head, rest) = bytes.split_at_checked(8).ok_or_else(|| {
        RdbError::Restore(format!(
            "table '{table}': a row record of {} bytes",
            bytes.len()
        ))
    })?;
    let mut a = [0u8; 8];
    a.copy_from_slice(head);
    let (b, widened) = one_batch(table, rest, schema, "a row record")?;
    if b.rows != 1 {
        return Err(RdbError::Restore(format!(
            "table '{table}': a row record holds {} rows",
            b.rows
        )));
    }
    Ok((u64::from_le_bytes(a), b, widened))
}

/// Rows `from..to` of a table snapshot, as slices of its chunks.
pub(super) fn row_pieces(
    snap: &tickdb_core::store::TableSnapshot,
    from: usize,
    to: usize,
) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for c in &snap.chunks {
        let n = c.batch.num_rows();
        let (lo, hi) = (from.max(at), to.min(at + n));
        if lo < hi {
            out.push(c.batch.slice(lo - at, hi - lo));
        }
        at += n;
        if at >= to {
            break;
        }
    }
    out
}
