//! `tickdb user add`: a users-file entry, with the password turned into a
//! SCRAM-SHA-256 verifier and a new bearer token into its SHA-256, so the
//! file never holds a secret.

use clap::{Args, Subcommand};
use std::io::{BufRead, Read};
use std::process::ExitCode;
use tickdb_auth::{new_token, pg_md5, token_hash, Role, ScramVerifier};

/// Longest password read from stdin, in bytes.
const PASSWORD_BYTES_MAX: usize = 1024;

#[derive(Args, Debug)]
pub struct UserArgs {
    #[command(subcommand)]
    cmd: UserCmd,
}

#[derive(Subcommand, Debug)]
enum UserCmd {
    /// Print a [[user]] entry for the users file (--users): the password
    /// (read from the first line of stdin) as a SCRAM-SHA-256 verifier,
    /// and with --token a new bearer token, shown once on stderr and kept
    /// only as its SHA-256; with --md5 also PostgreSQL's MD5 hash. Example:
    /// `echo "$PW" | tickdb user add ops --role admin >> users.toml`.
    Add {
        /// The user's name (what clients log in as).
        name: String,
        /// A role: read (queries), write (ingest), admin (everything,
        /// including clear, trim, checkpoint, promote, drain, end of day).
        /// Repeat for several.
        #[arg(long = "role", required = true, value_name = "ROLE")]
        roles: Vec<String>,
        /// Also generate a bearer token (HTTP `Authorization: Bearer`, the
        /// questdb client's `token=`).
        #[arg(long)]
        token: bool,
        /// Also generate a key for ILP over TCP (QuestDB's ECDSA P-256
        /// challenge): the file keeps the public point; the private
        /// `token` (d) is shown once on stderr in the questdb client's
        /// conf string.
        #[arg(long)]
        ilp_key: bool,
        /// No password: only a token or an ILP key (reads nothing from
        /// stdin).
        #[arg(long)]
        no_password: bool,
        /// Also write the password as PostgreSQL's MD5 hash (`pg_md5`,
        /// md5(password || name)), for PostgreSQL clients too old for
        /// SCRAM-SHA-256; the node asks for it only with --pg-auth md5.
        /// MD5 is weak (one fast hash, the name as salt): use it only where
        /// such clients must connect.
        #[arg(long, conflicts_with = "no_password")]
        md5: bool,
    },
}

pub fn run(a: UserArgs) -> ExitCode {
    match a.cmd {
        UserCmd::Add {
            name,
            roles,
            token,
            ilp_key,
            no_password,
            md5,
        } => match add(&name, &roles, (token, ilp_key), no_password, md5) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tickdb user add: {e}");
                ExitCode::from(2)
            }
        },
    }
}

/// `(token, ilp_key)`: which generated credentials to add.
fn add(
    name: &str,
    roles: &[String],
    (token, ilp_key): (bool, bool),
    no_password: bool,
    md5: bool,
) -> Result<(), String> {
    if no_password && !token && !ilp_key {
        return Err("--no-password needs --token or --ilp-key: the user could never log in".into());
    }
    if name.is_empty() || name.contains(char::is_control) || name.contains(':') {
        return Err("a name must be non-empty, with no control character and no `:`".into());
    }
    let roles = roles
        .iter()
        .map(|r| Role::parse(r).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let password = if no_password {
        None
    } else {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .take(PASSWORD_BYTES_MAX as u64 + 1)
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the password from stdin: {e}"))?;
        let pw = line.trim_end_matches(['\n', '\r']);
        if line.len() > PASSWORD_BYTES_MAX {
            return Err(format!(
                "the password is longer than {PASSWORD_BYTES_MAX} bytes"
            ));
        }
        if pw.is_empty() {
            return Err("no password on stdin (pipe one in, or give --no-password with --token or --ilp-key)".into());
        }
        if pw == tickdb_auth::DEFAULT_PASSWORD || pw == name {
            return Err("that password is the default or the user's name: protected mode refuses it off loopback".into());
        }
        Some((ScramVerifier::new(pw), md5.then(|| pg_md5(name, pw))))
    };
    let mut out = String::new();
    out.push_str("[[user]]\n");
    out.push_str(&format!("name = {}\n", toml_str(name)));
    let names: Vec<String> = roles.iter().map(|r| toml_str(r.name())).collect();
    out.push_str(&format!("roles = [{}]\n", names.join(", ")));
    if let Some((v, m)) = password {
        out.push_str(&format!("password = {}\n", toml_str(&v.to_string())));
        if let Some(m) = m {
            out.push_str(&format!("pg_md5 = {}\n", toml_str(&m)));
        }
    }
    if token {
        let t = new_token();
        eprintln!("bearer token for {name} (shown once; the file keeps only its SHA-256):\n{t}");
        out.push_str(&format!("tokens = [{}]\n", toml_str(&token_hash(&t))));
    }
    if ilp_key {
        let (d, key) = tickdb_auth::ilp_key::generate().map_err(|e| e.to_string())?;
        eprintln!(
            "ILP TCP key for {name} (d shown once; the file keeps only the public point):\n\
             tcp::addr=HOST:PORT;username={name};token={d};token_x={x};token_y={y};",
            x = key.x(),
            y = key.y()
        );
        out.push_str(&format!(
            "ilp_key = {{ x = {}, y = {} }}\n",
            toml_str(&key.x()),
            toml_str(&key.y())
        ));
    }
    print!("{out}");
    Ok(())
}

fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}
