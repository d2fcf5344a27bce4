//! The `holdfast` binary: parse the command line, load and validate the configuration before
//! any port is bound, then run until SIGTERM or SIGINT.

use clap::Parser;
use holdfast::cli::{Cli, Cmd, EXIT_CONFIG};
use holdfast::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc rather than the system's malloc: under pipelined load a third of the runtime
/// thread's time went to glibc's allocator (`malloc`, `_int_malloc`, `_int_free`,
/// `malloc_consolidate`), freeing on one thread what the database driver's thread allocated.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = holdfast::logging::init() {
        eprintln!("holdfast: bad environment: {e}");
        return ExitCode::from(EXIT_CONFIG);
    }
    if let Some(Cmd::CheckConfig { .. }) = cli.command {
        return match Config::load(cli.config_file()) {
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
    if let Some(command) = cli.command {
        return moving(command, config.server.listen);
    }
    let runtime = match runtime(config.server.threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(config, cli.config))
}

/// `holdfast copy` and `holdfast verify`, against the holdfast listening at `listen`.
fn moving(command: Cmd, listen: std::net::SocketAddr) -> ExitCode {
    let runtime = match runtime(1) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("holdfast: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match command {
            Cmd::Copy {
                target,
                state,
                restart,
            } => holdfast::mover::copy(&target, listen, state, restart)
                .await
                .map(|keys| {
                    println!("copied {keys} keys of namespace {}", target.namespace);
                    true
                }),
            Cmd::Verify { target, show } => holdfast::mover::verify(&target, listen, show)
                .await
                .map(|(keys, found)| {
                    println!(
                        "compared {keys} keys of namespace {}: {found} differ",
                        target.namespace
                    );
                    found == 0
                }),
            Cmd::CheckConfig { .. } => Ok(true),
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("holdfast: {e}");
            ExitCode::from(2)
        }
    }
}

/// One thread (the default): a current-thread runtime, no cross-thread wake-ups. More: a
/// multi-thread runtime with that many workers (0: one per core).
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 1 {
        builder.worker_threads(threads);
    }
    builder.enable_all().build()
}

async fn serve(config: Config, path: Option<PathBuf>) -> ExitCode {
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
    config.log_summary();
    let proxy = match holdfast::Holdfast::new(config) {
        Ok(proxy) => proxy,
        Err(e) => {
            eprintln!("holdfast: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    tokio::spawn(reload_on_hangup(proxy.clone(), path));
    proxy
        .serve(listener, Some(metrics), shutdown_signal())
        .await;
    ExitCode::SUCCESS
}

/// On SIGHUP, reads the configuration again (same file, same environment) and applies it; a
/// bad one is logged and the running one stays.
async fn reload_on_hangup(proxy: holdfast::Holdfast, path: Option<PathBuf>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; reload needs a restart");
        return;
    };
    while hangups.recv().await.is_some() {
        let config = match Config::load(path.as_deref()) {
            Ok(config) => config,
            Err(e) => {
                holdfast::metrics::config_reload(false);
                tracing::error!(error = %e, "SIGHUP: bad configuration; the running one stays");
                continue;
            }
        };
        match proxy.reload(config) {
            Ok(generation) => tracing::info!(generation, "SIGHUP: configuration applied"),
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: configuration rejected; the running one stays")
            }
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
