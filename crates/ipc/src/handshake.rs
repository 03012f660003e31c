//! The handshake: the client sends `user:password`, then (since 2012) one
//! capability byte, then NUL; the server answers with exactly one byte,
//! the capability both share, or closes the socket to refuse.

use crate::error::{IpcError, Result};

/// The capability this server speaks: 3 (kdb+ 3.0: compression,
/// timestamps, timespans, guids). Capability 6 (messages over 2 GB, with a
/// different compressed layout) is not offered: messages here are bounded
/// far below that.
pub const CAPABILITY: u8 = 3;
/// The most bytes a handshake may take before its NUL.
pub const HANDSHAKE_BYTES_MAX: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub user: String,
    pub password: String,
    /// The client's capability; 0 for an old client that sent none.
    pub capability: u8,
}

impl Hello {
    /// The byte to answer with.
    pub fn agreed(&self) -> u8 {
        self.capability.min(CAPABILITY)
    }
}

/// The client's side: sends `user:password`, capability `CAPABILITY` and
/// NUL, then reads the one byte the server answers. `Ok(Some(cap))` is the
/// capability agreed; `Ok(None)` a server that closed instead, which is
/// how kdb+ refuses a login.
pub fn login<S: std::io::Read + std::io::Write>(
    sock: &mut S,
    user: &str,
    password: &str,
) -> std::io::Result<Option<u8>> {
    let mut hello = format!("{user}:{password}").into_bytes();
    hello.extend_from_slice(&[CAPABILITY, 0]);
    sock.write_all(&hello)?;
    let mut cap = [0u8; 1];
    loop {
        match sock.read(&mut cap) {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(cap[0])),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Parses the handshake bytes before its NUL.
pub fn parse(bytes: &[u8]) -> Result<Hello> {
    // A capability byte is a small number, never a printable character; a
    // client from before capabilities existed sends none.
    let (creds, capability) = match bytes.split_last() {
        Some((c, rest)) if *c < 0x20 => (rest, *c),
        _ => (bytes, 0),
    };
    let text = std::str::from_utf8(creds)
        .map_err(|_| IpcError::BadHandshake("the credentials are not UTF-8".into()))?;
    let (user, password) = text.split_once(':').unwrap_or((text, ""));
    Ok(Hello {
        user: user.to_string(),
        password: password.to_string(),
        capability,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One side of a connection: reads what the server sent, keeps what
    /// the client wrote.
    struct Wire {
        from_server: std::io::Cursor<Vec<u8>>,
        to_server: Vec<u8>,
    }

    impl std::io::Read for Wire {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.from_server.read(b)
        }
    }

    impl std::io::Write for Wire {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.to_server.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_client_login_is_what_the_server_parses_and_a_close_is_a_refusal() {
        let mut w = Wire {
            from_server: std::io::Cursor::new(vec![1]),
            to_server: Vec::new(),
        };
        assert_eq!(login(&mut w, "bob", "pw").unwrap(), Some(1));
        let (nul, hello) = w.to_server.split_last().unwrap();
        assert_eq!(*nul, 0);
        let h = parse(hello).unwrap();
        assert_eq!(
            (h.user.as_str(), h.password.as_str(), h.capability),
            ("bob", "pw", CAPABILITY)
        );
        let mut closed = Wire {
            from_server: std::io::Cursor::new(Vec::new()),
            to_server: Vec::new(),
        };
        assert_eq!(login(&mut closed, "bob", "bad").unwrap(), None);
    }

    #[test]
    fn reads_credentials_and_capability() {
        let h = parse(b"alice:s3cr:et\x06").unwrap();
        assert_eq!(h.user, "alice");
        assert_eq!(h.password, "s3cr:et");
        assert_eq!(h.capability, 6);
        assert_eq!(h.agreed(), 3);
    }

    #[test]
    fn an_old_client_sends_no_capability() {
        let h = parse(b"bob:pw").unwrap();
        assert_eq!(
            (h.user.as_str(), h.password.as_str(), h.capability),
            ("bob", "pw", 0)
        );
        assert_eq!(parse(b"").unwrap().user, "");
    }

    #[test]
    fn credentials_must_be_utf8() {
        assert!(matches!(
            parse(b"\xff\xfe:x\x03"),
            Err(IpcError::BadHandshake(_))
        ));
    }
}
