//! The ILP TCP listener. Per the ILP convention there is no reply on TCP: a
//! bad line is logged with the peer and line number and the connection is
//! closed; the lines before it in the stream are kept.

use crate::error::TpError;
use crate::ingest::line_error;
use crate::tickerplant::Tickerplant;
use std::sync::Arc;
use tickdb_ilp::{IlpBatcher, IlpOptions, Precision};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// Bytes read from a connection at a time; also the most unparsed bytes
/// kept between reads beyond one line.
pub const TCP_READ_BYTES: usize = 1024 * 1024;
/// Concurrent ILP TCP connections; more are refused with a log line.
pub const TCP_CONNECTIONS_MAX: usize = 1024;

pub async fn serve(listener: TcpListener, tp: Arc<Tickerplant>) {
    let permits = Arc::new(tokio::sync::Semaphore::new(TCP_CONNECTIONS_MAX));
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("ILP TCP accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!("ILP TCP: refusing {peer}: {TCP_CONNECTIONS_MAX} connections open (TCP_CONNECTIONS_MAX)");
            continue;
        };
        let tp = tp.clone();
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            match connection(sock, &tp).await {
                Ok(()) => tracing::debug!("ILP TCP {peer} closed"),
                Err(e) => tracing::warn!("ILP TCP {peer}: {e}; closing the connection"),
            }
            drop(permit);
        });
    }
}

async fn connection(mut sock: TcpStream, tp: &Tickerplant) -> Result<(), TpError> {
    let line_bytes_max = tp.config().line_bytes_max;
    let opts = || IlpOptions {
        precision: Precision::Nanos,
        now_ns: crate::now_ns(),
        line_bytes_max,
    };
    let schema = tp.schema().clone();
    let mut buf: Vec<u8> = Vec::with_capacity(TCP_READ_BYTES);
    let mut line_no: u64 = 1;
    loop {
        let start = buf.len();
        buf.resize(start + TCP_READ_BYTES, 0);
        let n = sock
            .read(&mut buf[start..])
            .await
            .map_err(|e| TpError::Io(e.to_string()))?;
        buf.truncate(start + n);
        let mut batcher = IlpBatcher::new(&schema, opts());
        let (consumed, lines, err) = if n == 0 {
            // End of stream: a last line without a newline still counts.
            let (c, l, e) = batcher.push_buffer(&buf, line_no);
            if e.is_none() && c < buf.len() {
                let rest = &buf[c..];
                match batcher.push_line(rest, line_no + l) {
                    Ok(()) => (buf.len(), l + 1, None),
                    Err(e) => (c, l, Some(e)),
                }
            } else {
                (c, l, e)
            }
        } else {
            batcher.push_buffer(&buf, line_no)
        };
        line_no += lines;
        buf.drain(..consumed);
        if batcher.rows() > 0 {
            tp.write(batcher.finish()).await?;
        }
        if let Some(e) = err {
            return Err(line_error(e));
        }
        if n == 0 {
            return Ok(());
        }
    }
}
