//! The tp subscription wire protocol: how rdbs, the aggregation engine and
//! other clients subscribe to a tickerplant's updates and publish to it over
//! TCP. This module owns the byte format; the tp and its clients own what
//! the messages mean.
//!
//! # Conversation
//!
//! A subscriber connects and sends `Subscribe`. The tp answers `SubscribeOk`
//! with its current sequence S and its schema, then sends every journaled
//! update from `from_seq` through S (the replay) and then live updates from
//! S + 1, in sequence order, with no gap and no duplicate; `Heartbeat`s
//! tell an idle subscriber how far the tp has got. On a failure the tp sends
//! `Error` and closes the connection.
//!
//! A publisher (the aggregation engine publishing derived tables back)
//! connects and sends `Write`s instead; the tp answers each with a
//! `WriteAck` carrying the sequence the update was journaled at, or an
//! error.
//!
//! # Framing
//!
//! Every message is one frame. All integers are little-endian; strings are
//! UTF-8.
//!
//! ```text
//! offset  size  field
//! 0       4     u32 body_len: bytes of body (the type byte not included),
//!               at most FRAME_BYTES_MAX (256 MiB)
//! 4       1     u8 type (below)
//! 5       body_len   body, laid out per type
//! ```
//!
//! A stream ends cleanly only at a frame boundary. A connection that closes
//! inside a frame, a length over the bound, an unknown type, a body with
//! bytes missing or left over, or a string that is not UTF-8 is a protocol
//! error: the stream is corrupt and the connection is dropped.
//!
//! # Bodies
//!
//! `str16` is `u16 length` + that many bytes of UTF-8; `str32` is
//! `u32 length` + bytes. "rest" runs to the end of the body.
//!
//! ```text
//! type 1  Subscribe      client -> tp
//!         u64    from_seq       first sequence wanted (replay starts here)
//!         u32    table_count    0 = all tables
//!         table_count × str16   table names
//!         u32    symbol_count   0 = all symbols
//!         symbol_count × str16  symbols
//!         [u32   epoch]         optional: the epoch of the subscriber's
//!                               record from_seq - 1 (EPOCH_UNKNOWN,
//!                               0xFFFFFFFF: not known, not checked). A
//!                               subscriber that
//!                               sends it is epoch-aware: the tp refuses it
//!                               when its own record there is of another
//!                               epoch (the subscriber holds records the tp
//!                               never had: it must reload), and sends it
//!                               the optional SubscribeOk fields and Epoch
//!                               messages.
//!
//! type 2  SubscribeOk    tp -> client
//!         u64    current_seq    the tp's sequence S when the subscription
//!                               was registered
//!         str32  schema_toml    the tp's schema, as a TOML schema file
//!         [u32   epoch          to epoch-aware subscribers only: the tp's
//!          u8    role           epoch, its role (0 primary, 1 standby,
//!          str16 primary]       2 fenced) and the primary it knows (empty
//!                               when none)
//!
//! type 3  Update         tp -> client
//!         u64    seq            the update's journal sequence
//!         rest   payload        the update, in tickdb-core's codec encoding
//!                               (codec::encode: one or more batches)
//!
//! type 4  Error          tp -> client (the tp closes the connection after it)
//!         rest   message        UTF-8 text
//!
//! type 5  Heartbeat      tp -> client
//!         u64    current_seq    the tp's latest sequence
//!
//! type 6  Write          client -> tp
//!         u64    request_id     chosen by the client, echoed in the ack
//!         rest   payload        an update in tickdb-core's codec encoding
//!
//! type 7  WriteAck       tp -> client
//!         u64    request_id     the Write's request_id
//!         u64    seq            the update's journal sequence (0 on error)
//!         u8     status         0 = ok, 1 = error
//!         rest   error          UTF-8 reason when status = 1; empty when 0
//!
//! type 8  Epoch          tp -> epoch-aware client
//!         u32    epoch          the updates from first_seq on were written
//!         u64    first_seq      in this epoch (sent before the first update
//!                               of each epoch the subscriber receives)
//!
//! type 9  Login          client -> tp, before Subscribe or Write
//!         str16  user           a user of the tp's users file (--users)
//!         str16  password       that user's password
//! ```
//!
//! Type bytes 0 and 10..=255 are unassigned; a decoder rejects them.
//!
//! # Login
//!
//! A tp started with a users file takes a `Subscribe` only after a `Login`
//! of a user with the `read` role, and a `Write` only after one with
//! `write`; without it, or with a wrong password, it sends `Error` and
//! closes (failed logins are logged and limited per address, as on every
//! port). There is no reply to a good `Login`: the next message goes on as
//! usual. A tp without a users file ignores a `Login`. The password
//! crosses the network as it is: use this port on loopback or a network
//! you trust.

