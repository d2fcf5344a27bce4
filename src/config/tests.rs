// figment::Jail closures must return figment::Error, which is large.
#![allow(clippy::result_large_err)]

use super::*;
use figment::Jail;
use std::time::Duration;

/// Every kind of backend and a namespace override, in the shape docs/configuration.md
/// lists (`config/holdfast.toml` is its commented example): the product's interface
/// must parse as written.
const DOCUMENTED: &str = r#"
[server]
listen = "127.0.0.1:6380"          # the Redis endpoint clients connect to
metrics_listen = "127.0.0.1:9380"  # /metrics, /healthz, /readyz

[defaults]                         # applies to every namespace unless it overrides
reply_mode = "settled"             # fast | settled | exact
acquire_timeout = "5s"
[defaults.retry]
max_attempts = 15
min_delay = "200ms"
multiplier = 2.0
max_delay = "10s"
jitter = 0.15                      # fraction; document what it means

[backends.local]
kind = "sqlite"                    # sqlite | postgres | redis | sentinel | cluster
path = "data/holdfast.db"

[backends.cache]
kind = "redis"
url = "redis://127.0.0.1:6379/0"
pool_size = 8

[backends.pg]
kind = "postgres"
url = "postgres://holdfast@127.0.0.1:5432,127.0.0.1:5433/holdfast"

[backends.ha]
kind = "sentinel"
master_name = "mymaster"
sentinels = ["127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"]

[backends.big]
kind = "cluster"
nodes = ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]

[[namespaces]]
name = "workers"
prefixes = ["worker:"]
backend = "cache"
reply_mode = "exact"               # any [defaults] key may be overridden here
[namespaces.retry]
max_attempts = 20

[[namespaces]]
name = "default"                   # the catch-all: no prefixes
backend = "local"
"#;

