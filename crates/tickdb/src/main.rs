//! `tickdb`: one binary, a subcommand per role.

mod cmd_admin;
mod cmd_hdb;
mod cmd_journal;
mod cmd_user;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use tickdb_node::config_file::{self, ConfigFileError};
use tickdb_node::roles;

#[derive(Parser, Debug)]
#[command(
    name = "tickdb",
    version,
    about = "A real-time tick database: tickerplant, journal, real-time databases.",
    long_about = "A real-time tick database for market data.\n\n\
        Feed handlers write InfluxDB line protocol (TCP or HTTP) to the tickerplant (tp), \
        which journals every update before it publishes and acknowledges it. Real-time \
        databases (rdb) replay the journal, follow the tp live, and answer SQL over HTTP.\n\n\
        Start with `tickdb up --demo-feed 48000`: tp + rdb in one process with a simulated feed.\n\n\
        Settings: every flag can also be set in the config file (--config) and by its \
        TICKDB_* environment variable (--ilp-port is TICKDB_ILP_PORT); a flag wins over the \
        environment, which wins over the file. `tickdb config print ROLE` shows the result.\n\n\
        Security: with --users FILE a node asks every port for a user (docs/security.md); \
        `tickdb promote`, `switchover` and `eod` then log in as TICKDB_ADMIN_USER with \
        TICKDB_ADMIN_PASSWORD, and so does a primary handing its role to a standby."
)]
struct Cli {
    /// Settings file (TOML): `key = value` per flag, named as the flag
    /// without its dashes (`ilp_port = "rp,8709"`, `fsync = "interval"`,
    /// switches `= true`). Top-level keys apply to every command that has
    /// the flag; a table per command (`[rdb]`, `[hdb.serve]`) to that
    /// command only, and wins. A key that is no flag is an error.
    /// Precedence: file < TICKDB_* environment < flag.
    #[arg(long, global = true, value_name = "FILE", env = "TICKDB_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run tp + rdb in one process (no network hop between them): the
    /// embedded default. HTTP (writes and queries) on --http-port.
    Up(Box<roles::UpArgs>),
    /// Run the tickerplant alone: ILP ingest, journal, subscriptions.
    Tp(roles::TpOnlyArgs),
    /// Run a real-time database that follows a tp: replays the journal up to
    /// the tp's current sequence, then applies live updates.
    Rdb(roles::RdbArgs),
    /// Simulated market data as in the Optane kdb+ study: trades and quotes
    /// 1:10 over a skewed symbol universe, stamped with their generation
    /// time, written as ILP to a tp at a paced rate (default 48,000/s);
    /// --prestress first.
    ///
    /// The study: "Using Intel Optane memory to expand the capacity of a
    /// typical realtime kdb market data system" (Eoin Cunning and Nick
    /// McDaid).
    Feed(tickdb_stack::feed::FeedArgs),
    /// The aggregation engine: subscribes to trade and quote, keeps minute
    /// bars and daily stats per symbol, publishes them back through the tp
    /// as the keyed tables trade_1m, quote_1m and daily.
    Agg(tickdb_stack::agg::AggArgs),
    /// Polls an rdb: tick and aggregated-row latency, the time of a
    /// one-symbol as-of join, memory per domain and RSS; writes a CSV time
    /// series, a JSON summary and SVG plots.
    Monitor(tickdb_stack::monitor::MonitorArgs),
    /// Inspect, verify and repair a journal directory.
    Journal(cmd_journal::JournalArgs),
    /// End the trading day now (kdb+'s `.u.end`): the node's tp journals an
    /// end-of-day marker, and every rdb with --hdb writes the day to its
    /// historical database as Parquet and drops it from memory. Waits for
    /// the node's own rdb to finish, showing progress (docs/history.md).
    Eod(cmd_hdb::EodArgs),
    /// The historical database (Parquet partitioned by date): serve it
    /// alone, verify it, import past data into it (docs/history.md).
    Hdb(cmd_hdb::HdbArgs),
    /// Make a standby the primary, in a new epoch (docs/failover.md). Use
    /// when its primary is lost and there is no etcd to fail over
    /// automatically; make sure the old primary is down or cut off.
    Promote(cmd_admin::PromoteArgs),
    /// Hand the primary's role to a standby, losing nothing in any
    /// replication mode: the primary stops taking writes, waits until the
    /// standby holds everything, has it promoted and follows it.
    Switchover(cmd_admin::SwitchoverArgs),
    /// The effective configuration.
    Config(ConfigArgs),
    /// Users and their credentials (the --users file; docs/security.md).
    User(cmd_user::UserArgs),
    /// Benchmarks against peers (QuestDB, the raw disk) measured in the same
    /// run; `bench report` regenerates docs/benchmarks.md.
    Bench(tickdb_bench::BenchArgs),
}

