//! QuestDB's ILP TCP authentication keys: an ECDSA P-256 key per user. The
//! server holds only the public point (x, y); the client signs the
//! server's challenge with the private scalar d. The `questdb` client
//! takes them as `username` (the key id, here the user's name), `token`
//! (d), `token_x` (x) and `token_y` (y), each 32 bytes in URL-safe base64
//! without padding, as QuestDB's documentation writes JSON Web Keys.

use crate::AuthError;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::signature::{
    EcdsaKeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};

const COORD_BYTES: usize = 32;
/// A fixed-size (r || s) signature, what the `questdb` client sends.
const FIXED_SIGNATURE_BYTES: usize = 64;
/// Longest DER signature accepted.
const DER_SIGNATURE_BYTES_MAX: usize = 72;

#[derive(Clone, PartialEq, Eq)]
pub struct IlpKey {
    /// SEC1 uncompressed point: 0x04 || x || y.
    point: [u8; 1 + 2 * COORD_BYTES],
}

impl std::fmt::Debug for IlpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IlpKey(P-256)")
    }
}

/// Base64 in any of its usual spellings (JWK's URL-safe without padding
/// first).
fn decode_any(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    [&URL_SAFE_NO_PAD, &URL_SAFE, &STANDARD, &STANDARD_NO_PAD]
        .iter()
        .find_map(|e| e.decode(s).ok())
}

fn coord(s: &str, what: &str) -> Result<[u8; COORD_BYTES], AuthError> {
    decode_any(s)
        .and_then(|v| <[u8; COORD_BYTES]>::try_from(v.as_slice()).ok())
        .ok_or_else(|| {
            AuthError::BadKey(format!(
                "{what} is not 32 bytes of base64 (URL-safe, as in a JSON Web Key)"
            ))
        })
}

impl IlpKey {
    pub fn from_xy(x: &str, y: &str) -> Result<IlpKey, AuthError> {
        let mut point = [0u8; 1 + 2 * COORD_BYTES];
        point[0] = 0x04;
        point[1..1 + COORD_BYTES].copy_from_slice(&coord(x, "x")?);
        point[1 + COORD_BYTES..].copy_from_slice(&coord(y, "y")?);
        Ok(IlpKey { point })
    }

    /// Whether `signature` (base64 of a fixed r || s or a DER signature)
    /// is this key's over `challenge`.
    pub fn verify(&self, challenge: &[u8], signature: &str) -> bool {
        let Some(sig) = decode_any(signature) else {
            return false;
        };
        let alg = match sig.len() {
            FIXED_SIGNATURE_BYTES => &ECDSA_P256_SHA256_FIXED,
            n if n <= DER_SIGNATURE_BYTES_MAX => &ECDSA_P256_SHA256_ASN1,
            _ => return false,
        };
        UnparsedPublicKey::new(alg, &self.point[..])
            .verify(challenge, &sig)
            .is_ok()
    }

    pub fn x(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.point[1..1 + COORD_BYTES])
    }

    pub fn y(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.point[1 + COORD_BYTES..])
    }
}

/// A new key pair: (d, the public key), d in URL-safe base64.
pub fn generate() -> Result<(String, IlpKey), AuthError> {
    let rng = ring::rand::SystemRandom::new();
    let failed = |what: &str| AuthError::BadKey(format!("cannot {what} a P-256 key"));
    let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .map_err(|_| failed("generate"))?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng)
        .map_err(|_| failed("read back"))?;
    let public: &[u8] = ring::signature::KeyPair::public_key(&pair).as_ref();
    let point: [u8; 1 + 2 * COORD_BYTES] = public.try_into().map_err(|_| failed("encode"))?;
    // PKCS#8 wraps RFC 5915's ECPrivateKey: version INTEGER 1, then the
    // scalar as a 32-byte OCTET STRING.
    let doc = doc.as_ref();
    let marker = [0x02, 0x01, 0x01, 0x04, COORD_BYTES as u8];
    let at = doc
        .windows(marker.len())
        .position(|w| w == marker)
        .ok_or_else(|| failed("find the scalar of"))?
        + marker.len();
    let d = doc
        .get(at..at + COORD_BYTES)
        .ok_or_else(|| failed("read"))?;
    // The scalar found must be the one that makes this public key.
    EcdsaKeyPair::from_private_key_and_public_key(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        d,
        &point,
        &rng,
    )
    .map_err(|_| failed("check"))?;
    Ok((URL_SAFE_NO_PAD.encode(d), IlpKey { point }))
}

/// Signs `challenge` with private scalar `d` and public key `key` (what a
/// client does; for tests and tools).
pub fn sign(d: &str, key: &IlpKey, challenge: &[u8]) -> Result<String, AuthError> {
    let rng = ring::rand::SystemRandom::new();
    let d = decode_any(d).ok_or_else(|| AuthError::BadKey("d is not base64".into()))?;
    let pair = EcdsaKeyPair::from_private_key_and_public_key(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        &d,
        &key.point,
        &rng,
    )
    .map_err(|_| AuthError::BadKey("d does not match the public key".into()))?;
    let sig = pair
        .sign(&rng, challenge)
        .map_err(|_| AuthError::BadKey("cannot sign".into()))?;
    Ok(STANDARD.encode(sig.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_signs_and_only_its_signatures_verify() {
        let (d, key) = generate().expect("key");
        let key2 = IlpKey::from_xy(&key.x(), &key.y()).expect("parses");
        assert_eq!(key, key2);
        let sig = sign(&d, &key, b"challenge-1").expect("signs");
        assert!(key.verify(b"challenge-1", &sig));
        assert!(!key.verify(b"challenge-2", &sig));
        let (_, other) = generate().expect("key");
        assert!(!other.verify(b"challenge-1", &sig));
        assert!(!key.verify(b"challenge-1", "not base64!"));
        assert!(IlpKey::from_xy("AAAA", &key.y()).is_err());
    }
}
