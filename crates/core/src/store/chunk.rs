//! One chunk of a table: a fixed-capacity set of column regions that the
//! single writer fills row by row, and that is sealed into an immutable
//! Arrow `RecordBatch` when full.
//!
//! Layout of the active chunk, per column (all regions 64-byte aligned):
//! - fixed width (timestamp, i64, f64, i32, symbol ids as u32): `values`
//! - bool: one byte per row in `values` (packed into bits at seal time)
//! - string/bytes: `values` holds i32 offsets (rows + 1), `data` the bytes
//! - nulls: `valid`, one byte per row, allocated at the first null
//!
//! Bytes-per-row flags (not bits) are what make lock-free reading sound: the
//! writer only ever writes bytes at or beyond the published length, so no
//! byte is both written and read at the same time.

use super::snapshot::SymIndex;
use crate::batch::{Batch, ColumnData};
use crate::domain::{Domain, Domains, Region, PAGE_BYTES};
use crate::error::Result;
use crate::schema::{ColumnType, TableDef};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use std::sync::Arc;

pub(crate) struct ColumnRegions {
    pub ty: ColumnType,
    pub domain: Domain,
    pub values: Arc<Region>,
    pub data: Option<Arc<Region>>,
    pub valid: Option<Arc<Region>>,
}

/// The regions of an active chunk, shared with readers.
pub(crate) struct ChunkRegions {
    pub columns: Vec<ColumnRegions>,
    pub capacity: usize,
}

/// What the writer publishes about the active chunk after each apply.
#[derive(Clone)]
pub(crate) struct ActiveView {
    pub regions: Arc<ChunkRegions>,
    pub len: usize,
    pub min_time: i64,
    pub max_time: i64,
}

pub(crate) struct ActiveChunk {
    pub regions: Arc<ChunkRegions>,
    pub len: usize,
    pub data_len: Vec<usize>,
    pub min_time: i64,
    pub max_time: i64,
    /// Per column, the byte offset up to which `prefault` has touched the
    /// `values` region (and the `data` region of a string/bytes column).
    touched: Vec<(usize, usize)>,
}

fn width(ty: ColumnType) -> usize {
    match ty {
        ColumnType::Timestamp | ColumnType::I64 | ColumnType::F64 => 8,
        ColumnType::I32 | ColumnType::Symbol => 4,
        ColumnType::Bool => 1,
        ColumnType::Str | ColumnType::Bytes => 4,
    }
}

fn var_len(c: &ColumnData, from: usize, to: usize) -> usize {
    match c {
        ColumnData::Str { offsets, .. } | ColumnData::Bytes { offsets, .. } => {
            (offsets[to] - offsets[from]) as usize
        }
        _ => 0,
    }
}

/// Writes `bytes` at `offset` into a region.
///
/// # Safety
/// The caller is the region's single writer and `offset..offset+len` is at
/// or beyond every length published to readers, and inside the region.
unsafe fn write_at(region: &Region, offset: usize, bytes: &[u8]) {
    debug_assert!(offset + bytes.len() <= region.len());
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.as_ptr().add(offset), bytes.len());
}

impl ActiveChunk {
    pub fn new(
        def: &TableDef,
        domains: &Domains,
        capacity: usize,
        var_bytes: usize,
    ) -> Result<Self> {
        let mut columns = Vec::with_capacity(def.columns.len());
        for c in &def.columns {
            let is_var = matches!(c.ty, ColumnType::Str | ColumnType::Bytes);
            let values_bytes = width(c.ty) * (capacity + is_var as usize);
            columns.push(ColumnRegions {
                ty: c.ty,
                domain: c.domain,
                values: Arc::new(domains.alloc(c.domain, values_bytes)?),
                data: if is_var {
                    Some(Arc::new(domains.alloc(c.domain, var_bytes)?))
                } else {
                    None
                },
                valid: None,
            });
        }
        Ok(ActiveChunk {
            regions: Arc::new(ChunkRegions { columns, capacity }),
            len: 0,
            data_len: vec![0; def.columns.len()],
            min_time: i64::MAX,
            max_time: i64::MIN,
            touched: vec![(0, 0); def.columns.len()],
        })
    }

    pub fn capacity(&self) -> usize {
        self.regions.capacity
    }

    /// Bytes of string/bytes data this chunk holds for each row (its
    /// smallest data region), or None without such a column.
    pub fn var_bytes(&self) -> Option<usize> {
        self.regions
            .columns
            .iter()
            .filter_map(|c| c.data.as_ref().map(|d| d.len()))
            .min()
    }

