//! `tickdb bench ipc`: kdb+ IPC against tickdb's own protocols, measured in
//! the same run.
//!
//! 1. **Bulk insert** (the client of Zero-Impact Crash Recovery for kdb+):
//!    the same pre-generated `trade` rows, in 10,000-row writes over one
//!    connection, to a fresh `tickdb up` per run, as kdb+ IPC `.u.upd`
//!    messages (async then the chaser, and sync per message), ILP over TCP
//!    and ILP over HTTP. Rows/s and MB/s (the bytes each protocol puts on
//!    the wire), and rows/s until every row is queryable, the endpoint all
//!    four share. Every run must end with the same row count, `sum(size)`
//!    and `sum(price)`; a mismatch fails the benchmark.
//! 2. **Tick-to-subscriber latency**: a paced ILP TCP feed (each row's
//!    `time` its generation time) into `tickdb tp --ipc-port`, and a kdb+
//!    IPC subscriber (`.u.sub[`trade;`]`) recording now − time for every
//!    row of each `upd` it decodes, in zero-latency and 50 ms timer modes;
//!    `bench latency`'s subscriber (the tickdb subscription protocol) on
//!    the same feed and modes is the peer, since kdb+ itself cannot be run
//!    here. A subscriber that does not get exactly the rows sent fails the
//!    benchmark.

use crate::child;
use crate::error::{BenchError, Result};
use crate::http::{exec_scalar, request_json, url_encode, HttpConn};
use crate::latency;
use crate::servers;
use crate::stats::{in_order, si, Samples};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_ipc::temporal::{timestamp_from_unix_ns, unix_ns_from_timestamp};
use tickdb_ipc::{Header, Kind, Limits, MsgType, Vector, HEADER_BYTES, K};

/// Rows per write: the 10k bulk insert of Zero-Impact Crash Recovery for kdb+.
pub const BATCH_ROWS: usize = crate::ingest::BATCH_ROWS;
/// The kdb+ primary's bulk-insert rate in Zero-Impact Crash Recovery for
/// kdb+ (its baseline, an average of 4 runs): quoted, not measured.
pub const KDB_BASELINE_MB_S: f64 = 145.96;
/// The login: the node's PostgreSQL wire user and password, which the
/// servers started here are given.
const IPC_USER: &str = "tickdb";
const IPC_PASSWORD: &str = "tickdb";
/// MB as in that paper's MB/s: 10^6 bytes.
const MB: f64 = 1e6;
/// How long a run may take to become fully queryable, and the longest wait
/// for one answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a subscriber may take to get the last rows once the feed ends.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// After the last expected row, how long a subscriber keeps reading to
/// catch rows it should not get (duplicates).
const OVERRUN_GRACE: Duration = Duration::from_millis(200);
/// Bounds on what the client accepts from the server.
const LIMITS: Limits = Limits {
    message_bytes_max: tickdb_ipc::MESSAGE_BYTES_MAX,
    depth_max: tickdb_ipc::DEPTH_MAX,
};
/// Two floating-point sums of the same values agree to this (relative):
/// their order depends on how the rows were chunked.
const SUM_TOLERANCE: f64 = 1e-9;

pub const SECTIONS: [&str; 2] = ["insert", "latency"];

#[derive(Debug, Clone)]
pub struct IpcBenchOptions {
    pub sections: Vec<String>,
    pub rows: u64,
    pub repeats: usize,
    pub fsync: Vec<String>,
    pub rate: u64,
    pub seconds: u64,
    pub modes: Vec<u64>,
    pub seed: u64,
}

// ---------------------------------------------------------------- client

/// A blocking kdb+ IPC client: the login, whole messages out, and messages
/// in as they complete.
struct IpcConn {
    sock: TcpStream,
    buf: Vec<u8>,
    /// Where the next unread message starts in `buf`.
    at: usize,
    chunk: Vec<u8>,
}

fn ipc_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Protocol(format!("kdb+ IPC: {what}: {e}"))
}

impl IpcConn {
    /// Connects and logs in with capability 3.
    fn connect(port: u16) -> Result<IpcConn> {
        let what = format!("kdb+ IPC connect to 127.0.0.1:{port}");
        let mut sock = TcpStream::connect(("127.0.0.1", port)).map_err(BenchError::io(&what))?;
        sock.set_nodelay(true).map_err(BenchError::io(&what))?;
        sock.set_write_timeout(Some(ANSWER_TIMEOUT))
            .map_err(BenchError::io(&what))?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(BenchError::io(&what))?;
        let agreed = tickdb_ipc::handshake::login(&mut sock, IPC_USER, IPC_PASSWORD)
            .map_err(BenchError::io("kdb+ IPC handshake"))?;
        match agreed {
            None => {
                return Err(BenchError::Server(format!(
                    "kdb+ IPC at 127.0.0.1:{port} closed the connection at login (as kdb+ refuses a wrong user or password)"
                )))
            }
            Some(cap) if cap > tickdb_ipc::handshake::CAPABILITY => {
                return Err(ipc_err(
                    "handshake",
                    format!(
                        "the server agreed to capability {cap} (asked {})",
                        tickdb_ipc::handshake::CAPABILITY
                    ),
                ))
            }
            Some(_) => {}
        }
        // From here, reads wake up to see Ctrl-C and the stop flag.
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(BenchError::io(&what))?;
        Ok(IpcConn {
            sock,
            buf: Vec::new(),
            at: 0,
            chunk: vec![0u8; 1 << 20],
        })
    }

