//! The layout section of `src/lib.rs` is a promise about the code: a request flows down its
//! list of modules, and no module uses one above it. This test reads the list and every
//! module's source (its tests included) and fails on a `crate::` path that reaches up.

use std::path::{Path, PathBuf};

/// The modules of the layout list, in order: lines `//! - [`name`]: ...`.
fn layout(lib: &str) -> Vec<String> {
    let section = lib.split("//! # Layout").nth(1).unwrap_or_default();
    section
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("//!"))
        .filter_map(|line| line.strip_prefix("//! - [`"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_string)
        .collect()
}

fn sources(root: &Path, module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let single = root.join(format!("src/{module}.rs"));
    if single.exists() {
        files.push(single);
    }
    let mut dirs = vec![root.join(format!("src/{module}"))];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The modules a source file names as `crate::<module>`.
fn uses(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(at, m)| {
            text[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn no_module_uses_one_above_it_in_the_layout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let order = layout(&lib);
    assert!(
        order.len() >= 10,
        "the layout list was not found: {order:?}"
    );
    // Every module of the crate is in the list.
    for line in lib.lines().filter_map(|l| l.strip_prefix("pub mod ")) {
        let name = line.trim_end_matches(';');
        assert!(
            order.iter().any(|m| m == name),
            "`{name}` is not in the layout"
        );
    }
    let mut reaching_up = Vec::new();
    for (at, module) in order.iter().enumerate() {
        let files = sources(root, module);
        assert!(!files.is_empty(), "no source for `{module}`");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for used in uses(&text) {
                if order[..at].contains(&used) {
                    reaching_up.push(format!("{} uses `{used}`", file.display()));
                }
            }
        }
    }
    assert!(reaching_up.is_empty(), "{}", reaching_up.join("\n"));
}

/// Every source file under `src/`, with its module path (`a/b.rs` and `a/b/mod.rs` under `src/`
/// are `a::b`; the crate root is the empty path).
fn modules(root: &Path) -> Vec<(PathBuf, Vec<String>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(root.join("src")).expect("under src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.push((path, parts));
        }
    }
    out
}

/// The source without its comments: a path named in prose is not a use.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a source names from `crate`, `super` or `self`, `use` groups expanded: each as
/// its first word and the identifiers after it.
fn paths(text: &str) -> Vec<(String, Vec<String>)> {
    let bytes = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|s| bytes[at..].starts_with(s.as_bytes()) && (at == 0 || !ident(bytes[at - 1])));
        let Some(start) = starts else {
            at += 1;
            continue;
        };
        let first = start.trim_end_matches(':').to_string();
        let (found, end) = path_after(text, at + start.len());
        for rest in found {
            out.push((first.clone(), rest));
        }
        at = end.max(at + 1);
    }
    out
}

/// The identifiers of the path (or `{…}` group of paths) from `at`, and where it ends.
fn path_after(text: &str, mut at: usize) -> (Vec<Vec<String>>, usize) {
    let bytes = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut prefix = Vec::new();
    loop {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < bytes.len() && bytes[at] == b'{' {
            let mut all = Vec::new();
            at += 1;
            loop {
                let (items, end) = path_after(text, at);
                all.extend(items.into_iter().map(|mut item| {
                    let mut path = prefix.clone();
                    path.append(&mut item);
                    path
                }));
                at = end;
                while at < bytes.len() && bytes[at].is_ascii_whitespace() {
                    at += 1;
                }
                match bytes.get(at) {
                    Some(b',') => at += 1,
                    Some(b'}') => return (all, at + 1),
                    _ => return (all, at),
                }
                while at < bytes.len() && bytes[at].is_ascii_whitespace() {
                    at += 1;
                }
                if bytes.get(at) == Some(&b'}') {
                    return (all, at + 1);
                }
            }
        }
        let begin = at;
        while at < bytes.len() && ident(bytes[at]) {
            at += 1;
        }
        if begin == at {
            return (vec![prefix], at);
        }
        prefix.push(text[begin..at].to_string());
        if bytes[at..].starts_with(b"::") {
            at += 2;
        } else {
            return (vec![prefix], at);
        }
    }
}

