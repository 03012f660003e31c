//! `tickdb feed`: the simulated market-data feed of the Optane kdb+ study. It draws
//! trades and quotes (1:10) from the seeded simulator (`gen`), stamps each
//! with its generation time (CLOCK_REALTIME ns, strictly increasing) in the
//! `time` column, and publishes them as InfluxDB line protocol to a tp:
//! over TCP by default (the tp's --ilp-port), or HTTP (--http-port), at a
//! paced total rate. The kdb+ IPC protocol is the next transport, once the
//! tp speaks it.
//!
//! `--prestress N` first preloads N records as fast as the tp acknowledges
//! them (ILP over HTTP, 10,000 rows a request, each answered after it is
//! journaled), like the study's 65 million records loaded before its run.

use crate::client_auth::ClientAuthArgs;
use crate::clock::TickClock;
use crate::error::{Result, StackError};
use crate::gen::{MarketSim, SimConfig, Tick};
use crate::http::HttpClient;
use crate::signal;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The pacer wakes this often and sends what is due: at 48,000 updates/s
/// about 48 rows a write.
pub const TICK_MS: u64 = 1;
/// Rows sent in one write at most: after a stall the feed catches up in
/// bursts of this size rather than one huge buffer.
pub const BURST_ROWS_MAX: u64 = 50_000;
/// Rows per prestress request by default: the bulk-insert size of
/// Zero-Impact Crash Recovery for kdb+.
pub const PRESTRESS_BATCH_ROWS: usize = 10_000;
/// Most rows per prestress request (about 6 MB of ILP, well inside the tp's
/// default request limit).
pub const PRESTRESS_BATCH_ROWS_MAX: usize = 100_000;
/// The Optane kdb+ study's prestress: 65 million records.
pub const SEED_PRESTRESS_ROWS: u64 = 65_000_000;
/// The scaled default prestress allows this many bytes of available memory
/// per row (the tp's journal pages, the rdb's columns, the agg, headroom).
pub const PRESTRESS_BYTES_PER_ROW: u64 = 256;
/// ...and this many rows per core, so the preload takes seconds, not minutes.
pub const PRESTRESS_ROWS_PER_CORE: u64 = 5_000_000;
/// How often a run without a terminal logs its progress.
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Transport {
    /// ILP over TCP to the tp's --ilp-port (no acknowledgement; TCP
    /// back-pressure paces the feed when the tp falls behind).
    Tcp,
    /// ILP over HTTP to the tp's --http-port: each write is answered once
    /// journaled.
    Http,
}

/// A prestress size: a number (65M, 500k and 2G accepted) or `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prestress {
    Auto,
    Rows(u64),
}

pub fn parse_count(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().replace('_', "");
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000),
        Some('m' | 'M') => (&t[..t.len() - 1], 1_000_000),
        Some('g' | 'G') => (&t[..t.len() - 1], 1_000_000_000),
        _ => (t.as_str(), 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a count (e.g. 5000, 500k, 65M)"))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(format!("'{s}' must be a positive count"));
    }
    Ok((v * mult as f64).round() as u64)
}

fn parse_prestress(s: &str) -> std::result::Result<Prestress, String> {
    if s.eq_ignore_ascii_case("auto") {
        Ok(Prestress::Auto)
    } else {
        parse_count(s).map(Prestress::Rows)
    }
}

/// The default prestress on this machine: the study's 65M, scaled down to
/// what the available memory and cores take in seconds.
pub fn default_prestress_rows() -> u64 {
    let mem = crate::procfs::mem_available_bytes().unwrap_or(1 << 30) / PRESTRESS_BYTES_PER_ROW;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u64)
        .unwrap_or(1);
    SEED_PRESTRESS_ROWS
        .min(mem)
        .min(cores * PRESTRESS_ROWS_PER_CORE)
}