#[derive(clap::Args, Debug)]
struct ConfigArgs {
    #[command(subcommand)]
    cmd: ConfigCmd,
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Print the settings a command would run with, as TOML: each value
    /// with where it came from (flag, environment, config file, default),
    /// passwords, tokens and secrets masked. Example:
    /// `tickdb config print --config tickdb.toml rdb --http-port 8800`.
    Print {
        /// The command and its flags, as you would run it (`rdb --tp
        /// HOST:PORT`, `hdb serve`).
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<OsString>,
    },
}

/// `tickdb config print`: resolves `words` as the command it names would.
fn config_print(root: &clap::Command, config: Option<PathBuf>, words: Vec<OsString>) -> ExitCode {
    let mut argv = vec![OsString::from("tickdb")];
    if let Some(c) = config {
        argv.push(OsString::from("--config"));
        argv.push(c.into_os_string());
    }
    argv.extend(words);
    let typed = config_file::typed_flags(&argv);
    let m = match config_file::resolve(root, argv) {
        Ok(m) => m,
        Err(ConfigFileError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    let (path, leaf) = config_file::leaf(&m);
    print!("{}", config_file::render(root, &path, leaf, &typed));
    ExitCode::SUCCESS
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TICKDB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// The exit code of a blocking role (feed, monitor).
fn exit(r: Result<(), tickdb_stack::StackError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickdb: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    // Before any thread starts: the allocator's thresholds for every role.
    tickdb_node::malloc::tune();
    let root = config_file::with_env(Cli::command());
    let matches = match config_file::resolve(&root, std::env::args_os().collect()) {
        Ok(m) => m,
        Err(ConfigFileError::Clap(e)) => e.exit(),
        Err(e) => {
            eprintln!("tickdb: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    match cli.cmd {
        Cmd::Config(ConfigArgs {
            cmd: ConfigCmd::Print { command },
        }) => config_print(&root, cli.config, command),
        Cmd::User(args) => cmd_user::run(args),
        Cmd::Journal(args) => cmd_journal::run(args),
        Cmd::Eod(args) => cmd_hdb::eod(args),
        Cmd::Hdb(cmd_hdb::HdbArgs {
            cmd: cmd_hdb::HdbCmd::Verify(a),
        }) => cmd_hdb::verify(a),
        Cmd::Hdb(cmd_hdb::HdbArgs {
            cmd: cmd_hdb::HdbCmd::Import(a),
        }) => {
            init_logging();
            cmd_hdb::import(a)
        }
        Cmd::Promote(args) => cmd_admin::promote(args),
        Cmd::Switchover(args) => cmd_admin::switchover(args),
        Cmd::Bench(args) => tickdb_bench::run(args),
        Cmd::Feed(args) => {
            init_logging();
            exit(tickdb_stack::feed::run(args).map(|_| ()))
        }
        Cmd::Monitor(args) => {
            init_logging();
            exit(tickdb_stack::monitor::run(args).map(|_| ()))
        }
        role => {
            init_logging();
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("tickdb-io")
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("tickdb: cannot start the async runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            let result = rt.block_on(async move {
                match role {
                    Cmd::Up(a) => roles::up(*a).await,
                    Cmd::Tp(a) => roles::tp(a).await,
                    Cmd::Rdb(a) => roles::rdb(a).await,
                    Cmd::Agg(a) => tickdb_stack::agg::run(a).await.map_err(|e| e.to_string()),
                    Cmd::Hdb(cmd_hdb::HdbArgs {
                        cmd: cmd_hdb::HdbCmd::Serve(a),
                    }) => roles::hdb(*a).await,
                    Cmd::Journal(_)
                    | Cmd::Eod(_)
                    | Cmd::Hdb(_)
                    | Cmd::Bench(_)
                    | Cmd::Config(_)
                    | Cmd::User(_)
                    | Cmd::Feed(_)
                    | Cmd::Monitor(_)
                    | Cmd::Promote(_)
                    | Cmd::Switchover(_) => {
                        unreachable!("handled above")
                    }
                }
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tickdb: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