use crate::NetError;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame body accepted or sent, in bytes. Bounds what a reader
/// allocates for one message; an update larger than this cannot be sent.
pub const FRAME_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Bytes before the body: u32 length and u8 type.
pub const FRAME_HEADER_BYTES: usize = 5;
/// A reader grows a body buffer by at most this much ahead of the bytes it
/// has received, so a lying length cannot make it allocate 256 MiB at once.
const READ_CHUNK_BYTES: usize = 4 * 1024 * 1024;

pub const TYPE_SUBSCRIBE: u8 = 1;
pub const TYPE_SUBSCRIBE_OK: u8 = 2;
pub const TYPE_UPDATE: u8 = 3;
pub const TYPE_ERROR: u8 = 4;
pub const TYPE_HEARTBEAT: u8 = 5;
pub const TYPE_WRITE: u8 = 6;
pub const TYPE_WRITE_ACK: u8 = 7;
pub const TYPE_EPOCH: u8 = 8;
pub const TYPE_LOGIN: u8 = 9;

/// What an epoch-aware subscriber learns of the tp it reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpRole {
    pub epoch: u32,
    /// 0 primary, 1 standby, 2 fenced.
    pub role: u8,
    /// The primary's address as the tp knows it (empty when none).
    pub primary: String,
}

/// A Subscribe epoch that asks for no check (a subscriber that does not
/// know the epoch of its last record, e.g. restored from a checkpoint).
pub const EPOCH_UNKNOWN: u32 = u32::MAX;

pub const ROLE_PRIMARY: u8 = 0;
pub const ROLE_STANDBY: u8 = 1;
pub const ROLE_FENCED: u8 = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Client -> tp: start a subscription. Empty lists mean "all".
    Subscribe {
        from_seq: u64,
        tables: Vec<String>,
        symbols: Vec<String>,
        /// The epoch of the subscriber's record `from_seq - 1` (Some: the
        /// subscriber is epoch-aware).
        epoch: Option<u32>,
    },
    /// Tp -> client: the tp's sequence S at registration, and its schema;
    /// to an epoch-aware subscriber also its epoch and role.
    SubscribeOk {
        current_seq: u64,
        schema_toml: String,
        role: Option<TpRole>,
    },
    /// Tp -> epoch-aware client: the updates from `first_seq` on were
    /// written in `epoch`.
    Epoch { epoch: u32, first_seq: u64 },
    /// Tp -> client: one journaled update (tickdb-core codec encoding).
    Update { seq: u64, payload: Bytes },
    /// Tp -> client: the reason the tp is closing the connection.
    Error { message: String },
    /// Tp -> client: the tp's latest sequence, sent while idle.
    Heartbeat { current_seq: u64 },
    /// Client -> tp: publish an update (tickdb-core codec encoding).
    Write { request_id: u64, payload: Vec<u8> },
    /// Tp -> client: the outcome of a `Write`.
    WriteAck {
        request_id: u64,
        seq: u64,
        error: Option<String>,
    },
    /// Client -> tp: who the client is, before `Subscribe` or `Write`.
    Login { user: String, password: String },
}

