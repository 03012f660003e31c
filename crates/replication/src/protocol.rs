//! The replication wire protocol: how a standby follows a primary's journal
//! over TCP (`--repl-port`). This module owns the byte format; `primary`
//! and `standby` own what the messages mean.
//!
//! # Conversation
//!
//! ```text
//! primary                                   standby
//!    <- connect
//!    Challenge {version, nonce, name}  ->
//!                                      <-  Hello {version, nonce, proof, from_seq,
//!                                                 last_seq, last_crc, name}
//!    Welcome {proof, primary_seq, ...}  ->   (or Refuse {reason}, then close)
//!    SchemaHistory {bytes}              ->
//!    SegmentStart / Records / Heartbeat ->   (records from_seq.. in order)
//!                                      <-  Ack {received, durable, applied}
//! ```
//!
//! Both sides prove they hold the shared secret without sending it
//! (`auth`). The standby says where its journal ends (`last_seq` and that
//! record's CRC); the primary checks that record against its own, so a
//! standby whose journal diverged is refused naming both positions.
//!
//! # Framing
//!
//! Every message is one frame; integers little-endian; strings UTF-8.
//!
//! ```text
//! offset  size      field
//! 0       4         u32 body_len (the type byte not included); at most
//!                   FRAME_BYTES_MAX, and HANDSHAKE_FRAME_BYTES_MAX before
//!                   both sides are authenticated
//! 4       1         u8 type
//! 5       body_len  body
//! ```
//!
//! A connection closing inside a frame, a length over the bound, an unknown
//! type, or a body with bytes missing or left over is a protocol error.
//!
//! # Bodies (`str16` = u16 length + UTF-8; "rest" runs to the end)
//!
//! ```text
//! 1 Challenge     primary -> standby
//!     u16 version         PROTOCOL_VERSION
//!     [32] nonce          random, fresh per connection
//!     str16 name          the primary's node name (host:port it serves)
//! 2 Hello         standby -> primary
//!     u16 version
//!     [32] nonce          the standby's own random nonce
//!     [32] proof          HMAC-SHA256(secret, "tickdb-repl-standby" | primary nonce | standby nonce)
//!     u64 from_seq        the first sequence it wants (its last + 1)
//!     u64 last_seq        the last record its journal holds (0: none)
//!     u32 last_crc        that record's CRC32C (0 when last_seq is 0)
//!     u8 flags            bit 0: it can take a reseed (a new standby
//!                         starting, before its journal opens)
//!     str16 name          the standby's node name
//!     str16 http          the standby's HTTP address (host:port), for a
//!                         switchover to reach it; empty when unknown
//!     epochs              its journal's epoch history (below)
//! 3 Welcome       primary -> standby
//!     [32] proof          HMAC-SHA256(secret, "tickdb-repl-primary" | standby nonce | primary nonce)
//!     u64 primary_seq     the primary's last committed sequence
//!     u64 first_seq_held  the first sequence its journal still holds
//!     u8 mode             0 async, 1 interval, 2 semi-sync
//!     u64 interval_ms     the shipping interval in interval mode (else 0)
//!     epochs              the primary's epoch history
//!     u8 role             0 primary, 1 standby (a chained one), 2 fenced
//!     str16 http          where clients write to it: HTTP host:port
//!     str16 ilp           and ILP TCP host:port (for a standby's refusals)
//! 4 Refuse        either way, then close
//!     rest reason         UTF-8 text naming what is wrong
//! 5 SchemaHistory primary -> standby
//!     rest                the bytes of the primary's journal/SCHEMA file
//! 6 SegmentStart  primary -> standby, before the first record of a segment
//!     u64 first_seq       the segment's first sequence (its file name)
//!     i64 created_ns      the segment header's creation time
//! 7 Records       primary -> standby
//!     rest                journal records back to back, each exactly as in
//!                         the primary's segment file (32-byte header with
//!                         length, CRC32C and seq, then the payload)
//! 8 Heartbeat     primary -> standby, while there is nothing to ship
//!     u64 primary_seq
//!     i64 primary_time_ns the primary's wall clock
//! 9 Ack           standby -> primary
//!     u64 received_seq    the last record received and appended
//!     u64 durable_seq     the last record fsynced on the standby
//!     u64 applied_seq     the last record applied to the standby's rdb
//! 10 Reseed       primary -> standby, when it needs records the primary's
//!                 journal no longer holds (trimmed behind a checkpoint)
//!     u64 seq             the cut: the tables as of this sequence follow
//!     u64 journal_from    then the records from this sequence on (the
//!                         start of the segment holding seq + 1, so the
//!                         standby's segment files are the primary's;
//!                         records up to seq are already in the tables)
//!     u32 tables
//!     u64 rows            rows in all, for progress
//! 11 Snapshot     primary -> standby
//!     rest                rows of one table, as an update payload
//!                         (tickdb-core's codec, as in a journal record)
//! 12 SnapshotEnd  primary -> standby
//!     u64 seq             the cut again
//! 13 Diverged     primary -> standby, instead of Welcome, then close
//!     [32] proof          as Welcome's: a standby cuts nothing on the word
//!                         of a peer that does not hold the secret
//!     u64 keep_through    the last sequence both journals agree on (by
//!                         their epoch histories): the standby holds
//!                         records past it that this primary never had, and
//!                         must cut them before it can follow
//!     u32 primary_epoch   the primary's epoch
//!     str16 reason        a sentence for the log
//!
//! epochs = u16 count (at most EPOCHS_IN_HANDSHAKE_MAX), then count ×
//!          (u32 epoch, u64 first_seq), oldest first: the journal's EPOCHS
//!          file (docs/journal.md)
//! ```
//!
//! Type bytes 0 and 14..=255 are unassigned and rejected.

