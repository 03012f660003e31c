//! The subscription port (`--tp-port`). A connection's first message decides
//! its role:
//! - `Subscribe { from_seq, tables, symbols }`: the tp registers the
//!   subscriber, answers `SubscribeOk { current_seq: S, schema }`, streams
//!   journal records `from_seq..=S` it lacks, then live updates from S+1 —
//!   no gap, no duplicate (kdb+ `r.q`).
//! - `Write { request_id, payload }`: a publisher (the aggregation engine);
//!   each write is journaled and answered with `WriteAck`.

use crate::hub::{SubFilter, Update};
use crate::tickerplant::Tickerplant;
use std::sync::Arc;
use tickdb_net::proto::{read_message, write_message, Message};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};

/// Journal records read ahead of the socket during catch-up.
pub const CATCHUP_RECORDS_AHEAD: usize = 64;

pub async fn serve(listener: TcpListener, tp: Arc<Tickerplant>) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("subscription accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let tp = tp.clone();
        tokio::spawn(async move {
            let _ = sock.set_nodelay(true);
            if let Err(e) = connection(sock, &tp, &peer.to_string()).await {
                tracing::warn!("subscriber {peer}: {e}");
            }
        });
    }
}

async fn connection(sock: TcpStream, tp: &Arc<Tickerplant>, peer: &str) -> Result<(), String> {
    let (mut rd, wr) = sock.into_split();
    let mut wr = BufWriter::with_capacity(1 << 20, wr);
    let first = read_message(&mut rd).await.map_err(|e| e.to_string())?;
    match first {
        None => Ok(()),
        Some(Message::Subscribe {
            from_seq,
            tables,
            symbols,
        }) => {
            for t in &tables {
                if tp.schema().table(t).is_none() {
                    let msg = format!("unknown table '{t}' in subscription");
                    let _ = write_message(
                        &mut wr,
                        &Message::Error {
                            message: msg.clone(),
                        },
                    )
                    .await;
                    let _ = wr.flush().await;
                    return Err(msg);
                }
            }
            let filter = SubFilter {
                tables: tables.into_iter().collect(),
                symbols: symbols.into_iter().collect(),
            };
            subscriber(rd, wr, tp, peer, filter, from_seq).await
        }
        Some(Message::Write {
            request_id,
            payload,
        }) => {
            let mut next = Some((request_id, payload));
            while let Some((request_id, payload)) = next.take() {
                let ack = match tp.write_payload(&payload).await {
                    Ok(seq) => Message::WriteAck {
                        request_id,
                        seq,
                        error: None,
                    },
                    Err(e) => Message::WriteAck {
                        request_id,
                        seq: 0,
                        error: Some(e.to_string()),
                    },
                };
                write_message(&mut wr, &ack)
                    .await
                    .map_err(|e| e.to_string())?;
                wr.flush().await.map_err(|e| e.to_string())?;
                match read_message(&mut rd).await.map_err(|e| e.to_string())? {
                    None => return Ok(()),
                    Some(Message::Write {
                        request_id,
                        payload,
                    }) => next = Some((request_id, payload)),
                    Some(other) => {
                        return Err(format!("unexpected message after Write: {other:?}"))
                    }
                }
            }
            Ok(())
        }
        Some(other) => {
            let msg = format!("expected Subscribe or Write first, got {other:?}");
            let _ = write_message(
                &mut wr,
                &Message::Error {
                    message: msg.clone(),
                },
            )
            .await;
            let _ = wr.flush().await;
            Err(msg)
        }
    }
}

async fn subscriber(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: BufWriter<tokio::net::tcp::OwnedWriteHalf>,
    tp: &Arc<Tickerplant>,
    peer: &str,
    filter: SubFilter,
    from_seq: u64,
) -> Result<(), String> {
    let sub = match tp.subscribe(&format!("rdb@{peer}"), filter.clone(), from_seq) {
        Ok(s) => s,
        Err(e) => {
            // Tell the subscriber why, as the protocol promises, then close.
            let message = e.to_string();
            let _ = write_message(
                &mut wr,
                &Message::Error {
                    message: message.clone(),
                },
            )
            .await;
            let _ = wr.flush().await;
            return Err(message);
        }
    };
    let queue = sub.queue.clone();
    let id = queue.id();
    let result = async {
        write_message(
            &mut wr,
            &Message::SubscribeOk {
                current_seq: sub.current_seq,
                schema_toml: tp.config().schema_toml.clone(),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        if let Some(reader) = sub.catchup {
            // The journal is read on a blocking thread, a bounded number of
            // records ahead of the socket.
            let (tx, mut rx) = tokio::sync::mpsc::channel(CATCHUP_RECORDS_AHEAD);
            let reading = tokio::task::spawn_blocking(move || {
                for rec in reader {
                    let stop = rec.is_err();
                    if tx.blocking_send(rec).is_err() || stop {
                        break;
                    }
                }
            });
            while let Some(rec) = rx.recv().await {
                let rec = rec.map_err(|e| format!("journal replay failed: {e}"))?;
                let payload = if filter.is_all() {
                    rec.payload
                } else {
                    let batches = tickdb_core::codec::decode(&rec.payload, None)
                        .map_err(|e| format!("journal record {}: {e}", rec.seq))?;
                    let u = Arc::new(Update {
                        seq: rec.seq,
                        rows: rec.rows as usize,
                        batches,
                        payload: Vec::new(),
                        time_ns: rec.time_ns,
                    });
                    filter.apply(&u).payload.clone()
                };
                write_message(&mut wr, &Message::Update { seq: rec.seq, payload: payload.into() })
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let _ = reading.await;
        }
        wr.flush().await.map_err(|e| e.to_string())?;
        let mut probe = [0u8; 1];
        loop {
            tokio::select! {
                got = queue.next() => {
                    let updates = got?;
                    for u in updates {
                        write_message(&mut wr, &Message::Update { seq: u.seq, payload: u.payload.clone().into() })
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    wr.flush().await.map_err(|e| e.to_string())?;
                }
                // A subscriber sends nothing after Subscribe; a read returning
                // means it closed the connection.
                r = tokio::io::AsyncReadExt::read(&mut rd, &mut probe) => {
                    match r {
                        Ok(0) | Err(_) => return Ok(()),
                        Ok(_) => return Err("unexpected bytes from subscriber".to_string()),
                    }
                }
            }
        }
    }
    .await;
    tp.unsubscribe(id);
    if let Err(reason) = &result {
        let _ = write_message(
            &mut wr,
            &Message::Error {
                message: reason.clone(),
            },
        )
        .await;
        let _ = wr.flush().await;
    }
    result
}