impl Message {
    pub fn type_byte(&self) -> u8 {
        match self {
            Message::Subscribe { .. } => TYPE_SUBSCRIBE,
            Message::SubscribeOk { .. } => TYPE_SUBSCRIBE_OK,
            Message::Update { .. } => TYPE_UPDATE,
            Message::Error { .. } => TYPE_ERROR,
            Message::Heartbeat { .. } => TYPE_HEARTBEAT,
            Message::Write { .. } => TYPE_WRITE,
            Message::WriteAck { .. } => TYPE_WRITE_ACK,
            Message::Epoch { .. } => TYPE_EPOCH,
            Message::Login { .. } => TYPE_LOGIN,
        }
    }

    /// Bytes of the body (the frame minus its 5-byte header).
    pub fn body_len(&self) -> usize {
        let list = |v: &[String]| 4 + v.iter().map(|s| 2 + s.len()).sum::<usize>();
        match self {
            Message::Subscribe {
                tables,
                symbols,
                epoch,
                ..
            } => 8 + list(tables) + list(symbols) + if epoch.is_some() { 4 } else { 0 },
            Message::SubscribeOk {
                schema_toml, role, ..
            } => {
                8 + 4 + schema_toml.len() + role.as_ref().map_or(0, |r| 4 + 1 + 2 + r.primary.len())
            }
            Message::Epoch { .. } => 12,
            Message::Update { payload, .. } => 8 + payload.len(),
            Message::Error { message } => message.len(),
            Message::Heartbeat { .. } => 8,
            Message::Write { payload, .. } => 8 + payload.len(),
            Message::WriteAck { error, .. } => 17 + error.as_ref().map_or(0, |e| e.len()),
            Message::Login { user, password } => 2 + user.len() + 2 + password.len(),
        }
    }

    /// Checks the message can be framed: body within FRAME_BYTES_MAX and
    /// every str16 within u16.
    pub fn check(&self) -> Result<(), NetError> {
        let len = self.body_len();
        if len > FRAME_BYTES_MAX {
            return Err(NetError::Protocol(format!(
                "{} message body of {len} bytes exceeds FRAME_BYTES_MAX ({FRAME_BYTES_MAX})",
                self.name()
            )));
        }
        if let Message::SubscribeOk { role: Some(r), .. } = self {
            if r.primary.len() > u16::MAX as usize {
                return Err(NetError::Protocol(
                    "SubscribeOk: primary address too long".into(),
                ));
            }
        }
        if let Message::Subscribe {
            tables, symbols, ..
        } = self
        {
            if let Some(s) = tables
                .iter()
                .chain(symbols)
                .find(|s| s.len() > u16::MAX as usize)
            {
                return Err(NetError::Protocol(format!(
                    "Subscribe: name of {} bytes exceeds {} bytes",
                    s.len(),
                    u16::MAX
                )));
            }
        }
        if let Message::Login { user, password } = self {
            if user.len().max(password.len()) > u16::MAX as usize {
                return Err(NetError::Protocol(
                    "Login: user or password longer than 65535 bytes".into(),
                ));
            }
        }
        Ok(())
    }

    pub fn name(&self) -> &'static str {
        match self {
            Message::Subscribe { .. } => "Subscribe",
            Message::SubscribeOk { .. } => "SubscribeOk",
            Message::Update { .. } => "Update",
            Message::Error { .. } => "Error",
            Message::Heartbeat { .. } => "Heartbeat",
            Message::Write { .. } => "Write",
            Message::WriteAck { .. } => "WriteAck",
            Message::Epoch { .. } => "Epoch",
            Message::Login { .. } => "Login",
        }
    }
}

