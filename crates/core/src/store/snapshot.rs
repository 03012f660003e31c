//! What readers get: a consistent, immutable view of a table.
//!
//! Sealed chunks are shared as they are. The active chunk is turned into
//! Arrow arrays over the same memory (no copy of the values) cut at the row
//! count the writer had published; only its null/bool flags are packed into
//! fresh bitmaps, by the reader.

use super::chunk::{ActiveView, ColumnRegions};
use crate::domain::{Domain, Domains, MemUse, Region};
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
use std::ptr::NonNull;
use std::sync::Arc;

/// Row positions of each symbol id within one chunk (kdb+ `g#`), ascending.
/// Stored flat: the chunk's rows grouped by symbol, with each present id's
/// range. It is built at every seal (every `CHUNK_ROWS_MAX` rows, on the
/// apply path), so it is a counting sort over the chunk's ids: two linear
/// passes, not a map insert per row.
///
/// One array of u32 words: `ids` (the ids present, ascending), `starts`
/// (`rows[starts[i]..starts[i + 1]]` are the rows of `ids[i]`), `rows`. The
/// store moves it into a region of the symbol column's domain when it seals
/// the chunk (`place`): an index is part of its chunk, so a table placed in
/// fsmem keeps its index there too, and the region counts its bytes.
pub struct SymIndex {
    n_ids: usize,
    n_rows: usize,
    words: Words,
}

enum Words {
    Heap(Vec<u32>),
    Region(Arc<Region>),
}

impl std::fmt::Debug for SymIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymIndex")
            .field("symbols", &self.n_ids)
            .field("rows", &self.n_rows)
            .field("in_region", &matches!(self.words, Words::Region(_)))
            .finish()
    }
}

impl Default for SymIndex {
    fn default() -> SymIndex {
        SymIndex {
            n_ids: 0,
            n_rows: 0,
            words: Words::Heap(Vec::new()),
        }
    }
}

/// Ids up to this many times the chunk's rows (or `CHUNK_ROWS_MAX`) are
/// counted in a dense array; a chunk of a table with far more symbols sorts
/// (row, id) pairs instead, so the temporary array stays small.
const DENSE_IDS_PER_ROW: usize = 4;

impl SymIndex {
    pub fn build(keys: &[u32]) -> SymIndex {
        let Some(&max) = keys.iter().max() else {
            return SymIndex::default();
        };
        let dense_max = keys.len().max(super::CHUNK_ROWS_MAX) * DENSE_IDS_PER_ROW;
        if (max as usize) >= dense_max {
            return Self::build_sparse(keys);
        }
        // next[id]: where id's next row goes, once the counts are summed.
        let mut next = vec![0u32; max as usize + 1];
        for &k in keys {
            next[k as usize] += 1;
        }
        let n_ids = next.iter().filter(|n| **n > 0).count();
        let mut words = vec![0u32; 2 * n_ids + 1 + keys.len()];
        let (ids, rest) = words.split_at_mut(n_ids);
        let (starts, rows) = rest.split_at_mut(n_ids + 1);
        let mut at = 0u32;
        let mut i = 0;
        for (id, n) in next.iter_mut().enumerate() {
            if *n > 0 {
                ids[i] = id as u32;
                starts[i] = at;
                i += 1;
                let count = *n;
                *n = at;
                at += count;
            }
        }
        starts[n_ids] = at;
        for (row, &k) in keys.iter().enumerate() {
            let slot = &mut next[k as usize];
            rows[*slot as usize] = row as u32;
            *slot += 1;
        }
        SymIndex {
            n_ids,
            n_rows: keys.len(),
            words: Words::Heap(words),
        }
    }

    fn build_sparse(keys: &[u32]) -> SymIndex {
        let mut pairs: Vec<(u32, u32)> = keys
            .iter()
            .enumerate()
            .map(|(row, &k)| (k, row as u32))
            .collect();
        pairs.sort_unstable();
        let n_ids = 1 + pairs.windows(2).filter(|w| w[0].0 != w[1].0).count();
        let mut words = vec![0u32; 2 * n_ids + 1 + keys.len()];
        let (ids, rest) = words.split_at_mut(n_ids);
        let (starts, rows) = rest.split_at_mut(n_ids + 1);
        let mut i = 0;
        for (at, &(k, row)) in pairs.iter().enumerate() {
            if at == 0 || pairs[at - 1].0 != k {
                ids[i] = k;
                starts[i] = at as u32;
                i += 1;
            }
            rows[at] = row;
        }
        starts[n_ids] = pairs.len() as u32;
        SymIndex {
            n_ids,
            n_rows: keys.len(),
            words: Words::Heap(words),
        }
    }

