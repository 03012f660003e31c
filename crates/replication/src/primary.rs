//! The replication listener (`--repl-port`): every tickerplant serves one,
//! so any node can be followed (a standby too: chained, as kdb+ chained
//! tickerplants are). Per connection: the challenge, the standby's proof,
//! the checks that keep both journals whole, then a shipper.
//!
//! Refused, with the reason sent and logged, and nothing changed on either
//! side: a protocol version this build does not speak, a wrong secret, a
//! standby holding records past this journal's end (this primary lost
//! records, or the standby followed another primary), a standby whose last
//! record differs from this journal's record at the same sequence
//! (diverged), and a standby needing records this journal no longer holds.
//!
//! With `--tls-cert` the port speaks only TLS. The primary speaks first
//! here (its Challenge), so a plaintext standby sends nothing: a client
//! that sends no ClientHello within `CLIENT_HELLO_WAIT_MS` is taken for
//! one, and sent a `Refuse` saying TLS is required instead of a Challenge.

use crate::auth::{self, Secret};
use crate::protocol::{
    self, Message, Mode, FLAG_CAN_RESEED, HANDSHAKE_FRAME_BYTES_MAX, PROTOCOL_VERSION,
};
use crate::reseed::{SnapshotCut, SnapshotSource};
use crate::shipper::{self, ShipOptions};
use crate::status::{StandbyLink, Standbys};
use crate::ReplError;
use std::sync::Arc;
use std::time::Duration;
use tickdb_journal::RawReader;
use tickdb_net::stream::Stream;
use tickdb_net::tls::{Accepted, ServerTls, CLIENT_HELLO_WAIT_MS};
use tickdb_tp::Tickerplant;
use tokio::net::TcpListener;

/// Time a connection has to complete the handshake.
pub const HANDSHAKE_TIMEOUT_S: u64 = 10;
/// Standbys (and connections still in their handshake) served at once.
pub const REPL_CONNECTIONS_MAX: usize = 64;
/// What a plaintext standby on the TLS port is told.
pub const TLS_REQUIRED: &str =
    "this replication port speaks TLS only (the node was started with --tls-cert): \
start the standby with --primary-tls-ca FILE, the CA that signed the primary's certificate";

/// How this node serves its standbys.
#[derive(Debug, Clone)]
pub struct PrimaryOptions {
    /// This node's name, as standbys see it.
    pub name: String,
    pub ship: ShipOptions,
    pub secret: Secret,
    /// The tables a standby is reseeded from (an `up` node's rdb); None on
    /// a node without tables.
    pub snapshots: Option<Arc<dyn SnapshotSource>>,
    /// Where clients write to this node (HTTP and ILP TCP, host:port), sent
    /// to standbys so that their refusals can name it.
    pub http: String,
    pub ilp: String,
    /// `--tls-cert`: the port speaks only TLS.
    pub tls: Option<ServerTls>,
}

impl std::fmt::Debug for dyn SnapshotSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotSource")
    }
}

/// Snapshot payloads read ahead of the socket during a reseed.
const RESEED_PAYLOADS_AHEAD: usize = 4;

/// Serves standbys on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    tp: Arc<Tickerplant>,
    opts: Arc<PrimaryOptions>,
    standbys: Arc<Standbys>,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(REPL_CONNECTIONS_MAX));
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("replication accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::warn!("replication: refusing {peer}: {REPL_CONNECTIONS_MAX} connections open");
            continue;
        };
        let _ = sock.set_nodelay(true);
        let (tp, opts, standbys) = (tp.clone(), opts.clone(), standbys.clone());
        tokio::spawn(async move {
            let sock = match &opts.tls {
                None => Stream::Plain(sock),
                Some(ServerTls(acceptor)) => match tickdb_net::tls::accept(
                    sock,
                    acceptor,
                    Duration::from_millis(CLIENT_HELLO_WAIT_MS),
                    Duration::from_secs(HANDSHAKE_TIMEOUT_S),
                )
                .await
                {
                    Accepted::Tls(s) => s,
                    Accepted::Plaintext(sock) => {
                        tracing::warn!("replication: {peer}: a plaintext standby on the TLS port; told to connect with TLS (--primary-tls-ca)");
                        let refusal = Message::Refuse {
                            reason: TLS_REQUIRED.to_string(),
                        };
                        if let Ok(frame) = refusal.encode() {
                            tickdb_net::tls::refuse_plaintext(sock, &frame).await;
                        }
                        return;
                    }
                    Accepted::Failed(why) => {
                        tracing::warn!("replication: {peer}: {why}");
                        return;
                    }
                },
            };
            match serve_one(sock, &peer.to_string(), tp, &opts, &standbys).await {
                Ok(()) => tracing::info!("replication: standby {peer} disconnected"),
                Err(e) => tracing::warn!("replication: {peer}: {e}"),
            }
            drop(permit);
        });
    }
}