/// Appends `m` as one frame to `out`: for encoding once and sending the
/// same bytes to many subscribers. The caller keeps the message within
/// bounds (`Message::check`); `write_message` checks for it.
pub fn encode_message(m: &Message, out: &mut Vec<u8>) {
    let len = m.body_len();
    out.reserve(FRAME_HEADER_BYTES + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(m.type_byte());
    encode_fixed_part(m, out);
    match m {
        Message::Update { payload, .. } => out.extend_from_slice(payload),
        Message::Write { payload, .. } => out.extend_from_slice(payload),
        _ => {}
    }
}

/// Everything of the body except an `Update`'s or `Write`'s payload, so a
/// large payload can be written without first copying it.
fn encode_fixed_part(m: &Message, out: &mut Vec<u8>) {
    fn str16(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u16).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    match m {
        Message::Subscribe {
            from_seq,
            tables,
            symbols,
            epoch,
        } => {
            out.extend_from_slice(&from_seq.to_le_bytes());
            for list in [tables, symbols] {
                out.extend_from_slice(&(list.len() as u32).to_le_bytes());
                list.iter().for_each(|s| str16(out, s));
            }
            if let Some(e) = epoch {
                out.extend_from_slice(&e.to_le_bytes());
            }
        }
        Message::SubscribeOk {
            current_seq,
            schema_toml,
            role,
        } => {
            out.extend_from_slice(&current_seq.to_le_bytes());
            out.extend_from_slice(&(schema_toml.len() as u32).to_le_bytes());
            out.extend_from_slice(schema_toml.as_bytes());
            if let Some(r) = role {
                out.extend_from_slice(&r.epoch.to_le_bytes());
                out.push(r.role);
                str16(out, &r.primary);
            }
        }
        Message::Epoch { epoch, first_seq } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&first_seq.to_le_bytes());
        }
        Message::Update { seq, .. } => out.extend_from_slice(&seq.to_le_bytes()),
        Message::Error { message } => out.extend_from_slice(message.as_bytes()),
        Message::Heartbeat { current_seq } => out.extend_from_slice(&current_seq.to_le_bytes()),
        Message::Write { request_id, .. } => out.extend_from_slice(&request_id.to_le_bytes()),
        Message::Login { user, password } => {
            str16(out, user);
            str16(out, password);
        }
        Message::WriteAck {
            request_id,
            seq,
            error,
        } => {
            out.extend_from_slice(&request_id.to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
            match error {
                None => out.push(0),
                Some(e) => {
                    out.push(1);
                    out.extend_from_slice(e.as_bytes());
                }
            }
        }
    }
}

/// Writes one message. The writer is not flushed: wrap the socket in a
/// `BufWriter` and flush after a burst. Returns after the bytes are handed
/// to the writer, not after the peer has them.
pub async fn write_message<W: AsyncWrite + Unpin>(w: &mut W, m: &Message) -> Result<(), NetError> {
    m.check()?;
    let mut head = Vec::with_capacity(64);
    match m {
        Message::Update { payload, .. } => {
            encode_header_and_fixed(m, &mut head);
            w.write_all(&head).await?;
            w.write_all(payload).await?;
        }
        Message::Write { payload, .. } => {
            encode_header_and_fixed(m, &mut head);
            w.write_all(&head).await?;
            w.write_all(payload).await?;
        }
        _ => {
            encode_message(m, &mut head);
            w.write_all(&head).await?;
        }
    }
    Ok(())
}

fn encode_header_and_fixed(m: &Message, out: &mut Vec<u8>) {
    out.extend_from_slice(&(m.body_len() as u32).to_le_bytes());
    out.push(m.type_byte());
    encode_fixed_part(m, out);
}

/// Reads one message. `Ok(None)` on a clean end of stream at a frame
/// boundary; an end inside a frame is a protocol error.
pub async fn read_message<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Message>, NetError> {
    read_message_max(r, FRAME_BYTES_MAX).await
}

