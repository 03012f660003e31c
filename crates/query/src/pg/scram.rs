//! PostgreSQL wire logins against the users file (`--users`): SCRAM-SHA-256
//! (RFC 5802, RFC 7677) checked against each user's stored verifier, and
//! MD5 for old clients with `--pg-auth md5`.
//!
//! pgwire's own SCRAM handler needs the SaltedPassword; the users file
//! holds only StoredKey and ServerKey (what `pg_authid` holds), which is
//! all the server side of SCRAM needs: the client's proof XOR
//! HMAC(StoredKey, AuthMessage) is the ClientKey, whose SHA-256 must be
//! StoredKey (`ScramVerifier::verify_proof`).
//!
//! - Only `SCRAM-SHA-256` is offered: no channel binding (TLS is not served
//!   here), and a client-first asking for it (`p=…`) is refused saying so.
//! - Every failure (wrong proof, unknown user, malformed message) answers
//!   FATAL 28P01 `password authentication failed for user "X"` and is
//!   reported to the node's failed-login limiter; an address the limiter
//!   refuses gets FATAL 28000 before any check.
//! - A name with no SCRAM verifier (unknown, or a token- or MD5-only
//!   user) gets a server-first like anyone's, with a salt made up from a
//!   secret and the name (`Users::mock_salt`), and fails at the proof: the
//!   same round trips, so user names cannot be probed.
//! - Connecting needs the `read` role (FATAL 28000 otherwise), checked only
//!   after the password, so it tells nothing to someone without it.
//! - `--pg-auth md5`: a user whose entry has `pg_md5` is asked for an MD5
//!   password (PostgreSQL's `md5` method); everyone else still gets SCRAM.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
    DefaultServerParameterProvider, StartupHandler,
};
use pgwire::api::{ClientInfo, PgWireConnectionState, PidSecretKeyGenerator, METADATA_USER};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::fmt::Debug;
use std::net::IpAddr;
use std::sync::Arc;
use tickdb_auth::{pg_md5_salted, LoginLimiter, Role, Users};

use datafusion_postgres::pgwire;

/// The port's name in the failed-login log.
pub const PORT: &str = "PostgreSQL";
/// The one SASL mechanism offered.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// Random bytes of the server's part of the nonce (PostgreSQL uses 18).
const SERVER_NONCE_BYTES: usize = 18;
/// Longest SCRAM message accepted from a client.
const SCRAM_MESSAGE_BYTES_MAX: usize = 1024;

/// Which method a user with a `pg_md5` entry is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgAuthMethod {
    /// SCRAM-SHA-256 for everyone (PostgreSQL's `scram-sha-256`).
    Scram,
    /// MD5 for users with `pg_md5`, SCRAM for the rest (PostgreSQL's `md5`).
    Md5,
}

/// The node's users and failed-login limiter, as the PostgreSQL port uses
/// them.
#[derive(Clone)]
pub struct PgUsers {
    pub users: Arc<Users>,
    pub limiter: Arc<LoginLimiter>,
    pub method: PgAuthMethod,
}

impl Debug for PgUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUsers({:?}, {:?})", self.users, self.method)
    }
}

// ---------------------------------------------------------------------------
// Messages (RFC 5802 section 7)
// ---------------------------------------------------------------------------

/// A parsed client-first-message.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// `n,,` or `y,,`: what `c=` must carry back, base64.
    pub gs2_header: String,
    /// client-first-message-bare, as sent (part of the AuthMessage).
    pub bare: String,
    pub nonce: String,
}

/// A parsed client-final-message.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFinal {
    /// client-final-message-without-proof, as sent.
    pub without_proof: String,
    pub proof: Vec<u8>,
}

