//! The schema history: the file `SCHEMA` in the journal directory, which
//! binds a journal to the schema(s) its records were written under.
//!
//! Records are opaque bytes to the journal, and the tp's record codec writes
//! columns by position and type only, so a record means something only
//! together with the schema it was written under. The history says which
//! schema is in force from which sequence number on: entries of (first_seq,
//! schema text), first_seq strictly increasing; the entry in force at seq S
//! is the last one whose first_seq <= S. The journal never interprets the
//! text (the tp parses and compares schemas); it keeps it safe.
//!
//! Why a file beside the segments rather than records in the stream: the
//! sequence numbers and the record stream stay exactly what they were (a
//! standby receives the stream byte for byte, and every reader, tool and
//! offset stays valid), and trimming, which removes whole segments, keeps
//! the history by construction.
//!
//! The file is small and rewritten whole, atomically: a temporary file is
//! written and fsynced, renamed over `SCHEMA`, and the directory fsynced.
//! A crash leaves the old file or the new one, never a mix; a stale
//! temporary file is ignored and replaced. A history that fails its checks
//! is corruption: it is reported and never silently replaced.
//!
//! ```text
//! file header (24 bytes, little endian)
//!    0  8  magic b"TICKSCHM"
//!    8  4  u32 version (1)
//!   12  4  u32 entries (1 ..= SCHEMA_HISTORY_ENTRIES_MAX)
//!   16  4  u32 crc32c of bytes 0..16
//!   20  4  reserved, zero
//! entry (24-byte header + text), back to back, `entries` times
//!    0  4  u32 text_len (1 ..= SCHEMA_TEXT_BYTES_MAX)
//!    4  4  u32 crc32c of bytes 8 .. 24 + text_len of this entry
//!    8  8  u64 first_seq (>= 1, strictly increasing)
//!   16  8  i64 recorded_unix_ns (wall clock when the entry was recorded)
//!   24  text_len bytes: the schema, UTF-8 TOML, as the operator wrote it
//! nothing follows the last entry
//! ```

use std::path::{Path, PathBuf};

use crate::error::JournalError;
use crate::format::{u32_at, u64_at};
use crate::recovery::write_all_at;
use crate::storage::Storage;

type Result<T> = std::result::Result<T, JournalError>;

/// The history's file name inside the journal directory.
pub const SCHEMA_HISTORY_FILE: &str = "SCHEMA";
/// The temporary file a new history is written to before the rename.
pub const SCHEMA_HISTORY_TMP_FILE: &str = "SCHEMA.tmp";
/// First eight bytes of the history file.
pub const SCHEMA_HISTORY_MAGIC: [u8; 8] = *b"TICKSCHM";
/// The history format version this build writes and reads.
pub const SCHEMA_HISTORY_VERSION: u32 = 1;
/// Length of the file header, in bytes.
pub const SCHEMA_HISTORY_HEADER_BYTES: usize = 24;
/// Length of an entry's header (everything before its text), in bytes.
pub const SCHEMA_ENTRY_HEADER_BYTES: usize = 24;
/// Longest schema text one entry holds (the tp reads schema files of at most
/// 1 MiB, tickdb-core's `SCHEMA_FILE_BYTES_MAX`).
pub const SCHEMA_TEXT_BYTES_MAX: u32 = 1024 * 1024;
/// Most entries a history holds: one per schema change, so thousands of
/// restarts with a changed schema. Bounds the file and its read.
pub const SCHEMA_HISTORY_ENTRIES_MAX: u32 = 4096;
/// Largest history file read. A length above it is corruption, never an
/// allocation request.
pub const SCHEMA_HISTORY_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// One schema and the first sequence number it applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaEntry {
    pub first_seq: u64,
    pub recorded_unix_ns: i64,
    /// The schema as the operator wrote it (TOML), comments included.
    pub text: String,
}

/// The schemas a journal was written under, oldest first. Never empty;
/// `first_seq` strictly increasing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaHistory {
    entries: Vec<SchemaEntry>,
}