/// `read_message` with a tighter bound on the body: a server reading from
/// clients it does not trust bounds what one frame can make it hold (the tp
/// takes a `Write` no larger than an HTTP write request). A longer frame is
/// a protocol error before any of its body is read.
pub async fn read_message_max<R: AsyncRead + Unpin>(
    r: &mut R,
    body_bytes_max: usize,
) -> Result<Option<Message>, NetError> {
    let mut head = [0u8; FRAME_HEADER_BYTES];
    let mut got = 0;
    while got < head.len() {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(NetError::Protocol(format!(
                "connection closed inside a frame header ({got} of {FRAME_HEADER_BYTES} bytes)"
            )));
        }
        got += n;
    }
    let (len, ty) = parse_header(&head)?;
    if len > body_bytes_max {
        return Err(NetError::Protocol(format!(
            "{} frame of {len} bytes exceeds this reader's bound of {body_bytes_max} bytes",
            type_name(ty)
        )));
    }
    // Grow the buffer as bytes arrive rather than trusting the length.
    let mut body = Vec::with_capacity(len.min(READ_CHUNK_BYTES));
    while body.len() < len {
        let from = body.len();
        let to = len.min(from + READ_CHUNK_BYTES.max(from));
        body.resize(to, 0);
        let mut filled = from;
        while filled < to {
            let n = r.read(&mut body[filled..to]).await?;
            if n == 0 {
                return Err(NetError::Protocol(format!(
                    "connection closed inside a {} frame ({filled} of {len} body bytes)",
                    type_name(ty)
                )));
            }
            filled += n;
        }
    }
    decode_body(ty, Bytes::from(body)).map(Some)
}

/// Decodes one frame from the start of `buf`: `Ok(None)` if `buf` does not
/// hold a whole frame yet, else the message and the bytes it took.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Message, usize)>, NetError> {
    if buf.len() < FRAME_HEADER_BYTES {
        return Ok(None);
    }
    let head: &[u8; FRAME_HEADER_BYTES] = buf[..FRAME_HEADER_BYTES]
        .try_into()
        .expect("slice has the header's length");
    let (len, ty) = parse_header(head)?;
    let end = FRAME_HEADER_BYTES + len;
    if buf.len() < end {
        return Ok(None);
    }
    let body = Bytes::copy_from_slice(&buf[FRAME_HEADER_BYTES..end]);
    Ok(Some((decode_body(ty, body)?, end)))
}

fn parse_header(head: &[u8; FRAME_HEADER_BYTES]) -> Result<(usize, u8), NetError> {
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let ty = head[4];
    if !(TYPE_SUBSCRIBE..=TYPE_LOGIN).contains(&ty) {
        return Err(NetError::Protocol(format!(
            "unknown message type {ty} (is the peer a tickdb tp or subscriber?)"
        )));
    }
    if len > FRAME_BYTES_MAX {
        return Err(NetError::Protocol(format!(
            "{} frame of {len} bytes exceeds FRAME_BYTES_MAX ({FRAME_BYTES_MAX})",
            type_name(ty)
        )));
    }
    Ok((len, ty))
}

fn type_name(ty: u8) -> &'static str {
    match ty {
        TYPE_SUBSCRIBE => "Subscribe",
        TYPE_SUBSCRIBE_OK => "SubscribeOk",
        TYPE_UPDATE => "Update",
        TYPE_ERROR => "Error",
        TYPE_HEARTBEAT => "Heartbeat",
        TYPE_WRITE => "Write",
        TYPE_WRITE_ACK => "WriteAck",
        TYPE_EPOCH => "Epoch",
        TYPE_LOGIN => "Login",
        _ => "unknown",
    }
}