use crate::ReplError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this build speaks (2: epochs in the handshake,
/// and Diverged).
pub const PROTOCOL_VERSION: u16 = 2;
/// Most epoch history entries a handshake carries: 48 KiB of them, which
/// the handshake bound below holds with room to spare. A history longer
/// than this (thousands of promotions) is refused with the reason.
pub const EPOCHS_IN_HANDSHAKE_MAX: usize = 4000;
/// Largest frame body, in bytes: one journal record of the largest size
/// (`RECORD_PAYLOAD_BYTES_MAX` plus its header) must fit.
pub const FRAME_BYTES_MAX: usize =
    tickdb_journal::format::RECORD_PAYLOAD_BYTES_MAX as usize + 64 * 1024;
/// Largest frame accepted before the peer is authenticated: a stranger on
/// the port cannot make the node allocate more.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = 64 * 1024;
/// Bytes before the body: u32 length and u8 type.
pub const FRAME_HEADER_BYTES: usize = 5;
/// A reader grows a body buffer by at most this much ahead of the bytes it
/// has received, so a lying length cannot make it allocate at once.
const READ_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of a nonce and of a proof (HMAC-SHA256).
pub const NONCE_BYTES: usize = 32;

pub const TYPE_CHALLENGE: u8 = 1;
pub const TYPE_HELLO: u8 = 2;
pub const TYPE_WELCOME: u8 = 3;
pub const TYPE_REFUSE: u8 = 4;
pub const TYPE_SCHEMA_HISTORY: u8 = 5;
pub const TYPE_SEGMENT_START: u8 = 6;
pub const TYPE_RECORDS: u8 = 7;
pub const TYPE_HEARTBEAT: u8 = 8;
pub const TYPE_ACK: u8 = 9;
pub const TYPE_RESEED: u8 = 10;
pub const TYPE_SNAPSHOT: u8 = 11;
pub const TYPE_SNAPSHOT_END: u8 = 12;
pub const TYPE_DIVERGED: u8 = 13;
/// Hello flag: the standby can take a reseed.
pub const FLAG_CAN_RESEED: u8 = 1;
/// Welcome's role byte.
pub const ROLE_PRIMARY: u8 = 0;
pub const ROLE_STANDBY: u8 = 1;
pub const ROLE_FENCED: u8 = 2;

/// How the primary ships records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// As soon as each record is committed.
    Async,
    /// Every `--forward-interval-s`, as the log-forwarding helper of
    /// Zero-Impact Crash Recovery for kdb+ does.
    Interval,
    /// As soon as committed, and a write is acknowledged only once
    /// `--sync-standbys` standbys have it fsynced.
    SemiSync,
}

