//! On-disk format: the chunk file header, the record framing and the chunk file
//! names. This module owns every byte layout of the store; nothing else encodes or
//! decodes bytes. `docs/hot-restart.md` documents the same layout byte by byte.
//!
//! All integers are little endian. Decoding never panics and never allocates on the
//! strength of a length read from disk: every length is bounds-checked first.

use std::fmt;

/// Magic bytes at offset 0 of every chunk file.
pub const CHUNK_MAGIC: [u8; 8] = *b"TDBHRCK\0";
/// Format version written into every chunk header. Version 2 aligns every
/// value to 8 bytes in the file (records start at multiples of 8, the key
/// is padded), so that a value mapped from the file can be read in place as
/// Arrow buffers; version 1 chunks (no padding) are still read. Any other
/// version is refused.
pub const FORMAT_VERSION: u16 = 2;
/// The version before aligned values: read, never written.
pub const FORMAT_VERSION_UNALIGNED: u16 = 1;
/// Version 2 records start, and their values start, at multiples of this
/// many bytes from the start of the file.
pub const RECORD_ALIGN_BYTES: usize = 8;
/// Size of the chunk file header.
pub const CHUNK_HEADER_BYTES: usize = 32;
/// Size of the fixed part of a record (before key and value).
pub const RECORD_HEADER_BYTES: usize = 24;
/// Largest key accepted. Keys are table prefix + primary key, so 64 KiB is generous.
pub const KEY_BYTES_MAX: usize = 64 * 1024;
/// Largest value accepted. Columnar batch records can be a few MiB; 256 MiB bounds
/// what one corrupt length field could make a reader believe.
pub const VALUE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Largest encoded record: anything longer in a length field is corruption.
pub const RECORD_BYTES_MAX: usize = RECORD_HEADER_BYTES + KEY_BYTES_MAX + VALUE_BYTES_MAX;
/// Header flag: the chunk was written by the garbage collector (informational).
pub const HEADER_FLAG_GC_OUTPUT: u8 = 1;

/// What a chunk file holds. Tombstones live in chunks of their own so that value
/// chunks can be collected from RAM alone and tombstone chunks stay small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkKind {
    /// Value records only.
    Value = 1,
    /// Tombstone and prefix tombstone records only.
    Tombstone = 2,
}

impl ChunkKind {
    fn from_u8(b: u8) -> Option<ChunkKind> {
        match b {
            1 => Some(ChunkKind::Value),
            2 => Some(ChunkKind::Tombstone),
            _ => None,
        }
    }

    /// File name suffix for the kind.
    pub fn suffix(self) -> &'static str {
        match self {
            ChunkKind::Value => "val",
            ChunkKind::Tombstone => "tomb",
        }
    }

    /// Whether a record of kind `r` may appear in a chunk of this kind.
    pub fn holds(self, r: RecordKind) -> bool {
        match self {
            ChunkKind::Value => r == RecordKind::Value,
            ChunkKind::Tombstone => r != RecordKind::Value,
        }
    }
}

/// The three record kinds of the Hot Restart log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// put key → value.
    Value = 1,
    /// remove key.
    Tombstone = 2,
    /// remove every key starting with the record's key (the prefix).
    PrefixTombstone = 3,
}

impl RecordKind {
    fn from_u8(b: u8) -> Option<RecordKind> {
        match b {
            1 => Some(RecordKind::Value),
            2 => Some(RecordKind::Tombstone),
            3 => Some(RecordKind::PrefixTombstone),
            _ => None,
        }
    }

    /// The chunk kind records of this kind are written to.
    pub fn chunk_kind(self) -> ChunkKind {
        match self {
            RecordKind::Value => ChunkKind::Value,
            _ => ChunkKind::Tombstone,
        }
    }
}

/// A decoded chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Value or tombstone chunk.
    pub kind: ChunkKind,
    /// Flags, see `HEADER_FLAG_*`.
    pub flags: u8,
    /// The chunk's sequence number; equals the number in its file name.
    pub chunk_seq: u64,
    /// `FORMAT_VERSION`, or `FORMAT_VERSION_UNALIGNED` for an older chunk.
    pub version: u16,
}

