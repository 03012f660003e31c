//! One table of the store: its writer state behind a mutex that only the
//! applying thread takes, and the published state readers load lock-free.
//!
//! Keyed tables are stored like append tables (an upsert appends the new
//! row); a reader's snapshot keeps only the latest row per key, and that
//! deduplicated snapshot is cached per published version.
//!
//! An apply does only what its rows need before they are published: copy
//! them into the active chunk and publish. The chunk's upkeep comes after
//! (`upkeep`, which the store runs once the batch is published): sealing a
//! chunk the batch filled (readers see it unsealed until then), allocating
//! the next chunk before the active one is full, and touching the pages
//! the next appends will write. So in zero-latency mode a row never waits
//! for a seal, an allocation or a page fault that is not its own. A table
//! with fsmem columns has its next chunk allocated on the store's allocator
//! thread (`alloc`), so that no update waits on the file system either.

use super::alloc::Allocator;
use super::chunk::{ActiveChunk, ActiveView};
use super::row_key::{row_key_bytes, SymbolBytes};
use super::snapshot::{active_chunk, ChunkSnapshot, TableSnapshot};
use super::symbols::SymbolDict;
use super::{
    CHUNK_ROWS_MAX, CHUNK_ROWS_MIN, PREFAULT_AHEAD_BYTES, PREFAULT_PAGES_PER_UPKEEP_MAX,
    SPARE_AT_FILL_PERCENT, VAR_BYTES_PER_ROW,
};
use crate::batch::{Batch, ColumnData};
use crate::domain::{Domain, Domains, MemUse, Tracked};
use crate::error::{CoreError, Result};
use crate::schema::{ColumnType, TableDef, TableKind};
use arc_swap::ArcSwap;
use arrow_array::{BooleanArray, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

/// The Arrow schema of a table: what SQL sees.
pub fn arrow_schema(def: &TableDef) -> SchemaRef {
    let fields: Vec<Field> = def
        .columns
        .iter()
        .map(|c| {
            let dt = match c.ty {
                ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
                ColumnType::Symbol => {
                    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
                }
                ColumnType::F64 => DataType::Float64,
                ColumnType::I64 => DataType::Int64,
                ColumnType::I32 => DataType::Int32,
                ColumnType::Bool => DataType::Boolean,
                ColumnType::Str => DataType::Utf8,
                ColumnType::Bytes => DataType::Binary,
            };
            Field::new(&c.name, dt, true)
        })
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

struct Published {
    /// The table's definition and Arrow schema these chunks follow: they
    /// change together with the chunks (`add_columns`), so a reader sees the
    /// table before a column was added or after, never a mix.
    def: Arc<TableDef>,
    schema: SchemaRef,
    sealed: Arc<Vec<ChunkSnapshot>>,
    /// A chunk the last batch filled, not sealed yet (`upkeep` seals it).
    full: Option<ActiveView>,
    active: Option<ActiveView>,
    dict: Arc<StringArray>,
    rows: u64,
    version: u64,
    generation: u64,
}

struct Writer {
    def: Arc<TableDef>,
    schema: SchemaRef,
    active: Option<ActiveChunk>,
    /// A chunk an apply filled: published as it is, sealed by `upkeep`.
    full: Option<ActiveChunk>,
    /// The next chunk, allocated by `upkeep` before the active one is full
    /// (sized for `next_capacity` rows).
    spare: Option<ActiveChunk>,
    /// The next chunk being allocated on the allocator thread.
    spare_pending: Option<Receiver<Result<ActiveChunk>>>,
    sealed: Arc<Vec<ChunkSnapshot>>,
    dict: SymbolDict,
    next_capacity: usize,
    rows: u64,
    version: u64,
    /// Bumped by every clear.
    generation: u64,
}

pub(crate) struct TableStore {
    /// The table's name and kind, which never change (its columns may
    /// grow: see `Writer::def` and `Published::def`).
    name: String,
    kind: TableKind,
    domains: Domains,
    /// Allocates this table's next chunk when it has fsmem columns.
    allocator: Option<Arc<Allocator>>,
    writer: Mutex<Writer>,
    published: ArcSwap<Published>,
    /// A keyed table's latest-row snapshot for one published version, and
    /// the bytes of the rows it copied (counted as `MemUse::Cache`).
    keyed_cache: Mutex<Option<(u64, TableSnapshot, Tracked)>>,
}

impl TableStore {
    /// `allocator`: the store's allocator thread, used for the chunks of a
    /// table with fsmem columns.
    pub fn new(
        def: Arc<TableDef>,
        domains: Domains,
        allocator: &Arc<Allocator>,
    ) -> Result<TableStore> {
        let schema = arrow_schema(&def);
        let fsmem = def.columns.iter().any(|c| c.domain == Domain::Fsmem);
        let mut dict = SymbolDict::new(&domains)?;
        let values = dict.values();
        Ok(TableStore {
            name: def.name.clone(),
            kind: def.kind.clone(),
            domains,
            allocator: fsmem.then(|| allocator.clone()),
            writer: Mutex::new(Writer {
                def: def.clone(),
                schema: schema.clone(),
                active: None,
                full: None,
                spare: None,
                spare_pending: None,
                sealed: Arc::new(Vec::new()),
                dict,
                next_capacity: CHUNK_ROWS_MIN,
                rows: 0,
                version: 0,
                generation: 0,
            }),
            published: ArcSwap::from_pointee(Published {
                def,
                schema,
                sealed: Arc::new(Vec::new()),
                full: None,
                active: None,
                dict: values,
                rows: 0,
                version: 0,
                generation: 0,
            }),
            keyed_cache: Mutex::new(None),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> &TableKind {
        &self.kind
    }

    fn check(def: &TableDef, batch: &Batch) -> Result<()> {
        let bad = |column: &str, reason: String| CoreError::BadValue {
            table: def.name.clone(),
            column: column.to_string(),
            reason,
        };
        if batch.columns.len() != def.columns.len() {
            return Err(bad(
                "*",
                format!(
                    "batch has {} columns, table has {}",
                    batch.columns.len(),
                    def.columns.len()
                ),
            ));
        }
        for (c, d) in batch.columns.iter().zip(&def.columns) {
            if c.data.ty() != d.ty {
                return Err(bad(
                    &d.name,
                    format!("is {}, batch has {}", d.ty.name(), c.data.ty().name()),
                ));
            }
            if c.data.len() != batch.rows || c.valid.as_ref().is_some_and(|v| v.len() != batch.rows)
            {
                return Err(bad(
                    &d.name,
                    format!("length differs from {} rows", batch.rows),
                ));
            }
        }
        Ok(())
    }

    /// Appends `batch` and publishes it. The upkeep it leaves (a chunk it
    /// filled to seal, the next chunk to allocate, pages to touch) is done
    /// by `upkeep`, after the rows are visible.
    pub fn apply(&self, batch: &Batch) -> Result<()> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        Self::check(&w.def, batch)?;
        if batch.rows == 0 {
            return Ok(());
        }
        // A chunk filled by an apply whose upkeep did not run (or failed)
        // is sealed before another can fill.
        self.seal_full(w)?;
        let sym_ids: Vec<Vec<u32>> = batch
            .columns
            .iter()
            .map(|c| match &c.data {
                ColumnData::Symbol { dict, .. } => dict.iter().map(|s| w.dict.intern(s)).collect(),
                _ => Ok(Vec::new()),
            })
            .collect::<Result<_>>()?;
        let mut from = 0;
        while from < batch.rows {
            if w.active.as_ref().map(|a| a.room() == 0).unwrap_or(true) {
                self.start_chunk(w, batch, from)?;
            }
            let active = w.active.as_mut().expect("chunk started above");
            let max = active.room().min(batch.rows - from);
            let n = active.rows_that_fit(batch, from, max);
            if n == 0 {
                // The next row's strings do not fit: seal what is there and
                // start a chunk sized for them.
                if active.len > 0 {
                    self.seal(w)?;
                }
                self.start_chunk(w, batch, from)?;
                continue;
            }
            let active = w.active.as_mut().expect("chunk exists");
            active.append(batch, from, n, &sym_ids, w.def.time_column, &self.domains)?;
            from += n;
            if active.room() == 0 {
                // The full chunk is published as it is and sealed by the
                // upkeep. One waits at most: a batch that fills another
                // (a bulk load) seals the older one first, in order.
                self.seal_full(w)?;
                w.full = w.active.take();
            }
        }
        w.rows += batch.rows as u64;
        w.version += 1;
        self.publish(w);
        Ok(())
    }

    /// The work an apply leaves for after its rows are published (see the
    /// module comment): seals a chunk the apply filled, allocates the next
    /// chunk once the active one is `SPARE_AT_FILL_PERCENT` full, and
    /// touches up to `PREFAULT_PAGES_PER_UPKEEP_MAX` pages of what the next
    /// appends will write. Each step is bounded, and a table with nothing
    /// to do returns at once.
    pub fn upkeep(&self) -> Result<()> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        if w.full.is_some() {
            self.seal_full(w)?;
            self.publish(w);
        }
        let spare_due = match &w.active {
            Some(a) => a.len * 100 >= a.capacity() * SPARE_AT_FILL_PERCENT,
            // The chunk just sealed was the last: the next apply starts one.
            None => w.version > 0,
        };
        if let Some(rx) = &w.spare_pending {
            match rx.try_recv() {
                Err(TryRecvError::Empty) => {}
                Ok(Ok(chunk)) if chunk.capacity() == w.next_capacity => {
                    w.spare = Some(chunk);
                    w.spare_pending = None;
                }
                // It failed (the writer allocates when it needs a chunk,
                // and reports the error then), or it is the wrong size.
                Ok(_) | Err(TryRecvError::Disconnected) => w.spare_pending = None,
            }
        } else if w.spare.is_none() && spare_due {
            let capacity = w.next_capacity;
            let var_bytes = capacity * VAR_BYTES_PER_ROW;
            match &self.allocator {
                Some(allocator) => {
                    let (tx, rx) = std::sync::mpsc::sync_channel(1);
                    let (def, domains) = (w.def.clone(), self.domains.clone());
                    let job = Box::new(move || {
                        let chunk =
                            ActiveChunk::new(&def, &domains, capacity, var_bytes).map(|mut c| {
                                // Its first pages too, off the writer's thread.
                                c.prefault(PREFAULT_AHEAD_BYTES, usize::MAX);
                                c
                            });
                        // A writer that stopped waiting drops it here.
                        let _ = tx.send(chunk);
                    });
                    if allocator.submit(job) {
                        w.spare_pending = Some(rx);
                    }
                }
                None => {
                    w.spare = Some(ActiveChunk::new(
                        &w.def,
                        &self.domains,
                        capacity,
                        var_bytes,
                    )?)
                }
            }
        }
        // Ahead of the writer in the active chunk first, then the start of
        // the spare one, within one budget of pages.
        let mut pages = PREFAULT_PAGES_PER_UPKEEP_MAX;
        if let Some(a) = w.active.as_mut() {
            pages -= a.prefault(PREFAULT_AHEAD_BYTES, pages);
        }
        if let Some(s) = w.spare.as_mut() {
            s.prefault(PREFAULT_AHEAD_BYTES, pages);
        }
        Ok(())
    }

    fn start_chunk(&self, w: &mut Writer, batch: &Batch, from: usize) -> Result<()> {
        let capacity = w.next_capacity;
        w.next_capacity = (capacity * 2).min(CHUNK_ROWS_MAX);
        let one_row = ActiveChunk::var_bytes_needed(batch, from, from + 1);
        let var_bytes = (capacity * VAR_BYTES_PER_ROW).max(one_row * 2);
        // The spare fits unless the first row's strings need more room.
        if let Some(spare) = w.spare.take() {
            if spare.capacity() == capacity && spare.var_bytes().is_none_or(|b| b >= var_bytes) {
                w.active = Some(spare);
                return Ok(());
            }
        }
        // One still being allocated is not waited for: it could be waiting
        // on the file system.
        w.spare_pending = None;
        w.active = Some(ActiveChunk::new(
            &w.def,
            &self.domains,
            capacity,
            var_bytes,
        )?);
        Ok(())
    }

    /// Seals the chunk an apply filled, if any. On an error the chunk stays
    /// where it is (published, readable), for the next attempt.
    fn seal_full(&self, w: &mut Writer) -> Result<()> {
        if let Some(full) = &w.full {
            let sealed = full.seal(&w.schema, w.dict.values(), w.def.sym_column, &self.domains)?;
            Arc::make_mut(&mut w.sealed).push(sealed);
            w.full = None;
        }
        Ok(())
    }

    /// Seals the active chunk now (the next row's strings do not fit in
    /// it), after the full chunk before it if one waits, so that chunks
    /// stay in order.
    fn seal(&self, w: &mut Writer) -> Result<()> {
        self.seal_full(w)?;
        if let Some(active) = w.active.take() {
            if active.len == 0 {
                return Ok(());
            }
            let sealed =
                active.seal(&w.schema, w.dict.values(), w.def.sym_column, &self.domains)?;
            Arc::make_mut(&mut w.sealed).push(sealed);
        }
        Ok(())
    }

    /// Adds columns at the end of the table (`ALTER TABLE ... ADD COLUMN`):
    /// `def` is the table with them. The rows already here read as nulls in
    /// them: the active chunk is sealed (it was laid out for the old
    /// columns), and every sealed chunk gets a null array per new column
    /// (zeroed pages the OS maps lazily). Published in one store, so a
    /// reader sees the table as it was or as it is now, never a mix. The
    /// caller is the table's one writer (the rdb applies it in sequence).
    pub fn add_columns(&self, def: Arc<TableDef>) -> Result<()> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        if def.columns.len() < w.def.columns.len()
            || def
                .columns
                .iter()
                .zip(&w.def.columns)
                .any(|(a, b)| a.name != b.name || a.ty != b.ty)
        {
            return Err(CoreError::SchemaChange(format!(
                "table '{}': the new columns must follow the ones it has",
                self.name
            )));
        }
        if def.columns.len() == w.def.columns.len() {
            return Ok(());
        }
        self.seal(w)?;
        w.spare = None;
        w.spare_pending = None;
        let schema = arrow_schema(&def);
        let values = w.dict.values();
        let sealed = w
            .sealed
            .iter()
            .map(|c| widen_chunk(c, &schema, &def, &values))
            .collect::<Result<Vec<_>>>()?;
        w.sealed = Arc::new(sealed);
        w.def = def;
        w.schema = schema;
        w.version += 1;
        self.publish(w);
        *self.keyed_cache.lock() = None;
        Ok(())
    }

    fn publish(&self, w: &mut Writer) {
        self.published.store(Arc::new(Published {
            def: w.def.clone(),
            schema: w.schema.clone(),
            sealed: w.sealed.clone(),
            full: w.full.as_ref().map(|a| a.view()),
            active: w.active.as_ref().map(|a| a.view()),
            dict: w.dict.values(),
            rows: w.rows,
            version: w.version,
            generation: w.generation,
        }));
    }

    /// Interns `names` in order into the table's (restored, so far empty
    /// or partly restored) dictionary; they must get the ids `first_id`,
    /// `first_id + 1`, ...: the ids the chunks being restored hold.
    pub fn restore_symbols<'a>(
        &self,
        first_id: u32,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<()> {
        let mut w = self.writer.lock();
        for (i, name) in names.enumerate() {
            let want = first_id as usize + i;
            let id = w.dict.intern(name)?;
            if id as usize != want {
                return Err(CoreError::CorruptImage {
                    offset: 0,
                    reason: format!(
                        "table '{}': symbol '{name}' restored as id {id}, its chunks say {want} (a name twice, or names missing)",
                        self.name
                    ),
                });
            }
        }
        w.version += 1;
        self.publish(&mut w);
        Ok(())
    }

    /// What decodes chunk images of this table, against its dictionary as
    /// restored so far (`restore_symbols` first).
    pub fn chunk_restorer(&self) -> super::image::ChunkRestorer {
        let mut w = self.writer.lock();
        super::image::ChunkRestorer {
            def: w.def.clone(),
            schema: w.schema.clone(),
            dict: w.dict.values(),
            domains: self.domains.clone(),
        }
    }

    /// Installs restored sealed chunks, in row order, after the rows the
    /// table holds (a restore starts with an empty table). The next apply
    /// starts a new chunk after them.
    pub fn adopt(&self, chunks: Vec<ChunkSnapshot>) -> Result<()> {
        let mut guard = self.writer.lock();
        let w = &mut *guard;
        if w.active.is_some() || w.full.is_some() {
            return Err(CoreError::Domain(format!(
                "table '{}': restored chunks can only follow sealed ones",
                self.name
            )));
        }
        let rows: usize = chunks.iter().map(|c| c.batch.num_rows()).sum();
        let sealed = Arc::make_mut(&mut w.sealed);
        for c in chunks {
            if c.batch.schema() != w.schema {
                return Err(CoreError::Domain(format!(
                    "table '{}': a restored chunk's columns differ from the table's",
                    self.name
                )));
            }
            sealed.push(c);
        }
        if rows > 0 {
            // Later chunks come at the full size, as after a long run.
            w.next_capacity = CHUNK_ROWS_MAX;
        }
        w.rows += rows as u64;
        w.version += 1;
        self.publish(w);
        Ok(())
    }

    pub fn clear(&self) {
        let mut w = self.writer.lock();
        w.active = None;
        w.full = None;
        w.spare = None;
        if let Some(rx) = w.spare_pending.take() {
            // Wait for it and free it here, so that a cleared table holds
            // nothing (clearing is not on the update path).
            drop(rx.recv());
        }
        w.sealed = Arc::new(Vec::new());
        w.next_capacity = CHUNK_ROWS_MIN;
        w.rows = 0;
        w.version += 1;
        w.generation += 1;
        self.publish(&mut w);
    }

    /// Bytes this table holds now, per domain, from its own counters (see
    /// `Store::memory` for what is counted).
    pub fn memory(&self) -> super::TableMemory {
        let Some(s) = self.domains.table_stats() else {
            return super::TableMemory::default();
        };
        super::TableMemory {
            dram: s.bytes(Domain::Dram)
                + s.use_bytes(MemUse::Symbols)
                + s.use_bytes(MemUse::Index(Domain::Dram))
                + s.use_bytes(MemUse::Cache),
            fsmem: s.bytes(Domain::Fsmem),
        }
    }

    pub fn published_rows(&self) -> u64 {
        match self.kind {
            TableKind::Append => self.published.load().rows,
            TableKind::Keyed { .. } => self.snapshot().map(|s| s.rows as u64).unwrap_or(0),
        }
    }

    pub fn snapshot(&self) -> Result<TableSnapshot> {
        let p = self.published.load_full();
        if let TableKind::Keyed { key } = &self.kind {
            if let Some((v, snap, _)) = &*self.keyed_cache.lock() {
                if *v == p.version {
                    return Ok(snap.clone());
                }
            }
            let raw = self.raw_snapshot(&p)?;
            let (snap, copied) = latest_per_key(raw, key)?;
            let account = Tracked::new(&self.domains, MemUse::Cache, copied);
            *self.keyed_cache.lock() = Some((p.version, snap.clone(), account));
            return Ok(snap);
        }
        self.raw_snapshot(&p)
    }

    /// The table's published state as of now: one `Arc` copy. What a
    /// consistent cut takes under a lock; the snapshot is built from it later.
    pub fn pin(self: &Arc<Self>) -> TablePin {
        TablePin {
            table: self.clone(),
            published: self.published.load_full(),
        }
    }

    fn raw_snapshot(&self, p: &Published) -> Result<TableSnapshot> {
        let mut chunks: Vec<ChunkSnapshot> = p.sealed.as_ref().clone();
        for view in [&p.full, &p.active].into_iter().flatten() {
            if view.len > 0 {
                chunks.push(active_chunk(&p.schema, view, p.dict.clone())?);
            }
        }
        Ok(TableSnapshot {
            def: p.def.clone(),
            schema: p.schema.clone(),
            rows: p.rows as usize,
            chunks,
            symbols: p.dict.clone(),
            generation: p.generation,
        })
    }
}

/// A sealed chunk with null arrays appended for the columns `def` has past
/// the chunk's (see `TableStore::add_columns`). A symbol column's nulls
/// index the table's dictionary, as every chunk's symbol column does.
fn widen_chunk(
    c: &ChunkSnapshot,
    schema: &SchemaRef,
    def: &TableDef,
    dict: &Arc<StringArray>,
) -> Result<ChunkSnapshot> {
    let rows = c.batch.num_rows();
    let mut columns = c.batch.columns().to_vec();
    for col in &def.columns[columns.len()..] {
        let field = schema.field(columns.len());
        columns.push(null_column(col.ty, rows, field.data_type(), dict));
    }
    let batch = arrow_array::RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| CoreError::Domain(format!("table '{}': adding columns: {e}", def.name)))?;
    Ok(ChunkSnapshot {
        batch,
        min_time: c.min_time,
        max_time: c.max_time,
        sym_index: c.sym_index.clone(),
    })
}

/// A column of `rows` nulls of type `ty` (Arrow type `data_type`); a symbol
/// column's nulls index the table's dictionary, as every chunk's symbol
/// column does.
pub(crate) fn null_column(
    ty: ColumnType,
    rows: usize,
    data_type: &DataType,
    dict: &Arc<StringArray>,
) -> arrow_array::ArrayRef {
    match ty {
        ColumnType::Symbol => Arc::new(arrow_array::DictionaryArray::<
            arrow_array::types::UInt32Type,
        >::new(
            arrow_array::UInt32Array::new_null(rows),
            dict.clone() as arrow_array::ArrayRef,
        )),
        _ => arrow_array::new_null_array(data_type, rows),
    }
}

/// A table's published state held at one moment (`TableStore::pin`).
pub struct TablePin {
    table: Arc<TableStore>,
    published: Arc<Published>,
}

impl TablePin {
    /// Every row as appended at the pinned moment, also for a keyed table
    /// (where `snapshot` keeps only the latest row per key): what persistence
    /// writes.
    pub fn raw_snapshot(&self) -> Result<TableSnapshot> {
        self.table.raw_snapshot(&self.published)
    }
}

/// Keeps only the latest row of each key, in the order rows arrived.
/// Returns the snapshot and the bytes of the rows it copied: a chunk whose
/// every row is kept is shared as it is, a filtered one is a copy (its
/// dictionary values stay shared with the table's symbol dictionary).
fn latest_per_key(raw: TableSnapshot, key: &[usize]) -> Result<(TableSnapshot, u64)> {
    let mut last: HashMap<Vec<u8>, (usize, usize)> = HashMap::new();
    let mut buf = Vec::new();
    for (ci, chunk) in raw.chunks.iter().enumerate() {
        for row in 0..chunk.batch.num_rows() {
            buf.clear();
            row_key_bytes(&chunk.batch, key, row, SymbolBytes::Id, &mut buf);
            last.insert(buf.clone(), (ci, row));
        }
    }
    let mut keep: Vec<Vec<bool>> = raw
        .chunks
        .iter()
        .map(|c| vec![false; c.batch.num_rows()])
        .collect();
    for (ci, row) in last.values() {
        keep[*ci][*row] = true;
    }
    let mut chunks = Vec::with_capacity(raw.chunks.len());
    let mut rows = 0;
    let mut copied = 0u64;
    for (chunk, mask) in raw.chunks.into_iter().zip(keep) {
        let all = mask.iter().all(|k| *k);
        let batch = if all {
            chunk.batch.clone()
        } else {
            let mask = BooleanArray::from(mask);
            let b = arrow_select::filter::filter_record_batch(&chunk.batch, &mask)
                .map_err(|e| CoreError::Domain(format!("keyed snapshot: {e}")))?;
            copied += owned_bytes(&b);
            b
        };
        if batch.num_rows() == 0 {
            continue;
        }
        rows += batch.num_rows();
        chunks.push(ChunkSnapshot {
            batch,
            min_time: chunk.min_time,
            max_time: chunk.max_time,
            sym_index: None,
        });
    }
    Ok((
        TableSnapshot {
            rows,
            chunks,
            ..raw
        },
        copied,
    ))
}

/// Bytes of a batch's buffers, leaving out dictionary values (the table's
/// symbol dictionary, counted as symbols).
fn owned_bytes(b: &arrow_array::RecordBatch) -> u64 {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    b.columns()
        .iter()
        .map(|c| match c.as_any_dictionary_opt() {
            Some(d) => d.keys().get_buffer_memory_size(),
            None => c.get_buffer_memory_size(),
        } as u64)
        .sum()
}