impl Mode {
    fn byte(self) -> u8 {
        match self {
            Mode::Async => 0,
            Mode::Interval => 1,
            Mode::SemiSync => 2,
        }
    }

    fn from_byte(b: u8) -> Option<Mode> {
        Some(match b {
            0 => Mode::Async,
            1 => Mode::Interval,
            2 => Mode::SemiSync,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Async => "async",
            Mode::Interval => "interval",
            Mode::SemiSync => "semi-sync",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Challenge {
        version: u16,
        nonce: [u8; NONCE_BYTES],
        name: String,
    },
    Hello {
        version: u16,
        nonce: [u8; NONCE_BYTES],
        proof: [u8; NONCE_BYTES],
        from_seq: u64,
        last_seq: u64,
        last_crc: u32,
        flags: u8,
        name: String,
        http: String,
        epochs: tickdb_journal::EpochHistory,
    },
    Welcome {
        proof: [u8; NONCE_BYTES],
        primary_seq: u64,
        first_seq_held: u64,
        mode: Mode,
        interval_ms: u64,
        epochs: tickdb_journal::EpochHistory,
        role: u8,
        http: String,
        ilp: String,
    },
    Diverged {
        proof: [u8; NONCE_BYTES],
        keep_through: u64,
        primary_epoch: u32,
        reason: String,
    },
    Refuse {
        reason: String,
    },
    SchemaHistory {
        bytes: Vec<u8>,
    },
    SegmentStart {
        first_seq: u64,
        created_ns: i64,
    },
    Records {
        bytes: Vec<u8>,
    },
    Heartbeat {
        primary_seq: u64,
        primary_time_ns: i64,
    },
    Ack {
        received_seq: u64,
        durable_seq: u64,
        applied_seq: u64,
    },
    Reseed {
        seq: u64,
        journal_from: u64,
        tables: u32,
        rows: u64,
    },
    Snapshot {
        payload: Vec<u8>,
    },
    SnapshotEnd {
        seq: u64,
    },
}

impl Message {
    pub fn type_byte(&self) -> u8 {
        match self {
            Message::Challenge { .. } => TYPE_CHALLENGE,
            Message::Hello { .. } => TYPE_HELLO,
            Message::Welcome { .. } => TYPE_WELCOME,
            Message::Refuse { .. } => TYPE_REFUSE,
            Message::SchemaHistory { .. } => TYPE_SCHEMA_HISTORY,
            Message::SegmentStart { .. } => TYPE_SEGMENT_START,
            Message::Records { .. } => TYPE_RECORDS,
            Message::Heartbeat { .. } => TYPE_HEARTBEAT,
            Message::Ack { .. } => TYPE_ACK,
            Message::Reseed { .. } => TYPE_RESEED,
            Message::Snapshot { .. } => TYPE_SNAPSHOT,
            Message::SnapshotEnd { .. } => TYPE_SNAPSHOT_END,
            Message::Diverged { .. } => TYPE_DIVERGED,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Message::Challenge { .. } => "Challenge",
            Message::Hello { .. } => "Hello",
            Message::Welcome { .. } => "Welcome",
            Message::Refuse { .. } => "Refuse",
            Message::SchemaHistory { .. } => "SchemaHistory",
            Message::SegmentStart { .. } => "SegmentStart",
            Message::Records { .. } => "Records",
            Message::Heartbeat { .. } => "Heartbeat",
            Message::Ack { .. } => "Ack",
            Message::Reseed { .. } => "Reseed",
            Message::Snapshot { .. } => "Snapshot",
            Message::SnapshotEnd { .. } => "SnapshotEnd",
            Message::Diverged { .. } => "Diverged",
        }
    }

    /// The frame: header and body.
    pub fn encode(&self) -> Result<Vec<u8>, ReplError> {
        let mut body = Vec::new();
        fn str16(out: &mut Vec<u8>, s: &str) -> Result<(), ReplError> {
            let len = u16::try_from(s.len())
                .map_err(|_| ReplError::Protocol(format!("a name of {} bytes", s.len())))?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(s.as_bytes());
            Ok(())
        }
        match self {
            Message::Challenge {
                version,
                nonce,
                name,
            } => {
                body.extend_from_slice(&version.to_le_bytes());
                body.extend_from_slice(nonce);
                str16(&mut body, name)?;
            }
            Message::Hello {
                version,
                nonce,
                proof,
                from_seq,
                last_seq,
                last_crc,
                flags,
                name,
                http,
                epochs,
            } => {
                body.extend_from_slice(&version.to_le_bytes());
                body.extend_from_slice(nonce);
                body.extend_from_slice(proof);
                body.extend_from_slice(&from_seq.to_le_bytes());
                body.extend_from_slice(&last_seq.to_le_bytes());
                body.extend_from_slice(&last_crc.to_le_bytes());
                body.push(*flags);
                str16(&mut body, name)?;
                str16(&mut body, http)?;
                encode_epochs(&mut body, epochs)?;
            }
            Message::Welcome {
                proof,
                primary_seq,
                first_seq_held,
                mode,
                interval_ms,
                epochs,
                role,
                http,
                ilp,
            } => {
                body.extend_from_slice(proof);
                body.extend_from_slice(&primary_seq.to_le_bytes());
                body.extend_from_slice(&first_seq_held.to_le_bytes());
                body.push(mode.byte());
                body.extend_from_slice(&interval_ms.to_le_bytes());
                encode_epochs(&mut body, epochs)?;
                body.push(*role);
                str16(&mut body, http)?;
                str16(&mut body, ilp)?;
            }
            Message::Diverged {
                proof,
                keep_through,
                primary_epoch,
                reason,
            } => {
                body.extend_from_slice(proof);
                body.extend_from_slice(&keep_through.to_le_bytes());
                body.extend_from_slice(&primary_epoch.to_le_bytes());
                str16(&mut body, reason)?;
            }
            Message::Refuse { reason } => body.extend_from_slice(reason.as_bytes()),
            Message::SchemaHistory { bytes } | Message::Records { bytes } => {
                body.extend_from_slice(bytes)
            }
            Message::Snapshot { payload } => body.extend_from_slice(payload),
            Message::Reseed {
                seq,
                journal_from,
                tables,
                rows,
            } => {
                body.extend_from_slice(&seq.to_le_bytes());
                body.extend_from_slice(&journal_from.to_le_bytes());
                body.extend_from_slice(&tables.to_le_bytes());
                body.extend_from_slice(&rows.to_le_bytes());
            }
            Message::SnapshotEnd { seq } => body.extend_from_slice(&seq.to_le_bytes()),
            Message::SegmentStart {
                first_seq,
                created_ns,
            } => {
                body.extend_from_slice(&first_seq.to_le_bytes());
                body.extend_from_slice(&created_ns.to_le_bytes());
            }
            Message::Heartbeat {
                primary_seq,
                primary_time_ns,
            } => {
                body.extend_from_slice(&primary_seq.to_le_bytes());
                body.extend_from_slice(&primary_time_ns.to_le_bytes());
            }
            Message::Ack {
                received_seq,
                durable_seq,
                applied_seq,
            } => {
                body.extend_from_slice(&received_seq.to_le_bytes());
                body.extend_from_slice(&durable_seq.to_le_bytes());
                body.extend_from_slice(&applied_seq.to_le_bytes());
            }
        }
        if body.len() > FRAME_BYTES_MAX {
            return Err(ReplError::Protocol(format!(
                "{} of {} bytes is over FRAME_BYTES_MAX ({FRAME_BYTES_MAX})",
                self.name(),
                body.len()
            )));
        }
        let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.push(self.type_byte());
        frame.extend_from_slice(&body);
        Ok(frame)
    }

    /// Parses one frame's body of type `ty`.
    pub fn decode(ty: u8, body: Vec<u8>) -> Result<Message, ReplError> {
        // The two bulk messages are their body, as it came.
        match ty {
            TYPE_SCHEMA_HISTORY => return Ok(Message::SchemaHistory { bytes: body }),
            TYPE_RECORDS => return Ok(Message::Records { bytes: body }),
            TYPE_SNAPSHOT => return Ok(Message::Snapshot { payload: body }),
            _ => {}
        }
        let mut c = Cursor {
            b: &body,
            at: 0,
            what: ty,
        };
        let m = match ty {
            TYPE_CHALLENGE => Message::Challenge {
                version: c.u16()?,
                nonce: c.array()?,
                name: c.str16()?,
            },
            // A Hello of another version is read only as far as its
            // version (the layout may differ): the primary refuses it
            // naming both versions.
            TYPE_HELLO
                if body.len() >= 2
                    && u16::from_le_bytes([body[0], body[1]]) != PROTOCOL_VERSION =>
            {
                return Ok(Message::Hello {
                    version: u16::from_le_bytes([body[0], body[1]]),
                    nonce: [0; NONCE_BYTES],
                    proof: [0; NONCE_BYTES],
                    from_seq: 0,
                    last_seq: 0,
                    last_crc: 0,
                    flags: 0,
                    name: String::new(),
                    http: String::new(),
                    epochs: Default::default(),
                });
            }
            TYPE_HELLO => Message::Hello {
                version: c.u16()?,
                nonce: c.array()?,
                proof: c.array()?,
                from_seq: c.u64()?,
                last_seq: c.u64()?,
                last_crc: c.u32()?,
                flags: c.u8()?,
                name: c.str16()?,
                http: c.str16()?,
                epochs: c.epochs()?,
            },
            TYPE_WELCOME => Message::Welcome {
                proof: c.array()?,
                primary_seq: c.u64()?,
                first_seq_held: c.u64()?,
                mode: {
                    let b = c.u8()?;
                    Mode::from_byte(b)
                        .ok_or_else(|| ReplError::Protocol(format!("unknown mode {b}")))?
                },
                interval_ms: c.u64()?,
                epochs: c.epochs()?,
                role: c.u8()?,
                http: c.str16()?,
                ilp: c.str16()?,
            },
            TYPE_DIVERGED => Message::Diverged {
                proof: c.array()?,
                keep_through: c.u64()?,
                primary_epoch: c.u32()?,
                reason: c.str16()?,
            },
            TYPE_REFUSE => Message::Refuse {
                reason: String::from_utf8_lossy(c.rest()).into_owned(),
            },
            TYPE_SEGMENT_START => Message::SegmentStart {
                first_seq: c.u64()?,
                created_ns: c.u64()? as i64,
            },
            TYPE_HEARTBEAT => Message::Heartbeat {
                primary_seq: c.u64()?,
                primary_time_ns: c.u64()? as i64,
            },
            TYPE_RESEED => Message::Reseed {
                seq: c.u64()?,
                journal_from: c.u64()?,
                tables: c.u32()?,
                rows: c.u64()?,
            },
            TYPE_SNAPSHOT_END => Message::SnapshotEnd { seq: c.u64()? },
            TYPE_ACK => Message::Ack {
                received_seq: c.u64()?,
                durable_seq: c.u64()?,
                applied_seq: c.u64()?,
            },
            other => {
                return Err(ReplError::Protocol(format!(
                    "unknown message type {other}: not a tickdb replication peer, or a newer one"
                )))
            }
        };
        c.end()?;
        Ok(m)
    }
}

fn encode_epochs(body: &mut Vec<u8>, h: &tickdb_journal::EpochHistory) -> Result<(), ReplError> {
    let e = h.entries();
    if e.len() > EPOCHS_IN_HANDSHAKE_MAX {
        return Err(ReplError::Protocol(format!(
            "this journal's epoch history has {} entries; a handshake carries at most {EPOCHS_IN_HANDSHAKE_MAX}",
            e.len()
        )));
    }
    body.extend_from_slice(&(e.len() as u16).to_le_bytes());
    for x in e {
        body.extend_from_slice(&x.epoch.to_le_bytes());
        body.extend_from_slice(&x.first_seq.to_le_bytes());
    }
    Ok(())
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    what: u8,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ReplError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        match end {
            Some(end) => {
                let s = &self.b[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => Err(ReplError::Protocol(format!(
                "message type {} is {} bytes, too short",
                self.what,
                self.b.len()
            ))),
        }
    }

    fn u8(&mut self) -> Result<u8, ReplError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ReplError> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(a))
    }

    fn u32(&mut self) -> Result<u32, ReplError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }

    fn u64(&mut self) -> Result<u64, ReplError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn array(&mut self) -> Result<[u8; NONCE_BYTES], ReplError> {
        let mut a = [0u8; NONCE_BYTES];
        a.copy_from_slice(self.take(NONCE_BYTES)?);
        Ok(a)
    }

    fn str16(&mut self) -> Result<String, ReplError> {
        let n = self.u16()? as usize;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| {
            ReplError::Protocol(format!("message type {}: a name is not UTF-8", self.what))
        })
    }

