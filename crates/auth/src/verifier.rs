//! Password verifiers in PostgreSQL's SCRAM-SHA-256 form (RFC 5802,
//! RFC 7677), as `pg_authid` stores them:
//!
//! `SCRAM-SHA-256$<iterations>:<salt, base64>$<StoredKey, base64>:<ServerKey, base64>`
//!
//! - SaltedPassword = PBKDF2-HMAC-SHA256(SASLprep(password), salt, iterations)
//! - ClientKey = HMAC(SaltedPassword, "Client Key"); StoredKey = SHA-256(ClientKey)
//! - ServerKey = HMAC(SaltedPassword, "Server Key")
//!
//! Neither key lets anyone log in: a stolen users file gives an attacker
//! only what an offline guessing attack needs, slowed by the iterations.
//! The same verifier checks a password sent by HTTP basic auth (recompute
//! StoredKey) and a PostgreSQL client's SCRAM proof (which never sends the
//! password).

use crate::AuthError;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::borrow::Cow;

/// PBKDF2 iterations of new verifiers: PostgreSQL's default.
pub const SCRAM_ITERATIONS_DEFAULT: u32 = 4096;
/// Fewest iterations accepted in a users file (RFC 7677's minimum).
pub const SCRAM_ITERATIONS_MIN: u32 = 4096;
/// Most iterations accepted: a verifier must not make a login cost seconds.
pub const SCRAM_ITERATIONS_MAX: u32 = 1_000_000;
/// Salt bytes of new verifiers (PostgreSQL uses 16).
pub const SCRAM_SALT_BYTES: usize = 16;
const KEY_BYTES: usize = 32;
const PREFIX: &str = "SCRAM-SHA-256$";

#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; KEY_BYTES],
    pub server_key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScramVerifier({} iterations)", self.iterations)
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; KEY_BYTES] {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// PBKDF2-HMAC-SHA256 with one output block (32 bytes): SCRAM's Hi().
fn hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; KEY_BYTES] {
    let mut u = hmac(password, &[salt, &1u32.to_be_bytes()]);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac(password, &[&u]);
        for (o, x) in out.iter_mut().zip(u.iter()) {
            *o ^= x;
        }
    }
    out
}

/// SASLprep as PostgreSQL applies it: a password that does not normalize
/// is used as it is.
fn normalize(password: &str) -> Cow<'_, str> {
    stringprep::saslprep(password).unwrap_or(Cow::Borrowed(password))
}

/// Equal without an early exit, so timing tells nothing of where keys
/// differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn sha256(data: &[u8]) -> [u8; KEY_BYTES] {
    Sha256::digest(data).into()
}

impl ScramVerifier {
    /// A new verifier for `password` with a random salt.
    pub fn new(password: &str) -> ScramVerifier {
        let salt: [u8; SCRAM_SALT_BYTES] = rand::random();
        ScramVerifier::with_salt(password, &salt, SCRAM_ITERATIONS_DEFAULT)
    }