/// Decodes a frame body of type `ty`. Every length is checked against the
/// bytes present; nothing panics on bad input.
pub fn decode_body(ty: u8, body: Bytes) -> Result<Message, NetError> {
    let mut r = BodyReader {
        body: &body,
        pos: 0,
        ty,
    };
    let m = match ty {
        TYPE_SUBSCRIBE => {
            let from_seq = r.u64()?;
            let tables = r.str16_list()?;
            let symbols = r.str16_list()?;
            let epoch = if r.remaining() > 0 {
                Some(r.u32()?)
            } else {
                None
            };
            Message::Subscribe {
                from_seq,
                tables,
                symbols,
                epoch,
            }
        }
        TYPE_SUBSCRIBE_OK => {
            let current_seq = r.u64()?;
            let n = r.u32()? as usize;
            let schema_toml = r.string(n)?;
            let role = if r.remaining() > 0 {
                let epoch = r.u32()?;
                let role = r.u8()?;
                let n = r.u16()? as usize;
                Some(TpRole {
                    epoch,
                    role,
                    primary: r.string(n)?,
                })
            } else {
                None
            };
            Message::SubscribeOk {
                current_seq,
                schema_toml,
                role,
            }
        }
        TYPE_EPOCH => Message::Epoch {
            epoch: r.u32()?,
            first_seq: r.u64()?,
        },
        TYPE_LOGIN => {
            let n = r.u16()? as usize;
            let user = r.string(n)?;
            let n = r.u16()? as usize;
            Message::Login {
                user,
                password: r.string(n)?,
            }
        }
        TYPE_UPDATE => {
            let seq = r.u64()?;
            // The payload shares the body's buffer: no copy.
            let payload = body.slice(r.pos..);
            r.pos = body.len();
            Message::Update { seq, payload }
        }
        TYPE_ERROR => {
            let n = r.remaining();
            Message::Error {
                message: r.string(n)?,
            }
        }
        TYPE_HEARTBEAT => Message::Heartbeat {
            current_seq: r.u64()?,
        },
        TYPE_WRITE => {
            let request_id = r.u64()?;
            let payload = body[r.pos..].to_vec();
            r.pos = body.len();
            Message::Write {
                request_id,
                payload,
            }
        }
        TYPE_WRITE_ACK => {
            let request_id = r.u64()?;
            let seq = r.u64()?;
            let error = match r.u8()? {
                0 => None,
                1 => {
                    let n = r.remaining();
                    Some(r.string(n)?)
                }
                s => return Err(r.err(format!("status byte {s} (expected 0 or 1)"))),
            };
            Message::WriteAck {
                request_id,
                seq,
                error,
            }
        }
        _ => {
            return Err(NetError::Protocol(format!("unknown message type {ty}")));
        }
    };
    if r.remaining() != 0 {
        return Err(r.err(format!(
            "{} bytes left over after the message",
            r.remaining()
        )));
    }
    Ok(m)
}

struct BodyReader<'a> {
    body: &'a [u8],
    pos: usize,
    ty: u8,
}

