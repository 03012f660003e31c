//! The in-memory column store of an RDB.
//!
//! Each table is a list of chunks of Arrow arrays. The newest ("active")
//! chunk is appended to in place by the single writer; full chunks are sealed
//! (immutable, with packed bitmaps and a per-symbol row index). Readers take a
//! `TableSnapshot`: `Arc`s of the sealed chunks plus the active chunk's
//! regions and the row count published at that moment. Publishing is one
//! `ArcSwap` store, so a reader never blocks the writer for longer than a
//! pointer swap, and a query sees a consistent cut while ingest goes on.

mod alloc;
mod chunk;
mod day;
pub mod image;
mod row_key;
mod snapshot;
mod symbols;
mod table;

pub use alloc::ALLOC_QUEUE_JOBS_MAX;
pub use day::{date_string, utc_today, Clock, ClosingDay, DaySnapshot, DayState, History};
pub use row_key::{row_key_bytes, SymbolBytes};
pub use snapshot::{ChunkSnapshot, SymIndex, TableSnapshot};
pub use table::{arrow_schema, TablePin};

use crate::batch::Batch;
use crate::domain::{Domain, Domains, MemUse};
use crate::error::{CoreError, Result};
use crate::schema::Schema;
use alloc::Allocator;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;
use table::TableStore;

/// Rows in the first chunk of a table; later chunks double up to
/// `CHUNK_ROWS_MAX`, so small tables stay small and big ones get big chunks.
pub const CHUNK_ROWS_MIN: usize = 1024;
/// Rows in a full chunk.
pub const CHUNK_ROWS_MAX: usize = 65536;
/// Initial bytes of string/bytes data per row reserved in a chunk.
pub const VAR_BYTES_PER_ROW: usize = 16;
/// A table allocates its next chunk (in its upkeep, after an apply has
/// published) once the active chunk is this full, so that starting a chunk
/// on the apply path is taking one that is ready.
pub const SPARE_AT_FILL_PERCENT: usize = 75;
/// The upkeep keeps the pages this many bytes beyond the writer, in every
/// column of the active chunk (and the first ones of the next chunk),
/// touched: a batch that writes less than this per column takes no page
/// fault before it is published. 64 KiB is 8,192 rows of an 8-byte column,
/// and 16 pages per column.
pub const PREFAULT_AHEAD_BYTES: usize = 64 * 1024;
/// Pages one upkeep touches at most, so that it stays short (the next
/// update may be waiting for it): at 48,000 updates/s in 1 ms batches a
/// quote chunk needs about one new page per upkeep across its columns.
pub const PREFAULT_PAGES_PER_UPKEEP_MAX: usize = 16;

pub struct Store {
    /// The schema and its tables, replaced whole by a schema change
    /// (`change_schema`), so every reader sees one layout or the next.
    layout: ArcSwap<Layout>,
    domains: Domains,
    allocator: Arc<Allocator>,
    /// Serializes schema changes.
    changing: parking_lot::Mutex<()>,
    days: DayState,
}

struct Layout {
    schema: Arc<Schema>,
    tables: Vec<Arc<TableStore>>,
    by_name: HashMap<String, usize>,
    /// Bumped by every schema change (the query engine registers tables
    /// again when it moves).
    version: u64,
}

impl Layout {
    fn table(&self, name: &str) -> Result<&Arc<TableStore>> {
        self.by_name
            .get(name)
            .map(|i| &self.tables[*i])
            .ok_or_else(|| CoreError::UnknownTable(name.to_string()))
    }
}

/// Checks that no column of `schema` is placed in fsmem when the store has
/// no fsmem directory.
fn check_domains(schema: &Schema, domains: &Domains) -> Result<()> {
    if domains.has_fsmem() {
        return Ok(());
    }
    for t in &schema.tables {
        if let Some(c) = t.columns.iter().find(|c| c.domain == Domain::Fsmem) {
            return Err(CoreError::Domain(format!(
                "table '{}' column '{}' is placed in fsmem but no --fsmem-dir was given",
                t.name, c.name
            )));
        }
    }
    Ok(())
}