    /// Touches the pages of every column's regions from where the writer
    /// will write next up to `ahead_bytes` beyond it, at most `pages_max`
    /// pages in all (`Region::prefault`): the page faults of the next
    /// appends are taken now, after the rows before them were published.
    /// Returns the pages touched. Validity regions (rare, allocated at the
    /// first null) are left alone.
    pub fn prefault(&mut self, ahead_bytes: usize, pages_max: usize) -> usize {
        let mut pages = 0;
        for (ci, c) in self.regions.columns.iter().enumerate() {
            // The first byte not written yet: a string column's offsets
            // have one more entry than rows (once the first row is written).
            let next = match c.ty {
                ColumnType::Str | ColumnType::Bytes if self.len > 0 => (self.len + 1) * 4,
                ty => self.len * width(ty),
            };
            let (values_touched, data_touched) = &mut self.touched[ci];
            pages += prefault_one(
                &c.values,
                next,
                values_touched,
                ahead_bytes,
                pages_max - pages,
            );
            if let Some(d) = &c.data {
                let next = self.data_len[ci];
                pages += prefault_one(d, next, data_touched, ahead_bytes, pages_max - pages);
            }
        }
        pages
    }

    pub fn room(&self) -> usize {
        self.regions.capacity - self.len
    }

    /// The most rows of `batch` starting at `from` (up to `max`) whose
    /// string/bytes data fits in this chunk.
    pub fn rows_that_fit(&self, batch: &Batch, from: usize, max: usize) -> usize {
        let mut n = max;
        for (ci, c) in batch.columns.iter().enumerate() {
            if let Some(data) = &self.regions.columns[ci].data {
                let room = data.len() - self.data_len[ci];
                while n > 0 && var_len(&c.data, from, from + n) > room {
                    n /= 2;
                }
            }
        }
        n
    }

    /// Largest string/bytes payload of rows `from..to`, to size a new chunk.
    pub fn var_bytes_needed(batch: &Batch, from: usize, to: usize) -> usize {
        batch
            .columns
            .iter()
            .map(|c| var_len(&c.data, from, to))
            .max()
            .unwrap_or(0)
    }

