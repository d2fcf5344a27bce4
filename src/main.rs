//! The `holdfast` binary: parse the command line, load and validate the configuration before
//! any port is bound, then run until SIGTERM or SIGINT.

use clap::{Parser, Subcommand};
use holdfast::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

/// A Redis-protocol sidecar that holds requests through backend failover.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Configuration file (TOML); without it, the built-in default is used.
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a configuration file and print the effective configuration.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
}

/// EX_USAGE: the configuration is wrong.
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOLDFAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(Cmd::CheckConfig { file }) = cli.command {
        return match Config::load(Some(&file)) {
            Ok(config) => {
                print!("{}", config.to_toml_redacted());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("holdfast: bad configuration: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        };
    }
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("holdfast: bad configuration: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(config.server.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("holdfast: cannot listen on {}: {e}", config.server.listen);
            return ExitCode::FAILURE;
        }
    };
    let metrics = match tokio::net::TcpListener::bind(config.server.metrics_listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "holdfast: cannot listen on {}: {e}",
                config.server.metrics_listen
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(listen = %config.server.listen, metrics = %config.server.metrics_listen, "holdfast serving");
    match holdfast::run(config, listener, Some(metrics), shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdfast: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// Completes on the first SIGTERM or SIGINT; a second one exits at once.
async fn shutdown_signal() {
    wait_for_signal().await;
    tracing::info!("shutting down; a second signal exits at once");
    tokio::spawn(async {
        wait_for_signal().await;
        std::process::exit(1);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
