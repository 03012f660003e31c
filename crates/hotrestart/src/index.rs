//! The in-memory record index: key → (chunk, seq, size, value) for every live key,
//! the live prefix tombstones, and the per-chunk live/garbage accounting. GC decides
//! everything from here and never reads a chunk file.
//!
//! Tombstone bookkeeping. A tombstone (or prefix tombstone) must stay on disk while
//! some chunk still holds an older record it shadows; otherwise a reload would bring
//! that record back. Each entry therefore carries a `shadow` list: the chunks that
//! may hold older records of its key. A tombstone whose shadow chunks have all been
//! deleted (durably) is garbage. The lists are pruned against the chunk table, so
//! each stays shorter than the number of chunks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::format::{ChunkKind, RecordKind, CHUNK_HEADER_BYTES};

/// Keys are shared between the index map and the chunks' record lists.
pub type Key = Arc<[u8]>;

/// One partition of the key index. A hash map: puts, removes and reload's
/// upserts are point operations on random keys, and a B-tree spent most of a
/// reload comparing keys. Prefix operations (a table clear, restore at start)
/// are rare and scan.
pub(crate) type KeyMap = hashbrown::HashMap<Key, Entry>;

/// A value that its owner keeps in its own RAM, in its own form, and can encode
/// on demand. The RDB's column store is one: its rows are already in memory as
/// Arrow arrays, so keeping a second, encoded copy in the index would double the
/// memory of a day's data. GC copies such a value "from RAM" by encoding it again.
pub trait ValueSource: Send + Sync {
    /// Appends the value's bytes to `out`. Must append the same bytes on every
    /// call: the bytes that were stored when the value was put (or reloaded).
    fn encode_into(&self, out: &mut Vec<u8>);
}

/// A value read in place: its bytes in a chunk file that reload mapped into
/// memory, which stays mapped while any such value lives. The pages are the
/// page cache's; the kernel may drop them under memory pressure and read
/// them back from the file when they are next touched.
#[derive(Clone)]
pub struct MappedBytes {
    map: Arc<memmap2::Mmap>,
    offset: usize,
    len: usize,
}

impl MappedBytes {
    pub(crate) fn new(map: Arc<memmap2::Mmap>, offset: usize, len: usize) -> MappedBytes {
        debug_assert!(offset + len <= map.len());
        MappedBytes { map, offset, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.len]
    }
}

impl AsRef<[u8]> for MappedBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// The value of a live key, as the index holds it. Shared with readers and with
/// GC snapshots, so neither copies it.
#[derive(Clone)]
pub enum Value {
    /// The encoded bytes themselves (what `put` stores, and what reload reads).
    Bytes(Arc<[u8]>),
    /// The bytes where they lie in a mapped chunk file (reload, for values of
    /// at least `RELOAD_MAP_VALUE_BYTES_MIN`).
    Mapped(MappedBytes),
    /// The owner's in-memory form, encoded when needed (`put_source`, `rebind`).
    Source(Arc<dyn ValueSource>),
}

