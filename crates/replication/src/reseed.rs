//! Reseeding: a standby that needs records its primary's journal no longer
//! holds (trimmed behind a Hot Restart checkpoint) starts from the
//! primary's tables instead, as a new Hazelcast member is seeded from a
//! running cluster (Hot Restart Persistence). The primary takes a
//! consistent cut of its tables at a sequence S (the same cut a checkpoint
//! takes: one snapshot per table, taken while no update is applied) and
//! streams them, with progress, then the journal from the start of the
//! segment holding S + 1. The standby spools the tables to disk as they
//! arrive (bounded memory), starts its journal there, and loads its rdb
//! from the spool before it applies anything after S.

use crate::protocol::{self, Message, FRAME_BYTES_MAX};
use crate::ReplError;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::io::AsyncRead;

/// A consistent cut of a node's tables, read payload by payload.
pub trait SnapshotCut: Send {
    /// The sequence the tables are as of.
    fn seq(&self) -> u64;
    fn tables(&self) -> u32;
    fn rows(&self) -> u64;
    /// The next rows, as an update payload (tickdb-core's codec); None at
    /// the end.
    fn next_payload(&mut self) -> Result<Option<Vec<u8>>, String>;
}

/// Where a primary's cuts come from (its rdb); a node without one cannot
/// reseed standbys.
pub trait SnapshotSource: Send + Sync {
    fn cut(&self) -> Result<Box<dyn SnapshotCut>, String>;
}

/// Spool file name, in the standby's data directory.
pub const SPOOL_FILE_NAME: &str = "reseed.spool";
/// Progress is logged this often while a reseed streams.
const PROGRESS_LOG_S: u64 = 2;

/// What a standby received: the cut, where its journal starts, and the
/// spooled tables.
#[derive(Debug, Clone)]
pub struct Reseeded {
    pub seq: u64,
    pub journal_from: u64,
    pub rows: u64,
    pub spool: PathBuf,
}

/// Receives a reseed on `sock` (after its Reseed message), spooling the
/// tables into `data_dir`. `progress(rows_received, rows_total)` is called
/// as rows arrive.
pub async fn receive<R: AsyncRead + Unpin>(
    sock: &mut R,
    seq: u64,
    journal_from: u64,
    rows_total: u64,
    data_dir: &Path,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<Reseeded, ReplError> {
    std::fs::create_dir_all(data_dir)?;
    let spool = data_dir.join(SPOOL_FILE_NAME);
    let mut out = BufWriter::new(std::fs::File::create(&spool)?);
    let started = Instant::now();
    let mut last_log = Instant::now();
    let mut rows = 0u64;
    loop {
        match protocol::read_message(sock, FRAME_BYTES_MAX).await? {
            Some(Message::Snapshot { payload }) => {
                let n = tickdb_core::codec::decode(&payload, None)
                    .map_err(|e| {
                        ReplError::Protocol(format!("a reseed payload does not decode: {e}"))
                    })?
                    .iter()
                    .map(|b| b.rows as u64)
                    .sum::<u64>();
                out.write_all(&(payload.len() as u64).to_le_bytes())?;
                out.write_all(&payload)?;
                rows += n;
                progress(rows, rows_total);
                if last_log.elapsed().as_secs() >= PROGRESS_LOG_S {
                    last_log = Instant::now();
                    tracing::info!("reseeding: {rows} of {rows_total} rows received");
                }
            }
            Some(Message::SnapshotEnd { seq: end }) if end == seq => break,
            Some(other) => {
                return Err(ReplError::Protocol(format!(
                    "during a reseed the primary sent {}",
                    other.name()
                )))
            }
            None => {
                return Err(ReplError::Protocol(
                    "the primary closed the link during a reseed".into(),
                ))
            }
        }
    }
    out.flush()?;
    out.get_ref().sync_all()?;
    tracing::info!(
        "reseeded: {rows} rows as of seq {seq} in {:.1} s; the journal continues from seq {journal_from}",
        started.elapsed().as_secs_f64()
    );
    Ok(Reseeded {
        seq,
        journal_from,
        rows,
        spool,
    })
}

/// Reads a spool's payloads in order (then the caller removes it).
pub fn read_spool(
    path: &Path,
    mut each: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = BufReader::new(f);
    let mut len = [0u8; 8];
    let mut buf = Vec::new();
    loop {
        match r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
        let n = u64::from_le_bytes(len) as usize;
        if n > FRAME_BYTES_MAX {
            return Err(format!(
                "{}: a payload of {n} bytes: the spool is damaged",
                path.display()
            ));
        }
        buf.resize(n, 0);
        r.read_exact(&mut buf)
            .map_err(|e| format!("{}: cut short: {e}", path.display()))?;
        each(&buf)?;
    }
}

/// The first sequence of the segment holding `seq` in `dir`.
pub fn segment_start_of(dir: &Path, seq: u64) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            tickdb_journal::format::parse_segment_file_name(&e.file_name().to_string_lossy())
        })
        .filter(|f| *f <= seq)
        .max()
}