#[derive(clap::Args, Debug, Clone)]
pub struct FeedArgs {
    /// The tp's host, or several (HOST,HOST,...: the nodes of a failover
    /// group, all on the same ports): the feed writes to the first that
    /// takes writes and moves to the next when a connection fails or a
    /// node refuses (a standby, a fenced old primary). Over TCP the batch
    /// in flight when a connection breaks is lost (ILP over TCP has no
    /// acknowledgements); over HTTP a refused batch is sent again.
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST[,HOST...]")]
    pub host: String,
    #[command(flatten)]
    pub auth: ClientAuthArgs,
    /// The tp's ILP TCP port (--transport tcp).
    #[arg(long, default_value_t = 8709)]
    pub ilp_port: u16,
    /// The tp's HTTP port (--transport http, and --prestress).
    #[arg(long, default_value_t = 8700)]
    pub http_port: u16,
    /// How updates reach the tp.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: Transport,
    /// Publish over kdb+ IPC instead, as a kdb+ feed handler does: async
    /// `.u.upd` messages to the tp's --ipc-port at HOST:PORT, one per table
    /// per burst, and the chaser at the end (docs/ipc.md). Logs in as
    /// --ipc-user with TICKDB_PG_PASSWORD (default tickdb).
    #[arg(long, value_name = "HOST:PORT")]
    pub ipc: Option<String>,
    /// The user for --ipc (the node's PostgreSQL wire user).
    #[arg(long, default_value = "tickdb")]
    pub ipc_user: String,
    /// Total updates per second, trades and quotes together (1:10). The
    /// default is the rate at which the Optane kdb+ study simulated the
    /// March 9, 2020 crash.
    #[arg(long, default_value_t = 48_000)]
    pub rate: u64,
    /// Seconds to run after the prestress (fractions allowed); without it,
    /// until Ctrl-C. 0 stops after the prestress.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Seed of the simulator: the same seed gives the same symbols, prices
    /// and sizes (the times are the times of the run). Printed at start;
    /// random when not given.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Symbols in the universe; activity is Zipf-like, a few very active.
    #[arg(long, default_value_t = 2000)]
    pub symbols: usize,
    /// Zipf exponent of symbol activity (0 = all alike, 1 = Zipf).
    #[arg(long, default_value_t = 1.0)]
    pub skew: f64,
    /// Before the timed run, preload N records as fast as the tp
    /// acknowledges them (e.g. 65M as in the Optane kdb+ study). Without a
    /// value: the study's 65M scaled to this machine (available memory /
    /// 256 B, and 5M per core).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "auto", value_parser = parse_prestress)]
    pub prestress: Option<Prestress>,
    /// Rows per prestress request: each is one journaled update. The default
    /// is the 10,000-row bulk insert of Zero-Impact Crash Recovery for kdb+;
    /// 48 journals the data as a feed at 48,000 updates/s in 1 ms ticks would
    /// (a realistic day's journal).
    #[arg(long, default_value_t = PRESTRESS_BATCH_ROWS, value_name = "ROWS")]
    pub prestress_batch_rows: usize,
    /// Write a JSON summary of the run here.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FeedSummary {
    pub seed: u64,
    pub symbols: usize,
    pub rate_target: u64,
    pub prestress_rows: u64,
    pub prestress_seconds: f64,
    pub rows: u64,
    pub trades: u64,
    pub quotes: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub rate_achieved: f64,
    pub interrupted: bool,
    /// Times the feed moved to another host (a failover).
    pub reconnects: u64,
    /// Rows in TCP batches whose connection broke (maybe lost).
    pub rows_in_broken_batches: u64,
}

/// Where the feed writes: one TCP connection, or HTTP requests, to one of
/// the hosts given.
enum Sink {
    Tcp(TcpStream),
    Http(HttpClient),
}

/// Time to wait between passes over every host when none takes writes.
const FAILOVER_RETRY_MS: u64 = 50;
/// Give up after this long without any host taking writes.
const FAILOVER_GIVE_UP_S: u64 = 120;