impl Value {
    /// The value's bytes: borrowed when held as bytes, encoded otherwise.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Value::Bytes(b) => std::borrow::Cow::Borrowed(b),
            Value::Mapped(m) => std::borrow::Cow::Borrowed(m.as_slice()),
            Value::Source(s) => {
                let mut out = Vec::new();
                s.encode_into(&mut out);
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// The value's bytes as a shared buffer (a copy but for `Bytes`).
    pub fn to_shared(&self) -> Arc<[u8]> {
        match self {
            Value::Bytes(b) => b.clone(),
            _ => Arc::from(self.bytes().as_ref()),
        }
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Value {
        Value::Bytes(Arc::from(b))
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Value {
        Value::Bytes(Arc::from(b))
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Value::Mapped(m) => write!(f, "Mapped({} bytes)", m.len),
            Value::Source(_) => f.write_str("Source"),
        }
    }
}

/// What a key currently maps to.
#[derive(Clone, Debug)]
pub(crate) enum Slot {
    Value(Value),
    /// A live tombstone: the key is removed but older records may still be on disk.
    Tombstone,
}

/// The newest record of one key.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub seq: u64,
    pub chunk: u64,
    pub size: u32,
    pub slot: Slot,
    /// Chunks that may hold older records of this key (see the module comment).
    pub shadow: Vec<u64>,
    /// The one chunk of `shadow` whose deletion makes GC look at this key's
    /// tombstone again (the key is in that chunk's `watchers`); `None` when
    /// the key is not registered anywhere. A tombstone may go only once every
    /// chunk of its shadow is gone, and chunks only go in GC commits, so
    /// watching one of them at a time is enough: when it goes, the sweep
    /// watches another or, if none is left, drops the tombstone. The sweep
    /// thus costs what GC deleted, not the number of tombstones.
    pub watch: Option<u64>,
}

/// A live prefix tombstone.
#[derive(Clone, Debug)]
pub(crate) struct PrefixTomb {
    pub prefix: Key,
    pub seq: u64,
    pub chunk: u64,
    pub size: u32,
    /// Chunks that may hold records this prefix tombstone dismisses.
    pub shadow: Vec<u64>,
}

/// Lifecycle of a chunk file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkState {
    /// Being appended (`.active` file name).
    Active,
    /// Full, waiting to be fsynced and renamed to its sealed name.
    Sealing,
    /// Durable under its sealed name; GC may collect it.
    Sealed,
}

/// Accounting for one chunk file.
#[derive(Clone, Debug)]
pub(crate) struct ChunkInfo {
    pub kind: ChunkKind,
    pub state: ChunkState,
    /// File size including the header.
    pub file_bytes: u64,
    pub live_bytes: u64,
    pub live_records: u64,
    pub garbage_bytes: u64,
    pub garbage_records: u64,
    /// Highest record seq in the chunk: the chunk's age is measured from it.
    pub max_rec_seq: u64,
    /// (key, seq) of records written to the chunk that were live when written;
    /// GC filters it against the index to find the live ones.
    pub records: Vec<(Key, u64)>,
    /// Keys whose entry watches this chunk (`Entry::watch`). A key put again
    /// since stays listed until the chunk goes; the sweep then ignores it.
    pub watchers: Vec<Key>,
}

impl ChunkInfo {
    pub fn new(kind: ChunkKind, state: ChunkState) -> ChunkInfo {
        ChunkInfo {
            kind,
            state,
            file_bytes: CHUNK_HEADER_BYTES as u64,
            live_bytes: 0,
            live_records: 0,
            garbage_bytes: 0,
            garbage_records: 0,
            max_rec_seq: 0,
            records: Vec::new(),
            watchers: Vec::new(),
        }
    }
}

/// A GC candidate: a sealed chunk's accounting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub seq: u64,
    pub live_bytes: u64,
    pub live_records: u64,
    pub garbage_bytes: u64,
    pub max_rec_seq: u64,
}

/// A live record copied (by reference) out of the index for GC.
#[derive(Clone, Debug)]
pub(crate) struct LiveRec {
    pub key: Key,
    pub value: Option<Value>,
    pub seq: u64,
    pub kind: RecordKind,
    pub src: u64,
}

/// One record GC wrote to an output chunk.
#[derive(Clone, Debug)]
pub(crate) struct OutRec {
    pub key: Key,
    pub seq: u64,
    pub size: u32,
    pub kind: RecordKind,
    pub src: u64,
}

/// One output chunk of a GC cycle.
#[derive(Clone, Debug)]
pub(crate) struct OutChunk {
    pub seq: u64,
    pub kind: ChunkKind,
    pub file_bytes: u64,
    pub max_rec_seq: u64,
    pub recs: Vec<OutRec>,
}

/// FNV-1a: a fixed hash, so that partitioning is the same in every process.
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The partition a key belongs to (index maps and reload threads).
pub fn partition_of(key: &[u8], partitions: usize) -> usize {
    (key_hash(key) % partitions.max(1) as u64) as usize
}

fn add_shadow(shadow: &mut Vec<u64>, chunk: u64, chunks: &BTreeMap<u64, ChunkInfo>) {
    shadow.retain(|c| chunks.contains_key(c));
    if !shadow.contains(&chunk) {
        shadow.push(chunk);
    }
}

