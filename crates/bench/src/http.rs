//! A minimal blocking HTTP/1.1 client: keep-alive, Content-Length and chunked
//! responses. The same client talks to tickdb and to QuestDB, so neither
//! gets a faster client than the other.

use crate::error::{BenchError, Result};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response body larger than this is refused (a bench never needs more).
const RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(120);
/// Headers kept of one response (the rest are read and dropped).
const HEADERS_MAX: usize = 64;

pub struct HttpConn {
    /// The Host header: the address connected to.
    host: SocketAddr,
    reader: BufReader<TcpStream>,
}

/// A response: status, headers (names lowercased) and body.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header of that (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl HttpConn {
    pub fn connect(port: u16) -> Result<HttpConn> {
        HttpConn::connect_to(SocketAddr::from(([127, 0, 0, 1], port)), IO_TIMEOUT)
    }

    /// Connects to any address (a node bound to another loopback address),
    /// with `timeout` on the connect and on every read and write.
    pub fn connect_to(addr: SocketAddr, timeout: Duration) -> Result<HttpConn> {
        let what = || format!("connecting to {addr}");
        let s = TcpStream::connect_timeout(&addr, timeout).map_err(BenchError::io(what()))?;
        s.set_read_timeout(Some(timeout))
            .map_err(BenchError::io(what()))?;
        s.set_write_timeout(Some(timeout))
            .map_err(BenchError::io(what()))?;
        s.set_nodelay(true).map_err(BenchError::io(what()))?;
        Ok(HttpConn {
            host: addr,
            reader: BufReader::new(s),
        })
    }

    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        self.request_full(method, path, body)
            .map(|r| (r.status, r.body))
    }

    /// `request`, with the response's headers.
    pub fn request_full(&mut self, method: &str, path: &str, body: &[u8]) -> Result<Response> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        let what = format!("HTTP {method} {path}");
        let s = self.reader.get_mut();
        s.write_all(head.as_bytes())
            .map_err(BenchError::io(what.clone()))?;
        s.write_all(body).map_err(BenchError::io(what.clone()))?;
        read_response_full(&mut self.reader).map_err(|e| match e {
            BenchError::Protocol(m) => BenchError::Protocol(format!("{what}: {m}")),
            other => other,
        })
    }
}

fn proto(m: impl Into<String>) -> BenchError {
    BenchError::Protocol(m.into())
}

/// Parses one response from `r`, keeping its headers.
pub fn read_response_full<R: BufRead>(r: &mut R) -> Result<Response> {
    let mut line = String::new();
    let io = |e| BenchError::Io {
        what: "reading an HTTP response".into(),
        source: e,
    };
    if r.read_line(&mut line).map_err(io)? == 0 {
        return Err(proto("connection closed before the response"));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| proto(format!("bad status line {line:?}")))?;
    let (mut len, mut chunked) = (None, false);
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(io)? == 0 {
            return Err(proto("connection closed inside the headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            if headers.len() < HEADERS_MAX {
                headers.push((k.trim().to_ascii_lowercase(), v.to_string()));
            }
            if k.eq_ignore_ascii_case("content-length") {
                len = Some(
                    v.parse::<usize>()
                        .map_err(|_| proto(format!("bad Content-Length {v:?}")))?,
                );
            } else if k.eq_ignore_ascii_case("transfer-encoding")
                && v.eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).map_err(io)?;
            let size_hex = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| proto(format!("bad chunk size {line:?}")))?;
            if body.len() + size > RESPONSE_BYTES_MAX {
                return Err(proto("response over RESPONSE_BYTES_MAX"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..]).map_err(io)?;
            line.clear();
            r.read_line(&mut line).map_err(io)?; // CRLF after the chunk (or trailers end)
            if size == 0 {
                break;
            }
        }
    } else if let Some(n) = len {
        if n > RESPONSE_BYTES_MAX {
            return Err(proto("response over RESPONSE_BYTES_MAX"));
        }
        body.resize(n, 0);
        r.read_exact(&mut body).map_err(io)?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// One GET of `/exec?query=sql`, answered with JSON whose `dataset[0][0]` is
/// a number (tickdb and QuestDB both answer in this shape).
pub fn exec_scalar(port: u16, sql: &str) -> Result<i64> {
    let v = exec_json(port, sql)?;
    v["dataset"][0][0]
        .as_i64()
        .ok_or_else(|| proto(format!("{sql}: no number in {v}")))
}

/// One GET of `/exec?query=sql` answered 200, its JSON body parsed (a
/// statement's rows in `dataset`; QuestDB answers DDL with `{"ddl":"OK"}`).
pub fn exec_json(port: u16, sql: &str) -> Result<serde_json::Value> {
    let path = format!("/exec?query={}", url_encode(sql));
    let (status, body) = HttpConn::connect(port)?.request("GET", &path, b"")?;
    let text = String::from_utf8_lossy(&body);
    if status != 200 {
        return Err(BenchError::Server(format!("{sql}: HTTP {status}: {text}")));
    }
    serde_json::from_slice(&body).map_err(|e| proto(format!("{sql}: {e}: {text}")))
}

/// A request answered 200 with a JSON body (`GET /status`, `POST
/// /checkpoint`), parsed.
pub fn request_json(port: u16, method: &str, path: &str) -> Result<serde_json::Value> {
    request_json_at(
        SocketAddr::from(([127, 0, 0, 1], port)),
        method,
        path,
        IO_TIMEOUT,
    )
}

/// `request_json` to any address, with a timeout on every step.
pub fn request_json_at(
    addr: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> Result<serde_json::Value> {
    let (status, body) = HttpConn::connect_to(addr, timeout)?.request(method, path, b"")?;
    if status != 200 {
        return Err(BenchError::Server(format!(
            "{method} {path}: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    serde_json::from_slice(&body).map_err(|e| proto(format!("{method} {path}: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_responses() {
        let read_response = |r: &mut &[u8]| read_response_full(r).map(|x| (x.status, x.body));
        let mut r = &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..];
        assert_eq!(read_response(&mut r).unwrap(), (200, b"hello".to_vec()));
        let mut r = &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"[..];
        assert_eq!(read_response(&mut r).unwrap(), (200, b"abcde".to_vec()));
        let mut r = &b"HTTP/1.1 204 No Content\r\n\r\n"[..];
        assert_eq!(read_response(&mut r).unwrap(), (204, vec![]));
        let mut r = &b"garbage\r\n\r\n"[..];
        assert!(read_response(&mut r).is_err());
        let mut r = &b"HTTP/1.1 204 No Content\r\nX-Tickdb-Seq: 7\r\nx-tickdb-epoch: 2\r\n\r\n"[..];
        let full = read_response_full(&mut r).unwrap();
        assert_eq!(full.header("x-tickdb-seq"), Some("7"));
        assert_eq!(full.header("x-tickdb-epoch"), Some("2"));
        assert_eq!(full.header("x-other"), None);
    }

    #[test]
    fn encodes_queries() {
        assert_eq!(url_encode("select count(*)"), "select%20count%28%2A%29");
    }
}
