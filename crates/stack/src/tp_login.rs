//! The user a tp client (`tickdb rdb`, `tickdb agg`) logs in as on the tp's
//! subscription port, when the tp has a users file.

/// `--tp-user`, `--tp-password`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TpLoginArgs {
    /// User to log in as on the tp's subscription port, when the tp has a
    /// users file (--users): it needs the read role to subscribe and write
    /// to publish.
    #[arg(long, value_name = "USER", requires = "tp_password")]
    pub tp_user: Option<String>,
    /// Password of --tp-user. Prefer its environment variable,
    /// TICKDB_TP_PASSWORD, which keeps it out of `ps`.
    #[arg(long, value_name = "PASSWORD", requires = "tp_user")]
    pub tp_password: Option<String>,
}

impl TpLoginArgs {
    /// Makes every later connection of this process to a tp log in.
    pub fn apply(&self) {
        if let (Some(u), Some(p)) = (&self.tp_user, &self.tp_password) {
            tickdb_net::follow::set_login(u.clone(), p.clone());
        }
    }
}
