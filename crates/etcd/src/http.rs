//! The wire: one HTTP/1.1 POST per TCP connection, `Connection: close`.
//!
//! A connection per request keeps the client free of pool state that could
//! go stale across an etcd member restart, and the election traffic this
//! serves is a few requests a second at most. The response parser is a pure
//! function over the bytes read so far, so it is tested without a network.

use crate::error::Error;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response body the client holds. etcd's own default request
/// limit is 1.5 MiB, so a range of election keys fits many times over.
pub const RESPONSE_BYTES_MAX: usize = 4 << 20;

/// The largest status line plus headers accepted. The gateway sends about
/// 400 bytes of headers.
pub const HEAD_BYTES_MAX: usize = 16 << 10;

/// A chunk-size line longer than this is not a chunk header.
const CHUNK_LINE_BYTES_MAX: usize = 1024;

/// Chunked framing can cost more than the data it frames (five bytes of
/// framing per one-byte chunk), so the raw read bound leaves room for it
/// beyond the body bound; the body bound itself is checked on decoded bytes.
const RAW_BYTES_MAX: usize = HEAD_BYTES_MAX + 2 * RESPONSE_BYTES_MAX;

const READ_CHUNK_BYTES: usize = 16 << 10;

/// A complete response: status and the de-framed body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why bytes could not be framed as a response; the caller adds the
/// endpoint and path to make an [`Error`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    Malformed(String),
    TooLarge { limit_bytes: usize },
}

impl Fault {
    fn into_error(self, endpoint: &str, path: &'static str) -> Error {
        match self {
            Fault::Malformed(reason) => Error::Malformed {
                endpoint: endpoint.to_string(),
                path,
                reason,
            },
            Fault::TooLarge { limit_bytes } => Error::TooLarge {
                endpoint: endpoint.to_string(),
                path,
                limit_bytes,
            },
        }
    }
}

fn malformed(reason: impl Into<String>) -> Fault {
    Fault::Malformed(reason.into())
}

