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
