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
