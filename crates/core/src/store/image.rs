//! A chunk's rows as one byte image in Arrow's in-memory layout: what Hot
//! Restart persists for an append table, one record per column-store chunk.
//! A restart rebuilds the chunk by checking the image and pointing Arrow
//! buffers at its bytes (DRAM columns) or copying each buffer once into its
//! column's memory domain (fsmem columns), instead of decoding the rows and
//! appending them one update at a time.
//!
//! The layout (little endian; docs/hot-restart.md, "Chunk images"):
//!
//! ```text
//! header, 48 bytes
//!    0  8  magic "TDBCHNK\0"
//!    8  2  version (1)
//!   10  2  columns
//!   12  4  reserved, 0
//!   16  8  rows
//!   24  8  min_time (i64; i64::MAX when there are no rows)
//!   32  8  max_time (i64; i64::MIN when there are no rows)
//!   40  8  reserved, 0
//! one 32-byte descriptor per column
//!    0  1  type tag (ColumnType::tag)
//!    1  1  flags: bit 0 = a validity bitmap follows
//!    2  6  reserved, 0
//!    8  8  values bytes
//!   16  8  data bytes (string and bytes columns; 0 otherwise)
//!   24  8  validity bytes (0 without a bitmap)
//! then the buffers, in column order (values, data, validity), each starting
//! at the next multiple of 64 bytes from the image's first byte; the gaps
//! and the bits of a bitmap past the last row are zero.
//! ```
//!
//! Values per type: timestamps, i64 and f64 8 bytes a row; i32 4; symbols
//! the table's dictionary ids (u32); bools a bitmap (bit i of byte i / 8);
//! strings and bytes `rows + 1` i32 offsets starting at 0, then the payload.
//!
//! Encoding is canonical: the same rows give the same bytes however their
//! arrays were sliced, which is what lets the store swap a reloaded image's
//! bytes for the restored chunk (`ValueSource`) and encode them again.

use super::snapshot::{region_buffer, ChunkSnapshot, SymIndex};
use crate::domain::{Domain, Domains, MemUse, Tracked};
use crate::error::{CoreError, Result};
use crate::schema::{ColumnType, TableDef};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt32Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Float64Array, Int32Array,
    Int64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array,
};
use arrow_buffer::alloc::Allocation;
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::SchemaRef;
use std::ptr::NonNull;
use std::sync::Arc;

pub const IMAGE_MAGIC: [u8; 8] = *b"TDBCHNK\0";
pub const IMAGE_VERSION: u16 = 1;
pub const IMAGE_HEADER_BYTES: usize = 48;
pub const IMAGE_COLUMN_BYTES: usize = 32;
/// Every buffer starts at a multiple of this from the image's first byte:
/// Arrow's preferred alignment. An image in memory aligned to 8 bytes (what
/// an `Arc<[u8]>` gets) therefore gives every buffer the 8-byte alignment
/// Arrow's typed buffers need.
pub const IMAGE_ALIGN_BYTES: usize = 64;
const FLAG_VALIDITY: u8 = 1;

fn width(ty: ColumnType) -> usize {
    match ty {
        ColumnType::Timestamp | ColumnType::I64 | ColumnType::F64 => 8,
        ColumnType::I32 | ColumnType::Symbol | ColumnType::Str | ColumnType::Bytes => 4,
        ColumnType::Bool => 0,
    }
}

fn bad(offset: usize, reason: impl Into<String>) -> CoreError {
    CoreError::CorruptImage {
        offset,
        reason: reason.into(),
    }
}

/// The bytes of a bitmap, repacked to start at bit 0, with the bits past
/// its length zero.
fn bitmap_bytes(bits: &BooleanBuffer) -> Vec<u8> {
    let len = bits.len();
    let mut out = vec![0u8; len.div_ceil(8)];
    if bits.offset().is_multiple_of(8) {
        let src = &bits.inner().as_slice()[bits.offset() / 8..];
        let n = out.len();
        out.copy_from_slice(&src[..n]);
        if !len.is_multiple_of(8) {
            if let Some(last) = out.last_mut() {
                *last &= (1u8 << (len % 8)) - 1;
            }
        }
    } else {
        for (i, b) in bits.iter().enumerate() {
            if b {
                out[i / 8] |= 1 << (i % 8);
            }
        }
    }
    out
}

