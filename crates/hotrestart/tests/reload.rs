//! Reload tests: torn active tails are cut and reported, corruption in a sealed
//! chunk is an error naming file and offset, unfinished GC output is ignored,
//! parallelism does not change the result, metadata survives, the lock holds.
//! Values large enough to be kept where they lie in the mapped chunk file
//! (`RELOAD_MAP_VALUE_BYTES_MIN`) reload the same, and are cut or refused
//! like any record when torn or damaged. Chunk files of format version 1
//! (values not aligned) still reload.

mod common;

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tickdb_hotrestart::{Config, Error, Store, RELOAD_MAP_VALUE_BYTES_MIN};

fn active_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".active"))
        .collect();
    v.sort();
    v
}

#[test]
fn torn_active_tail_is_truncated_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 1024 * 1024,
        ..common::small_config()
    };
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    for k in 0..10u32 {
        store.put(format!("t/{k}").as_bytes(), &[1u8; 50]).unwrap();
    }
    store.sync().unwrap();
    for k in 10..20u32 {
        store.put(format!("t/{k}").as_bytes(), &[2u8; 50]).unwrap();
    }
    // Hand the unsynced records to the OS, then "crash".
    drop(store);
    let files = active_files(dir.path());
    assert_eq!(files.len(), 1);
    let path = files[0].clone();
    let len = std::fs::metadata(&path).unwrap().len();
    // Cut in the middle of the last record.
    let cut = len - 30;
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let (store, report) = Store::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(report.torn_tails.len(), 1, "{report:?}");
    let t = &report.torn_tails[0];
    assert_eq!(t.file, path);
    // The last record ("t/19", 50 bytes of value) is 24 + 4 + 4 (the key's
    // padding) + 50 + 6 (the value's) = 88 bytes.
    assert_eq!(tickdb_hotrestart::format::encoded_len(4, 50), 88);
    assert_eq!(t.offset, len - 88);
    assert_eq!(t.bytes_dropped, cut - (len - 88));
    assert_eq!(store.get(b"t/18"), Some(vec![2u8; 50]));
    assert_eq!(store.get(b"t/19"), None);
    assert_eq!(store.stats().live_records, 19);
    // The file was truncated and sealed: a second reload finds nothing to repair.
    drop(store);
    assert!(active_files(dir.path()).is_empty());
    let (store, report) = Store::open(dir.path(), cfg).unwrap();
    assert!(report.torn_tails.is_empty());
    assert_eq!(store.stats().live_records, 19);
}

#[test]
fn corruption_in_sealed_chunk_names_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::small_config();
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    for k in 0..200u32 {
        store.put(format!("t/{k}").as_bytes(), &[3u8; 100]).unwrap();
    }
    store.close().unwrap();
    let mut sealed: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".val"))
        .collect();
    sealed.sort();
    let victim = sealed[1].clone();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&victim)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(500)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(500)).unwrap();
    f.write_all(&[b[0] ^ 0x10]).unwrap();
    drop(f);
    match Store::open(dir.path(), cfg) {
        Err(Error::Corrupt {
            file,
            offset,
            reason,
        }) => {
            assert_eq!(file, victim);
            assert!((32..=500).contains(&offset), "offset {offset}");
            eprintln!("refused as expected: offset {offset}: {reason}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("corrupt sealed chunk accepted"),
    }
}

#[test]
fn unfinished_gc_output_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::small_config();
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    store.put(b"t/a", b"1").unwrap();
    store.close().unwrap();
    let tmp = dir.path().join("chunk-00000000000000ff.val.gctmp");
    // A half-written GC output, holding a record that must not come back.
    let mut bytes =
        tickdb_hotrestart::format::encode_header(tickdb_hotrestart::ChunkKind::Value, 1, 0xff)
            .to_vec();
    tickdb_hotrestart::format::encode_record(
        &mut bytes,
        999,
        tickdb_hotrestart::RecordKind::Value,
        b"t/ghost",
        b"boo",
    );
    bytes.truncate(bytes.len() - 2);
    std::fs::write(&tmp, &bytes).unwrap();
    let (store, report) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(report.gc_temp_files_removed, vec![tmp.clone()]);
    assert!(!tmp.exists());
    assert_eq!(store.get(b"t/ghost"), None);
    assert_eq!(store.get(b"t/a"), Some(b"1".to_vec()));
}

