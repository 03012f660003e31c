//! How `tickdb feed` and `tickdb monitor` log in to a node with a users
//! file: HTTP basic auth, and QuestDB's ILP TCP key challenge.

use crate::error::{Result, StackError};
use base64::Engine;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// Longest challenge line read from the tp, in bytes.
const CHALLENGE_BYTES_MAX: u64 = 1024;

/// `--user`, `--password`, `--ilp-token`, `--ilp-token-x`, `--ilp-token-y`.
/// The secrets take values that begin with `-`: base64url keys and
/// passwords may, and clap would otherwise read them as flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientAuthArgs {
    /// User to log in as on a node with a users file (--users): HTTP basic
    /// auth with --password, and ILP TCP's key id with --ilp-token.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Password of --user, for HTTP. Prefer TICKDB_PASSWORD, which keeps
    /// it out of `ps`.
    #[arg(
        long,
        value_name = "PASSWORD",
        requires = "user",
        allow_hyphen_values = true
    )]
    pub password: Option<String>,
    /// ILP TCP key of --user: the private `token` (d) that `tickdb user
    /// add --ilp-key` printed. Prefer TICKDB_ILP_TOKEN.
    #[arg(
        long,
        value_name = "D",
        requires_all = ["user", "ilp_token_x", "ilp_token_y"],
        allow_hyphen_values = true
    )]
    pub ilp_token: Option<String>,
    /// The key's public x (`token_x`).
    #[arg(
        long,
        value_name = "X",
        requires = "ilp_token",
        allow_hyphen_values = true
    )]
    pub ilp_token_x: Option<String>,
    /// The key's public y (`token_y`).
    #[arg(
        long,
        value_name = "Y",
        requires = "ilp_token",
        allow_hyphen_values = true
    )]
    pub ilp_token_y: Option<String>,
}

impl ClientAuthArgs {
    /// The `Authorization` header line for HTTP, when a password is given.
    pub fn http_header(&self) -> Option<String> {
        let (u, p) = (self.user.as_ref()?, self.password.as_ref()?);
        Some(format!(
            "Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        ))
    }

    /// Runs QuestDB's challenge on a fresh ILP TCP connection, when a key
    /// is given: key id, the tp's challenge, the signature.
    pub fn ilp_login(&self, sock: &mut TcpStream) -> Result<()> {
        let (Some(user), Some(d), Some(x), Some(y)) = (
            &self.user,
            &self.ilp_token,
            &self.ilp_token_x,
            &self.ilp_token_y,
        ) else {
            return Ok(());
        };
        let bad = |e: tickdb_auth::AuthError| StackError::BadInput(format!("--ilp-token: {e}"));
        let key = tickdb_auth::IlpKey::from_xy(x, y).map_err(bad)?;
        let io = |what: &'static str| StackError::io(format!("ILP TCP login: {what}"));
        sock.write_all(format!("{user}\n").as_bytes())
            .map_err(io("sending the key id"))?;
        let mut line = String::new();
        let read = sock.try_clone().map_err(io("reading the challenge"))?;
        BufReader::new(std::io::Read::take(read, CHALLENGE_BYTES_MAX))
            .read_line(&mut line)
            .map_err(io("reading the challenge"))?;
        let challenge = line.trim_end_matches(['\n', '\r']);
        if challenge.is_empty() {
            return Err(StackError::Server(
                "ILP TCP login: the tp sent no challenge (is --users set there?)".into(),
            ));
        }
        let sig = tickdb_auth::ilp_key::sign(d, &key, challenge.as_bytes()).map_err(bad)?;
        sock.write_all(format!("{sig}\n").as_bytes())
            .map_err(io("sending the signature"))
    }
}

#[cfg(test)]
mod tests {
    use super::ClientAuthArgs;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        auth: ClientAuthArgs,
        #[arg(long)]
        rate: Option<u64>,
    }

    #[test]
    fn secrets_that_begin_with_a_hyphen_are_values_not_flags() {
        // base64url keys begin with `-` one time in 64 each.
        let cli = Cli::try_parse_from([
            "feed",
            "--user",
            "u",
            "--password",
            "-pw",
            "--ilp-token",
            "-d",
            "--ilp-token-x",
            "-7x",
            "--ilp-token-y",
            "-_y",
            "--rate",
            "5",
        ])
        .expect("parses");
        assert_eq!(cli.auth.password.as_deref(), Some("-pw"));
        assert_eq!(cli.auth.ilp_token.as_deref(), Some("-d"));
        assert_eq!(cli.auth.ilp_token_x.as_deref(), Some("-7x"));
        assert_eq!(cli.auth.ilp_token_y.as_deref(), Some("-_y"));
        assert_eq!(cli.rate, Some(5));
    }
}
