//! The container image (`Dockerfile`, `.dockerignore`) and the compose kit, checked as text,
//! without Docker. Each rule is one a platform would otherwise find at deploy time:
//!
//! - the runtime `USER` is numeric: Kubernetes' `runAsNonRoot` cannot tell that a user
//!   *name* is not root, and refuses to start the container;
//! - every base image is pinned to a version (or a digest), so a rebuild gets the same
//!   toolchain and userland instead of whatever a floating tag points at that day;
//! - the dependencies build in a layer before `COPY src`, so a source change does not
//!   recompile every crate, and the stub build's artifacts are removed so the image cannot
//!   ship the stub;
//! - the runtime stage installs `ca-certificates`: a `rediss://` backend without `tls_ca`
//!   verifies its server against the system's store, which the slim base lacks;
//! - the directory of the image configuration's SQLite file is a `VOLUME`, created and owned
//!   by the runtime user: under a read-only root filesystem it is the one place holdfast
//!   can write;
//! - `.dockerignore` keeps build output and history out of the context, and nothing the
//!   build copies;
//! - the compose kit publishes ports on the host's loopback only, configures the PostgreSQL
//!   backend with its password as a compose secret, and mounts the image's volume.

use serde_yaml::Value as Yaml;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const COMPOSE: &str = "deploy/compose/docker-compose.yml";
const COMPOSE_TOML: &str = "deploy/compose/holdfast.toml";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: impl AsRef<Path>) -> String {
    let path = repo().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn parse_toml(path: &str) -> toml::Value {
    read(path)
        .parse()
        .unwrap_or_else(|e| panic!("{path}: not TOML: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The Dockerfile.

/// One instruction: its keyword in upper case and its arguments, with continuation lines
/// joined and comment lines dropped (as Docker drops them, inside a continuation too).
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

impl Instruction {
    fn words(&self) -> Vec<&str> {
        self.args.split_whitespace().collect()
    }

    /// `COPY`/`ADD` without its `--flag`s: the sources and, last, the destination.
    fn copy_paths(&self) -> Vec<&str> {
        self.words()
            .into_iter()
            .filter(|w| !w.starts_with("--"))
            .collect()
    }

    fn is_copy_from_context(&self) -> bool {
        self.keyword == "COPY" && !self.args.contains("--from=")
    }

    /// `COPY` sources, without the destination.
    fn copy_sources(&self) -> Vec<&str> {
        let mut paths = self.copy_paths();
        paths.pop();
        paths
    }
}

fn dockerfile() -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in read("Dockerfile").lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, args) = current
            .split_once(char::is_whitespace)
            .unwrap_or((current.as_str(), ""));
        out.push(Instruction {
            keyword: keyword.to_ascii_uppercase(),
            args: args.trim().to_string(),
        });
        current.clear();
    }
    out
}

/// The build stages, each from its `FROM` on.
fn stages(instructions: &[Instruction]) -> Vec<&[Instruction]> {
    let starts: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, i)| i.keyword == "FROM")
        .map(|(n, _)| n)
        .collect();
    assert!(!starts.is_empty(), "Dockerfile: no FROM");
    starts
        .iter()
        .enumerate()
        .map(|(k, &start)| {
            let end = starts.get(k + 1).copied().unwrap_or(instructions.len());
            &instructions[start..end]
        })
        .collect()
}

/// The stage the image is: the last one.
fn runtime_stage(instructions: &[Instruction]) -> &[Instruction] {
    stages(instructions).pop().expect("a stage")
}

fn runs(stage: &[Instruction]) -> impl Iterator<Item = &Instruction> {
    stage.iter().filter(|i| i.keyword == "RUN")
}