/// One column's buffers as the image holds them.
struct ColumnBytes<'a> {
    ty: ColumnType,
    values: std::borrow::Cow<'a, [u8]>,
    data: &'a [u8],
    validity: Option<Vec<u8>>,
}

fn column_bytes<'a>(ty: ColumnType, a: &'a ArrayRef) -> Result<ColumnBytes<'a>> {
    let wrong = || {
        CoreError::Domain(format!(
            "chunk image: a {} column holds {}",
            ty.name(),
            a.data_type()
        ))
    };
    let validity = a
        .nulls()
        .filter(|n| n.null_count() > 0)
        .map(|n| bitmap_bytes(n.inner()));
    let scalar = |b: &'a [u8]| std::borrow::Cow::Borrowed(b);
    let (values, data) = match ty {
        ColumnType::Timestamp => (
            scalar(
                a.as_primitive_opt::<TimestampNanosecondType>()
                    .ok_or_else(wrong)?
                    .values()
                    .inner()
                    .as_slice(),
            ),
            &[][..],
        ),
        ColumnType::I64 => (
            scalar(
                a.as_primitive_opt::<Int64Type>()
                    .ok_or_else(wrong)?
                    .values()
                    .inner()
                    .as_slice(),
            ),
            &[][..],
        ),
        ColumnType::F64 => (
            scalar(
                a.as_primitive_opt::<Float64Type>()
                    .ok_or_else(wrong)?
                    .values()
                    .inner()
                    .as_slice(),
            ),
            &[][..],
        ),
        ColumnType::I32 => (
            scalar(
                a.as_primitive_opt::<Int32Type>()
                    .ok_or_else(wrong)?
                    .values()
                    .inner()
                    .as_slice(),
            ),
            &[][..],
        ),
        ColumnType::Symbol => {
            let d = a.as_dictionary_opt::<UInt32Type>().ok_or_else(wrong)?;
            (scalar(d.keys().values().inner().as_slice()), &[][..])
        }
        ColumnType::Bool => (
            std::borrow::Cow::Owned(bitmap_bytes(a.as_boolean_opt().ok_or_else(wrong)?.values())),
            &[][..],
        ),
        ColumnType::Str | ColumnType::Bytes => {
            let (offsets, payload) = match ty {
                ColumnType::Str => {
                    let s = a.as_string_opt::<i32>().ok_or_else(wrong)?;
                    (s.value_offsets(), s.values().as_slice())
                }
                _ => {
                    let s = a.as_binary_opt::<i32>().ok_or_else(wrong)?;
                    (s.value_offsets(), s.values().as_slice())
                }
            };
            let (first, last) = (offsets[0] as usize, offsets[offsets.len() - 1] as usize);
            let values = if first == 0 {
                scalar(bytes_of_i32(offsets))
            } else {
                let rebased: Vec<i32> = offsets.iter().map(|o| o - offsets[0]).collect();
                std::borrow::Cow::Owned(bytes_of_i32(&rebased).to_vec())
            };
            (values, &payload[first..last])
        }
    };
    Ok(ColumnBytes {
        ty,
        values,
        data,
        validity,
    })
}

