//! `tickdb eod` (end the trading day on a node) and `tickdb hdb` (the
//! historical database: serve it, verify it, import into it).

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tickdb_core::Schema;

/// How often `tickdb eod` looks at the node's progress.
const EOD_POLL_MS: u64 = 200;

#[derive(Args, Debug)]
pub struct EodArgs {
    /// The HTTP address (HOST:PORT) of the node whose tp ends the day: a
    /// `tickdb up` or `tickdb tp` (the primary, with replication).
    #[arg(long, default_value = "127.0.0.1:8700", value_name = "HOST:PORT")]
    pub node: String,
    /// The date the day is written as (YYYY-MM-DD). Default: today in the
    /// node's --eod-tz.
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub date: Option<String>,
    /// Return once the marker is journaled, without waiting for the node's
    /// rdb to write the day.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the day to be written.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub timeout_s: u64,
    #[command(flatten)]
    pub tls: crate::cmd_admin::AdminTls,
}

#[derive(Args, Debug)]
pub struct HdbArgs {
    #[command(subcommand)]
    pub cmd: HdbCmd,
}

#[derive(Subcommand, Debug)]
pub enum HdbCmd {
    /// Serve a historical database alone, with no tp (a kdb+ HDB process):
    /// SQL over HTTP, PostgreSQL wire and kdb+ IPC, with the derived `date`
    /// column.
    Serve(Box<tickdb_node::roles::HdbServeArgs>),
    /// Check every file of a historical database: footers, schemas, row
    /// counts (against the day's journal when it is still there), sort
    /// order, and the partition directories. Exit 0 when all is well, 1
    /// with each problem named, 2 when it cannot be read.
    Verify(VerifyArgs),
    /// Load CSV or Parquet files of past trades or quotes into the layout,
    /// one date partition per day of their timestamps. Importing a file
    /// again is skipped.
    Import(ImportArgs),
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The historical database directory.
    pub dir: PathBuf,
    /// The schema file the HDB was written with (default: the built-in
    /// trade and quote).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// A journal directory to count each end of day's rows against (the
    /// tp's DATA/journal), when it still holds that day.
    #[arg(long, value_name = "DIR")]
    pub journal: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The historical database directory (created if missing).
    pub dir: PathBuf,
    /// The table the files hold.
    #[arg(long)]
    pub table: String,
    /// Files to load: .csv (a header row naming the table's columns; time as
    /// integer nanoseconds since the epoch or an ISO 8601 timestamp) or
    /// .parquet (columns named as the table's).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The schema file (default: the built-in trade and quote).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// The time zone whose dates partition the rows (an IANA name); use the
    /// nodes' --eod-tz.
    #[arg(long, default_value = "UTC", value_name = "ZONE")]
    pub tz: String,
    /// Skip fsync (faster; a crash may then lose imported parts).
    #[arg(long)]
    pub no_fsync: bool,
}

fn load_schema(p: &Option<PathBuf>) -> Result<Schema, String> {
    match p {
        Some(p) => Schema::load(p).map(|(s, _)| s).map_err(|e| e.to_string()),
        None => Ok(Schema::default_schema()),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

pub fn eod(a: EodArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(eod_async(a))
}

async fn eod_async(a: EodArgs) -> ExitCode {
    use tickdb_node::failover::{admin_get, admin_post};
    let tls = match a.tls.client() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    let tls = tls.as_ref();
    let mut path = "/admin/eod".to_string();
    if let Some(d) = &a.date {
        path.push_str(&format!("?date={d}"));
    }
    let (seq, date) = match admin_post(tls, &a.node, &path).await {
        Ok((200, body)) => {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            (
                v["seq"].as_u64().unwrap_or(0),
                v["date"].as_str().unwrap_or("?").to_string(),
            )
        }
        Ok((status, body)) => {
            eprintln!("tickdb: {} answered {status}: {body}", a.node);
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    eprintln!("end of day {date}: marker journaled at seq {seq}");
    if a.no_wait {
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let mut said = String::new();
    loop {
        let st = match admin_get(tls, &a.node, "/status").await {
            Ok((200, body)) => serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default(),
            Ok((status, body)) => {
                eprintln!("tickdb: {} answered {status}: {body}", a.node);
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("tickdb: {e}");
                return ExitCode::from(2);
            }
        };
        let eod = &st["eod"];
        if eod.is_null() {
            eprintln!(
                "{} has no historical database of its own (--hdb): rdbs that follow it with --hdb write the day",
                a.node
            );
            return ExitCode::SUCCESS;
        }
        if eod["last"]["seq"].as_u64().is_some_and(|s| s >= seq) {
            println!("{}", eod["last"]);
            return ExitCode::SUCCESS;
        }
        let now = match eod["closing"]
            .as_array()
            .and_then(|c| c.iter().find(|d| d["seq"].as_u64() == Some(seq)))
        {
            Some(d) => format!("writing {} rows of {date} to the HDB", d["rows"]),
            None => "waiting for the rdb to reach the marker".to_string(),
        };
        if now != said {
            eprintln!("{now} ({:.1} s)", started.elapsed().as_secs_f64());
            said = now;
        }
        if let Some(e) = eod["last_error"].as_str() {
            eprintln!("tickdb: the end of day failed and is being retried: {e}");
        }
        if started.elapsed() > Duration::from_secs(a.timeout_s) {
            eprintln!(
                "tickdb: the day was not written within {} s; /status eod on {} says how far it got",
                a.timeout_s, a.node
            );
            return ExitCode::from(1);
        }
        tokio::time::sleep(Duration::from_millis(EOD_POLL_MS)).await;
    }
}

pub fn verify(a: VerifyArgs) -> ExitCode {
    let schema = match load_schema(&a.schema) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    match tickdb_hdb::verify(&a.dir, &schema, a.journal.as_deref(), progress) {
        Ok(r) => {
            for p in &r.problems {
                println!("PROBLEM {}: {}", p.path.display(), p.what);
            }
            println!(
                "{}: {} files, {} rows checked; {} problems",
                a.dir.display(),
                r.files_checked,
                r.rows,
                r.problems.len()
            );
            if r.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("tickdb: {e}");
            ExitCode::from(2)
        }
    }
}

pub fn import(a: ImportArgs) -> ExitCode {
    let schema = match load_schema(&a.schema) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(def) = schema.table(&a.table) else {
        let names: Vec<&str> = schema.tables.iter().map(|t| t.name.as_str()).collect();
        eprintln!(
            "tickdb: no table '{}' in the schema (it has {})",
            a.table,
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    let tz: chrono_tz::Tz = match a.tz.parse() {
        Ok(tz) => tz,
        Err(_) => {
            eprintln!("tickdb: --tz {:?} is not a time zone name (IANA names such as UTC, America/New_York)", a.tz);
            return ExitCode::from(2);
        }
    };
    let opts = tickdb_hdb::ImportOptions {
        fsync: !a.no_fsync,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    match tickdb_hdb::import(&a.dir, def, &a.files, tz, &opts) {
        Ok(r) => {
            for f in &r.files {
                for p in &f.committed {
                    println!(
                        "{}: {} rows -> {}",
                        f.file.display(),
                        p.rows,
                        p.path.display()
                    );
                }
                for (date, p) in &f.skipped {
                    println!(
                        "{}: {date} already imported as {}, skipped",
                        f.file.display(),
                        p.display()
                    );
                }
            }
            println!(
                "imported {} rows in {} parts; {} parts skipped (already imported)",
                r.rows_committed(),
                r.parts_committed(),
                r.parts_skipped()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tickdb: {e}");
            ExitCode::from(1)
        }
    }
}
