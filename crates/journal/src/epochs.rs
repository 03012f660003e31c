//! The epoch history of a journal (the file `EPOCHS`): which epoch (term)
//! wrote the records from which sequence number on, as Kafka's leader-epoch
//! checkpoint file does. Two journals agree up to the first sequence at
//! which their histories name different epochs: that is how an old primary
//! that comes back finds where it forked from the new one (KIP-101), and
//! how a node refuses a peer from an older epoch.
//!
//! The file is text, so an operator can read it:
//!
//! ```text
//! tickdb epochs 1
//! <epoch> <first_seq>
//! ...
//! ```
//!
//! one line per epoch, epochs strictly increasing, first sequences never
//! decreasing. It is replaced atomically (a temporary file, fdatasync,
//! rename, directory fsync) and always written BEFORE the first record of a
//! new epoch, so it is never behind the records; after a crash it may name
//! an epoch whose first record never reached the disk, which `Journal::open`
//! moves to the journal's next sequence. A journal without the file (written
//! before epochs existed) is all epoch 0.

use crate::error::JournalError;
use crate::format::EPOCH_MAX;
use crate::recovery::write_all_at;
use crate::storage::Storage;

type Result<T> = std::result::Result<T, JournalError>;
use std::path::{Path, PathBuf};

/// The file name of the epoch history, in the journal directory.
pub const EPOCHS_FILE: &str = "EPOCHS";
const EPOCHS_TMP_FILE: &str = "EPOCHS.tmp";
const EPOCHS_MAGIC_LINE: &str = "tickdb epochs 1";
/// A history longer than this is refused as corrupt rather than read: at
/// one promotion a minute it is two years of failovers.
pub const EPOCH_ENTRIES_MAX: usize = 1_000_000;

/// One epoch and the first sequence written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: u32,
    pub first_seq: u64,
}

/// The epochs of one journal, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    entries: Vec<EpochStart>,
}

impl EpochHistory {
    /// A history from entries, checked: epochs strictly increasing and at
    /// most EPOCH_MAX, first sequences at least 1 and never decreasing.
    pub fn new(entries: Vec<EpochStart>) -> std::result::Result<EpochHistory, String> {
        for (i, e) in entries.iter().enumerate() {
            if e.epoch > EPOCH_MAX {
                return Err(format!(
                    "epoch {} is above the largest, {EPOCH_MAX}",
                    e.epoch
                ));
            }
            if e.first_seq == 0 {
                return Err(format!("epoch {} starts at seq 0", e.epoch));
            }
            if i > 0 {
                let p = entries[i - 1];
                if e.epoch <= p.epoch {
                    return Err(format!(
                        "epoch {} follows epoch {}: epochs must grow",
                        e.epoch, p.epoch
                    ));
                }
                if e.first_seq < p.first_seq {
                    return Err(format!(
                        "epoch {} starts at seq {}, before epoch {} (seq {})",
                        e.epoch, e.first_seq, p.epoch, p.first_seq
                    ));
                }
            }
        }
        Ok(EpochHistory { entries })
    }

    pub fn entries(&self) -> &[EpochStart] {
        &self.entries
    }

    /// The newest epoch (0 when none was ever begun).
    pub fn last_epoch(&self) -> u32 {
        self.entries.last().map(|e| e.epoch).unwrap_or(0)
    }

    /// The epoch that wrote `seq` (0 for a sequence before every entry).
    pub fn epoch_at(&self, seq: u64) -> u32 {
        match self.entries.partition_point(|e| e.first_seq <= seq) {
            0 => 0,
            n => self.entries[n - 1].epoch,
        }
    }

    /// Records that `epoch` starts at `first_seq`. Refused when the epoch
    /// does not grow, or starts before the newest one did.
    pub fn push(&mut self, epoch: u32, first_seq: u64) -> std::result::Result<(), String> {
        let mut v = self.entries.clone();
        v.push(EpochStart { epoch, first_seq });
        *self = EpochHistory::new(v)?;
        Ok(())
    }

