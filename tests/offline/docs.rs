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