    /// Writes a whole message. A server that ends the connection says why
    /// first (an error message): that is the error then.
    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        match self.sock.write_all(bytes) {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Ok(Some((_, K::Error(why)))) = self.poll() {
                    return Err(BenchError::Server(format!(
                        "kdb+ IPC: the server ended the connection: '{why}"
                    )));
                }
                Err(BenchError::io("kdb+ IPC write")(e))
            }
        }
    }

    /// The next whole message already read, if any.
    fn take(&mut self) -> Result<Option<(MsgType, K)>> {
        let avail = &self.buf[self.at..];
        if avail.len() < HEADER_BYTES {
            return Ok(None);
        }
        let mut h = [0u8; HEADER_BYTES];
        h.copy_from_slice(&avail[..HEADER_BYTES]);
        let header = Header::parse(&h, &LIMITS).map_err(|e| ipc_err("a message header", e))?;
        if avail.len() < header.len {
            return Ok(None);
        }
        let k = tickdb_ipc::decode_message(&header, &avail[..header.len], &LIMITS)
            .map_err(|e| ipc_err("a message", e))?;
        self.at += header.len;
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        Ok(Some((header.msg_type, k)))
    }

    /// A whole message, or None when nothing completed within one read
    /// timeout (100 ms).
    fn poll(&mut self) -> Result<Option<(MsgType, K)>> {
        if let Some(m) = self.take()? {
            return Ok(Some(m));
        }
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        match self.sock.read(&mut self.chunk) {
            Ok(0) => Err(BenchError::Server(
                "kdb+ IPC: the server closed the connection".into(),
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&self.chunk[..n]);
                self.take()
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(BenchError::io("kdb+ IPC read")(e)),
        }
    }

    /// The answer to a sync message: the next response (async messages
    /// before it, such as updates, are an error here).
    fn answer(&mut self, what: &str) -> Result<K> {
        let end = Instant::now() + ANSWER_TIMEOUT;
        loop {
            child::check_interrupt()?;
            match self.poll()? {
                Some((MsgType::Response, K::Error(e))) => {
                    return Err(BenchError::Server(format!("kdb+ IPC {what}: '{e}")))
                }
                Some((MsgType::Response, k)) => return Ok(k),
                Some((t, k)) => {
                    return Err(ipc_err(
                        what,
                        format!(
                            "expected the answer, got a {t:?} message of type {}",
                            k.type_code()
                        ),
                    ))
                }
                None if Instant::now() > end => {
                    return Err(BenchError::Server(format!(
                        "kdb+ IPC {what}: no answer within {ANSWER_TIMEOUT:?}"
                    )))
                }
                None => {}
            }
        }
    }
}

/// The whole sync message carrying `k`.
fn sync_message(k: &K) -> Result<Vec<u8>> {
    tickdb_ipc::encode_message(MsgType::Sync, k, false).map_err(|e| ipc_err("encoding", e))
}

// ------------------------------------------------------------------ data

/// The figures every run must end with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Totals {
    pub rows: u64,
    pub sum_size: i64,
    pub sum_price: f64,
}

impl Totals {
    fn same(&self, o: &Totals) -> bool {
        self.rows == o.rows
            && self.sum_size == o.sum_size
            && (self.sum_price - o.sum_price).abs()
                <= SUM_TOLERANCE * self.sum_price.abs().max(o.sum_price.abs()).max(1.0)
    }
}

/// One batch of `crate::ingest::generate`'s ILP lines as the columns of a
/// `.u.upd` (time, sym, price, size: the trade table's order).
fn upd_from_ilp(table: &str, batch: &[u8], totals: &mut Totals) -> Result<K> {
    let bad = |l: &[u8]| {
        BenchError::Protocol(format!(
            "a generated ILP line does not parse: {:?}",
            String::from_utf8_lossy(l)
        ))
    };
    let prefix = format!("{table},sym=");
    let n = batch.iter().filter(|&&c| c == b'\n').count();
    let (mut time, mut sym, mut price, mut size) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for line in batch.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        let text = std::str::from_utf8(line).map_err(|_| bad(line))?;
        let mut parts = text.split(' ');
        let (Some(series), Some(fields), Some(ts), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad(line));
        };
        let s = series.strip_prefix(&prefix).ok_or_else(|| bad(line))?;
        let (mut p, mut z) = (None, None);
        for f in fields.split(',') {
            if let Some(v) = f.strip_prefix("price=") {
                p = v.parse::<f64>().ok();
            } else if let Some(v) = f.strip_prefix("size=") {
                z = v.strip_suffix('i').and_then(|v| v.parse::<i64>().ok());
            }
        }
        let (Some(p), Some(z), Ok(t)) = (p, z, ts.parse::<i64>()) else {
            return Err(bad(line));
        };
        time.push(timestamp_from_unix_ns(t));
        sym.push(s.to_string());
        price.push(p);
        size.push(z);
        totals.rows += 1;
        totals.sum_size += z;
        totals.sum_price += p;
    }
    Ok(K::List(vec![
        K::symbol(".u.upd"),
        K::symbol(table),
        K::List(vec![
            K::vector(Vector::Long(Kind::Timestamp, time)),
            K::vector(Vector::Symbol(sym)),
            K::vector(Vector::Float(Kind::Float, price)),
            K::vector(Vector::Long(Kind::Long, size)),
        ]),
    ]))
}