/// The simple commands of a stage's `RUN`s, split at `&&`, `||`, `;` and `|`, as words.
fn shell_commands(stage: &[Instruction]) -> Vec<Vec<String>> {
    runs(stage)
        .flat_map(|run| run.args.split([';', '&', '|']))
        .map(|cmd| {
            cmd.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|words| !words.is_empty())
        .collect()
}

/// The value of the runtime stage's last `USER` (a stage does not inherit it: no `USER`
/// means root).
fn runtime_user(instructions: &[Instruction]) -> String {
    runtime_stage(instructions)
        .iter()
        .rev()
        .find(|i| i.keyword == "USER")
        .expect("Dockerfile: the runtime stage has no USER, so the container runs as root")
        .args
        .clone()
}

/// `ENV` of the runtime stage, both forms: `ENV K=V K2=V2` and `ENV K V`.
fn runtime_env(instructions: &[Instruction]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for i in runtime_stage(instructions)
        .iter()
        .filter(|i| i.keyword == "ENV")
    {
        if i.words().first().is_some_and(|w| w.contains('=')) {
            for pair in i.words() {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("Dockerfile: ENV `{pair}` is not KEY=value"));
                env.insert(k.to_string(), v.trim_matches('"').to_string());
            }
        } else if let Some((k, v)) = i.args.split_once(char::is_whitespace) {
            env.insert(k.to_string(), v.trim().trim_matches('"').to_string());
        }
    }
    env
}

/// The runtime stage's working directory: every `WORKDIR`, a relative one resolved against
/// the one before.
fn runtime_workdir(instructions: &[Instruction]) -> PathBuf {
    runtime_stage(instructions)
        .iter()
        .filter(|i| i.keyword == "WORKDIR")
        .fold(PathBuf::from("/"), |dir, i| dir.join(i.args.trim()))
}

/// The runtime stage's `VOLUME`s, JSON or plain form.
fn runtime_volumes(instructions: &[Instruction]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for i in runtime_stage(instructions)
        .iter()
        .filter(|i| i.keyword == "VOLUME")
    {
        if i.args.starts_with('[') {
            let list: Vec<String> = serde_json::from_str(&i.args)
                .unwrap_or_else(|e| panic!("Dockerfile: VOLUME {}: {e}", i.args));
            out.extend(list.into_iter().map(PathBuf::from));
        } else {
            out.extend(i.words().into_iter().map(PathBuf::from));
        }
    }
    out
}

/// `ENTRYPOINT` then `CMD` of the runtime stage, as the words holdfast is started with.
fn runtime_command(instructions: &[Instruction]) -> Vec<String> {
    let mut out = Vec::new();
    for keyword in ["ENTRYPOINT", "CMD"] {
        let Some(i) = runtime_stage(instructions)
            .iter()
            .rev()
            .find(|i| i.keyword == keyword)
        else {
            continue;
        };
        match serde_json::from_str::<Vec<String>>(&i.args) {
            Ok(words) => out.extend(words),
            Err(_) => out.extend(i.words().into_iter().map(str::to_string)),
        }
    }
    out
}

/// The repository file the image's `--config` path is copied from.
fn image_config(instructions: &[Instruction]) -> String {
    let command = runtime_command(instructions);
    let at = command
        .iter()
        .position(|w| w == "--config")
        .expect("Dockerfile: ENTRYPOINT/CMD names no --config file");
    let target = &command[at + 1];
    runtime_stage(instructions)
        .iter()
        .filter(|i| i.is_copy_from_context())
        .find(|i| i.copy_paths().last() == Some(&target.as_str()))
        .and_then(|i| i.copy_sources().first().map(|s| s.to_string()))
        .unwrap_or_else(|| panic!("Dockerfile: nothing from the context is copied to {target}"))
}

/// Whether a base image reference names a version: a digest, or a tag holding a release
/// number (`1.95.0`, `12.12`) or a build date (`20251229`).
fn is_pinned(image: &str) -> bool {
    if let Some((_, digest)) = image.split_once('@') {
        return digest.starts_with("sha256:") && digest.len() == 7 + 64;
    }
    let name = image.rsplit('/').next().unwrap_or(image);
    let Some((_, tag)) = name.split_once(':') else {
        return false; // no tag is `latest`
    };
    let b = tag.as_bytes();
    let dotted = (1..b.len().saturating_sub(1))
        .any(|i| b[i] == b'.' && b[i - 1].is_ascii_digit() && b[i + 1].is_ascii_digit());
    let dated = tag
        .split(|c: char| !c.is_ascii_digit())
        .any(|run| run.len() >= 8);
    tag != "latest" && (dotted || dated)
}

