//! The writer: sequence numbering, the in-memory write buffer, group
//! commit, segment rolling, fsync policy and poisoning. Recovery runs first,
//! inside `open`, so a `Journal` always starts at the end of a consistent
//! journal.
//!
//! A follower (a standby replicating a primary) writes through the same
//! machinery: `append_raw` takes a record's exact bytes as the primary wrote
//! them, `roll_segment_at` starts a segment exactly where and as the primary
//! did, `RollPolicy::Manual` keeps the follower from rolling on its own, and
//! `JournalOptions::first_seq` starts a new journal at a later sequence
//! number (a standby bootstrapped from a checkpoint).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::epochs::EpochHistory;
use crate::error::JournalError;
use crate::format::{
    check_record, encode_record_in, segment_file_name, RecordCheck, SegmentHeader, DAY_NS,
    RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX, SEGMENT_BYTES_MAX_DEFAULT, SEGMENT_HEADER_BYTES,
};
use crate::recovery::{recover, write_all_at, RecoveryReport};
use crate::storage::{FsStorage, Storage, StorageFile};

type Result<T> = std::result::Result<T, JournalError>;

/// Most bytes of records `append` buffers before `commit` must be called.
/// Bounds memory if a caller forgets to commit; `append` fails beyond it.
pub const WRITE_BUFFER_BYTES_MAX: usize = 1024 * 1024 * 1024;

/// Smallest `segment_bytes_max` accepted: a header and one empty record.
pub const SEGMENT_BYTES_MIN: u64 = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES;

/// When `commit` makes written records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Every `commit` fdatasyncs before it returns: an acknowledged record
    /// survives power loss. Group commit amortises the fsync over the batch.
    Always,
    /// `commit` fdatasyncs only if this many milliseconds passed since the
    /// last fsync; the caller also calls `sync` when `sync_due_in` elapses.
    /// A committed record survives a process crash at once, and power loss
    /// once the next sync ran: up to N ms can be lost on power loss.
    IntervalMs(u64),
    /// Never fsync (except on `sync`/`close`): committed records survive a
    /// process crash; the OS decides when they reach the disk.
    Never,
}

/// What recovery at open does with corruption that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Refuse to open: the error names the file and offset. Torn tails are
    /// still truncated (they are the normal result of a crash).
    #[default]
    Strict,
    /// Keep the longest consistent prefix; move everything after it into a
    /// `dropped-<unix seconds>/` directory inside the journal, and report it.
    PointInTime,
}

/// Whether the journal starts new segments on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RollPolicy {
    /// A segment is closed when the next record would take it past
    /// `segment_bytes_max`, and when the UTC day changes; also on
    /// `roll_segment` / `roll_segment_at`. For a primary.
    #[default]
    Automatic,
    /// Segments are started only by `roll_segment` and `roll_segment_at`;
    /// `segment_bytes_max` is not enforced. For a follower, whose segments
    /// must start exactly where the primary's did.
    Manual,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalOptions {
    /// A segment is closed when the next record would take it past this many
    /// bytes (a single larger record still gets a segment of its own).
    /// Enforced under `RollPolicy::Automatic` only.
    pub segment_bytes_max: u64,
    pub fsync: FsyncPolicy,
    pub recovery: RecoveryMode,
    pub roll: RollPolicy,
    /// For a new journal (the directory holds no segment): the sequence
    /// number of its first record (None: 1). Its first segment is then
    /// `journal-{S:020}.log`: a standby bootstrapped from a checkpoint at
    /// S - 1 continues at S. For an existing journal it is only checked: a
    /// journal that continues at a seq below S is refused (BadInput), since
    /// appending at S would leave a gap; one that already continues at S or
    /// beyond opens as usual.
    pub first_seq: Option<u64>,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            segment_bytes_max: SEGMENT_BYTES_MAX_DEFAULT,
            fsync: FsyncPolicy::Always,
            recovery: RecoveryMode::Strict,
            roll: RollPolicy::Automatic,
            first_seq: None,
        }
    }
}

/// Records appended but not yet written, grouped by the segment they go to.
struct Pending {
    /// Some(created_unix_ns): start a new segment before writing these.
    roll: Option<i64>,
    first_seq: u64,
    last_seq: u64,
    bytes: Vec<u8>,
}

