//! The on-disk format: segment names, the 32-byte segment header and the
//! 32-byte record header, their encoders and checked decoders, and the
//! scan-ahead that tells a torn tail from corruption. `docs/journal.md`
//! documents the same layout byte by byte; keep the two in step.
//!
//! ```text
//! segment header (32 bytes, little endian)
//!   0  8  magic  b"TICKJRNL"
//!   8  4  u32 version (2; 1 is still read: its records are all epoch 0)
//!  12  4  u32 header_len (32)
//!  16  8  u64 first_seq (equals the number in the file name)
//!  24  8  i64 created_unix_ns
//! record (32-byte header + payload)
//!   0  4  u32 payload_len (<= RECORD_PAYLOAD_BYTES_MAX)
//!   4  4  u32 crc32c over bytes 8 .. 32 + payload_len
//!   8  8  u64 seq
//!  16  8  i64 time_ns
//!  24  4  u32 rows
//!  28  1  u8  kind
//!  29  3  u24 epoch (the term it was written in; 0 before any promotion)
//!  32  payload_len bytes of payload
//! ```

/// First eight bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"TICKJRNL";
/// The segment format version this build writes. Version 2 gave the three
/// reserved bytes of every record header to the epoch; a tickdb that only
/// knows version 1 refuses such a segment by its version instead of taking
/// an epoch for corruption.
pub const SEGMENT_VERSION: u32 = 2;
/// The oldest segment version this build reads (its records are epoch 0).
pub const SEGMENT_VERSION_MIN: u32 = 1;
/// The largest epoch a record header holds (24 bits).
pub const EPOCH_MAX: u32 = (1 << 24) - 1;
/// Length of the segment header, in bytes.
pub const SEGMENT_HEADER_BYTES: u64 = 32;
/// Length of a record header (everything before the payload), in bytes.
pub const RECORD_HEADER_BYTES: u64 = 32;
/// Longest payload one record may carry. A length field above this is
/// treated as corruption (or a torn write), never as an allocation request.
pub const RECORD_PAYLOAD_BYTES_MAX: u32 = 256 * 1024 * 1024;
/// Default size at which a segment is closed and the next one started.
pub const SEGMENT_BYTES_MAX_DEFAULT: u64 = 64 * 1024 * 1024;
/// Nanoseconds in one UTC day; segments also roll when the day changes.
pub const DAY_NS: i64 = 86_400 * 1_000_000_000;

/// Offset in a record of the first byte the CRC covers (the seq field).
const RECORD_CRC_START: usize = 8;

/// The file name of the segment whose first record has `first_seq`.
pub fn segment_file_name(first_seq: u64) -> String {
    format!("journal-{first_seq:020}.log")
}

/// The first sequence number a segment file name carries, or None if the
/// name is not a segment name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("journal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub first_seq: u64,
    pub created_unix_ns: i64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES as usize];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.first_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        b
    }
}

/// Why a segment header did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Fewer than 32 bytes: the file was cut while being created.
    Short(u64),
    /// All 32 bytes are zero: created, header never reached the disk.
    Zeroed,
    BadMagic,
    /// The magic matches but the version is not one this build reads. This
    /// is never "repaired": a newer tickdb wrote it.
    Version(u32),
    HeaderLen(u32),
    /// The header's first_seq disagrees with the file name.
    FirstSeq {
        header: u64,
        name: u64,
    },
}

impl std::fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderProblem::Short(n) => write!(f, "segment header cut short ({n} of 32 bytes)"),
            HeaderProblem::Zeroed => write!(f, "segment header is all zero bytes"),
            HeaderProblem::BadMagic => write!(f, "bad segment magic (expected TICKJRNL)"),
            HeaderProblem::Version(v) => write!(f, "unsupported segment version {v}"),
            HeaderProblem::HeaderLen(n) => write!(f, "bad segment header length {n}"),
            HeaderProblem::FirstSeq { header, name } => write!(
                f,
                "segment header says first seq {header}, file name says {name}"
            ),
        }
    }
}

/// Decodes and checks the header at the start of `buf` against the first
/// sequence number in the file name.
pub fn decode_header(buf: &[u8], name_seq: u64) -> Result<SegmentHeader, HeaderProblem> {
    let n = SEGMENT_HEADER_BYTES as usize;
    if buf.len() < n {
        return Err(HeaderProblem::Short(buf.len() as u64));
    }
    let h = &buf[..n];
    if h.iter().all(|&b| b == 0) {
        return Err(HeaderProblem::Zeroed);
    }
    if h[0..8] != SEGMENT_MAGIC {
        return Err(HeaderProblem::BadMagic);
    }
    let version = u32_at(h, 8);
    if !(SEGMENT_VERSION_MIN..=SEGMENT_VERSION).contains(&version) {
        return Err(HeaderProblem::Version(version));
    }
    let header_len = u32_at(h, 12);
    if header_len as u64 != SEGMENT_HEADER_BYTES {
        return Err(HeaderProblem::HeaderLen(header_len));
    }
    let first_seq = u64_at(h, 16);
    if first_seq != name_seq {
        return Err(HeaderProblem::FirstSeq {
            header: first_seq,
            name: name_seq,
        });
    }
    Ok(SegmentHeader {
        first_seq,
        created_unix_ns: u64_at(h, 24) as i64,
    })
}

