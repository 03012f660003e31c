//! The users file (`--users FILE`): who may log in, with what, as what.
//!
//! ```toml
//! [[user]]
//! name = "ops"
//! roles = ["admin"]
//! password = "SCRAM-SHA-256$4096:…$…:…"   # `tickdb user add ops --role admin`
//!
//! [[user]]
//! name = "feed"
//! roles = ["write"]
//! tokens = ["sha256:9f86d081…"]           # `tickdb user token`: SHA-256 of a bearer token
//!
//! [[user]]
//! name = "legacy"
//! roles = ["read"]
//! pg_md5 = "md5…"   # `tickdb user add legacy --role read --md5`: PostgreSQL's md5(password || name)
//! ```
//!
//! Nothing in it lets anyone log in: passwords are SCRAM verifiers and
//! tokens SHA-256 digests (tokens are 256 random bits, so a fast digest is
//! as strong as a slow one). Unknown keys, duplicate names, a user with no
//! role or no credential are errors naming the user.

use crate::role::{allows, Role};
use crate::verifier::{same, sha256, ScramVerifier};
use crate::{AuthError, IlpKey};
use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use serde::Deserialize;
use sha2::Sha256;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// A users file larger than this is refused.
pub const USERS_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// A password checked once is remembered (as a keyed digest, never the
/// password) this long, so HTTP basic auth does not pay 4096 PBKDF2
/// rounds on every request.
pub const VERIFIED_CACHE_TTL_S: u64 = 300;
/// Entries in that cache; when full it is emptied (a cost, not a risk).
pub const VERIFIED_CACHE_ENTRIES_MAX: usize = 4096;
/// The password every fresh install of tickdb had, and that protected
/// mode refuses off loopback.
pub const DEFAULT_PASSWORD: &str = "tickdb";
const TOKEN_PREFIX: &str = "sha256:";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    user: Vec<UserEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    roles: Vec<String>,
    password: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    /// QuestDB's ILP TCP key: the public point only.
    ilp_key: Option<IlpKeyEntry>,
    pg_md5: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IlpKeyEntry {
    x: String,
    y: String,
}

#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub roles: Vec<Role>,
    pub password: Option<ScramVerifier>,
    /// The public key of QuestDB's ILP TCP challenge.
    pub ilp_key: Option<IlpKey>,
    /// PostgreSQL's MD5 hash, `md5` + hex(md5(password || name)), for
    /// PostgreSQL wire clients too old for SCRAM (`--pg-auth md5`). Only
    /// PostgreSQL wire uses it.
    pub pg_md5: Option<String>,
}

impl User {
    pub fn may(&self, needed: Role) -> bool {
        allows(&self.roles, needed)
    }
}

/// The users of a node.
pub struct Users {
    users: Vec<User>,
    by_name: HashMap<String, usize>,
    by_token: HashMap<[u8; 32], usize>,
    /// Keyed digests of (user, password) pairs verified recently.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    cache_key: [u8; 32],
    /// Keys the salts made up for names that have no SCRAM verifier, so a
    /// name's salt is the same on every try and across restarts (while the
    /// file is the same) and user names cannot be probed. Derived from
    /// the secrets in the file.
    mock_key: [u8; 32],
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Users({} users)", self.users.len())
    }
}

/// `sha256:<hex>`: how a bearer token is stored.
pub fn token_hash(token: &str) -> String {
    let d = sha256(token.as_bytes());
    let mut s = String::with_capacity(TOKEN_PREFIX.len() + 64);
    s.push_str(TOKEN_PREFIX);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// PostgreSQL's MD5 password hash: `md5` + hex(md5(password || name)).
pub fn pg_md5(name: &str, password: &str) -> String {
    let d = md5::compute(format!("{password}{name}").as_bytes());
    format!("md5{d:x}")
}

/// What a PostgreSQL client answers an MD5 challenge with, given the
/// stored `pg_md5` and the challenge's salt:
/// `md5` + hex(md5(hex(md5(password || name)) || salt)).
pub fn pg_md5_salted(stored: &str, salt: &[u8]) -> String {
    let hex = stored.strip_prefix("md5").unwrap_or(stored);
    let mut bytes = Vec::with_capacity(hex.len() + salt.len());
    bytes.extend_from_slice(hex.as_bytes());
    bytes.extend_from_slice(salt);
    format!("md5{:x}", md5::compute(&bytes))
}

fn valid_pg_md5(s: &str) -> Option<String> {
    let hex = s.trim().strip_prefix("md5")?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("md5{}", hex.to_ascii_lowercase()))
}