fn err(text: &str) -> String {
    match Config::from_toml(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_documented_configuration_parses() {
    let config = Config::from_toml(DOCUMENTED).unwrap();
    assert_eq!(config.backends.len(), 5);
    let workers = config.namespaces[0].effective(&config.defaults);
    assert_eq!(workers.reply_mode, ReplyMode::Exact);
    assert_eq!(workers.retry.max_attempts, 20);
    // Keys the namespace does not override come from [defaults].
    assert_eq!(workers.retry.min_delay, Duration::from_millis(200));
    assert_eq!(workers.acquire_timeout, Duration::from_secs(5));
    let default = config.namespaces[1].effective(&config.defaults);
    assert_eq!(default.retry.max_attempts, 15);
    assert_eq!(default.reply_mode, ReplyMode::Settled);
    // A SQL backend's deadline defaults to 10 s.
    assert!(matches!(
        config.backends.get("pg"),
        Some(BackendConfig::Postgres(pg)) if pg.response_timeout == Duration::from_secs(10)
    ));
}

#[test]
fn the_built_in_default_is_sqlite_as_the_catch_all() {
    // In a jail: another test sets HOLDFAST_ variables.
    Jail::expect_with(|_| {
        let config = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:6380");
        assert_eq!(config.namespaces.len(), 1);
        assert!(config.namespaces[0].prefixes.is_empty());
        assert!(matches!(
            config.backends.get("local"),
            Some(BackendConfig::Sqlite(sqlite)) if sqlite.path == "data/holdfast.db"
        ));
        Ok(())
    });
}

/// Defaults are defaults with or without a file: one that changes only `[server]` keeps the
/// built-in embedded default; one that names a backend or a namespace replaces both.
#[test]
fn a_file_naming_no_backend_or_namespace_keeps_the_embedded_default() {
    Jail::expect_with(|jail| {
        jail.create_file("server.toml", "[server]\nlisten = \"0.0.0.0:6390\"\n")?;
        let config = Config::load(Some(Path::new("server.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(config.server.listen.to_string(), "0.0.0.0:6390");
        assert_eq!(config.namespaces.len(), 1);
        assert!(matches!(
            config.backends.get("local"),
            Some(BackendConfig::Sqlite(sqlite)) if sqlite.path == "data/holdfast.db"
        ));
        // A namespace alone replaces the built-in ones: it names an unknown backend.
        jail.create_file(
            "ns.toml",
            "[[namespaces]]\nname = \"default\"\nbackend = \"local\"\n",
        )?;
        let message = Config::load(Some(Path::new("ns.toml")))
            .unwrap_err()
            .to_string();
        assert!(message.contains("local"), "{message}");
        Ok(())
    });
    let config = Config::from_toml("[server]\nmax_clients = 7\n").unwrap();
    assert_eq!(config.server.max_clients, 7);
    assert!(config.backends.contains_key("local"));
}

const MINIMAL: &str = r#"
[backends.cache]
kind = "redis"
url = "redis://127.0.0.1:6379"
[[namespaces]]
name = "default"
backend = "cache"
"#;

#[test]
fn bad_configurations_name_the_key() {
    assert!(Config::from_toml(MINIMAL).is_ok());
    let cases = [
        (format!("[server]\nlisten_typo = 1\n{MINIMAL}"), "listen_typo"),
        (MINIMAL.replace("backend = \"cache\"", "backend = \"nope\""), "namespaces[0].backend"),
        (format!("{MINIMAL}\n[[namespaces]]\nname = \"b\"\nbackend = \"cache\"\n"), "namespaces[1].prefixes"),
        (format!("{MINIMAL}\n[[namespaces]]\nname = \"default\"\nprefixes = [\"a\"]\nbackend = \"cache\"\n"), "namespaces[1].name"),
        (
            format!("{MINIMAL}\n[[namespaces]]\nname = \"a\"\nprefixes = [\"x:\"]\nbackend = \"cache\"\n[[namespaces]]\nname = \"b\"\nprefixes = [\"x:\"]\nbackend = \"cache\"\n"),
            "namespaces[2].prefixes",
        ),
        (
            format!("{MINIMAL}\n[[namespaces]]\nname = \"a\"\nprefixes = [\"x:\"]\nchannels = [\"c.\"]\nbackend = \"cache\"\n[[namespaces]]\nname = \"b\"\nprefixes = [\"y:\"]\nchannels = [\"c.\"]\nbackend = \"cache\"\n"),
            "namespaces[2].channels",
        ),
        (
            format!("{MINIMAL}\n[[namespaces]]\nname = \"a\"\nprefixes = [\"x:\"]\nchannels = [\"\"]\nbackend = \"cache\"\n"),
            "namespaces[1].channels",
        ),
        ("[server]\nmax_pubsub_backlog = 0\n".to_string() + MINIMAL, "server.max_pubsub_backlog"),
        (format!("[defaults.retry]\njitter = 2.0\n{MINIMAL}"), "defaults.retry.jitter"),
        (format!("[defaults]\nacquire_timeout = \"soon\"\n{MINIMAL}"), "acquire_timeout"),
        (format!("{MINIMAL}[namespaces.retry]\nmin_delay = \"20s\"\n"), "namespaces[0].retry.min_delay"),
        (MINIMAL.replace("redis://127.0.0.1:6379", "nope://x"), "backends.cache.url"),
        (MINIMAL.replace("kind = \"redis\"", "kind = \"memcached\""), "memcached"),
        ("[server]\nmax_clients = 0\n".to_string() + MINIMAL, "server.max_clients"),
        (
            MINIMAL.replace("backend = \"cache\"", "prefixes = [\"a:\"]\nbackend = \"cache\""),
            "one namespace must have no prefixes",
        ),
        (
            format!("{MINIMAL}acquire_timeout = \"30s\"\n[namespaces.retry]\nmax_attempts = 3\n"),
            "namespaces[0].acquire_timeout",
        ),
        (
            format!("[server]\nrequirepass_file = \"/nonexistent/secret\"\n{MINIMAL}"),
            "server.requirepass_file",
        ),
        (
            format!("{MINIMAL}[[users]]\nname = \"u\"\npassword = \"p\"\nnamespaces = [\"nope\"]\n"),
            "users[0].namespaces",
        ),
        (
            format!("{MINIMAL}[[users]]\nname = \"u\"\n"),
            "users[0].password",
        ),
        (
            format!("{MINIMAL}[[users]]\nname = \"default\"\npassword = \"p\"\n"),
            "users[0].name",
        ),
        (
            format!("{MINIMAL}[[users]]\nname = \"u\"\npassword = \"p\"\n[[users]]\nname = \"u\"\npassword = \"q\"\n"),
            "users[1].name",
        ),
        (
            MINIMAL.replace("kind = \"redis\"", "kind = \"redis\"\npassword_file = \"/nonexistent/pw\""),
            "backends.cache.password_file",
        ),
        (
            format!("{MINIMAL}[backends.big]\nkind = \"cluster\"\nnodes = []\n"),
            "backends.big.nodes",
        ),
        (
            format!("{MINIMAL}[backends.big]\nkind = \"cluster\"\nnodes = [\"nohost\"]\n"),
            "backends.big.nodes",
        ),
        (
            format!("{MINIMAL}[backends.big]\nkind = \"cluster\"\nnodes = [\"h:1\"]\npool_size = 0\n"),
            "backends.big.pool_size",
        ),
        (
            format!("{MINIMAL}[backends.ha]\nkind = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"h\"]\n"),
            "backends.ha.sentinels",
        ),
        ("[server]\nmax_pipeline = 0\n".to_string() + MINIMAL, "server.max_pipeline"),
        ("[server]\nthreads = 2000\n".to_string() + MINIMAL, "server.threads"),
        (
            format!("{MINIMAL}[backends.pg]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nresponse_timeout = \"0s\"\n"),
            "backends.pg.response_timeout",
        ),
        (
            format!("{MINIMAL}[backends.lite]\nkind = \"sqlite\"\npath = \"x.db\"\nresponse_timeout = \"2h\"\n"),
            "backends.lite.response_timeout",
        ),
        (
            // Inside `kind`'s tagged table serde names the table, not the key.
            format!("{MINIMAL}[backends.pg]\nkind = \"postgres\"\nurl = \"postgres://h/db\"\nresponse_timeout = \"soon\"\n"),
            "backends.pg",
        ),
    ];
    for (text, key) in cases {
        let message = err(&text);
        assert!(message.contains(key), "expected `{key}` in: {message}");
    }
}

#[test]
fn a_file_then_the_environment_override_the_defaults() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "holdfast.toml",
            &format!("[server]\nlisten = \"127.0.0.1:7001\"\n{MINIMAL}"),
        )?;
        let config = Config::load(Some(Path::new("holdfast.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:7001");
        // The file's backends replace the built-in `local`.
        assert!(!config.backends.contains_key("local"));

        jail.set_env("HOLDFAST_SERVER__LISTEN", "127.0.0.1:7000");
        jail.set_env("HOLDFAST_DEFAULTS__RETRY__MAX_ATTEMPTS", "3");
        jail.set_env("HOLDFAST_DEFAULTS__ACQUIRE_TIMEOUT", "500ms");
        let config = Config::load(Some(Path::new("holdfast.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:7000");
        assert_eq!(config.defaults.retry.max_attempts, 3);

        // A numeric password from the environment is still a password.
        jail.set_env("HOLDFAST_SERVER__REQUIREPASS", "12345");
        let config = Config::load(Some(Path::new("holdfast.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(config.server.requirepass.as_deref(), Some("12345"));

        // The logging variables share the prefix but are not configuration.
        jail.set_env("HOLDFAST_LOG", "debug");
        jail.set_env("HOLDFAST_LOG_FORMAT", "json");
        assert!(Config::load(Some(Path::new("holdfast.toml"))).is_ok());

        jail.set_env("HOLDFAST_DEFAULTS__RETRY__MAX_ATTEMPTS", "0");
        let message = Config::load(Some(Path::new("holdfast.toml")))
            .unwrap_err()
            .to_string();
        assert!(message.contains("defaults.retry.max_attempts"), "{message}");
        Ok(())
    });
}

#[test]
fn secrets_can_come_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("requirepass");
    std::fs::write(&secret, "from-a-file\n").unwrap();
    let text = format!(
        "[server]\nrequirepass_file = \"{}\"\n{MINIMAL}",
        secret.display()
    );
    let config = Config::from_toml(&text).unwrap();
    assert_eq!(config.server.requirepass.as_deref(), Some("from-a-file"));
    // Printed as the file it came from, never as its content.
    let shown = config.to_toml_redacted();
    assert!(!shown.contains("from-a-file"), "{shown}");
    assert!(shown.contains("requirepass_file"), "{shown}");
}

#[test]
fn no_retry_needs_no_schedule() {
    // max_attempts = 1 has no schedule to fit in; any acquire timeout is fine.
    let text =
        format!("{MINIMAL}acquire_timeout = \"30s\"\n[namespaces.retry]\nmax_attempts = 1\n");
    assert!(Config::from_toml(&text).is_ok());
}

#[test]
fn a_missing_file_is_an_error_not_the_default() {
    let message = Config::load(Some(Path::new("/nonexistent/holdfast.toml")))
        .unwrap_err()
        .to_string();
    assert!(message.contains("does not exist"), "{message}");
}

#[test]
fn secrets_are_redacted_when_printed() {
    let text = format!(
        "[server]\nrequirepass = \"hunter2\"\n{}",
        MINIMAL.replace(
            "redis://127.0.0.1:6379",
            "redis://app:s3cret@127.0.0.1:6379"
        )
    );
    let shown = Config::from_toml(&text).unwrap().to_toml_redacted();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        shown.contains("redis://app:<redacted>@127.0.0.1:6379"),
        "{shown}"
    );
    // What is printed is itself a valid configuration.
    assert!(Config::from_toml(&shown).is_ok());
}

#[test]
fn min_replicas_ack_is_a_default_a_namespace_may_override() {
    let config = Config::from_toml(
        r#"
[defaults]
min_replicas_ack = 1
replicas_ack_timeout = "250ms"
[backends.r]
kind = "redis"
url = "redis://127.0.0.1:6379"
[[namespaces]]
name = "strict"
prefixes = ["s:"]
backend = "r"
min_replicas_ack = 2
[[namespaces]]
name = "loose"
prefixes = ["l:"]
backend = "r"
min_replicas_ack = 0
[[namespaces]]
name = "rest"
backend = "r"
"#,
    )
    .unwrap();
    let policy = |i: usize| config.namespaces[i].effective(&config.defaults).replicas;
    assert_eq!(policy(0), Some((2, Duration::from_millis(250))));
    assert_eq!(policy(1), None);
    assert_eq!(policy(2), Some((1, Duration::from_millis(250))));
}

/// Exact mode keeps a token `TOKEN_TTL`; a retry schedule longer than that
/// would retry after the token expired and apply an `INCR` twice. Refused, naming the key the
/// schedule comes from, whether the namespace sets it or inherits it from `[defaults]`.
#[test]
fn exact_mode_refuses_a_retry_schedule_that_outlasts_its_token() {
    let redis = "[backends.r]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n";
    // Inherited: the namespace sets nothing, [defaults] says exact and 120 attempts.
    let inherited = format!(
        "[defaults]\nreply_mode = \"exact\"\n[defaults.retry]\nmax_attempts = 120\nmax_delay = \"10s\"\n{redis}[[namespaces]]\nname = \"n\"\nbackend = \"r\"\n"
    );
    let message = err(&inherited);
    assert!(
        message.starts_with("defaults.retry.max_attempts:"),
        "{message}"
    );
    assert!(message.contains("exact reply mode"), "{message}");
    // The namespace's own override, reply mode and schedule.
    let own = format!(
        "{redis}[[namespaces]]\nname = \"n\"\nbackend = \"r\"\nreply_mode = \"exact\"\n[namespaces.retry]\nmax_attempts = 1000\nmax_delay = \"600s\"\n"
    );
    let message = err(&own);
    assert!(
        message.starts_with("namespaces[0].retry.max_attempts:"),
        "{message}"
    );
    // The same schedules outside exact mode, and exact mode with the defaults, are fine.
    Config::from_toml(&inherited.replace("\"exact\"", "\"settled\"")).unwrap();
    Config::from_toml(&own.replace("\"exact\"", "\"fast\"")).unwrap();
    Config::from_toml(&format!(
        "[defaults]\nreply_mode = \"exact\"\n{redis}[[namespaces]]\nname = \"n\"\nbackend = \"r\"\n"
    ))
    .unwrap();
    // The attempts' own time counts: 15 attempts fit in delays alone, not with 60 s each.
    let slow = "[defaults]\nreply_mode = \"exact\"\nacquire_timeout = \"20s\"\n[backends.r]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\nresponse_timeout = \"20s\"\n[[namespaces]]\nname = \"n\"\nbackend = \"r\"\n";
    assert!(err(slow).starts_with("defaults.retry.max_attempts:"));
}

/// Exact mode's tokens need a database of their own on a standalone or Sentinel Redis.
#[test]
fn a_token_db_that_is_the_datas_database_is_refused() {
    let redis = |url: &str, extra: &str| {
        format!("[backends.r]\nkind = \"redis\"\nurl = \"{url}\"\n{extra}\n[[namespaces]]\nname = \"n\"\nbackend = \"r\"\n")
    };
    let message = err(&redis("redis://127.0.0.1:6379/15", ""));
    assert!(message.starts_with("backends.r.token_db:"), "{message}");
    let message = err(&redis("redis://127.0.0.1:6379/3", "token_db = 3"));
    assert!(message.starts_with("backends.r.token_db:"), "{message}");
    Config::from_toml(&redis("redis://127.0.0.1:6379/3", "")).unwrap();
    Config::from_toml(&redis("redis://127.0.0.1:6379/15", "token_db = 14")).unwrap();
    let sentinel = "[backends.r]\nkind = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"127.0.0.1:26379\"]\ntoken_db = 0\n[[namespaces]]\nname = \"n\"\nbackend = \"r\"\n";
    assert!(err(sentinel).starts_with("backends.r.token_db:"));
}

#[test]
fn a_password_file_goes_last_in_the_query_encoded() {
    let cases = [
        ("postgres://u@h/db", "postgres://u@h/db?password=s3cret"),
        (
            "postgres://u:old@h/db?sslmode=require",
            "postgres://u:old@h/db?sslmode=require&password=s3cret",
        ),
        ("postgres://u@h/db?", "postgres://u@h/db?password=s3cret"),
        ("postgres://u@h/db#x", "postgres://u@h/db?password=s3cret#x"),
    ];
    for (url, want) in cases {
        assert_eq!(with_password(url, "s3cret"), want, "{url}");
    }
    assert_eq!(
        with_password("postgres://u@h/db", "p+a&s%s#w@o/r: d~."),
        "postgres://u@h/db?password=p%2Ba%26s%25s%23w%40o%2Fr%3A%20d~."
    );
    let missing = "[backends.pg]\nkind = \"postgres\"\nurl = \"postgres://u@127.0.0.1/db\"\npassword_file = \"/nonexistent/pw\"\n[[namespaces]]\nname = \"n\"\nbackend = \"pg\"\n";
    assert!(
        err(missing).starts_with("backends.pg.password_file:"),
        "{}",
        err(missing)
    );
}

#[test]
fn a_multi_host_url_is_one_url_per_host() {
    assert_eq!(
        postgres_hosts("postgres://u:p@h1:5432,h2:5433/db?sslmode=disable").unwrap(),
        vec![
            "postgres://u:p@h1:5432/db?sslmode=disable",
            "postgres://u:p@h2:5433/db?sslmode=disable"
        ]
    );
    assert_eq!(
        postgres_hosts("postgres://h/db").unwrap(),
        vec!["postgres://h/db"]
    );
    assert!(postgres_hosts("postgres://u@h1,/db").is_err());
    // The driver ignores an encrypted key's passphrase, and would log it: it is dropped.
    assert_eq!(
        postgres_hosts("postgres://h/db?sslpassword=x&sslmode=require#f").unwrap(),
        vec!["postgres://h/db?sslmode=require#f"]
    );
    assert_eq!(
        postgres_hosts("postgres://h/db?sslpassword=x").unwrap(),
        vec!["postgres://h/db"]
    );
    assert!(postgres_hosts("mysql://h/db").is_err());
    assert!(postgres_hosts("postgres://u@h1:notaport/db").is_err());
}

#[test]
fn kubernetes_service_links_are_told_from_configuration_keys() {
    use crate::config::service_link;
    let links = [
        "PORT",
        "SERVICE_HOST",
        "SERVICE_PORT",
        "SERVICE_PORT_REDIS",
        "SERVICE_PORT_METRICS_HTTP",
        "PORT_6380_TCP",
        "PORT_6380_TCP_PROTO",
        "PORT_6380_TCP_PORT",
        "PORT_6380_TCP_ADDR",
        "PORT_9380_UDP",
        "PORT_53_SCTP_ADDR",
        "port_6380_tcp",
    ];
    for key in links {
        assert!(service_link(key), "{key}");
    }
    let keys = [
        "SERVER__LISTEN",
        "SERVER_LISTEN",
        "SERVICE_PORT_",
        "PORTS",
        "PORT_",
        "PORT_X_TCP",
        "PORT_6380",
        "PORT_6380_HTTP",
        "PORT_6380_TCP_HOST",
        "PORT_6380_TCP_ADDR_X",
        "DEFAULTS__RETRY__MAX_ATTEMPTS",
    ];
    for key in keys {
        assert!(!service_link(key), "{key}");
    }
}

#[test]
fn variables_kubernetes_injects_do_not_stop_a_start() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "holdfast.toml",
            &format!("[server]\nlisten = \"127.0.0.1:7001\"\n{MINIMAL}"),
        )?;
        jail.set_env("HOLDFAST_SERVER__LISTEN", "127.0.0.1:7000");
        // Nor are the ones Kubernetes injects for a Service named `holdfast`.
        for (key, value) in [
            ("HOLDFAST_PORT", "tcp://10.0.0.11:6380"),
            ("HOLDFAST_PORT_6380_TCP", "tcp://10.0.0.11:6380"),
            ("HOLDFAST_PORT_6380_TCP_PROTO", "tcp"),
            ("HOLDFAST_PORT_6380_TCP_PORT", "6380"),
            ("HOLDFAST_PORT_6380_TCP_ADDR", "10.0.0.11"),
            ("HOLDFAST_SERVICE_HOST", "10.0.0.11"),
            ("HOLDFAST_SERVICE_PORT", "6380"),
            ("HOLDFAST_SERVICE_PORT_REDIS", "6380"),
        ] {
            jail.set_env(key, value);
        }
        let config = Config::load(Some(Path::new("holdfast.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:7000");
        // A typo of a real key is still refused.
        jail.set_env("HOLDFAST_SERVER_LISTEN", "127.0.0.1:7002");
        assert!(Config::load(Some(Path::new("holdfast.toml"))).is_err());
        Ok(())
    });
}

#[test]
fn every_password_of_a_url_is_hidden() {
    use crate::config::redact_url;
    let cases = [
        ("redis://u:p@ss@x:6379/0", "redis://u:<redacted>@x:6379/0"),
        ("redis://:onlypass@h", "redis://:<redacted>@h"),
        ("redis://user@h:6379", "redis://user@h:6379"),
        ("redis://h:6379/2", "redis://h:6379/2"),
        ("rediss://u:a:b:c@h/0", "rediss://u:<redacted>@h/0"),
        (
            "postgres://u@h1:5432/db?password=s3cret",
            "postgres://u@h1:5432/db?password=<redacted>",
        ),
        (
            "postgres://u:pw@h1:5432,h2:5433/db?sslmode=require&PassWord=x&application_name=a",
            "postgres://u:<redacted>@h1:5432,h2:5433/db?sslmode=require&PassWord=<redacted>&application_name=a",
        ),
        (
            "postgres://u@h/db?pass%77ord=x&sslpassword=y",
            "postgres://u@h/db?pass%77ord=<redacted>&sslpassword=<redacted>",
        ),
        (
            "postgresql://u:p%40w@h/db?x=1#frag",
            "postgresql://u:<redacted>@h/db?x=1#frag",
        ),
        // An `@` in the path or query is not the userinfo's.
        ("postgres://h/db?application_name=a@b", "postgres://h/db?application_name=a@b"),
        (
            "postgres://h/db?password=x&a=b@c",
            "postgres://h/db?password=<redacted>&a=b@c",
        ),
        ("redis://u:p/ss@h:6379/0", "redis://u:<redacted>@h:6379/0"),
        ("not a url", "not a url"),
    ];
    for (url, shown) in cases {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}