impl SchemaHistory {
    /// A history of the given entries, checked: at least one, at most
    /// `SCHEMA_HISTORY_ENTRIES_MAX`, first_seq >= 1 and strictly increasing,
    /// texts of 1 ..= `SCHEMA_TEXT_BYTES_MAX` bytes.
    pub fn new(entries: Vec<SchemaEntry>) -> Result<SchemaHistory> {
        if entries.is_empty() || entries.len() > SCHEMA_HISTORY_ENTRIES_MAX as usize {
            return Err(JournalError::BadInput(format!(
                "a schema history holds 1 to {SCHEMA_HISTORY_ENTRIES_MAX} entries, not {}",
                entries.len()
            )));
        }
        let mut prev = 0u64;
        for e in &entries {
            if e.first_seq <= prev {
                return Err(JournalError::BadInput(format!(
                    "schema history entries must start at increasing sequence numbers from 1: {} after {prev}",
                    e.first_seq
                )));
            }
            prev = e.first_seq;
            if e.text.is_empty() || e.text.len() > SCHEMA_TEXT_BYTES_MAX as usize {
                return Err(JournalError::BadInput(format!(
                    "a schema text of {} bytes is outside 1 ..= {SCHEMA_TEXT_BYTES_MAX}",
                    e.text.len()
                )));
            }
        }
        Ok(SchemaHistory { entries })
    }

    pub fn entries(&self) -> &[SchemaEntry] {
        &self.entries
    }

    /// The newest entry: the schema new records are written under.
    pub fn current(&self) -> &SchemaEntry {
        self.entries.last().expect("a history is never empty")
    }

    /// The entry in force at `seq`: the last one with first_seq <= seq.
    /// None for a seq before the first entry.
    pub fn in_force_at(&self, seq: u64) -> Option<&SchemaEntry> {
        let n = self.entries.partition_point(|e| e.first_seq <= seq);
        n.checked_sub(1).map(|i| &self.entries[i])
    }