#[test]
fn parallelism_gives_identical_state() {
    let seed = common::seed("parallelism_gives_identical_state");
    let mut rng = StdRng::seed_from_u64(seed);
    let src = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 16 * 1024,
        ..common::small_config()
    };
    let (store, _) = Store::open(src.path(), cfg.clone()).unwrap();
    for i in 0..20_000u32 {
        let table = ["q/", "t/", "k/"][rng.random_range(0..3)];
        let key = format!("{table}{}", rng.random_range(0..3000u32)).into_bytes();
        match rng.random_range(0..100) {
            0..70 => store
                .put(&key, &i.to_le_bytes().repeat(rng.random_range(1..20)))
                .unwrap(),
            70..98 => {
                store.remove(&key).unwrap();
            }
            _ => {
                store
                    .clear_prefix(format!("{table}{}", rng.random_range(0..10u32)).as_bytes())
                    .unwrap();
            }
        }
        if i % 5000 == 4999 {
            store.run_gc_cycle().unwrap();
        }
    }
    store.set_meta_u64(b"applied", 42).unwrap();
    store.close().unwrap();
    let mut states = Vec::new();
    for (parallelism, partitions) in [(1, 1), (2, 4), (4, 3), (8, 16)] {
        let dir = tempfile::tempdir().unwrap();
        common::copy_dir(src.path(), dir.path());
        let cfg = Config {
            parallelism,
            partitions,
            progress: true,
            ..cfg.clone()
        };
        let (store, report) = Store::open(dir.path(), cfg).unwrap();
        eprintln!(
            "parallelism {parallelism} partitions {partitions}: {} chunks, {} records, {:.1} MB/s",
            report.chunks_loaded,
            report.records_loaded,
            report.bytes_per_sec() / 1e6
        );
        let s = store.stats();
        states.push((
            common::dump(&store),
            s.chunks,
            s.tombstones,
            s.prefix_tombstones,
            store.meta_u64(b"applied"),
        ));
    }
    assert_eq!(states[0].4, Some(42));
    for s in &states[1..] {
        assert!(s == &states[0], "reload state depends on parallelism");
    }
}

#[test]
fn metadata_and_lock() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::small_config();
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    assert!(matches!(
        Store::open(dir.path(), cfg.clone()),
        Err(Error::Locked(_))
    ));
    store.put(b"t/x", b"y").unwrap();
    store.set_meta_u64(b"applied", 7).unwrap();
    store.sync().unwrap();
    assert!(matches!(
        store.put(tickdb_hotrestart::META_KEY_PREFIX, b"no"),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        store.clear_prefix(b""),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(
        store.iter_prefix(b"").count(),
        1,
        "metadata is not user data"
    );
    let lengths = store.simulate_crash(false);
    assert!(!lengths.is_empty());
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(store.meta_u64(b"applied"), Some(7));
    assert_eq!(store.get(b"t/x"), Some(b"y".to_vec()));
}

/// Many batches per partition, so that emptied batches go back to the readers
/// and are refilled, and record sizes that make each partition's first batch
/// a poor estimate of the map's size (too small in one store, too large in
/// the other): the reloaded contents must not depend on either.
#[test]
fn recycled_batches_and_misleading_size_estimates_reload_the_same_contents() {
    use std::collections::BTreeMap;
    use tickdb_hotrestart::RELOAD_BATCH_RECORDS;
    let seed = common::seed("recycled_batches_and_misleading_size_estimates");
    let mut rng = StdRng::seed_from_u64(seed);
    // Records enough for several full batches in each of two partitions.
    let small = (RELOAD_BATCH_RECORDS * 6) as u32;
    for big_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            chunk_size_bytes: 4 * 1024 * 1024,
            parallelism: 2,
            partitions: 2,
            ..common::small_config()
        };
        let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let big = |store: &Store, model: &mut BTreeMap<_, _>| {
            for i in 0..200u32 {
                let (k, v) = (format!("b/{i}").into_bytes(), vec![i as u8; 16 * 1024]);
                store.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        };
        if big_first {
            big(&store, &mut model);
        }
        for i in 0..small {
            let k = format!("s/{}", rng.random_range(0..small / 2)).into_bytes();
            if rng.random_range(0..10) == 0 {
                store.remove(&k).unwrap();
                model.remove(&k);
            } else {
                let v = i.to_le_bytes().to_vec();
                store.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        if !big_first {
            big(&store, &mut model);
        }
        store.close().unwrap();
        let (store, report) = Store::open(dir.path(), cfg).unwrap();
        // At least two full batches per partition went through.
        assert!(
            report.records_loaded > 4 * RELOAD_BATCH_RECORDS as u64,
            "{report:?}"
        );
        assert!(common::dump(&store) == model, "big_first {big_first}");
    }
}

/// Values of every size around the mapping bound, some of several MiB:
/// their bytes come back exactly.
fn large_values() -> Vec<(Vec<u8>, Vec<u8>)> {
    let sizes = [
        100,
        RELOAD_MAP_VALUE_BYTES_MIN - 1,
        RELOAD_MAP_VALUE_BYTES_MIN,
        RELOAD_MAP_VALUE_BYTES_MIN + 3,
        3 * 1024 * 1024 + 5,
        700,
        2 * RELOAD_MAP_VALUE_BYTES_MIN + 1,
    ];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let v: Vec<u8> = (0..n).map(|j| (j * 31 + i * 7) as u8).collect();
            (format!("big/{i}").into_bytes(), v)
        })
        .collect()
}