fn printable_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Parses `gs2-header client-first-message-bare`. The user name in it is
/// ignored (PostgreSQL clients send `n=` empty; the startup packet names
/// the user).
pub fn parse_client_first(msg: &str) -> Result<ClientFirst, String> {
    if msg.len() > SCRAM_MESSAGE_BYTES_MAX {
        return Err("the SCRAM client-first message is too long".into());
    }
    let (flag, rest) = msg
        .split_once(',')
        .ok_or("malformed SCRAM client-first message (no GS2 header)")?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => {
            return Err(format!(
                "channel binding ({f}) is not supported: tickdb offers SCRAM-SHA-256 without channel binding \
                 (connect with channel_binding=disable or prefer)"
            ))
        }
        f => return Err(format!("malformed SCRAM client-first message (channel binding flag `{f}`)")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or("malformed SCRAM client-first message (GS2 header not closed)")?;
    if !authzid.is_empty() {
        return Err("a SCRAM authorization identity (a=) is not supported".into());
    }
    let mut attrs = bare.split(',');
    match attrs.next() {
        Some(a) if a.starts_with("m=") => {
            return Err("SCRAM mandatory extensions (m=) are not supported".into())
        }
        Some(a) if a.starts_with("n=") => {}
        _ => return Err("malformed SCRAM client-first message (no n= user name)".into()),
    }
    let nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or("malformed SCRAM client-first message (no r= nonce)")?;
    if !printable_nonce(nonce) {
        return Err(
            "malformed SCRAM client-first message (the nonce is not printable ASCII)".into(),
        );
    }
    Ok(ClientFirst {
        gs2_header: format!("{flag},,"),
        bare: bare.to_string(),
        nonce: nonce.to_string(),
    })
}

/// server-first-message: `r=<client nonce><server nonce>,s=<salt>,i=<iterations>`.
pub fn server_first(nonce: &str, salt: &[u8], iterations: u32) -> String {
    format!("r={nonce},s={},i={iterations}", B64.encode(salt))
}

/// Parses `c=…,r=…[,extensions],p=…` and checks the channel binding data
/// and the nonce against what this exchange sent.
pub fn parse_client_final(msg: &str, gs2_header: &str, nonce: &str) -> Result<ClientFinal, String> {
    if msg.len() > SCRAM_MESSAGE_BYTES_MAX {
        return Err("the SCRAM client-final message is too long".into());
    }
    let at = msg
        .rfind(",p=")
        .ok_or("malformed SCRAM client-final message (no p= proof)")?;
    let (without_proof, proof) = (&msg[..at], &msg[at + 3..]);
    let mut attrs = without_proof.split(',');
    let cbind = attrs
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or("malformed SCRAM client-final message (no c= channel binding)")?;
    if B64.decode(cbind).ok().as_deref() != Some(gs2_header.as_bytes()) {
        return Err("SCRAM channel binding data does not match the client-first message".into());
    }
    let r = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or("malformed SCRAM client-final message (no r= nonce)")?;
    if r != nonce {
        return Err("the SCRAM nonce does not match".into());
    }
    let proof = B64
        .decode(proof)
        .map_err(|_| "malformed SCRAM client-final message (the proof is not base64)")?;
    Ok(ClientFinal {
        without_proof: without_proof.to_string(),
        proof,
    })
}

/// AuthMessage = client-first-message-bare "," server-first-message ","
/// client-final-message-without-proof.
pub fn auth_message(client_first_bare: &str, server_first: &str, without_proof: &str) -> String {
    format!("{client_first_bare},{server_first},{without_proof}")
}

// ---------------------------------------------------------------------------
// The startup handler
// ---------------------------------------------------------------------------

enum State {
    /// Waiting for the startup packet.
    Start,
    /// SASL offered; waiting for the client-first message.
    ScramFirst {
        user: String,
    },
    /// server-first sent; waiting for the client-final message.
    ScramFinal {
        user: String,
        gs2_header: String,
        nonce: String,
        /// client-first-bare "," server-first: the AuthMessage's start.
        first_messages: (String, String),
    },
    /// MD5 challenge sent: the answer expected.
    Md5 {
        user: String,
        expected: String,
    },
    Done,
}

/// One connection's login against the users file.
pub struct UsersStartup {
    auth: PgUsers,
    keys: Arc<dyn PidSecretKeyGenerator>,
    params: Arc<DefaultServerParameterProvider>,
    state: tokio::sync::Mutex<State>,
}

fn fatal(code: &str, message: String, detail: Option<String>) -> PgWireError {
    let mut info = ErrorInfo::new("FATAL".to_string(), code.to_string(), message);
    info.detail = detail;
    PgWireError::UserError(Box::new(info))
}

impl UsersStartup {
    pub fn new(
        auth: PgUsers,
        keys: Arc<dyn PidSecretKeyGenerator>,
        params: Arc<DefaultServerParameterProvider>,
    ) -> UsersStartup {
        UsersStartup {
            auth,
            keys,
            params,
            state: tokio::sync::Mutex::new(State::Start),
        }
    }

    /// A failed login: logged and counted by the limiter, answered 28P01.
    /// `detail` goes to the client only for protocol mistakes, never for a
    /// wrong password or an unknown user.
    fn failed(&self, ip: IpAddr, user: &str, why: &str, detail: Option<String>) -> PgWireError {
        self.auth.limiter.failed(PORT, ip, user, why);
        fatal(
            "28P01",
            format!("password authentication failed for user \"{user}\""),
            detail,
        )
    }

    /// A protocol mistake during the exchange: a failed login that says why.
    fn malformed(&self, ip: IpAddr, user: &str, why: String) -> PgWireError {
        self.failed(ip, user, &why, Some(why.clone()))
    }

    /// The password was right: the user still needs `read` to connect.
    fn succeed(&self, ip: IpAddr, user: &str) -> PgWireResult<()> {
        let Some(u) = self.auth.users.get(user) else {
            return Err(self.failed(ip, user, "unknown user", None));
        };
        if !u.may(Role::Read) {
            let roles: Vec<&str> = u.roles.iter().map(|r| r.name()).collect();
            self.auth
                .limiter
                .failed(PORT, ip, user, "the user lacks the read role");
            return Err(fatal(
                "28000",
                format!(
                    "user \"{user}\" may not connect over PostgreSQL wire: that needs the read role (the user has: {})",
                    roles.join(", ")
                ),
                None,
            ));
        }
        self.auth.limiter.succeeded(ip);
        tracing::debug!("PostgreSQL: {user} logged in from {ip}");
        Ok(())
    }

    async fn finish<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, key) = self.keys.generate(client);
        client.set_pid_and_secret_key(pid, key);
        finish_authentication(client, self.params.as_ref()).await
    }
}

