//! What readers get: a consistent, immutable view of a table.
//!
//! Sealed chunks are shared as they are. The active chunk is turned into
//! Arrow arrays over the same memory (no copy of the values) cut at the row
//! count the writer had published; only its null/bool flags are packed into
//! fresh bitmaps, by the reader.

use super::chunk::{ActiveView, ColumnRegions};
use crate::domain::{Domains, Region};
use crate::error::{CoreError, Result};
use crate::schema::{ColumnType, TableDef};
use arrow_array::types::UInt32Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array,
};
use arrow_buffer::alloc::Allocation;
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::SchemaRef;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;

/// Row positions of each symbol id within one chunk (kdb+ `g#`), ascending.
#[derive(Debug, Default)]
pub struct SymIndex {
    rows: HashMap<u32, Vec<u32>>,
}

impl SymIndex {
    pub fn build(keys: &[u32]) -> SymIndex {
        let mut rows: HashMap<u32, Vec<u32>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            rows.entry(*k).or_default().push(i as u32);
        }
        SymIndex { rows }
    }

    /// Rows holding symbol `id` (empty if none).
    pub fn rows(&self, id: u32) -> &[u32] {
        self.rows.get(&id).map(|v| v.as_slice()).unwrap_or(&[])
    }

    pub fn symbols(&self) -> usize {
        self.rows.len()
    }
}

#[derive(Clone)]
pub struct ChunkSnapshot {
    pub batch: RecordBatch,
    /// Min and max of the designated timestamp column (i64::MAX/MIN if empty).
    pub min_time: i64,
    pub max_time: i64,
    /// Present for sealed chunks of tables with a symbol column.
    pub sym_index: Option<Arc<SymIndex>>,
}

#[derive(Clone)]
pub struct TableSnapshot {
    pub def: Arc<TableDef>,
    pub schema: SchemaRef,
    pub chunks: Vec<ChunkSnapshot>,
    pub rows: usize,
    /// The table's symbol dictionary as of the snapshot: symbol id → name.
    pub symbols: Arc<StringArray>,
    /// How many times the table had been cleared: rows of different
    /// generations never mix (persistence keys its records by it).
    pub generation: u64,
}

impl TableSnapshot {
    /// The id of a symbol, if the table has seen it.
    pub fn symbol_id(&self, name: &str) -> Option<u32> {
        self.symbols
            .iter()
            .position(|s| s == Some(name))
            .map(|i| i as u32)
    }
}

fn region_buffer(r: &Arc<Region>, offset: usize, len: usize) -> Buffer {
    debug_assert!(offset + len <= r.len());
    // SAFETY: the pointer is inside the region (checked above in debug, and by
    // construction: callers pass lengths the writer published), the region
    // outlives the buffer because the buffer owns an Arc of it, and the bytes
    // in range are never written again (single writer appends beyond them).
    unsafe {
        let ptr = NonNull::new_unchecked(r.as_ptr().add(offset));
        Buffer::from_custom_allocation(ptr, len, r.clone() as Arc<dyn Allocation>)
    }
}

pub(crate) fn u32_slice(r: &Region, len: usize) -> &[u32] {
    // SAFETY: the region is 64-byte aligned and holds at least `len` u32s
    // that the writer published; they are not written again.
    unsafe { std::slice::from_raw_parts(r.as_ptr() as *const u32, len) }
}

fn flag_bytes(r: &Region, len: usize) -> &[u8] {
    // SAFETY: as `u32_slice`, one byte per row.
    unsafe { std::slice::from_raw_parts(r.as_ptr(), len) }
}

/// Packs one-byte-per-row flags into a bitmap: into a region of the column's
/// domain when sealing (so the bitmap is accounted and lives as long as the
/// chunk), or on the heap for a reader's view of the active chunk.
fn pack(flags: &[u8], domains: Option<&Domains>, c: &ColumnRegions) -> Result<BooleanBuffer> {
    let len = flags.len();
    match domains {
        None => Ok(BooleanBuffer::collect_bool(len, |i| flags[i] != 0)),
        Some(d) => {
            let bytes = len.div_ceil(8);
            let region = Arc::new(d.alloc(c.domain, bytes)?);
            let mut packed = vec![0u8; bytes];
            for (i, f) in flags.iter().enumerate() {
                if *f != 0 {
                    packed[i / 8] |= 1 << (i % 8);
                }
            }
            // SAFETY: fresh region, no reader yet, `bytes` fits.
            unsafe { std::ptr::copy_nonoverlapping(packed.as_ptr(), region.as_ptr(), bytes) };
            Ok(BooleanBuffer::new(region_buffer(&region, 0, bytes), 0, len))
        }
    }
}

