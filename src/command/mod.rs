//! Commands: a request's arguments checked against the command table (name, subcommand,
//! arity) and its idempotence class for this invocation. Errors are worded exactly as Redis
//! words them, so a client cannot tell holdfast's refusal from the server's.

pub mod rows;
pub mod shebang;
pub mod table;
pub mod wait;

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::OnceLock;
use table::{Exec, Idempotence, Spec};

/// A request that passed the table.
#[derive(Debug, Clone)]
pub struct Command {
    /// Its row (the subcommand's row for containers).
    pub spec: &'static Spec,
    /// The arguments, the name first.
    pub args: Vec<Bytes>,
    /// The class of this invocation.
    pub class: Idempotence,
    /// The bytes the client sent it in, when they are a plain multibulk of `args`: a backend
    /// connection may write them instead of encoding `args` again.
    pub raw: Option<Bytes>,
}

/// A request the table refuses; the connection answers with [`CommandError::reply`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No row.
    #[error("unknown command")]
    Unknown {
        /// The arguments as sent.
        args: Vec<Bytes>,
    },
    /// A container without a row for the subcommand.
    #[error("unknown subcommand")]
    UnknownSubcommand {
        /// The container's name.
        container: &'static str,
        /// The subcommand as sent.
        sub: Bytes,
    },
    /// Wrong number of arguments.
    #[error("wrong number of arguments")]
    Arity {
        /// The row's name.
        name: &'static str,
    },
}

/// Redis echoes at most this many bytes of a name, and of the arguments together.
const ECHO_MAX: usize = 128;

/// An argument as Redis echoes it in an error: printed with C's `%.*s`, so it ends at its
/// first NUL byte, and at most `max` bytes. (CR and LF become spaces when the error is
/// written; see `resp::encode_reply`.)
fn clip(b: &[u8], max: usize) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(max);
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// An argument echoed in an error reply, as Redis echoes one.
pub fn echo(arg: &[u8]) -> String {
    clip(arg, ECHO_MAX)
}

impl CommandError {
    /// The error reply's text, without `-`.
    pub fn reply(&self) -> String {
        // Redis's wording, byte for byte (its `processCommand` and
        // `addReplySubcommandSyntaxError`).
        match self {
            CommandError::Unknown { args } => {
                let name = args.first().map(|a| clip(a, ECHO_MAX)).unwrap_or_default();
                // Redis appends `'arg' ` while what it has appended is under 128 bytes, each
                // argument cut to what is left of the 128.
                let mut echoed = String::new();
                for arg in args.iter().skip(1) {
                    if echoed.len() >= ECHO_MAX {
                        break;
                    }
                    let room = ECHO_MAX - echoed.len();
                    echoed.push_str(&format!("'{}' ", clip(arg, room)));
                }
                format!("ERR unknown command '{name}', with args beginning with: {echoed}")
            }
            CommandError::UnknownSubcommand { container, sub } => format!(
                "ERR unknown subcommand '{}'. Try {container} HELP.",
                clip(sub, ECHO_MAX)
            ),
            CommandError::Arity { name } => format!(
                "ERR wrong number of arguments for '{}' command",
                name.to_ascii_lowercase()
            ),
        }
    }
}

impl Command {
    /// Checks `args` against the table.
    ///
    /// # Errors
    /// [`CommandError`] for an unknown command or subcommand or a wrong arity.
    pub fn parse(args: Vec<Bytes>) -> Result<Command, CommandError> {
        let Some(name) = args.first() else {
            return Err(CommandError::Unknown { args });
        };
        let Some(mut spec) = lookup(name) else {
            return Err(CommandError::Unknown { args });
        };
        if spec.container {
            if !spec.arity_ok(args.len()) {
                return Err(CommandError::Arity { name: spec.name });
            }
            let sub = args.get(1).cloned().unwrap_or_default();
            spec = lookup_sub(spec, &sub).ok_or(CommandError::UnknownSubcommand {
                container: spec.name,
                sub,
            })?;
        }
        if !spec.arity_ok(args.len()) {
            return Err(CommandError::Arity { name: spec.name });
        }
        let class = spec.class_of(&args);
        Ok(Command {
            spec,
            args,
            class,
            raw: None,
        })
    }

    /// [`Command::parse`] of a request that came in as `raw`.
    ///
    /// # Errors
    /// As [`Command::parse`].
    pub fn parse_raw(args: Vec<Bytes>, raw: Option<Bytes>) -> Result<Command, CommandError> {
        Command::parse(args).map(|command| Command { raw, ..command })
    }

    /// The key arguments.
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        table::key_indices(self.spec.keys, &self.args).filter_map(|i| self.args.get(i))
    }

    /// The Pub/Sub channel it publishes to (`PUBLISH`, `SPUBLISH`): routed by the channel
    /// prefixes, not the key prefixes.
    pub fn channel(&self) -> Option<&[u8]> {
        (self.spec.reach == table::Reach::Channel)
            .then(|| self.args.get(1).map(|c| c.as_ref()))
            .flatten()
    }

    /// Whether it may change data, which `min_replicas_ack` waits for a replica to have:
    /// every class but a read, bar a connection-bound read (`XREAD … BLOCK`).
    pub fn writes(&self) -> bool {
        self.class != Idempotence::Read && !self.spec.blocking_read
    }

    /// Whether an error reply to it may come after it wrote: a script that raised after
    /// `redis.call` changed something (Redis does not roll a script back).
    pub fn error_may_write(&self) -> bool {
        self.spec.error_may_write(self.class)
    }

    /// Whether holdfast answers it itself.
    pub fn local(&self) -> Option<table::Local> {
        match self.spec.exec {
            Exec::Local(local) => Some(local),
            Exec::Forward => None,
        }
    }

    /// The bounded-cardinality label for metrics: the row's name with
    /// `server.metrics_per_command`, else the command's kind, `read` or `write`.
    pub fn label(&self) -> &'static str {
        crate::metrics::command_label(self.spec.name, self.class == table::Idempotence::Read)
    }
}

/// Hashed with foldhash, not SipHash: the keys are the table's own names and never grow, so
/// no input can crowd them, and SipHash cost more than the rest of a lookup.
type Index = HashMap<&'static str, &'static Spec, foldhash::fast::FixedState>;

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| rows::ROWS.iter().map(|spec| (spec.name, spec)).collect())
}

/// Finds the row for a command name, case-insensitively. Container commands need their
/// subcommand: `lookup(b"CONFIG", Some(b"get"))` finds `CONFIG|GET`.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    let mut buf = [0u8; NAME_MAX];
    index().get(upper_ascii(name, &mut buf)?).copied()
}

/// Finds the row of a container's subcommand.
pub fn lookup_sub(container: &Spec, sub: &[u8]) -> Option<&'static Spec> {
    let mut buf = [0u8; NAME_MAX];
    let sub = upper_ascii(sub, &mut buf)?;
    let name = format!("{}|{}", container.name, sub);
    index().get(name.as_str()).copied()
}

/// Every row, for `COMMAND` and tests.
pub fn all() -> &'static [Spec] {
    rows::ROWS
}

/// Longest command name looked up; anything longer cannot be in the table.
const NAME_MAX: usize = 64;

/// `name` in upper case, in `buf`, without allocating (this runs for every request).
fn upper_ascii<'b>(name: &[u8], buf: &'b mut [u8; NAME_MAX]) -> Option<&'b str> {
    let upper = buf.get_mut(..name.len())?;
    for (to, from) in upper.iter_mut().zip(name) {
        *to = from.to_ascii_uppercase();
    }
    std::str::from_utf8(upper).ok()
}