#[test]
fn large_values_kept_in_place_reload_whole_or_cut_at_their_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 64 * 1024 * 1024,
        ..common::small_config()
    };
    let values = large_values();
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    for (k, v) in &values {
        store.put(k, v).unwrap();
    }
    store.sync().unwrap();
    drop(store);
    // Intact: every value back, byte for byte, the large ones in place, each
    // at an 8-byte-aligned address (format version 2 aligns values).
    let (store, report) = Store::open(dir.path(), cfg.clone()).unwrap();
    assert!(report.torn_tails.is_empty(), "{report:?}");
    for (k, v) in &values {
        assert_eq!(store.get(k).as_ref(), Some(v));
    }
    let shared = store
        .iter_prefix(b"big/")
        .filter(|(_, v)| matches!(v, tickdb_hotrestart::Value::Mapped(_)))
        .inspect(|(_, v)| assert_eq!(v.bytes().as_ptr() as usize % 8, 0))
        .count();
    assert_eq!(
        shared,
        values
            .iter()
            .filter(|v| v.1.len() >= RELOAD_MAP_VALUE_BYTES_MIN)
            .count()
    );
    // Another large value, then a crash that tears it in the middle: the
    // tail is cut at that record's start and everything before it stays,
    // the mapped values too.
    let last = vec![9u8; 2 * 1024 * 1024];
    store.put(b"big/last", &last).unwrap();
    drop(store);
    let files = active_files(dir.path());
    let path = files.last().unwrap().clone();
    let len = std::fs::metadata(&path).unwrap().len();
    let record = tickdb_hotrestart::format::encoded_len(b"big/last".len(), last.len()) as u64;
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 1024 * 1024)
        .unwrap();
    let (store, report) = Store::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(report.torn_tails.len(), 1, "{report:?}");
    assert_eq!(report.torn_tails[0].offset, len - record);
    assert_eq!(store.get(b"big/last"), None);
    for (k, v) in &values {
        assert_eq!(store.get(k).as_ref(), Some(v));
    }
    store.close().unwrap();
    // A flipped bit deep inside a large value of a sealed chunk: refused,
    // naming the record's start.
    let sealed: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".val"))
        .collect();
    let victim = sealed
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap()
        .clone();
    let at = std::fs::metadata(&victim).unwrap().len() - 100;
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&victim)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x04]).unwrap();
    drop(f);
    match Store::open(dir.path(), cfg) {
        Err(Error::Corrupt {
            file,
            offset,
            reason,
        }) => {
            assert_eq!(file, victim);
            assert!(
                offset < at && reason.contains("crc mismatch"),
                "{offset}: {reason}"
            );
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a damaged large value was accepted"),
    }
}

/// A chunk file as tickdb wrote it before format version 2, byte by byte
/// (docs/hot-restart.md): the header with version 1, then records with no
/// padding (bytes 17..20 of a record zero, the value right after the key).
fn version_1_chunk(seq: u64, records: &[(u64, &[u8], &[u8])]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(b"TDBHRCK\0");
    f.extend_from_slice(&1u16.to_le_bytes());
    f.push(1); // value chunk
    f.push(0);
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&f[0..24]);
    f.extend_from_slice(&crc.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    for (rseq, key, value) in records {
        let start = f.len();
        let len = 24 + key.len() + value.len();
        f.extend_from_slice(&(len as u32).to_le_bytes());
        f.extend_from_slice(&[0u8; 4]);
        f.extend_from_slice(&rseq.to_le_bytes());
        f.push(1); // value record
        f.extend_from_slice(&[0u8; 3]);
        f.extend_from_slice(&(key.len() as u32).to_le_bytes());
        f.extend_from_slice(key);
        f.extend_from_slice(value);
        let crc = crc32c::crc32c(&f[start + 8..start + len]);
        f[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }
    f
}

#[test]
fn version_1_chunks_reload_and_new_records_go_to_version_2_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![5u8; RELOAD_MAP_VALUE_BYTES_MIN + 1];
    let file = version_1_chunk(
        3,
        &[(1, b"k/a", b"one"), (2, b"k/bb", &big), (3, b"k/a", b"two")],
    );
    std::fs::write(dir.path().join("chunk-0000000000000003.val"), &file).unwrap();
    let cfg = common::small_config();
    let (store, report) = Store::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(report.records_loaded, 3);
    assert_eq!(store.get(b"k/a"), Some(b"two".to_vec()));
    assert_eq!(store.get(b"k/bb"), Some(big.clone()));
    store.put(b"k/c", b"three").unwrap();
    store.close().unwrap();
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    assert_eq!(store.get(b"k/c"), Some(b"three".to_vec()));
    assert_eq!(store.get(b"k/bb"), Some(big));
    let newest = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.to_string_lossy().contains("chunk-") && !p.ends_with("chunk-0000000000000003.val")
        })
        .map(|p| std::fs::read(p).unwrap())
        .find(|b| b.len() > 32)
        .unwrap();
    assert_eq!(
        u16::from_le_bytes([newest[8], newest[9]]),
        2,
        "new chunks are version 2"
    );
}