/// Makes the tombstone entry `e` of `key` watch one existing chunk of its
/// shadow, unless it already watches one. Returns false when no chunk of its
/// shadow exists any more: the tombstone shadows nothing and may go.
fn watch_tombstone(chunks: &mut BTreeMap<u64, ChunkInfo>, key: &Key, e: &mut Entry) -> bool {
    if e.watch.is_some_and(|c| chunks.contains_key(&c)) {
        // Chunks leave a shadow only once deleted, so a watched chunk that
        // still exists is still in the shadow.
        return true;
    }
    e.watch = None;
    for &c in &e.shadow {
        if let Some(info) = chunks.get_mut(&c) {
            info.watchers.push(key.clone());
            e.watch = Some(c);
            return true;
        }
    }
    false
}

fn account_live(chunks: &mut BTreeMap<u64, ChunkInfo>, chunk: u64, key: Key, seq: u64, size: u32) {
    if let Some(c) = chunks.get_mut(&chunk) {
        c.file_bytes += size as u64;
        c.live_bytes += size as u64;
        c.live_records += 1;
        c.max_rec_seq = c.max_rec_seq.max(seq);
        c.records.push((key, seq));
    } else {
        debug_assert!(false, "record appended to unknown chunk {chunk}");
    }
}

fn mark_garbage(chunks: &mut BTreeMap<u64, ChunkInfo>, total: &mut u64, chunk: u64, size: u32) {
    if let Some(c) = chunks.get_mut(&chunk) {
        c.live_bytes = c.live_bytes.saturating_sub(size as u64);
        c.live_records = c.live_records.saturating_sub(1);
        c.garbage_bytes += size as u64;
        c.garbage_records += 1;
        *total += size as u64;
    }
}

/// The index. Key maps are partitioned by key hash so that reload's partition
/// threads each build one map and hand it over without a merge.
pub(crate) struct Index {
    parts: Vec<KeyMap>,
    pub prefix_tombs: Vec<PrefixTomb>,
    pub chunks: BTreeMap<u64, ChunkInfo>,
    /// Sum of `garbage_bytes` over all chunks: drives back-pressure.
    pub garbage_bytes_total: u64,
    /// Number of key entries that are tombstones.
    tombstones: u64,
    /// Keys whose watched chunk GC deleted: the next sweep looks at them.
    sweep_queue: Vec<Key>,
}

impl Index {
    /// Assembles an index from reload's results. Every tombstone there
    /// shadows at least one loaded chunk (reload drops the others) and starts
    /// watching one.
    pub fn from_parts(
        mut parts: Vec<KeyMap>,
        prefix_tombs: Vec<PrefixTomb>,
        mut chunks: BTreeMap<u64, ChunkInfo>,
    ) -> Index {
        let garbage_bytes_total = chunks.values().map(|c| c.garbage_bytes).sum();
        let mut tombstones = 0;
        let mut sweep_queue = Vec::new();
        for (k, e) in parts.iter_mut().flat_map(|p| p.iter_mut()) {
            if matches!(e.slot, Slot::Tombstone) {
                tombstones += 1;
                if !watch_tombstone(&mut chunks, k, e) {
                    sweep_queue.push(k.clone());
                }
            }
        }
        Index {
            parts,
            prefix_tombs,
            chunks,
            garbage_bytes_total,
            tombstones,
            sweep_queue,
        }
    }

    fn part(&self, key: &[u8]) -> usize {
        partition_of(key, self.parts.len())
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.parts[self.part(key)].get(key)
    }

    pub fn get_value(&self, key: &[u8]) -> Option<Value> {
        match self.get(key) {
            Some(Entry {
                slot: Slot::Value(v),
                ..
            }) => Some(v.clone()),
            _ => None,
        }
    }

    /// Swaps the in-RAM form of `key`'s value, keeping its record (seq, chunk,
    /// size) as it is. Returns false if `key` has no value.
    pub fn replace_value(&mut self, key: &[u8], value: Value) -> bool {
        let p = self.part(key);
        match self.parts[p].get_mut(key) {
            Some(Entry {
                slot: slot @ Slot::Value(_),
                ..
            }) => {
                *slot = Slot::Value(value);
                true
            }
            _ => false,
        }
    }

