//! `tickdb`: one binary, a subcommand per role.

mod cli;
mod cmd_journal;
mod demo_feed;
mod embedded_rdb;
mod http;
mod persist;
mod roles;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "tickdb",
    version,
    about = "A real-time tick database: tickerplant, journal, real-time databases.",
    long_about = "A real-time tick database for market data.\n\n\
        Feed handlers write InfluxDB line protocol (TCP or HTTP) to the tickerplant (tp), \
        which journals every update before it publishes and acknowledges it. Real-time \
        databases (rdb) replay the journal, follow the tp live, and answer SQL over HTTP.\n\n\
        Start with `tickdb up --demo-feed 48000`: tp + rdb in one process with a simulated feed."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run tp + rdb in one process (no network hop between them): the
    /// embedded default. HTTP (writes and queries) on --http-port.
    Up(roles::UpArgs),
    /// Run the tickerplant alone: ILP ingest, journal, subscriptions.
    Tp(roles::TpOnlyArgs),
    /// Run a real-time database that follows a tp: replays the journal up to
    /// the tp's current sequence, then applies live updates.
    Rdb(roles::RdbArgs),
    /// Inspect, verify and repair a journal directory.
    Journal(cmd_journal::JournalArgs),
    /// Benchmarks against peers (QuestDB, the raw disk) measured in the same
    /// run; `bench report` regenerates docs/benchmarks.md.
    Bench(tickdb_bench::BenchArgs),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Journal(args) => cmd_journal::run(args),
        Cmd::Bench(args) => tickdb_bench::run(args),
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
                    Cmd::Up(a) => roles::up(a).await,
                    Cmd::Tp(a) => roles::tp(a).await,
                    Cmd::Rdb(a) => roles::rdb(a).await,
                    Cmd::Journal(_) | Cmd::Bench(_) => unreachable!("handled above"),
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
