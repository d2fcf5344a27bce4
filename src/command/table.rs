//! The command table: one row per command holdfast serves.
//!
//! A row is data: the name, Redis's arity, where the keys are, the idempotence class, and how
//! the command is executed. Routing and retry read only this table, so adding a command is
//! adding a row in `rows.rs`. Arguments that change a command's class (`SET ... NX`,
//! `XADD key *`) are handled by the row's `refine` function, never by special cases elsewhere.

use bytes::Bytes;

/// What repeating a command does, which decides what the retry loop may do with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Idempotence {
    /// No effect: retried on NotAttempted and Transient.
    Read,
    /// Repeating it leaves the same state and the same reply.
    Idempotent,
    /// Repeating it leaves the same state, but the reply says whether this call changed it.
    IdempotentEffect,
    /// Repeating it changes the state again: retried on NotAttempted only.
    NonIdempotent,
    /// Needs a backend connection of its own (blocking, transactions); never retried.
    ConnectionBound,
}

impl Idempotence {
    /// The label used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Idempotence::Read => "read",
            Idempotence::Idempotent => "idempotent",
            Idempotence::IdempotentEffect => "idempotent_effect",
            Idempotence::NonIdempotent => "non_idempotent",
            Idempotence::ConnectionBound => "connection_bound",
        }
    }
}

/// Where a command's keys are among its arguments (index 0 is the command name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// The command touches no key; it goes to the catch-all namespace.
    None,
    /// Redis's `(first, last, step)` convention; a negative `last` counts from the end
    /// (-1 is the last argument).
    Range {
        /// Index of the first key.
        first: usize,
        /// Index of the last key; negative counts from the end.
        last: isize,
        /// Distance between two keys.
        step: usize,
    },
    /// A key count at `at`, followed by that many keys (EVAL, LMPOP, SINTERCARD, ...).
    /// With `dest`, argument 1 is a key too (ZUNIONSTORE dest numkeys key ...).
    Numkeys {
        /// Index of the count argument.
        at: usize,
        /// Whether argument 1 is a destination key.
        dest: bool,
    },
    /// XREAD / XREADGROUP: the first half of the arguments after the `STREAMS` token.
    Streams,
    /// The key at argument 1, and the destination after a `STORE` (or `STOREDIST`) option
    /// when there is one (`SORT … STORE dest`, `GEORADIUS … STORE dest`): a destination is
    /// routed and checked like any key, so it cannot land in another namespace.
    Store(StoreOptions),
}

/// How a command's options are read to find its `STORE` destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOptions {
    /// `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC | DESC] [ALPHA]
    /// [STORE dest]`
    Sort,
    /// GEORADIUS's options from this argument on: `COUNT n [ANY]`, `STORE dest`,
    /// `STOREDIST dest`, flags.
    Georadius(usize),
}

/// What an invocation may touch beyond the keys [`Keys`] finds: what the check of a user
/// limited to some namespaces must also cover (docs/operating.md, "Namespaces and users").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Nothing: its keys are all it touches.
    Keys,
    /// The keys its `BY` and `GET` patterns name (`SORT`, `SORT_RO`).
    SortPatterns,
    /// Any key: a script or a function calls commands on keys nobody declared.
    Scripts,
    /// Every key of its backend's database (`KEYS`, `SCAN`, `RANDOMKEY`, `DBSIZE`).
    Keyspace,
    /// The backend server's configuration, its passwords included (`CONFIG GET`).
    ServerConfig,
    /// Another database of its backend, given `DB n` (`COPY`).
    Database,
    /// The backend server's configuration, changed (`CONFIG SET`): a user with `admin`
    /// only.
    ServerAdmin,
    /// A Pub/Sub channel, argument 1 (`PUBLISH`): routed by the namespaces' `channels`.
    Channel,
}