    /// Whether any entry (value or tombstone) lies under `prefix`.
    pub fn any_with_prefix(&self, prefix: &[u8]) -> bool {
        self.parts
            .iter()
            .any(|p| p.keys().any(|k| k.starts_with(prefix)))
    }

    pub fn add_chunk(&mut self, seq: u64, kind: ChunkKind, state: ChunkState) {
        self.chunks.insert(seq, ChunkInfo::new(kind, state));
    }

    pub fn set_chunk_state(&mut self, seq: u64, state: ChunkState) {
        if let Some(c) = self.chunks.get_mut(&seq) {
            c.state = state;
        }
    }

    /// Records a value record appended to `chunk`.
    pub fn apply_put(&mut self, key: &[u8], value: Value, seq: u64, chunk: u64, size: u32) {
        let p = self.part(key);
        let map = &mut self.parts[p];
        let (shared_key, old) = match map.get_key_value_mut(key) {
            Some((k, e)) => {
                let old = (e.chunk, e.size);
                match e.slot {
                    Slot::Value(_) => add_shadow(&mut e.shadow, e.chunk, &self.chunks),
                    Slot::Tombstone => {
                        // The tombstone's own shadow carries over: if this value is
                        // removed again, the new tombstone still covers those chunks.
                        self.tombstones -= 1;
                        e.shadow.retain(|c| self.chunks.contains_key(c));
                    }
                }
                e.seq = seq;
                e.chunk = chunk;
                e.size = size;
                e.slot = Slot::Value(value);
                (k.clone(), Some(old))
            }
            None => {
                let k: Key = Arc::from(key);
                let e = Entry {
                    seq,
                    chunk,
                    size,
                    slot: Slot::Value(value),
                    shadow: Vec::new(),
                    watch: None,
                };
                map.insert(k.clone(), e);
                (k, None)
            }
        };
        if let Some((c, s)) = old {
            mark_garbage(&mut self.chunks, &mut self.garbage_bytes_total, c, s);
        }
        account_live(&mut self.chunks, chunk, shared_key, seq, size);
    }

    /// Records a tombstone appended to `chunk`. The caller checked that `key` maps
    /// to a value (removing an absent key writes nothing).
    pub fn apply_remove(&mut self, key: &[u8], seq: u64, chunk: u64, size: u32) {
        let p = self.part(key);
        let map = &mut self.parts[p];
        let Some((k, e)) = map.get_key_value_mut(key) else {
            return;
        };
        let k = k.clone();
        let old = (e.chunk, e.size);
        if matches!(e.slot, Slot::Value(_)) {
            add_shadow(&mut e.shadow, e.chunk, &self.chunks);
        } else {
            self.tombstones -= 1;
        }
        e.seq = seq;
        e.chunk = chunk;
        e.size = size;
        e.slot = Slot::Tombstone;
        self.tombstones += 1;
        // The shadow holds at least the chunk of the value just removed.
        watch_tombstone(&mut self.chunks, &k, e);
        mark_garbage(
            &mut self.chunks,
            &mut self.garbage_bytes_total,
            old.0,
            old.1,
        );
        account_live(&mut self.chunks, chunk, k, seq, size);
    }

    /// Records a prefix tombstone appended to `chunk`: every entry under the prefix
    /// goes, and so does every older prefix tombstone it covers. Returns the number
    /// of values cleared.
    pub fn apply_clear_prefix(&mut self, prefix: &[u8], seq: u64, chunk: u64, size: u32) -> u64 {
        let mut shadow = Vec::new();
        let mut cleared = 0;
        for part in &mut self.parts {
            let keys: Vec<Key> = part
                .keys()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect();
            for k in keys {
                let Some(e) = part.remove(&k) else { continue };
                mark_garbage(
                    &mut self.chunks,
                    &mut self.garbage_bytes_total,
                    e.chunk,
                    e.size,
                );
                match e.slot {
                    Slot::Value(_) => {
                        shadow.push(e.chunk);
                        cleared += 1;
                    }
                    Slot::Tombstone => self.tombstones -= 1,
                }
                shadow.extend(e.shadow);
            }
        }
        let (covered, kept): (Vec<PrefixTomb>, Vec<PrefixTomb>) =
            std::mem::take(&mut self.prefix_tombs)
                .into_iter()
                .partition(|pt| pt.prefix.starts_with(prefix));
        self.prefix_tombs = kept;
        for pt in covered {
            mark_garbage(
                &mut self.chunks,
                &mut self.garbage_bytes_total,
                pt.chunk,
                pt.size,
            );
            shadow.extend(pt.shadow);
        }
        shadow.sort_unstable();
        shadow.dedup();
        shadow.retain(|c| self.chunks.contains_key(c));
        let key: Key = Arc::from(prefix);
        account_live(&mut self.chunks, chunk, key.clone(), seq, size);
        self.prefix_tombs.push(PrefixTomb {
            prefix: key,
            seq,
            chunk,
            size,
            shadow,
        });
        cleared
    }