#[async_trait::async_trait]
impl StartupHandler for UsersStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let ip = client.socket_addr().ip();
        let mut state = self.state.lock().await;
        match (message, &*state) {
            (PgWireFrontendMessage::Startup(ref startup), State::Start) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                if let Err(refusal) = self.auth.limiter.check(ip) {
                    *state = State::Done;
                    return Err(fatal("28000", refusal.to_string(), None));
                }
                let Some(user) = client.metadata().get(METADATA_USER).cloned() else {
                    *state = State::Done;
                    return Err(PgWireError::UserNameRequired);
                };
                let md5 = match self.auth.method {
                    PgAuthMethod::Md5 => self.auth.users.get(&user).and_then(|u| u.pg_md5.clone()),
                    PgAuthMethod::Scram => None,
                };
                if let Some(stored) = md5 {
                    let salt: [u8; 4] = rand::random();
                    *state = State::Md5 {
                        user,
                        expected: pg_md5_salted(&stored, &salt),
                    };
                    client
                        .send(PgWireBackendMessage::Authentication(
                            Authentication::MD5Password(salt.to_vec()),
                        ))
                        .await?;
                } else {
                    *state = State::ScramFirst { user };
                    client
                        .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                            vec![MECHANISM.to_string()],
                        )))
                        .await?;
                }
            }
            (PgWireFrontendMessage::PasswordMessageFamily(msg), State::ScramFirst { user }) => {
                let user = user.clone();
                *state = State::Done;
                let initial = msg
                    .into_sasl_initial_response()
                    .map_err(|_| self.malformed(ip, &user, "not a SASL initial response".into()))?;
                if initial.auth_method != MECHANISM {
                    let why = format!(
                        "SASL mechanism {} is not offered: tickdb offers {MECHANISM} only (no channel binding)",
                        initial.auth_method
                    );
                    return Err(self.malformed(ip, &user, why));
                }
                let data = initial.data.unwrap_or_default();
                let text = std::str::from_utf8(&data).map_err(|_| {
                    self.malformed(ip, &user, "the SCRAM message is not UTF-8".into())
                })?;
                let first =
                    parse_client_first(text).map_err(|why| self.malformed(ip, &user, why))?;
                let (salt, iterations) =
                    match self.auth.users.get(&user).and_then(|u| u.password.as_ref()) {
                        Some(v) => (v.salt.clone(), v.iterations),
                        None => self.auth.users.mock_salt(&user),
                    };
                let server_nonce: [u8; SERVER_NONCE_BYTES] = rand::random();
                let nonce = format!("{}{}", first.nonce, B64.encode(server_nonce));
                let sfirst = server_first(&nonce, &salt, iterations);
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::SASLContinue(bytes::Bytes::from(sfirst.clone())),
                    ))
                    .await?;
                *state = State::ScramFinal {
                    user,
                    gs2_header: first.gs2_header,
                    nonce,
                    first_messages: (first.bare, sfirst),
                };
            }
            (
                PgWireFrontendMessage::PasswordMessageFamily(msg),
                State::ScramFinal {
                    user,
                    gs2_header,
                    nonce,
                    first_messages,
                },
            ) => {
                let (user, gs2_header, nonce) = (user.clone(), gs2_header.clone(), nonce.clone());
                let (bare, sfirst) = first_messages.clone();
                *state = State::Done;
                let resp = msg
                    .into_sasl_response()
                    .map_err(|_| self.malformed(ip, &user, "not a SASL response".into()))?;
                let text = std::str::from_utf8(&resp.data).map_err(|_| {
                    self.malformed(ip, &user, "the SCRAM message is not UTF-8".into())
                })?;
                let fin = parse_client_final(text, &gs2_header, &nonce)
                    .map_err(|why| self.malformed(ip, &user, why))?;
                let message = auth_message(&bare, &sfirst, &fin.without_proof);
                let verifier = self.auth.users.get(&user).and_then(|u| u.password.as_ref());
                let signature = match verifier {
                    None => {
                        let why = match self.auth.users.get(&user) {
                            None => "unknown user",
                            Some(_) => {
                                "the user has no password (SCRAM verifier) in the users file"
                            }
                        };
                        return Err(self.failed(ip, &user, why, None));
                    }
                    Some(v) => v.verify_proof(message.as_bytes(), &fin.proof),
                };
                let Some(signature) = signature else {
                    return Err(self.failed(ip, &user, "wrong password", None));
                };
                self.succeed(ip, &user)?;
                let fin = format!("v={}", B64.encode(signature));
                client
                    .send(PgWireBackendMessage::Authentication(
                        Authentication::SASLFinal(bytes::Bytes::from(fin)),
                    ))
                    .await?;
                self.finish(client).await?;
            }
            (PgWireFrontendMessage::PasswordMessageFamily(msg), State::Md5 { user, expected }) => {
                let (user, expected) = (user.clone(), expected.clone());
                *state = State::Done;
                let pw = msg
                    .into_password()
                    .map_err(|_| self.malformed(ip, &user, "not a password message".into()))?;
                if !tickdb_auth::verifier::same(pw.password.as_bytes(), expected.as_bytes()) {
                    return Err(self.failed(ip, &user, "wrong password (md5)", None));
                }
                self.succeed(ip, &user)?;
                self.finish(client).await?;
            }
            (PgWireFrontendMessage::PasswordMessageFamily(_), _) => {
                *state = State::Done;
                return Err(PgWireError::InvalidSASLState);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickdb_auth::ScramVerifier;

    #[test]
    fn client_first_parses_and_refusals_say_why() {
        let f = parse_client_first("n,,n=,r=rOprNGfwEbeRWgbNEkqO").expect("libpq's form");
        assert_eq!(f.gs2_header, "n,,");
        assert_eq!(f.bare, "n=,r=rOprNGfwEbeRWgbNEkqO");
        assert_eq!(f.nonce, "rOprNGfwEbeRWgbNEkqO");
        let y = parse_client_first("y,,n=user,r=abc,x=ext")
            .expect("y: client could bind, server cannot");
        assert_eq!((y.gs2_header.as_str(), y.nonce.as_str()), ("y,,", "abc"));
        for (bad, why) in [
            (
                "p=tls-server-end-point,,n=,r=abc",
                "channel binding (p=tls-server-end-point) is not supported",
            ),
            ("n,a=admin,n=,r=abc", "authorization identity"),
            ("n,,m=x,n=,r=abc", "mandatory extensions"),
            ("n,,r=abc", "no n= user name"),
            ("n,,n=,s=abc", "no r= nonce"),
            ("n,,n=,r=", "not printable"),
            ("x,,n=,r=abc", "channel binding flag"),
            ("n", "no GS2 header"),
            ("n,", "not closed"),
        ] {
            let e = parse_client_first(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn client_final_checks_binding_and_nonce() {
        let f = parse_client_final("c=biws,r=abcXYZ,p=AAAA", "n,,", "abcXYZ").expect("parses");
        assert_eq!(f.without_proof, "c=biws,r=abcXYZ");
        assert_eq!(f.proof, vec![0, 0, 0]);
        assert!(parse_client_final("c=eSws,r=abcXYZ,p=AAAA", "y,,", "abcXYZ").is_ok());
        for (bad, why) in [
            ("c=biws,r=abcXYZ", "no p= proof"),
            ("r=abcXYZ,p=AAAA", "no c= channel binding"),
            ("c=eSws,r=abcXYZ,p=AAAA", "does not match the client-first"),
            ("c=biws,r=abcXY,p=AAAA", "nonce does not match"),
            ("c=biws,r=abcXYZ,p=%%%", "not base64"),
        ] {
            let e = parse_client_final(bad, "n,,", "abcXYZ").expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn rfc_7677_exchange_through_the_parsers() {
        // RFC 7677 section 3: user "user", password "pencil".
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let v = ScramVerifier::with_salt("pencil", &salt, 4096);
        let first = parse_client_first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO").expect("first");
        let nonce = format!("{}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", first.nonce);
        let sfirst = server_first(&nonce, &salt, 4096);
        assert_eq!(
            sfirst,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let fin = parse_client_final(
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            &first.gs2_header,
            &nonce,
        )
        .expect("final");
        let msg = auth_message(&first.bare, &sfirst, &fin.without_proof);
        let sig = v
            .verify_proof(msg.as_bytes(), &fin.proof)
            .expect("verifies");
        assert_eq!(
            B64.encode(sig),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }
}