    /// Copies rows `from..from+n` of `batch` into the chunk. `sym_ids`
    /// translates each symbol column's batch dictionary to table ids.
    /// `needs_valid` is allocated lazily, so it needs `&mut` regions; the
    /// caller passes `domains` for that.
    pub fn append(
        &mut self,
        batch: &Batch,
        from: usize,
        n: usize,
        sym_ids: &[Vec<u32>],
        time_column: usize,
        domains: &Domains,
    ) -> Result<()> {
        let at = self.len;
        // A validity region must exist before rows with nulls are written; it
        // starts with every earlier row marked valid. Adding it means a new
        // `ChunkRegions` (readers keep the old one, which has no nulls below
        // their length, which stays correct for them).
        let mut new_valid: Vec<(usize, Region)> = Vec::new();
        for (ci, c) in batch.columns.iter().enumerate() {
            if self.regions.columns[ci].valid.is_none() {
                if let Some(v) = &c.valid {
                    if v[from..from + n].iter().any(|x| !x) {
                        let r = domains
                            .alloc(self.regions.columns[ci].domain, self.regions.capacity)?;
                        // SAFETY: fresh region, not yet visible to readers.
                        unsafe { write_at(&r, 0, &vec![1u8; at]) };
                        new_valid.push((ci, r));
                    }
                }
            }
        }
        if !new_valid.is_empty() {
            let mut columns: Vec<ColumnRegions> = self
                .regions
                .columns
                .iter()
                .map(|c| ColumnRegions {
                    ty: c.ty,
                    domain: c.domain,
                    values: c.values.clone(),
                    data: c.data.clone(),
                    valid: c.valid.clone(),
                })
                .collect();
            for (ci, r) in new_valid {
                columns[ci].valid = Some(Arc::new(r));
            }
            self.regions = Arc::new(ChunkRegions {
                columns,
                capacity: self.regions.capacity,
            });
        }

        for (ci, c) in batch.columns.iter().enumerate() {
            let regs = &self.regions.columns[ci];
            let vals = &regs.values;
            // SAFETY (all writes below): single writer; every offset is at or
            // beyond the published row/byte length, and inside the region
            // because `n <= room()` and `rows_that_fit` checked data bytes.
            unsafe {
                match &c.data {
                    ColumnData::Timestamp(v) | ColumnData::I64(v) => {
                        let s = &v[from..from + n];
                        write_at(vals, at * 8, bytes_of(s));
                        if ci == time_column {
                            for x in s {
                                self.min_time = self.min_time.min(*x);
                                self.max_time = self.max_time.max(*x);
                            }
                        }
                    }
                    ColumnData::F64(v) => write_at(vals, at * 8, bytes_of(&v[from..from + n])),
                    ColumnData::I32(v) => write_at(vals, at * 4, bytes_of(&v[from..from + n])),
                    ColumnData::Bool(v) => {
                        let b: Vec<u8> = v[from..from + n].iter().map(|x| *x as u8).collect();
                        write_at(vals, at, &b)
                    }
                    ColumnData::Symbol { keys, .. } => {
                        let ids: Vec<u32> = keys[from..from + n]
                            .iter()
                            .map(|k| sym_ids[ci][*k as usize])
                            .collect();
                        write_at(vals, at * 4, bytes_of(&ids))
                    }
                    ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
                        let base = self.data_len[ci];
                        let start = offsets[from] as usize;
                        let end = offsets[from + n] as usize;
                        let data_region = regs.data.as_ref().expect("var column has data region");
                        write_at(data_region, base, &data[start..end]);
                        let offs: Vec<i32> = offsets[from + 1..=from + n]
                            .iter()
                            .map(|o| (base + (*o as usize - start)) as i32)
                            .collect();
                        if at == 0 {
                            write_at(vals, 0, &0i32.to_le_bytes());
                        }
                        write_at(vals, (at + 1) * 4, bytes_of(&offs));
                        self.data_len[ci] = base + (end - start);
                    }
                }
                if let Some(valid) = &regs.valid {
                    let b: Vec<u8> = match &c.valid {
                        Some(v) => v[from..from + n].iter().map(|x| *x as u8).collect(),
                        None => vec![1u8; n],
                    };
                    write_at(valid, at, &b);
                }
            }
        }
        self.len += n;
        Ok(())
    }

    pub fn view(&self) -> ActiveView {
        ActiveView {
            regions: self.regions.clone(),
            len: self.len,
            min_time: self.min_time,
            max_time: self.max_time,
        }
    }

    /// Freezes the chunk: packs bitmaps, builds the Arrow batch once and the
    /// per-symbol row index.
    pub fn seal(
        &self,
        schema: &SchemaRef,
        dict: Arc<StringArray>,
        sym_column: Option<usize>,
        domains: &Domains,
    ) -> Result<super::snapshot::ChunkSnapshot> {
        let view = self.view();
        let columns: Vec<ArrayRef> = super::snapshot::arrays_for(&view, dict, Some(domains))?;
        let batch = RecordBatch::try_new(schema.clone(), columns)
            .map_err(|e| crate::error::CoreError::Domain(format!("sealing chunk: {e}")))?;
        let sym_index = sym_column
            .map(|c| {
                let col = &view.regions.columns[c];
                let keys = super::snapshot::u32_slice(&col.values, view.len);
                SymIndex::build(keys)
                    .place(domains, col.domain)
                    .map(Arc::new)
            })
            .transpose()?;
        Ok(super::snapshot::ChunkSnapshot {
            batch,
            min_time: view.min_time,
            max_time: view.max_time,
            sym_index,
        })
    }
}

/// `ActiveChunk::prefault` for one region whose first unwritten byte is
/// `next`, touched up to `touched` so far, with `pages_max` pages left.
fn prefault_one(
    region: &Region,
    next: usize,
    touched: &mut usize,
    ahead_bytes: usize,
    pages_max: usize,
) -> usize {
    let from = (*touched).max(next);
    let want = (next + ahead_bytes).min(region.len());
    if from >= want || pages_max == 0 {
        return 0;
    }
    let budget = pages_max.saturating_mul(PAGE_BYTES);
    let to = want.min(from.next_multiple_of(PAGE_BYTES).saturating_add(budget));
    // SAFETY: the caller is the chunk's single writer (`&mut ActiveChunk`),
    // and every byte at or beyond `next` is unwritten and unpublished
    // (`from >= next`).
    let pages = unsafe { region.prefault(from, to) };
    *touched = to;
    pages
}

/// The bytes of a slice of plain numbers, for copying into a region.
fn bytes_of<T: Copy>(s: &[T]) -> &[u8] {
    // SAFETY: T is a plain number type (i64, f64, i32, u32) with no padding;
    // the byte view covers exactly the slice's memory.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}
