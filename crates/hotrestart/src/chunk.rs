//! Chunk file I/O: the writer that appends records to an active chunk through a
//! bounded user-space buffer, and the small fsync / rename helpers the store and
//! GC share. It owns no accounting; `index.rs` does that.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{self, ChunkKind, FileState, CHUNK_HEADER_BYTES};

/// Bytes buffered in user space before a `write(2)`. Batching small records into
/// one syscall is most of the update throughput; a crash loses at most this much
/// per active chunk beyond what was flushed (and nothing beyond the last sync()).
pub const WRITE_BUFFER_BYTES: usize = 256 * 1024;

/// Path of a chunk file.
pub fn chunk_path(dir: &Path, seq: u64, kind: ChunkKind, state: FileState) -> PathBuf {
    dir.join(format::chunk_file_name(seq, kind, state))
}

/// fsyncs a directory so that creates, renames and unlinks in it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| Error::io("open dir", dir, e))?;
    f.sync_all().map_err(|e| Error::io("fsync dir", dir, e))
}

/// fdatasyncs a file.
pub fn fsync_file(file: &File, path: &Path) -> Result<()> {
    file.sync_data().map_err(|e| Error::io("fsync", path, e))
}

/// An active chunk: the file being appended, its buffer and lengths.
pub struct ChunkWriter {
    pub seq: u64,
    pub kind: ChunkKind,
    /// Path under its `.active` name.
    pub path: PathBuf,
    /// Shared so that sync() can fsync it without holding the store lock.
    pub file: Arc<File>,
    buf: Vec<u8>,
    /// Bytes of the chunk including the header and what is still buffered.
    pub len: u64,
    /// Bytes handed to the OS (`write(2)`).
    pub flushed: u64,
}

impl ChunkWriter {
    /// Creates `chunk-{seq}.{kind}.active` and buffers its header.
    pub fn create(dir: &Path, seq: u64, kind: ChunkKind) -> Result<ChunkWriter> {
        let path = chunk_path(dir, seq, kind, FileState::Active);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("create chunk", &path, e))?;
        let mut buf = Vec::with_capacity(WRITE_BUFFER_BYTES);
        buf.extend_from_slice(&format::encode_header(kind, 0, seq));
        Ok(ChunkWriter {
            seq,
            kind,
            path,
            file: Arc::new(file),
            buf,
            len: CHUNK_HEADER_BYTES as u64,
            flushed: 0,
        })
    }

    /// Whether a record of `rec_len` bytes fits without passing `chunk_bytes_max`.
    /// An empty chunk always takes one record, however large, so that a record
    /// bigger than a chunk still gets written (into a chunk of its own).
    pub fn fits(&self, rec_len: usize, chunk_bytes_max: u64) -> bool {
        self.len == CHUNK_HEADER_BYTES as u64 || self.len + rec_len as u64 <= chunk_bytes_max
    }

    /// Buffers an encoded record; writes the buffer out once it is full.
    pub fn append(
        &mut self,
        seq: u64,
        kind: format::RecordKind,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let before = self.buf.len();
        format::encode_record(&mut self.buf, seq, kind, key, value);
        self.len += (self.buf.len() - before) as u64;
        if self.buf.len() >= WRITE_BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands the buffer to the OS. Returns before anything is durable.
    pub fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            (&*self.file)
                .write_all(&self.buf)
                .map_err(|e| Error::io("write", &self.path, e))?;
            self.buf.clear();
            self.flushed = self.len;
        }
        Ok(())
    }

    /// Drops the buffered bytes without writing them: used only to simulate a
    /// process crash in tests.
    pub fn discard_buffer(&mut self) {
        self.buf.clear();
    }
}