fn parse_token_hash(s: &str) -> Option<[u8; 32]> {
    let hex = s.trim().strip_prefix(TOKEN_PREFIX)?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Users {
    pub fn new(users: Vec<User>, tokens: Vec<(usize, [u8; 32])>) -> Users {
        let mock_key = {
            let mut h = <Hmac<Sha256> as KeyInit>::new_from_slice(b"tickdb mock SCRAM salt")
                .expect("HMAC accepts any key length");
            for u in &users {
                if let Some(v) = &u.password {
                    h.update(&v.server_key);
                    h.update(&v.stored_key);
                }
                if let Some(m) = &u.pg_md5 {
                    h.update(m.as_bytes());
                }
            }
            for (_, t) in &tokens {
                h.update(t);
            }
            let k: [u8; 32] = h.finalize().into_bytes().into();
            k
        };
        let by_name = users
            .iter()
            .enumerate()
            .map(|(i, u)| (u.name.clone(), i))
            .collect();
        Users {
            users,
            by_name,
            by_token: tokens.into_iter().map(|(i, t)| (t, i)).collect(),
            verified: Mutex::new(HashMap::new()),
            cache_key: rand::random(),
            mock_key,
        }
    }

    /// The salt and iterations to answer a SCRAM client-first for a name
    /// with no SCRAM verifier (unknown, or with only a token or an MD5
    /// hash), so that the answer looks like a real user's: the same salt
    /// for the same name every time, the file's usual iteration count.
    pub fn mock_salt(&self, name: &str) -> (Vec<u8>, u32) {
        let mut h = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.mock_key)
            .expect("HMAC accepts any key length");
        h.update(name.as_bytes());
        let d: [u8; 32] = h.finalize().into_bytes().into();
        let iterations = self
            .users
            .iter()
            .find_map(|u| u.password.as_ref().map(|v| v.iterations))
            .unwrap_or(crate::verifier::SCRAM_ITERATIONS_DEFAULT);
        (d[..crate::verifier::SCRAM_SALT_BYTES].to_vec(), iterations)
    }

    pub fn load(path: &Path) -> Result<Users, AuthError> {
        let invalid = |message: String| AuthError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let read = |source| AuthError::Read {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > USERS_FILE_BYTES_MAX {
            return Err(invalid(format!(
                "{len} bytes, more than the {USERS_FILE_BYTES_MAX} a users file may have"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Users::parse(&text).map_err(invalid)
    }

    /// Parses a users file's text; the error says which user is wrong.
    pub fn parse(text: &str) -> Result<Users, String> {
        let file: UsersFile = toml::from_str(text)
            .map_err(|e| format!("not a users file: {}", e.to_string().trim()))?;
        if file.user.is_empty() {
            return Err("no [[user]] in it: nobody could log in".to_string());
        }
        let mut users = Vec::with_capacity(file.user.len());
        let mut tokens = Vec::new();
        for (i, e) in file.user.into_iter().enumerate() {
            let who = format!("user `{}`", e.name);
            if e.name.is_empty() || e.name.contains(char::is_control) || e.name.contains(':') {
                return Err(format!(
                    "user #{} has an empty name or one with a control character or `:`",
                    i + 1
                ));
            }
            if users.iter().any(|u: &User| u.name == e.name) {
                return Err(format!("{who} appears twice"));
            }
            if e.roles.is_empty() {
                return Err(format!("{who} has no role (read, write, admin)"));
            }
            let roles = e
                .roles
                .iter()
                .map(|r| Role::parse(r))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| format!("{who}: {err}"))?;
            let password = match &e.password {
                Some(p) => {
                    Some(ScramVerifier::parse(p).map_err(|err| format!("{who}: password: {err}"))?)
                }
                None => None,
            };
            for t in &e.tokens {
                let h = parse_token_hash(t).ok_or_else(|| {
                    format!("{who}: token `{t}` is not sha256:<64 hex digits> (`tickdb user token` prints one)")
                })?;
                tokens.push((users.len(), h));
            }
            let ilp_key = match &e.ilp_key {
                Some(k) => {
                    Some(IlpKey::from_xy(&k.x, &k.y).map_err(|err| format!("{who}: {err}"))?)
                }
                None => None,
            };
            let pg_md5 = match &e.pg_md5 {
                Some(m) => Some(valid_pg_md5(m).ok_or_else(|| {
                    format!("{who}: pg_md5 is not md5<32 hex digits> (`tickdb user add --md5` prints one)")
                })?),
                None => None,
            };
            if password.is_none() && e.tokens.is_empty() && ilp_key.is_none() && pg_md5.is_none() {
                return Err(format!(
                    "{who} has no password, token, ILP key or pg_md5: it could never log in"
                ));
            }
            users.push(User {
                name: e.name,
                roles,
                password,
                ilp_key,
                pg_md5,
            });
        }
        Ok(Users::new(users, tokens))
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&User> {
        self.by_name.get(name).map(|&i| &self.users[i])
    }

    /// The user `name` if `password` is theirs.
    pub fn check_password(&self, name: &str, password: &str) -> Option<&User> {
        let user = self.get(name)?;
        let verifier = user.password.as_ref()?;
        let key = {
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.cache_key)
                .expect("HMAC accepts any key length");
            mac.update(name.as_bytes());
            mac.update(&[0]);
            mac.update(password.as_bytes());
            let k: [u8; 32] = mac.finalize().into_bytes().into();
            k
        };
        let ttl = Duration::from_secs(VERIFIED_CACHE_TTL_S);
        if let Some(at) = self.verified.lock().get(&key) {
            if at.elapsed() < ttl {
                return Some(user);
            }
        }
        if !verifier.verify(password) {
            return None;
        }
        let mut cache = self.verified.lock();
        if cache.len() >= VERIFIED_CACHE_ENTRIES_MAX {
            cache.clear();
        }
        cache.insert(key, Instant::now());
        Some(user)
    }

    /// The user holding bearer token `token`.
    pub fn check_token(&self, token: &str) -> Option<&User> {
        let h = sha256(token.as_bytes());
        // The map finds the candidate; the comparison is constant-time.
        let (&stored, &i) = self.by_token.get_key_value(&h)?;
        same(&stored, &h).then(|| &self.users[i])
    }

    /// Users whose password is the default one or their own name: what
    /// protected mode refuses off loopback.
    pub fn with_default_passwords(&self) -> Vec<String> {
        self.users
            .iter()
            .filter(|u| {
                u.password
                    .as_ref()
                    .is_some_and(|v| v.verify(DEFAULT_PASSWORD) || v.verify(&u.name))
                    || u.pg_md5.as_ref().is_some_and(|m| {
                        *m == pg_md5(&u.name, DEFAULT_PASSWORD) || *m == pg_md5(&u.name, &u.name)
                    })
            })
            .map(|u| u.name.clone())
            .collect()
    }

    /// The one user of a node started without a users file: `name` with
    /// `password`, every role (what `--pg-user`/`--pg-password` gave
    /// before users files existed).
    pub fn single(name: &str, password: &str) -> Users {
        Users::new(
            vec![User {
                name: name.to_string(),
                roles: vec![Role::Admin],
                password: Some(ScramVerifier::new(password)),
                ilp_key: None,
                pg_md5: None,
            }],
            Vec::new(),
        )
    }
}

/// A new bearer token: 256 random bits, URL-safe base64.
pub fn new_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &str) -> Result<Users, String> {
        Users::parse(entries)
    }

    #[test]
    fn passwords_and_tokens_log_users_in_with_their_roles() {
        let token = new_token();
        let text = format!(
            "[[user]]\nname = \"ops\"\nroles = [\"admin\"]\npassword = \"{}\"\n\n[[user]]\nname = \"feed\"\nroles = [\"write\"]\ntokens = [\"{}\"]\n",
            ScramVerifier::new("pw1"),
            token_hash(&token)
        );
        let users = file(&text).expect("parses");
        let ops = users.check_password("ops", "pw1").expect("ops logs in");
        assert!(ops.may(Role::Read) && ops.may(Role::Admin));
        assert!(users.check_password("ops", "pw1").is_some(), "cached");
        assert!(users.check_password("ops", "pw2").is_none());
        assert!(users.check_password("nobody", "pw1").is_none());
        let feed = users.check_token(&token).expect("token logs in");
        assert!(feed.may(Role::Write) && !feed.may(Role::Read));
        assert!(users.check_token("not-a-token").is_none());
        assert!(users.with_default_passwords().is_empty());
    }

    #[test]
    fn mistakes_name_the_user() {
        let v = ScramVerifier::new("x");
        for (text, want) in [
            ("".to_string(), "no [[user]]"),
            ("[[user]]\nname = \"a\"\nroles = []\npassword = \"p\"\n".to_string(), "`a` has no role"),
            (format!("[[user]]\nname = \"a\"\nroles = [\"root\"]\npassword = \"{v}\"\n"), "unknown role `root`"),
            ("[[user]]\nname = \"a\"\nroles = [\"read\"]\n".to_string(), "no password, token, ILP key or pg_md5"),
            ("[[user]]\nname = \"a\"\nroles = [\"read\"]\npg_md5 = \"md5xyz\"\n".to_string(), "pg_md5 is not md5<32 hex digits>"),
            ("[[user]]\nname = \"a\"\nroles = [\"read\"]\ntokens = [\"abc\"]\n".to_string(), "token `abc`"),
            ("[[user]]\nname = \"a\"\nroles = [\"read\"]\npasword = \"x\"\n".to_string(), "pasword"),
            (format!("[[user]]\nname = \"a\"\nroles = [\"read\"]\npassword = \"{v}\"\n[[user]]\nname = \"a\"\nroles = [\"read\"]\npassword = \"{v}\"\n"), "appears twice"),
        ] {
            let e = file(&text).expect_err(&text);
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn pg_md5_entries_parse_and_match_postgresql() {
        // PostgreSQL: SELECT 'md5' || md5('pencil' || 'user')
        assert_eq!(
            pg_md5("user", "pencil"),
            "md520c46e3762c864548e296b33c3406aa9"
        );
        // pgwire's own test vector for the salted answer.
        let stored = pg_md5("zmjiang", "themanwhochangedchina");
        assert_eq!(
            pg_md5_salted(&stored, &[20, 247, 107, 249]),
            "md521fe459d77d3e3ea9c9fcd5c11030d30"
        );
        let text = format!(
            "[[user]]\nname = \"old\"\nroles = [\"read\"]\npg_md5 = \"{}\"\n[[user]]\nname = \"both\"\nroles = [\"read\"]\npassword = \"{}\"\npg_md5 = \"{}\"\n",
            pg_md5("old", "pw1").to_ascii_uppercase().replacen("MD5", "md5", 1),
            ScramVerifier::new("pw2"),
            pg_md5("both", "pw2"),
        );
        let users = file(&text).expect("parses");
        let old = users.get("old").expect("old");
        assert_eq!(
            old.pg_md5.as_deref(),
            Some(pg_md5("old", "pw1").as_str()),
            "kept lower case"
        );
        assert!(old.password.is_none());
        assert!(
            users.check_password("old", "pw1").is_none(),
            "MD5 is for PostgreSQL wire only"
        );
        assert!(users.get("both").and_then(|u| u.pg_md5.as_ref()).is_some());
        let (a, i) = users.mock_salt("nobody");
        assert_eq!((a.clone(), i), users.mock_salt("nobody"), "stable per name");
        assert_ne!(a, users.mock_salt("nobody2").0);
        assert_eq!(i, 4096);
        let defaults = format!(
            "[[user]]\nname = \"x\"\nroles = [\"read\"]\npg_md5 = \"{}\"\n",
            pg_md5("x", DEFAULT_PASSWORD)
        );
        assert_eq!(
            file(&defaults).expect("parses").with_default_passwords(),
            ["x"]
        );
    }

    #[test]
    fn default_passwords_are_found() {
        let text = format!(
            "[[user]]\nname = \"tickdb\"\nroles = [\"admin\"]\npassword = \"{}\"\n[[user]]\nname = \"bob\"\nroles = [\"read\"]\npassword = \"{}\"\n",
            ScramVerifier::new(DEFAULT_PASSWORD),
            ScramVerifier::new("bob")
        );
        let users = file(&text).expect("parses");
        assert_eq!(users.with_default_passwords(), ["tickdb", "bob"]);
    }
}
