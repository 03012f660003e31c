//! How a tp client (`tickdb rdb`, `tickdb agg`) connects to the tp's
//! subscription port: the user it logs in as, when the tp has a users file,
//! and TLS, when the tp has a certificate.

use std::path::PathBuf;

/// `--tp-user`, `--tp-password`, `--tp-tls-ca`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TpLoginArgs {
    /// User to log in as on the tp's subscription port, when the tp has a
    /// users file (--users): it needs the read role to subscribe and write
    /// to publish.
    #[arg(long, value_name = "USER", requires = "tp_password")]
    pub tp_user: Option<String>,
    /// Password of --tp-user. Prefer its environment variable,
    /// TICKDB_TP_PASSWORD, which keeps it out of `ps`.
    // A password may begin with `-`: take it as the value, not a flag.
    #[arg(
        long,
        value_name = "PASSWORD",
        requires = "tp_user",
        allow_hyphen_values = true
    )]
    pub tp_password: Option<String>,
    /// Connect to the tp's subscription port with TLS, trusting the CA
    /// certificates (PEM) in FILE: needed when the tp has --tls-cert, whose
    /// certificate must be signed by one of them and name the host of --tp
    /// (an IP address or a DNS name). There is no default trust store:
    /// without this flag the connection is plaintext, and the login
    /// password crosses the network in clear.
    #[arg(long, value_name = "FILE")]
    pub tp_tls_ca: Option<PathBuf>,
}

impl TpLoginArgs {
    /// Makes every later connection of this process to a tp log in, and
    /// speak TLS; Err names a CA file that cannot be used.
    pub fn apply(&self) -> Result<(), String> {
        if let Some(ca) = &self.tp_tls_ca {
            tickdb_net::follow::set_tls(tickdb_net::tls::client(ca, "--tp-tls-ca")?);
        }
        if let (Some(u), Some(p)) = (&self.tp_user, &self.tp_password) {
            tickdb_net::follow::set_login(u.clone(), p.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::TpLoginArgs;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        login: TpLoginArgs,
    }

    #[test]
    fn a_password_that_begins_with_a_hyphen_is_a_value_not_a_flag() {
        let cli =
            Cli::try_parse_from(["rdb", "--tp-user", "u", "--tp-password", "-p"]).expect("parses");
        assert_eq!(cli.login.tp_password.as_deref(), Some("-p"));
    }
}
