//! A small blocking HTTP/1.1 client with keep-alive: what the monitor needs
//! to poll an rdb's `/exec` and `/status`, and the feed to post ILP to a
//! tp's `/write`. Reconnects once when a kept-alive connection was closed
//! by the server between requests.

use crate::error::{Result, StackError};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A response body larger than this is refused: the monitor's queries
/// aggregate, so a large answer means something is wrong.
pub const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// A header line longer than this is refused.
const HEADER_LINE_BYTES_MAX: usize = 16 * 1024;
/// How long one request may wait for its answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

pub struct HttpClient {
    addr: String,
    /// Every address given (HOST:PORT,HOST:PORT: the nodes of a failover
    /// group); `addr` is the one in use, and a connection that cannot be
    /// made moves to the next.
    addrs: Vec<String>,
    conn: Option<BufReader<TcpStream>>,
    /// An `Authorization` header line sent with every request.
    auth: Option<String>,
}

fn proto(m: impl Into<String>) -> StackError {
    StackError::Protocol(m.into())
}

impl HttpClient {
    /// `addr` is HOST:PORT, or several separated by commas (the first that
    /// can be connected to is used, the next when it cannot be any more);
    /// nothing is connected until the first request.
    pub fn new(addr: &str) -> HttpClient {
        let addrs: Vec<String> = addr
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        HttpClient {
            addr: addrs.first().cloned().unwrap_or_default(),
            addrs,
            conn: None,
            auth: None,
        }
    }