/// The segment being written.
struct Active {
    path: PathBuf,
    header: SegmentHeader,
    file: Box<dyn StorageFile>,
    /// Bytes written to the file (header included).
    len: u64,
}

/// The journal writer. One per directory (an exclusive lock is held).
pub struct Journal {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    opts: JournalOptions,
    _lock: Box<dyn std::any::Any + Send + Sync>,
    active: Active,
    pending: Vec<Pending>,
    pending_bytes: usize,
    /// The segment appends go into, counting buffered records.
    seg_len: u64,
    seg_records: u64,
    seg_day: i64,
    last_seq: u64,
    written_seq: u64,
    synced_seq: u64,
    /// Bytes were written since the last fdatasync.
    dirty: bool,
    last_sync: Instant,
    poisoned: Option<String>,
    /// Which epoch wrote which records (the file `EPOCHS`), and the epoch
    /// new records are written in (the newest one).
    epochs: EpochHistory,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .field("segment", &self.active.path)
            .field("last_seq", &self.last_seq)
            .field("written_seq", &self.written_seq)
            .field("synced_seq", &self.synced_seq)
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir` on real files, runs
    /// recovery, and returns what recovery did. Returns after any truncation,
    /// the tail segment and (for a new journal) the first segment and the
    /// directory are fsynced.
    pub fn open(dir: &Path, opts: JournalOptions) -> Result<(Journal, RecoveryReport)> {
        Journal::open_with(Arc::new(FsStorage), dir, opts)
    }

    /// Same as `open`, over an explicit storage backend (the I/O seam, for
    /// fault injection).
    pub fn open_with(
        storage: Arc<dyn Storage>,
        dir: &Path,
        opts: JournalOptions,
    ) -> Result<(Journal, RecoveryReport)> {
        if opts.segment_bytes_max < SEGMENT_BYTES_MIN {
            return Err(JournalError::BadInput(format!(
                "segment_bytes_max {} is below the minimum {SEGMENT_BYTES_MIN}",
                opts.segment_bytes_max
            )));
        }
        if opts.first_seq == Some(0) {
            return Err(JournalError::BadInput(
                "first_seq 0 asked for: sequence numbers start at 1".into(),
            ));
        }
        storage
            .create_dir_all(dir)
            .map_err(|e| JournalError::io(dir, "create directory", e))?;
        let lock = storage.lock_dir(dir).map_err(|e| JournalError::Locked {
            dir: dir.to_path_buf(),
            source: e,
        })?;
        let (plan, mut report) = recover(&*storage, dir, opts.recovery)?;
        let sync_meta = opts.fsync != FsyncPolicy::Never;
        let (active, first_seq, tail_records, created) = match (&plan.tail, plan.segs.last()) {
            (Some(tail), Some(_)) => {
                let seg = &plan.segs[tail.index];
                let mut file = storage
                    .open_write(&seg.path)
                    .map_err(|e| JournalError::io(&seg.path, "open segment", e))?;
                // A crashed predecessor may have left written but unsynced
                // records in the page cache; make them durable before they
                // count as synced.
                file.sync_data()
                    .map_err(|e| JournalError::io(&seg.path, "sync segment", e))?;
                let active = Active {
                    path: seg.path.clone(),
                    header: SegmentHeader {
                        first_seq: seg.first_seq,
                        created_unix_ns: tail.created_unix_ns,
                    },
                    file,
                    len: tail.valid_end,
                };
                (active, seg.first_seq, tail.records, tail.created_unix_ns)
            }
            _ => {
                let created = storage.now_unix_ns();
                let first = opts.first_seq.unwrap_or(1);
                let active = create_segment(&*storage, dir, first, created, sync_meta)?;
                report.segments = 1;
                (active, first, 0, created)
            }
        };
        let last_seq = first_seq + tail_records - 1;
        if let Some(s) = opts.first_seq {
            // Appending at S on a journal that ends before S - 1 would leave
            // records missing: the caller means a new journal, and this
            // directory holds an old one.
            if s > last_seq + 1 {
                return Err(JournalError::BadInput(format!(
                    "first_seq {s} asked for, but the journal in {} already exists and continues \
                     at seq {}: first_seq starts a new journal only (an empty directory); move \
                     the old journal aside",
                    dir.display(),
                    last_seq + 1
                )));
            }
        }
        report.last_seq = last_seq;
        let mut epochs = EpochHistory::read(&*storage, dir)?;
        if epochs.fit_to(last_seq) {
            // An epoch began (promotion) but its first record did not
            // survive the crash: it starts at the next record instead.
            epochs.write(&*storage, dir)?;
            tracing::warn!(dir = %dir.display(), "epoch history fitted to a journal ending at seq {last_seq}: {epochs}");
        }
        let journal = Journal {
            storage,
            dir: dir.to_path_buf(),
            opts,
            _lock: lock,
            seg_len: active.len,
            active,
            pending: Vec::new(),
            pending_bytes: 0,
            seg_records: tail_records,
            seg_day: created.div_euclid(DAY_NS),
            last_seq,
            written_seq: last_seq,
            synced_seq: last_seq,
            dirty: false,
            last_sync: Instant::now(),
            poisoned: None,
            epochs,
        };
        tracing::info!(dir = %journal.dir.display(), last_seq, epoch = journal.epoch(), "journal open");
        Ok((journal, report))
    }

    /// The highest sequence number assigned (0 when the journal is empty).
    /// Sequence numbers start at 1.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The epoch new records are written in (0 until one is begun).
    pub fn epoch(&self) -> u32 {
        self.epochs.last_epoch()
    }

    /// Which epoch wrote which records.
    pub fn epoch_history(&self) -> &EpochHistory {
        &self.epochs
    }

    /// Begins `epoch` (a promotion): the records appended from now on carry
    /// it. The epoch must be above every epoch this journal has seen (else
    /// `BadInput`, changing nothing). Buffered records are written first and
    /// the segment is rolled (when it holds records), so that an epoch's
    /// records start in a segment of their own, then the history entry
    /// (`epoch`, `last_seq() + 1`) is made durable. Returns AFTER the
    /// history's fsync, whatever the fsync policy.
    pub fn begin_epoch(&mut self, epoch: u32) -> Result<()> {
        self.check_poisoned()?;
        if epoch <= self.epoch() || epoch > crate::format::EPOCH_MAX {
            return Err(JournalError::BadInput(format!(
                "epoch {epoch} cannot begin: this journal is at epoch {} (an epoch must grow, up to {})",
                self.epoch(),
                crate::format::EPOCH_MAX
            )));
        }
        self.roll_segment()?;
        let mut next = self.epochs.clone();
        next.push(epoch, self.last_seq + 1)
            .map_err(JournalError::BadInput)?;
        if let Err(e) = next.write(&*self.storage, &self.dir) {
            return Err(self.poison(e));
        }
        self.epochs = next;
        Ok(())
    }

    /// Switches between rolling segments by size and day (a primary) and
    /// rolling only where told (a standby, which rolls where its primary
    /// did). Promotion and demotion switch it.
    pub fn set_roll_policy(&mut self, roll: RollPolicy) {
        self.opts.roll = roll;
    }

    /// The highest sequence number written to the OS by `commit`.
    pub fn written_seq(&self) -> u64 {
        self.written_seq
    }

    /// The highest sequence number known to be fdatasynced.
    pub fn synced_seq(&self) -> u64 {
        self.synced_seq
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn options(&self) -> &JournalOptions {
        &self.opts
    }

    /// The segment file being written.
    pub fn segment_path(&self) -> &Path {
        &self.active.path
    }

    /// The header of the segment file being written (records buffered for a
    /// segment not yet rolled to are not counted).
    pub fn segment_header(&self) -> SegmentHeader {
        self.active.header
    }

    /// Why the journal refuses writes, after a failed write or fsync. Cleared
    /// only by reopening (restarting the process).
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Buffers one record in memory and assigns its sequence number. Returns
    /// BEFORE any write or fsync: the record is not durable, nor even written,
    /// until `commit` returns Ok.
    pub fn append(&mut self, kind: u8, rows: u32, time_ns: i64, payload: &[u8]) -> Result<u64> {
        self.check_poisoned()?;
        if payload.len() > RECORD_PAYLOAD_BYTES_MAX as usize {
            return Err(JournalError::BadInput(format!(
                "payload of {} bytes is above the record bound {RECORD_PAYLOAD_BYTES_MAX}",
                payload.len()
            )));
        }
        let rec_len = RECORD_HEADER_BYTES as usize + payload.len();
        let epoch = self.epoch();
        self.buffer_record(rec_len, |out, seq| {
            encode_record_in(out, epoch, seq, kind, rows, time_ns, payload)
        })
    }

    /// Buffers one record exactly as given: `record` is a whole record as a
    /// journal holds it on disk (32-byte header and payload, e.g. from
    /// `RawReader` on a primary), and the journal will hold the very same
    /// bytes. Checks it first: its length field must match its length, its
    /// reserved bytes be zero and its CRC32C match (else `BadInput`), and its
    /// seq must be exactly `last_seq() + 1` (else `OutOfSequence`, naming
    /// both). A refused record changes nothing and does not poison the
    /// journal. Returns the seq, BEFORE any write or fsync, like `append`:
    /// the record is durable once a later `commit` returns Ok (per the fsync
    /// policy). Under `RollPolicy::Automatic` it may roll a segment like
    /// `append`; a follower opens with `RollPolicy::Manual` and rolls with
    /// `roll_segment_at`.
    pub fn append_raw(&mut self, record: &[u8]) -> Result<u64> {
        self.check_poisoned()?;
        let h = match check_record(record, 0) {
            RecordCheck::Ok(h) => h,
            bad => {
                return Err(JournalError::BadInput(format!(
                    "shipped record of {} bytes refused: {}",
                    record.len(),
                    bad.problem().unwrap_or_default()
                )))
            }
        };
        if h.total_len() != record.len() as u64 {
            return Err(JournalError::BadInput(format!(
                "shipped record seq {} refused: {} bytes given, its header says {}",
                h.seq,
                record.len(),
                h.total_len()
            )));
        }
        let expected = self.last_seq + 1;
        if h.seq != expected {
            return Err(JournalError::OutOfSequence {
                what: "shipped record",
                expected,
                found: h.seq,
            });
        }
        let mine = self.epoch();
        if h.epoch < mine {
            return Err(JournalError::BadInput(format!(
                "shipped record seq {} refused: it was written in epoch {}, and this journal is at epoch {mine}, a newer one",
                h.seq, h.epoch
            )));
        }
        if h.epoch > mine {
            // The history is written before the record, so it is never
            // behind the records on disk.
            self.write_pending()?;
            let mut next = self.epochs.clone();
            next.push(h.epoch, h.seq).map_err(JournalError::BadInput)?;
            if let Err(e) = next.write(&*self.storage, &self.dir) {
                return Err(self.poison(e));
            }
            self.epochs = next;
        }
        self.buffer_record(record.len(), |out, _| out.extend_from_slice(record))
    }

    /// Assigns the next seq to a record of `rec_len` bytes, decides whether
    /// it starts a new segment, and has `write` append its bytes (given the
    /// seq) to the pending buffer.
    fn buffer_record(
        &mut self,
        rec_len: usize,
        write: impl FnOnce(&mut Vec<u8>, u64),
    ) -> Result<u64> {
        if self.pending_bytes + rec_len > WRITE_BUFFER_BYTES_MAX {
            return Err(JournalError::BadInput(format!(
                "write buffer full ({} bytes buffered, bound {WRITE_BUFFER_BYTES_MAX}): commit first",
                self.pending_bytes
            )));
        }
        let seq = self.last_seq + 1;
        let now = self.storage.now_unix_ns();
        let day = now.div_euclid(DAY_NS);
        if self.seg_records == 0 {
            // An empty segment is adopted by whatever day writes to it first.
            self.seg_day = day;
        }
        let roll = self.opts.roll == RollPolicy::Automatic
            && self.seg_records > 0
            && (self.seg_len + rec_len as u64 > self.opts.segment_bytes_max || day != self.seg_day);
        if roll {
            self.pending.push(Pending {
                roll: Some(now),
                first_seq: seq,
                last_seq: seq,
                bytes: Vec::new(),
            });
            self.seg_len = SEGMENT_HEADER_BYTES;
            self.seg_records = 0;
            self.seg_day = day;
        } else if self.pending.is_empty() {
            self.pending.push(Pending {
                roll: None,
                first_seq: seq,
                last_seq: seq,
                bytes: Vec::new(),
            });
        }
        let chunk = self.pending.last_mut().expect("pushed above when empty");
        write(&mut chunk.bytes, seq);
        chunk.last_seq = seq;
        self.seg_len += rec_len as u64;
        self.seg_records += 1;
        self.pending_bytes += rec_len;
        self.last_seq = seq;
        Ok(seq)
    }

    /// The group-commit point. Writes all buffered records to the OS (write
    /// syscalls), rolling segments as needed, then fdatasyncs if the policy is
    /// `Always`, or `IntervalMs` and the interval has elapsed since the last
    /// sync. Returns AFTER that fsync. Ok(true) means every record appended so
    /// far is fdatasynced; Ok(false) means written to the OS only.
    /// Any failure poisons the journal and returns the I/O error.
    pub fn commit(&mut self) -> Result<bool> {
        self.check_poisoned()?;
        self.write_pending()?;
        let due = match self.opts.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::IntervalMs(ms) => self.last_sync.elapsed() >= Duration::from_millis(ms),
            FsyncPolicy::Never => false,
        };
        if due && self.dirty {
            self.sync_now()?;
        }
        Ok(!self.dirty && self.synced_seq == self.last_seq)
    }

    /// fdatasyncs now if anything written is unsynced (the interval timer
    /// calls this when idle). Returns AFTER the fsync. Records appended but
    /// not yet committed are not written by this call.
    pub fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
        if self.dirty {
            self.sync_now()?;
        }
        Ok(())
    }

    /// For `IntervalMs`: how long until a sync is due, if written bytes are
    /// unsynced (None otherwise, and always None under other policies).
    pub fn sync_due_in(&self) -> Option<Duration> {
        match self.opts.fsync {
            FsyncPolicy::IntervalMs(ms) if self.dirty && self.poisoned.is_none() => {
                Some(Duration::from_millis(ms).saturating_sub(self.last_sync.elapsed()))
            }
            _ => None,
        }
    }

    /// Closes the current segment and starts the next one (end of day, or an
    /// operator's request). Buffered records are written first. Unless the
    /// policy is `Never`, returns AFTER the closed segment, the new segment's
    /// header and the directory are fdatasynced. A segment with no record is
    /// not rolled.
    pub fn roll_segment(&mut self) -> Result<()> {
        self.check_poisoned()?;
        self.write_pending()?;
        if self.seg_records == 0 {
            return Ok(());
        }
        let now = self.storage.now_unix_ns();
        self.roll_to(self.last_seq + 1, now)?;
        self.seg_len = SEGMENT_HEADER_BYTES;
        self.seg_records = 0;
        self.seg_day = now.div_euclid(DAY_NS);
        Ok(())
    }

    /// Starts the segment `journal-{first_seq:020}.log` with the header
    /// (`first_seq`, `created_unix_ns`), exactly as the primary did, so that a
    /// follower's segment files are the primary's byte for byte. `first_seq`
    /// must be `last_seq() + 1` (else `OutOfSequence`, changing nothing).
    /// Buffered records are written first. When the current segment holds no
    /// record yet (a journal just created, or a crash right after a roll),
    /// it already bears that name, and its header is rewritten in place if
    /// its creation time differs. Unless the policy is `Never`, returns AFTER
    /// the closed segment, the new header and the directory are fdatasynced,
    /// like `roll_segment`. A failure to write poisons the journal.
    pub fn roll_segment_at(&mut self, first_seq: u64, created_unix_ns: i64) -> Result<()> {
        self.check_poisoned()?;
        let expected = self.last_seq + 1;
        if first_seq != expected {
            return Err(JournalError::OutOfSequence {
                what: "segment start",
                expected,
                found: first_seq,
            });
        }
        self.write_pending()?;
        if self.seg_records == 0 {
            self.rewrite_empty_header(created_unix_ns)?;
        } else {
            self.roll_to(first_seq, created_unix_ns)?;
            self.seg_len = SEGMENT_HEADER_BYTES;
            self.seg_records = 0;
        }
        self.seg_day = created_unix_ns.div_euclid(DAY_NS);
        Ok(())
    }

    /// Gives the active segment, which holds no record, the creation time
    /// `created_unix_ns`. Its first seq is already `last_seq + 1` (an empty
    /// segment always starts at the next seq).
    fn rewrite_empty_header(&mut self, created_unix_ns: i64) -> Result<()> {
        if self.active.header.created_unix_ns == created_unix_ns {
            return Ok(());
        }
        let header = SegmentHeader {
            first_seq: self.active.header.first_seq,
            created_unix_ns,
        };
        // The segment holds only its header, so overwriting it in place loses
        // nothing; a torn overwrite is a torn header with nothing after it,
        // which recovery rewrites (as it does after a crash during a roll).
        if let Err(e) = write_all_at(
            &mut *self.active.file,
            &self.active.path,
            0,
            &header.encode(),
        ) {
            return Err(self.poison(e));
        }
        if self.opts.fsync != FsyncPolicy::Never {
            if let Err(e) = self.active.file.sync_data() {
                let e = JournalError::io(&self.active.path, "fdatasync", e);
                return Err(self.poison(e));
            }
        }
        self.active.header = header;
        Ok(())
    }

    /// Commits and fdatasyncs whatever is buffered, whatever the policy, and
    /// closes the journal. Returns AFTER the fsync.
    pub fn close(mut self) -> Result<()> {
        self.check_poisoned()?;
        self.write_pending()?;
        self.sync()
    }

    fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(p) => Err(JournalError::Poisoned(p.clone())),
            None => Ok(()),
        }
    }

    /// Records the first failure and hands the error back.
    fn poison(&mut self, e: JournalError) -> JournalError {
        if self.poisoned.is_none() {
            tracing::error!(dir = %self.dir.display(), error = %e, "journal poisoned: no more writes until restart");
            self.poisoned = Some(e.to_string());
        }
        self.pending.clear();
        self.pending_bytes = 0;
        e
    }

    fn write_pending(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        for chunk in pending {
            if let Some(created) = chunk.roll {
                self.roll_to(chunk.first_seq, created)?;
            }
            if chunk.bytes.is_empty() {
                continue;
            }
            let r = write_all_at(
                &mut *self.active.file,
                &self.active.path,
                self.active.len,
                &chunk.bytes,
            );
            if let Err(e) = r {
                return Err(self.poison(e));
            }
            self.active.len += chunk.bytes.len() as u64;
            self.written_seq = chunk.last_seq;
            self.dirty = true;
        }
        Ok(())
    }

    fn sync_now(&mut self) -> Result<()> {
        if let Err(e) = self.active.file.sync_data() {
            let e = JournalError::io(&self.active.path, "fdatasync", e);
            return Err(self.poison(e));
        }
        self.synced_seq = self.written_seq;
        self.dirty = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Closes the active segment and creates the one starting at `first_seq`.
    fn roll_to(&mut self, first_seq: u64, created_unix_ns: i64) -> Result<()> {
        let sync_meta = self.opts.fsync != FsyncPolicy::Never;
        // Make the closing segment durable first, so that a power loss can
        // never leave a later segment on disk while this one is torn (which
        // recovery would have to call corruption).
        if sync_meta && self.dirty {
            self.sync_now()?;
        }
        match create_segment(
            &*self.storage,
            &self.dir,
            first_seq,
            created_unix_ns,
            sync_meta,
        ) {
            Ok(a) => {
                tracing::info!(segment = %a.path.display(), "journal: new segment");
                self.active = a;
                Ok(())
            }
            Err(e) => Err(self.poison(e)),
        }
    }
}

/// Creates a segment file and writes its header; with `sync`, fdatasyncs it
/// and the directory before returning.
fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    first_seq: u64,
    created_unix_ns: i64,
    sync: bool,
) -> Result<Active> {
    let path = dir.join(segment_file_name(first_seq));
    let mut file = storage
        .create_new(&path)
        .map_err(|e| JournalError::io(&path, "create segment", e))?;
    let header = SegmentHeader {
        first_seq,
        created_unix_ns,
    };
    write_all_at(&mut *file, &path, 0, &header.encode())?;
    if sync {
        file.sync_data()
            .map_err(|e| JournalError::io(&path, "fdatasync", e))?;
        storage
            .sync_dir(dir)
            .map_err(|e| JournalError::io(dir, "sync directory", e))?;
    }
    Ok(Active {
        path,
        header,
        file,
        len: SEGMENT_HEADER_BYTES,
    })
}
