//! The RDB's record values, as the Hot Restart store keeps them: not as bytes
//! but as references to the rows in the column store, encoded when the store
//! needs the bytes (when the record is written, and when GC copies it). So the
//! persisted state costs no second copy of the day's data in RAM.
//!
//! ```text
//! append table segment:  codec update holding one batch: the rows
//! keyed table row:       u64 ordinal (LE), then a codec update of one row
//! ```
//!
//! The ordinal is the row's place in the order rows arrived, so that a reload
//! puts a keyed table's rows back in that order. Encoding is deterministic and
//! does not depend on how the rows are split across column-store chunks
//! (`from_arrow`), so a value rebuilt after a reload encodes to the bytes that
//! were stored.

use crate::error::RdbError;
use arrow_array::RecordBatch;
use std::sync::Arc;
use tickdb_core::from_arrow::batch_from_arrow;
use tickdb_core::{codec, Batch, Schema};
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

impl SegmentValue {
    pub fn rows(&self) -> usize {
        self.pieces.iter().map(|p| p.num_rows()).sum()
    }
}

impl ValueSource for SegmentValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_rows(&self.table, &self.pieces, out);
    }
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
