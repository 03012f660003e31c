//! The byte encoding of a `Batch`: the payload of a journal record and of a
//! tp → rdb update message. Little-endian throughout; documented in
//! `docs/journal.md` ("Batch payload"). Decoding checks every length against
//! the bytes present and never panics on bad input.
//!
//! An update is one or more batches that are journaled, published and
//! applied together (one ILP HTTP request is one update, so it is never
//! half-applied). A batch with 0 rows and 0 columns is a clear marker: applying
//! it empties the table (`Batch::clear_marker`). A batch of the reserved table
//! `.u.end` with one row of one i32 column (no validity bitmap) is an
//! end-of-day marker: the day it ends, in days since 1970-01-01
//! (`Batch::end_of_day`).
//!
//! ```text
//! u8   codec version (1)
//! u16  number of batches, then for each batch:
//! u16  table name length, then the name (UTF-8)
//! u32  rows
//! u16  columns
//! per column:
//!   u8   type tag (schema::ColumnType::tag)
//!   u8   1 if a validity bitmap follows, else 0
//!   [ceil(rows/8) bytes: validity bitmap, bit i of byte i/8 = row i valid]
//!   data by type:
//!     timestamp, i64, f64: rows × 8 bytes
//!     i32: rows × 4 bytes
//!     bool: rows × 1 byte (0 or 1)
//!     symbol: u32 dictionary entries, each u16 length + UTF-8; then rows × u32 keys
//!     string, bytes: (rows + 1) × u32 offsets (first 0, non-decreasing),
//!                    then offsets[rows] bytes of data
//! ```

use crate::batch::{Batch, Column, ColumnData};
use crate::error::{CoreError, Result};
use crate::schema::{ColumnType, Schema};

pub const CODEC_VERSION: u8 = 1;
/// Most rows in one encoded batch; bounds what a decoder will allocate.
pub const BATCH_ROWS_MAX: usize = 16 * 1024 * 1024;
/// Longest symbol accepted, in bytes.
pub const SYMBOL_BYTES_MAX: usize = u16::MAX as usize;

/// Encodes an update: one or more batches applied together.
pub fn encode(batches: &[Batch], out: &mut Vec<u8>) {
    out.push(CODEC_VERSION);
    out.extend_from_slice(&(batches.len() as u16).to_le_bytes());
    for b in batches {
        encode_batch(b, out);
    }
}

/// Batches in one update at most; bounds the decoder.
pub const UPDATE_BATCHES_MAX: usize = 4096;