/// Commands holdfast answers itself instead of forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// `PING [message]`
    Ping,
    /// `ECHO message`
    Echo,
    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`
    Hello,
    /// `AUTH [user] pass`
    Auth,
    /// `SELECT db`
    Select,
    /// `CLIENT ID | SETNAME | GETNAME | SETINFO | INFO | ...`
    Client,
    /// `INFO [section ...]`
    Info,
    /// `COMMAND [COUNT | INFO | DOCS | LIST]`
    Command,
    /// `QUIT`
    Quit,
    /// `RESET`
    Reset,
    /// `MULTI`: start queueing.
    Multi,
    /// `EXEC`: run the queue as one transaction on a connection of its own.
    Exec,
    /// `DISCARD`
    Discard,
    /// `WATCH key ...`: kept on the client's own backend connection.
    Watch,
    /// `UNWATCH`
    Unwatch,
    /// `READONLY` / `READWRITE`: cluster commands, answered as a standalone Redis does.
    ClusterOnly,
    /// `SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE` and their `UNSUBSCRIBE`s: the client's own
    /// subscriptions, on backend connections of its own.
    Subscribe,
    /// `PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB`: asked of every
    /// backend carrying channels the client may reach.
    Pubsub,
    /// `MONITOR`: holdfast's own traffic, fed to the client (`connection/monitor.rs`).
    Monitor,
    /// `ACL WHOAMI | USERS | LIST`: over holdfast's `[[users]]`.
    Acl,
    /// `HOLDFAST COPY | RECOPY | VERIFY | MIRROR`: moving a namespace to its mirror
    /// (`connection/moving.rs`).
    Holdfast,
}

/// How a command is executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// Sent to the backend of its namespace through the retry loop.
    Forward,
    /// Answered by the connection itself.
    Local(Local),
}

/// Decides a class from the arguments, for commands whose class depends on them.
pub type Refine = fn(&[Bytes]) -> Idempotence;

/// Says whether the nil at this path of a reply is a RESP2 null array.
pub type NilPath = fn(&[usize]) -> bool;

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Upper-case name; container subcommands are written `CONFIG|GET`.
    pub name: &'static str,
    /// Redis's arity: positive is exact, negative is a minimum; counts the name itself.
    pub arity: i32,
    /// Where the keys are.
    pub keys: Keys,
    /// The class when `refine` is absent or before it runs.
    pub class: Idempotence,
    /// Arguments that change the class.
    pub refine: Option<Refine>,
    /// Local or forwarded.
    pub exec: Exec,
    /// A nil reply is a RESP2 null array (`*-1`), not a null bulk string (`$-1`), when the
    /// command has at least this many arguments (0: never). `LPOP key` answers `$-1`, but
    /// `LPOP key count` answers `*-1`.
    pub null_array_from: u8,
    /// Where a nil inside the reply is a RESP2 null array, by its path of indices from the
    /// top (`GEOPOS`: `[i]`; `XPENDING`: `[3]`). Elsewhere a nested nil is `$-1`.
    pub nested_nil_array: Option<NilPath>,
    /// Its RESP3 doubles are Redis's "human" long doubles (geo coordinates), not `%.17g`.
    pub human_doubles: bool,
    /// The name is a container: the real row is `NAME|SUBCOMMAND`.
    pub container: bool,
    /// About the whole keyspace (FLUSHDB, FLUSHALL): sent to the backend of every namespace
    /// the client may reach, not only to the catch-all's.
    pub every_backend: bool,
    /// About the backend connection it is sent on (`WAIT` counts that connection's writes):
    /// sent on the client's pinned connection, never one gathering other clients' commands.
    pub pinned: bool,
    /// Connection-bound for its wait alone (`XREAD … BLOCK`): it changes nothing, so no
    /// replica need have anything after it (`min_replicas_ack`).
    pub blocking_read: bool,
    /// What it touches beyond its keys.
    pub reach: Reach,
}

impl Spec {
    /// A forwarded command with fixed class.
    pub const fn new(name: &'static str, arity: i32, keys: Keys, class: Idempotence) -> Spec {
        Spec {
            name,
            arity,
            keys,
            class,
            refine: None,
            exec: Exec::Forward,
            null_array_from: 0,
            nested_nil_array: None,
            human_doubles: false,
            container: false,
            every_backend: false,
            pinned: false,
            blocking_read: false,
            reach: Reach::Keys,
        }
    }

    /// A command holdfast answers itself.
    pub const fn local(name: &'static str, arity: i32, local: Local) -> Spec {
        let mut spec = Spec::new(name, arity, Keys::None, Idempotence::Read);
        spec.exec = Exec::Local(local);
        spec
    }

    /// A container whose subcommands have rows of their own (`CONFIG` → `CONFIG|GET`).
    pub const fn container(name: &'static str) -> Spec {
        let mut spec = Spec::new(name, -2, Keys::None, Idempotence::Read);
        spec.container = true;
        spec
    }

    /// Sets the function that refines the class from the arguments.
    pub const fn refine(mut self, refine: Refine) -> Spec {
        self.refine = Some(refine);
        self
    }

    /// Marks a RESP2 nil reply as a null array.
    pub const fn null_array(mut self) -> Spec {
        self.null_array_from = 1;
        self
    }

    /// Marks a RESP2 nil reply as a null array from `argc` arguments on.
    pub const fn null_array_from(mut self, argc: u8) -> Spec {
        self.null_array_from = argc;
        self
    }

    /// Marks its doubles as human long doubles.
    pub const fn human_doubles(mut self) -> Spec {
        self.human_doubles = true;
        self
    }

    /// Sent to every backend the client may reach.
    pub const fn every_backend(mut self) -> Spec {
        self.every_backend = true;
        self
    }

    /// Sent on the client's pinned backend connection.
    pub const fn pinned(mut self) -> Spec {
        self.pinned = true;
        self
    }

    /// Says what it touches beyond its keys.
    pub const fn reach(mut self, reach: Reach) -> Spec {
        self.reach = reach;
        self
    }

    /// Marks a connection-bound command that only reads.
    pub const fn blocking_read(mut self) -> Spec {
        self.blocking_read = true;
        self
    }

    /// Marks the nested nils at the paths `rule` accepts as RESP2 null arrays.
    pub const fn nested_nil_array(mut self, rule: NilPath) -> Spec {
        self.nested_nil_array = Some(rule);
        self
    }

    /// Whether a nil reply to `argc` arguments is written `*-1` in RESP2.
    pub fn nil_is_array(&self, argc: usize) -> bool {
        self.null_array_from != 0 && argc >= usize::from(self.null_array_from)
    }

    /// The class of this invocation.
    pub fn class_of(&self, args: &[Bytes]) -> Idempotence {
        match self.refine {
            Some(refine) => refine(args),
            None => self.class,
        }
    }

    /// Whether an error reply to an invocation of `class` may come after it wrote: a script
    /// that writes (Redis does not roll a script back when it raises).
    pub fn error_may_write(&self, class: Idempotence) -> bool {
        self.reach == Reach::Scripts && class != Idempotence::Read
    }

    /// Whether `argc` arguments (name included) satisfy the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }
}

/// Shorthand for rows: one key at argument 1.
pub const KEY1: Keys = Keys::Range {
    first: 1,
    last: 1,
    step: 1,
};
/// Every argument from 1 on is a key (DEL, MGET, EXISTS, ...).
pub const KEYS_ALL: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 1,
};
/// Key-value pairs from argument 1 on (MSET, MSETNX).
pub const KEYS_PAIRS: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 2,
};
/// Two keys at arguments 1 and 2 (RENAME, LMOVE, SMOVE, COPY, ...).
pub const KEYS_1_2: Keys = Keys::Range {
    first: 1,
    last: 2,
    step: 1,
};
/// No key.
pub const NO_KEYS: Keys = Keys::None;

/// Returns the indices of the key arguments of `args` (index 0 is the name).
///
/// Malformed key counts (a NUMKEYS larger than the arguments) yield the keys that exist; the
/// backend then answers the syntax error itself.
pub fn key_indices(keys: Keys, args: &[Bytes]) -> KeyIndices {
    let argc = args.len();
    let none = KeyIndices {
        dest: None,
        rest: (0..0).step_by(1),
    };
    match keys {
        Keys::None => none,
        Keys::Range { first, last, step } => {
            let last = if last < 0 {
                argc as isize + last
            } else {
                last.min(argc as isize - 1)
            };
            if last < first as isize || step == 0 {
                return none;
            }
            KeyIndices {
                dest: None,
                rest: (first..last as usize + 1).step_by(step),
            }
        }
        Keys::Numkeys { at, dest } => {
            let count = args
                .get(at)
                .and_then(|a| std::str::from_utf8(a).ok())
                .and_then(|s| s.parse::<usize>().ok())
                .unwrap_or(0);
            let end = argc.max(at + 1).min((at + 1).saturating_add(count));
            KeyIndices {
                dest: (dest && argc > 1).then_some(1),
                rest: (at + 1..end).step_by(1),
            }
        }
        Keys::Streams => {
            // XREADGROUP GROUP group consumer: a group or consumer may be named STREAMS.
            let from = if args
                .get(1)
                .is_some_and(|a| a.eq_ignore_ascii_case(b"GROUP"))
            {
                4
            } else {
                1
            };
            let Some(pos) = args
                .iter()
                .skip(from)
                .position(|a| a.eq_ignore_ascii_case(b"STREAMS"))
                .map(|p| p + from)
            else {
                return none;
            };
            let rest = argc - pos - 1;
            KeyIndices {
                dest: None,
                rest: (pos + 1..pos + 1 + rest / 2).step_by(1),
            }
        }
        Keys::Store(options) => {
            let dest = store_index(options, args)
                .filter(|at| *at < argc)
                .map_or(0..0, |at| at..at + 1);
            KeyIndices {
                dest: (argc > 1).then_some(1),
                rest: dest.step_by(1),
            }
        }
    }
}

/// The index of the destination after `STORE` (or `STOREDIST`), reading the options as
/// `options` says (past the end when `STORE` is the last argument); None without one.
pub fn store_index(options: StoreOptions, args: &[Bytes]) -> Option<usize> {
    let word =
        |arg: &Bytes, words: &[&str]| words.iter().any(|w| arg.eq_ignore_ascii_case(w.as_bytes()));
    let (mut i, store, skip): (usize, &[&str], &[(&str, usize)]) = match options {
        StoreOptions::Sort => (2, &["STORE"], &[("BY", 2), ("GET", 2), ("LIMIT", 3)]),
        StoreOptions::Georadius(from) => (from, &["STORE", "STOREDIST"], &[("COUNT", 2)]),
    };
    while let Some(arg) = args.get(i) {
        if word(arg, store) {
            return Some(i + 1);
        }
        i += skip
            .iter()
            .find(|(w, _)| arg.eq_ignore_ascii_case(w.as_bytes()))
            .map_or(1, |(_, n)| *n);
    }
    None
}

/// The indices of `SORT`'s `BY` and `GET` patterns.
pub fn sort_patterns(args: &[Bytes]) -> Vec<usize> {
    let mut found = Vec::new();
    let mut i = 2;
    while let Some(arg) = args.get(i) {
        if arg.eq_ignore_ascii_case(b"BY") || arg.eq_ignore_ascii_case(b"GET") {
            if i + 1 < args.len() {
                found.push(i + 1);
            }
            i += 2;
        } else if arg.eq_ignore_ascii_case(b"LIMIT") {
            i += 3;
        } else {
            i += 1;
        }
    }
    found
}

/// The positions [`key_indices`] finds, in order, without allocating: every request asks.
#[derive(Clone, Debug)]
pub struct KeyIndices {
    /// A destination key before the counted ones (`ZUNIONSTORE dest numkeys ...`).
    dest: Option<usize>,
    /// The rest, evenly spaced.
    rest: std::iter::StepBy<std::ops::Range<usize>>,
}

impl Iterator for KeyIndices {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        self.dest.take().or_else(|| self.rest.next())
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