/// Memory the store holds, per domain, in bytes (`/status` `memory`).
/// Every figure is a counter kept where the memory is allocated and freed,
/// so reading it is O(1). Allocations are counted at their requested size
/// (regions rounded up to 64 bytes; hash tables and indexes at their
/// capacity); the allocator's own overhead and fragmentation are not, nor
/// transient memory (a query's, an update being decoded).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct MemoryStats {
    /// Heap (DRAM) bytes: the sum of `breakdown`.
    pub dram: u64,
    /// Column chunks placed in fsmem (file-backed), with their symbol indexes.
    pub fsmem: u64,
    pub fsmem_files: u64,
    pub breakdown: MemoryBreakdown,
}

/// What `MemoryStats::dram` is made of.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct MemoryBreakdown {
    /// Column chunks placed in DRAM (values, offsets, string data, bitmaps).
    pub columns: u64,
    /// Symbol tables: interned names (with their offsets, in regions that
    /// grow by doubling; an outgrown region lives on while older chunks or
    /// snapshots still use it) and the hash tables from name to id.
    pub symbols: u64,
    /// Per-chunk symbol row indexes (kdb+ `g#`) of DRAM columns, built when
    /// a chunk is sealed (an fsmem column's index is in fsmem with it).
    pub indexes: u64,
    /// Keyed tables' cached latest-row snapshots: the rows they copied.
    pub keyed_cache: u64,
}

/// Bytes one table holds now, per domain: its column chunks, symbol
/// dictionary, symbol indexes and (keyed tables) latest-row cache, counted
/// as `MemoryStats` counts them. The rows of the active chunk not written
/// yet count too (a chunk's regions are allocated whole), which is at most
/// `CHUNK_ROWS_MAX` rows per table, and so is the next chunk once it is
/// allocated ahead (`SPARE_AT_FILL_PERCENT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableMemory {
    pub dram: u64,
    pub fsmem: u64,
}