    /// Moves the index into a region of `domain` (counted there as index
    /// memory; fsmem indexes count as fsmem).
    pub fn place(self, domains: &Domains, domain: Domain) -> Result<SymIndex> {
        let words = self.words();
        if words.is_empty() {
            return Ok(self);
        }
        let region = domains.alloc_for(MemUse::Index(domain), words.len() * 4)?;
        // SAFETY: a fresh region of at least words.len() * 4 bytes, no reader yet.
        unsafe {
            std::ptr::copy_nonoverlapping(
                words.as_ptr() as *const u8,
                region.as_ptr(),
                words.len() * 4,
            )
        };
        Ok(SymIndex {
            n_ids: self.n_ids,
            n_rows: self.n_rows,
            words: Words::Region(Arc::new(region)),
        })
    }

    fn words(&self) -> &[u32] {
        let n = if self.n_rows == 0 {
            0
        } else {
            2 * self.n_ids + 1 + self.n_rows
        };
        match &self.words {
            Words::Heap(v) => &v[..n],
            Words::Region(r) => u32_slice(r, n),
        }
    }

    /// Rows holding symbol `id` (empty if none).
    pub fn rows(&self, id: u32) -> &[u32] {
        let w = self.words();
        let n = self.n_ids;
        // The ids are distinct and ascending, so `id` is at `id` or
        // before; a chunk holding every symbol up to it has it right
        // there, found without a search (a search's probes are cache
        // misses when a query visits hundreds of chunks).
        let upto = (id as usize).saturating_add(1).min(n);
        let found = match upto.checked_sub(1) {
            Some(last) if w[last] == id => Ok(last),
            _ => w[..upto].binary_search(&id),
        };
        match found {
            Ok(i) => {
                let (from, to) = (w[n + i] as usize, w[n + i + 1] as usize);
                &w[2 * n + 1 + from..2 * n + 1 + to]
            }
            Err(_) => &[],
        }
    }

    pub fn symbols(&self) -> usize {
        self.n_ids
    }

    /// Each symbol id present, ascending, with its rows: a walk over the
    /// whole index without a search per id.
    pub fn groups(&self) -> impl Iterator<Item = (u32, &[u32])> {
        let w = self.words();
        let n = if w.is_empty() { 0 } else { self.n_ids };
        (0..n).map(move |i| {
            let (from, to) = (w[n + i] as usize, w[n + i + 1] as usize);
            (w[i], &w[2 * n + 1 + from..2 * n + 1 + to])
        })
    }
}

#[cfg(test)]
mod sym_index_tests {
    use super::SymIndex;

    /// Both layouts agree with the obvious definition, on dense ids and on
    /// ids far beyond the chunk's size.
    #[test]
    fn rows_per_symbol_in_order() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m) as u32
        };
        for spread in [7u64, 3000, 1 << 30] {
            let keys: Vec<u32> = (0..5000).map(|_| next(spread)).collect();
            let ix = SymIndex::build(&keys);
            let domains = crate::domain::Domains::new(None).unwrap();
            let placed = SymIndex::build(&keys)
                .place(&domains, crate::domain::Domain::Dram)
                .unwrap();
            let mut distinct: Vec<u32> = keys.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(ix.symbols(), distinct.len());
            let ids: Vec<u32> = ix.groups().map(|(id, _)| id).collect();
            assert_eq!(ids, distinct, "groups in id order, spread {spread}");
            for id in distinct.iter().copied().chain([u32::MAX]) {
                let want: Vec<u32> = (0..keys.len() as u32)
                    .filter(|&r| keys[r as usize] == id)
                    .collect();
                assert_eq!(ix.rows(id), want.as_slice(), "spread {spread} id {id}");
                if let Some((_, rows)) = ix.groups().find(|(g, _)| *g == id) {
                    assert_eq!(rows, want.as_slice(), "groups, id {id}");
                }
                assert_eq!(placed.rows(id), want.as_slice(), "placed, id {id}");
            }
        }
        assert_eq!(SymIndex::build(&[]).rows(0), &[] as &[u32]);
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

pub(crate) fn region_buffer(r: &Arc<Region>, offset: usize, len: usize) -> Buffer {
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