impl BodyReader<'_> {
    fn err(&self, reason: String) -> NetError {
        NetError::Protocol(format!(
            "bad {} body at byte {}: {reason}",
            type_name(self.ty),
            self.pos
        ))
    }

    fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&[u8], NetError> {
        if self.remaining() < n {
            return Err(self.err(format!("needs {n} bytes, {} left", self.remaining())));
        }
        let s = &self.body[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, NetError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, NetError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, NetError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, NetError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self, n: usize) -> Result<String, NetError> {
        let at = self.pos;
        let b = self.take(n)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => {
                self.pos = at;
                Err(self.err("string is not UTF-8".to_string()))
            }
        }
    }

    fn str16_list(&mut self) -> Result<Vec<String>, NetError> {
        let count = self.u32()? as usize;
        // Each entry takes at least its 2-byte length: a count the body
        // cannot hold is rejected before allocating for it.
        if count > self.remaining() / 2 {
            return Err(self.err(format!(
                "list of {count} names cannot fit in the {} bytes left",
                self.remaining()
            )));
        }
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let n = self.u16()? as usize;
            out.push(self.string(n)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Message> {
        vec![
            Message::Subscribe {
                from_seq: 7,
                tables: vec!["trade".into(), "quote".into()],
                symbols: vec!["AAPL".into(), "".into(), "ünï".into()],
                epoch: None,
            },
            Message::Subscribe {
                from_seq: 0,
                tables: vec![],
                symbols: vec![],
                epoch: Some(7),
            },
            Message::SubscribeOk {
                current_seq: u64::MAX,
                schema_toml: "[[table]]\nname = \"t\"\n".into(),
                role: None,
            },
            Message::SubscribeOk {
                current_seq: 3,
                schema_toml: String::new(),
                role: Some(TpRole {
                    epoch: 4,
                    role: ROLE_STANDBY,
                    primary: "10.0.0.1:8711".into(),
                }),
            },
            Message::Epoch {
                epoch: 9,
                first_seq: 1234,
            },
            Message::Update {
                seq: 42,
                payload: Bytes::from_static(b"\x01\x00\x00"),
            },
            Message::Update {
                seq: 1,
                payload: Bytes::new(),
            },
            Message::Error {
                message: "journal is poisoned".into(),
            },
            Message::Error {
                message: String::new(),
            },
            Message::Heartbeat { current_seq: 99 },
            Message::Login {
                user: "agg".into(),
                password: "pässword".into(),
            },
            Message::Write {
                request_id: 3,
                payload: vec![1, 2, 3, 4],
            },
            Message::WriteAck {
                request_id: 3,
                seq: 100,
                error: None,
            },
            Message::WriteAck {
                request_id: 4,
                seq: 0,
                error: Some("unknown table 'x'".into()),
            },
        ]
    }

    #[test]
    fn byte_layout_is_as_documented() {
        let mut out = Vec::new();
        encode_message(
            &Message::Heartbeat {
                current_seq: 0x0102,
            },
            &mut out,
        );
        assert_eq!(out, [8, 0, 0, 0, 5, 2, 1, 0, 0, 0, 0, 0, 0]);
        out.clear();
        encode_message(
            &Message::Subscribe {
                from_seq: 1,
                tables: vec!["t".into()],
                symbols: vec![],
                epoch: None,
            },
            &mut out,
        );
        assert_eq!(
            out,
            [19, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, b't', 0, 0, 0, 0]
        );
        out.clear();
        encode_message(
            &Message::WriteAck {
                request_id: 1,
                seq: 2,
                error: Some("e".into()),
            },
            &mut out,
        );
        assert_eq!(out.len(), 5 + 18);
        assert_eq!(&out[..5], [18, 0, 0, 0, 7]);
        assert_eq!(&out[21..], [1, b'e']);
    }

    #[test]
    fn every_message_round_trips_through_decode_frame() {
        for m in samples() {
            let mut out = Vec::new();
            encode_message(&m, &mut out);
            assert_eq!(out.len(), FRAME_HEADER_BYTES + m.body_len(), "{m:?}");
            // Every proper prefix is "not yet".
            for cut in 0..out.len() {
                assert!(
                    decode_frame(&out[..cut]).unwrap().is_none(),
                    "{m:?} cut {cut}"
                );
            }
            let (got, used) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(used, out.len());
            assert_eq!(got, m);
        }
    }

    #[tokio::test]
    async fn async_read_and_write_round_trip() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let msgs = samples();
        let sent = msgs.clone();
        let writer = tokio::spawn(async move {
            for m in &sent {
                write_message(&mut a, m).await.unwrap();
            }
            a.shutdown().await.unwrap();
        });
        for m in &msgs {
            assert_eq!(read_message(&mut b).await.unwrap().as_ref(), Some(m));
        }
        assert!(read_message(&mut b).await.unwrap().is_none());
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn truncated_streams_are_protocol_errors() {
        let mut out = Vec::new();
        encode_message(
            &Message::Update {
                seq: 1,
                payload: Bytes::from_static(b"abcdef"),
            },
            &mut out,
        );
        for cut in 1..out.len() {
            let mut r = &out[..cut];
            let e = read_message(&mut r).await.unwrap_err();
            assert!(matches!(e, NetError::Protocol(_)), "cut {cut}: {e}");
            assert!(e.to_string().contains("connection closed inside"), "{e}");
        }
        let mut empty: &[u8] = &[];
        assert!(read_message(&mut empty).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn lengths_are_bounded() {
        let mut frame = Vec::new();
        frame.extend_from_slice(&((FRAME_BYTES_MAX as u32) + 1).to_le_bytes());
        frame.push(TYPE_UPDATE);
        let e = read_message(&mut &frame[..]).await.unwrap_err().to_string();
        assert!(e.contains("exceeds FRAME_BYTES_MAX"), "{e}");
        // A lying length with few bytes behind it fails without allocating
        // the whole claim up front.
        let mut frame = Vec::new();
        frame.extend_from_slice(&(FRAME_BYTES_MAX as u32).to_le_bytes());
        frame.push(TYPE_UPDATE);
        frame.extend_from_slice(&[0; 100]);
        let e = read_message(&mut &frame[..]).await.unwrap_err().to_string();
        assert!(e.contains("connection closed inside a Update frame"), "{e}");
        // A list count the body cannot hold.
        let mut body = Vec::new();
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        let e = decode_body(TYPE_SUBSCRIBE, Bytes::from(body))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot fit"), "{e}");
    }

    #[tokio::test]
    async fn a_reader_can_bound_frames_tighter() {
        let mut frame = Vec::new();
        encode_message(
            &Message::Write {
                request_id: 1,
                payload: vec![7; 100],
            },
            &mut frame,
        );
        let e = read_message_max(&mut &frame[..], 107)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "protocol error: Write frame of 108 bytes exceeds this reader's bound of 107 bytes"
        );
        let m = read_message_max(&mut &frame[..], 108).await.unwrap();
        assert!(matches!(m, Some(Message::Write { request_id: 1, .. })));
    }

    #[test]
    fn bad_bodies_are_rejected() {
        let e = decode_frame(&[0, 0, 0, 0, 10]).unwrap_err().to_string();
        assert!(e.contains("unknown message type 10"), "{e}");
        let e = decode_frame(&[0, 0, 0, 0, 0]).unwrap_err().to_string();
        assert!(e.contains("unknown message type 0"), "{e}");
        // Heartbeat with a byte left over.
        let e = decode_frame(&[9, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("left over"), "{e}");
        // Error text that is not UTF-8.
        let e = decode_frame(&[1, 0, 0, 0, 4, 0xff])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not UTF-8"), "{e}");
        // WriteAck with a bad status byte.
        let mut f = vec![17, 0, 0, 0, 7];
        f.extend_from_slice(&[0; 16]);
        f.push(2);
        let e = decode_frame(&f).unwrap_err().to_string();
        assert!(e.contains("status byte 2"), "{e}");
    }

    #[tokio::test]
    async fn oversized_messages_are_not_sent() {
        let m = Message::Write {
            request_id: 1,
            payload: vec![0; FRAME_BYTES_MAX],
        };
        let mut sink = tokio::io::sink();
        let e = write_message(&mut sink, &m).await.unwrap_err().to_string();
        assert!(e.contains("exceeds FRAME_BYTES_MAX"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_frame(&bytes);
            for ty in 0..=8u8 {
                let _ = decode_body(ty, Bytes::copy_from_slice(&bytes));
            }
        }

        #[test]
        fn mutated_frames_never_panic(idx in 0usize..11, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
            let m = &samples()[idx];
            let mut out = Vec::new();
            encode_message(m, &mut out);
            for (at, b) in flips {
                let at = at % out.len();
                out[at] = b;
            }
            if let Ok(Some((got, used))) = decode_frame(&out) {
                prop_assert!(used <= out.len());
                // Whatever decodes re-encodes to the same bytes.
                let mut again = Vec::new();
                encode_message(&got, &mut again);
                prop_assert_eq!(&again[..], &out[..used]);
            }
        }

        #[test]
        fn random_subscribes_round_trip(
            from_seq in any::<u64>(),
            tables in proptest::collection::vec(".{0,12}", 0..5),
            symbols in proptest::collection::vec(".{0,12}", 0..5),
        ) {
            let m = Message::Subscribe { from_seq, tables, symbols, epoch: None };
            let mut out = Vec::new();
            encode_message(&m, &mut out);
            let (got, used) = decode_frame(&out).unwrap().unwrap();
            prop_assert_eq!(used, out.len());
            prop_assert_eq!(got, m);
        }
    }
}