    /// Sends `header` (an `Authorization: …\r\n` line) with every request.
    pub fn with_auth(mut self, header: Option<String>) -> HttpClient {
        self.auth = header;
        self
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn connect(&mut self) -> Result<BufReader<TcpStream>> {
        let start = self.addrs.iter().position(|a| *a == self.addr).unwrap_or(0);
        let mut last = None;
        for i in 0..self.addrs.len().max(1) {
            let a = self
                .addrs
                .get((start + i) % self.addrs.len().max(1))
                .cloned()
                .unwrap_or_default();
            match self.connect_one(&a) {
                Ok(c) => {
                    if a != self.addr {
                        tracing::warn!("{} cannot be reached; using {a}", self.addr);
                        self.addr = a;
                    }
                    return Ok(c);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| proto("no address to connect to")))
    }

    fn connect_one(&self, addr: &str) -> Result<BufReader<TcpStream>> {
        let what = || format!("connecting to {addr}");
        let s = TcpStream::connect(addr).map_err(StackError::io(what()))?;
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(StackError::io(what()))?;
        s.set_nodelay(true).map_err(StackError::io(what()))?;
        Ok(BufReader::new(s))
    }

    /// Sends one request and reads its response: (status, body).
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        let reused = self.conn.is_some();
        match self.try_request(method, path, body) {
            Ok(r) => Ok(r),
            // A kept-alive connection the server closed while idle fails
            // on first use: try once more on a fresh one.
            Err(StackError::Io { .. }) | Err(StackError::Protocol(_)) if reused => {
                self.conn = None;
                self.try_request(method, path, body)
            }
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }

    fn try_request(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        if self.conn.is_none() {
            self.conn = Some(self.connect()?);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{}Content-Length: {}\r\n\r\n",
            self.addr,
            self.auth.as_deref().unwrap_or(""),
            body.len()
        );
        let what = || format!("HTTP {method} {path} to {}", self.addr);
        let s = conn.get_mut();
        s.write_all(head.as_bytes())
            .map_err(StackError::io(what()))?;
        s.write_all(body).map_err(StackError::io(what()))?;
        let (status, body, close) = read_response(conn)?;
        if close {
            self.conn = None;
        }
        Ok((status, body))
    }

    /// GET `/exec?query=sql` and the JSON answer; an HTTP error is a
    /// `Server` error carrying the server's message.
    pub fn exec(&mut self, sql: &str) -> Result<serde_json::Value> {
        let path = format!("/exec?query={}", url_encode(sql));
        let (status, body) = self.request("GET", &path, b"")?;
        if status != 200 {
            return Err(StackError::Server(format!(
                "{sql}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body).map_err(|e| proto(format!("{sql}: answer is not JSON: {e}")))
    }

    /// GET a path answered with JSON (e.g. `/status`).
    pub fn get_json(&mut self, path: &str) -> Result<serde_json::Value> {
        let (status, body) = self.request("GET", path, b"")?;
        if status != 200 {
            return Err(StackError::Server(format!(
                "GET {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body).map_err(|e| proto(format!("GET {path}: not JSON: {e}")))
    }
}

fn read_line_bounded<R: BufRead>(r: &mut R, line: &mut String) -> Result<usize> {
    line.clear();
    let n = r
        .by_ref()
        .take(HEADER_LINE_BYTES_MAX as u64)
        .read_line(line)
        .map_err(StackError::io("reading an HTTP response"))?;
    if n == HEADER_LINE_BYTES_MAX && !line.ends_with('\n') {
        return Err(proto("HTTP header line too long"));
    }
    Ok(n)
}

/// Parses one response: (status, body, whether the server closes).
pub fn read_response<R: BufRead>(r: &mut R) -> Result<(u16, Vec<u8>, bool)> {
    let mut line = String::new();
    if read_line_bounded(r, &mut line)? == 0 {
        return Err(proto("connection closed before the response"));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| proto(format!("bad HTTP status line {line:?}")))?;
    let (mut len, mut chunked, mut close) = (None, false, false);
    loop {
        if read_line_bounded(r, &mut line)? == 0 {
            return Err(proto("connection closed inside the headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            if k.eq_ignore_ascii_case("content-length") {
                let n: usize = v
                    .parse()
                    .map_err(|_| proto(format!("bad Content-Length {v:?}")))?;
                len = Some(n);
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.eq_ignore_ascii_case("chunked");
            } else if k.eq_ignore_ascii_case("connection") {
                close = v.eq_ignore_ascii_case("close");
            }
        }
    }
    let io = StackError::io("reading an HTTP body");
    let mut body = Vec::new();
    if chunked {
        loop {
            read_line_bounded(r, &mut line)?;
            let hex = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(hex, 16)
                .map_err(|_| proto(format!("bad chunk size {line:?}")))?;
            if body.len() + size > RESPONSE_BYTES_MAX {
                return Err(proto(format!("response over {RESPONSE_BYTES_MAX} bytes")));
            }
            let at = body.len();
            body.resize(at + size, 0);
            if let Err(e) = r.read_exact(&mut body[at..]) {
                return Err(StackError::io("reading an HTTP body")(e));
            }
            read_line_bounded(r, &mut line)?;
            if size == 0 {
                break;
            }
        }
    } else if let Some(n) = len {
        if n > RESPONSE_BYTES_MAX {
            return Err(proto(format!("response over {RESPONSE_BYTES_MAX} bytes")));
        }
        body.resize(n, 0);
        r.read_exact(&mut body).map_err(io)?;
    }
    Ok((status, body, close))
}

pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_responses() {
        let mut r = &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..];
        assert_eq!(read_response(&mut r).unwrap(), (200, b"ok".to_vec(), false));
        let mut r = &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nConnection: close\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"[..];
        assert_eq!(read_response(&mut r).unwrap(), (200, b"abc".to_vec(), true));
        let mut r = &b"HTTP/1.1 204 No Content\r\n\r\n"[..];
        assert_eq!(read_response(&mut r).unwrap().0, 204);
        for bad in [
            &b"nonsense\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"",
        ] {
            let mut r = bad;
            assert!(read_response(&mut r).is_err());
        }
    }

    #[test]
    fn encodes() {
        assert_eq!(url_encode("a b'*"), "a%20b%27%2A");
    }
}
