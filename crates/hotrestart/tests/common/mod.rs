//! Shared helpers for the hot restart integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use tickdb_hotrestart::{ChunkStats, Config, GcConfig, Store};

/// The seed of a randomized test: `TICKDB_SEED` if set, else fresh. Printed so a
/// failure can be rerun with the same seed.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("TICKDB_SEED") {
        Ok(s) => s.trim().parse().expect("TICKDB_SEED must be a u64"),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            t.as_nanos() as u64 ^ (std::process::id() as u64) << 32
        }
    };
    eprintln!("{test}: seed = {seed} (rerun with TICKDB_SEED={seed})");
    seed
}

/// A config with small chunks and manual GC, for deterministic tests.
pub fn small_config() -> Config {
    Config {
        chunk_size_bytes: 4096,
        parallelism: 1,
        partitions: 2,
        fsync: false,
        progress: false,
        gc: GcConfig {
            enabled: false,
            garbage_ratio_min: 0.3,
            ..GcConfig::default()
        },
        test_gc_crash: None,
    }
}

/// Every user key and value.
pub fn dump(store: &Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store
        .iter_prefix(b"")
        .map(|(k, v)| (k.to_vec(), v.bytes().to_vec()))
        .collect()
}

/// Chunk accounting without anything that depends on timing.
pub fn chunk_stats(store: &Store) -> Vec<ChunkStats> {
    store.stats().chunks
}

/// Sum of the sizes of the chunk files in `dir`.
pub fn dir_chunk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("chunk-"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// Copies the chunk files of `from` into the (existing, empty) `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name.to_string_lossy().starts_with("chunk-") {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}
