//! A table's symbol dictionary (kdb+ `sym`): each distinct symbol gets a
//! dense u32 id once, forever, so symbol columns store 4-byte ids and chunks
//! and the symbol index agree on ids across the whole table.
//!
//! The names live once, in two append-only regions (UTF-8 bytes and i32
//! offsets, Arrow's string layout), and the hash table maps a name to its id
//! holding only the id: a lookup compares against the name in the regions.
//! Readers get the names as an Arrow `StringArray` built over the regions
//! without a copy, cut at the count published when they looked, with the
//! same discipline as an active chunk (the single writer only writes beyond
//! every published length). So handing out the dictionary is O(1), and every
//! sealed chunk shares it rather than holding a copy of it as it was at the
//! seal (which, with millions of distinct symbols, cost a copy of the whole
//! dictionary per chunk and per apply).
//!
//! When a region is full the writer moves to one twice the size (a copy, so
//! O(1) amortized per symbol); the old one lives on as long as arrays of an
//! older dictionary hold it, and with doubling those add up to less than the
//! current one. Regions are counted as `MemUse::Symbols`, and the hash
//! table's allocation by a `Tracked` guard, so the store's memory figures
//! include all of it.

use super::snapshot::region_buffer;
use crate::domain::{Domains, MemUse, Region, Tracked};
use crate::error::{CoreError, Result};
use arrow_array::StringArray;
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;
use std::sync::Arc;

/// Names the first regions of a dictionary hold before they grow.
const SYMBOLS_INITIAL: usize = 256;
/// Name bytes the first data region holds before it grows.
const SYMBOL_BYTES_INITIAL: usize = 4096;
/// Most bytes of names one table's dictionary holds: Arrow's `Utf8` offsets
/// are i32.
pub const SYMBOL_DICT_BYTES_MAX: usize = i32::MAX as usize;

pub struct SymbolDict {
    domains: Domains,
    /// i32 offsets: name `i` is `data[offsets[i] .. offsets[i + 1]]`.
    offsets: Arc<Region>,
    data: Arc<Region>,
    /// Names interned.
    len: usize,
    /// Bytes of names written to `data`.
    data_len: usize,
    ids: HashTable<u32>,
    hasher: DefaultHashBuilder,
    table_bytes: Tracked,
    /// The names as an Arrow array, rebuilt (without a copy) only when a
    /// symbol was added since the last call.
    values: Option<Arc<StringArray>>,
}

/// Name `id`, read from the regions.
fn name<'a>(offsets: &'a Region, data: &'a Region, id: u32) -> &'a [u8] {
    let offs = super::snapshot::u32_slice(offsets, id as usize + 2);
    // SAFETY: names below `len` were written before their offsets, and
    // `data` holds every byte below the last offset written.
    unsafe {
        std::slice::from_raw_parts(
            data.as_ptr().add(offs[id as usize] as usize),
            (offs[id as usize + 1] - offs[id as usize]) as usize,
        )
    }
}

/// Copies `bytes` into `region` at `offset`.
///
/// # Safety
/// As `chunk::write_at`: the caller is the single writer and the range is
/// inside the region and beyond every length published to readers.
unsafe fn write_at(region: &Region, offset: usize, bytes: &[u8]) {
    debug_assert!(offset + bytes.len() <= region.len());
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), region.as_ptr().add(offset), bytes.len());
}

impl SymbolDict {
    pub fn new(domains: &Domains) -> Result<SymbolDict> {
        let offsets = domains.alloc_for(MemUse::Symbols, (SYMBOLS_INITIAL + 1) * 4)?;
        let data = domains.alloc_for(MemUse::Symbols, SYMBOL_BYTES_INITIAL)?;
        let ids = HashTable::new();
        Ok(SymbolDict {
            table_bytes: Tracked::new(domains, MemUse::Symbols, 0),
            domains: domains.clone(),
            offsets: Arc::new(offsets),
            data: Arc::new(data),
            len: 0,
            data_len: 0,
            ids,
            hasher: DefaultHashBuilder::default(),
            values: None,
        })
    }

