//! `tickdb promote` and `tickdb switchover`: thin clients of a node's admin
//! HTTP API (`POST /admin/promote`, `POST /admin/switchover`), printing the
//! node's JSON answer. Exit 0 when the node did it, 1 when it refused (the
//! reason is printed), 2 when it could not be reached.

use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct PromoteArgs {
    /// The standby's HTTP address (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    pub node: String,
    /// Refuse unless the standby's journal holds this sequence.
    #[arg(long, value_name = "SEQ")]
    pub min_seq: Option<u64>,
    #[command(flatten)]
    pub tls: AdminTls,
}

#[derive(Args, Debug)]
pub struct SwitchoverArgs {
    /// The primary's HTTP address (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    pub node: String,
    /// The standby to hand over to: its name, HTTP address or peer address
    /// as the primary's /status lists it (default: the only standby).
    #[arg(long, value_name = "STANDBY")]
    pub to: Option<String>,
    /// How long the primary waits for the standby to hold everything
    /// before it gives up and stays the primary.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub tls: AdminTls,
}

/// How an admin command reaches a node whose HTTP speaks TLS.
#[derive(Args, Debug)]
pub struct AdminTls {
    /// Speak TLS to --node, trusting the CA certificates in FILE (PEM): for
    /// a node started with --tls-cert, whose HTTP port speaks only TLS. The
    /// certificate must name the host of --node. No system trust store is
    /// used.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
}

impl AdminTls {
    /// The TLS client, or none without --tls-ca; Err names the file and
    /// what is wrong with it.
    pub fn client(&self) -> Result<Option<tickdb_net::tls::ClientTls>, String> {
        self.tls_ca
            .as_deref()
            .map(|ca| tickdb_net::tls::client(ca, "--tls-ca"))
            .transpose()
    }
}

fn call(node: &str, path: &str, tls: &AdminTls) -> ExitCode {
    let tls = match tls.client() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tickdb: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(tickdb_node::failover::admin_post(tls.as_ref(), node, path)) {
        Ok((200, body)) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!("tickdb: {node} answered {status}: {body}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("tickdb: {e}");
            ExitCode::from(2)
        }
    }
}

pub fn promote(a: PromoteArgs) -> ExitCode {
    let mut path = "/admin/promote?why=tickdb%20promote".to_string();
    if let Some(s) = a.min_seq {
        path.push_str(&format!("&min_seq={s}"));
    }
    call(&a.node, &path, &a.tls)
}

pub fn switchover(a: SwitchoverArgs) -> ExitCode {
    let mut path = format!("/admin/switchover?timeout_ms={}", a.timeout_ms);
    if let Some(t) = &a.to {
        let enc: String = t
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' | b':' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        path.push_str(&format!("&to={enc}"));
    }
    call(&a.node, &path, &a.tls)
}
