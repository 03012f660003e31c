//! Replication is authenticated with a shared secret that never crosses the
//! wire: each side proves it holds the secret by an HMAC-SHA256 over both
//! sides' fresh nonces, labelled by role so a proof cannot be replayed in
//! the other direction. A standby thus cannot be fed by an impostor, and a
//! stranger cannot pull the journal.
//!
//! Where the secret comes from, in order: `--repl-secret-file PATH`, the
//! environment variable `TICKDB_REPL_SECRET`, or, on a node that has
//! neither, a random secret generated at its first start and kept (mode
//! 0600) in `DATA_DIR/repl-secret`, which an operator copies to its
//! standbys.

use crate::protocol::NONCE_BYTES;
use crate::ReplError;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::path::{Path, PathBuf};

/// Label of the standby's proof.
const STANDBY_LABEL: &[u8] = b"tickdb-repl-standby";
/// Label of the primary's proof.
const PRIMARY_LABEL: &[u8] = b"tickdb-repl-primary";
/// The environment variable that may hold the secret.
pub const SECRET_ENV: &str = "TICKDB_REPL_SECRET";
/// File name of a generated secret inside the data directory.
pub const SECRET_FILE_NAME: &str = "repl-secret";
/// Shortest secret accepted, in bytes.
pub const SECRET_BYTES_MIN: usize = 16;
/// Longest secret file read, in bytes.
const SECRET_FILE_BYTES_MAX: u64 = 4096;

/// The shared secret.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// Where the secret was found, for the start-up line (never the secret).
#[derive(Debug, Clone)]
pub enum SecretSource {
    File(PathBuf),
    Env,
    Generated(PathBuf),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::File(p) => write!(f, "secret file {}", p.display()),
            SecretSource::Env => write!(f, "${SECRET_ENV}"),
            SecretSource::Generated(p) => write!(f, "generated secret in {}", p.display()),
        }
    }
}

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Result<Secret, ReplError> {
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(ReplError::BadInput(format!(
                "the replication secret is {} bytes; it must be at least {SECRET_BYTES_MIN}",
                bytes.len()
            )));
        }
        Ok(Secret(bytes))
    }

    /// Reads a secret file (trailing newline ignored).
    pub fn from_file(path: &Path) -> Result<Secret, ReplError> {
        let meta = std::fs::metadata(path).map_err(|e| {
            ReplError::BadInput(format!("replication secret file {}: {e}", path.display()))
        })?;
        if !meta.is_file() || meta.len() > SECRET_FILE_BYTES_MAX {
            return Err(ReplError::BadInput(format!(
                "replication secret file {} must be a regular file of at most {SECRET_FILE_BYTES_MAX} bytes",
                path.display()
            )));
        }
        let mut bytes = std::fs::read(path).map_err(|e| {
            ReplError::BadInput(format!("replication secret file {}: {e}", path.display()))
        })?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        Secret::new(bytes)
    }

    /// The secret a node uses: the file given, the environment, or the one
    /// kept in `data_dir` (generated there on first use).
    pub fn resolve(
        file: Option<&Path>,
        data_dir: &Path,
    ) -> Result<(Secret, SecretSource), ReplError> {
        if let Some(f) = file {
            return Ok((Secret::from_file(f)?, SecretSource::File(f.to_path_buf())));
        }
        if let Ok(v) = std::env::var(SECRET_ENV) {
            return Ok((Secret::new(v.into_bytes())?, SecretSource::Env));
        }
        let path = data_dir.join(SECRET_FILE_NAME);
        if path.exists() {
            return Ok((Secret::from_file(&path)?, SecretSource::Generated(path)));
        }
        let bytes: [u8; 32] = rand::random();
        let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        write_private(&path, text.as_bytes())?;
        Ok((
            Secret::new(text.into_bytes())?,
            SecretSource::Generated(path),
        ))
    }

    fn mac(&self, label: &[u8], a: &[u8], b: &[u8]) -> [u8; NONCE_BYTES] {
        // HMAC takes a key of any length; new_from_slice cannot fail for it.
        let mut m = match <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => return [0; NONCE_BYTES],
        };
        m.update(label);
        m.update(a);
        m.update(b);
        let out = m.finalize().into_bytes();
        let mut proof = [0u8; NONCE_BYTES];
        proof.copy_from_slice(&out[..NONCE_BYTES]);
        proof
    }

    /// The standby's proof over the primary's and its own nonce.
    pub fn standby_proof(&self, primary_nonce: &[u8], standby_nonce: &[u8]) -> [u8; NONCE_BYTES] {
        self.mac(STANDBY_LABEL, primary_nonce, standby_nonce)
    }

    /// The primary's proof over the standby's and its own nonce.
    pub fn primary_proof(&self, standby_nonce: &[u8], primary_nonce: &[u8]) -> [u8; NONCE_BYTES] {
        self.mac(PRIMARY_LABEL, standby_nonce, primary_nonce)
    }

    /// Checks a proof in constant time.
    pub fn check(&self, expected: &[u8; NONCE_BYTES], got: &[u8; NONCE_BYTES]) -> bool {
        let mut diff = 0u8;
        for (a, b) in expected.iter().zip(got) {
            diff |= a ^ b;
        }
        diff == 0
    }
}

/// Writes a file only its owner can read, durably (before it is used).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ReplError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e: std::io::Error| {
        ReplError::Io(std::io::Error::new(
            e.kind(),
            format!("writing {}: {e}", path.display()),
        ))
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.write_all(b"\n").map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(())
}

/// A fresh random nonce.
pub fn nonce() -> [u8; NONCE_BYTES] {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_check_only_with_the_same_secret_and_nonces() {
        let s = Secret::new(b"0123456789abcdef".to_vec()).unwrap();
        let other = Secret::new(b"0123456789abcdeX".to_vec()).unwrap();
        let (pn, sn) = (nonce(), nonce());
        let p = s.standby_proof(&pn, &sn);
        assert!(s.check(&s.standby_proof(&pn, &sn), &p));
        assert!(!s.check(&other.standby_proof(&pn, &sn), &p));
        assert!(!s.check(&s.standby_proof(&nonce(), &sn), &p));
        // A standby's proof is not a primary's.
        assert!(!s.check(&s.primary_proof(&sn, &pn), &p));
    }

    #[test]
    fn a_generated_secret_is_kept_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, src) = Secret::resolve(None, dir.path()).unwrap();
        assert!(matches!(src, SecretSource::Generated(_)));
        let path = dir.path().join(SECRET_FILE_NAME);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let (b, _) = Secret::resolve(None, dir.path()).unwrap();
        assert_eq!(a.0, b.0);
        assert!(Secret::new(b"short".to_vec()).is_err());
    }
}