    /// Where the history of the journal in `dir` lives.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(SCHEMA_HISTORY_FILE)
    }

    /// Reads the history of the journal in `dir`: None when the journal has
    /// none (a new directory, or a journal written before tickdb recorded
    /// schemas). A file that fails any check is `JournalError::Corrupt`, or
    /// `UnsupportedVersion`; it is never replaced by a caller's guess.
    pub fn read(storage: &dyn Storage, dir: &Path) -> Result<Option<SchemaHistory>> {
        let path = Self::path(dir);
        let len = match storage.file_len(&path) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(JournalError::io(&path, "stat schema history", e)),
        };
        if len > SCHEMA_HISTORY_BYTES_MAX {
            return Err(JournalError::Corrupt {
                file: path,
                offset: 0,
                reason: format!(
                    "schema history of {len} bytes is above the bound {SCHEMA_HISTORY_BYTES_MAX}"
                ),
            });
        }
        let bytes = storage
            .read_file(&path)
            .map_err(|e| JournalError::io(&path, "read schema history", e))?;
        Self::decode(&bytes, &path).map(Some)
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            SCHEMA_HISTORY_HEADER_BYTES
                + self
                    .entries
                    .iter()
                    .map(|e| SCHEMA_ENTRY_HEADER_BYTES + e.text.len())
                    .sum::<usize>(),
        );
        out.extend_from_slice(&SCHEMA_HISTORY_MAGIC);
        out.extend_from_slice(&SCHEMA_HISTORY_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c(&out[0..16]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        for e in &self.entries {
            let start = out.len();
            out.extend_from_slice(&(e.text.len() as u32).to_le_bytes());
            out.extend_from_slice(&[0u8; 4]);
            out.extend_from_slice(&e.first_seq.to_le_bytes());
            out.extend_from_slice(&e.recorded_unix_ns.to_le_bytes());
            out.extend_from_slice(e.text.as_bytes());
            let crc = crc32c::crc32c(&out[start + 8..]);
            out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        }
        out
    }

    /// Decodes and checks a history file's bytes; `file` names it in errors.
    pub fn decode(bytes: &[u8], file: &Path) -> Result<SchemaHistory> {
        let corrupt = |offset: usize, reason: String| JournalError::Corrupt {
            file: file.to_path_buf(),
            offset: offset as u64,
            reason: format!("schema history: {reason}"),
        };
        if bytes.len() < SCHEMA_HISTORY_HEADER_BYTES {
            return Err(corrupt(
                0,
                format!(
                    "file header cut short ({} of {SCHEMA_HISTORY_HEADER_BYTES} bytes)",
                    bytes.len()
                ),
            ));
        }
        if bytes[0..8] != SCHEMA_HISTORY_MAGIC {
            return Err(corrupt(0, "bad magic (expected TICKSCHM)".into()));
        }
        let stored = u32_at(bytes, 16);
        let computed = crc32c::crc32c(&bytes[0..16]);
        if stored != computed {
            return Err(corrupt(
                0,
                format!(
                    "file header fails its CRC32C check (stored {stored:#010x}, computed {computed:#010x})"
                ),
            ));
        }
        // The version is trusted only once the header's CRC matched, so a
        // flipped bit reads as corruption, not as a newer format.
        let version = u32_at(bytes, 8);
        if version != SCHEMA_HISTORY_VERSION {
            return Err(JournalError::UnsupportedVersion {
                file: file.to_path_buf(),
                version,
                supported: SCHEMA_HISTORY_VERSION,
            });
        }
        if bytes[20..24] != [0, 0, 0, 0] {
            return Err(corrupt(20, "reserved header bytes are not zero".into()));
        }
        let count = u32_at(bytes, 12);
        if count == 0 || count > SCHEMA_HISTORY_ENTRIES_MAX {
            return Err(corrupt(
                12,
                format!("{count} entries, expected 1 ..= {SCHEMA_HISTORY_ENTRIES_MAX}"),
            ));
        }
        let mut entries = Vec::with_capacity(count as usize);
        let mut off = SCHEMA_HISTORY_HEADER_BYTES;
        let mut prev = 0u64;
        for i in 0..count {
            let left = bytes.len() - off;
            if left < SCHEMA_ENTRY_HEADER_BYTES {
                return Err(corrupt(
                    off,
                    format!(
                        "entry {} of {count}: header cut short ({left} bytes)",
                        i + 1
                    ),
                ));
            }
            let text_len = u32_at(bytes, off);
            if text_len == 0 || text_len > SCHEMA_TEXT_BYTES_MAX {
                return Err(corrupt(
                    off,
                    format!(
                        "entry {} of {count}: text length {text_len} outside 1 ..= {SCHEMA_TEXT_BYTES_MAX}",
                        i + 1
                    ),
                ));
            }
            let end = SCHEMA_ENTRY_HEADER_BYTES + text_len as usize;
            if left < end {
                return Err(corrupt(
                    off,
                    format!(
                        "entry {} of {count}: {left} bytes left, {end} needed",
                        i + 1
                    ),
                ));
            }
            let stored = u32_at(bytes, off + 4);
            let computed = crc32c::crc32c(&bytes[off + 8..off + end]);
            if stored != computed {
                return Err(corrupt(
                    off,
                    format!(
                        "entry {} of {count} fails its CRC32C check (stored {stored:#010x}, computed {computed:#010x})",
                        i + 1
                    ),
                ));
            }
            let first_seq = u64_at(bytes, off + 8);
            if first_seq <= prev {
                return Err(corrupt(
                    off,
                    format!(
                        "entry {} of {count} starts at seq {first_seq}, not after {prev}",
                        i + 1
                    ),
                ));
            }
            prev = first_seq;
            let recorded_unix_ns = u64_at(bytes, off + 16) as i64;
            let text = std::str::from_utf8(&bytes[off + SCHEMA_ENTRY_HEADER_BYTES..off + end])
                .map_err(|_| {
                    corrupt(
                        off,
                        format!("entry {} of {count}: text is not UTF-8", i + 1),
                    )
                })?
                .to_string();
            entries.push(SchemaEntry {
                first_seq,
                recorded_unix_ns,
                text,
            });
            off += end;
        }
        if off != bytes.len() {
            return Err(corrupt(
                off,
                format!("{} bytes after the last entry", bytes.len() - off),
            ));
        }
        Ok(SchemaHistory { entries })
    }

    /// Replaces the history of the journal in `dir` with this one,
    /// atomically: writes `SCHEMA.tmp`, fdatasyncs it, renames it over
    /// `SCHEMA` and fsyncs the directory. Returns AFTER the directory fsync,
    /// whatever the journal's fsync policy (it happens once per start with a
    /// new schema, never on the write path). The caller must hold the
    /// journal's lock (the tp does: it writes the history right after
    /// `Journal::open`, before any record is appended).
    pub fn write(&self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let bytes = self.encode();
        let tmp = dir.join(SCHEMA_HISTORY_TMP_FILE);
        let path = Self::path(dir);
        // A temporary file left by a crash mid-write holds nothing we need.
        match storage.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(JournalError::io(&tmp, "remove stale schema history", e)),
        }
        let mut f = storage
            .create_new(&tmp)
            .map_err(|e| JournalError::io(&tmp, "create schema history", e))?;
        write_all_at(&mut *f, &tmp, 0, &bytes)?;
        f.sync_data()
            .map_err(|e| JournalError::io(&tmp, "fdatasync schema history", e))?;
        drop(f);
        storage
            .rename(&tmp, &path)
            .map_err(|e| JournalError::io(&path, "rename schema history into place", e))?;
        storage
            .sync_dir(dir)
            .map_err(|e| JournalError::io(dir, "sync directory", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FsStorage;

    fn entry(first_seq: u64, text: &str) -> SchemaEntry {
        SchemaEntry {
            first_seq,
            recorded_unix_ns: 1_700_000_000_000_000_000 + first_seq as i64,
            text: text.into(),
        }
    }

    #[test]
    fn round_trips_and_finds_the_entry_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStorage;
        assert_eq!(SchemaHistory::read(&fs, dir.path()).unwrap(), None);
        let h = SchemaHistory::new(vec![entry(1, "a"), entry(10, "b"), entry(11, "c")]).unwrap();
        h.write(&fs, dir.path()).unwrap();
        let back = SchemaHistory::read(&fs, dir.path()).unwrap().unwrap();
        assert_eq!(back, h);
        assert_eq!(back.in_force_at(0), None);
        assert_eq!(back.in_force_at(1).unwrap().text, "a");
        assert_eq!(back.in_force_at(9).unwrap().text, "a");
        assert_eq!(back.in_force_at(10).unwrap().text, "b");
        assert_eq!(back.in_force_at(u64::MAX).unwrap().text, "c");
        assert_eq!(back.current().text, "c");
        // A stale temporary file does not stop the next write.
        std::fs::write(dir.path().join(SCHEMA_HISTORY_TMP_FILE), b"junk").unwrap();
        let h2 = SchemaHistory::new(vec![entry(1, "a")]).unwrap();
        h2.write(&fs, dir.path()).unwrap();
        assert_eq!(SchemaHistory::read(&fs, dir.path()).unwrap().unwrap(), h2);
        assert!(!dir.path().join(SCHEMA_HISTORY_TMP_FILE).exists());
    }

    #[test]
    fn rejects_bad_entries() {
        assert!(SchemaHistory::new(vec![]).is_err());
        assert!(SchemaHistory::new(vec![entry(0, "a")]).is_err());
        assert!(SchemaHistory::new(vec![entry(2, "a"), entry(2, "b")]).is_err());
        assert!(SchemaHistory::new(vec![entry(1, "")]).is_err());
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_caught() {
        let h = SchemaHistory::new(vec![entry(1, "[[table]]"), entry(7, "x = 1")]).unwrap();
        let good = h.encode();
        let p = Path::new("SCHEMA");
        assert_eq!(SchemaHistory::decode(&good, p).unwrap(), h);
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                let r = SchemaHistory::decode(&bad, p);
                assert!(r.is_err(), "flip of byte {i} bit {bit} went unnoticed");
            }
        }
        for cut in 0..good.len() {
            assert!(
                SchemaHistory::decode(&good[..cut], p).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(SchemaHistory::decode(&longer, p).is_err());
    }

    #[test]
    fn a_newer_version_is_refused_as_such() {
        let mut b = SchemaHistory::new(vec![entry(1, "a")]).unwrap().encode();
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..16]);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            SchemaHistory::decode(&b, Path::new("SCHEMA")),
            Err(JournalError::UnsupportedVersion { version: 2, .. })
        ));
    }
}