/// The fixed fields of a record that passed its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub payload_len: u32,
    pub seq: u64,
    pub time_ns: i64,
    pub rows: u32,
    pub kind: u8,
    /// The epoch (term) of the primary that wrote it.
    pub epoch: u32,
}

impl RecordHeader {
    /// Bytes the whole record takes on disk.
    pub fn total_len(&self) -> u64 {
        RECORD_HEADER_BYTES + self.payload_len as u64
    }
}

/// Appends one encoded record of epoch 0 to `out`.
pub fn encode_record(
    out: &mut Vec<u8>,
    seq: u64,
    kind: u8,
    rows: u32,
    time_ns: i64,
    payload: &[u8],
) {
    encode_record_in(out, 0, seq, kind, rows, time_ns, payload)
}

/// Appends one encoded record written in `epoch` (at most EPOCH_MAX: the
/// journal checks it when an epoch begins) to `out`.
pub fn encode_record_in(
    out: &mut Vec<u8>,
    epoch: u32,
    seq: u64,
    kind: u8,
    rows: u32,
    time_ns: i64,
    payload: &[u8],
) {
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&time_ns.to_le_bytes());
    out.extend_from_slice(&rows.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&epoch.to_le_bytes()[..3]);
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start + RECORD_CRC_START..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What a record header check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordCheck {
    Ok(RecordHeader),
    /// Fewer bytes remain than the header (or the header's length) needs.
    Incomplete {
        have: u64,
        need: u64,
    },
    /// The length field is above RECORD_PAYLOAD_BYTES_MAX.
    TooLong(u32),
    BadCrc {
        stored: u32,
        computed: u32,
    },
}

impl RecordCheck {
    /// A sentence for reports; None when the record is fine.
    pub fn problem(&self) -> Option<String> {
        match self {
            RecordCheck::Ok(_) => None,
            RecordCheck::Incomplete { have, need } => Some(format!(
                "incomplete record: {have} bytes left, {need} needed"
            )),
            RecordCheck::TooLong(n) => Some(format!(
                "record length {n} above the bound {RECORD_PAYLOAD_BYTES_MAX}"
            )),
            RecordCheck::BadCrc { stored, computed } => Some(format!(
                "CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
            )),
        }
    }
}

/// Checks the record that starts at `off` in `buf` (length bound,
/// completeness and CRC). The sequence number is the caller's to check.
pub fn check_record(buf: &[u8], off: usize) -> RecordCheck {
    let have = buf.len().saturating_sub(off) as u64;
    if have < RECORD_HEADER_BYTES {
        return RecordCheck::Incomplete {
            have,
            need: RECORD_HEADER_BYTES,
        };
    }
    let r = &buf[off..];
    let payload_len = u32_at(r, 0);
    if payload_len > RECORD_PAYLOAD_BYTES_MAX {
        return RecordCheck::TooLong(payload_len);
    }
    let need = RECORD_HEADER_BYTES + payload_len as u64;
    if have < need {
        return RecordCheck::Incomplete { have, need };
    }
    let stored = u32_at(r, 4);
    let computed = crc32c::crc32c(&r[RECORD_CRC_START..need as usize]);
    if stored != computed {
        return RecordCheck::BadCrc { stored, computed };
    }
    RecordCheck::Ok(decode_record_header(r, payload_len))
}

/// Decodes the fixed fields of a record header; `r` holds at least 32 bytes.
pub fn decode_record_header(r: &[u8], payload_len: u32) -> RecordHeader {
    RecordHeader {
        payload_len,
        seq: u64_at(r, 8),
        time_ns: u64_at(r, 16) as i64,
        rows: u32_at(r, 24),
        kind: r[28],
        epoch: epoch_of(r),
    }
}

/// The epoch in a record header (`r` holds at least 32 bytes).
pub fn epoch_of(r: &[u8]) -> u32 {
    u32::from_le_bytes([r[29], r[30], r[31], 0])
}

/// CRC32C of a record given its 32-byte header and its payload, to check a
/// record that was read in two pieces (the streaming reader does this).
pub fn record_crc_ok(header: &[u8; RECORD_HEADER_BYTES as usize], payload: &[u8]) -> bool {
    let crc = crc32c::crc32c(&header[RECORD_CRC_START..]);
    let crc = crc32c::crc32c_append(crc, payload);
    crc == u32_at(header, 4)
}

