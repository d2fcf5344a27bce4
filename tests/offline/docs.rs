//! The reference in `docs/` that is generated from the code, kept equal to it: the man page
//! is the command line's definition rendered (`holdfast::cli::man_page`). After changing the
//! command line, `HOLDFAST_WRITE_DOCS=1 cargo test --test offline docs` writes it again.

use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_man_page_is_the_command_line_rendered() {
    let path = repo().join("docs/holdfast.1");
    let rendered = holdfast::cli::man_page();
    if std::env::var_os("HOLDFAST_WRITE_DOCS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == rendered,
        "docs/holdfast.1 differs from the command line; write it again with \
         HOLDFAST_WRITE_DOCS=1 cargo test --test offline docs"
    );
}

// ---- docs/configuration.md against the configuration's types ----

use holdfast::config::{
    BudgetConfig, ClusterConfig, Defaults, MirrorConfig, NamespaceConfig, PostgresConfig,
    RedisConfig, RetryConfig, RetryOverride, SentinelConfig, ServerConfig, ServerTls, SqliteConfig,
    UserConfig,
};
use serde::de::{DeserializeOwned, Visitor};
use serde::Serialize;

/// A deserializer that only records the field names a struct's derived `Deserialize` asks
/// for, then stops: the keys a table of the configuration accepts, read from the types.
struct FieldNames<'a>(&'a mut Vec<&'static str>);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.extend_from_slice(fields);
        Err(serde::de::Error::custom("recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

fn keys_of<T: DeserializeOwned>() -> Vec<&'static str> {
    let mut fields = Vec::new();
    let _ = T::deserialize(FieldNames(&mut fields));
    assert!(
        !fields.is_empty(),
        "{} is not a struct",
        std::any::type_name::<T>()
    );
    fields
}

/// One table of the reference: the keys its type accepts, and the table a key's example or
/// default is read against (the type's defaults, or the least a valid table holds).
struct Table {
    heading: &'static str,
    keys: Vec<&'static str>,
    base: toml::Table,
    /// Reads a table as this type: Ok when its keys and values are the type's.
    parse: fn(toml::Table) -> Result<(), String>,
}

fn parse_as<T: DeserializeOwned>(table: toml::Table) -> Result<(), String> {
    T::deserialize(toml::Value::Table(table))
        .map(drop)
        .map_err(|e| e.to_string())
}

fn table<T: DeserializeOwned + Serialize>(heading: &'static str, base: &T) -> Table {
    let base = match toml::Value::try_from(base) {
        Ok(toml::Value::Table(table)) => table,
        other => panic!("{heading}: {other:?}"),
    };
    Table {
        heading,
        keys: keys_of::<T>(),
        base,
        parse: parse_as::<T>,
    }
}

/// A type read from the least TOML that makes it valid (its required keys).
fn least<T: DeserializeOwned>(text: &str) -> T {
    toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn tables() -> Vec<Table> {
    vec![
        table("[server]", &ServerConfig::default()),
        table::<ServerTls>("[server.tls]", &least("cert = \"c\"\nkey = \"k\"")),
        table("[defaults]", &Defaults::default()),
        table("[defaults.retry]", &RetryConfig::default()),
        table("[retry_budget]", &BudgetConfig::default()),
        table::<RedisConfig>("[backends.NAME] redis", &least("url = \"redis://h\"")),
        table::<SentinelConfig>(
            "[backends.NAME] sentinel",
            &least("master_name = \"m\"\nsentinels = [\"h:1\"]"),
        ),
        table::<ClusterConfig>("[backends.NAME] cluster", &least("nodes = [\"h:1\"]")),
        table::<PostgresConfig>(
            "[backends.NAME] postgres",
            &least("url = \"postgres://h/d\""),
        ),
        table::<SqliteConfig>("[backends.NAME] sqlite", &least("path = \"p\"")),
        table::<NamespaceConfig>("[[namespaces]]", &least("name = \"n\"\nbackend = \"b\"")),
        table("[namespaces.retry]", &RetryOverride::default()),
        table::<MirrorConfig>("[namespaces.mirror]", &least("backend = \"b\"")),
        table::<UserConfig>("[[users]]", &least("name = \"u\"")),
    ]
}

/// A row of the reference: its key and cells, under the table heading it sits in.
struct Row {
    heading: String,
    key: String,
    default: String,
    applied: String,
    example: String,
    line: usize,
}

/// The text of the first code span in `s`.
fn code(s: &str) -> Option<&str> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(&s[start..start + len])
}

/// Reads the reference: `## ` headings naming a table in code (`[server]`, or
/// `[backends.NAME]` and its `kind`), and under each the rows of its key table.
fn reference_rows(text: &str) -> Vec<Row> {
    let mut heading = String::new();
    let mut rows = Vec::new();
    for (at, line) in text.lines().enumerate() {
        if let Some(title) = line.strip_prefix("## ") {
            heading = match code(title) {
                Some(table) if table.starts_with('[') => {
                    match title
                        .split("kind = \"")
                        .nth(1)
                        .and_then(|k| k.split('"').next())
                    {
                        Some(kind) => format!("{table} {kind}"),
                        None => table.to_string(),
                    }
                }
                _ => String::new(),
            };
            continue;
        }
        if heading.is_empty() || !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert!(
            cells.len() == 6,
            "docs/configuration.md:{}: six cells",
            at + 1
        );
        rows.push(Row {
            heading: heading.clone(),
            key: code(cells[0]).unwrap_or_default().to_string(),
            default: cells[2].to_string(),
            applied: cells[3].to_string(),
            example: cells[4].to_string(),
            line: at + 1,
        });
    }
    rows
}

/// A cell's TOML value (`"5s"`, `8`, `{ cert = "…" }`), when the cell is one code span.
fn cell_value(cell: &str) -> Option<toml::Value> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    let table: toml::Table = format!("v = {inner}").parse().ok()?;
    table.get("v").cloned()
}