#[test]
fn the_pin_rule_tells_versions_from_floating_tags() {
    let digest = format!("debian@sha256:{}", "a".repeat(64));
    for pinned in [
        "rust:1.95.0-bookworm",
        "debian:bookworm-20251229-slim",
        "debian:12.12-slim",
        "registry.example:5000/debian:bookworm-20251229-slim",
        digest.as_str(),
    ] {
        assert!(is_pinned(pinned), "{pinned} should count as pinned");
    }
    for floating in [
        "rust",
        "rust:latest",
        "rust:1-bookworm",
        "debian:bookworm-slim",
        "registry.example:5000/debian",
    ] {
        assert!(!is_pinned(floating), "{floating} should count as floating");
    }
}

#[test]
fn the_runtime_user_is_numeric_and_not_root() {
    let user = runtime_user(&dockerfile());
    let (uid, gid) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user.as_str(), None),
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    assert!(
        numeric(uid) && gid.into_iter().all(numeric),
        "Dockerfile: `USER {user}` is not numeric (uid or uid:gid): Kubernetes' runAsNonRoot \
         refuses a user name, since it cannot tell that the name is not root"
    );
    assert_ne!(uid, "0", "Dockerfile: `USER {user}` is root");
}

#[test]
fn every_base_image_is_pinned_to_a_version() {
    let mut stage_names: Vec<String> = Vec::new();
    for from in dockerfile().iter().filter(|i| i.keyword == "FROM") {
        let words: Vec<&str> = from
            .words()
            .into_iter()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let image = words[0];
        let is_stage = stage_names.iter().any(|s| s.eq_ignore_ascii_case(image));
        if let Some(at) = words.iter().position(|w| w.eq_ignore_ascii_case("as")) {
            stage_names.push(words[at + 1].to_string());
        }
        if is_stage {
            continue; // an earlier stage of this file, pinned where it is defined
        }
        assert!(
            !image.contains('$'),
            "Dockerfile: `FROM {image}` comes from an ARG this test cannot check; write the image out"
        );
        assert!(
            is_pinned(image),
            "Dockerfile: `FROM {image}` floats: pin a release or dated tag \
             (rust:1.95.0-bookworm, debian:bookworm-20251229-slim) or a digest (@sha256:…), \
             never latest or a bare major"
        );
    }
}

/// Where cargo looks for each `[[bin]]` and `[[bench]]` of the manifest: files a build with
/// stub sources must create, or cargo refuses the manifest.
fn manifest_targets() -> (String, Vec<String>) {
    let manifest = parse_toml("Cargo.toml");
    let package = manifest["package"]["name"]
        .as_str()
        .expect("Cargo.toml: package.name")
        .to_string();
    let mut paths = Vec::new();
    for (kind, dir) in [("bin", "src/bin"), ("bench", "benches")] {
        for target in manifest
            .get(kind)
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = target["name"].as_str().expect("a target has a name");
            let path = target.get("path").and_then(toml::Value::as_str);
            paths.push(path.map_or_else(|| format!("{dir}/{name}.rs"), str::to_string));
        }
    }
    if repo().join("src/lib.rs").is_file() {
        paths.push("src/lib.rs".to_string());
    }
    (package, paths)
}

#[test]
fn dependencies_build_in_a_layer_before_the_sources_are_copied() {
    let instructions = dockerfile();
    let copies_src = |i: &Instruction| {
        i.is_copy_from_context()
            && i.copy_sources()
                .iter()
                .any(|s| s.trim_start_matches("./").trim_end_matches('/') == "src")
    };
    let stage = stages(&instructions)
        .into_iter()
        .find(|stage| stage.iter().any(copies_src))
        .expect("Dockerfile: no stage copies src");
    let copy_src = stage.iter().position(copies_src).unwrap();
    let before = &stage[..copy_src];
    let dep_build = before
        .iter()
        .position(|i| i.keyword == "RUN" && i.args.contains("cargo build"))
        .expect(
            "Dockerfile: no `cargo build` before `COPY src`: every source change would \
             recompile every dependency",
        );
    let copied_first: Vec<&str> = before[..dep_build]
        .iter()
        .filter(|i| i.is_copy_from_context())
        .flat_map(Instruction::copy_sources)
        .collect();
    assert!(
        copied_first.contains(&"Cargo.lock"),
        "Dockerfile: Cargo.lock is not copied before the dependency build, so it cannot be --locked"
    );
    assert!(
        !copied_first.iter().any(|s| *s == "." || *s == "./"),
        "Dockerfile: the whole context is copied before the dependency build; any change invalidates it"
    );

    let run = &before[dep_build].args;
    let (package, targets) = manifest_targets();
    for target in &targets {
        assert!(
            run.contains(target.as_str()),
            "Dockerfile: the dependency build creates no stub {target}: cargo reads every \
             target Cargo.toml names and stops when a file is missing"
        );
    }
    assert!(
        run.contains(&format!(".fingerprint/{package}-")),
        "Dockerfile: the dependency build leaves the stub's fingerprints \
         (target/release/.fingerprint/{package}-*): cargo may take the stub for up to date and \
         the image would ship it"
    );
    assert!(
        stage[copy_src..]
            .iter()
            .any(|i| i.keyword == "RUN" && i.args.contains("cargo build")),
        "Dockerfile: nothing builds after `COPY src`"
    );
}

