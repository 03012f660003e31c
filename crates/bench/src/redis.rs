//! Redis 7 as a peer (Debian's `redis-server`): started on a free loopback
//! port with an append-only file and a chosen `appendfsync`, no RDB
//! snapshots, and a minimal pipelined RESP client (SET, DEL, GET, DBSIZE,
//! CONFIG SET): enough to run the key-value workload and check it landed.

use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a Redis start (with an AOF to load) may take before we give up.
const READY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a SIGTERM'd Redis may take to fsync its AOF and exit.
const STOP_GRACE: Duration = Duration::from_secs(120);
/// How long an AOF rewrite (`BGREWRITEAOF`, a fork writing the whole
/// dataset) may take before we give up.
const REWRITE_TIMEOUT: Duration = Duration::from_secs(600);
/// How often `INFO persistence` is asked whether a rewrite is done.
const REWRITE_POLL_MS: u64 = 20;
/// Longest reply line accepted (bulk replies are read by length).
const REPLY_LINE_BYTES_MAX: usize = 64 * 1024;
/// Largest bulk reply accepted: the workload's values are a few KB.
const BULK_BYTES_MAX: i64 = 16 * 1024 * 1024;
/// Most elements of one array reply, and how deep arrays may nest.
const ARRAY_LEN_MAX: i64 = 1 << 16;
const ARRAY_DEPTH_MAX: usize = 8;

/// Why Redis cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    match Command::new("redis-server").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("redis-server --version failed ({})", o.status)),
        Err(e) => Some(format!(
            "no redis-server ({e}); install it with `apt-get install redis-server` \
             (scripts/bench.sh does), or pass --no-redis"
        )),
    }
}

/// `redis-server --version`'s version, e.g. "7.0.15".
pub fn version() -> String {
    Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| {
            s.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into())
}

pub struct Redis {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    /// Seconds from spawn until the server answered PING (not LOADING).
    pub ready_secs: f64,
}

impl Redis {
    /// Starts redis-server with its data in `dir` (an AOF already there is
    /// loaded: that is the restart being measured) and `appendfsync` as
    /// given. Returns once it answers PING with PONG.
    pub fn start(dir: &Path, appendfsync: &str, log: &Path) -> Result<Redis> {
        if let Some(why) = unavailable() {
            return Err(BenchError::Server(format!("Redis not available: {why}")));
        }
        std::fs::create_dir_all(dir)
            .map_err(BenchError::io(format!("creating {}", dir.display())))?;
        let port = free_port()?;
        let conf = dir.join("redis.conf");
        // Loopback only; AOF on with Redis's defaults for rewriting (its
        // garbage collection) and the RDB preamble; no RDB snapshots, so the
        // AOF is the only persistence, as the store's log is.
        let text = format!(
            "bind 127.0.0.1\nport {port}\nprotected-mode yes\ndaemonize no\n\
             dir {}\nappendonly yes\nappendfsync {appendfsync}\nsave \"\"\nlogfile \"\"\n",
            dir.display()
        );
        std::fs::write(&conf, text).map_err(BenchError::io("writing redis.conf"))?;
        let mut cmd = Command::new("redis-server");
        cmd.arg(&conf);
        let t0 = Instant::now();
        let mut child = Child::spawn("redis-server", &mut cmd, log)?;
        loop {
            child::check_interrupt()?;
            child.check_alive()?;
            if let Ok(mut c) = Conn::connect(port) {
                match c.command(&[b"PING"]) {
                    Ok(Reply::Simple(s)) if s == "PONG" => break,
                    // -LOADING while the AOF loads: keep asking.
                    _ => {}
                }
            }
            if t0.elapsed() > READY_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "Redis not ready after {READY_TIMEOUT:?}:\n{}",
                    child::log_tail(log)
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Redis {
            child,
            port,
            dir: dir.to_path_buf(),
            ready_secs: t0.elapsed().as_secs_f64(),
        })
    }

    /// SIGTERM: Redis fsyncs its AOF and exits; waits for that.
    pub fn stop(mut self) {
        self.child.stop(STOP_GRACE);
    }

    /// The append-only files' bytes (Redis 7 keeps them in `appendonlydir`).
    pub fn aof_bytes(&self) -> u64 {
        crate::disk::dir_bytes(&self.aof_dir())
    }

    pub fn aof_dir(&self) -> PathBuf {
        self.dir.join("appendonlydir")
    }
}

/// Whether an AOF rewrite is running or waiting to run, from
/// `INFO persistence`.
fn rewrite_busy(conn: &mut Conn) -> Result<bool> {
    let info = conn.command(&[b"INFO", b"persistence"])?;
    let text = info
        .text()
        .ok_or_else(|| BenchError::Protocol(format!("Redis INFO persistence: {info:?}")))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_string)
    };
    let busy = |name: &str| -> Result<bool> {
        match field(name).as_deref() {
            Some("0") => Ok(false),
            Some("1") => Ok(true),
            other => Err(BenchError::Protocol(format!(
                "Redis INFO persistence has no {name} (got {other:?})"
            ))),
        }
    };
    let busy = busy("aof_rewrite_in_progress")? || busy("aof_rewrite_scheduled")?;
    if !busy && field("aof_last_bgrewrite_status").as_deref() == Some("err") {
        return Err(BenchError::Server(
            "Redis's last AOF rewrite failed (aof_last_bgrewrite_status:err)".into(),
        ));
    }
    Ok(busy)
}