/// Why bytes failed to decode. The caller adds the file and offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the structure needs: a torn tail if it is at the end of
    /// an active chunk.
    Truncated {
        needed: usize,
        available: usize,
    },
    BadMagic,
    BadVersion(u16),
    BadChunkKind(u8),
    BadHeaderCrc {
        stored: u32,
        computed: u32,
    },
    BadReserved,
    /// A record length outside `RECORD_HEADER_BYTES ..= RECORD_BYTES_MAX`.
    BadLength(u32),
    BadCrc {
        stored: u32,
        computed: u32,
    },
    BadRecordKind(u8),
    /// The key length does not fit in the record or exceeds `KEY_BYTES_MAX`.
    BadKeyLength(u32),
    /// A tombstone or prefix tombstone carrying value bytes.
    ValueInTombstone,
    /// A record kind that does not belong in this chunk kind.
    WrongChunkKind {
        chunk: ChunkKind,
        record: RecordKind,
    },
    /// Sequence number 0 is never written.
    ZeroSeq,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { needed, available } => {
                write!(f, "truncated: needs {needed} bytes, {available} available")
            }
            DecodeError::BadMagic => write!(f, "bad magic"),
            DecodeError::BadVersion(v) => write!(f, "unsupported format version {v}"),
            DecodeError::BadChunkKind(k) => write!(f, "bad chunk kind {k}"),
            DecodeError::BadHeaderCrc { stored, computed } => {
                write!(
                    f,
                    "header crc mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            DecodeError::BadReserved => write!(f, "reserved bytes are not zero"),
            DecodeError::BadLength(l) => write!(f, "record length {l} out of range"),
            DecodeError::BadCrc { stored, computed } => {
                write!(
                    f,
                    "record crc mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            DecodeError::BadRecordKind(k) => write!(f, "bad record kind {k}"),
            DecodeError::BadKeyLength(l) => write!(f, "bad key length {l}"),
            DecodeError::ValueInTombstone => write!(f, "tombstone carries a value"),
            DecodeError::WrongChunkKind { chunk, record } => {
                write!(f, "{record:?} record in a {chunk:?} chunk")
            }
            DecodeError::ZeroSeq => write!(f, "record sequence number 0"),
        }
    }
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Encodes a chunk header.
pub fn encode_header(kind: ChunkKind, flags: u8, chunk_seq: u64) -> [u8; CHUNK_HEADER_BYTES] {
    let mut h = [0u8; CHUNK_HEADER_BYTES];
    h[0..8].copy_from_slice(&CHUNK_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10] = kind as u8;
    h[11] = flags;
    h[16..24].copy_from_slice(&chunk_seq.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decodes and validates a chunk header from the start of `buf`.
pub fn decode_header(buf: &[u8]) -> Result<ChunkHeader, DecodeError> {
    if buf.len() < CHUNK_HEADER_BYTES {
        return Err(DecodeError::Truncated {
            needed: CHUNK_HEADER_BYTES,
            available: buf.len(),
        });
    }
    let h = &buf[..CHUNK_HEADER_BYTES];
    if h[0..8] != CHUNK_MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let stored = le_u32(h, 24);
    let computed = crc32c::crc32c(&h[0..24]);
    if stored != computed {
        return Err(DecodeError::BadHeaderCrc { stored, computed });
    }
    let version = le_u16(h, 8);
    if version != FORMAT_VERSION && version != FORMAT_VERSION_UNALIGNED {
        return Err(DecodeError::BadVersion(version));
    }
    let kind = ChunkKind::from_u8(h[10]).ok_or(DecodeError::BadChunkKind(h[10]))?;
    if le_u32(h, 12) != 0 || le_u32(h, 28) != 0 {
        return Err(DecodeError::BadReserved);
    }
    Ok(ChunkHeader {
        kind,
        flags: h[11],
        chunk_seq: le_u64(h, 16),
        version,
    })
}

/// Zero bytes that bring `n` up to a multiple of `RECORD_ALIGN_BYTES`.
fn pad_to_align(n: usize) -> usize {
    n.next_multiple_of(RECORD_ALIGN_BYTES) - n
}

/// Encoded size of a record with these key and value lengths (version 2:
/// the key padded so that the value starts aligned, the value padded so
/// that the next record does).
pub fn encoded_len(key_len: usize, value_len: usize) -> usize {
    let key_end = RECORD_HEADER_BYTES + key_len;
    key_end + pad_to_align(key_end) + value_len + pad_to_align(value_len)
}

/// Appends one encoded record to `out`. The caller has checked the key and value
/// bounds (`KEY_BYTES_MAX`, `VALUE_BYTES_MAX`), so the lengths fit their fields.
pub fn encode_record(out: &mut Vec<u8>, seq: u64, kind: RecordKind, key: &[u8], value: &[u8]) {
    debug_assert!(key.len() <= KEY_BYTES_MAX && value.len() <= VALUE_BYTES_MAX);
    let len = encoded_len(key.len(), value.len());
    let value_pad = pad_to_align(value.len());
    let start = out.len();
    out.reserve(len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]); // CRC, filled in below
    out.extend_from_slice(&seq.to_le_bytes());
    out.push(kind as u8);
    out.push(value_pad as u8);
    out.extend_from_slice(&[0u8; 2]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.resize(out.len() + pad_to_align(RECORD_HEADER_BYTES + key.len()), 0);
    out.extend_from_slice(value);
    out.resize(out.len() + value_pad, 0);
    debug_assert_eq!(out.len() - start, len);
    let crc = crc32c::crc32c(&out[start + 8..start + len]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A record decoded in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub seq: u64,
    pub kind: RecordKind,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// A record's header fields, checked (everything but the CRC, which covers
/// the key and value too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHead {
    /// The whole record: header, key, value and their padding.
    pub len: usize,
    pub crc: u32,
    pub seq: u64,
    pub kind: RecordKind,
    pub key_len: usize,
    /// Where the value starts in the record (after the key and its padding).
    pub value_at: usize,
    pub value_len: usize,
}

fn check_length(buf: &[u8]) -> Result<usize, DecodeError> {
    if buf.len() < RECORD_HEADER_BYTES {
        return Err(DecodeError::Truncated {
            needed: RECORD_HEADER_BYTES,
            available: buf.len(),
        });
    }
    let len32 = le_u32(buf, 0);
    let len = len32 as usize;
    if !(RECORD_HEADER_BYTES..=RECORD_BYTES_MAX).contains(&len) {
        return Err(DecodeError::BadLength(len32));
    }
    Ok(len)
}

/// The header fields after the CRC, checked against a record of `len` bytes
/// of a chunk of `version`.
fn check_fields(buf: &[u8], len: usize, version: u16) -> Result<RecordHead, DecodeError> {
    let seq = le_u64(buf, 8);
    if seq == 0 {
        return Err(DecodeError::ZeroSeq);
    }
    let kind = RecordKind::from_u8(buf[16]).ok_or(DecodeError::BadRecordKind(buf[16]))?;
    let aligned = version != FORMAT_VERSION_UNALIGNED;
    // Version 2 keeps the value's trailing padding in byte 17.
    let value_pad = if aligned { buf[17] as usize } else { 0 };
    if buf[18..20] != [0, 0] || value_pad >= RECORD_ALIGN_BYTES || (!aligned && buf[17] != 0) {
        return Err(DecodeError::BadReserved);
    }
    if aligned && !len.is_multiple_of(RECORD_ALIGN_BYTES) {
        return Err(DecodeError::BadLength(len as u32));
    }
    let key_len32 = le_u32(buf, 20);
    let key_len = key_len32 as usize;
    let key_end = RECORD_HEADER_BYTES + key_len;
    let value_at = if aligned {
        key_end + pad_to_align(key_end)
    } else {
        key_end
    };
    if key_len > KEY_BYTES_MAX || value_at + value_pad > len {
        return Err(DecodeError::BadKeyLength(key_len32));
    }
    let value_len = len - value_at - value_pad;
    if kind != RecordKind::Value && value_len > 0 {
        return Err(DecodeError::ValueInTombstone);
    }
    Ok(RecordHead {
        len,
        crc: le_u32(buf, 4),
        seq,
        kind,
        key_len,
        value_at,
        value_len,
    })
}

/// Checks the header at the start of `buf` (at least `RECORD_HEADER_BYTES`)
/// of a chunk of `version`, without the CRC: for a reader that looks at
/// the value where it lies and checks the CRC over the pieces
/// (`crc32c::crc32c_append`).
pub fn decode_record_head(buf: &[u8], version: u16) -> Result<RecordHead, DecodeError> {
    let len = check_length(buf)?;
    check_fields(buf, len, version)
}

/// Decodes the record at the start of `buf` in the current version's layout;
/// returns it and its encoded length.
pub fn decode_record(buf: &[u8]) -> Result<(RecordRef<'_>, usize), DecodeError> {
    decode_record_in(buf, FORMAT_VERSION)
}

/// Decodes the record at the start of `buf` of a chunk of `version`;
/// returns it and its encoded length.
pub fn decode_record_in(buf: &[u8], version: u16) -> Result<(RecordRef<'_>, usize), DecodeError> {
    let len = check_length(buf)?;
    if buf.len() < len {
        return Err(DecodeError::Truncated {
            needed: len,
            available: buf.len(),
        });
    }
    let stored = le_u32(buf, 4);
    let computed = crc32c::crc32c(&buf[8..len]);
    if stored != computed {
        return Err(DecodeError::BadCrc { stored, computed });
    }
    let head = check_fields(buf, len, version)?;
    // Padding is zero, so that a record decodes from exactly one encoding.
    let key_end = RECORD_HEADER_BYTES + head.key_len;
    let value_end = head.value_at + head.value_len;
    if buf[key_end..head.value_at]
        .iter()
        .chain(&buf[value_end..len])
        .any(|b| *b != 0)
    {
        return Err(DecodeError::BadReserved);
    }
    let key = &buf[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + head.key_len];
    let value = &buf[head.value_at..head.value_at + head.value_len];
    Ok((
        RecordRef {
            seq: head.seq,
            kind: head.kind,
            key,
            value,
        },
        len,
    ))
}

/// Iterates over the records of a chunk body (the bytes after the header). Yields
/// `(offset_in_file, record)`; stops after the first error, which it yields with
/// the offset of the bad record.
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    chunk_kind: ChunkKind,
    version: u16,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    /// `file` is the whole chunk file including its header, `header` its
    /// decoded header.
    pub fn new(file: &'a [u8], header: &ChunkHeader) -> RecordIter<'a> {
        RecordIter {
            buf: file,
            pos: CHUNK_HEADER_BYTES.min(file.len()),
            chunk_kind: header.kind,
            version: header.version,
            failed: false,
        }
    }

    /// File offset of the next record (the end of the valid prefix after an error).
    pub fn offset(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<(usize, RecordRef<'a>), (usize, DecodeError)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let at = self.pos;
        match decode_record_in(&self.buf[at..], self.version) {
            Ok((rec, len)) => {
                if !self.chunk_kind.holds(rec.kind) {
                    self.failed = true;
                    let e = DecodeError::WrongChunkKind {
                        chunk: self.chunk_kind,
                        record: rec.kind,
                    };
                    return Some(Err((at, e)));
                }
                self.pos += len;
                Some(Ok((at, rec)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err((at, e)))
            }
        }
    }
}

/// Decodes a whole chunk file (header and records). Returns the header and the
/// records, or the offset and reason of the first bad byte range. This is the
/// entry point the fuzz-style tests drive.
pub fn decode_chunk(
    file: &[u8],
) -> Result<(ChunkHeader, Vec<RecordRef<'_>>), (usize, DecodeError)> {
    let header = decode_header(file).map_err(|e| (0, e))?;
    let mut out = Vec::new();
    for r in RecordIter::new(file, &header) {
        let (_, rec) = r?;
        out.push(rec);
    }
    Ok((header, out))
}

/// The three states a chunk file name can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileState {
    /// Being appended by the writer, or sealed but not yet fsynced and renamed.
    /// Its tail may be torn after a crash.
    Active,
    /// Complete and durable: corruption in it is an error.
    Sealed,
    /// Unfinished GC output: deleted at reload.
    GcTemp,
}

/// File name of a chunk: `chunk-{seq:016x}.{val|tomb}[.active|.gctmp]`.
pub fn chunk_file_name(seq: u64, kind: ChunkKind, state: FileState) -> String {
    let base = format!("chunk-{seq:016x}.{}", kind.suffix());
    match state {
        FileState::Active => base + ".active",
        FileState::Sealed => base,
        FileState::GcTemp => base + ".gctmp",
    }
}

/// Parses a chunk file name; `None` for files that are not chunks.
pub fn parse_chunk_file_name(name: &str) -> Option<(u64, ChunkKind, FileState)> {
    let rest = name.strip_prefix("chunk-")?;
    let (hex, rest) = rest.split_at_checked(16)?;
    let seq = u64::from_str_radix(hex, 16).ok()?;
    let mut parts = rest.split('.');
    if !parts.next()?.is_empty() {
        return None;
    }
    let kind = match parts.next()? {
        "val" => ChunkKind::Value,
        "tomb" => ChunkKind::Tombstone,
        _ => return None,
    };
    let state = match parts.next() {
        None => FileState::Sealed,
        Some("active") => FileState::Active,
        Some("gctmp") => FileState::GcTemp,
        Some(_) => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some((seq, kind, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 7, RecordKind::Value, b"t/k", b"hello");
        encode_record(&mut buf, 8, RecordKind::Tombstone, b"t/k", b"");
        let (r, n) = decode_record(&buf).unwrap();
        assert_eq!(
            (r.seq, r.kind, r.key, r.value),
            (7, RecordKind::Value, &b"t/k"[..], &b"hello"[..])
        );
        let (r2, n2) = decode_record(&buf[n..]).unwrap();
        assert_eq!(
            (r2.seq, r2.kind, r2.key),
            (8, RecordKind::Tombstone, &b"t/k"[..])
        );
        assert_eq!(n + n2, buf.len());
    }

    /// A version 1 record: no padding, bytes 17..20 zero.
    pub(crate) fn encode_v1(
        out: &mut Vec<u8>,
        seq: u64,
        kind: RecordKind,
        key: &[u8],
        value: &[u8],
    ) {
        let len = RECORD_HEADER_BYTES + key.len() + value.len();
        let start = out.len();
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&seq.to_le_bytes());
        out.push(kind as u8);
        out.extend_from_slice(&[0u8; 3]);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        let crc = crc32c::crc32c(&out[start + 8..start + len]);
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn values_are_aligned_and_version_1_records_still_read() {
        let mut buf = encode_header(ChunkKind::Value, 0, 1).to_vec();
        for (i, (k, v)) in [
            (&b"a"[..], &b"xyz"[..]),
            (b"0123456789", b""),
            (b"key", &[7u8; 17]),
        ]
        .iter()
        .enumerate()
        {
            let at = buf.len();
            encode_record(&mut buf, i as u64 + 1, RecordKind::Value, k, v);
            assert_eq!(at % RECORD_ALIGN_BYTES, 0, "record start");
            let (r, n) = decode_record(&buf[at..]).unwrap();
            assert_eq!((r.key, r.value, n), (*k, *v, buf.len() - at));
            let value_at = r.value.as_ptr() as usize - buf.as_ptr() as usize;
            assert_eq!(value_at % RECORD_ALIGN_BYTES, 0, "value start");
        }
        let (h, recs) = decode_chunk(&buf).unwrap();
        assert_eq!((h.version, recs.len()), (FORMAT_VERSION, 3));
        // The same records as a version 1 chunk.
        let mut old = encode_header(ChunkKind::Value, 0, 1).to_vec();
        old[8..10].copy_from_slice(&FORMAT_VERSION_UNALIGNED.to_le_bytes());
        let crc = crc32c::crc32c(&old[0..24]);
        old[24..28].copy_from_slice(&crc.to_le_bytes());
        encode_v1(&mut old, 1, RecordKind::Value, b"a", b"xyz");
        encode_v1(&mut old, 2, RecordKind::Value, b"key", &[7u8; 17]);
        let (h, recs) = decode_chunk(&old).unwrap();
        assert_eq!(h.version, FORMAT_VERSION_UNALIGNED);
        assert_eq!(
            recs.iter().map(|r| (r.key, r.value)).collect::<Vec<_>>(),
            vec![(&b"a"[..], &b"xyz"[..]), (&b"key"[..], &[7u8; 17][..])]
        );
        // A version 1 record read as version 2 is refused, not misread.
        assert!(decode_record(&old[CHUNK_HEADER_BYTES..]).is_err());
    }

    #[test]
    fn header_round_trip_and_names() {
        let h = encode_header(ChunkKind::Tombstone, HEADER_FLAG_GC_OUTPUT, 42);
        assert_eq!(
            decode_header(&h).unwrap(),
            ChunkHeader {
                kind: ChunkKind::Tombstone,
                flags: 1,
                chunk_seq: 42,
                version: FORMAT_VERSION,
            }
        );
        for st in [FileState::Active, FileState::Sealed, FileState::GcTemp] {
            let n = chunk_file_name(42, ChunkKind::Value, st);
            assert_eq!(parse_chunk_file_name(&n), Some((42, ChunkKind::Value, st)));
        }
        assert_eq!(parse_chunk_file_name("chunk-00000000000000zz.val"), None);
        assert_eq!(parse_chunk_file_name("LOCK"), None);
    }
}