/// The same rows three ways: ILP batches, and `.u.upd` messages (encoded
/// async; the sync run flips their type byte), and what they add up to.
struct Data {
    ilp: Vec<Vec<u8>>,
    ipc: Vec<Vec<u8>>,
    totals: Totals,
}

fn prepare(rows: u64, seed: u64) -> Result<Data> {
    let ilp = crate::ingest::generate("trade", rows as usize, seed);
    let mut totals = Totals {
        rows: 0,
        sum_size: 0,
        sum_price: 0.0,
    };
    let mut ipc = Vec::with_capacity(ilp.len());
    for b in &ilp {
        let k = upd_from_ilp("trade", b, &mut totals)?;
        ipc.push(
            tickdb_ipc::encode_message(MsgType::Async, &k, false)
                .map_err(|e| ipc_err("encoding .u.upd", e))?,
        );
    }
    Ok(Data { ilp, ipc, totals })
}

/// Sets the message type byte of every pre-encoded message.
fn set_type(msgs: &mut [Vec<u8>], t: MsgType) {
    for m in msgs {
        m[1] = t.code();
    }
}

// ---------------------------------------------------------------- insert

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    IpcAsync,
    IpcSync,
    IlpTcp,
    IlpHttp,
}

impl Transport {
    pub const ALL: [Transport; 4] = [
        Transport::IpcAsync,
        Transport::IpcSync,
        Transport::IlpTcp,
        Transport::IlpHttp,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Transport::IpcAsync => "kdb+ IPC, async `.u.upd` + chaser",
            Transport::IpcSync => "kdb+ IPC, sync `.u.upd`",
            Transport::IlpTcp => "ILP over TCP",
            Transport::IlpHttp => "ILP over HTTP",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Transport::IpcAsync => "ipc-async",
            Transport::IpcSync => "ipc-sync",
            Transport::IlpTcp => "ilp-tcp",
            Transport::IlpHttp => "ilp-http",
        }
    }

    /// What ends the timed part of a run.
    pub fn ends_when(self) -> &'static str {
        match self {
            Transport::IpcAsync => "the chaser's `::`",
            Transport::IpcSync => "the last `::`",
            Transport::IlpTcp => "every row queryable (no acknowledgement)",
            Transport::IlpHttp => "the last 204",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct InsertRun {
    pub rows: u64,
    /// Bytes the client sent: IPC messages with their headers (and the
    /// chaser), ILP lines, HTTP requests with their heads.
    pub bytes: u64,
    /// Until acknowledged (IPC, HTTP) or queryable (ILP TCP).
    pub seconds: f64,
    /// Until `select count(*)` shows every row.
    pub queryable_seconds: f64,
    pub rows_s: f64,
    pub mb_s: f64,
    pub queryable_rows_s: f64,
    /// The server's CPU time over the run (user + system), seconds.
    pub server_cpu_s: Option<f64>,
    /// What the table held at the end.
    pub totals: Totals,
}

#[derive(Debug, Clone, Serialize)]
pub struct InsertCell {
    pub transport: Transport,
    pub fsync: String,
    pub runs: Vec<InsertRun>,
}

impl InsertCell {
    fn samples(&self, f: impl Fn(&InsertRun) -> f64) -> Samples {
        Samples(self.runs.iter().map(f).collect())
    }
    pub fn rows_s(&self) -> Option<f64> {
        self.samples(|r| r.rows_s).median()
    }
    pub fn queryable_rows_s(&self) -> Option<f64> {
        self.samples(|r| r.queryable_rows_s).median()
    }
    fn cpu_per_m_rows(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter_map(|r| r.server_cpu_s.map(|c| c / (r.rows as f64 / 1e6).max(1e-9)))
            .collect();
        Samples(v).median()
    }
}

/// The table's count, sum(size) and sum(price).
fn table_totals(http: u16) -> Result<Totals> {
    let sql = "SELECT count(*), sum(size), sum(price) FROM trade";
    let v = request_json(http, "GET", &format!("/exec?query={}", url_encode(sql)))?;
    let row = &v["dataset"][0];
    match (row[0].as_u64(), row[1].as_i64(), row[2].as_f64()) {
        (Some(rows), Some(sum_size), Some(sum_price)) => Ok(Totals {
            rows,
            sum_size,
            sum_price,
        }),
        _ => Err(BenchError::Protocol(format!(
            "{sql}: unexpected answer {v}"
        ))),
    }
}

/// Waits until `select count(*)` shows `rows` rows (or more).
fn wait_queryable(http: u16, rows: u64, t0: Instant) -> Result<()> {
    loop {
        child::check_interrupt()?;
        if let Ok(n) = exec_scalar(http, "select count(*) from trade") {
            if n >= 0 && n as u64 >= rows {
                return Ok(());
            }
        }
        if t0.elapsed() > ANSWER_TIMEOUT {
            return Err(BenchError::Server(format!(
                "trade: not every row queryable after {ANSWER_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends every batch over `t`; returns the bytes sent once the last is
/// acknowledged (for ILP TCP: written).
fn send_all(
    t: Transport,
    s: &servers::Tickdb,
    ipc_port: u16,
    data: &mut Data,
    pb: &ProgressBar,
) -> Result<u64> {
    let mut bytes = 0u64;
    let rows_of = |b: &[u8]| b.iter().filter(|&&c| c == b'\n').count() as u64;
    match t {
        Transport::IpcAsync | Transport::IpcSync => {
            let sync = t == Transport::IpcSync;
            set_type(
                &mut data.ipc,
                if sync { MsgType::Sync } else { MsgType::Async },
            );
            let mut c = IpcConn::connect(ipc_port)?;
            for (m, b) in data.ipc.iter().zip(&data.ilp) {
                child::check_interrupt()?;
                c.send(m)?;
                bytes += m.len() as u64;
                if sync {
                    match c.answer(".u.upd")? {
                        K::Null => {}
                        k => {
                            return Err(ipc_err(
                                ".u.upd",
                                format!(
                                    "answered an object of type {} instead of ::",
                                    k.type_code()
                                ),
                            ))
                        }
                    }
                }
                pb.inc(rows_of(b));
            }
            if !sync {
                let chaser = sync_message(&K::string(""))?;
                c.send(&chaser)?;
                bytes += chaser.len() as u64;
                match c.answer("the chaser")? {
                    K::Null => {}
                    k => {
                        return Err(ipc_err(
                            "the chaser",
                            format!("answered an object of type {} instead of ::", k.type_code()),
                        ))
                    }
                }
            }
        }
        Transport::IlpTcp => {
            let mut sock = TcpStream::connect(("127.0.0.1", s.ilp))
                .map_err(BenchError::io("ILP TCP connect"))?;
            sock.set_nodelay(true).map_err(BenchError::io("nodelay"))?;
            for b in &data.ilp {
                child::check_interrupt()?;
                sock.write_all(b).map_err(BenchError::io("ILP TCP write"))?;
                bytes += b.len() as u64;
                pb.inc(rows_of(b));
            }
            sock.flush().map_err(BenchError::io("ILP TCP flush"))?;
        }
        Transport::IlpHttp => {
            let mut conn = HttpConn::connect(s.http)?;
            for b in &data.ilp {
                child::check_interrupt()?;
                let (status, answer) = conn.request("POST", "/write", b)?;
                if status != 204 {
                    return Err(BenchError::Server(format!(
                        "POST /write: HTTP {status}: {}",
                        String::from_utf8_lossy(&answer)
                    )));
                }
                // The request head HttpConn sends, then the body.
                let head = format!(
                    "POST /write HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n",
                    s.http,
                    b.len()
                );
                bytes += (head.len() + b.len()) as u64;
                pb.inc(rows_of(b));
            }
        }
    }
    Ok(bytes)
}

/// Starts `tickdb ROLE` with a kdb+ IPC port and the login this client
/// uses; a fresh IPC port if one was taken before the server bound it.
fn start_with_ipc(
    bin: &Path,
    work: &Path,
    role: &str,
    name: &str,
    extra: &[&str],
) -> Result<(servers::Tickdb, u16)> {
    let _ = std::fs::remove_dir_all(work.join(format!("{name}-data")));
    let mut tries = 0;
    loop {
        tries += 1;
        let port = child::free_port()?;
        let p = port.to_string();
        let mut args = extra.to_vec();
        args.extend(["--ipc-port", &p]);
        match servers::start_tickdb_env(
            bin,
            work,
            role,
            name,
            &args,
            &[("TICKDB_PG_PASSWORD", IPC_PASSWORD)],
        ) {
            Err(BenchError::Server(m)) if tries < 3 && m.contains("address already in use") => {
                eprintln!("tickdb {role}: a port was taken before it bound it; starting it on fresh ports");
            }
            r => return r.map(|s| (s, port)),
        }
    }
}

fn insert_run(
    bin: &Path,
    work: &Path,
    t: Transport,
    fsync: &str,
    rep: usize,
    data: &mut Data,
    pb: &ProgressBar,
) -> Result<InsertRun> {
    let name = format!("ipc-insert-{}-{fsync}-{rep}", t.short());
    let (mut s, ipc_port) = start_with_ipc(bin, work, "up", &name, &["--fsync", fsync])?;
    let pid = s.child.pid();
    let cpu = || pid.and_then(tickdb_stack::procfs::cpu_seconds);
    let result = (|| -> Result<InsertRun> {
        let rows = data.totals.rows;
        let cpu0 = cpu();
        let t0 = Instant::now();
        let bytes = send_all(t, &s, ipc_port, data, pb)?;
        let acked = t0.elapsed().as_secs_f64();
        wait_queryable(s.http, rows, t0)?;
        let queryable = t0.elapsed().as_secs_f64();
        let server_cpu_s = match (cpu0, cpu()) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let seconds = if t == Transport::IlpTcp {
            queryable
        } else {
            acked
        };
        let totals = table_totals(s.http)?;
        Ok(InsertRun {
            rows,
            bytes,
            seconds,
            queryable_seconds: queryable,
            rows_s: rows as f64 / seconds.max(1e-9),
            mb_s: bytes as f64 / MB / seconds.max(1e-9),
            queryable_rows_s: rows as f64 / queryable.max(1e-9),
            server_cpu_s,
            totals,
        })
    })();
    s.child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&s.data_dir);
    result
}

fn insert_part(
    bin: &Path,
    work: &Path,
    o: &IpcBenchOptions,
    failures: &mut Vec<String>,
) -> Result<(Vec<InsertCell>, Totals)> {
    eprintln!(
        "ipc insert: generating {} rows as ILP lines and .u.upd messages",
        o.rows
    );
    let mut data = prepare(o.rows, o.seed)?;
    let expected = data.totals;
    let mut cells: Vec<InsertCell> = o
        .fsync
        .iter()
        .flat_map(|f| {
            Transport::ALL.iter().map(move |&t| InsertCell {
                transport: t,
                fsync: f.clone(),
                runs: Vec::new(),
            })
        })
        .collect();
    let total = cells.len() * o.repeats;
    let mut k = 0;
    // Repeats outermost, so that drift over the run spreads over every cell.
    for rep in 0..o.repeats {
        for cell in cells.iter_mut() {
            k += 1;
            let what = format!("{}, --fsync {}", cell.transport.label(), cell.fsync);
            let pb = ProgressBar::new(expected.rows);
            pb.set_style(
                ProgressStyle::with_template(&format!(
                    "ipc insert [{k}/{total}] {what} {{bar:30}} {{human_pos}}/{{human_len}} rows {{per_sec}}"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let r = insert_run(bin, work, cell.transport, &cell.fsync, rep, &mut data, &pb);
            pb.finish_and_clear();
            let r = r?;
            eprintln!(
                "ipc insert [{k}/{total}] {what}: {} rows/s, {:.1} MB/s, queryable at {} rows/s",
                si(r.rows_s),
                r.mb_s,
                si(r.queryable_rows_s)
            );
            if !r.totals.same(&expected) {
                failures.push(format!(
                    "{what}, run {}: the table ended with {} rows, sum(size) {}, sum(price) {} (sent: {} rows, sum(size) {}, sum(price) {})",
                    rep + 1,
                    r.totals.rows,
                    r.totals.sum_size,
                    r.totals.sum_price,
                    expected.rows,
                    expected.sum_size,
                    expected.sum_price
                ));
            }
            cell.runs.push(r);
        }
    }
    Ok((cells, expected))
}

// --------------------------------------------------------------- latency

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubProtocol {
    KdbIpc,
    Tickdb,
}

impl SubProtocol {
    pub fn label(self) -> &'static str {
        match self {
            SubProtocol::KdbIpc => "kdb+ IPC (`.u.sub`)",
            SubProtocol::Tickdb => "tickdb subscription protocol",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyCell {
    /// Which of the `repeats` runs (0-based): every cell runs once per run.
    pub run: usize,
    pub protocol: SubProtocol,
    pub publish_interval_ms: u64,
    pub sent: u64,
    pub received: u64,
    pub achieved_rate: f64,
    /// Rows after the warm-up, in the histogram.
    pub measured: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// The kdb+ IPC subscriber: `.u.sub[`trade;`]`, then now − time for every
/// row of every `upd` it decodes. `ready` is told once the subscription
/// is answered.
fn ipc_subscriber(
    port: u16,
    measure_from_ns: i64,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    ready: std::sync::mpsc::Sender<()>,
) -> Result<Histogram<u64>> {
    let mut c = IpcConn::connect(port)?;
    let sub = K::List(vec![K::symbol(".u.sub"), K::symbol("trade"), K::symbol("")]);
    c.send(&sync_message(&sub)?)?;
    match c.answer(".u.sub[`trade;`]")? {
        K::List(items) if items.len() == 2 && matches!(&items[1], K::Table(_)) => {}
        k => {
            return Err(ipc_err(
                ".u.sub[`trade;`]",
                format!(
                    "expected (`trade; empty table), got an object of type {}",
                    k.type_code()
                ),
            ))
        }
    }
    let _ = ready.send(());
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
        .map_err(|e| BenchError::Protocol(e.to_string()))?;
    while !stop.load(Ordering::Relaxed) {
        let Some((t, k)) = c.poll()? else {
            continue;
        };
        let now = latency::now_ns();
        let items = match (t, k) {
            (MsgType::Async, K::List(items)) => items,
            (_, K::Error(e)) => return Err(BenchError::Server(format!("kdb+ IPC: '{e}"))),
            (t, k) => {
                return Err(ipc_err(
                    "the subscription",
                    format!("unexpected {t:?} message of type {}", k.type_code()),
                ))
            }
        };
        match items.as_slice() {
            [K::Atom(tickdb_ipc::Atom::Symbol(f)), K::Atom(tickdb_ipc::Atom::Symbol(table)), K::Table(tb)]
                if f == "upd" && table == "trade" =>
            {
                let time = tb
                    .names
                    .iter()
                    .position(|n| n == "time")
                    .and_then(|i| tb.columns.get(i));
                let Some(K::Vector {
                    v: Vector::Long(Kind::Timestamp, ts),
                    ..
                }) = time
                else {
                    return Err(ipc_err(
                        "an upd",
                        "the trade table has no timestamp column `time`",
                    ));
                };
                received.fetch_add(ts.len() as u64, Ordering::Relaxed);
                for &q in ts {
                    let Some(t) = unix_ns_from_timestamp(q) else {
                        return Err(ipc_err("an upd", "a null or infinite time"));
                    };
                    if t >= measure_from_ns {
                        hist.saturating_record(((now - t).max(1) / 1000).max(1) as u64);
                    }
                }
            }
            [K::Atom(tickdb_ipc::Atom::Symbol(f)), ..] if f == ".u.end" => {}
            _ => {
                return Err(ipc_err(
                    "the subscription",
                    "a message that is not (`upd; `trade; table)",
                ))
            }
        }
    }
    Ok(hist)
}

/// One cell of run `run` (0-based): one protocol at one publish mode.
fn latency_cell(
    bin: &Path,
    work: &Path,
    run: usize,
    proto: SubProtocol,
    mode: u64,
    o: &IpcBenchOptions,
) -> Result<LatencyCell> {
    let name = format!(
        "ipc-latency-{}-{mode}-run{}",
        match proto {
            SubProtocol::KdbIpc => "ipc",
            SubProtocol::Tickdb => "native",
        },
        run + 1
    );
    let (mut tp, ipc_port) = start_with_ipc(
        bin,
        work,
        "tp",
        &name,
        &[
            "--fsync",
            "never",
            "--publish-interval-ms",
            &mode.to_string(),
        ],
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let measure_from = latency::now_ns() + latency::WARMUP.as_nanos() as i64;
    let sub = {
        let (stop2, received2, tp_port) = (stop.clone(), received.clone(), tp.tp);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || match proto {
            SubProtocol::KdbIpc => {
                ipc_subscriber(ipc_port, measure_from, stop2, received2, ready_tx)
            }
            SubProtocol::Tickdb => {
                // It subscribes from sequence 1: it gets every row, whenever
                // its request arrives.
                let _ = ready_tx.send(());
                latency::subscriber(tp_port, measure_from, stop2, received2)
            }
        });
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // The subscriber ended before it subscribed: its error says why.
                return Err(match h.join() {
                    Ok(Err(e)) => e,
                    _ => BenchError::Server(format!(
                        "{}: the subscriber ended before it subscribed",
                        proto.label()
                    )),
                });
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                // Stopping the tp (on return) ends the thread.
                stop.store(true, Ordering::Relaxed);
                return Err(BenchError::Server(format!(
                    "{}: no answer to the subscription within 30 s; log {}:\n{}",
                    proto.label(),
                    tp.child.log.display(),
                    child::log_tail(&tp.child.log)
                )));
            }
        }
        h
    };
    std::thread::sleep(Duration::from_millis(100));
    let mode_name = mode_label(mode);
    let pb = ProgressBar::new(o.seconds * 1000);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "ipc latency, {}, {mode_name} {{bar:30}} {{pos}}/{{len}} ms",
            proto.label()
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let sent = latency::feed(tp.ilp, o.rate, o.seconds, &pb);
    let elapsed = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    if let Ok(s) = &sent {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while received.load(Ordering::Relaxed) < *s
            && Instant::now() < deadline
            && !sub.is_finished()
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(OVERRUN_GRACE);
    }
    stop.store(true, Ordering::Relaxed);
    let hist = sub
        .join()
        .map_err(|_| BenchError::Server("subscriber thread panicked".into()))??;
    let sent = sent?;
    tp.child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&tp.data_dir);
    Ok(LatencyCell {
        run,
        protocol: proto,
        publish_interval_ms: mode,
        sent,
        received: received.load(Ordering::Relaxed),
        achieved_rate: sent as f64 / elapsed.max(1e-9),
        measured: hist.len(),
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        max_us: hist.max() as f64,
    })
}

fn mode_label(mode: u64) -> String {
    if mode == 0 {
        "zero-latency".into()
    } else {
        format!("timer {mode} ms")
    }
}

fn latency_part(
    bin: &Path,
    work: &Path,
    o: &IpcBenchOptions,
    failures: &mut Vec<String>,
) -> Result<Vec<LatencyCell>> {
    let mut out = Vec::new();
    // Run by run, every cell in each: a slow spell of the machine falls on
    // both protocols.
    for run in 0..o.repeats {
        for &mode in &o.modes {
            for proto in [SubProtocol::KdbIpc, SubProtocol::Tickdb] {
                let c = latency_cell(bin, work, run, proto, mode, o)?;
                eprintln!(
                    "ipc latency, run {}/{}: {}, {}: {} rows/s, p50 {}, p99 {}, max {}",
                    run + 1,
                    o.repeats,
                    proto.label(),
                    mode_label(mode),
                    si(c.achieved_rate),
                    latency::us(c.p50_us),
                    latency::us(c.p99_us),
                    latency::us(c.max_us)
                );
                if c.received != c.sent {
                    failures.push(format!(
                        "latency, run {}, {}, {}: the subscriber received {} rows; the feed sent {} after it subscribed",
                        run + 1,
                        proto.label(),
                        mode_label(mode),
                        c.received,
                        c.sent
                    ));
                }
                out.push(c);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- report

#[derive(Debug, Clone, Serialize)]
pub struct IpcReport {
    pub rows: u64,
    pub repeats: usize,
    pub rate: u64,
    pub seconds: u64,
    /// What every insert run must end with (from the generated rows).
    pub expected: Option<Totals>,
    pub insert: Vec<InsertCell>,
    pub latency: Vec<LatencyCell>,
    /// Mismatches: any fails the benchmark.
    pub failures: Vec<String>,
    pub machine: String,
    pub date: String,
    pub profile: &'static str,
}

pub fn run(bin: &Path, work: &Path, o: &IpcBenchOptions) -> Result<IpcReport> {
    let machine = crate::machine::Machine::probe(work);
    let mut failures = Vec::new();
    let wants = |s: &str| o.sections.iter().any(|x| x == s);
    let (insert, expected) = if wants("insert") {
        let (c, e) = insert_part(bin, work, o, &mut failures)?;
        (c, Some(e))
    } else {
        (Vec::new(), None)
    };
    let latency = if wants("latency") {
        latency_part(bin, work, o, &mut failures)?
    } else {
        Vec::new()
    };
    Ok(IpcReport {
        rows: o.rows,
        repeats: o.repeats,
        rate: o.rate,
        seconds: o.seconds,
        expected,
        insert,
        latency,
        failures,
        machine: machine.summary(),
        date: crate::today_utc(),
        profile: crate::build_profile(),
    })
}

impl IpcReport {
    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    /// IPC rows/s until queryable ÷ ILP TCP's, per fsync policy: the
    /// target is at least 1.
    pub fn ratio_to_tcp(&self, c: &InsertCell) -> Option<f64> {
        let tcp = self
            .insert
            .iter()
            .find(|x| x.transport == Transport::IlpTcp && x.fsync == c.fsync)?
            .queryable_rows_s()?;
        Some(c.queryable_rows_s()? / tcp).filter(|_| tcp > 0.0)
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        if !self.insert.is_empty() {
            s.push_str(&self.insert_markdown());
        }
        if !self.latency.is_empty() {
            if !s.is_empty() {
                s.push('\n');
            }
            s.push_str(&self.latency_markdown());
        }
        s.push_str(&format!(
            "\nMeasured on {}, {}, with a {} build.\n",
            self.machine, self.date, self.profile
        ));
        if self.failures.is_empty() {
            s.push_str("\nChecks: all passed (every insert run ended with the rows sent; every subscriber got exactly the rows fed after it subscribed).\n");
        } else {
            s.push_str("\nChecks FAILED:\n\n");
            for f in &self.failures {
                s.push_str(&format!("- {f}\n"));
            }
        }
        s
    }

    fn insert_markdown(&self) -> String {
        let mut s = String::from("### Bulk insert: kdb+ IPC against ILP\n\n");
        s.push_str(&format!(
            "The client of Zero-Impact Crash Recovery for kdb+: one connection sends {} `trade` rows (time, sym, price, size; 500 symbols) in {BATCH_ROWS}-row writes to a fresh `tickdb up` (tp + rdb in one process) per run. \
             The same rows over each transport: kdb+ IPC `.u.upd[`trade; columns]` messages, async with the empty sync chaser at the end or sync one by one (each answered `::` once journaled); \
             ILP lines over TCP (no acknowledgement: timed until `select count(*)` shows every row); ILP over HTTP (`POST /write`, each answered 204 once journaled). \
             rows/s and MB/s run until the last acknowledgement (for ILP TCP, until queryable); MB/s counts what each protocol puts on the wire (10^6 bytes: IPC messages with their headers, ILP lines, HTTP requests with their heads), so it differs between protocols for the same rows. \
             \"Queryable\" times every transport to the same end, every row visible to `select count(*)`, and the ratio to ILP TCP uses it. \
             Server CPU is the `tickdb up` process's user + system time over the run, per million rows. Median of {} run(s); `*` marks a spread over 1.3×. \
             Every run ended with the same row count, `sum(size)` and `sum(price)` (to {SUM_TOLERANCE:e} relative: a float sum depends on the order), or the benchmark fails.\n\n",
            self.rows, self.repeats
        ));
        s.push_str(&format!(
            "Reference, not measured here: the kdb+ primary of Zero-Impact Crash Recovery for kdb+ took 10k-row inserts at {KDB_BASELINE_MB_S:.2} MB/s (≈146 MB/s; the average of 4 runs over a 1 Gb/s network, its MB/s counting the rows' size).\n\n"
        ));
        s.push_str("| transport | `--fsync` | timed until | rows/s | MB/s | bytes/row | rows/s until queryable | ÷ ILP TCP (queryable) | server CPU s / M rows |\n|---|---|---|---|---|---|---|---|---|\n");
        for c in &self.insert {
            let rows_s = c.samples(|r| r.rows_s);
            let mb_s = c.samples(|r| r.mb_s);
            let q = c.samples(|r| r.queryable_rows_s);
            let bpr = c
                .runs
                .first()
                .map(|r| format!("{:.1}", r.bytes as f64 / r.rows.max(1) as f64))
                .unwrap_or_else(|| "n/a".into());
            let ratio = if c.transport == Transport::IlpTcp {
                "—".to_string()
            } else {
                self.ratio_to_tcp(c)
                    .map(|x| format!("{x:.2}×"))
                    .unwrap_or_else(|| "n/a".into())
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                c.transport.label(),
                c.fsync,
                c.transport.ends_when(),
                rows_s.describe(si),
                mb_s.describe(|x| format!("{x:.1}")),
                bpr,
                q.describe(si),
                ratio,
                c.cpu_per_m_rows()
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_else(|| "n/a".into()),
            ));
        }
        let mut verdicts = Vec::new();
        for c in self
            .insert
            .iter()
            .filter(|c| c.transport == Transport::IpcAsync)
        {
            if let Some(r) = self.ratio_to_tcp(c) {
                verdicts.push(format!(
                    "{r:.2}× under `--fsync {}` ({})",
                    c.fsync,
                    if r >= 1.0 { "met" } else { "not met" }
                ));
            }
        }
        if !verdicts.is_empty() {
            s.push_str(&format!(
                "\nTarget: kdb+ IPC (async + chaser) at least as fast as ILP over TCP, rows/s until queryable: {}.\n",
                verdicts.join("; ")
            ));
        }
        s
    }

    fn latency_markdown(&self) -> String {
        let mut s = String::from(
            "### Tick-to-subscriber latency: kdb+ IPC against the tickdb subscription protocol\n\n",
        );
        s.push_str(&format!(
            "Feed: trade rows over ILP TCP at a target of {} rows/s for {} s per cell (first {} ms not measured), each row's `time` its generation time (CLOCK_REALTIME ns), into `tickdb tp --fsync never --ipc-port`, a fresh one per cell. \
             One subscriber per cell: over kdb+ IPC, a q-style client that logs in, calls `.u.sub[`trade;`]` and decodes each async `(`upd; `trade; table)`; or `bench latency`'s client on the tp's subscription port. \
             Latency = the time a message is decoded − the row's `time` (q timestamps are ns since 2000.01.01), per row. kdb+ itself cannot be run here: the tickdb protocol is the peer. \
             Each subscriber must get exactly the rows the feed sent after it subscribed, or the benchmark fails.\n\n",
            si(self.rate as f64),
            self.seconds,
            latency::WARMUP.as_millis()
        ));
        s.push_str(&format!(
            "{} run(s), each running every cell in turn: median (min–max) over the runs, `*` marking a spread over 1.3×; \
             each percentile is over one run's rows, and rows received / sent are summed over the runs. \
             The ratio is the median of each run's kdb+ IPC p50 ÷ that run's tickdb protocol p50.\n\n",
            self.repeats
        ));
        s.push_str("| subscriber | publish mode | achieved rows/s | rows received / sent | rows measured | p50 | p99 | max | p50 ÷ tickdb protocol |\n|---|---|---|---|---|---|---|---|---|\n");
        // One row per (mode, protocol), in the order they first ran.
        for (mode, proto) in in_order(&self.latency, |c| (c.publish_interval_ms, c.protocol)) {
            let cells: Vec<&LatencyCell> = self
                .latency
                .iter()
                .filter(|c| c.publish_interval_ms == mode && c.protocol == proto)
                .collect();
            let f = |g: fn(&LatencyCell) -> f64| cells.iter().map(|c| g(c)).collect::<Samples>();
            let ratios = Samples(
                cells
                    .iter()
                    .filter(|c| c.protocol == SubProtocol::KdbIpc)
                    .filter_map(|c| {
                        let peer = self.latency.iter().find(|x| {
                            x.run == c.run
                                && x.protocol == SubProtocol::Tickdb
                                && x.publish_interval_ms == mode
                        })?;
                        (peer.p50_us > 0.0).then(|| c.p50_us / peer.p50_us)
                    })
                    .collect(),
            );
            let ratio = if ratios.0.is_empty() {
                "—".to_string()
            } else {
                ratios.describe(|x| format!("{x:.2}×"))
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} / {} | {} | {} | {} | {} | {} |\n",
                proto.label(),
                mode_label(mode),
                f(|c| c.achieved_rate).describe(si),
                cells.iter().map(|c| c.received).sum::<u64>(),
                cells.iter().map(|c| c.sent).sum::<u64>(),
                f(|c| c.measured as f64)
                    .median()
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_default(),
                f(|c| c.p50_us).describe(latency::us),
                f(|c| c.p99_us).describe(latency::us),
                f(|c| c.max_us).describe(latency::us),
                ratio
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upd_messages_carry_the_generated_rows() {
        let ilp = crate::ingest::generate("trade", 25, 7);
        let mut totals = Totals {
            rows: 0,
            sum_size: 0,
            sum_price: 0.0,
        };
        let k = upd_from_ilp("trade", &ilp[0], &mut totals).unwrap();
        assert_eq!(totals.rows, 25);
        let K::List(items) = &k else { panic!("{k:?}") };
        assert_eq!(items[0], K::symbol(".u.upd"));
        assert_eq!(items[1], K::symbol("trade"));
        let K::List(cols) = &items[2] else { panic!() };
        assert_eq!(cols.len(), 4);
        assert!(cols.iter().all(|c| c.count() == 25));
        let K::Vector {
            v: Vector::Long(Kind::Timestamp, ts),
            ..
        } = &cols[0]
        else {
            panic!()
        };
        assert_eq!(
            unix_ns_from_timestamp(ts[0]),
            Some(1_700_000_000_000_000_000)
        );
        let bytes = tickdb_ipc::encode_message(MsgType::Async, &k, false).unwrap();
        let mut h = [0u8; HEADER_BYTES];
        h.copy_from_slice(&bytes[..HEADER_BYTES]);
        let header = Header::parse(&h, &LIMITS).unwrap();
        assert_eq!(header.len, bytes.len());
        assert_eq!(
            tickdb_ipc::decode_message(&header, &bytes, &LIMITS).unwrap(),
            k
        );
        assert!(upd_from_ilp("trade", b"trade,sym=A price=x,size=1i 5\n", &mut totals).is_err());
    }

    #[test]
    fn totals_compare_sums_with_a_tolerance() {
        let a = Totals {
            rows: 10,
            sum_size: 5,
            sum_price: 1e9,
        };
        assert!(a.same(&Totals {
            sum_price: 1e9 + 1e-4,
            ..a
        }));
        assert!(!a.same(&Totals {
            sum_price: 1e9 + 10.0,
            ..a
        }));
        assert!(!a.same(&Totals { rows: 11, ..a }));
    }
}