fn encode_batch(batch: &Batch, out: &mut Vec<u8>) {
    out.extend_from_slice(&(batch.table.len() as u16).to_le_bytes());
    out.extend_from_slice(batch.table.as_bytes());
    out.extend_from_slice(&(batch.rows as u32).to_le_bytes());
    out.extend_from_slice(&(batch.columns.len() as u16).to_le_bytes());
    for c in &batch.columns {
        out.push(c.data.ty().tag());
        match &c.valid {
            Some(v) => {
                out.push(1);
                let start = out.len();
                out.resize(start + batch.rows.div_ceil(8), 0);
                for (i, ok) in v.iter().enumerate() {
                    if *ok {
                        out[start + i / 8] |= 1 << (i % 8);
                    }
                }
            }
            None => out.push(0),
        }
        match &c.data {
            ColumnData::Timestamp(v) | ColumnData::I64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            ColumnData::F64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            ColumnData::I32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            ColumnData::Bool(v) => v.iter().for_each(|x| out.push(*x as u8)),
            ColumnData::Symbol { dict, keys } => {
                out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
                for s in dict {
                    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
                keys.iter()
                    .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
            }
            ColumnData::Str { offsets, data } | ColumnData::Bytes { offsets, data } => {
                offsets
                    .iter()
                    .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
                out.extend_from_slice(data);
            }
        }
    }
}

pub fn encode_to_vec(batches: &[Batch]) -> Vec<u8> {
    let mut v = Vec::with_capacity(batches.iter().map(|b| b.approx_bytes() + 64).sum());
    encode(batches, &mut v);
    v
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, reason: impl Into<String>) -> CoreError {
        CoreError::Corrupt {
            offset: self.pos,
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(self.err(format!(
                "needs {n} more bytes, {} left",
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn fixed<const N: usize>(&mut self, rows: usize) -> Result<Vec<[u8; N]>> {
        let bytes = self.take(
            rows.checked_mul(N)
                .ok_or_else(|| self.err("size overflow"))?,
        )?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                a
            })
            .collect())
    }

    fn utf8(&mut self, n: usize) -> Result<String> {
        let at = self.pos;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| CoreError::Corrupt {
            offset: at,
            reason: "invalid UTF-8".into(),
        })
    }
}

/// Decodes an update. With `schema`, each table must exist and its columns
/// must match the definition in count and type.
pub fn decode(buf: &[u8], schema: Option<&Schema>) -> Result<Vec<Batch>> {
    decode_with(buf, schema, false)
}

/// Decodes an update under `schema`, which may be newer than the one it was
/// written under: a batch may hold a prefix of its table's columns (it was
/// written before `ALTER TABLE ... ADD COLUMN`, which only ever adds columns
/// at the end) and gets nulls in the rest. What an rdb replaying a journal
/// under the tp's newest schema uses; everything else is checked as
/// `decode` checks it.
pub fn decode_widened(buf: &[u8], schema: &Schema) -> Result<Vec<Batch>> {
    decode_with(buf, Some(schema), true)
}

fn decode_with(buf: &[u8], schema: Option<&Schema>, widen: bool) -> Result<Vec<Batch>> {
    let mut r = Reader { buf, pos: 0 };
    let version = r.u8()?;
    if version != CODEC_VERSION {
        return Err(r.err(format!("unknown batch codec version {version}")));
    }
    let n = r.u16()? as usize;
    if n > UPDATE_BATCHES_MAX {
        return Err(r.err(format!(
            "{n} batches exceeds the bound {UPDATE_BATCHES_MAX}"
        )));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(decode_batch(&mut r, schema, widen)?);
    }
    if r.pos != buf.len() {
        return Err(r.err(format!("{} trailing bytes", buf.len() - r.pos)));
    }
    Ok(out)
}

/// An end-of-day marker: exactly one row of one i32 column, no validity.
fn decode_end_of_day(r: &mut Reader<'_>, rows: usize, ncols: usize) -> Result<Batch> {
    if rows != 1 || ncols != 1 {
        return Err(r.err(format!(
            "end-of-day marker has {rows} rows and {ncols} columns, not 1 and 1"
        )));
    }
    let tag = r.u8()?;
    if tag != ColumnType::I32.tag() {
        return Err(r.err(format!(
            "end-of-day marker's date has type tag {tag}, not i32"
        )));
    }
    if r.u8()? != 0 {
        return Err(r.err("end-of-day marker's date has a validity bitmap"));
    }
    let date = i32::from_le_bytes(r.fixed::<4>(1)?[0]);
    Ok(Batch::end_of_day(date))
}

/// A schema-change marker: exactly one row of two string columns, no
/// validity bitmaps, both UTF-8 (the new schema's TOML, the change in words).
fn decode_schema_change(r: &mut Reader<'_>, rows: usize, ncols: usize) -> Result<Batch> {
    if rows != 1 || ncols != 2 {
        return Err(r.err(format!(
            "schema-change marker has {rows} rows and {ncols} columns, not 1 and 2"
        )));
    }
    let mut texts = Vec::with_capacity(2);
    for _ in 0..2 {
        let tag = r.u8()?;
        if tag != ColumnType::Str.tag() {
            return Err(r.err(format!(
                "schema-change marker has a column of type tag {tag}, not string"
            )));
        }
        if r.u8()? != 0 {
            return Err(r.err("schema-change marker has a validity bitmap"));
        }
        let first = u32::from_le_bytes(r.fixed::<4>(1)?[0]);
        let end = u32::from_le_bytes(r.fixed::<4>(1)?[0]);
        if first != 0 {
            return Err(r.err("schema-change marker's offsets do not start at 0"));
        }
        texts.push(r.utf8(end as usize)?);
    }
    Ok(Batch::schema_change(&texts[0], &texts[1]))
}

fn decode_batch(r: &mut Reader<'_>, schema: Option<&Schema>, widen: bool) -> Result<Batch> {
    let name_len = r.u16()? as usize;
    let table = r.utf8(name_len)?;
    let rows = r.u32()? as usize;
    if rows > BATCH_ROWS_MAX {
        return Err(r.err(format!("{rows} rows exceeds the bound {BATCH_ROWS_MAX}")));
    }
    let ncols = r.u16()? as usize;
    if table == crate::batch::END_OF_DAY_TABLE {
        return decode_end_of_day(r, rows, ncols);
    }
    if table == crate::batch::SCHEMA_CHANGE_TABLE {
        return decode_schema_change(r, rows, ncols);
    }
    let def = match schema {
        Some(s) => {
            let def = s
                .table(&table)
                .ok_or_else(|| CoreError::UnknownTable(table.clone()))?;
            // Widening takes any non-empty prefix of the columns. No rows
            // and no columns: a clear marker (Batch::clear_marker).
            let fits = def.columns.len() == ncols
                || (widen && ncols >= 1 && ncols < def.columns.len())
                || (rows == 0 && ncols == 0);
            if !fits {
                return Err(r.err(format!(
                    "table '{table}' has {} columns, batch has {ncols}",
                    def.columns.len()
                )));
            }
            Some(def)
        }
        None => None,
    };
    let mut columns = Vec::with_capacity(ncols);
    for ci in 0..ncols {
        let tag = r.u8()?;
        let ty =
            ColumnType::from_tag(tag).ok_or_else(|| r.err(format!("unknown type tag {tag}")))?;
        if let Some(def) = def {
            if def.columns[ci].ty != ty {
                return Err(r.err(format!(
                    "table '{table}' column '{}' is {}, batch has {}",
                    def.columns[ci].name,
                    def.columns[ci].ty.name(),
                    ty.name()
                )));
            }
        }
        let valid = match r.u8()? {
            0 => None,
            1 => {
                let bits = r.take(rows.div_ceil(8))?;
                Some(
                    (0..rows)
                        .map(|i| bits[i / 8] & (1 << (i % 8)) != 0)
                        .collect(),
                )
            }
            x => return Err(r.err(format!("bad validity flag {x}"))),
        };
        let data = match ty {
            ColumnType::Timestamp => ColumnData::Timestamp(
                r.fixed::<8>(rows)?
                    .into_iter()
                    .map(i64::from_le_bytes)
                    .collect(),
            ),
            ColumnType::I64 => ColumnData::I64(
                r.fixed::<8>(rows)?
                    .into_iter()
                    .map(i64::from_le_bytes)
                    .collect(),
            ),
            ColumnType::F64 => ColumnData::F64(
                r.fixed::<8>(rows)?
                    .into_iter()
                    .map(f64::from_le_bytes)
                    .collect(),
            ),
            ColumnType::I32 => ColumnData::I32(
                r.fixed::<4>(rows)?
                    .into_iter()
                    .map(i32::from_le_bytes)
                    .collect(),
            ),
            ColumnType::Bool => {
                let b = r.take(rows)?;
                ColumnData::Bool(b.iter().map(|x| *x != 0).collect())
            }
            ColumnType::Symbol => {
                let n = r.u32()? as usize;
                if n > rows.max(1) {
                    return Err(r.err(format!("symbol dictionary of {n} for {rows} rows")));
                }
                let mut dict = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = r.u16()? as usize;
                    dict.push(r.utf8(len)?);
                }
                let keys: Vec<u32> = r
                    .fixed::<4>(rows)?
                    .into_iter()
                    .map(u32::from_le_bytes)
                    .collect();
                if let Some(bad) = keys.iter().find(|k| **k as usize >= n) {
                    return Err(r.err(format!("symbol key {bad} outside dictionary of {n}")));
                }
                ColumnData::Symbol { dict, keys }
            }
            ColumnType::Str | ColumnType::Bytes => {
                let offsets: Vec<u32> = r
                    .fixed::<4>(rows + 1)?
                    .into_iter()
                    .map(u32::from_le_bytes)
                    .collect();
                if offsets[0] != 0 || offsets.windows(2).any(|w| w[0] > w[1]) {
                    return Err(r.err("string offsets not monotonic from 0"));
                }
                let n = offsets[rows] as usize;
                let at = r.pos;
                let data = r.take(n)?.to_vec();
                if ty == ColumnType::Str {
                    for w in offsets.windows(2) {
                        if std::str::from_utf8(&data[w[0] as usize..w[1] as usize]).is_err() {
                            return Err(CoreError::Corrupt {
                                offset: at + w[0] as usize,
                                reason: "invalid UTF-8 in string column".into(),
                            });
                        }
                    }
                    ColumnData::Str { offsets, data }
                } else {
                    ColumnData::Bytes { offsets, data }
                }
            }
        };
        columns.push(Column { data, valid });
    }
    let batch = Batch {
        table,
        rows,
        columns,
    };
    match def {
        Some(def) if widen && batch.columns.len() < def.columns.len() => {
            batch.widen(def).map_err(|reason| CoreError::Corrupt {
                offset: r.pos,
                reason,
            })
        }
        _ => Ok(batch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, Value};
    use proptest::prelude::*;

    fn sample() -> Batch {
        let s = Schema::parse(
            r#"[[table]]
            name = "all"
            column = [
              { name = "time", type = "timestamp" }, { name = "sym", type = "symbol" },
              { name = "f", type = "f64" }, { name = "l", type = "i64" }, { name = "i", type = "i32" },
              { name = "b", type = "bool" }, { name = "s", type = "string" }, { name = "y", type = "bytes" },
            ]"#,
            "t",
        )
        .unwrap();
        let mut b = BatchBuilder::new(s.table("all").unwrap());
        for i in 0..10 {
            b.set(0, Value::Timestamp(i));
            b.set(1, Value::Symbol(if i % 2 == 0 { "AAPL" } else { "MSFT" }));
            if i % 3 != 0 {
                b.set(2, Value::F64(i as f64 / 3.0));
            }
            b.set(3, Value::I64(-i));
            b.set(4, Value::I32(i as i32));
            b.set(5, Value::Bool(i % 2 == 0));
            b.set(6, Value::Str("héllo"));
            b.set(7, Value::Bytes(&[0, 1, 2]));
            b.end_row();
        }
        b.finish()
    }

    #[test]
    fn round_trips_every_type() {
        let b = sample();
        let enc = encode_to_vec(&[b.clone(), b.clone()]);
        assert_eq!(decode(&enc, None).unwrap(), vec![b.clone(), b]);
    }

    #[test]
    fn end_of_day_markers_round_trip_byte_for_byte_as_documented() {
        let schema = Schema::default_schema();
        let enc = encode_to_vec(&[Batch::end_of_day(20_777)]);
        // docs/journal.md, "End-of-day marker".
        let mut want = vec![1u8, 1, 0, 6, 0];
        want.extend_from_slice(b".u.end");
        want.extend_from_slice(&[1, 0, 0, 0, 1, 0, 5, 0, 0x29, 0x51, 0, 0]);
        assert_eq!(enc, want);
        let got = decode(&enc, Some(&schema)).unwrap();
        assert_eq!(got[0].end_of_day_date(), Some(20_777));
        assert!(!got[0].is_clear_marker());
        assert_eq!(decode(&enc, None).unwrap(), got);
        // A marker of any other shape is refused, with or without a schema.
        for (rows, cols) in [(2u32, 1u16), (1, 2), (0, 0)] {
            let mut bad = vec![1u8, 1, 0, 6, 0];
            bad.extend_from_slice(b".u.end");
            bad.extend_from_slice(&rows.to_le_bytes());
            bad.extend_from_slice(&cols.to_le_bytes());
            let e = decode(&bad, None).unwrap_err().to_string();
            assert!(e.contains("end-of-day marker"), "{e}");
        }
    }

    #[test]
    fn schema_change_markers_round_trip_byte_for_byte_as_documented() {
        let enc = encode_to_vec(&[Batch::schema_change("T", "W!")]);
        // docs/journal.md, "Schema-change marker".
        let mut want = vec![1u8, 1, 0, 9, 0];
        want.extend_from_slice(b".u.schema");
        want.extend_from_slice(&[1, 0, 0, 0, 2, 0]);
        want.extend_from_slice(&[7, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'T']);
        want.extend_from_slice(&[7, 0, 0, 0, 0, 0, 2, 0, 0, 0, b'W', b'!']);
        assert_eq!(enc, want);
        // Under any schema: it carries its own.
        let got = decode(&enc, Some(&Schema::default_schema())).unwrap();
        assert_eq!(got[0].schema_change_text(), Some(("T", "W!")));
        assert!(got[0].is_marker() && !got[0].is_clear_marker());
        // Any other shape is refused.
        let mut bad = want.clone();
        bad[5 + 9 + 4] = 1; // one column
        assert!(decode(&bad, None).is_err());
    }

    #[test]
    fn widening_fills_the_columns_added_since_with_nulls() {
        let old = Schema::default_schema();
        let mut new = old.clone();
        let trade = new.tables.iter_mut().find(|t| t.name == "trade").unwrap();
        for (name, ty) in [("venue", ColumnType::Symbol), ("note", ColumnType::Str)] {
            trade.columns.push(crate::schema::ColumnDef {
                name: name.into(),
                ty,
                domain: crate::domain::Domain::Dram,
            });
        }
        let mut b = BatchBuilder::new(old.table("trade").unwrap());
        for i in 0..3 {
            b.set(0, Value::Timestamp(i));
            b.set(1, Value::Symbol("A"));
            b.set(2, Value::F64(1.0));
            b.set(3, Value::I64(i));
            b.end_row();
        }
        let enc = encode_to_vec(&[b.finish()]);
        // Strictly, the record does not fit the new schema...
        assert!(decode(&enc, Some(&new)).is_err());
        // ...widened, it has nulls in the new columns.
        let w = decode_widened(&enc, &new).unwrap();
        assert_eq!(w[0].columns.len(), 6);
        assert!((0..3).all(|i| !w[0].columns[4].is_valid(i) && !w[0].columns[5].is_valid(i)));
        // and decodes strictly once re-encoded.
        assert_eq!(decode(&encode_to_vec(&w), Some(&new)).unwrap(), w);
        // A batch with more columns than the table, or another type in a
        // column, is still refused.
        assert!(decode_widened(&encode_to_vec(&w), &old).is_err());
    }

    #[test]
    fn clear_markers_round_trip_and_need_a_known_table() {
        let schema = Schema::default_schema();
        let enc = encode_to_vec(&[Batch::clear_marker("trade")]);
        let got = decode(&enc, Some(&schema)).unwrap();
        assert_eq!(got, vec![Batch::clear_marker("trade")]);
        assert!(got[0].is_clear_marker());
        let enc = encode_to_vec(&[Batch::clear_marker("nosuch")]);
        assert!(matches!(
            decode(&enc, Some(&schema)),
            Err(CoreError::UnknownTable(_))
        ));
    }

    #[test]
    fn concat_joins_rows_and_merges_dictionaries() {
        let b = sample();
        let rows_a: Vec<usize> = (0..4).collect();
        let rows_b: Vec<usize> = (4..10).collect();
        let (x, y) = (b.select(&rows_a), b.select(&rows_b));
        let joined = Batch::concat(&[x, y]).unwrap();
        assert_eq!(joined.rows, 10);
        for i in 0..10 {
            assert_eq!(
                joined.columns[1].data.symbol(i),
                b.columns[1].data.symbol(i)
            );
        }
        assert_eq!(joined.columns[2].valid, b.columns[2].valid);
        assert_eq!(joined.columns[6], b.columns[6]);
        assert_eq!(joined.columns[0], b.columns[0]);
        assert!(Batch::concat::<Batch>(&[]).is_none());
        assert!(Batch::concat(&[b.clone(), Batch::clear_marker("all")]).is_none());
    }

    #[test]
    fn checks_against_schema() {
        let enc = encode_to_vec(&[sample()]);
        let e = decode(&enc, Some(&Schema::default_schema())).unwrap_err();
        assert!(matches!(e, CoreError::UnknownTable(_)));
    }

    proptest! {
        // Any truncation or byte flip must give an error or a batch, never a panic.
        #[test]
        fn never_panics_on_damage(cut in 0usize..400, flip in 0usize..400, bit in 0u8..8) {
            let mut enc = encode_to_vec(&[sample()]);
            if flip < enc.len() { enc[flip] ^= 1 << bit; }
            enc.truncate(cut.min(enc.len()));
            let _ = decode(&enc, None);
        }
    }
}