    /// Drops tombstones and prefix tombstones whose shadowed chunks are all gone,
    /// turning them into garbage. Key tombstones are looked at only when GC
    /// deleted the chunk they watch (`Entry::watch`), so a sweep costs what
    /// the last cycles deleted, however many tombstones there are. Only GC
    /// calls it, and only at the start of a cycle: every chunk deletion
    /// before then has been made durable (unlink + directory fsync), so no
    /// dropped tombstone can expose a record again. Returns whether anything
    /// changed.
    pub fn sweep_tombstones(&mut self) -> bool {
        let mut changed = false;
        for key in std::mem::take(&mut self.sweep_queue) {
            let p = partition_of(&key, self.parts.len());
            let Some(e) = self.parts[p].get_mut(&key) else {
                continue;
            };
            match e.slot {
                Slot::Tombstone => {
                    if watch_tombstone(&mut self.chunks, &key, e) {
                        continue;
                    }
                    if let Some(e) = self.parts[p].remove(&key) {
                        mark_garbage(
                            &mut self.chunks,
                            &mut self.garbage_bytes_total,
                            e.chunk,
                            e.size,
                        );
                        self.tombstones -= 1;
                        changed = true;
                    }
                }
                // Put again since: a value needs no watch, and one whose
                // watched chunk is gone is registered nowhere any more.
                Slot::Value(_) => {
                    if e.watch.is_some_and(|c| !self.chunks.contains_key(&c)) {
                        e.watch = None;
                    }
                }
            }
        }
        let pts = std::mem::take(&mut self.prefix_tombs);
        for mut pt in pts {
            pt.shadow.retain(|c| self.chunks.contains_key(c));
            if pt.shadow.is_empty() {
                mark_garbage(
                    &mut self.chunks,
                    &mut self.garbage_bytes_total,
                    pt.chunk,
                    pt.size,
                );
                changed = true;
            } else {
                self.prefix_tombs.push(pt);
            }
        }
        changed
    }

    /// Sealed chunks, the only ones GC may collect.
    pub fn candidates(&self) -> Vec<Candidate> {
        self.chunks
            .iter()
            .filter(|(_, c)| c.state == ChunkState::Sealed)
            .map(|(&seq, c)| Candidate {
                seq,
                live_bytes: c.live_bytes,
                live_records: c.live_records,
                garbage_bytes: c.garbage_bytes,
                max_rec_seq: c.max_rec_seq,
            })
            .collect()
    }

    /// The live records of `chunk`, taken from RAM.
    pub fn snapshot_live(&self, chunk: u64, out: &mut Vec<LiveRec>) {
        let Some(info) = self.chunks.get(&chunk) else {
            return;
        };
        for (key, seq) in &info.records {
            match self.get(key) {
                Some(e) if e.seq == *seq && e.chunk == chunk => {
                    let (value, kind) = match &e.slot {
                        Slot::Value(v) => (Some(v.clone()), RecordKind::Value),
                        Slot::Tombstone => (None, RecordKind::Tombstone),
                    };
                    out.push(LiveRec {
                        key: key.clone(),
                        value,
                        seq: *seq,
                        kind,
                        src: chunk,
                    });
                }
                _ => {
                    if info.kind == ChunkKind::Tombstone {
                        if let Some(pt) = self
                            .prefix_tombs
                            .iter()
                            .find(|p| p.seq == *seq && p.chunk == chunk)
                        {
                            out.push(LiveRec {
                                key: pt.prefix.clone(),
                                value: None,
                                seq: *seq,
                                kind: RecordKind::PrefixTombstone,
                                src: chunk,
                            });
                        }
                    }
                }
            }
        }
    }

