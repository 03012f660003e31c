//! Endpoint strings as operators write them (`etcdctl --endpoints` style)
//! into the `host:port` the wire connects to.

use crate::error::{Error, Result};

/// etcd's client port when an endpoint names none.
pub const DEFAULT_CLIENT_PORT: u16 = 2379;

/// Splits a comma-separated list (`http://a:2379,b:2379`) and normalizes
/// each entry; empty entries between commas are skipped.
pub fn parse_list(list: &str) -> Result<Vec<String>> {
    let endpoints = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(normalize)
        .collect::<Result<Vec<_>>>()?;
    if endpoints.is_empty() {
        return Err(Error::Config {
            reason: format!("no etcd endpoints in {list:?}"),
        });
    }
    Ok(endpoints)
}

/// `host:port`, `http://host:port`, `host` (port 2379) or `[v6]:port` into
/// `host:port`. https is refused rather than silently spoken in clear.
pub fn normalize(raw: &str) -> Result<String> {
    let bad = |reason: &str| Error::BadEndpoint {
        endpoint: raw.to_string(),
        reason: reason.to_string(),
    };
    let s = raw.trim();
    let rest = match s.find("://") {
        Some(i) => {
            let scheme = &s[..i];
            if !scheme.eq_ignore_ascii_case("http") {
                return Err(bad(&format!(
                    "scheme '{scheme}' is not supported (this client speaks plain http only)"
                )));
            }
            &s[i + 3..]
        }
        None => s,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err(bad("a path after host:port is not supported"));
    }
    if rest.contains('@') {
        return Err(bad("credentials in the endpoint are not supported"));
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err(bad("unclosed '[' in an IPv6 address"));
        };
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ']'"))?),
        };
        (format!("[{addr}]"), port)
    } else {
        match rest.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(bad(
                    "an IPv6 address must be written in brackets, [::1]:2379",
                ))
            }
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (rest.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("no host"));
    }
    let port = match port {
        None => DEFAULT_CLIENT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(bad(&format!("port '{p}' is not in 1..=65535"))),
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_operators_write() {
        assert_eq!(
            normalize("127.0.0.1:2379").ok(),
            Some("127.0.0.1:2379".into())
        );
        assert_eq!(
            normalize("http://etcd-1:23790/").ok(),
            Some("etcd-1:23790".into())
        );
        assert_eq!(normalize("HTTP://etcd-1:1").ok(), Some("etcd-1:1".into()));
        assert_eq!(normalize("etcd-1").ok(), Some("etcd-1:2379".into()));
        assert_eq!(normalize("[::1]:2380").ok(), Some("[::1]:2380".into()));
        assert_eq!(normalize("http://[::1]").ok(), Some("[::1]:2379".into()));
    }

    #[test]
    fn refused_forms_say_why() {
        for (raw, why) in [
            ("https://a:2379", "plain http"),
            ("a:2379/v3", "path"),
            ("a:0", "1..=65535"),
            ("a:99999", "1..=65535"),
            ("a:", "1..=65535"),
            (":2379", "no host"),
            ("::1", "brackets"),
            ("[::1", "unclosed"),
            ("u:p@a:1", "credentials"),
        ] {
            match normalize(raw) {
                Err(e @ Error::BadEndpoint { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains(why) && msg.contains(raw), "{raw}: {msg}");
                }
                other => panic!("{raw}: expected BadEndpoint, got {other:?}"),
            }
        }
    }

    #[test]
    fn lists() {
        assert_eq!(
            parse_list("http://a:2379, b:2380,,c").ok(),
            Some(vec!["a:2379".into(), "b:2380".into(), "c:2379".into()])
        );
        assert!(matches!(parse_list(" , "), Err(Error::Config { .. })));
    }
}
