//! The command line: options, the subcommands, and the help that says what a person
//! running holdfast needs besides them: its environment, ports, signals and exit codes. The
//! man page (`docs/holdfast.1`) is rendered from the same definition, and a test keeps the
//! two equal.

use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

/// Exit status for a configuration (or a log setting) that cannot be used: EX_USAGE.
pub const EXIT_CONFIG: u8 = 64;

/// What `--help` adds after the options.
const AFTER_HELP: &str = "\
Environment:
  HOLDFAST_<SECTION>__<KEY>   any configuration key, over the file (HOLDFAST_SERVER__LISTEN,
                              HOLDFAST_BACKENDS__LOCAL__PATH); an unknown one is refused
  HOLDFAST_LOG                log level: error, warn, info (default), debug, trace, off,
                              then target=level directives (info,holdfast::exec=debug)
  HOLDFAST_LOG_FORMAT         text (default) or json

Ports (configuration [server]):
  listen          127.0.0.1:6380  the Redis protocol
  metrics_listen  127.0.0.1:9380  /metrics, /healthz, /readyz, /backendz (and /config)

Copy and verify (docs/moving.md):
  REDISCLI_AUTH   the password holdfast copy and holdfast verify authenticate with

Signals:
  SIGHUP          read the configuration again and apply it (a bad one is logged, the
                  running one stays)
  SIGTERM, SIGINT stop accepting clients, let held requests finish within
                  server.shutdown_grace, exit 0; a second signal exits 1 at once

Exit status:
  0   stopped by a signal, every client drained
  1   could not start: a port in use, the runtime; verify: keys differ
  2   copy or verify could not finish: holdfast unreachable, or it refused
  64  a configuration, or HOLDFAST_LOG / HOLDFAST_LOG_FORMAT, that cannot be used

Without --config, holdfast serves its embedded default: SQLite in data/holdfast.db.";

/// A Redis-protocol sidecar that holds requests through backend failover.
#[derive(Parser, Debug)]
#[command(name = "holdfast", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// Configuration file (TOML), before or after the subcommand; without it, the built-in
    /// default is used.
    #[arg(long, short, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What to do instead of serving.
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Validate a configuration and print it as holdfast reads it, passwords redacted; exit 64
    /// naming the key when it cannot be used.
    CheckConfig {
        /// The file to check (or --config's; neither: the built-in default).
        file: Option<PathBuf>,
    },
    /// Copy a mirrored namespace's keys to its mirror, through the running holdfast (the
    /// configuration's listen address), while it serves; resumable. docs/moving.md.
    Copy {
        /// The namespace and the holdfast.
        #[command(flatten)]
        target: MoveTarget,
        /// Where the position is kept between runs (default holdfast-copy-NAMESPACE.state).
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// Start from the first key, not from the state file's position.
        #[arg(long)]
        restart: bool,
    },
    /// Compare a mirrored namespace's keys on its backend and its mirror (type, value, time
    /// to live); exit 1 when any differs. docs/moving.md.
    Verify {
        /// The namespace and the holdfast.
        #[command(flatten)]
        target: MoveTarget,
        /// Differences printed (all are counted).
        #[arg(long, default_value_t = 20)]
        show: usize,
    },
}

/// The running holdfast and the namespace `copy` and `verify` work on.
#[derive(clap::Args, Debug, Clone)]
pub struct MoveTarget {
    /// The mirrored namespace.
    #[arg(long, short)]
    pub namespace: String,
    /// holdfast's Redis endpoint (default: the configuration's server.listen).
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// The user to authenticate as (its password from REDISCLI_AUTH).
    #[arg(long)]
    pub user: Option<String>,
    /// Keys per batch.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
}

impl Cli {
    /// The configuration file a run names: `check-config`'s own, else `--config`'s.
    pub fn config_file(&self) -> Option<&std::path::Path> {
        match &self.command {
            Some(Cmd::CheckConfig { file: Some(file) }) => Some(file),
            _ => self.config.as_deref(),
        }
    }
}

/// The man page, as roff.
pub fn man_page() -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = clap_mangen::Man::new(Cli::command()).render(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_before_or_after_the_subcommand() {
        for args in [
            &["holdfast", "--config", "f.toml", "check-config"][..],
            &["holdfast", "check-config", "--config", "f.toml"][..],
            &["holdfast", "check-config", "f.toml"][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(
                cli.config_file(),
                Some(std::path::Path::new("f.toml")),
                "{args:?}"
            );
        }
        let cli = Cli::try_parse_from(["holdfast", "check-config"]).unwrap();
        assert_eq!(cli.config_file(), None);
    }

    #[test]
    fn help_says_environment_ports_signals_and_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        for want in [
            "HOLDFAST_LOG",
            "HOLDFAST_LOG_FORMAT",
            "127.0.0.1:6380",
            "127.0.0.1:9380",
            "SIGHUP",
            "SIGTERM",
            "64",
        ] {
            assert!(help.contains(want), "{want} not in --help:\n{help}");
        }
        let man = man_page();
        assert!(
            man.contains("SIGHUP") && man.contains("check\\-config"),
            "{man}"
        );
    }
}