/// Module `from` uses module `to`, for every path of every file that names a module.
fn module_uses(root: &Path) -> Vec<(PathBuf, Vec<String>, Vec<String>)> {
    let files = modules(root);
    let known: std::collections::HashSet<Vec<String>> =
        files.iter().map(|(_, m)| m.clone()).collect();
    let mut edges = Vec::new();
    for (file, module) in &files {
        let is_dir_root = file.file_name().is_some_and(|n| n == "mod.rs");
        let text = code(&std::fs::read_to_string(file).expect("a source file"));
        for (first, rest) in paths(&text) {
            let mut base = match first.as_str() {
                "crate" => Vec::new(),
                _ => module.clone(),
            };
            let mut rest = rest.as_slice();
            if first == "super" {
                base.pop();
                // `super::super::…`
                while rest.first().is_some_and(|r| r == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            let _ = is_dir_root;
            let mut target = base;
            let mut resolved = target.clone();
            for part in rest {
                target.push(part.clone());
                if known.contains(&target) {
                    resolved = target.clone();
                }
            }
            if resolved != *module {
                edges.push((file.clone(), module.clone(), resolved));
            }
        }
    }
    edges
}

#[test]
fn no_room_of_a_folder_uses_one_that_uses_it_back() {
    // Within each module, its child modules (a file, or a folder as one) may not use each
    // other in a circle. A parent and its children may use each other: the parent is the
    // folder's front (its types, its re-exports). The crate's top modules are held to the
    // layout list above.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut graphs: std::collections::BTreeMap<
        Vec<String>,
        std::collections::BTreeSet<(String, String)>,
    > = Default::default();
    for (_, from, to) in module_uses(root) {
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if common == 0 || common >= from.len() || common >= to.len() {
            continue;
        }
        graphs
            .entry(from[..common].to_vec())
            .or_default()
            .insert((from[common].clone(), to[common].clone()));
    }
    let mut circles = Vec::new();
    for (parent, edges) in &graphs {
        // Every edge on a circle: `b` reaches `a` back.
        for (a, b) in edges {
            let mut seen = std::collections::BTreeSet::new();
            let mut todo = vec![b.clone()];
            while let Some(at) = todo.pop() {
                if !seen.insert(at.clone()) {
                    continue;
                }
                todo.extend(
                    edges
                        .iter()
                        .filter(|(x, _)| *x == at)
                        .map(|(_, y)| y.clone()),
                );
            }
            if seen.contains(a) {
                circles.push(format!("{}: {a} -> {b} -> … -> {a}", parent.join("::")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_sql_model_never_uses_the_engine_and_redis_and_sql_never_use_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let under = |module: &[String], prefix: &[&str]| {
        module.len() >= prefix.len() && module.iter().zip(prefix).all(|(m, p)| m == p)
    };
    let forbidden: [(&[&str], &[&str]); 3] = [
        (&["backend", "sql", "model"], &["backend", "sql", "engine"]),
        (&["backend", "redis"], &["backend", "sql"]),
        (&["backend", "sql"], &["backend", "redis"]),
    ];
    let mut found = Vec::new();
    for (file, from, to) in module_uses(root) {
        for (a, b) in forbidden {
            if under(&from, a) && under(&to, b) {
                found.push(format!("{} uses {}", file.display(), to.join("::")));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn no_file_or_function_is_too_long_to_read() {
    // A file over 900 lines (`connection/mod.rs`: 600) or a function over 120 lines, tests
    // aside, is more than one concern.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for (file, _) in modules(root) {
        let rel = file.strip_prefix(root).expect("in the repository");
        let name = rel.to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&file).expect("a source file");
        let limit = if name == "src/connection/mod.rs" {
            600
        } else {
            900
        };
        if text.lines().count() > limit {
            long.push(format!("{name}: {} lines", text.lines().count()));
        }
        if name.ends_with("tests.rs") {
            continue;
        }
        let body = text
            .split("\n#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let lines: Vec<&str> = body.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            let is_fn = [
                "fn ",
                "pub fn ",
                "async fn ",
                "pub async fn ",
                "pub(crate) fn ",
                "pub(super) fn ",
                "pub(crate) async fn ",
                "pub(super) async fn ",
            ]
            .iter()
            .any(|p| trimmed.starts_with(p));
            if !is_fn || trimmed.ends_with(';') {
                continue;
            }
            let close = format!("{}}}", " ".repeat(indent));
            if let Some(len) = lines[at..].iter().position(|l| *l == close) {
                if len + 1 > 120 {
                    long.push(format!(
                        "{name}:{}: a function of {} lines",
                        at + 1,
                        len + 1
                    ));
                }
            }
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn every_source_file_a_comment_or_document_names_exists() {
    // Comments and documents point readers at files: a moved file leaves none pointing at
    // nothing.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = vec![root.join("README.md")];
    texts.extend(modules(root).into_iter().map(|(file, _)| file));
    for dir in ["tests", "benches", "docs"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            texts.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    let mut missing = Vec::new();
    for file in texts {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (at, _) in text.match_indices("src/") {
            if at > 0
                && (text.as_bytes()[at - 1].is_ascii_alphanumeric()
                    || text.as_bytes()[at - 1] == b'/')
            {
                continue;
            }
            let cited: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | '-'))
                .collect();
            let cited = cited.trim_end_matches('.');
            if cited.ends_with(".rs") && !root.join(cited).exists() {
                missing.push(format!("{} names {cited}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn no_type_name_is_declared_twice() {
    // A reader who meets `Waiter` or `Session` should find one of it: two types of one name in
    // two rooms read as one. Types of unit tests (in `tests.rs` files or a `mod tests` at the
    // end of a file) are their tests' own.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (file, _) in modules(root) {
        let name = file.strip_prefix(root).expect("in the repository");
        let name = name.to_string_lossy().replace('\\', "/");
        if name.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let body = text
            .split("\n#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for (at, line) in body.lines().enumerate() {
            // Declarations at the top of a file; an impl's `type Target` is not one.
            let rest = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub(super) "))
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            let Some(decl) = ["struct ", "enum ", "type ", "trait "]
                .iter()
                .find_map(|kw| rest.strip_prefix(kw))
            else {
                continue;
            };
            let ty: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            seen.entry(ty)
                .or_default()
                .push(format!("{name}:{}", at + 1));
        }
    }
    let twice: Vec<String> = seen
        .into_iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(ty, at)| format!("{ty}: {}", at.join(", ")))
        .collect();
    assert!(twice.is_empty(), "{}", twice.join("\n"));
}