/// Looks for a plausible valid record at any byte offset in `from..` whose
/// sequence number is `min_seq` or above. This is what tells corruption
/// (valid records after the bad spot) from a torn tail (nothing valid after
/// it). Cheap filters come first: the length must fit and the seq lie in the range the remaining bytes could hold (every
/// record is at least 32 bytes), so the CRC is computed rarely.
pub fn find_valid_record(buf: &[u8], from: usize, min_seq: u64) -> Option<(usize, RecordHeader)> {
    let hdr = RECORD_HEADER_BYTES as usize;
    if buf.len() < hdr {
        return None;
    }
    let max_seq = min_seq.saturating_add((buf.len().saturating_sub(from) / hdr) as u64 + 1);
    for off in from..=buf.len() - hdr {
        let r = &buf[off..];
        let seq = u64_at(r, 8);
        if seq < min_seq || seq > max_seq || seq == 0 {
            continue;
        }
        let len = u32_at(r, 0);
        if len > RECORD_PAYLOAD_BYTES_MAX || (r.len() as u64) < RECORD_HEADER_BYTES + len as u64 {
            continue;
        }
        if let RecordCheck::Ok(h) = check_record(buf, off) {
            return Some((off, h));
        }
    }
    None
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_file_name(1), "journal-00000000000000000001.log");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(12345)),
            Some(12345)
        );
        assert_eq!(parse_segment_file_name("journal-1.log"), None);
        assert_eq!(
            parse_segment_file_name("journal-0000000000000000000a.log"),
            None
        );
        assert_eq!(parse_segment_file_name("LOCK"), None);
    }

    #[test]
    fn header_round_trip_and_checks() {
        let h = SegmentHeader {
            first_seq: 7,
            created_unix_ns: 42,
        };
        let b = h.encode();
        assert_eq!(&b[0..8], b"TICKJRNL");
        assert_eq!(decode_header(&b, 7), Ok(h));
        assert_eq!(
            decode_header(&b, 8),
            Err(HeaderProblem::FirstSeq { header: 7, name: 8 })
        );
        assert_eq!(decode_header(&b[..10], 7), Err(HeaderProblem::Short(10)));
        assert_eq!(decode_header(&[0u8; 32], 7), Err(HeaderProblem::Zeroed));
        let mut v1 = b;
        v1[8] = 1;
        assert_eq!(decode_header(&v1, 7), Ok(h));
        let mut v3 = b;
        v3[8] = 3;
        assert_eq!(decode_header(&v3, 7), Err(HeaderProblem::Version(3)));
    }

    #[test]
    fn the_epoch_is_three_bytes_under_the_crc() {
        let mut buf = Vec::new();
        encode_record_in(&mut buf, EPOCH_MAX, 9, 3, 1, 0, b"x");
        match check_record(&buf, 0) {
            RecordCheck::Ok(h) => assert_eq!(h.epoch, EPOCH_MAX),
            other => panic!("{other:?}"),
        }
        assert_eq!(&buf[29..32], &[0xff, 0xff, 0xff]);
        buf[29] ^= 1;
        assert!(matches!(check_record(&buf, 0), RecordCheck::BadCrc { .. }));
    }

    #[test]
    fn record_round_trip_and_checks() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 9, 3, 100, -5, b"hello");
        assert_eq!(buf.len(), 37);
        match check_record(&buf, 0) {
            RecordCheck::Ok(h) => {
                assert_eq!(
                    (h.seq, h.kind, h.rows, h.time_ns, h.payload_len),
                    (9, 3, 100, -5, 5)
                );
            }
            other => panic!("{other:?}"),
        }
        let mut hdr = [0u8; 32];
        hdr.copy_from_slice(&buf[..32]);
        assert!(record_crc_ok(&hdr, b"hello"));
        assert!(!record_crc_ok(&hdr, b"hellp"));
        for cut in 0..buf.len() {
            assert!(matches!(
                check_record(&buf[..cut], 0),
                RecordCheck::Incomplete { .. }
            ));
        }
        let mut bad = buf.clone();
        bad[35] ^= 1;
        assert!(matches!(check_record(&bad, 0), RecordCheck::BadCrc { .. }));
        let mut long = buf.clone();
        long[0..4].copy_from_slice(&(RECORD_PAYLOAD_BYTES_MAX + 1).to_le_bytes());
        assert!(matches!(check_record(&long, 0), RecordCheck::TooLong(_)));
        // Scan-ahead finds the record after garbage, and not below min_seq.
        let mut g = vec![0xAB; 13];
        g.extend_from_slice(&buf);
        assert_eq!(find_valid_record(&g, 0, 9).map(|(o, _)| o), Some(13));
        assert_eq!(find_valid_record(&g, 0, 10), None);
    }
}