    /// Makes the history fit a journal that ends at `last_seq`: an epoch
    /// whose first record never reached the disk starts at `last_seq + 1`,
    /// and of several epochs starting there only the newest stays (the
    /// older ones wrote nothing that survived). Returns whether it changed.
    pub fn fit_to(&mut self, last_seq: u64) -> bool {
        let next = last_seq + 1;
        let before = self.entries.clone();
        for e in &mut self.entries {
            if e.first_seq > next {
                e.first_seq = next;
            }
        }
        let mut kept: Vec<EpochStart> = Vec::with_capacity(self.entries.len());
        for e in self.entries.drain(..) {
            if kept.last().is_some_and(|p| p.first_seq == e.first_seq) {
                kept.pop();
            }
            kept.push(e);
        }
        self.entries = kept;
        self.entries != before
    }

    /// Forgets every epoch that starts after `seq` (a cut journal that now
    /// ends at `seq`). Returns the epochs dropped.
    pub fn truncate_after(&mut self, seq: u64) -> Vec<EpochStart> {
        let keep = self.entries.partition_point(|e| e.first_seq <= seq);
        self.entries.split_off(keep)
    }

    /// The last sequence at which this history (of a journal ending at
    /// `my_last`) and `other` (of one ending at `other_last`) agree: every
    /// sequence up to it was written in the same epoch in both, so, since
    /// no two nodes write in the same epoch, both journals hold the same
    /// records up to it. Past it they diverge (or one of them ends).
    pub fn fork_point(&self, my_last: u64, other: &EpochHistory, other_last: u64) -> u64 {
        let end = my_last.min(other_last);
        // The epoch assignment can only change where either history starts
        // an epoch: check each such boundary in order.
        let mut bounds: Vec<u64> = self
            .entries
            .iter()
            .chain(other.entries.iter())
            .map(|e| e.first_seq)
            .filter(|&s| s <= end)
            .collect();
        bounds.push(1);
        bounds.sort_unstable();
        bounds.dedup();
        for s in bounds {
            if s > end {
                break;
            }
            if self.epoch_at(s) != other.epoch_at(s) {
                return s - 1;
            }
        }
        end
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(EPOCHS_FILE)
    }

    /// Reads the history in `dir` (empty when there is none).
    pub fn read(storage: &dyn Storage, dir: &Path) -> Result<EpochHistory> {
        let path = Self::path(dir);
        let bytes = match storage.read_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(EpochHistory::default())
            }
            Err(e) => return Err(JournalError::io(&path, "read epoch history", e)),
        };
        Self::decode(&bytes).map_err(|why| JournalError::Corrupt {
            file: path.clone(),
            offset: 0,
            reason: format!("epoch history: {why}"),
        })
    }

    /// Parses the text of an `EPOCHS` file.
    pub fn decode(bytes: &[u8]) -> std::result::Result<EpochHistory, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let mut lines = text.lines();
        if lines.next() != Some(EPOCHS_MAGIC_LINE) {
            return Err(format!("the first line is not '{EPOCHS_MAGIC_LINE}'"));
        }
        let mut entries = Vec::new();
        for (i, line) in lines.enumerate() {
            if entries.len() >= EPOCH_ENTRIES_MAX {
                return Err(format!("more than {EPOCH_ENTRIES_MAX} entries"));
            }
            let mut f = line.split(' ');
            let (Some(e), Some(s), None) = (f.next(), f.next(), f.next()) else {
                return Err(format!(
                    "line {}: '{line}' is not '<epoch> <first_seq>'",
                    i + 2
                ));
            };
            let (Ok(epoch), Ok(first_seq)) = (e.parse::<u32>(), s.parse::<u64>()) else {
                return Err(format!("line {}: '{line}' is not two numbers", i + 2));
            };
            entries.push(EpochStart { epoch, first_seq });
        }
        EpochHistory::new(entries)
    }

    pub fn encode(&self) -> String {
        let mut s = String::from(EPOCHS_MAGIC_LINE);
        s.push('\n');
        for e in &self.entries {
            s.push_str(&format!("{} {}\n", e.epoch, e.first_seq));
        }
        s
    }

    /// Replaces the history in `dir` atomically; returns AFTER the directory
    /// fsync, whatever the journal's fsync policy (an epoch begins once per
    /// promotion, never on the write path). The caller holds the journal's
    /// lock.
    pub fn write(&self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let tmp = dir.join(EPOCHS_TMP_FILE);
        let path = Self::path(dir);
        match storage.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(JournalError::io(&tmp, "remove stale epoch history", e)),
        }
        let mut f = storage
            .create_new(&tmp)
            .map_err(|e| JournalError::io(&tmp, "create epoch history", e))?;
        write_all_at(&mut *f, &tmp, 0, self.encode().as_bytes())?;
        f.sync_data()
            .map_err(|e| JournalError::io(&tmp, "fdatasync epoch history", e))?;
        drop(f);
        storage
            .rename(&tmp, &path)
            .map_err(|e| JournalError::io(&path, "rename epoch history into place", e))?;
        storage
            .sync_dir(dir)
            .map_err(|e| JournalError::io(dir, "sync directory", e))
    }
}