/// Sets `key` as a file over the defaults would: a table given for a table key changes only
/// the keys it names (`retry = { max_attempts = 20 }`), as the configuration's layers merge.
fn merge(table: &mut toml::Table, key: &str, value: toml::Value) {
    match (table.get_mut(key), value) {
        (Some(toml::Value::Table(old)), toml::Value::Table(new)) => old.extend(new),
        (_, value) => {
            table.insert(key.to_string(), value);
        }
    }
}

fn same(a: &toml::Value, b: &toml::Value) -> bool {
    match (a, b) {
        (toml::Value::Float(_) | toml::Value::Integer(_), _)
        | (_, toml::Value::Float(_) | toml::Value::Integer(_)) => {
            let num = |v: &toml::Value| v.as_float().or(v.as_integer().map(|i| i as f64));
            matches!((num(a), num(b)), (Some(x), Some(y)) if (x - y).abs() < 1e-6)
        }
        _ => a == b,
    }
}

#[test]
fn the_configuration_reference_is_every_key_of_the_types() {
    let path = repo().join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let rows = reference_rows(&text);
    let mut problems = Vec::new();
    for table in tables() {
        let documented: Vec<&Row> = rows.iter().filter(|r| r.heading == table.heading).collect();
        for key in &table.keys {
            if !documented.iter().any(|r| r.key == *key) {
                problems.push(format!("{} has no row for `{key}`", table.heading));
            }
        }
        for row in documented {
            let at = format!(
                "docs/configuration.md:{} ({} {})",
                row.line, table.heading, row.key
            );
            if !table.keys.contains(&row.key.as_str()) {
                problems.push(format!("{at}: the type has no such key"));
                continue;
            }
            if !["reload", "restart", "new connections"].contains(&row.applied.as_str()) {
                problems.push(format!(
                    "{at}: applied is reload, restart or new connections"
                ));
            }
            // The example, read as the key's value in an otherwise valid table.
            match cell_value(&row.example) {
                None => problems.push(format!("{at}: the example is not one TOML value")),
                Some(example) => {
                    let mut with = table.base.clone();
                    merge(&mut with, &row.key, example);
                    if let Err(e) = (table.parse)(with) {
                        problems.push(format!("{at}: the example is refused: {e}"));
                    }
                }
            }
            // A default written as a value is the type's own.
            if let Some(default) = cell_value(&row.default) {
                match table.base.get(&row.key) {
                    Some(actual) if same(actual, &default) => {}
                    actual => problems.push(format!(
                        "{at}: default {} but the type's is {actual:?}",
                        row.default
                    )),
                }
            }
        }
    }
    let known: Vec<&str> = tables().iter().map(|t| t.heading).collect();
    for row in &rows {
        if !known.contains(&row.heading.as_str()) {
            problems.push(format!(
                "docs/configuration.md:{}: no configuration table {}",
                row.line, row.heading
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_reference_covers_every_table_of_the_configuration() {
    // A new table (`[whatever]`) needs a heading of its own above.
    let mut top = keys_of::<holdfast::config::Config>();
    top.sort_unstable();
    assert_eq!(
        top,
        [
            "backends",
            "defaults",
            "namespaces",
            "retry_budget",
            "server",
            "users"
        ],
        "a new top-level table: add it to docs/configuration.md and to tables() here"
    );
}

// ---- docs/metrics.md and docs/commands.md: tables generated from the code ----

/// Replaces the text between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in a
/// document with `rendered` (under HOLDFAST_WRITE_DOCS) or checks that it is equal.
fn generated_region(file: &str, name: &str, rendered: &str) {
    let path = repo().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let (open, close) = (
        format!("<!-- generated: {name} -->\n"),
        format!("<!-- end: {name} -->"),
    );
    let (Some(start), Some(end)) = (text.find(&open), text.find(&close)) else {
        panic!("{file} has no {open:?} … {close:?} region");
    };
    let start = start + open.len();
    if std::env::var_os("HOLDFAST_WRITE_DOCS").is_some() {
        let written = format!("{}{rendered}{}", &text[..start], &text[end..]);
        std::fs::write(&path, written).unwrap();
        return;
    }
    assert!(
        text[start..end] == *rendered,
        "{file}'s {name} table differs from the code; write it again with \
         HOLDFAST_WRITE_DOCS=1 cargo test --test offline docs"
    );
}

#[test]
fn the_metrics_catalogue_in_the_docs_is_the_code_s() {
    use holdfast::metrics::{SeriesKind, CATALOGUE, LIMIT_NAMES, PROCESS};
    let mut out = String::from("| Metric | Kind | Labels | Meaning |\n|---|---|---|---|\n");
    for def in CATALOGUE {
        let kind = match def.kind {
            SeriesKind::Counter => "counter",
            SeriesKind::Gauge => "gauge",
            SeriesKind::Histogram => "histogram",
        };
        let labels: Vec<String> = def.labels.iter().map(|l| format!("`{l}`")).collect();
        out.push_str(&format!(
            "| `{}` | {kind} | {} | {} |\n",
            def.name,
            labels.join(", "),
            def.help.replace('|', "\\|")
        ));
    }
    out.push_str("\nThe `limit` label's values: ");
    let limits: Vec<String> = LIMIT_NAMES.iter().map(|l| format!("`{l}`")).collect();
    out.push_str(&limits.join(", "));
    out.push_str(".\n\nThe process's own series, in Prometheus's standard names: ");
    let process: Vec<String> = PROCESS.iter().map(|p| format!("`{p}`")).collect();
    out.push_str(&process.join(", "));
    out.push_str(".\n");
    generated_region("docs/metrics.md", "metrics", &out);
}

#[test]
fn the_command_list_in_the_docs_is_the_command_table() {
    use holdfast::command::table::{Exec, Idempotence};
    let mut out = String::from(
        "| Command | Repeated after a lost reply | Redis backends | SQL backends |\n|---|---|---|---|\n",
    );
    for spec in holdfast::command::all().iter().filter(|s| !s.container) {
        let class = match spec.class {
            Idempotence::Read => "read: retried",
            Idempotence::Idempotent => "idempotent: retried",
            Idempotence::IdempotentEffect => "same state, reply may differ: retried",
            Idempotence::NonIdempotent => "not idempotent: retried only if not sent",
            Idempotence::ConnectionBound => "own connection: never retried",
        };
        let refined = if spec.refine.is_some() {
            " (the most cautious of its forms; arguments decide)"
        } else {
            ""
        };
        let base = spec.name.split('|').next().unwrap_or(spec.name);
        let (redis, sql) = match spec.exec {
            Exec::Local(_) => ("holdfast answers", "holdfast answers"),
            Exec::Forward => (
                "forwarded",
                if holdfast::backend::sql::model::writes(base.as_bytes()).is_some() {
                    "served"
                } else {
                    "**not served**"
                },
            ),
        };
        out.push_str(&format!(
            "| `{}` | {class}{refined} | {redis} | {sql} |\n",
            spec.name.replace('|', " ")
        ));
    }
    generated_region("docs/commands.md", "commands", &out);
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// turned to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_link_between_the_documents_leads_somewhere() {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            if target.starts_with("http") || target.is_empty() {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap_or(&root).join(path)
            };
            let Ok(dest_text) = std::fs::read_to_string(&dest) else {
                if !dest.exists() {
                    broken.push(format!("{}: {target}: no such file", file.display()));
                }
                continue;
            };
            if let Some(fragment) = fragment {
                let found = dest_text
                    .lines()
                    .filter(|l| l.starts_with('#'))
                    .filter_map(|l| l.trim_start_matches('#').strip_prefix(' '))
                    .any(|h| anchor(h) == fragment);
                if !found {
                    broken.push(format!("{}: {target}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
