//! A byte-stream guard under the PostgreSQL protocol codec: it follows the
//! message framing as bytes arrive and fails the read as soon as a message
//! header declares more than the limit, before the codec buffers it (the
//! codec alone accepts messages of up to 1 GiB: a 50 MB literal went
//! through, and each connection could hold that much).
//!
//! Framing (PostgreSQL protocol 3): the first message of a connection (the
//! startup packet, or a cancel request) is `i32 length` + body, the length
//! counting itself; every later message is `u8 type` + `i32 length` + body.
//! The SSL request, when a client sends one, is consumed before this guard
//! starts, so its first message is always the untyped one.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where the guard is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Reading a header: `have` of `need` bytes (4 untyped, 5 typed).
    Header { have: usize, need: usize },
    /// Inside a body, this many bytes to go.
    Body(usize),
}

/// Follows message boundaries and checks each declared length.
#[derive(Debug)]
pub struct MessageGuard {
    at: At,
    header: [u8; 5],
    bytes_max: usize,
}

/// Text of the error a too-large message ends the read with; the
/// connection loop looks for it to answer with SQLSTATE 54000.
pub const TOO_LARGE: &str = "message too large";

impl MessageGuard {
    pub fn new(bytes_max: usize) -> MessageGuard {
        MessageGuard {
            at: At::Header { have: 0, need: 4 },
            header: [0; 5],
            bytes_max,
        }
    }

    /// Follows `bytes` (the next bytes of the stream); fails on a message
    /// over the limit or a length below the protocol's minimum.
    pub fn observe(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.at {
                At::Body(left) => {
                    let n = left.min(bytes.len());
                    bytes = &bytes[n..];
                    self.at = if left == n {
                        At::Header { have: 0, need: 5 }
                    } else {
                        At::Body(left - n)
                    };
                }
                At::Header { have, need } => {
                    let n = (need - have).min(bytes.len());
                    self.header[have..have + n].copy_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    let have = have + n;
                    if have < need {
                        self.at = At::Header { have, need };
                        continue;
                    }
                    let len_at = need - 4;
                    let mut len4 = [0u8; 4];
                    len4.copy_from_slice(&self.header[len_at..need]);
                    let len = i32::from_be_bytes(len4);
                    if len < 4 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("malformed message: length {len}"),
                        ));
                    }
                    let len = len as usize;
                    if len > self.bytes_max {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{TOO_LARGE}: {len} bytes, over the limit of {} bytes (--pg-message-bytes-max)",
                                self.bytes_max
                            ),
                        ));
                    }
                    self.at = if len == 4 {
                        At::Header { have: 0, need: 5 }
                    } else {
                        At::Body(len - 4)
                    };
                }
            }
        }
        Ok(())
    }
}

/// A stream whose reads pass through a `MessageGuard`.
pub struct Guarded<S> {
    inner: S,
    guard: MessageGuard,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, guard: MessageGuard) -> Self {
        Guarded { inner, guard }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let fresh = buf.filled()[before..].to_vec();
                Poll::Ready(self.guard.observe(&fresh))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(t: u8, body: usize) -> Vec<u8> {
        let mut v = vec![t];
        v.extend(((body + 4) as i32).to_be_bytes());
        v.extend(vec![b'x'; body]);
        v
    }

    #[test]
    fn follows_messages_across_any_split() {
        let mut stream = Vec::new();
        stream.extend(12i32.to_be_bytes());
        stream.extend([0u8; 8]);
        stream.extend(typed(b'Q', 100));
        stream.extend(typed(b'S', 0));
        stream.extend(typed(b'Q', 1000));
        for split in [1, 2, 3, 7, 64, 5000] {
            let mut g = MessageGuard::new(2000);
            for chunk in stream.chunks(split) {
                g.observe(chunk).unwrap();
            }
            assert_eq!(g.at, At::Header { have: 0, need: 5 }, "split {split}");
        }
    }

    #[test]
    fn refuses_a_large_message_at_its_header() {
        let mut g = MessageGuard::new(1000);
        g.observe(&8i32.to_be_bytes()).unwrap();
        g.observe(&[0u8; 4]).unwrap();
        let mut big = vec![b'Q'];
        big.extend(50_000_000i32.to_be_bytes());
        let e = g.observe(&big).unwrap_err();
        assert!(e.to_string().contains(TOO_LARGE), "{e}");
        assert!(e.to_string().contains("50000000"), "{e}");
    }

    #[test]
    fn refuses_a_length_below_the_minimum() {
        let mut g = MessageGuard::new(1000);
        assert!(g.observe(&2i32.to_be_bytes()).is_err());
    }
}
