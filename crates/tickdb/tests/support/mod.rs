//! Test support: start the real `tickdb` binary on free loopback ports, a
//! minimal blocking HTTP/1.1 client, and a guard that kills the server's
//! process group on drop (also when a test panics), so no test leaves an
//! orphan behind.

#![allow(dead_code)]

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer `/health` with 200 (journal replay
/// included) before the test fails.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Socket timeout of the test client: a hung server fails the test rather
/// than hanging it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Start-ups retried on fresh ports when a port found free was taken
/// before the server bound it (another test's client or server got it).
pub const PORT_RACE_RETRIES: usize = 5;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 to find a free port")
}

pub struct Server {
    child: Option<Child>,
    pub http: u16,
    pub ilp: u16,
    pub tp: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

impl Server {
    /// `tickdb up` on fresh free ports over `data_dir`, with `extra` flags.
    pub fn up(data_dir: &Path, extra: &[&str]) -> Server {
        for _ in 0..PORT_RACE_RETRIES {
            if let Some(s) = Server::try_up(data_dir, extra) {
                return s;
            }
        }
        panic!("tickdb up lost the race for free ports {PORT_RACE_RETRIES} times");
    }

    /// None when the server exited because a port was already in use.
    fn try_up(data_dir: &Path, extra: &[&str]) -> Option<Server> {
        let (http, ilp, tp) = (free_port(), free_port(), free_port());
        let log = data_dir.with_extension("log");
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("opening the server log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickdb"));
        cmd.arg("up")
            .args(["--http-port", &http.to_string()])
            .args(["--ilp-port", &ilp.to_string()])
            .args(["--tp-port", &tp.to_string()])
            .args(["--repl-port", &free_port().to_string()])
            .args(["--pg-port", &free_port().to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("log handle"))
            .stderr(logf)
            // Own process group: the guard kills the whole group.
            .process_group(0);
        // If the test process dies without running the guard, the kernel
        // kills the server too: no orphans.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("starting target tickdb binary");
        let mut s = Server {
            child: Some(child),
            http,
            ilp,
            tp,
            data_dir: data_dir.to_path_buf(),
            log,
        };
        s.wait_ready().then_some(s)
    }

    /// False if the server exited because a port was in use.
    fn wait_ready(&mut self) -> bool {
        let t0 = Instant::now();
        loop {
            if let Ok((200, _)) = http_request(self.http, "GET", "/health", b"") {
                return true;
            }
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                let log = self.log_tail();
                if log.contains("address already in use") {
                    self.child = None;
                    return false;
                }
                panic!("server exited before it was ready; log:\n{log}");
            }
            if t0.elapsed() > READY_TIMEOUT {
                panic!(
                    "server not ready after {READY_TIMEOUT:?}; log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// SIGKILL: the process gets no chance to flush or sync anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe {
                libc::kill(-(c.id() as i32), libc::SIGKILL);
            }
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait: a clean stop.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let _ = c.wait();
        }
    }

    pub fn exec(&self, sql: &str) -> serde_json::Value {
        let path = format!("/exec?query={}", url_encode(sql));
        let (status, body) = http_request(self.http, "GET", &path, b"")
            .unwrap_or_else(|e| panic!("/exec {sql}: {e}\n{}", self.log_tail()));
        assert_eq!(
            status,
            200,
            "/exec {sql}: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body).expect("/exec answers JSON")
    }

    pub fn status(&self) -> serde_json::Value {
        let (status, body) = http_request(self.http, "GET", "/status", b"").expect("/status");
        assert_eq!(status, 200);
        serde_json::from_slice(&body).expect("/status answers JSON")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A keep-alive HTTP/1.1 connection.
pub struct HttpConn {
    port: u16,
    reader: BufReader<TcpStream>,
}

impl HttpConn {
    pub fn connect(port: u16) -> std::io::Result<HttpConn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        s.set_nodelay(true)?;
        Ok(HttpConn {
            port,
            reader: BufReader::new(s),
        })
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\r\n",
            self.port,
            body.len()
        );
        let s = self.reader.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        // Content-Length and chunked bodies (query results stream) alike,
        // through the stack crate's reader.
        let (status, body, _close) = tickdb_stack::http::read_response(&mut self.reader)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok((status, body))
    }
}

pub fn http_request(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    HttpConn::connect(port)?.request(method, path, body)
}

/// The test's seed: `TICKDB_SEED` if set (to reproduce a run), else the clock.
/// Printed either way.
pub fn seed(test: &str) -> u64 {
    tickdb_core::testing::seed(test)
}