    fn epochs(&mut self) -> Result<tickdb_journal::EpochHistory, ReplError> {
        let n = self.u16()? as usize;
        if n > EPOCHS_IN_HANDSHAKE_MAX {
            return Err(ReplError::Protocol(format!(
                "an epoch history of {n} entries (at most {EPOCHS_IN_HANDSHAKE_MAX})"
            )));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(tickdb_journal::EpochStart {
                epoch: self.u32()?,
                first_seq: self.u64()?,
            });
        }
        tickdb_journal::EpochHistory::new(v)
            .map_err(|e| ReplError::Protocol(format!("a bad epoch history: {e}")))
    }

    fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }

    fn end(&self) -> Result<(), ReplError> {
        if self.at != self.b.len() {
            return Err(ReplError::Protocol(format!(
                "message type {}: {} bytes left over",
                self.what,
                self.b.len() - self.at
            )));
        }
        Ok(())
    }
}

/// Reads one message; `Ok(None)` at a clean end of stream (between frames).
/// `max` bounds the body (`HANDSHAKE_FRAME_BYTES_MAX` before
/// authentication, `FRAME_BYTES_MAX` after).
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Message>, ReplError> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    let mut got = 0;
    while got < FRAME_HEADER_BYTES {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(ReplError::Protocol(
                "the connection closed inside a frame header".into(),
            ));
        }
        got += n;
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > max {
        return Err(ReplError::Protocol(format!(
            "a frame of {len} bytes is over the bound of {max} bytes: not a tickdb replication peer, or a corrupt stream"
        )));
    }
    let mut body = Vec::with_capacity(len.min(READ_CHUNK_BYTES));
    while body.len() < len {
        let want = (len - body.len()).min(READ_CHUNK_BYTES);
        let start = body.len();
        body.resize(start + want, 0);
        r.read_exact(&mut body[start..]).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ReplError::Protocol("the connection closed inside a frame".into())
            } else {
                ReplError::Io(e)
            }
        })?;
    }
    Message::decode(head[4], body).map(Some)
}