async fn refuse(sock: &mut Stream, reason: String) -> ReplError {
    let _ = protocol::write_message(
        sock,
        &Message::Refuse {
            reason: reason.clone(),
        },
    )
    .await;
    ReplError::Refused(reason)
}

/// The CRC32C of this journal's record at `seq`, if it holds it.
fn crc_at(tp: &Tickerplant, seq: u64) -> Result<Option<u32>, ReplError> {
    let dir = &tp.config().journal_dir;
    let mut r = match RawReader::open(dir, seq, seq) {
        Ok(r) => r,
        Err(_) => return Ok(None),
    };
    let mut buf = Vec::new();
    match r.read_into(&mut buf) {
        Ok(Some(_)) if buf.len() >= 8 => {
            Ok(Some(u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]])))
        }
        Ok(_) => Ok(None),
        Err(e) => Err(ReplError::Journal(e.to_string())),
    }
}

/// The first sequence the journal still holds (1 unless trimmed).
fn first_seq_held(tp: &Tickerplant) -> u64 {
    let dir = &tp.config().journal_dir;
    std::fs::read_dir(dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            tickdb_journal::format::parse_segment_file_name(&e.file_name().to_string_lossy())
        })
        .min()
        .unwrap_or(1)
}

async fn serve_one(
    mut sock: Stream,
    peer: &str,
    tp: Arc<Tickerplant>,
    opts: &PrimaryOptions,
    standbys: &Standbys,
) -> Result<(), ReplError> {
    let nonce = auth::nonce();
    let handshake = async {
        protocol::write_message(
            &mut sock,
            &Message::Challenge {
                version: PROTOCOL_VERSION,
                nonce,
                name: opts.name.clone(),
            },
        )
        .await?;
        protocol::read_message(&mut sock, HANDSHAKE_FRAME_BYTES_MAX).await
    };
    let hello =
        match tokio::time::timeout(Duration::from_secs(HANDSHAKE_TIMEOUT_S), handshake).await {
            Err(_) => {
                return Err(ReplError::Protocol(format!(
                    "no Hello within {HANDSHAKE_TIMEOUT_S} s: not a tickdb standby"
                )))
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(None)) => return Err(ReplError::Protocol("closed before its Hello".into())),
            Ok(Ok(Some(m))) => m,
        };
    let Message::Hello {
        version,
        nonce: their_nonce,
        proof,
        from_seq,
        last_seq,
        last_crc,
        flags,
        name,
        http,
        epochs: standby_epochs,
    } = hello
    else {
        return Err(refuse(
            &mut sock,
            format!("expected Hello, got {}: not a tickdb standby", hello.name()),
        )
        .await);
    };
    if version != PROTOCOL_VERSION {
        return Err(refuse(
            &mut sock,
            format!("this primary speaks replication protocol version {PROTOCOL_VERSION}; the standby speaks {version}: run the same tickdb version on both"),
        )
        .await);
    }
    if !opts
        .secret
        .check(&opts.secret.standby_proof(&nonce, &their_nonce), &proof)
    {
        tracing::warn!("replication: {peer} ({name}) failed authentication: wrong shared secret");
        return Err(refuse(
            &mut sock,
            "authentication failed: the standby's replication secret is not this primary's (--repl-secret-file, TICKDB_REPL_SECRET)".into(),
        )
        .await);
    }
    if from_seq != last_seq + 1 {
        return Err(refuse(
            &mut sock,
            format!("bad Hello: from_seq {from_seq} does not follow last_seq {last_seq}"),
        )
        .await);
    }
    let primary_seq = tp.seq();
    let my_epochs = tp.epoch_history();
    if standby_epochs.last_epoch() > my_epochs.last_epoch() {
        // Someone was promoted after this node's epoch began: whatever this
        // node believes, it is not the primary any more.
        let why = format!(
            "the standby {name} has seen epoch {}, newer than this node's epoch {}: this node was deposed",
            standby_epochs.last_epoch(),
            my_epochs.last_epoch()
        );
        if tp.role() == tickdb_tp::Role::Primary {
            tracing::warn!(target: "tickdb::failover", "{}", serde_json::json!({"event": "fence", "reason": why, "epoch": my_epochs.last_epoch()}));
            tp.fence(&why, None);
        }
        return Err(refuse(&mut sock, format!("{why}; follow the current primary")).await);
    }
    // Where the two journals part: at the first sequence both hold that
    // their histories give different epochs; or, when the standby holds
    // records past this journal's end, there if this node writes its next
    // record in a newer epoch than the standby's record there (an old
    // primary rejoining a standby promoted before it had everything).
    let common_end = primary_seq.min(last_seq);
    let agree = my_epochs.fork_point(primary_seq, &standby_epochs, last_seq);
    let fork = if agree < common_end {
        Some(agree)
    } else if last_seq > primary_seq
        && my_epochs.last_epoch() > standby_epochs.epoch_at(primary_seq + 1)
    {
        Some(primary_seq)
    } else {
        None
    };
    if let Some(fork) = fork {
        let reason = format!(
            "the standby's records after seq {fork} (up to seq {last_seq}) were written in epochs this primary never had (the standby's history {standby_epochs}, this primary's {my_epochs}): cut them and follow"
        );
        tracing::warn!("replication: {peer} ({name}): {reason}");
        let _ = protocol::write_message(
            &mut sock,
            &Message::Diverged {
                proof: opts.secret.primary_proof(&their_nonce, &nonce),
                keep_through: fork,
                primary_epoch: my_epochs.last_epoch(),
                reason: reason.clone(),
            },
        )
        .await;
        return Err(ReplError::Refused(reason));
    }
    if last_seq > primary_seq {
        return Err(refuse(
            &mut sock,
            format!(
                "the standby holds records up to seq {last_seq}, but this primary's journal ends at seq {primary_seq}: \
                 this primary lost records (a journal lost or cut) or the standby followed another primary. \
                 Nothing was changed on either side; promote the standby, or rebuild it"
            ),
        )
        .await);
    }
    let held = first_seq_held(&tp);
    let mut reseed: Option<Box<dyn SnapshotCut>> = None;
    if from_seq < held && from_seq <= primary_seq {
        if flags & FLAG_CAN_RESEED == 0 {
            return Err(refuse(
                &mut sock,
                format!(
                    "the standby needs seq {from_seq}, but this journal starts at seq {held} (trimmed behind a checkpoint): \
                     restart the standby: a `tickdb up` standby reseeds from this primary's tables when it starts"
                ),
            )
            .await);
        }
        let Some(src) = opts.snapshots.clone() else {
            return Err(refuse(
                &mut sock,
                format!("the standby needs seq {from_seq}, but this journal starts at seq {held}, and this node has no tables to reseed it from"),
            )
            .await);
        };
        let cut = tokio::task::spawn_blocking(move || src.cut())
            .await
            .map_err(|e| ReplError::Journal(e.to_string()))?
            .map_err(ReplError::Journal)?;
        if cut.seq() + 1 < held {
            return Err(refuse(
                &mut sock,
                format!(
                    "this primary's tables (at seq {}) are behind its journal's start (seq {held}); retry shortly",
                    cut.seq()
                ),
            )
            .await);
        }
        reseed = Some(cut);
    } else if last_seq > 0 && last_seq >= held {
        let tp2 = tp.clone();
        let ours = tokio::task::spawn_blocking(move || crc_at(&tp2, last_seq))
            .await
            .map_err(|e| ReplError::Journal(e.to_string()))??;
        match ours {
            Some(crc) if crc == last_crc => {}
            Some(crc) => {
                return Err(refuse(
                    &mut sock,
                    format!(
                        "diverged at seq {last_seq}: the standby's record has CRC {last_crc:08x}, this primary's {crc:08x} \
                         (journal {}). Replication stops here; nothing was changed on either side",
                        tp.config().journal_dir.display()
                    ),
                )
                .await)
            }
            None => {
                return Err(refuse(&mut sock, format!("this primary cannot read its own record at seq {last_seq}")).await)
            }
        }
    }
    let schema = std::fs::read(
        tp.config()
            .journal_dir
            .join(tickdb_journal::schema_history::SCHEMA_HISTORY_FILE),
    )
    .map_err(|e| ReplError::Journal(format!("reading the schema history: {e}")))?;
    protocol::write_message(
        &mut sock,
        &Message::Welcome {
            proof: opts.secret.primary_proof(&their_nonce, &nonce),
            primary_seq,
            first_seq_held: held,
            mode: opts.ship.mode,
            interval_ms: if opts.ship.mode == Mode::Interval {
                opts.ship.interval.as_millis() as u64
            } else {
                0
            },
            epochs: my_epochs,
            http: opts.http.clone(),
            ilp: opts.ilp.clone(),
            role: match tp.role() {
                tickdb_tp::Role::Primary => protocol::ROLE_PRIMARY,
                tickdb_tp::Role::Standby { .. } => protocol::ROLE_STANDBY,
                tickdb_tp::Role::Fenced { .. } => protocol::ROLE_FENCED,
            },
        },
    )
    .await?;
    protocol::write_message(&mut sock, &Message::SchemaHistory { bytes: schema }).await?;
    let from_seq = match reseed {
        Some(cut) => stream_reseed(&mut sock, &tp, cut, &name).await?,
        None => from_seq,
    };
    let id = standbys.next_id();
    let link = Arc::new(StandbyLink::new(id, &name, peer, opts.ship.mode, from_seq));
    link.set_http(&http);
    standbys.add(link.clone());
    tracing::info!(
        "replication: standby {name} ({peer}) follows from seq {from_seq} ({} mode; primary at seq {primary_seq})",
        opts.ship.mode.name()
    );
    let (rd, wr) = sock.into_split();
    let result = shipper::ship(tp.clone(), link.clone(), from_seq, rd, wr, opts.ship).await;
    if let Some(g) = tp.sync_gate() {
        g.forget(id);
    }
    link.set_state(
        crate::status::LinkState::Stopped,
        Some(match &result {
            Ok(()) => "the standby disconnected".to_string(),
            Err(e) => e.to_string(),
        }),
    );
    standbys.remove(id, tp.seq());
    result
}