/// Arrow arrays over an active chunk's regions, cut at `view.len` rows.
pub(crate) fn arrays_for(
    view: &ActiveView,
    dict: Arc<StringArray>,
    seal_into: Option<&Domains>,
) -> Result<Vec<ArrayRef>> {
    let len = view.len;
    let mut out: Vec<ArrayRef> = Vec::with_capacity(view.regions.columns.len());
    for c in &view.regions.columns {
        let nulls = match &c.valid {
            Some(v) => {
                let bits = pack(flag_bytes(v, len), seal_into, c)?;
                let nb = NullBuffer::new(bits);
                if nb.null_count() > 0 {
                    Some(nb)
                } else {
                    None
                }
            }
            None => None,
        };
        let arr: ArrayRef = match c.ty {
            ColumnType::Timestamp => Arc::new(TimestampNanosecondArray::new(
                ScalarBuffer::new(region_buffer(&c.values, 0, len * 8), 0, len),
                nulls,
            )),
            ColumnType::I64 => Arc::new(Int64Array::new(
                ScalarBuffer::new(region_buffer(&c.values, 0, len * 8), 0, len),
                nulls,
            )),
            ColumnType::F64 => Arc::new(Float64Array::new(
                ScalarBuffer::new(region_buffer(&c.values, 0, len * 8), 0, len),
                nulls,
            )),
            ColumnType::I32 => Arc::new(Int32Array::new(
                ScalarBuffer::new(region_buffer(&c.values, 0, len * 4), 0, len),
                nulls,
            )),
            ColumnType::Bool => Arc::new(BooleanArray::new(
                pack(flag_bytes(&c.values, len), seal_into, c)?,
                nulls,
            )),
            ColumnType::Symbol => {
                let keys = UInt32Array::new(
                    ScalarBuffer::new(region_buffer(&c.values, 0, len * 4), 0, len),
                    nulls,
                );
                // SAFETY: every id written was interned in this table's
                // dictionary before it was written, and the dictionary only
                // grows, so each key is < dict.len().
                Arc::new(unsafe {
                    DictionaryArray::<UInt32Type>::new_unchecked(keys, dict.clone())
                })
            }
            ColumnType::Str | ColumnType::Bytes => {
                let offsets: ScalarBuffer<i32> =
                    ScalarBuffer::new(region_buffer(&c.values, 0, (len + 1) * 4), 0, len + 1);
                let end = *offsets.last().unwrap_or(&0) as usize;
                let data = c
                    .data
                    .as_ref()
                    .ok_or_else(|| CoreError::Domain("string column without data".into()))?;
                let values = region_buffer(data, 0, end);
                // SAFETY: offsets start at 0 and never decrease (written so by
                // `append`), end within `data`; strings were UTF-8-checked on
                // ingest (ILP parser or codec decode).
                let offsets = unsafe { OffsetBuffer::new_unchecked(offsets) };
                if c.ty == ColumnType::Str {
                    Arc::new(unsafe { StringArray::new_unchecked(offsets, values, nulls) })
                } else {
                    Arc::new(unsafe { BinaryArray::new_unchecked(offsets, values, nulls) })
                }
            }
        };
        out.push(arr);
    }
    Ok(out)
}

pub(crate) fn active_chunk(
    schema: &SchemaRef,
    view: &ActiveView,
    dict: Arc<StringArray>,
) -> Result<ChunkSnapshot> {
    let arrays = arrays_for(view, dict, None)?;
    let batch = RecordBatch::try_new(schema.clone(), arrays)
        .map_err(|e| CoreError::Domain(format!("snapshot of active chunk: {e}")))?;
    Ok(ChunkSnapshot {
        batch,
        min_time: view.min_time,
        max_time: view.max_time,
        sym_index: None,
    })
}