/// The sink to one host of several, moving to the next on failure.
struct Follow {
    hosts: Vec<String>,
    at: usize,
    transport: Transport,
    ilp_port: u16,
    http_port: u16,
    sink: Option<Sink>,
    /// Boxed: a login is rare, and Follow travels in an enum by value.
    auth: Box<ClientAuthArgs>,
    reconnects: u64,
    broken_rows: u64,
}

impl Follow {
    fn new(a: &FeedArgs) -> Result<Follow> {
        let hosts: Vec<String> = a
            .host
            .split(',')
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .collect();
        if hosts.is_empty() {
            return Err(StackError::BadInput("--host names no host".into()));
        }
        Ok(Follow {
            hosts,
            at: 0,
            transport: a.transport,
            ilp_port: a.ilp_port,
            http_port: a.http_port,
            sink: None,
            auth: Box::new(a.auth.clone()),
            reconnects: 0,
            broken_rows: 0,
        })
    }

    fn open(&self) -> Result<Sink> {
        let host = &self.hosts[self.at];
        Ok(match self.transport {
            Transport::Tcp => {
                let addr = format!("{host}:{}", self.ilp_port);
                let mut sock = TcpStream::connect(&addr)
                    .map_err(StackError::io(format!("connecting to ILP TCP at {addr}")))?;
                sock.set_nodelay(true)
                    .map_err(StackError::io("ILP TCP nodelay"))?;
                self.auth.ilp_login(&mut sock)?;
                Sink::Tcp(sock)
            }
            Transport::Http => Sink::Http(
                HttpClient::new(&format!("{host}:{}", self.http_port))
                    .with_auth(self.auth.http_header()),
            ),
        })
    }

    /// Sends `buf` (`rows` rows), moving to the next host when this one
    /// fails; errors only when no host has taken it for FAILOVER_GIVE_UP_S.
    fn send(&mut self, buf: &[u8], rows: u64) -> Result<()> {
        let since = Instant::now();
        loop {
            if self.sink.is_none() {
                match self.open() {
                    Ok(s) => self.sink = Some(s),
                    Err(e @ (StackError::Refused(_) | StackError::BadInput(_))) => return Err(e),
                    Err(e) => {
                        self.next_host(&e, since)?;
                        continue;
                    }
                }
            }
            let r = match self.sink.as_mut() {
                Some(s) => s.send(buf),
                None => continue,
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e @ StackError::Refused(_)) => return Err(e),
                Err(e) if self.hosts.len() == 1 && self.transport == Transport::Tcp => {
                    return Err(e)
                }
                Err(e) => {
                    if self.transport == Transport::Tcp {
                        // No acknowledgements over TCP: what broke is not
                        // sent again, so nothing is written twice.
                        self.broken_rows += rows;
                        self.sink = None;
                        self.next_host(&e, since)?;
                        return Ok(());
                    }
                    self.sink = None;
                    self.next_host(&e, since)?;
                }
            }
        }
    }

    fn next_host(&mut self, why: &StackError, since: Instant) -> Result<()> {
        if since.elapsed() >= Duration::from_secs(FAILOVER_GIVE_UP_S) {
            return Err(StackError::Server(format!(
                "no host of {} took writes for {FAILOVER_GIVE_UP_S} s; last: {why}",
                self.hosts.join(",")
            )));
        }
        tracing::warn!("feed: {}: {why}; trying the next host", self.hosts[self.at]);
        self.at = (self.at + 1) % self.hosts.len();
        self.reconnects += 1;
        if self.at == 0 {
            std::thread::sleep(Duration::from_millis(FAILOVER_RETRY_MS));
        }
        Ok(())
    }
}

impl Sink {
    fn send(&mut self, buf: &[u8]) -> Result<()> {
        match self {
            Sink::Tcp(s) => {
                s.write_all(buf).map_err(StackError::io("ILP TCP write"))?;
                // A standby closes ILP connections at once: notice it
                // before the next batch, not a batch later.
                let mut probe = [0u8; 1];
                s.set_nonblocking(true).map_err(StackError::io("ILP TCP"))?;
                let r = std::io::Read::read(s, &mut probe);
                s.set_nonblocking(false)
                    .map_err(StackError::io("ILP TCP"))?;
                match r {
                    Ok(0) => Err(StackError::Server(
                        "the tp closed the ILP connection".into(),
                    )),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
                    Ok(_) | Err(_) => Ok(()),
                }
            }
            Sink::Http(c) => post_write(c, buf),
        }
    }
}