impl std::fmt::Display for EpochHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.entries.is_empty() {
            return write!(f, "[epoch 0 from seq 1]");
        }
        let parts: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("epoch {} from seq {}", e.epoch, e.first_seq))
            .collect();
        write!(f, "[{}]", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FsStorage;

    fn h(v: &[(u32, u64)]) -> EpochHistory {
        EpochHistory::new(
            v.iter()
                .map(|&(epoch, first_seq)| EpochStart { epoch, first_seq })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn epoch_at_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStorage;
        assert_eq!(EpochHistory::read(&fs, dir.path()).unwrap(), h(&[]));
        let x = h(&[(1, 1), (3, 50), (4, 90)]);
        x.write(&fs, dir.path()).unwrap();
        let back = EpochHistory::read(&fs, dir.path()).unwrap();
        assert_eq!(back, x);
        assert_eq!(back.epoch_at(49), 1);
        assert_eq!(back.epoch_at(50), 3);
        assert_eq!(back.epoch_at(1000), 4);
        assert_eq!(h(&[(2, 10)]).epoch_at(9), 0);
    }

    #[test]
    fn refuses_what_does_not_grow_and_bad_text() {
        assert!(EpochHistory::new(vec![
            EpochStart {
                epoch: 2,
                first_seq: 1
            },
            EpochStart {
                epoch: 2,
                first_seq: 5
            }
        ])
        .is_err());
        assert!(h(&[(2, 10)]).clone().push(3, 9).is_err());
        for bad in [
            &b"tickdb epochs 2\n"[..],
            b"tickdb epochs 1\n1\n",
            b"tickdb epochs 1\n1 x\n",
            b"tickdb epochs 1\n1 5 6\n",
            b"\xff",
        ] {
            assert!(EpochHistory::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fork_points() {
        // The same history: they agree up to the shorter journal.
        let a = h(&[(1, 1)]);
        assert_eq!(a.fork_point(100, &a, 80), 80);
        // B was promoted at seq 91 (epoch 2) while A went on in epoch 1 to
        // seq 100: A keeps 1..=90.
        let b = h(&[(1, 1), (2, 91)]);
        assert_eq!(a.fork_point(100, &b, 120), 90);
        assert_eq!(b.fork_point(120, &a, 100), 90);
        // A journal from before epochs (all epoch 0) against a promoted one.
        let old = h(&[]);
        let p = h(&[(5, 41)]);
        assert_eq!(old.fork_point(60, &p, 70), 40);
        // Nothing in common at all.
        assert_eq!(h(&[(1, 1)]).fork_point(10, &h(&[(2, 1)]), 10), 0);
    }

    #[test]
    fn fit_and_truncate() {
        let mut x = h(&[(1, 1), (2, 50), (3, 60)]);
        assert!(x.fit_to(45));
        assert_eq!(x, h(&[(1, 1), (3, 46)]));
        let dropped = x.truncate_after(45);
        assert_eq!(
            dropped,
            vec![EpochStart {
                epoch: 3,
                first_seq: 46
            }]
        );
        assert_eq!(x, h(&[(1, 1)]));
    }
}