#[test]
fn the_runtime_stage_installs_ca_certificates() {
    let instructions = dockerfile();
    let install = runs(runtime_stage(&instructions)).find(|run| {
        run.args.contains("apt-get install") && run.words().contains(&"ca-certificates")
    });
    let install = install.expect(
        "Dockerfile: the runtime stage does not install ca-certificates: a rediss:// backend \
         without tls_ca verifies its server against the system store, empty in the slim base",
    );
    assert!(
        install.args.contains("rm -rf /var/lib/apt/lists"),
        "Dockerfile: the RUN that installs ca-certificates leaves the apt lists in the layer"
    );
}

/// `dir` is created by a `mkdir` and given to `owner` by a `chown` (of it, or `-R` of a
/// directory above it) in the stage's `RUN`s.
fn created_and_owned(commands: &[Vec<String>], dir: &Path, owner: &str) -> (bool, bool) {
    let names_dir = |args: &[String], recursive: bool| {
        args.iter()
            .filter(|a| !a.starts_with('-'))
            .any(|a| Path::new(a) == dir || (recursive && dir.starts_with(a)))
    };
    let created = commands
        .iter()
        .any(|c| c[0] == "mkdir" && names_dir(&c[1..], false));
    let owned = commands.iter().any(|c| {
        let Some(user) = c[1..].iter().find(|a| !a.starts_with('-')) else {
            return false;
        };
        let recursive = c.iter().any(|a| a == "-R" || a == "--recursive");
        c[0] == "chown" && user.split(':').next() == Some(owner) && names_dir(&c[1..], recursive)
    });
    (created, owned)
}

#[test]
fn the_sqlite_directory_is_a_volume_owned_by_the_runtime_user() {
    let instructions = dockerfile();
    let config_file = image_config(&instructions);
    // What holdfast makes of the file: one naming no backend keeps the embedded default.
    let config = holdfast::config::Config::from_toml(&read(&config_file))
        .unwrap_or_else(|e| panic!("{config_file}: {e}"));
    let env = runtime_env(&instructions);
    let workdir = runtime_workdir(&instructions);
    let volumes = runtime_volumes(&instructions);
    let user = runtime_user(&instructions);
    let uid = user.split(':').next().unwrap_or_default();
    let commands = shell_commands(runtime_stage(&instructions));

    let mut checked = 0;
    for (name, backend) in &config.backends {
        let holdfast::config::BackendConfig::Sqlite(sqlite) = backend else {
            continue;
        };
        // The environment wins over the file (HOLDFAST_ + the key path, `__` between).
        let key = format!("HOLDFAST_BACKENDS__{}__PATH", name.to_ascii_uppercase());
        let path = env.get(&key).map_or(sqlite.path.as_str(), String::as_str);
        let file = workdir.join(path);
        let dir = file.parent().expect("a file has a directory");
        assert!(
            volumes.iter().any(|v| dir.starts_with(v)),
            "Dockerfile: backends.{name} of {config_file} writes {}, under no VOLUME \
             ({volumes:?}): under a read-only root filesystem holdfast cannot open it",
            file.display()
        );
        let (created, owned) = created_and_owned(&commands, dir, uid);
        assert!(
            created,
            "Dockerfile: the runtime stage does not mkdir {}: the volume would start as a root-owned empty directory",
            dir.display()
        );
        assert!(
            owned,
            "Dockerfile: {} is not chowned to the USER's uid {uid}: holdfast could not write its SQLite file",
            dir.display()
        );
        checked += 1;
    }
    assert!(
        checked > 0,
        "{config_file}: no sqlite backend, so this test checks nothing; point it at the backend \
         that writes inside the container"
    );
}

