//! The checkpoint record: what a durable checkpoint says about the store. It is
//! the store's metadata value `checkpoint` (see docs/hot-restart.md, "RDB
//! integration"), written with `set_meta`, which makes every record before it
//! durable first: so when a reload finds checkpoint S, the store holds every
//! row of every update up to S.
//!
//! ```text
//! u8    version (2; version 1, written before chunk images, lacks `symbols`)
//! u64   applied journal sequence S
//! i64   when the cut was taken (ns since the epoch)
//! str32 the schema (TOML) the rows follow
//! u16   subscribed tables, each str16 (none: all)
//! u16   subscribed symbols, each str16 (none: all)
//! u16   tables, each:
//!   str16 name
//!   u64   generation   (key generation of the table's records)
//!   u64   rows         (append: rows persisted; keyed: rows restored + written)
//!   u64   next_ordinal (keyed: ordinal the next row gets; append: 0)
//!   u64   symbols      (append: symbol names persisted; keyed: 0)
//! ```
//!
//! Little endian; strN is a uN length then UTF-8.

use crate::error::RdbError;

pub const META_NAME: &[u8] = b"checkpoint";
const VERSION: u8 = 2;
/// Checkpoints of stores written before chunk images: no `symbols` field.
const VERSION_SEGMENTS: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableMeta {
    pub name: String,
    pub generation: u64,
    pub rows: u64,
    pub next_ordinal: u64,
    /// Append tables: the symbol names persisted (ids 0..symbols).
    pub symbols: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMeta {
    pub seq: u64,
    pub at_unix_ns: i64,
    pub schema_toml: String,
    pub tables_filter: Vec<String>,
    pub symbols_filter: Vec<String>,
    pub tables: Vec<TableMeta>,
}

fn str16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len().min(u16::MAX as usize) as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..s.len().min(u16::MAX as usize)]);
}

impl CheckpointMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.schema_toml.len());
        out.push(VERSION);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.at_unix_ns.to_le_bytes());
        out.extend_from_slice(&(self.schema_toml.len() as u32).to_le_bytes());
        out.extend_from_slice(self.schema_toml.as_bytes());
        for list in [&self.tables_filter, &self.symbols_filter] {
            out.extend_from_slice(&(list.len() as u16).to_le_bytes());
            for s in list {
                str16(&mut out, s);
            }
        }
        out.extend_from_slice(&(self.tables.len() as u16).to_le_bytes());
        for t in &self.tables {
            str16(&mut out, &t.name);
            out.extend_from_slice(&t.generation.to_le_bytes());
            out.extend_from_slice(&t.rows.to_le_bytes());
            out.extend_from_slice(&t.next_ordinal.to_le_bytes());
            out.extend_from_slice(&t.symbols.to_le_bytes());
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<CheckpointMeta, RdbError> {
        let mut r = Reader { buf, pos: 0 };
        let v = r.u8()?;
        if v != VERSION && v != VERSION_SEGMENTS {
            return Err(r.err(format!("unknown checkpoint record version {v}")));
        }
        let seq = r.u64()?;
        let at_unix_ns = r.u64()? as i64;
        let n = r.u32()? as usize;
        let schema_toml = r.utf8(n)?;
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let n = r.u16()?;
            for _ in 0..n {
                let len = r.u16()? as usize;
                list.push(r.utf8(len)?);
            }
        }
        let [tables_filter, symbols_filter] = lists;
        let n = r.u16()?;
        let mut tables = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let len = r.u16()? as usize;
            let name = r.utf8(len)?;
            tables.push(TableMeta {
                name,
                generation: r.u64()?,
                rows: r.u64()?,
                next_ordinal: r.u64()?,
                symbols: if v == VERSION { r.u64()? } else { 0 },
            });
        }
        if r.pos != buf.len() {
            return Err(r.err(format!("{} trailing bytes", buf.len() - r.pos)));
        }
        Ok(CheckpointMeta {
            seq,
            at_unix_ns,
            schema_toml,
            tables_filter,
            symbols_filter,
            tables,
        })
    }

    pub fn table(&self, name: &str) -> Option<&TableMeta> {
        self.tables.iter().find(|t| t.name == name)
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn err(&self, reason: String) -> RdbError {
        RdbError::Restore(format!("checkpoint record, byte {}: {reason}", self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&[u8], RdbError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err(format!(
                "{n} bytes expected, {} left",
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, RdbError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, RdbError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, RdbError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    fn u64(&mut self) -> Result<u64, RdbError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn utf8(&mut self, n: usize) -> Result<String, RdbError> {
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("text is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let m = CheckpointMeta {
            seq: 42,
            at_unix_ns: 1_700_000_000_000_000_000,
            schema_toml: "[[table]]\nname = \"t\"\n".into(),
            tables_filter: vec!["trade".into()],
            symbols_filter: vec![],
            tables: vec![TableMeta {
                name: "trade".into(),
                generation: 2,
                rows: 100,
                next_ordinal: 0,
                symbols: 7,
            }],
        };
        let enc = m.encode();
        assert_eq!(CheckpointMeta::decode(&enc).unwrap(), m);
        for cut in 0..enc.len() {
            assert!(CheckpointMeta::decode(&enc[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = enc.clone();
        bad[0] = 9;
        assert!(CheckpointMeta::decode(&bad).is_err());
        // A version 1 record (no symbols) still reads.
        let mut v1 = enc[..enc.len() - 8].to_vec();
        v1[0] = 1;
        let old = CheckpointMeta::decode(&v1).unwrap();
        assert_eq!((old.tables[0].rows, old.tables[0].symbols), (100, 0));
    }
}
