//! The command line: flags (clap derive, every flag also readable from `KVSCOPE_*`), checks that
//! clap cannot express, exit codes, and one function per subcommand.
//!
//! Exit status: 0 fine, 1 a runtime failure (a port in use, a file that cannot be read), 2 a
//! usage error (clap's own, and ours: a bad `--workers`, listening beyond loopback without a
//! token), 3 `check` found a fatal verdict, 4 `check --fail-on-router-mismatch` found the
//! router's view (the event plane) differing from what the relays should have published, 5
//! `check --fail-on-index-divergence` found the router's index differing from what the engines
//! hold.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod commands;

pub use args::*;

/// Exit status for a usage error.
pub const EXIT_USAGE: u8 = 2;
/// Exit status of `check` when a verdict is fatal.
pub const EXIT_FATAL: u8 = 3;
/// Exit status of `check --fail-on-router-mismatch` when the reconciliation is not clean.
pub const EXIT_ROUTER_MISMATCH: u8 = 4;
/// Exit status of `check --fail-on-index-divergence` when the router's index (modelled, or read
/// from a recorded dump) differs from what the engines hold.
pub const EXIT_INDEX_DIVERGENCE: u8 = 5;

#[derive(Debug, Parser)]
#[command(
    name = "kvscope",
    version,
    about = "See what LLM engines' KV-cache event streams contain and what a KV router's normalizer does with each event.",
    after_help = "Exit status: 0 fine, 1 runtime failure, 2 usage error, 3 `check` found a fatal verdict,\n\
                  4 `check --fail-on-router-mismatch` found the event plane differing from the prediction,\n\
                  5 `check --fail-on-index-divergence` found the router's index differing from the engines.\n\
                  Logs go to stderr; set KVSCOPE_LOG (e.g. KVSCOPE_LOG=debug) for more."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Subscribe to engines and serve the dashboard, /ws and /metrics.
    Serve(ServeArgs),
    /// Start a simulated fleet publishing real ZMQ on loopback, and serve it.
    Demo(DemoArgs),
    /// Write frames exactly as received to a .kvcap capture.
    Record(RecordArgs),
    /// Serve a capture as if it were live.
    Replay(ReplayArgs),
    /// Re-publish a capture as a ZMQ PUB with a replay ROUTER, to test any indexer against it.
    Publish(PublishArgs),
    /// Run the normalizer over a capture; exit 3 if any verdict is fatal.
    Check(CheckArgs),
    /// Print the rules a policy runs, in evaluation order: step, rule, what it checks and decides.
    Rules(RulesArgs),
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KVSCOPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},zeromq=warn,async_nats=warn")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

pub(crate) fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(EXIT_USAGE)
}

pub(crate) fn failure(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(cli.command, Command::Check(_) | Command::Rules(_));
    init_logging(if quiet { "warn" } else { "info" });
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return failure(&format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(run(cli.command))
}

async fn run(command: Command) -> ExitCode {
    match command {
        Command::Serve(args) => commands::serve(args).await,
        Command::Demo(args) => commands::demo(args).await,
        Command::Record(args) => commands::record(args).await,
        Command::Replay(args) => commands::replay(args).await,
        Command::Publish(args) => commands::publish(args).await,
        Command::Check(args) => commands::check(args),
        Command::Rules(args) => commands::rules(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The flag's default, written as text for --help, is the one the server's own configs use.
    #[test]
    fn the_router_queue_s_default_is_the_server_s() {
        let Ok(Cli { command: Command::Demo(args) }) = Cli::try_parse_from(["kvscope", "demo"]) else { panic!("kvscope demo parses") };
        assert_eq!(args.policy.router_queue_bytes, crate::router::DEFAULT_QUEUE_BYTES);
    }

    #[test]
    fn sizes_and_speeds() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("2 KB").unwrap(), 2000);
        assert_eq!(parse_size("3x").unwrap_err(), "unknown size unit \"x\" in \"3x\"; use KiB, MiB, GiB (or KB, MB, GB)");
        assert_eq!(parse_speed("max").unwrap(), Speed(None));
        assert_eq!(parse_speed("2.5").unwrap(), Speed(Some(2.5)));
        assert!(parse_speed("0").is_err());
    }
}