/// Streams a cut of the tables, then returns the sequence the journal is
/// shipped from: the start of the segment holding the record after the cut.
async fn stream_reseed(
    sock: &mut Stream,
    tp: &Arc<Tickerplant>,
    mut cut: Box<dyn SnapshotCut>,
    name: &str,
) -> Result<u64, ReplError> {
    let seq = cut.seq();
    let journal_from =
        crate::reseed::segment_start_of(&tp.config().journal_dir, seq + 1).unwrap_or(seq + 1);
    let (tables, rows) = (cut.tables(), cut.rows());
    tracing::info!(
        "replication: reseeding standby {name}: {rows} rows in {tables} tables as of seq {seq}, then the journal from seq {journal_from}"
    );
    protocol::write_message(
        sock,
        &Message::Reseed {
            seq,
            journal_from,
            tables,
            rows,
        },
    )
    .await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, String>>(RESEED_PAYLOADS_AHEAD);
    let producer = tokio::task::spawn_blocking(move || loop {
        match cut.next_payload() {
            Ok(Some(p)) => {
                if tx.blocking_send(Ok(p)).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    });
    while let Some(p) = rx.recv().await {
        let payload = p.map_err(ReplError::Journal)?;
        protocol::write_message(sock, &Message::Snapshot { payload }).await?;
    }
    let _ = producer.await;
    protocol::write_message(sock, &Message::SnapshotEnd { seq }).await?;
    Ok(journal_from)
}