/// The image sets no `HOLDFAST_` variable: the environment overrides a configuration file's
/// keys, so one would override the keys of a file mounted over the image's own (an `ENV`
/// listener on every interface once opened a port a mounted file had kept on loopback). The
/// image's defaults come from its file, which a mount replaces whole.
#[test]
fn the_image_environment_overrides_no_configuration_key() {
    let env = runtime_env(&dockerfile());
    let set: Vec<&String> = env.keys().filter(|k| k.starts_with("HOLDFAST_")).collect();
    assert!(set.is_empty(), "Dockerfile: ENV sets {set:?}");
}

/// The runtime stage carries the OCI labels a registry and a scanner read, its version the
/// package's.
#[test]
fn the_image_is_labelled() {
    let labels: String = runtime_stage(&dockerfile())
        .iter()
        .filter(|i| i.keyword == "LABEL")
        .map(|i| i.args.as_str())
        .collect();
    let version = parse_toml("Cargo.toml")["package"]["version"]
        .as_str()
        .expect("Cargo.toml: package.version")
        .to_string();
    for want in [
        "org.opencontainers.image.title=\"holdfast\"".to_string(),
        format!("org.opencontainers.image.version=\"{version}\""),
        "org.opencontainers.image.licenses=".to_string(),
        "org.opencontainers.image.description=".to_string(),
    ] {
        assert!(
            labels.contains(&want),
            "Dockerfile: no LABEL {want} in {labels}"
        );
    }
}

/// What the image ships is the release build stripped (a 137 MB binary with line tables, 19
/// MB without); the line tables stay in a profile of their own for perf and callgrind.
#[test]
fn the_release_build_ships_stripped() {
    let manifest = parse_toml("Cargo.toml");
    let release = &manifest["profile"]["release"];
    assert_eq!(
        release.get("strip").and_then(toml::Value::as_bool),
        Some(true)
    );
    assert!(release
        .get("debug")
        .is_none_or(|d| d.as_bool() == Some(false) || d.as_integer() == Some(0)));
    let profiling = &manifest["profile"]["profiling"];
    assert_eq!(profiling["inherits"].as_str(), Some("release"));
}

// ---------------------------------------------------------------------------------------------
// .dockerignore, by Docker's rules: patterns relative to the context root,
// `*` and `?` within one path segment, `**` across any number of them, a pattern excluding a
// directory excludes what is under it, the last matching pattern wins, `!` re-includes.

fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && glob(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some(close) = rest.iter().skip(1).position(|&c| c == b']').map(|i| i + 1) else {
                return name.first() == Some(&b'[') && glob(rest, &name[1..]);
            };
            let Some(&c) = name.first() else {
                return false;
            };
            let (negated, set) = match rest[0] {
                b'!' | b'^' => (true, &rest[1..close]),
                _ => (false, &rest[..close]),
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= (set[i]..=set[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negated && glob(&rest[close + 1..], &name[1..])
        }
        Some((b'\\', [c, rest @ ..])) => name.first() == Some(c) && glob(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && glob(rest, &name[1..]),
    }
}

fn glob_path(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|i| glob_path(rest, &path[i..])),
        Some((p, rest)) => {
            !path.is_empty()
                && glob(p.as_bytes(), path[0].as_bytes())
                && glob_path(rest, &path[1..])
        }
    }
}

/// `(negated, segments)` of each pattern of `.dockerignore`.
fn dockerignore() -> Vec<(bool, Vec<String>)> {
    read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (negated, pattern) = match l.strip_prefix('!') {
                Some(p) => (true, p.trim()),
                None => (false, l),
            };
            let segments = pattern
                .split('/')
                .filter(|s| !s.is_empty() && *s != ".")
                .map(str::to_string)
                .collect();
            (negated, segments)
        })
        .collect()
}