    pub fn with_salt(password: &str, salt: &[u8], iterations: u32) -> ScramVerifier {
        let salted = hi(normalize(password).as_bytes(), salt, iterations);
        let client_key = hmac(&salted, &[b"Client Key"]);
        ScramVerifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, &[b"Server Key"]),
        }
    }

    /// Whether `password` is the one this verifier was made from.
    pub fn verify(&self, password: &str) -> bool {
        let salted = hi(normalize(password).as_bytes(), &self.salt, self.iterations);
        let client_key = hmac(&salted, &[b"Client Key"]);
        same(&sha256(&client_key), &self.stored_key)
    }

    /// Checks a SCRAM client proof over `auth_message`; on success returns
    /// the server signature the client checks in turn.
    pub fn verify_proof(&self, auth_message: &[u8], proof: &[u8]) -> Option<[u8; KEY_BYTES]> {
        if proof.len() != KEY_BYTES {
            return None;
        }
        let signature = hmac(&self.stored_key, &[auth_message]);
        let mut client_key = [0u8; KEY_BYTES];
        for i in 0..KEY_BYTES {
            client_key[i] = proof[i] ^ signature[i];
        }
        if !same(&sha256(&client_key), &self.stored_key) {
            return None;
        }
        Some(hmac(&self.server_key, &[auth_message]))
    }

    pub fn parse(s: &str) -> Result<ScramVerifier, AuthError> {
        let bad = |why: &str| AuthError::BadVerifier(why.to_string());
        let rest = s
            .trim()
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad("it must start with SCRAM-SHA-256$"))?;
        let (params, keys) = rest
            .split_once('$')
            .ok_or_else(|| bad("no `$` between the salt and the keys"))?;
        let (iters, salt) = params
            .split_once(':')
            .ok_or_else(|| bad("no `:` between the iterations and the salt"))?;
        let iterations: u32 = iters
            .parse()
            .map_err(|_| bad("the iteration count is not a number"))?;
        if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
            return Err(AuthError::BadVerifier(format!(
                "{iterations} iterations; between {SCRAM_ITERATIONS_MIN} and {SCRAM_ITERATIONS_MAX} are accepted"
            )));
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| bad("the salt is not base64"))?;
        if salt.is_empty() {
            return Err(bad("the salt is empty"));
        }
        let (stored, server) = keys
            .split_once(':')
            .ok_or_else(|| bad("no `:` between StoredKey and ServerKey"))?;
        let key = |k: &str, what: &str| -> Result<[u8; KEY_BYTES], AuthError> {
            B64.decode(k)
                .ok()
                .and_then(|v| <[u8; KEY_BYTES]>::try_from(v.as_slice()).ok())
                .ok_or_else(|| AuthError::BadVerifier(format!("{what} is not 32 bytes of base64")))
        };
        Ok(ScramVerifier {
            iterations,
            salt,
            stored_key: key(stored, "StoredKey")?,
            server_key: key(server, "ServerKey")?,
        })
    }
}

impl std::fmt::Display for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PREFIX}{}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pbkdf2_matches_rfc_7914_vector() {
        // RFC 7914 section 11: PBKDF2-HMAC-SHA256("passwd", "salt", 1), first 32 bytes.
        let out = hi(b"passwd", b"salt", 1);
        let want = [
            0x55, 0xac, 0x04, 0x6e, 0x56, 0xe3, 0x08, 0x9f, 0xec, 0x16, 0x91, 0xc2, 0x25, 0x44,
            0xb6, 0x05, 0xf9, 0x41, 0x85, 0x21, 0x6d, 0xde, 0x04, 0x65, 0xe6, 0x8b, 0x9d, 0x57,
            0xc2, 0x0d, 0xac, 0xbc,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn rfc_7677_exchange_verifies() {
        // RFC 7677 section 3: user "user", password "pencil".
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let v = ScramVerifier::with_salt("pencil", &salt, 4096);
        let client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final_bare = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth = format!("{client_first_bare},{server_first},{client_final_bare}");
        let proof = B64
            .decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .expect("proof");
        let sig = v
            .verify_proof(auth.as_bytes(), &proof)
            .expect("the RFC's proof verifies");
        assert_eq!(
            B64.encode(sig),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        let mut wrong = proof.clone();
        wrong[0] ^= 1;
        assert!(v.verify_proof(auth.as_bytes(), &wrong).is_none());
        assert!(v.verify("pencil") && !v.verify("pencil "));
    }

    #[test]
    fn text_form_round_trips_and_errors_say_why() {
        let v = ScramVerifier::new("s3cret");
        let back = ScramVerifier::parse(&v.to_string()).expect("parses");
        assert_eq!(back, v);
        assert!(back.verify("s3cret"));
        for (bad, why) in [
            ("md5abc", "must start"),
            ("SCRAM-SHA-256$4096:c2FsdA==", "no `$`"),
            ("SCRAM-SHA-256$12:c2FsdA==$a:b", "iterations"),
            ("SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA", "StoredKey"),
        ] {
            let e = ScramVerifier::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
