//! Tick-to-subscriber latency: a paced feed writes trade rows over ILP TCP
//! to `tickdb tp`, each row's `time` being its generation time (CLOCK_REALTIME
//! ns); a subscriber on the tp port (the tickdb subscription protocol)
//! records now − time for every row it receives. Zero-latency mode
//! (`--publish-interval-ms 0`) and the kdb+-style 50 ms timer mode.
//! QuestDB has no push subscription, so there is no peer for this one.

use crate::child;
use crate::error::{BenchError, Result};
use crate::servers;
use crate::stats::{si, Samples};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::batch::ColumnData;
use tickdb_core::Schema;
use tickdb_net::proto::{decode_frame, encode_message, Message};

/// The feed sends one burst per tick.
const TICK: Duration = Duration::from_millis(1);
/// Rows generated in the first part of a run are not measured (connections
/// and allocators warming up).
pub(crate) const WARMUP: Duration = Duration::from_millis(500);
const SYMBOLS: usize = 100;
const SUB_READ_BYTES: usize = 4 * 1024 * 1024;

pub struct LatencyOptions {
    pub rate: u64,
    pub seconds: u64,
    pub modes: Vec<u64>,
    /// Runs per mode, each on a fresh tp; the report gives medians.
    pub runs: usize,
}

/// One run of one publish mode.
pub struct ModeResult {
    pub achieved_rate: f64,
    pub rows: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

pub(crate) fn subscriber(
    port: u16,
    measure_from_ns: i64,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) -> Result<Histogram<u64>> {
    let mut sock =
        TcpStream::connect(("127.0.0.1", port)).map_err(BenchError::io("subscribing"))?;
    sock.set_nodelay(true).map_err(BenchError::io("nodelay"))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(BenchError::io("timeout"))?;
    let mut out = Vec::new();
    encode_message(
        &Message::Subscribe {
            from_seq: 1,
            tables: vec!["trade".into()],
            symbols: vec![],
            epoch: None,
        },
        &mut out,
    );
    sock.write_all(&out)
        .map_err(BenchError::io("subscribing"))?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
        .map_err(|e| BenchError::Protocol(e.to_string()))?;
    let mut buf: Vec<u8> = Vec::with_capacity(SUB_READ_BYTES);
    let mut chunk = vec![0u8; SUB_READ_BYTES];
    let mut schema: Option<Schema> = None;
    while !stop.load(Ordering::Relaxed) {
        let n = match sock.read(&mut chunk) {
            Ok(0) => {
                return Err(BenchError::Protocol(
                    "the tp closed the subscription".into(),
                ))
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(BenchError::io("reading updates")(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        while let Some((msg, used)) =
            decode_frame(&buf[at..]).map_err(|e| BenchError::Protocol(e.to_string()))?
        {
            at += used;
            match msg {
                Message::SubscribeOk { schema_toml, .. } => {
                    schema = Some(
                        Schema::parse(&schema_toml, "tp schema")
                            .map_err(|e| BenchError::Protocol(e.to_string()))?,
                    );
                }
                Message::Update { payload, .. } => {
                    let now = now_ns();
                    let batches = tickdb_core::codec::decode(&payload, schema.as_ref())
                        .map_err(|e| BenchError::Protocol(e.to_string()))?;
                    for b in batches {
                        if let Some(ColumnData::Timestamp(ts)) = b.columns.first().map(|c| &c.data)
                        {
                            received.fetch_add(ts.len() as u64, Ordering::Relaxed);
                            for &t in ts {
                                if t >= measure_from_ns {
                                    let us = ((now - t).max(1) / 1000).max(1) as u64;
                                    hist.saturating_record(us);
                                }
                            }
                        }
                    }
                }
                Message::Error { message } => {
                    return Err(BenchError::Server(format!("tp: {message}")))
                }
                _ => {}
            }
        }
        buf.drain(..at);
    }
    Ok(hist)
}

/// Sends `rate` rows/s for `seconds`, paced per TICK; returns rows sent.
pub(crate) fn feed(port: u16, rate: u64, seconds: u64, pb: &ProgressBar) -> Result<u64> {
    let mut sock =
        TcpStream::connect(("127.0.0.1", port)).map_err(BenchError::io("feed connect"))?;
    sock.set_nodelay(true).map_err(BenchError::io("nodelay"))?;
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut sent: u64 = 0;
    let mut line = Vec::with_capacity(1 << 20);
    let mut k: u64 = 0;
    while Instant::now() < end {
        child::check_interrupt()?;
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due > sent {
            line.clear();
            let t = now_ns();
            for _ in sent..due {
                k += 1;
                let _ = writeln!(
                    line,
                    "trade,sym=S{:02} price={}.5,size={}i {t}",
                    k as usize % SYMBOLS,
                    100 + k % 7,
                    1 + k % 100
                );
            }
            sock.write_all(&line)
                .map_err(BenchError::io("feed write"))?;
            sent = due;
            pb.set_position(start.elapsed().as_millis() as u64);
        }
        std::thread::sleep(TICK);
    }
    Ok(sent)
}

/// Every run of one publish mode.
pub struct ModeRuns {
    pub publish_interval_ms: u64,
    pub runs: Vec<ModeResult>,
}

/// Runs each mode `o.runs` times, in turn (mode A, mode B, mode A, …), so
/// that a slow spell of the machine falls on both.
pub fn run(bin: &Path, work: &Path, o: &LatencyOptions) -> Result<Vec<ModeRuns>> {
    if o.runs == 0 {
        return Err(BenchError::Server("--runs must be at least 1".into()));
    }
    let mut out: Vec<ModeRuns> = o
        .modes
        .iter()
        .map(|&m| ModeRuns {
            publish_interval_ms: m,
            runs: Vec::new(),
        })
        .collect();
    for k in 0..o.runs {
        for m in out.iter_mut() {
            m.runs
                .push(run_mode(bin, work, o, m.publish_interval_ms, k)?);
        }
    }
    Ok(out)
}

fn run_mode(
    bin: &Path,
    work: &Path,
    o: &LatencyOptions,
    mode: u64,
    k: usize,
) -> Result<ModeResult> {
    let mut tp = servers::start_tickdb(
        bin,
        work,
        "tp",
        &format!("latency-{mode}"),
        &[
            "--fsync",
            "never",
            "--publish-interval-ms",
            &mode.to_string(),
        ],
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let measure_from = now_ns() + WARMUP.as_nanos() as i64;
    let sub = {
        let (stop, received, port) = (stop.clone(), received.clone(), tp.tp);
        std::thread::spawn(move || subscriber(port, measure_from, stop, received))
    };
    std::thread::sleep(Duration::from_millis(100));
    let pb = ProgressBar::new(o.seconds * 1000);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "latency, publish interval {mode} ms, run {}/{} {{bar:30}} {{pos}}/{{len}} ms",
            k + 1,
            o.runs
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let sent = feed(tp.ilp, o.rate, o.seconds, &pb);
    let elapsed = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    // Let the last updates (and a 50 ms timer) arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(s) = &sent {
        if received.load(Ordering::Relaxed) >= *s || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let hist = sub
        .join()
        .map_err(|_| BenchError::Server("subscriber thread panicked".into()))??;
    let sent = sent?;
    let got = received.load(Ordering::Relaxed);
    if got < sent {
        return Err(BenchError::Server(format!(
            "subscriber received {got} of {sent} rows"
        )));
    }
    tp.child.stop(Duration::from_secs(10));
    Ok(ModeResult {
        achieved_rate: sent as f64 / elapsed,
        rows: hist.len(),
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        max_us: hist.max() as f64,
    })
}

pub fn markdown(results: &[ModeRuns], o: &LatencyOptions) -> String {
    let mut s = format!(
        "Feed: trade rows over ILP TCP at a target of {} rows/s for {} s (first {} ms not measured), \
         `tickdb tp --fsync never`; one subscriber on the tp port. Latency = receive time − generation time \
         (CLOCK_REALTIME, same host), per row; each percentile is over one run's rows. {} run(s) per mode, \
         each on a fresh tp, the modes taking turns: median (min–max) over the runs, `*` marking a spread \
         over 1.3×. QuestDB has no push subscription: no peer figure.\n\n",
        si(o.rate as f64),
        o.seconds,
        WARMUP.as_millis(),
        o.runs
    );
    s.push_str("| publish mode | achieved rows/s | rows measured | p50 | p99 | max |\n|---|---|---|---|---|---|\n");
    for m in results {
        let mode = if m.publish_interval_ms == 0 {
            "zero-latency".to_string()
        } else {
            format!("timer {} ms", m.publish_interval_ms)
        };
        let f = |g: fn(&ModeResult) -> f64| Samples(m.runs.iter().map(g).collect());
        s.push_str(&format!(
            "| {mode} | {} | {} | {} | {} | {} |\n",
            f(|r| r.achieved_rate).describe(si),
            f(|r| r.rows as f64)
                .median()
                .map(|x| format!("{x:.0}"))
                .unwrap_or_default(),
            f(|r| r.p50_us).describe(us),
            f(|r| r.p99_us).describe(us),
            f(|r| r.max_us).describe(us),
        ));
    }
    s
}

pub(crate) fn us(x: f64) -> String {
    if x >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.0} µs")
    }
}