/// Whether the context leaves out `path` (relative, `/`-separated).
fn ignored(patterns: &[(bool, Vec<String>)], path: &str) -> bool {
    let path: Vec<&str> = path.split('/').collect();
    let mut out = false;
    for (negated, pattern) in patterns {
        let pattern: Vec<&str> = pattern.iter().map(String::as_str).collect();
        if (1..=path.len()).any(|n| glob_path(&pattern, &path[..n])) {
            out = !negated;
        }
    }
    out
}

/// `path` and, for a directory, every file under it, relative to the repository.
fn context_files(path: &str) -> Vec<String> {
    let full = repo().join(path);
    if !full.is_dir() {
        return vec![path.to_string()];
    }
    let mut out = vec![path.to_string()];
    let entries = std::fs::read_dir(&full).unwrap_or_else(|e| panic!("{path}: {e}"));
    for entry in entries {
        let name = entry.expect("a directory entry").file_name();
        out.extend(context_files(&format!("{path}/{}", name.to_string_lossy())));
    }
    out
}

#[test]
fn the_ignore_rules_follow_docker() {
    let patterns = |lines: &[&str]| -> Vec<(bool, Vec<String>)> {
        lines
            .iter()
            .map(|l| match l.strip_prefix('!') {
                Some(p) => (true, p.split('/').map(str::to_string).collect()),
                None => (false, l.split('/').map(str::to_string).collect()),
            })
            .collect()
    };
    let p = patterns(&[
        "target",
        "**/*.db",
        "fuzz/corpus*",
        "*.[ch]",
        "docs",
        "!docs/keep",
    ]);
    assert!(ignored(&p, "target/release/holdfast"));
    assert!(
        !ignored(&p, "fuzz/target"),
        "`target` is anchored at the root"
    );
    assert!(ignored(&p, "holdfast.db") && ignored(&p, "data/x/holdfast.db"));
    assert!(!ignored(&p, "holdfast.db-wal"));
    assert!(ignored(&p, "fuzz/corpus-ci/resp_decode/x"));
    assert!(ignored(&p, "a.c") && !ignored(&p, "a.rs"));
    assert!(ignored(&p, "docs/other") && !ignored(&p, "docs/keep"));
}