    /// Installs GC output chunks and forgets the source chunks. A copied record
    /// that was superseded while GC ran is garbage in its output chunk; the
    /// output chunk joins the shadow list of whatever superseded it, so the copy
    /// can never come back after the newer tombstone is collected.
    pub fn commit_gc(&mut self, sources: &[u64], outputs: Vec<OutChunk>) {
        for o in outputs {
            let mut info = ChunkInfo::new(o.kind, ChunkState::Sealed);
            info.file_bytes = o.file_bytes;
            info.max_rec_seq = o.max_rec_seq;
            self.chunks.insert(o.seq, info);
            for r in o.recs {
                let live = match r.kind {
                    RecordKind::PrefixTombstone => {
                        match self
                            .prefix_tombs
                            .iter_mut()
                            .find(|p| p.seq == r.seq && p.chunk == r.src)
                        {
                            Some(pt) => {
                                pt.chunk = o.seq;
                                true
                            }
                            None => false,
                        }
                    }
                    _ => {
                        let p = partition_of(&r.key, self.parts.len());
                        match self.parts[p].get_mut(&r.key) {
                            Some(e) if e.seq == r.seq && e.chunk == r.src => {
                                e.chunk = o.seq;
                                true
                            }
                            Some(e) => {
                                if r.kind == RecordKind::Value {
                                    add_shadow(&mut e.shadow, o.seq, &self.chunks);
                                }
                                false
                            }
                            None => {
                                if r.kind == RecordKind::Value {
                                    let pt = self
                                        .prefix_tombs
                                        .iter_mut()
                                        .filter(|p| p.seq > r.seq && r.key.starts_with(&p.prefix))
                                        .max_by_key(|p| p.seq);
                                    match pt {
                                        Some(pt) => add_shadow(&mut pt.shadow, o.seq, &self.chunks),
                                        None => tracing::error!(
                                            seq = r.seq,
                                            "GC copy of a dead record has nothing shadowing it"
                                        ),
                                    }
                                }
                                false
                            }
                        }
                    }
                };
                if live {
                    // The record moved: the source no longer holds it.
                    if let Some(src) = self.chunks.get_mut(&r.src) {
                        src.live_bytes = src.live_bytes.saturating_sub(r.size as u64);
                        src.live_records = src.live_records.saturating_sub(1);
                    }
                }
                let Some(info) = self.chunks.get_mut(&o.seq) else {
                    continue;
                };
                if live {
                    info.live_bytes += r.size as u64;
                    info.live_records += 1;
                    info.records.push((r.key, r.seq));
                } else {
                    info.garbage_bytes += r.size as u64;
                    info.garbage_records += 1;
                    self.garbage_bytes_total += r.size as u64;
                }
            }
        }
        for s in sources {
            if let Some(c) = self.chunks.remove(s) {
                self.sweep_queue.extend(c.watchers);
                debug_assert_eq!(
                    c.live_records, 0,
                    "GC source chunk {s} still had live records"
                );
                self.garbage_bytes_total -= c.garbage_bytes;
            }
        }
    }

    /// Live values under `prefix`, sorted by key.
    pub fn values_with_prefix(&self, prefix: &[u8]) -> Vec<(Key, Value)> {
        let mut out: Vec<(Key, Value)> = Vec::new();
        for part in &self.parts {
            for (k, e) in part.iter().filter(|(k, _)| k.starts_with(prefix)) {
                if let Slot::Value(v) = &e.slot {
                    out.push((k.clone(), v.clone()));
                }
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// (live values, their record bytes, key tombstones) over the whole index.
    pub fn counts(&self) -> (u64, u64, u64) {
        let mut n = 0;
        let mut bytes = 0;
        for e in self.parts.iter().flat_map(|p| p.values()) {
            if matches!(e.slot, Slot::Value(_)) {
                n += 1;
                bytes += e.size as u64;
            }
        }
        (n, bytes, self.tombstones)
    }
}