/// Writes one message and flushes it: a TLS session may hold the tail of
/// a write until flushed (on plain TCP the flush costs nothing).
pub async fn write_message<W: AsyncWrite + Unpin>(w: &mut W, m: &Message) -> Result<(), ReplError> {
    w.write_all(&m.encode()?).await?;
    w.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Message> {
        vec![
            Message::Challenge {
                version: 1,
                nonce: [7; 32],
                name: "primary:8711".into(),
            },
            Message::Hello {
                version: PROTOCOL_VERSION,
                nonce: [1; 32],
                proof: [2; 32],
                from_seq: 42,
                last_seq: 41,
                last_crc: 0xdead_beef,
                flags: FLAG_CAN_RESEED,
                name: "standby".into(),
                http: "10.0.0.2:8700".into(),
                epochs: tickdb_journal::EpochHistory::new(vec![
                    tickdb_journal::EpochStart {
                        epoch: 1,
                        first_seq: 1,
                    },
                    tickdb_journal::EpochStart {
                        epoch: 4,
                        first_seq: 30,
                    },
                ])
                .unwrap(),
            },
            Message::Welcome {
                proof: [3; 32],
                primary_seq: 100,
                first_seq_held: 1,
                mode: Mode::SemiSync,
                interval_ms: 0,
                epochs: Default::default(),
                role: ROLE_STANDBY,
                http: "10.0.0.1:8700".into(),
                ilp: "10.0.0.1:8709".into(),
            },
            Message::Refuse {
                reason: "diverged".into(),
            },
            Message::SchemaHistory {
                bytes: vec![1, 2, 3],
            },
            Message::SegmentStart {
                first_seq: 5,
                created_ns: -3,
            },
            Message::Records {
                bytes: vec![9; 100],
            },
            Message::Heartbeat {
                primary_seq: 7,
                primary_time_ns: 1_700_000_000,
            },
            Message::Ack {
                received_seq: 3,
                durable_seq: 2,
                applied_seq: 1,
            },
            Message::Reseed {
                seq: 41,
                journal_from: 30,
                tables: 2,
                rows: 1000,
            },
            Message::Snapshot {
                payload: vec![1; 10],
            },
            Message::SnapshotEnd { seq: 41 },
            Message::Diverged {
                proof: [5; 32],
                keep_through: 90,
                primary_epoch: 2,
                reason: "cut".into(),
            },
        ]
    }

    #[tokio::test]
    async fn every_message_round_trips() {
        for m in all() {
            let frame = m.encode().unwrap();
            let mut r = &frame[..];
            let back = read_message(&mut r, FRAME_BYTES_MAX)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(back, m);
            assert!(read_message(&mut r, FRAME_BYTES_MAX)
                .await
                .unwrap()
                .is_none());
        }
    }

    #[tokio::test]
    async fn bad_frames_are_protocol_errors() {
        // A stranger speaking HTTP: its first bytes are a huge length.
        let mut r = &b"GET / HTTP/1.1\r\n\r\n"[..];
        let e = read_message(&mut r, HANDSHAKE_FRAME_BYTES_MAX)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("not a tickdb replication peer"),
            "{e}"
        );
        // Truncated in the body.
        let mut frame = all()[1].encode().unwrap();
        frame.truncate(frame.len() - 3);
        let mut r = &frame[..];
        assert!(read_message(&mut r, FRAME_BYTES_MAX).await.is_err());
        // Unknown type.
        let mut r = &[0u8, 0, 0, 0, 200][..];
        assert!(read_message(&mut r, FRAME_BYTES_MAX).await.is_err());
        // Left-over bytes.
        let mut f = all()[8].encode().unwrap();
        f.push(0);
        f[0] += 1;
        let mut r = &f[..];
        assert!(read_message(&mut r, FRAME_BYTES_MAX).await.is_err());
    }
}