fn post_write(c: &mut HttpClient, body: &[u8]) -> Result<()> {
    let (status, answer) = c.request("POST", "/write", body)?;
    if status == 401 || status == 403 {
        return Err(StackError::Refused(format!(
            "POST /write to {}: HTTP {status}: {} (--user, TICKDB_PASSWORD)",
            c.addr(),
            String::from_utf8_lossy(&answer)
        )));
    }
    if status != 204 {
        return Err(StackError::Server(format!(
            "POST /write to {}: HTTP {status}: {}",
            c.addr(),
            String::from_utf8_lossy(&answer)
        )));
    }
    Ok(())
}

/// Appends `n` ticks to `buf`; counts trades.
fn generate(sim: &mut MarketSim, clock: &mut TickClock, n: u64, buf: &mut Vec<u8>) -> u64 {
    let mut trades = 0;
    for _ in 0..n {
        let t = sim.next_tick();
        if matches!(t, Tick::Trade { .. }) {
            trades += 1;
        }
        crate::ilp::push_line(buf, &t, sim.name(t.sym()), clock.stamp());
    }
    trades
}

fn bar(len: Option<u64>, template: &str) -> ProgressBar {
    let pb = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    pb.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// Preloads `rows` records over HTTP, as fast as the tp acknowledges them.
fn prestress(
    a: &FeedArgs,
    rows: u64,
    sim: &mut MarketSim,
    clock: &mut TickClock,
    s: &mut FeedSummary,
) -> Result<()> {
    // The prestress goes to the first host (the primary when it starts).
    let first = a.host.split(',').next().unwrap_or_default().trim();
    let mut http =
        HttpClient::new(&format!("{first}:{}", a.http_port)).with_auth(a.auth.http_header());
    let pb = bar(
        Some(rows),
        "prestress {bar:30} {human_pos}/{human_len} rows {per_sec} eta {eta}",
    );
    let t0 = Instant::now();
    let mut buf = Vec::with_capacity(a.prestress_batch_rows * 64);
    let mut done = 0u64;
    let mut last_log = Instant::now();
    while done < rows {
        if signal::stopping() {
            s.interrupted = true;
            break;
        }
        let n = (rows - done).min(a.prestress_batch_rows as u64);
        buf.clear();
        let trades = generate(sim, clock, n, &mut buf);
        post_write(&mut http, &buf)?;
        done += n;
        s.trades += trades;
        s.quotes += n - trades;
        s.bytes += buf.len() as u64;
        pb.set_position(done);
        if pb.is_hidden() && last_log.elapsed() >= LOG_EVERY {
            last_log = Instant::now();
            tracing::info!("feed: prestress {done}/{rows} rows");
        }
    }
    pb.finish_and_clear();
    s.prestress_rows = done;
    s.prestress_seconds = t0.elapsed().as_secs_f64();
    tracing::info!(
        "feed: prestress of {done} rows took {:.2} s ({:.0} rows/s)",
        s.prestress_seconds,
        done as f64 / s.prestress_seconds.max(1e-9)
    );
    Ok(())
}

/// Where the paced run sends: ILP lines to one of the hosts, or kdb+ IPC
/// `.u.upd` messages.
enum Out {
    Ilp(Follow, Vec<u8>),
    Ipc(crate::ipc_feed::IpcSink, Vec<(Tick, i64)>),
}

impl Out {
    fn open(a: &FeedArgs) -> Result<Out> {
        Ok(match &a.ipc {
            Some(addr) => {
                let password =
                    std::env::var("TICKDB_PG_PASSWORD").unwrap_or_else(|_| "tickdb".into());
                Out::Ipc(
                    crate::ipc_feed::IpcSink::connect(addr, &a.ipc_user, &password)?,
                    Vec::with_capacity(BURST_ROWS_MAX as usize),
                )
            }
            None => {
                let mut sink = Follow::new(a)?;
                sink.sink = Some(sink.open()?);
                Out::Ilp(sink, Vec::with_capacity(1 << 20))
            }
        })
    }

    /// Generates and sends `n` ticks: (trades among them, bytes sent).
    fn burst(&mut self, sim: &mut MarketSim, clock: &mut TickClock, n: u64) -> Result<(u64, u64)> {
        match self {
            Out::Ilp(sink, buf) => {
                buf.clear();
                let trades = generate(sim, clock, n, buf);
                sink.send(buf, n)?;
                Ok((trades, buf.len() as u64))
            }
            Out::Ipc(sink, ticks) => {
                ticks.clear();
                let mut trades = 0;
                for _ in 0..n {
                    let t = sim.next_tick();
                    if matches!(t, Tick::Trade { .. }) {
                        trades += 1;
                    }
                    ticks.push((t, clock.stamp()));
                }
                let bytes = sink.send(ticks, &|sym| sim.name(sym).to_string())?;
                Ok((trades, bytes))
            }
        }
    }

    /// Ends the run: ILP TCP is flushed and shut; over kdb+ IPC the chaser
    /// confirms every update was acknowledged.
    fn finish(self, s: &mut FeedSummary) -> Result<()> {
        match self {
            Out::Ilp(mut sink, _) => {
                if let Some(Sink::Tcp(sock)) = &mut sink.sink {
                    let _ = sock.flush();
                    let _ = sock.shutdown(std::net::Shutdown::Write);
                }
                s.reconnects = sink.reconnects;
                s.rows_in_broken_batches = sink.broken_rows;
                Ok(())
            }
            Out::Ipc(mut sink, _) => sink.chase(),
        }
    }
}

/// Sends `rate` updates/s for `duration` (or until stopped), paced every
/// TICK_MS: each wake-up sends what is due by then.
fn paced(
    a: &FeedArgs,
    sim: &mut MarketSim,
    clock: &mut TickClock,
    s: &mut FeedSummary,
) -> Result<()> {
    let mut out = Out::open(a)?;
    let duration = a.duration.map(Duration::from_secs_f64);
    let pb = bar(
        duration.map(|d| d.as_millis() as u64),
        "feed {bar:30} {msg}",
    );
    let start = Instant::now();
    let mut sent = 0u64;
    let mut last_log = Instant::now();
    let mut next_wake = start;
    loop {
        if signal::stopping() {
            s.interrupted = true;
            break;
        }
        let elapsed = start.elapsed();
        if duration.is_some_and(|d| elapsed >= d) {
            break;
        }
        let due = (elapsed.as_secs_f64() * a.rate as f64) as u64;
        let n = due.saturating_sub(sent).min(BURST_ROWS_MAX);
        if n > 0 {
            let (trades, bytes) = out.burst(sim, clock, n)?;
            sent += n;
            s.trades += trades;
            s.quotes += n - trades;
            s.bytes += bytes;
        }
        if pb.is_hidden() {
            if last_log.elapsed() >= LOG_EVERY {
                last_log = Instant::now();
                tracing::info!(
                    "feed: {sent} updates in {:.0} s ({:.0}/s)",
                    elapsed.as_secs_f64(),
                    sent as f64 / elapsed.as_secs_f64().max(1e-9)
                );
            }
        } else {
            pb.set_position(elapsed.as_millis() as u64);
            pb.set_message(format!(
                "{sent} updates, {:.0}/s of {}/s",
                sent as f64 / elapsed.as_secs_f64().max(1e-9),
                a.rate
            ));
        }
        next_wake += Duration::from_millis(TICK_MS);
        let now = Instant::now();
        if next_wake > now {
            std::thread::sleep(next_wake - now);
        } else {
            // Behind (a stall, or the tp pushing back): catch up from now.
            next_wake = now;
        }
    }
    out.finish(s)?;
    pb.finish_and_clear();
    s.rows = sent;
    s.seconds = start.elapsed().as_secs_f64();
    s.rate_achieved = sent as f64 / s.seconds.max(1e-9);
    Ok(())
}

/// Runs the feed: prestress (if asked), then the paced run.
pub fn run(a: FeedArgs) -> Result<FeedSummary> {
    signal::install();
    if a.rate == 0 {
        return Err(StackError::BadInput("--rate must be at least 1".into()));
    }
    if !(1..=PRESTRESS_BATCH_ROWS_MAX).contains(&a.prestress_batch_rows) {
        return Err(StackError::BadInput(format!(
            "--prestress-batch-rows must be within 1..={PRESTRESS_BATCH_ROWS_MAX}"
        )));
    }
    if a.duration.is_some_and(|d| !(d >= 0.0 && d.is_finite())) {
        return Err(StackError::BadInput(
            "--duration must be 0 or more seconds".into(),
        ));
    }
    let seed = a
        .seed
        .unwrap_or_else(|| (crate::clock::now_ns() as u64) ^ (u64::from(std::process::id()) << 32));
    eprintln!("tickdb feed: seed {seed} (rerun the same data with --seed {seed})");
    let mut sim = MarketSim::new(SimConfig {
        seed,
        symbols: a.symbols,
        skew: a.skew,
    })?;
    let mut clock = TickClock::default();
    let mut s = FeedSummary {
        seed,
        symbols: a.symbols,
        rate_target: a.rate,
        ..Default::default()
    };
    let pre = match a.prestress {
        None => 0,
        Some(Prestress::Auto) => default_prestress_rows(),
        Some(Prestress::Rows(n)) => n,
    };
    if pre > 0 {
        prestress(&a, pre, &mut sim, &mut clock, &mut s)?;
    }
    if a.duration != Some(0.0) && !s.interrupted {
        tracing::info!(
            "feed: {} updates/s (trades:quotes 1:10) over {} symbols to {} {}:{}{}",
            a.rate,
            a.symbols,
            match a.transport {
                Transport::Tcp => "ILP TCP",
                Transport::Http => "ILP HTTP",
            },
            a.host,
            match a.transport {
                Transport::Tcp => a.ilp_port,
                Transport::Http => a.http_port,
            },
            a.duration
                .map(|d| format!(" for {d} s"))
                .unwrap_or_else(|| " until Ctrl-C".into())
        );
        paced(&a, &mut sim, &mut clock, &mut s)?;
    }
    let text = serde_json::to_string(&s).unwrap_or_default();
    if let Some(p) = &a.summary {
        std::fs::write(p, &text).map_err(StackError::io(format!("writing {}", p.display())))?;
    }
    println!("{text}");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_prestress_values() {
        assert_eq!(parse_count("65M"), Ok(65_000_000));
        assert_eq!(parse_count("500k"), Ok(500_000));
        assert_eq!(parse_count("1_000"), Ok(1000));
        assert_eq!(parse_count("1.5k"), Ok(1500));
        assert!(parse_count("lots").is_err());
        assert!(parse_count("-5").is_err());
        assert_eq!(parse_prestress("auto"), Ok(Prestress::Auto));
        let d = default_prestress_rows();
        assert!(d > 0 && d <= SEED_PRESTRESS_ROWS);
    }

    #[test]
    fn generated_text_has_one_line_per_tick_and_the_ratio() {
        let mut sim = MarketSim::new(SimConfig {
            seed: 3,
            symbols: 100,
            skew: 1.0,
        })
        .unwrap();
        let mut clock = TickClock::default();
        let mut buf = Vec::new();
        let trades = generate(&mut sim, &mut clock, 1100, &mut buf);
        assert_eq!(trades, 100);
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(text.lines().count(), 1100);
        assert_eq!(
            text.lines().filter(|l| l.starts_with("trade,")).count(),
            100
        );
    }
}