    /// The id of `s`, interning it if new.
    pub fn intern(&mut self, s: &str) -> Result<u32> {
        let hash = self.hasher.hash_one(s.as_bytes());
        let (offsets, data) = (&self.offsets, &self.data);
        if let Some(id) = self
            .ids
            .find(hash, |&id| name(offsets, data, id) == s.as_bytes())
        {
            return Ok(*id);
        }
        if self.data_len + s.len() > SYMBOL_DICT_BYTES_MAX || self.len >= u32::MAX as usize - 1 {
            return Err(CoreError::Domain(format!(
                "symbol dictionary full: {} symbols, {} bytes of names (bound {SYMBOL_DICT_BYTES_MAX})",
                self.len, self.data_len
            )));
        }
        self.reserve(s.len())?;
        let id = self.len as u32;
        let end = self.data_len + s.len();
        // SAFETY: single writer (the table's writer lock); both ranges are
        // beyond the published lengths and inside the regions (`reserve`).
        unsafe {
            write_at(&self.data, self.data_len, s.as_bytes());
            write_at(
                &self.offsets,
                (self.len + 1) * 4,
                &(end as i32).to_le_bytes(),
            );
        }
        self.len += 1;
        self.data_len = end;
        let (offsets, data, hasher) = (&self.offsets, &self.data, &self.hasher);
        self.ids
            .insert_unique(hash, id, |&i| hasher.hash_one(name(offsets, data, i)));
        self.table_bytes.set(self.ids.allocation_size() as u64);
        self.values = None;
        Ok(id)
    }

    /// Makes room for one more name of `bytes` bytes, moving to regions
    /// twice the size when full.
    fn reserve(&mut self, bytes: usize) -> Result<()> {
        let offsets_needed = (self.len + 2) * 4;
        if offsets_needed > self.offsets.len() {
            let grown = self
                .domains
                .alloc_for(MemUse::Symbols, self.offsets.len() * 2)?;
            // SAFETY: fresh region, no reader yet; the old one holds (len + 1) offsets.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.offsets.as_ptr(),
                    grown.as_ptr(),
                    (self.len + 1) * 4,
                )
            };
            self.offsets = Arc::new(grown);
        }
        if self.data_len + bytes > self.data.len() {
            let size = (self.data.len() * 2).max(self.data_len + bytes);
            let grown = self.domains.alloc_for(MemUse::Symbols, size)?;
            // SAFETY: fresh region, no reader yet; the old one holds data_len bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(self.data.as_ptr(), grown.as_ptr(), self.data_len)
            };
            self.data = Arc::new(grown);
        }
        Ok(())
    }

    /// The names as an Arrow array (id = index), over the regions, no copy.
    pub fn values(&mut self) -> Arc<StringArray> {
        if let Some(v) = &self.values {
            return v.clone();
        }
        let offsets: ScalarBuffer<i32> = ScalarBuffer::new(
            region_buffer(&self.offsets, 0, (self.len + 1) * 4),
            0,
            self.len + 1,
        );
        let data = region_buffer(&self.data, 0, self.data_len);
        // SAFETY: offsets start at 0 (a zeroed region), never decrease and end
        // at data_len; every name was a &str, so UTF-8.
        let v = Arc::new(unsafe {
            StringArray::new_unchecked(OffsetBuffer::new_unchecked(offsets), data, None)
        });
        self.values = Some(v.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    #[test]
    fn interns_once_grows_and_shares_the_names() {
        let domains = Domains::new(None).unwrap();
        let mut d = SymbolDict::new(&domains).unwrap();
        let before = d.values();
        assert_eq!(d.intern("AAPL").unwrap(), 0);
        assert_eq!(d.intern("").unwrap(), 1);
        let early = d.values();
        let names: Vec<String> = (0..5000)
            .map(|i| format!("SYM{i}").repeat(i % 7 + 1))
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(d.intern(n).unwrap(), i as u32 + 2);
        }
        assert_eq!(d.intern("AAPL").unwrap(), 0);
        assert_eq!(d.intern(&names[4321]).unwrap(), 4323);
        let v = d.values();
        assert_eq!(v.len(), 5002);
        assert_eq!(v.value(0), "AAPL");
        assert_eq!(v.value(1), "");
        assert_eq!(v.value(4323), names[4321]);
        // Arrays handed out before the regions grew still read right.
        assert_eq!(before.len(), 0);
        assert_eq!(
            (early.len(), early.value(0), early.value(1)),
            (2, "AAPL", "")
        );
        // Unchanged dictionary: the same array.
        assert!(Arc::ptr_eq(&v, &d.values()));
        let counted = domains.stats().use_bytes(MemUse::Symbols);
        let name_bytes: usize = names.iter().map(|n| n.len()).sum();
        assert!(counted as usize >= name_bytes + 5002 * 4, "{counted}");
        drop((before, early, v, d));
        assert_eq!(domains.stats().use_bytes(MemUse::Symbols), 0);
    }
}