fn wait_rewrite_done(conn: &mut Conn, t0: Instant) -> Result<()> {
    while rewrite_busy(conn)? {
        child::check_interrupt()?;
        if t0.elapsed() > REWRITE_TIMEOUT {
            return Err(BenchError::Server(format!(
                "Redis's AOF rewrite did not finish within {REWRITE_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(REWRITE_POLL_MS));
    }
    Ok(())
}

/// Rewrites the AOF (`BGREWRITEAOF`) and returns once the new one is in
/// place: with `aof-use-rdb-preamble yes` (Redis 7's default) an RDB base
/// file holding the dataset, and an empty incremental file. A rewrite Redis
/// started by itself (`auto-aof-rewrite-percentage`) is waited for first.
pub fn rewrite_aof(conn: &mut Conn) -> Result<()> {
    let t0 = Instant::now();
    wait_rewrite_done(conn, t0)?;
    match conn.command(&[b"BGREWRITEAOF"])? {
        Reply::Simple(_) => {}
        other => {
            return Err(BenchError::Protocol(format!(
                "Redis BGREWRITEAOF: {other:?}"
            )))
        }
    }
    wait_rewrite_done(conn, t0)
}

/// One RESP reply, as far as this client needs.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    /// `*N` (Sentinel's get-master-addr-by-name, its replicas list);
    /// None for `*-1`.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// A bulk or simple string's text.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Simple(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

pub struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
    out: Vec<u8>,
    queued: usize,
}

impl Conn {
    pub fn connect(port: u16) -> Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))
            .map_err(BenchError::io(format!("connecting to Redis on {port}")))?;
        Conn::from_stream(s)
    }

    /// A connection whose connect, reads and writes give up after `timeout`
    /// (a client polling servers that may be dead).
    pub fn connect_timeout(port: u16, timeout: Duration) -> Result<Conn> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let what = || format!("connecting to Redis on {port}");
        let s = TcpStream::connect_timeout(&addr, timeout).map_err(BenchError::io(what()))?;
        s.set_read_timeout(Some(timeout))
            .map_err(BenchError::io(what()))?;
        s.set_write_timeout(Some(timeout))
            .map_err(BenchError::io(what()))?;
        Conn::from_stream(s)
    }

    fn from_stream(s: TcpStream) -> Result<Conn> {
        s.set_nodelay(true).map_err(BenchError::io("TCP_NODELAY"))?;
        let w = s.try_clone().map_err(BenchError::io("cloning a socket"))?;
        Ok(Conn {
            r: BufReader::with_capacity(64 * 1024, s),
            w,
            out: Vec::new(),
            queued: 0,
        })
    }

    /// Appends a command to the pipeline (sent by `flush`).
    pub fn queue(&mut self, args: &[&[u8]]) {
        self.out
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.out
                .extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
        self.queued += 1;
    }

    /// Sends every queued command and reads one reply per command, in order.
    pub fn flush(&mut self) -> Result<Vec<Reply>> {
        self.w
            .write_all(&self.out)
            .map_err(BenchError::io("writing to Redis"))?;
        self.out.clear();
        let n = std::mem::take(&mut self.queued);
        (0..n).map(|_| self.read_reply()).collect()
    }

    /// One command, one reply.
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Reply> {
        self.queue(args);
        let mut r = self.flush()?;
        r.pop()
            .ok_or_else(|| BenchError::Protocol("Redis sent no reply".into()))
    }

    fn line(&mut self) -> Result<String> {
        let mut line = Vec::new();
        let n = (&mut self.r)
            .take(REPLY_LINE_BYTES_MAX as u64)
            .read_until(b'\n', &mut line)
            .map_err(BenchError::io("reading from Redis"))?;
        if n == 0 || !line.ends_with(b"\r\n") {
            return Err(BenchError::Protocol(format!(
                "Redis closed the connection or sent a bad line: {:?}",
                String::from_utf8_lossy(&line)
            )));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|_| BenchError::Protocol("Redis sent non-UTF-8".into()))
    }

    fn read_reply(&mut self) -> Result<Reply> {
        self.read_reply_at(0)
    }

    fn read_reply_at(&mut self, depth: usize) -> Result<Reply> {
        let line = self.line()?;
        let bad = || BenchError::Protocol(format!("unexpected Redis reply {line:?}"));
        let (tag, rest) = line.split_at_checked(1).ok_or_else(bad)?;
        match tag {
            "+" => Ok(Reply::Simple(rest.to_string())),
            "-" => Ok(Reply::Error(rest.to_string())),
            ":" => rest.parse().map(Reply::Int).map_err(|_| bad()),
            "$" => {
                let len: i64 = rest.parse().map_err(|_| bad())?;
                if len < 0 {
                    return Ok(Reply::Bulk(None));
                }
                if len > BULK_BYTES_MAX {
                    return Err(bad());
                }
                let mut v = vec![0u8; len as usize + 2];
                self.r
                    .read_exact(&mut v)
                    .map_err(BenchError::io("reading from Redis"))?;
                v.truncate(len as usize);
                Ok(Reply::Bulk(Some(v)))
            }
            "*" => {
                let len: i64 = rest.parse().map_err(|_| bad())?;
                if len < 0 {
                    return Ok(Reply::Array(None));
                }
                if len > ARRAY_LEN_MAX || depth >= ARRAY_DEPTH_MAX {
                    return Err(bad());
                }
                let items = (0..len)
                    .map(|_| self.read_reply_at(depth + 1))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Reply::Array(Some(items)))
            }
            _ => Err(bad()),
        }
    }
}