/// POSTs `body` (JSON) to `http://endpoint{path}` and returns the response,
/// whatever its status. `timeout` bounds the whole exchange, connect
/// included, so a member that accepts and then hangs costs no more than one
/// that refuses slowly.
pub(crate) async fn post(
    endpoint: &str,
    path: &'static str,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, Error> {
    match tokio::time::timeout(timeout, exchange(endpoint, path, body)).await {
        Ok(result) => result,
        Err(_elapsed) => Err(Error::Timeout {
            endpoint: endpoint.to_string(),
            path,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

async fn exchange(endpoint: &str, path: &'static str, body: &[u8]) -> Result<Response, Error> {
    let io_err = |source| Error::Io {
        endpoint: endpoint.to_string(),
        path,
        source,
    };
    let mut stream = TcpStream::connect(endpoint)
        .await
        .map_err(|source| Error::Connect {
            endpoint: endpoint.to_string(),
            source,
        })?;
    // One write of head and body: with Nagle off, a split write would cost
    // an extra segment for no reason.
    stream.set_nodelay(true).map_err(io_err)?;
    stream
        .write_all(&encode_request(endpoint, path, body))
        .await
        .map_err(io_err)?;

    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    loop {
        if let Some(response) =
            parse_response(&buf, false).map_err(|f| f.into_error(endpoint, path))?
        {
            return Ok(response);
        }
        if buf.len() >= RAW_BYTES_MAX {
            return Err(Error::TooLarge {
                endpoint: endpoint.to_string(),
                path,
                limit_bytes: RESPONSE_BYTES_MAX,
            });
        }
        let room = READ_CHUNK_BYTES.min(RAW_BYTES_MAX - buf.len());
        let start = buf.len();
        buf.resize(start + room, 0);
        let n = match stream.read(&mut buf[start..]).await {
            Ok(n) => n,
            Err(source) => return Err(io_err(source)),
        };
        buf.truncate(start + n);
        if n == 0 {
            return match parse_response(&buf, true) {
                Ok(Some(response)) => Ok(response),
                Ok(None) => Err(malformed(format!(
                    "connection closed after {} bytes, before the response ended",
                    buf.len()
                ))
                .into_error(endpoint, path)),
                Err(f) => Err(f.into_error(endpoint, path)),
            };
        }
    }
}

pub(crate) fn encode_request(endpoint: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

enum Framing {
    ContentLength(usize),
    Chunked,
    /// Neither header: the body runs to the end of the connection.
    UntilClose,
    /// A status that carries no body (204, 304).
    Empty,
}

/// Frames the response in `buf`, the bytes read so far. `Ok(None)` means
/// more bytes are needed; `eof` says none will come, so a response that is
/// still incomplete is an error (except a read-to-close body, which is then
/// complete).
pub(crate) fn parse_response(buf: &[u8], eof: bool) -> Result<Option<Response>, Fault> {
    let mut offset = 0;
    loop {
        let rest = &buf[offset..];
        // Searching only where a head may end keeps each call's scan
        // bounded however much body has arrived.
        let searched = &rest[..rest.len().min(HEAD_BYTES_MAX + 4)];
        let Some(head_len) = find(searched, b"\r\n\r\n") else {
            if rest.len() > HEAD_BYTES_MAX + 4 {
                return Err(malformed(format!(
                    "no end of headers within {HEAD_BYTES_MAX} bytes"
                )));
            }
            if eof {
                return Err(malformed(format!(
                    "connection closed after {} bytes, inside the response head",
                    rest.len()
                )));
            }
            return Ok(None);
        };
        if head_len > HEAD_BYTES_MAX {
            return Err(malformed(format!(
                "response head is {head_len} bytes, over {HEAD_BYTES_MAX}"
            )));
        }
        let head = std::str::from_utf8(&rest[..head_len])
            .map_err(|_| malformed("response head is not UTF-8"))?;
        let body_start = offset + head_len + 4;
        let (status, framing) = parse_head(head)?;
        // An interim response (100 Continue) precedes the real one on the
        // same connection; it has no body.
        if (100..200).contains(&status) && status != 101 {
            offset = body_start;
            continue;
        }
        let body = &buf[body_start..];
        let body = match framing {
            Framing::Empty => Some(Vec::new()),
            Framing::ContentLength(n) => {
                if n > RESPONSE_BYTES_MAX {
                    return Err(Fault::TooLarge {
                        limit_bytes: RESPONSE_BYTES_MAX,
                    });
                }
                if body.len() >= n {
                    Some(body[..n].to_vec())
                } else if eof {
                    return Err(malformed(format!(
                        "connection closed after {} of {n} body bytes",
                        body.len()
                    )));
                } else {
                    None
                }
            }
            Framing::Chunked => decode_chunked(body, eof)?,
            Framing::UntilClose => {
                if body.len() > RESPONSE_BYTES_MAX {
                    return Err(Fault::TooLarge {
                        limit_bytes: RESPONSE_BYTES_MAX,
                    });
                }
                eof.then(|| body.to_vec())
            }
        };
        return Ok(body.map(|body| Response { status, body }));
    }
}

fn parse_head(head: &str) -> Result<(u16, Framing), Fault> {
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(malformed(format!(
            "status line {:?} is not HTTP/1.x",
            truncate(status_line)
        )));
    }
    let code = parts.next().unwrap_or("");
    let status: u16 = match code.parse() {
        Ok(s) if code.len() == 3 && (100..=599).contains(&s) => s,
        _ => {
            return Err(malformed(format!(
                "status line {:?} has no 3-digit status",
                truncate(status_line)
            )))
        }
    };

    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(malformed(format!(
                "header line {:?} has no ':'",
                truncate(line)
            )));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| malformed(format!("bad Content-Length {:?}", truncate(value))))?;
            if content_length.is_some_and(|m| m != n) {
                return Err(malformed("conflicting Content-Length headers"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked must be the last coding applied; anything else
            // (gzip alone) would need a decoder this client does not have.
            let last = value.rsplit(',').next().unwrap_or("").trim();
            if last.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if !last.eq_ignore_ascii_case("identity") {
                return Err(malformed(format!(
                    "unsupported Transfer-Encoding {:?}",
                    truncate(value)
                )));
            }
        }
    }
    let framing = if status == 204 || status == 304 {
        Framing::Empty
    } else if chunked {
        // RFC 9112 6.3: Transfer-Encoding overrides Content-Length.
        Framing::Chunked
    } else if let Some(n) = content_length {
        Framing::ContentLength(n)
    } else {
        Framing::UntilClose
    };
    Ok((status, framing))
}

/// De-chunks `data`. Validates the whole frame before copying, so calling it
/// again after each read costs a scan of the chunk headers, not of the data.
fn decode_chunked(data: &[u8], eof: bool) -> Result<Option<Vec<u8>>, Fault> {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut total = 0usize;
    let mut pos = 0usize;
    let incomplete = |what: &str| {
        if eof {
            Err(malformed(format!(
                "connection closed inside the chunked body ({what})"
            )))
        } else {
            Ok(None)
        }
    };
    loop {
        let Some(line_len) = find(&data[pos..], b"\r\n") else {
            if data.len() - pos > CHUNK_LINE_BYTES_MAX {
                return Err(malformed("chunk-size line too long"));
            }
            return incomplete("in a chunk-size line");
        };
        if line_len > CHUNK_LINE_BYTES_MAX {
            return Err(malformed("chunk-size line too long"));
        }
        let line = &data[pos..pos + line_len];
        let size_field = match line.iter().position(|&b| b == b';') {
            Some(i) => &line[..i],
            None => line,
        };
        let size = parse_hex(trim_ascii(size_field)).ok_or_else(|| {
            malformed(format!(
                "bad chunk size {:?}",
                truncate(&String::from_utf8_lossy(line))
            ))
        })?;
        pos += line_len + 2;

        if size == 0 {
            // Trailers (the gateway sends Grpc-Trailer-Content-Type) end at
            // an empty line.
            loop {
                let Some(trailer_len) = find(&data[pos..], b"\r\n") else {
                    if data.len() - pos > HEAD_BYTES_MAX {
                        return Err(malformed("trailers too long"));
                    }
                    if eof {
                        // Every data chunk arrived; a peer that closes
                        // without the final CRLF lost us nothing.
                        break;
                    }
                    return Ok(None);
                };
                pos += trailer_len + 2;
                if trailer_len == 0 {
                    break;
                }
            }
            let mut body = Vec::with_capacity(total);
            for (start, end) in spans {
                body.extend_from_slice(&data[start..end]);
            }
            return Ok(Some(body));
        }

        total = match total.checked_add(size) {
            Some(t) if t <= RESPONSE_BYTES_MAX => t,
            _ => {
                return Err(Fault::TooLarge {
                    limit_bytes: RESPONSE_BYTES_MAX,
                })
            }
        };
        if data.len() < pos + size + 2 {
            return incomplete("in chunk data");
        }
        if &data[pos + size..pos + size + 2] != b"\r\n" {
            return Err(malformed("chunk data not followed by CRLF"));
        }
        spans.push((pos, pos + size));
        pos += size + 2;
    }
}

fn parse_hex(digits: &[u8]) -> Option<usize> {
    // 15 hex digits cannot overflow a 64-bit usize; anything longer is
    // over every bound anyway.
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    let mut n = 0usize;
    for &d in digits {
        let v = (d as char).to_digit(16)?;
        n = n.checked_mul(16)?.checked_add(v as usize)?;
    }
    Some(n)
}

fn trim_ascii(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Keeps error messages one line and short when a peer sends garbage.
fn truncate(s: &str) -> String {
    const SHOWN_CHARS_MAX: usize = 80;
    if s.chars().count() <= SHOWN_CHARS_MAX {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(SHOWN_CHARS_MAX).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(raw: &[u8]) -> Response {
        match parse_response(raw, false) {
            Ok(Some(r)) => r,
            other => panic!("expected a complete response, got {other:?}"),
        }
    }

    fn malformed_reason(raw: &[u8], eof: bool) -> String {
        match parse_response(raw, eof) {
            Err(Fault::Malformed(reason)) => reason,
            other => panic!("expected malformed, got {other:?}"),
        }
    }

    #[test]
    fn content_length_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
        assert_eq!(
            complete(raw),
            Response {
                status: 200,
                body: b"{\"a\":1}".to_vec()
            }
        );
    }

    #[test]
    fn content_length_needs_more_bytes_until_complete() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
        for cut in 0..raw.len() {
            assert_eq!(parse_response(&raw[..cut], false), Ok(None), "cut at {cut}");
        }
        assert_eq!(complete(raw).body, b"0123456789");
    }

    #[test]
    fn content_length_truncated_at_eof() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234";
        let reason = malformed_reason(raw, true);
        assert!(reason.contains("5 of 10"), "{reason}");
    }

    #[test]
    fn chunked_with_extension_and_trailers() {
        // The gateway's error replies end in a Grpc-Trailer-Content-Type
        // trailer; a streamed keepalive result is one chunk with a newline.
        let raw = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n\
                    5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n";
        assert_eq!(
            complete(raw),
            Response {
                status: 404,
                body: b"hello, world".to_vec()
            }
        );
    }

    #[test]
    fn chunked_needs_more_bytes_until_the_last_chunk() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
        for cut in 0..raw.len() {
            assert_eq!(parse_response(&raw[..cut], false), Ok(None), "cut at {cut}");
        }
        assert_eq!(complete(raw).body, b"abcdefghijklmnopqrstuvwxyz");
    }

    #[test]
    fn chunked_overrides_content_length() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
        assert_eq!(complete(raw).body, b"ok");
    }

    #[test]
    fn chunked_closed_after_last_chunk_without_final_crlf_is_complete() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n";
        assert_eq!(parse_response(raw, false), Ok(None));
        assert_eq!(
            parse_response(raw, true).ok().flatten().map(|r| r.body),
            Some(b"ok".to_vec())
        );
    }

    #[test]
    fn chunked_closed_mid_chunk_is_malformed() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort";
        let reason = malformed_reason(raw, true);
        assert!(reason.contains("chunked body"), "{reason}");
    }

    #[test]
    fn bad_chunk_size_and_missing_crlf_are_malformed() {
        let bad_size =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n";
        assert!(malformed_reason(bad_size, false).contains("bad chunk size"));
        let no_crlf = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX0\r\n\r\n";
        assert!(malformed_reason(no_crlf, false).contains("CRLF"));
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n";
        assert!(malformed_reason(huge, false).contains("bad chunk size"));
    }

    #[test]
    fn read_to_eof_body() {
        let raw = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"x\":true}";
        assert_eq!(parse_response(raw, false), Ok(None));
        assert_eq!(
            parse_response(raw, true),
            Ok(Some(Response {
                status: 200,
                body: b"{\"x\":true}".to_vec()
            }))
        );
    }

    #[test]
    fn interim_100_continue_is_skipped() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(complete(raw).body, b"{}");
    }

    #[test]
    fn no_content_has_no_body() {
        assert_eq!(complete(b"HTTP/1.1 204 No Content\r\n\r\n").body, b"");
    }

    #[test]
    fn malformed_heads() {
        assert!(malformed_reason(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", false).contains("not HTTP/1.x"));
        assert!(malformed_reason(b"HTTP/1.1 2000 OK\r\n\r\n", false).contains("3-digit"));
        assert!(malformed_reason(b"HTTP/1.1 OK\r\n\r\n", false).contains("3-digit"));
        assert!(
            malformed_reason(b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", false).contains("no ':'")
        );
        assert!(
            malformed_reason(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false)
                .contains("Content-Length")
        );
        assert!(malformed_reason(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            false
        )
        .contains("conflicting"));
        assert!(
            malformed_reason(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false)
                .contains("Transfer-Encoding")
        );
        assert!(malformed_reason(b"HTTP/1.1 200 OK\r\nContent-Le", true)
            .contains("inside the response head"));
        assert!(malformed_reason(b"HTTP/1.1 200 OK\r\nX: \xff\r\n\r\n", false).contains("UTF-8"));
    }

    #[test]
    fn content_length_over_bound_is_refused_before_reading_the_body() {
        let raw = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            RESPONSE_BYTES_MAX + 1
        );
        assert_eq!(
            parse_response(raw.as_bytes(), false),
            Err(Fault::TooLarge {
                limit_bytes: RESPONSE_BYTES_MAX
            })
        );
    }

    #[test]
    fn chunked_over_bound_is_refused() {
        let raw = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            RESPONSE_BYTES_MAX + 1
        );
        assert_eq!(
            parse_response(raw.as_bytes(), false),
            Err(Fault::TooLarge {
                limit_bytes: RESPONSE_BYTES_MAX
            })
        );
        // The bound is on the sum of chunks, not each one.
        let half = RESPONSE_BYTES_MAX / 2 + 1;
        let mut raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..2 {
            raw.extend_from_slice(format!("{half:x}\r\n").as_bytes());
            raw.extend(std::iter::repeat_n(b'a', half));
            raw.extend_from_slice(b"\r\n");
        }
        assert_eq!(
            parse_response(&raw, false),
            Err(Fault::TooLarge {
                limit_bytes: RESPONSE_BYTES_MAX
            })
        );
    }

    #[test]
    fn read_to_eof_over_bound_is_refused() {
        let mut raw = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        raw.extend(std::iter::repeat_n(b'a', RESPONSE_BYTES_MAX + 1));
        assert_eq!(
            parse_response(&raw, false),
            Err(Fault::TooLarge {
                limit_bytes: RESPONSE_BYTES_MAX
            })
        );
    }

    #[test]
    fn head_over_bound_is_malformed() {
        let mut raw = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        raw.extend(std::iter::repeat_n(b'a', HEAD_BYTES_MAX + 1));
        assert!(malformed_reason(&raw, false).contains("end of headers"));
    }

    #[test]
    fn request_has_length_and_close() {
        let req = encode_request("127.0.0.1:2379", "/v3/kv/put", b"{}");
        let text = String::from_utf8(req).unwrap_or_default();
        assert!(text.starts_with("POST /v3/kv/put HTTP/1.1\r\nHost: 127.0.0.1:2379\r\n"));
        assert!(text.contains("\r\nContent-Length: 2\r\n"));
        assert!(text.contains("\r\nConnection: close\r\n"));
        assert!(text.ends_with("\r\n\r\n{}"));
    }
}