fn bytes_of_i32(v: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding; the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn pad_to_align(out: &mut Vec<u8>, start: usize) {
    let at = (out.len() - start).next_multiple_of(IMAGE_ALIGN_BYTES);
    out.resize(start + at, 0);
}

/// Appends the image of `chunk`'s rows (all of them) to `out`. `def` gives
/// the columns' types; the chunk holds exactly `def`'s columns.
pub fn encode(def: &TableDef, chunk: &ChunkSnapshot, out: &mut Vec<u8>) -> Result<()> {
    let batch = &chunk.batch;
    if batch.num_columns() != def.columns.len() {
        return Err(CoreError::Domain(format!(
            "chunk image of table '{}': the chunk has {} columns, the table {}",
            def.name,
            batch.num_columns(),
            def.columns.len()
        )));
    }
    let cols: Vec<ColumnBytes> = def
        .columns
        .iter()
        .zip(batch.columns())
        .map(|(c, a)| column_bytes(c.ty, a))
        .collect::<Result<_>>()?;
    let start = out.len();
    let rows = batch.num_rows() as u64;
    out.extend_from_slice(&IMAGE_MAGIC);
    out.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
    out.extend_from_slice(&(cols.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&rows.to_le_bytes());
    let (min, max) = if rows == 0 {
        (i64::MAX, i64::MIN)
    } else {
        (chunk.min_time, chunk.max_time)
    };
    out.extend_from_slice(&min.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    for c in &cols {
        out.push(c.ty.tag());
        out.push(if c.validity.is_some() {
            FLAG_VALIDITY
        } else {
            0
        });
        out.extend_from_slice(&[0u8; 6]);
        out.extend_from_slice(&(c.values.len() as u64).to_le_bytes());
        out.extend_from_slice(&(c.data.len() as u64).to_le_bytes());
        let v = c.validity.as_ref().map(|v| v.len()).unwrap_or(0);
        out.extend_from_slice(&(v as u64).to_le_bytes());
    }
    for c in &cols {
        for buf in [&c.values[..], c.data, c.validity.as_deref().unwrap_or(&[])] {
            if !buf.is_empty() {
                pad_to_align(out, start);
                out.extend_from_slice(buf);
            }
        }
    }
    pad_to_align(out, start);
    Ok(())
}

/// What `ChunkRestorer::decode` built.
pub struct RestoredChunk {
    pub chunk: ChunkSnapshot,
    /// Rows taken from the image (fewer than it holds when asked for fewer).
    pub rows: usize,
    /// The image held more rows than were taken.
    pub truncated: bool,
    /// The image held fewer columns than the table (written before columns
    /// were added): the rest read as nulls, so the chunk no longer encodes
    /// to the image's bytes.
    pub widened: bool,
    /// The columns were copied out of the image (a table with fsmem
    /// columns): the chunk does not share the image's bytes.
    pub copied: bool,
}

/// Holds an image's bytes, counted as DRAM column memory of its table, for
/// as long as an array points into them.
struct ImageBytes<B> {
    _bytes: Arc<B>,
    _counted: Tracked,
}

impl<B> std::panic::RefUnwindSafe for ImageBytes<B> {}

/// Rebuilds sealed chunks of one table from images (`Store::chunk_restorer`).
/// Shareable between threads: each image is decoded on its own.
pub struct ChunkRestorer {
    pub(crate) def: Arc<TableDef>,
    pub(crate) schema: SchemaRef,
    pub(crate) dict: Arc<StringArray>,
    pub(crate) domains: Domains,
}

struct Desc {
    ty: ColumnType,
    validity: bool,
    values: usize,
    data: usize,
    valid: usize,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl ChunkRestorer {
    /// The table the chunks belong to.
    pub fn def(&self) -> &Arc<TableDef> {
        &self.def
    }

    /// Decodes `image`, taking its first `take` rows at most. Every length,
    /// offset and symbol id is checked against the image and the table's
    /// dictionary (restored first) before any array is built; the bytes'
    /// integrity is the store's CRC's job. A DRAM table's arrays point into
    /// the image's bytes, which `image` owns and must never move or change
    /// (a shared heap buffer, a mapped file); it is kept for as long as an
    /// array lives.
    pub fn decode<B>(&self, image: B, take: usize) -> Result<RestoredChunk>
    where
        B: AsRef<[u8]> + Send + Sync + 'static,
    {
        let image = Arc::new(image);
        let b: &[u8] = (*image).as_ref();
        if b.len() < IMAGE_HEADER_BYTES {
            return Err(bad(0, format!("{} bytes, shorter than a header", b.len())));
        }
        if b[..8] != IMAGE_MAGIC {
            return Err(bad(0, "not a chunk image (bad magic)"));
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != IMAGE_VERSION {
            return Err(bad(8, format!("unknown chunk image version {version}")));
        }
        let ncols = u16::from_le_bytes([b[10], b[11]]) as usize;
        let rows = usize::try_from(u64_at(b, 16)).map_err(|_| bad(16, "row count"))?;
        let (min_time, max_time) = (u64_at(b, 24) as i64, u64_at(b, 32) as i64);
        let def = &self.def;
        if ncols == 0 || ncols > def.columns.len() {
            return Err(bad(
                10,
                format!(
                    "{ncols} columns, table '{}' has {}",
                    def.name,
                    def.columns.len()
                ),
            ));
        }
        if rows > super::CHUNK_ROWS_MAX * 2 || rows > b.len() {
            return Err(bad(16, format!("{rows} rows")));
        }
        let descs_end = IMAGE_HEADER_BYTES + ncols * IMAGE_COLUMN_BYTES;
        if b.len() < descs_end {
            return Err(bad(IMAGE_HEADER_BYTES, "column descriptors cut short"));
        }
        let mut descs = Vec::with_capacity(ncols);
        for i in 0..ncols {
            let at = IMAGE_HEADER_BYTES + i * IMAGE_COLUMN_BYTES;
            let ty = ColumnType::from_tag(b[at])
                .ok_or_else(|| bad(at, format!("unknown type tag {}", b[at])))?;
            if ty != def.columns[i].ty {
                return Err(bad(
                    at,
                    format!(
                        "column '{}' is {} in the table, {} in the image",
                        def.columns[i].name,
                        def.columns[i].ty.name(),
                        ty.name()
                    ),
                ));
            }
            let d = Desc {
                ty,
                validity: b[at + 1] & FLAG_VALIDITY != 0,
                values: u64_at(b, at + 8) as usize,
                data: u64_at(b, at + 16) as usize,
                valid: u64_at(b, at + 24) as usize,
            };
            let want_values = match ty {
                ColumnType::Bool => rows.div_ceil(8),
                ColumnType::Str | ColumnType::Bytes => (rows + 1) * 4,
                t => rows * width(t),
            };
            let want_valid = if d.validity { rows.div_ceil(8) } else { 0 };
            if d.values != want_values
                || d.valid != want_valid
                || (d.data != 0 && !matches!(ty, ColumnType::Str | ColumnType::Bytes))
            {
                return Err(bad(
                    at,
                    format!(
                        "column '{}': buffer lengths {}/{}/{} do not fit {rows} rows",
                        def.columns[i].name, d.values, d.data, d.valid
                    ),
                ));
            }
            descs.push(d);
        }
        // Where each buffer lies.
        let mut at = descs_end.next_multiple_of(IMAGE_ALIGN_BYTES);
        let mut place = |len: usize| -> Result<(usize, usize)> {
            if len == 0 {
                return Ok((at, 0));
            }
            let from = at;
            let end = from
                .checked_add(len)
                .filter(|e| *e <= b.len())
                .ok_or_else(|| bad(from, "a buffer runs past the image's end"))?;
            at = end.next_multiple_of(IMAGE_ALIGN_BYTES);
            Ok((from, len))
        };
        let mut spans = Vec::with_capacity(ncols);
        for d in &descs {
            spans.push((place(d.values)?, place(d.data)?, place(d.valid)?));
        }
        if at != b.len() {
            return Err(bad(
                at.min(b.len()),
                format!("{} bytes, the buffers end at {at}", b.len()),
            ));
        }

        let take = take.min(rows);
        // The arrays point into the image when the whole table is in DRAM
        // (and the image is aligned as an `Arc<[u8]>` is). Otherwise every
        // buffer is copied into a region of its column's domain, so that
        // the image itself can be freed: an fsmem table must not keep a
        // DRAM copy of its rows.
        let shared = (b.as_ptr() as usize).is_multiple_of(8)
            && def.columns.iter().all(|c| c.domain == Domain::Dram);
        let owner: Arc<dyn Allocation> = Arc::new(ImageBytes {
            _bytes: image.clone(),
            _counted: Tracked::new(
                &self.domains,
                MemUse::Column(Domain::Dram),
                if shared { b.len() as u64 } else { 0 },
            ),
        });
        let base = b.as_ptr();
        let buffer = |col: usize, (from, len): (usize, usize)| -> Result<Buffer> {
            if shared {
                // SAFETY: `from..from + len` lies inside the image (checked by
                // `place`), whose bytes `owner` keeps alive and unchanged.
                return Ok(unsafe {
                    Buffer::from_custom_allocation(
                        NonNull::new_unchecked(base.add(from) as *mut u8),
                        len,
                        owner.clone(),
                    )
                });
            }
            let region = Arc::new(self.domains.alloc(def.columns[col].domain, len.max(1))?);
            // SAFETY: a fresh region of at least `len` bytes, no reader yet.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr().add(from), region.as_ptr(), len) };
            Ok(region_buffer(&region, 0, len))
        };

        let mut columns: Vec<ArrayRef> = Vec::with_capacity(def.columns.len());
        for (i, (d, (values, data, valid))) in descs.iter().zip(spans).enumerate() {
            let name = &def.columns[i].name;
            let nulls = if d.validity {
                Some(NullBuffer::new(BooleanBuffer::new(
                    buffer(i, valid)?,
                    0,
                    rows,
                )))
            } else {
                None
            };
            let column_err =
                |e: arrow_schema::ArrowError| bad(values.0, format!("column '{name}': {e}"));
            let arr: ArrayRef = match d.ty {
                ColumnType::Timestamp => Arc::new(
                    TimestampNanosecondArray::try_new(
                        ScalarBuffer::new(buffer(i, values)?, 0, rows),
                        nulls,
                    )
                    .map_err(column_err)?,
                ),
                ColumnType::I64 => Arc::new(
                    Int64Array::try_new(ScalarBuffer::new(buffer(i, values)?, 0, rows), nulls)
                        .map_err(column_err)?,
                ),
                ColumnType::F64 => Arc::new(
                    Float64Array::try_new(ScalarBuffer::new(buffer(i, values)?, 0, rows), nulls)
                        .map_err(column_err)?,
                ),
                ColumnType::I32 => Arc::new(
                    Int32Array::try_new(ScalarBuffer::new(buffer(i, values)?, 0, rows), nulls)
                        .map_err(column_err)?,
                ),
                ColumnType::Bool => Arc::new(BooleanArray::new(
                    BooleanBuffer::new(buffer(i, values)?, 0, rows),
                    nulls,
                )),
                ColumnType::Symbol => {
                    let keys =
                        UInt32Array::try_new(ScalarBuffer::new(buffer(i, values)?, 0, rows), nulls)
                            .map_err(column_err)?;
                    let dict = self.dict.clone() as ArrayRef;
                    // Every id, null rows' included, is within the dictionary
                    // in an image a checkpoint wrote: one pass over the ids
                    // proves it. Otherwise the non-null ids are checked one
                    // by one, and a bad one is refused.
                    let all_in = keys
                        .values()
                        .iter()
                        .max()
                        .is_none_or(|m| (*m as usize) < dict.len());
                    Arc::new(if all_in {
                        // SAFETY: every key is < the dictionary's length.
                        unsafe { DictionaryArray::<UInt32Type>::new_unchecked(keys, dict) }
                    } else {
                        DictionaryArray::<UInt32Type>::try_new(keys, dict).map_err(column_err)?
                    })
                }
                ColumnType::Str | ColumnType::Bytes => {
                    let offsets: ScalarBuffer<i32> =
                        ScalarBuffer::new(buffer(i, values)?, 0, rows + 1);
                    if offsets[0] != 0 || offsets[rows] as usize != d.data {
                        return Err(bad(
                            values.0,
                            format!(
                                "column '{name}': offsets run {}..{}, the payload is {} bytes",
                                offsets[0], offsets[rows], d.data
                            ),
                        ));
                    }
                    if let Some(w) = offsets.windows(2).position(|w| w[1] < w[0]) {
                        return Err(bad(
                            values.0 + 4 * (w + 1),
                            format!(
                                "column '{name}': the offset of row {} goes backwards",
                                w + 1
                            ),
                        ));
                    }
                    // SAFETY: checked just above: non-empty, starting at 0,
                    // never decreasing.
                    let offsets = unsafe { OffsetBuffer::new_unchecked(offsets) };
                    let payload = buffer(i, data)?;
                    if d.ty == ColumnType::Str {
                        // Checks the payload is UTF-8 at every offset.
                        Arc::new(StringArray::try_new(offsets, payload, nulls).map_err(column_err)?)
                    } else {
                        Arc::new(BinaryArray::try_new(offsets, payload, nulls).map_err(column_err)?)
                    }
                }
            };
            columns.push(arr);
        }
        let widened = ncols < def.columns.len();
        for col in &def.columns[ncols..] {
            let field = self.schema.field(columns.len());
            columns.push(super::table::null_column(
                col.ty,
                rows,
                field.data_type(),
                &self.dict,
            ));
        }
        let mut batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| bad(0, format!("table '{}': {e}", def.name)))?;
        let (mut min_time, mut max_time) = (min_time, max_time);
        if take < rows {
            batch = batch.slice(0, take);
            (min_time, max_time) = time_range(&batch, def.time_column);
        }
        let sym_index = match def.sym_column {
            Some(c) if take > 0 => {
                let keys = batch
                    .column(c)
                    .as_dictionary::<UInt32Type>()
                    .keys()
                    .values();
                let index = SymIndex::build(keys).place(&self.domains, def.columns[c].domain)?;
                Some(Arc::new(index))
            }
            _ => None,
        };
        Ok(RestoredChunk {
            chunk: ChunkSnapshot {
                batch,
                min_time,
                max_time,
                sym_index,
            },
            rows: take,
            truncated: take < rows,
            widened,
            copied: !shared,
        })
    }
}

/// Min and max of a batch's time column (i64::MAX/MIN when empty or null).
fn time_range(batch: &RecordBatch, time_column: usize) -> (i64, i64) {
    let mut range = (i64::MAX, i64::MIN);
    if let Some(t) = batch
        .column(time_column)
        .as_primitive_opt::<TimestampNanosecondType>()
    {
        for v in t.iter().flatten() {
            range = (range.0.min(v), range.1.max(v));
        }
    }
    range
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, Value};
    use crate::domain::Domains;
    use crate::schema::Schema;
    use crate::store::Store;

    const SCHEMA: &str = r#"
[[table]]
name = "t"
column = [
  { name = "time", type = "timestamp" },
  { name = "sym", type = "symbol" },
  { name = "px", type = "f64" },
  { name = "n", type = "i64" },
  { name = "k", type = "i32" },
  { name = "b", type = "bool" },
  { name = "s", type = "string" },
  { name = "raw", type = "bytes" },
]
"#;

    /// A store holding `rows` rows of table `t` (nulls in every column but
    /// time, strings of varying length), and its chunks.
    fn filled(
        schema: &str,
        fsmem: Option<&std::path::Path>,
        rows: usize,
    ) -> (Store, Vec<ChunkSnapshot>) {
        let schema = Arc::new(Schema::parse(schema, "test").unwrap());
        let store = Store::new(schema.clone(), Domains::new(fsmem).unwrap()).unwrap();
        let def = schema.table("t").unwrap();
        let mut b = BatchBuilder::new(def);
        for r in 0..rows {
            b.set(0, Value::Timestamp(1_000 + r as i64 * 7));
            if r % 5 != 1 {
                b.set(1, Value::Symbol(["A", "BB", "", "CCC"][r % 4]));
            }
            if r % 7 != 2 {
                b.set(2, Value::F64(r as f64 * 0.5));
            }
            if r % 3 != 0 {
                b.set(3, Value::I64(-(r as i64)));
            }
            b.set(4, Value::I32(r as i32));
            if r % 11 != 3 {
                b.set(5, Value::Bool(r % 3 == 0));
            }
            if r % 4 != 0 {
                b.set(6, Value::Str(&"xé".repeat(r % 6)));
            }
            if def.columns.len() > 7 {
                b.set(7, Value::Bytes(&[r as u8; 3][..r % 3]));
            }
            b.end_row();
        }
        store.apply(&b.finish()).unwrap();
        let chunks = store.raw_snapshot("t").unwrap().chunks;
        (store, chunks)
    }

    fn image_of(store: &Store, chunk: &ChunkSnapshot) -> Arc<[u8]> {
        let def = store.schema().table("t").unwrap().clone();
        let mut out = Vec::new();
        encode(&def, chunk, &mut out).unwrap();
        Arc::from(out)
    }

    /// A fresh store with `t`'s dictionary restored from `from`'s.
    fn restoring(from: &Store, schema: &str, fsmem: Option<&std::path::Path>) -> Store {
        let schema = Arc::new(Schema::parse(schema, "test").unwrap());
        let store = Store::new(schema, Domains::new(fsmem).unwrap()).unwrap();
        let names = from.raw_snapshot("t").unwrap().symbols;
        store
            .restore_symbols("t", 0, names.iter().map(|n| n.unwrap_or("")))
            .unwrap();
        store
    }

    #[test]
    fn images_restore_the_same_rows_and_encode_to_the_same_bytes() {
        let fsmem = tempfile::tempdir().unwrap();
        let fsmem_schema = SCHEMA.replace("name = \"t\"\n", "name = \"t\"\ndomain = \"fsmem\"\n");
        for (schema, dir) in [
            (SCHEMA.to_string(), None),
            (fsmem_schema, Some(fsmem.path())),
        ] {
            // More rows than one chunk holds: sealed chunks and an active one.
            let (store, chunks) = filled(&schema, dir, 3000);
            assert!(chunks.len() > 1);
            let back = restoring(&store, &schema, dir);
            let restorer = back.chunk_restorer("t").unwrap();
            let mut restored = Vec::new();
            for c in &chunks {
                let image = image_of(&store, c);
                let r = restorer.decode(image.clone(), usize::MAX).unwrap();
                assert_eq!(r.chunk.batch, c.batch, "fsmem {}", dir.is_some());
                assert_eq!(
                    (r.chunk.min_time, r.chunk.max_time),
                    (c.min_time, c.max_time)
                );
                assert_eq!(
                    (r.truncated, r.widened, r.copied),
                    (false, false, dir.is_some())
                );
                assert_eq!(&image_of(&back, &r.chunk)[..], &image[..], "canonical");
                restored.push(r.chunk);
            }
            back.adopt_chunks("t", restored).unwrap();
            let (a, b) = (store.snapshot("t").unwrap(), back.snapshot("t").unwrap());
            assert_eq!(a.rows, b.rows);
            // The symbol index is rebuilt: the same rows per symbol.
            for (x, y) in a.chunks.iter().zip(&b.chunks) {
                if let (Some(i), Some(j)) = (&x.sym_index, &y.sym_index) {
                    assert_eq!(
                        i.groups().collect::<Vec<_>>(),
                        j.groups().collect::<Vec<_>>()
                    );
                }
            }
            if dir.is_some() {
                assert!(back.memory().fsmem > 0);
            } else {
                assert!(back.memory().breakdown.columns > 0);
            }
        }
    }

    #[test]
    fn a_slice_encodes_canonically_and_take_cuts_rows() {
        let (store, chunks) = filled(SCHEMA, None, 200);
        let def = store.schema().table("t").unwrap().clone();
        let c = &chunks[0];
        // Rows 3.. of the chunk as their own chunk: offsets and bitmaps that
        // do not start at 0 are repacked.
        let sliced = ChunkSnapshot {
            batch: c.batch.slice(3, 150),
            min_time: 1_000 + 3 * 7,
            max_time: 1_000 + 152 * 7,
            sym_index: None,
        };
        let mut image = Vec::new();
        encode(&def, &sliced, &mut image).unwrap();
        let image: Arc<[u8]> = Arc::from(image);
        let back = restoring(&store, SCHEMA, None);
        let r = back
            .chunk_restorer("t")
            .unwrap()
            .decode(image.clone(), usize::MAX)
            .unwrap();
        assert_eq!(r.chunk.batch, sliced.batch);
        let r = back
            .chunk_restorer("t")
            .unwrap()
            .decode(image.clone(), 10)
            .unwrap();
        assert_eq!((r.rows, r.truncated), (10, true));
        assert_eq!(r.chunk.batch, sliced.batch.slice(0, 10));
        assert_eq!(
            (r.chunk.min_time, r.chunk.max_time),
            (1_021, 1_000 + 12 * 7)
        );
    }

    #[test]
    fn an_image_with_fewer_columns_reads_nulls_in_the_rest() {
        let narrow = SCHEMA.replace("  { name = \"raw\", type = \"bytes\" },\n", "");
        let (store, chunks) = filled(&narrow, None, 50);
        let mut image = Vec::new();
        encode(store.schema().table("t").unwrap(), &chunks[0], &mut image).unwrap();
        let back = restoring(&store, SCHEMA, None);
        let r = back
            .chunk_restorer("t")
            .unwrap()
            .decode(Arc::<[u8]>::from(image), usize::MAX)
            .unwrap();
        assert!(r.widened);
        assert_eq!(r.chunk.batch.num_columns(), 8);
        assert_eq!(r.chunk.batch.column(7).null_count(), 50);
    }

    #[test]
    fn damaged_images_are_refused_with_the_place() {
        let (store, chunks) = filled(SCHEMA, None, 100);
        let image = image_of(&store, &chunks[0]);
        let back = restoring(&store, SCHEMA, None);
        let restorer = back.chunk_restorer("t").unwrap();
        let refuse = |bytes: Vec<u8>| -> String {
            match restorer.decode(Arc::<[u8]>::from(bytes), usize::MAX) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("a damaged image decoded"),
            }
        };
        // Every cut is refused (never a panic or an out-of-bounds read).
        for cut in 0..image.len() {
            refuse(image[..cut].to_vec());
        }
        let mut b = image.to_vec();
        b[0] = b'X';
        assert!(refuse(b).contains("magic"));
        let mut b = image.to_vec();
        b[8] = 9;
        assert!(refuse(b).contains("version"));
        let mut b = image.to_vec();
        b[IMAGE_HEADER_BYTES] = ColumnType::I64.tag();
        assert!(refuse(b).contains("'time' is timestamp in the table, i64 in the image"));
        // A symbol id past the dictionary.
        let sym_values = {
            let mut at = (IMAGE_HEADER_BYTES + 8 * IMAGE_COLUMN_BYTES).next_multiple_of(64);
            at += (100 * 8usize).next_multiple_of(64); // time
            at
        };
        let mut b = image.to_vec();
        b[sym_values..sym_values + 4].copy_from_slice(&1000u32.to_le_bytes());
        let e = refuse(b);
        assert!(e.contains("column 'sym'"), "{e}");
        // A string offset that goes backwards.
        let mut b = image.to_vec();
        let s_at = find_offsets(&image, 6);
        b[s_at + 8..s_at + 12].copy_from_slice(&0u32.to_le_bytes());
        b[s_at + 4..s_at + 8].copy_from_slice(&5u32.to_le_bytes());
        let e = refuse(b);
        assert!(e.contains("column 's'"), "{e}");
    }

    /// Where column `col`'s values buffer starts in an image.
    fn find_offsets(image: &[u8], col: usize) -> usize {
        let ncols = u16::from_le_bytes([image[10], image[11]]) as usize;
        let mut at = (IMAGE_HEADER_BYTES + ncols * IMAGE_COLUMN_BYTES).next_multiple_of(64);
        for c in 0..ncols {
            let d = IMAGE_HEADER_BYTES + c * IMAGE_COLUMN_BYTES;
            for k in [8, 16, 24] {
                let len = u64_at(image, d + k) as usize;
                if c == col && k == 8 {
                    return at;
                }
                if len > 0 {
                    at = (at + len).next_multiple_of(64);
                }
            }
        }
        unreachable!()
    }
}
