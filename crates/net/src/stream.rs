//! One connection type for the ports tickdb roles meet on (the tp's
//! subscription port, the replication port): plain TCP, or TLS over it
//! (`--tls-cert` on the server, `--tp-tls-ca` or `--primary-tls-ca` on the
//! client). Protocol code reads and writes a `Stream` and never asks which
//! it is.
//!
//! The plain path stays what it was before TLS existed: a `TcpStream`, split
//! with `TcpStream::into_split` (no lock between the halves), and the enum's
//! match is the only thing added per read or write. A TLS session cannot be
//! split that way (both directions share one rustls state), so it is split
//! with `tokio::io::split`, which takes a short lock per poll.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A connection: plain TCP, or a TLS session on either side of it. The
/// TLS states are boxed: they are large (rustls buffers), and the enum
/// should not make every plain connection carry their size.
pub enum Stream {
    Plain(TcpStream),
    /// A TLS session this side accepted (`--tls-cert`).
    TlsServer(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// A TLS session this side opened.
    TlsClient(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// The read half of a `Stream`.
pub enum StreamRead {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Stream>),
}

/// The write half of a `Stream`.
pub enum StreamWrite {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Stream>),
}

impl Stream {
    /// Whether the bytes are encrypted on the wire.
    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    /// The halves, for a reader and a writer that run at once.
    pub fn into_split(self) -> (StreamRead, StreamWrite) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (StreamRead::Plain(r), StreamWrite::Plain(w))
            }
            tls => {
                let (r, w) = tokio::io::split(tls);
                (StreamRead::Tls(r), StreamWrite::Tls(w))
            }
        }
    }
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Stream {
        Stream::Plain(s)
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::TlsServer(s) => s.is_write_vectored(),
            Stream::TlsClient(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsServer(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::TlsClient(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for StreamRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StreamRead::Plain(s) => Pin::new(s).poll_read(cx, buf),
            StreamRead::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for StreamWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            StreamWrite::Plain(s) => Pin::new(s).poll_write(cx, buf),
            StreamWrite::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            StreamWrite::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            StreamWrite::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            StreamWrite::Plain(s) => s.is_write_vectored(),
            StreamWrite::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StreamWrite::Plain(s) => Pin::new(s).poll_flush(cx),
            StreamWrite::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StreamWrite::Plain(s) => Pin::new(s).poll_shutdown(cx),
            StreamWrite::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Plain TCP splits into owned halves (no lock between them), and
    /// bytes cross both ways.
    #[tokio::test]
    async fn a_plain_stream_splits_into_owned_halves() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&b).await.unwrap();
        });
        let s = Stream::from(TcpStream::connect(addr).await.unwrap());
        assert!(!s.is_tls());
        let (mut rd, mut wr) = s.into_split();
        assert!(matches!(
            (&rd, &wr),
            (StreamRead::Plain(_), StreamWrite::Plain(_))
        ));
        wr.write_all(b"ping").await.unwrap();
        wr.flush().await.unwrap();
        let mut b = [0u8; 4];
        rd.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        peer.await.unwrap();
    }
}
