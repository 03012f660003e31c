//! QuestDB's authentication for ILP over TCP, on a node with a users file.
//! Before any line, each connection:
//!
//! 1. sends its key id (the user's name) and `\n`;
//! 2. gets a challenge: `ILP_CHALLENGE_BYTES` random bytes in URL-safe
//!    base64, and `\n`;
//! 3. sends the base64 of its ECDSA P-256 SHA-256 signature of the
//!    challenge's characters (r || s, or DER), and `\n`;
//!
//! then line protocol as usual; there is no reply on success. A connection
//! that fails (unknown user, a user without an ILP key or the `write`
//! role, a bad signature, an address refused for failed logins, too slow,
//! lines too long) is closed without a reply, and the failure logged and
//! counted against its address. An unknown user gets a challenge like any
//! other, so names cannot be probed.

use base64::Engine;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tickdb_auth::{LoginLimiter, Role, Users};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Time a connection has to finish the exchange, in seconds.
pub const ILP_AUTH_TIMEOUT_S: u64 = 10;
/// Longest key id or signature line, in bytes.
pub const ILP_AUTH_LINE_BYTES_MAX: usize = 1024;
/// Random bytes in a challenge.
pub const ILP_CHALLENGE_BYTES: usize = 48;
const PORT: &str = "ILP TCP";

/// Who may use ILP TCP and the subscription port.
pub struct LoginGate {
    pub users: Arc<Users>,
    pub limiter: Arc<LoginLimiter>,
}

/// Reads up to and past one `\n` into `buf`; returns the line (without
/// `\r\n`) and leaves the bytes after it in `buf`.
async fn line<S: AsyncRead + Unpin>(sock: &mut S, buf: &mut Vec<u8>) -> Result<String, String> {
    loop {
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            let rest = buf.split_off(i + 1);
            let mut l = std::mem::replace(buf, rest);
            l.truncate(i);
            if l.last() == Some(&b'\r') {
                l.pop();
            }
            return String::from_utf8(l).map_err(|_| "the line is not UTF-8".to_string());
        }
        if buf.len() > ILP_AUTH_LINE_BYTES_MAX {
            return Err(format!(
                "no end of line within {ILP_AUTH_LINE_BYTES_MAX} bytes (is this client sending line protocol without authenticating?)"
            ));
        }
        let mut chunk = [0u8; 512];
        let n = sock
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read failed: {e}"))?;
        if n == 0 {
            return Err("closed during authentication".to_string());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Runs the exchange; on success the bytes the client sent after its
/// signature (the first lines of data).
pub async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    sock: &mut S,
    peer: SocketAddr,
    gate: &LoginGate,
) -> Option<Vec<u8>> {
    let ip = peer.ip();
    if let Err(refusal) = gate.limiter.check(ip) {
        tracing::warn!("{PORT} {peer}: {refusal}; closing");
        return None;
    }
    let mut user_name = String::from("?");
    let exchange = async {
        let mut buf = Vec::new();
        let name = line(sock, &mut buf).await?;
        user_name = name.clone();
        let challenge: [u8; ILP_CHALLENGE_BYTES] = rand::random();
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(challenge);
        sock.write_all(format!("{challenge}\n").as_bytes())
            .await
            .map_err(|e| format!("write failed: {e}"))?;
        let signature = line(sock, &mut buf).await?;
        let user = gate
            .users
            .get(&name)
            .ok_or_else(|| "wrong user or key".to_string())?;
        let key = user
            .ilp_key
            .as_ref()
            .ok_or_else(|| "wrong user or key".to_string())?;
        if !key.verify(challenge.as_bytes(), &signature) {
            return Err("wrong user or key".to_string());
        }
        if !user.may(Role::Write) {
            return Err(format!("user `{name}` lacks the write role; ILP needs it"));
        }
        Ok::<Vec<u8>, String>(buf)
    };
    match tokio::time::timeout(Duration::from_secs(ILP_AUTH_TIMEOUT_S), exchange).await {
        Ok(Ok(rest)) => {
            gate.limiter.succeeded(ip);
            tracing::debug!("{PORT} {peer}: authenticated as {user_name}");
            Some(rest)
        }
        Ok(Err(why)) => {
            gate.limiter.failed(PORT, ip, &user_name, &why);
            None
        }
        Err(_) => {
            gate.limiter.failed(
                PORT,
                ip,
                &user_name,
                &format!("did not authenticate within {ILP_AUTH_TIMEOUT_S} s"),
            );
            None
        }
    }
}
