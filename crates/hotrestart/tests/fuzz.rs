//! Fuzz-style tests of the chunk decoder (no cargo-fuzz needed): random bytes,
//! random bytes behind a valid header, and bit flips / truncations of valid
//! chunks must give errors, never panics; a damaged sealed chunk makes reload
//! fail with `Error::Corrupt`, a damaged active chunk is cut and reported.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};
use tickdb_hotrestart::format::{self, ChunkKind, RecordKind};
use tickdb_hotrestart::{Error, Store};

fn runner(test: &str, cases: u32) -> TestRunner {
    let seed = common::seed(test);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        PtConfig::with_cases(cases),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// A valid chunk of `n` records with the given key/value sizes.
fn valid_chunk(kind: ChunkKind, recs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut buf = format::encode_header(kind, 0, 5).to_vec();
    for (i, (k, v)) in recs.iter().enumerate() {
        match kind {
            ChunkKind::Value => {
                format::encode_record(&mut buf, i as u64 + 1, RecordKind::Value, k, v)
            }
            ChunkKind::Tombstone => {
                format::encode_record(&mut buf, i as u64 + 1, RecordKind::Tombstone, k, &[])
            }
        }
    }
    buf
}

fn recs_strategy() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    prop::collection::vec(
        (
            prop::collection::vec(any::<u8>(), 0..24),
            prop::collection::vec(any::<u8>(), 0..64),
        ),
        1..12,
    )
}

#[test]
fn random_bytes_never_panic() {
    let mut r = runner("random_bytes_never_panic", 2000);
    r.run(
        &(prop::collection::vec(any::<u8>(), 0..2048), any::<bool>()),
        |(tail, with_header)| {
            let mut bytes = if with_header {
                format::encode_header(ChunkKind::Value, 0, 1).to_vec()
            } else {
                Vec::new()
            };
            bytes.extend_from_slice(&tail);
            let _ = format::decode_chunk(&bytes);
            let _ = format::decode_record(&tail);
            let _ = format::decode_header(&tail);
            Ok(())
        },
    )
    .unwrap();
}

#[test]
fn bit_flips_and_truncations_are_errors() {
    let mut r = runner("bit_flips_and_truncations_are_errors", 1000);
    let strat = (
        recs_strategy(),
        any::<bool>(),
        any::<prop::sample::Index>(),
        0u8..8,
        any::<bool>(),
    );
    r.run(&strat, |(recs, tomb, at, bit, truncate)| {
        let kind = if tomb {
            ChunkKind::Tombstone
        } else {
            ChunkKind::Value
        };
        let good = valid_chunk(kind, &recs);
        let (h, decoded) = format::decode_chunk(&good).expect("valid chunk decodes");
        prop_assert_eq!(h.kind, kind);
        prop_assert_eq!(decoded.len(), recs.len());
        let mut bad = good.clone();
        let i = at.index(bad.len());
        if truncate {
            // Any cut that is not at a record boundary is an error.
            bad.truncate(i.max(1));
            let res = format::decode_chunk(&bad);
            let boundary = i >= format::CHUNK_HEADER_BYTES && {
                let mut off = format::CHUNK_HEADER_BYTES;
                let mut ok = off == i;
                for (k, v) in &recs {
                    off += format::encoded_len(k.len(), if tomb { 0 } else { v.len() });
                    ok |= off == i;
                }
                ok
            };
            prop_assert_eq!(res.is_ok(), boundary);
        } else {
            bad[i] ^= 1 << bit;
            // The CRCs catch every single-bit flip (a flipped length lands on a
            // wrong CRC range, a bad length or a truncation).
            prop_assert!(
                format::decode_chunk(&bad).is_err(),
                "flip at {} bit {} accepted",
                i,
                bit
            );
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn damaged_files_make_reload_fail_or_repair_never_panic() {
    let mut r = runner("damaged_files_make_reload_fail_or_repair_never_panic", 40);
    let strat = (
        recs_strategy(),
        any::<prop::sample::Index>(),
        any::<u8>(),
        any::<bool>(),
    );
    r.run(&strat, |(recs, at, xor, active)| {
        let dir = tempfile::tempdir().unwrap();
        let mut chunk = valid_chunk(ChunkKind::Value, &recs);
        let i = at.index(chunk.len());
        chunk[i] ^= xor.max(1);
        let name = format::chunk_file_name(
            5,
            ChunkKind::Value,
            if active {
                format::FileState::Active
            } else {
                format::FileState::Sealed
            },
        );
        std::fs::write(dir.path().join(&name), &chunk).unwrap();
        match Store::open(dir.path(), common::small_config()) {
            Ok((store, report)) => {
                // Only an active chunk may be repaired, and the damage is reported.
                prop_assert!(active, "sealed damage accepted");
                prop_assert_eq!(report.torn_tails.len(), 1);
                prop_assert!(store.stats().live_records <= recs.len() as u64);
            }
            Err(Error::Corrupt { file, offset, .. }) => {
                prop_assert!(
                    !active || i < format::CHUNK_HEADER_BYTES,
                    "active chunk refused"
                );
                prop_assert_eq!(
                    file.file_name().and_then(|n| n.to_str()),
                    Some(name.as_str())
                );
                prop_assert!(offset as usize <= i);
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
        Ok(())
    })
    .unwrap();
}