impl Store {
    pub fn new(schema: Arc<Schema>, domains: Domains) -> Result<Store> {
        check_domains(&schema, &domains)?;
        let allocator = Arc::new(Allocator::default());
        let tables: Vec<Arc<TableStore>> = schema
            .tables
            .iter()
            .map(|t| {
                TableStore::new(Arc::new(t.clone()), domains.for_table(), &allocator).map(Arc::new)
            })
            .collect::<Result<_>>()?;
        let by_name = schema
            .tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Store {
            layout: ArcSwap::from_pointee(Layout {
                schema,
                tables,
                by_name,
                version: 0,
            }),
            domains,
            allocator,
            changing: parking_lot::Mutex::new(()),
            days: DayState::default(),
        })
    }

    /// The schema as of now (it grows with run-time schema changes).
    pub fn schema(&self) -> Arc<Schema> {
        self.layout.load().schema.clone()
    }

    /// How many schema changes this store has applied.
    pub fn schema_version(&self) -> u64 {
        self.layout.load().version
    }

    /// Applies a run-time schema change: `new` must be the current schema
    /// with tables added and columns added at the end of tables
    /// (`schema_change::extension`). New tables start empty; the rows
    /// already in a table read as nulls in its new columns
    /// (`TableStore::add_columns`). Returns false when the store already
    /// has everything `new` holds (a change replayed again). Memory
    /// placement of existing columns stays this store's; added ones go to
    /// dram unless their whole table is in fsmem (and fsmem is configured).
    /// The caller is the store's one writer (the rdb applies it in sequence).
    pub fn change_schema(&self, new: &Schema) -> Result<bool> {
        let _one = self.changing.lock();
        let cur = self.layout.load_full();
        if crate::schema_change::extension(new, &cur.schema).is_ok() {
            return Ok(false);
        }
        crate::schema_change::extension(&cur.schema, new).map_err(|why| {
            CoreError::SchemaChange(format!(
                "the new schema is not the current one with tables or columns added: {why}"
            ))
        })?;
        let fsmem = self.domains.has_fsmem();
        let mut schema = (*cur.schema).clone();
        let mut tables = cur.tables.clone();
        let mut by_name = cur.by_name.clone();
        for nt in &new.tables {
            match cur.by_name.get(&nt.name) {
                Some(&i) => {
                    let mut def = schema.tables[i].clone();
                    if nt.columns.len() == def.columns.len() {
                        continue;
                    }
                    let all_fsmem = def.columns.iter().all(|c| c.domain == Domain::Fsmem);
                    for c in &nt.columns[def.columns.len()..] {
                        let mut c = c.clone();
                        c.domain = if all_fsmem && fsmem {
                            Domain::Fsmem
                        } else {
                            Domain::Dram
                        };
                        def.columns.push(c);
                    }
                    tables[i].add_columns(Arc::new(def.clone()))?;
                    schema.tables[i] = def;
                }
                None => {
                    let mut def = nt.clone();
                    if !fsmem {
                        def.columns.iter_mut().for_each(|c| c.domain = Domain::Dram);
                    }
                    let t = TableStore::new(
                        Arc::new(def.clone()),
                        self.domains.for_table(),
                        &self.allocator,
                    )?;
                    by_name.insert(def.name.clone(), tables.len());
                    tables.push(Arc::new(t));
                    schema.tables.push(def);
                }
            }
        }
        self.layout.store(Arc::new(Layout {
            schema: Arc::new(schema),
            tables,
            by_name,
            version: cur.version + 1,
        }));
        Ok(true)
    }

    /// Appends (or, for keyed tables, upserts) a batch. Batches of one table
    /// must come from one writer at a time; the table's writer lock enforces it.
    /// A clear marker (`Batch::clear_marker`) empties the table instead.
    /// Returns once the rows are published and the table's upkeep is done
    /// (see `apply_before_upkeep`).
    pub fn apply(&self, batch: &Batch) -> Result<()> {
        if let Some(t) = self.apply_to(batch)? {
            t.upkeep()?;
        }
        Ok(())
    }

    /// `apply`, leaving the table's upkeep (sealing a chunk the batch
    /// filled, allocating the next chunk, touching pages ahead of the
    /// writer) for `upkeep`. An update of several batches publishes them
    /// all first, so none of its rows waits for another table's upkeep.
    /// Skipping `upkeep` is correct, only slower: the next apply to the
    /// table seals what is pending first.
    pub fn apply_before_upkeep(&self, batch: &Batch) -> Result<()> {
        self.apply_to(batch).map(|_| ())
    }

    /// Every table's upkeep (see `apply_before_upkeep`); cheap for a table
    /// with nothing to do.
    pub fn upkeep(&self) -> Result<()> {
        self.layout
            .load()
            .tables
            .iter()
            .try_for_each(|t| t.upkeep())
    }

    /// Applies a batch; the table it went to, unless it was a clear marker.
    fn apply_to(&self, batch: &Batch) -> Result<Option<Arc<TableStore>>> {
        let t = self.layout.load().table(&batch.table)?.clone();
        if batch.is_clear_marker() {
            t.clear();
            return Ok(None);
        }
        t.apply(batch)?;
        Ok(Some(t))
    }

    /// Drops every row of a table (end of day, or an operator's clear).
    pub fn clear(&self, table: &str) -> Result<()> {
        self.layout.load().table(table)?.clear();
        Ok(())
    }

    /// Ends the day `date` at end-of-day marker `seq`: every append table's
    /// rows move into a closing day (kept in memory until the day's Parquet
    /// is committed, `DayState::commit`) and the tables start empty. Keyed
    /// tables hold state, not a day's ticks, and stay as they are. The
    /// caller is the table's one writer (`Rdb::apply`).
    pub fn end_day(&self, date: i32, seq: u64) -> Result<Arc<ClosingDay>> {
        self.days.end_day(date, seq, || {
            let mut out = Vec::new();
            for t in &self.layout.load().tables {
                if !matches!(t.kind(), crate::schema::TableKind::Append) {
                    continue;
                }
                out.push(t.pin().raw_snapshot()?);
                t.clear();
            }
            Ok(out)
        })
    }

    /// Closing days and history (see `DayState`).
    pub fn days(&self) -> &DayState {
        &self.days
    }

    /// One table across days as of now: today's rows, closing days' rows
    /// and the dates in history, all of one moment (`DayState`).
    pub fn day_snapshot(&self, table: &str) -> Result<DaySnapshot> {
        self.days.snapshot(table, || self.snapshot(table))
    }

    /// A consistent snapshot of one table as of now.
    pub fn snapshot(&self, table: &str) -> Result<TableSnapshot> {
        self.layout.load().table(table)?.snapshot()
    }

    /// A table's state as of now, for a snapshot of every row as appended
    /// (`TablePin::raw_snapshot`; keyed tables included, where `snapshot`
    /// keeps the latest row per key). Pinning is one `Arc` copy, so a
    /// consistent cut of every table can be taken under a lock whatever the
    /// data size, and the snapshots built after it is released.
    pub fn pin(&self, table: &str) -> Result<TablePin> {
        Ok(self.layout.load().table(table)?.pin())
    }

    /// Every row of a table as appended now (see `pin`).
    pub fn raw_snapshot(&self, table: &str) -> Result<TableSnapshot> {
        self.pin(table)?.raw_snapshot()
    }

    /// Restore: interns a table's symbol names in id order (see
    /// `TableStore::restore_symbols`).
    pub fn restore_symbols<'a>(
        &self,
        table: &str,
        first_id: u32,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<()> {
        self.layout
            .load()
            .table(table)?
            .restore_symbols(first_id, names)
    }

    /// Restore: what decodes a table's chunk images (`image::ChunkRestorer`).
    pub fn chunk_restorer(&self, table: &str) -> Result<image::ChunkRestorer> {
        Ok(self.layout.load().table(table)?.chunk_restorer())
    }

    /// Restore: installs a table's restored chunks (`TableStore::adopt`).
    pub fn adopt_chunks(&self, table: &str, chunks: Vec<ChunkSnapshot>) -> Result<()> {
        self.layout.load().table(table)?.adopt(chunks)
    }

    /// Rows visible now, per table, in schema order.
    pub fn row_counts(&self) -> Vec<(String, u64)> {
        self.layout
            .load()
            .tables
            .iter()
            .map(|t| (t.name().to_string(), t.published_rows()))
            .collect()
    }

    /// Bytes each table holds now, in schema order, from counters kept per
    /// table (no walk over the data).
    pub fn table_memory(&self) -> Vec<(String, TableMemory)> {
        self.layout
            .load()
            .tables
            .iter()
            .map(|t| (t.name().to_string(), t.memory()))
            .collect()
    }

    /// What the store holds now, from counters (no walk over the data).
    pub fn memory(&self) -> MemoryStats {
        let s = self.domains.stats();
        let breakdown = MemoryBreakdown {
            columns: s.bytes(Domain::Dram),
            symbols: s.use_bytes(MemUse::Symbols),
            indexes: s.use_bytes(MemUse::Index(Domain::Dram)),
            keyed_cache: s.use_bytes(MemUse::Cache),
        };
        MemoryStats {
            dram: breakdown.columns + breakdown.symbols + breakdown.indexes + breakdown.keyed_cache,
            fsmem: s.bytes(Domain::Fsmem),
            fsmem_files: s.fsmem_files.load(std::sync::atomic::Ordering::Relaxed),
            breakdown,
        }
    }
}