#[test]
fn the_build_context_leaves_out_build_output_and_keeps_what_the_build_copies() {
    let patterns = dockerignore();
    for left_out in ["target", ".git"] {
        assert!(
            ignored(&patterns, left_out),
            ".dockerignore does not exclude `{left_out}`: it would be sent with every build \
             (gigabytes of artifacts, the whole history)"
        );
    }
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        ".cargo",
        "src",
        "benches",
        "config",
    ] {
        assert!(
            repo().join(needed).exists(),
            "{needed} is missing from the repository"
        );
        for file in context_files(needed) {
            assert!(
                !ignored(&patterns, &file),
                ".dockerignore excludes `{file}`, which the image build copies"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The compose kit.

fn compose() -> Yaml {
    serde_yaml::from_str(&read(COMPOSE)).unwrap_or_else(|e| panic!("{COMPOSE}: {e}"))
}

fn services(compose: &Yaml) -> &serde_yaml::Mapping {
    compose
        .get("services")
        .and_then(Yaml::as_mapping)
        .unwrap_or_else(|| panic!("{COMPOSE}: no services"))
}

fn holdfast_service(compose: &Yaml) -> &Yaml {
    compose
        .get("services")
        .and_then(|s| s.get("holdfast"))
        .unwrap_or_else(|| panic!("{COMPOSE}: no holdfast service"))
}

fn list(v: Option<&Yaml>) -> &[Yaml] {
    v.and_then(Yaml::as_sequence).map_or(&[], Vec::as_slice)
}

#[test]
fn compose_publishes_ports_on_loopback_only() {
    let compose = compose();
    for (name, service) in services(&compose) {
        let name = name.as_str().unwrap_or("?");
        for port in list(service.get("ports")) {
            let loopback = match port {
                Yaml::String(s) => s.starts_with("127.0.0.1:"),
                Yaml::Mapping(_) => port.get("host_ip").and_then(Yaml::as_str) == Some("127.0.0.1"),
                _ => false,
            };
            assert!(
                loopback,
                "{COMPOSE}: service `{name}` publishes {port:?} on every interface of the host; \
                 bind it to 127.0.0.1"
            );
        }
    }
}

#[test]
fn compose_configures_the_postgres_backend() {
    for file in [COMPOSE, COMPOSE_TOML] {
        assert!(
            !read(file).contains("not built"),
            "{file} still says the PostgreSQL backend is not built"
        );
    }
    let config = parse_toml(COMPOSE_TOML);
    let backends = config
        .get("backends")
        .and_then(toml::Value::as_table)
        .unwrap_or_else(|| panic!("{COMPOSE_TOML}: no [backends]"));
    let postgres: Vec<&String> = backends
        .iter()
        .filter(|(_, b)| b.get("kind").and_then(toml::Value::as_str) == Some("postgres"))
        .map(|(name, _)| name)
        .collect();
    assert!(
        !postgres.is_empty(),
        "{COMPOSE_TOML}: no kind = \"postgres\" backend for the compose `postgres` service"
    );
    let namespaces = config
        .get("namespaces")
        .and_then(toml::Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    assert!(
        namespaces.iter().any(|ns| ns
            .get("backend")
            .and_then(toml::Value::as_str)
            .is_some_and(|b| postgres.iter().any(|p| p.as_str() == b))),
        "{COMPOSE_TOML}: no namespace routes to the postgres backend {postgres:?}"
    );
}

/// A service's secrets, short (`- name`) or long (`- source: name`) syntax.
fn service_secrets(service: &Yaml) -> Vec<&str> {
    list(service.get("secrets"))
        .iter()
        .filter_map(|s| {
            s.as_str()
                .or_else(|| s.get("source").and_then(Yaml::as_str))
        })
        .collect()
}

#[test]
fn compose_gives_holdfast_the_secrets_its_configuration_reads() {
    let compose = compose();
    let holdfast = holdfast_service(&compose);
    let config = parse_toml(COMPOSE_TOML);
    let backends = config
        .get("backends")
        .and_then(toml::Value::as_table)
        .unwrap_or_else(|| panic!("{COMPOSE_TOML}: no [backends]"));
    for (name, backend) in backends {
        let Some(file) = backend.get("password_file").and_then(toml::Value::as_str) else {
            continue;
        };
        let secret = file.strip_prefix("/run/secrets/").unwrap_or_else(|| {
            panic!("{COMPOSE_TOML}: backends.{name}.password_file {file} is not a compose secret")
        });
        assert!(
            service_secrets(holdfast).contains(&secret),
            "{COMPOSE}: the holdfast service does not get the secret {secret:?} that backends.{name} reads"
        );
        let source = compose
            .get("secrets")
            .and_then(|s| s.get(secret))
            .and_then(|s| s.get("file"))
            .and_then(Yaml::as_str)
            .unwrap_or_else(|| panic!("{COMPOSE}: no top-level secret {secret:?} with a file"));
        let path = repo().join("deploy/compose").join(source);
        assert!(
            path.is_file(),
            "{COMPOSE}: secret {secret:?}: {} does not exist",
            path.display()
        );
    }
}

#[test]
fn compose_mounts_the_image_volumes_under_its_read_only_root() {
    let compose = compose();
    let holdfast = holdfast_service(&compose);
    assert_eq!(
        holdfast.get("read_only").and_then(Yaml::as_bool),
        Some(true),
        "{COMPOSE}: the holdfast service should run with a read-only root, as on Kubernetes"
    );
    let targets: Vec<PathBuf> = list(holdfast.get("volumes"))
        .iter()
        .filter_map(|v| match v {
            Yaml::String(s) => s.split(':').nth(1).map(PathBuf::from),
            _ => v.get("target").and_then(Yaml::as_str).map(PathBuf::from),
        })
        .collect();
    for volume in runtime_volumes(&dockerfile()) {
        assert!(
            targets.contains(&volume),
            "{COMPOSE}: nothing is mounted at the image's VOLUME {}: mount a named volume there \
             so holdfast's data outlives the container",
            volume.display()
        );
    }
}

/// hadolint, the Dockerfile linter (installed by `tests/run`), finds nothing, down to its
/// `info` rules (a named `USER` is one: DL3066).
#[test]
fn hadolint_finds_nothing() {
    let output = std::process::Command::new("hadolint")
        .args(["--no-color", "--failure-threshold", "info", "Dockerfile"])
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run hadolint (tests/run installs it): {e}"));
    assert!(
        output.status.success(),
        "hadolint:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