/// A chunk file that cannot be read (here a directory under a chunk file's
/// name: it opens, but cannot be mapped) stops the reload with that name,
/// whichever mapper thread reads it and however many files the others read.
#[test]
fn a_chunk_file_that_cannot_be_read_stops_the_reload_naming_it() {
    let src = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 16 * 1024,
        ..common::small_config()
    };
    let (store, _) = Store::open(src.path(), cfg.clone()).unwrap();
    for k in 0..2000u32 {
        store.put(format!("t/{k}").as_bytes(), &[7u8; 100]).unwrap();
    }
    store.close().unwrap();
    for parallelism in [1, 2, 4] {
        let dir = tempfile::tempdir().unwrap();
        common::copy_dir(src.path(), dir.path());
        let bad = dir.path().join("chunk-00000000000000f0.val");
        std::fs::create_dir(&bad).unwrap();
        let cfg = Config {
            parallelism,
            ..cfg.clone()
        };
        match Store::open(dir.path(), cfg) {
            Err(Error::Io { path, .. }) => assert_eq!(path, bad, "parallelism {parallelism}"),
            Err(e) => panic!("parallelism {parallelism}: not an I/O error naming the file: {e}"),
            Ok(_) => panic!("parallelism {parallelism}: a reload read a directory as a chunk"),
        }
    }
}

/// `FilePmdMapped` of the mapping of this process that holds `addr`, in
/// KiB (/proc/self/smaps): how much of it is mapped 2 MiB per entry.
fn file_pmd_mapped_kib(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = range.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("FilePmdMapped:") {
                return v.split_whitespace().next()?.parse().ok();
            }
        }
    }
    None
}

/// Empties the page cache of every file in `dir`, so the next read of them
/// comes from the disk (and lands in folios the reader's advice chose).
fn evict(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    for e in std::fs::read_dir(dir).unwrap() {
        let f = std::fs::File::open(e.unwrap().path()).unwrap();
        f.sync_all().unwrap();
        // SAFETY: a valid open descriptor for the call's duration.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Where the file system keeps files in large folios, a reload maps its
/// chunk files 2 MiB per page-table entry (`map_chunk_file` advises huge
/// pages before populating): a large value kept in place lies in such a
/// mapping. Where a bare mapping of a file with the same advice gets no
/// huge pages (no transparent huge pages, or small folios), skipped,
/// saying so.
#[test]
fn a_reload_maps_chunk_files_in_huge_pages_where_the_file_system_allows() {
    const VALUE_BYTES: usize = 8 << 20;
    let probe_dir = tempfile::tempdir().unwrap();
    let probe = probe_dir.path().join("probe");
    std::fs::write(&probe, vec![1u8; VALUE_BYTES]).unwrap();
    evict(probe_dir.path());
    let file = std::fs::File::open(&probe).unwrap();
    // SAFETY: a read-only mapping of a file nobody changes.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let _ = map.advise(memmap2::Advice::HugePage);
    let huge = map.advise(memmap2::Advice::PopulateRead).is_ok()
        && file_pmd_mapped_kib(map.as_ptr() as usize).unwrap_or(0) > 0;
    drop(map);
    if !huge {
        eprintln!("skipped: a mapping of a file advised MADV_HUGEPAGE got no huge pages here");
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        chunk_size_bytes: 64 * 1024 * 1024,
        ..common::small_config()
    };
    let (store, _) = Store::open(dir.path(), cfg.clone()).unwrap();
    for k in 0..3u8 {
        store
            .put(format!("big/{k}").as_bytes(), &vec![k; VALUE_BYTES])
            .unwrap();
    }
    store.close().unwrap();
    evict(dir.path());
    let (store, _) = Store::open(dir.path(), cfg).unwrap();
    let mapped: Vec<usize> = store
        .iter_prefix(b"big/")
        .filter_map(|(_, v)| match v {
            tickdb_hotrestart::Value::Mapped(m) => Some(m.as_slice().as_ptr() as usize),
            _ => None,
        })
        .collect();
    assert_eq!(mapped.len(), 3, "the large values are kept where they lie");
    let kib = file_pmd_mapped_kib(mapped[0]).expect("the value's mapping is in smaps");
    assert!(
        kib >= 2048,
        "the chunk file is mapped in small pages ({kib} KiB in huge ones)"
    );
}
