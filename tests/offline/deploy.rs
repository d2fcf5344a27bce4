//! The deployment files under `deploy/`, checked without any server: every file parses, every
//! `holdfast_…` name in them is a metric of the catalogue (`holdfast::metrics::CATALOGUE`) used
//! as its kind and labels allow, the dashboard shows every metric, the alerts cover what they
//! must, the Kubernetes sidecar and the compose stack are wired to the ports and files they
//! name, and every configuration file validates, in-process and through `holdfast
//! check-config` with the environment the image and the manifests give it.

use holdfast::config::Config;
use holdfast::metrics::{Def, SeriesKind, CATALOGUE};
use serde::Deserialize;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const K8S: &str = "deploy/kubernetes/holdfast-sidecar.yaml";
const POD_MONITOR: &str = "deploy/kubernetes/podmonitor.yaml";
const COMPOSE: &str = "deploy/compose/docker-compose.yml";
const COMPOSE_TOML: &str = "deploy/compose/holdfast.toml";
const PROMETHEUS: &str = "deploy/compose/prometheus.yml";
const ALERTS: &str = "deploy/prometheus/alerts.yml";
const ALERT_TESTS: &str = "deploy/prometheus/alerts.test.yml";
const DASHBOARD: &str = "deploy/grafana/holdfast-dashboard.json";
/// Where the image's `CMD` reads its configuration (the Dockerfile copies it there).
const IMAGE_CONFIG: &str = "/etc/holdfast/holdfast.toml";
/// Suffixes of the series a histogram exposes.
const HISTOGRAM_SERIES: [&str; 3] = ["_bucket", "_sum", "_count"];
/// Labels Prometheus attaches to every scraped series, and the Kubernetes `namespace` a
/// pod scrape attaches (the Prometheus Operator's PodMonitor does; absent elsewhere,
/// where grouping by it groups everything), which the alerts aggregate by.
const TARGET_LABELS: [&str; 3] = ["instance", "job", "namespace"];
/// PromQL functions that take a counter.
const COUNTER_FUNCTIONS: [&str; 3] = ["rate", "irate", "increase"];

// ---------------------------------------------------------------------------------------------
// Files.

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: impl AsRef<Path>) -> String {
    let path = repo().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir`, recursively, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn extension(path: &Path) -> &str {
    path.extension().and_then(|e| e.to_str()).unwrap_or("")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The non-empty documents of a (multi-document) YAML file.
fn yaml_documents(path: impl AsRef<Path>) -> Vec<Yaml> {
    let path = repo().join(path);
    let text = read(&path);
    let mut docs = Vec::new();
    for (i, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = Yaml::deserialize(document)
            .unwrap_or_else(|e| panic!("{}: document {i}: {e}", relative(&path)));
        if !value.is_null() {
            docs.push(value);
        }
    }
    assert!(!docs.is_empty(), "{}: no YAML document", relative(&path));
    docs
}

fn yaml_file(path: &str) -> Yaml {
    let mut docs = yaml_documents(path);
    assert_eq!(docs.len(), 1, "{path}: expected one YAML document");
    docs.remove(0)
}

fn json_file(path: impl AsRef<Path>) -> Json {
    let path = repo().join(path);
    serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", relative(&path)))
}

/// `v[k0][k1]…`, or a panic naming the missing key.
fn at<'a>(v: &'a Yaml, keys: &[&str]) -> &'a Yaml {
    let mut cur = v;
    for (i, k) in keys.iter().enumerate() {
        cur = cur
            .get(*k)
            .unwrap_or_else(|| panic!("missing key {}", keys[..=i].join(".")));
    }
    cur
}

fn text<'a>(v: &'a Yaml, keys: &[&str]) -> &'a str {
    at(v, keys)
        .as_str()
        .unwrap_or_else(|| panic!("{} is not a string", keys.join(".")))
}

fn seq(v: Option<&Yaml>) -> &[Yaml] {
    v.and_then(Yaml::as_sequence).map_or(&[], Vec::as_slice)
}

fn parse_duration(s: &str) -> Duration {
    humantime_serde::re::humantime::parse_duration(s)
        .unwrap_or_else(|e| panic!("`{s}` is not a duration: {e}"))
}

/// A YAML scalar as Kubernetes or compose would pass it on: strings, numbers, booleans.
fn scalar(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Metric names and PromQL.

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every identifier that starts with `holdfast_` (not inside a longer identifier), with its
/// byte offset: the whole identifier, so `holdfast_requests_total2` is not taken for a
/// catalogue name. `HOLDFAST_` environment variables are not metrics and do not match, nor
/// does the `holdfast_namespace` label.
fn metric_identifiers(text: &str) -> Vec<(usize, &str)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find("holdfast_") {
        let start = from + i;
        let mut end = start;
        while end < bytes.len() && is_ident(bytes[end]) {
            end += 1;
        }
        let name = &text[start..end];
        if (start == 0 || !is_ident(bytes[start - 1])) && name != holdfast::metrics::NAMESPACE {
            out.push((start, name));
        }
        from = end;
    }
    out
}

/// The catalogue entry a series name belongs to, and the histogram suffix it carries.
fn catalogue_entry(name: &str) -> Option<(&'static Def, Option<&'static str>)> {
    CATALOGUE.iter().find_map(|def| {
        if def.name == name {
            return Some((def, None));
        }
        if def.kind != SeriesKind::Histogram {
            return None;
        }
        HISTOGRAM_SERIES
            .iter()
            .find(|suffix| name.strip_suffix(**suffix) == Some(def.name))
            .map(|suffix| (def, Some(*suffix)))
    })
}

/// Labels a series of `def` (with histogram `suffix`) may be selected or grouped by.
fn allowed_labels(def: &Def, suffix: Option<&str>) -> BTreeSet<&'static str> {
    let mut labels: BTreeSet<&'static str> = def.labels.iter().copied().collect();
    labels.extend(TARGET_LABELS);
    if suffix == Some("_bucket") {
        labels.insert("le");
    }
    labels
}

/// The function whose parentheses most closely enclose byte `pos` of `expr`: `Some("rate")`,
/// `Some("")` for the bare group after `sum by (…)`, `None` at the top level.
fn enclosing_function(expr: &str, pos: usize) -> Option<&str> {
    let b = expr.as_bytes();
    let (mut depth, mut in_string) = (0usize, false);
    let mut i = pos;
    while i > 0 {
        i -= 1;
        match b[i] {
            b'"' => in_string = !in_string,
            _ if in_string => {}
            b')' => depth += 1,
            b'(' if depth > 0 => depth -= 1,
            b'(' => {
                let mut end = i;
                while end > 0 && b[end - 1].is_ascii_whitespace() {
                    end -= 1;
                }
                let mut start = end;
                while start > 0 && is_ident(b[start - 1]) {
                    start -= 1;
                }
                return Some(&expr[start..end]);
            }
            _ => {}
        }
    }
    None
}

/// The byte range of the parenthesised group that opens at `open` (exclusive of both ends).
fn group_forward(expr: &str, open: usize) -> std::ops::Range<usize> {
    let b = expr.as_bytes();
    let (mut depth, mut in_string) = (0usize, false);
    for (i, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'"' => in_string = !in_string,
            _ if in_string => {}
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return open + 1..i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in `{expr}`")
}

/// The byte range of the parenthesised group that closes at `close`.
fn group_backward(expr: &str, close: usize) -> std::ops::Range<usize> {
    let b = expr.as_bytes();
    let (mut depth, mut in_string) = (0usize, false);
    let mut i = close + 1;
    while i > 0 {
        i -= 1;
        match b[i] {
            b'"' => in_string = !in_string,
            _ if in_string => {}
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1..close;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in `{expr}`")
}

/// Label names in the `{…}` selector right after byte `end` (the end of a metric name).
fn selector_labels(expr: &str, end: usize) -> Vec<&str> {
    if expr.as_bytes().get(end) != Some(&b'{') {
        return Vec::new();
    }
    let b = expr.as_bytes();
    let mut in_string = false;
    let mut close = None;
    for (i, &c) in b.iter().enumerate().skip(end + 1) {
        match c {
            b'"' => in_string = !in_string,
            b'}' if !in_string => {
                close = Some(i);
                break;
            }
            _ => {}
        }
    }
    let close = close.unwrap_or_else(|| panic!("unclosed selector in `{expr}`"));
    let mut labels = Vec::new();
    let mut item_start = end + 1;
    in_string = false;
    for i in end + 1..=close {
        match b[i] {
            b'"' => in_string = !in_string,
            b',' | b'}' if !in_string => {
                let item = expr[item_start..i].trim();
                let name_len = item.bytes().take_while(|c| is_ident(*c)).count();
                if name_len > 0 {
                    labels.push(&item[..name_len]);
                }
                item_start = i + 1;
            }
            _ => {}
        }
    }
    labels
}

/// Each `by (…)` / `without (…)` clause: its labels and the group it aggregates.
fn grouping_clauses(expr: &str) -> Vec<(Vec<&str>, std::ops::Range<usize>)> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    for word in ["by", "without"] {
        let mut from = 0;
        while let Some(i) = expr[from..].find(word) {
            let start = from + i;
            let end = start + word.len();
            from = end;
            if (start > 0 && is_ident(b[start - 1])) || (end < b.len() && is_ident(b[end])) {
                continue;
            }
            let Some(open) = (end..b.len()).find(|&j| !b[j].is_ascii_whitespace()) else {
                continue;
            };
            if b[open] != b'(' {
                continue;
            }
            let list = group_forward(expr, open);
            let labels = expr[list.clone()]
                .split(',')
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let after = (list.end + 1..b.len()).find(|&j| !b[j].is_ascii_whitespace());
            let group = match after {
                // `sum by (l) (expr)`
                Some(j) if b[j] == b'(' => group_forward(expr, j),
                // `sum (expr) by (l)`
                _ => {
                    let before = (0..start).rev().find(|&j| !b[j].is_ascii_whitespace());
                    match before {
                        Some(j) if b[j] == b')' => group_backward(expr, j),
                        _ => panic!("cannot find what `{word}` groups in `{expr}`"),
                    }
                }
            };
            out.push((labels, group));
        }
    }
    out
}

/// Problems with one PromQL expression: names outside the catalogue, a histogram named
/// without its series suffix, a counter outside `rate`/`increase` or a gauge inside one, a
/// label the metric does not have. `functions` is false for Grafana's `label_values(…)`.
fn promql_problems(place: &str, expr: &str, functions: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let ids = metric_identifiers(expr);
    // The process's series (`metrics::PROCESS`) are holdfast's too, in Prometheus's names.
    let process: Vec<&str> = expr
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("process_"))
        .collect();
    for name in &process {
        if !holdfast::metrics::PROCESS.contains(name) {
            problems.push(format!(
                "{place}: `{name}` is not a process metric holdfast exports"
            ));
        }
    }
    if ids.is_empty() && process.is_empty() {
        problems.push(format!("{place}: no holdfast metric in `{expr}`"));
    }
    for &(pos, name) in &ids {
        let Some((def, suffix)) = catalogue_entry(name) else {
            problems.push(format!("{place}: `{name}` is not in the catalogue"));
            continue;
        };
        if def.kind == SeriesKind::Histogram && suffix.is_none() {
            problems.push(format!(
                "{place}: histogram `{name}` has no series of that name; use _bucket, _sum or _count"
            ));
        }
        if functions {
            let counts = def.kind == SeriesKind::Counter || suffix.is_some();
            let function = enclosing_function(expr, pos).unwrap_or("");
            let in_rate = COUNTER_FUNCTIONS.contains(&function);
            if counts && !in_rate {
                problems.push(format!(
                    "{place}: `{name}` only goes up; take its rate() or increase(), not `{function}`"
                ));
            }
            if !counts && in_rate {
                problems.push(format!(
                    "{place}: `{name}` is a gauge; {function}() of it means nothing"
                ));
            }
        }
        let allowed = allowed_labels(def, suffix);
        for label in selector_labels(expr, pos + name.len()) {
            if !allowed.contains(label) {
                problems.push(format!("{place}: `{name}` has no label `{label}`"));
            }
        }
    }
    for (labels, group) in grouping_clauses(expr) {
        for &(pos, name) in &ids {
            if !group.contains(&pos) {
                continue;
            }
            let Some((def, suffix)) = catalogue_entry(name) else {
                continue;
            };
            let allowed = allowed_labels(def, suffix);
            for label in &labels {
                if !allowed.contains(label) {
                    problems.push(format!(
                        "{place}: grouped by `{label}`, which `{name}` does not have"
                    ));
                }
            }
        }
    }
    problems
}

fn alert_rules() -> Vec<Yaml> {
    let doc = yaml_file(ALERTS);
    let groups = seq(doc.get("groups"));
    assert!(!groups.is_empty(), "{ALERTS}: no groups");
    groups
        .iter()
        .flat_map(|g| seq(g.get("rules")).iter().cloned())
        .collect()
}

/// Every panel of the dashboard, those inside collapsed rows included.
fn dashboard_panels(dashboard: &Json) -> Vec<&Json> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("dashboard panels") {
        out.push(panel);
        if let Some(inner) = panel["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// `(where, expr)` of every dashboard query: panel targets (`true`) and template variables
/// (`false`: `label_values(…)` takes no function rules).
fn dashboard_queries(dashboard: &Json) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for panel in dashboard_panels(dashboard) {
        for target in panel["targets"].as_array().map_or(&[][..], Vec::as_slice) {
            let expr = target["expr"].as_str().unwrap_or_else(|| {
                panic!(
                    "{DASHBOARD}: panel {:?}: a target without expr",
                    panel["title"]
                )
            });
            let place = format!(
                "{DASHBOARD}: panel {} target {}",
                panel["title"], target["refId"]
            );
            out.push((place, expr.to_string(), true));
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
    {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .or_else(|| var["query"].as_str())
            .unwrap_or_else(|| panic!("{DASHBOARD}: variable {} has no query", var["name"]));
        out.push((
            format!("{DASHBOARD}: variable {}", var["name"]),
            query.to_string(),
            false,
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// holdfast itself.

/// `ENV` of the Dockerfile's last stage: what the image puts in holdfast's environment.
fn image_env() -> Vec<(String, String)> {
    let dockerfile = read("Dockerfile").replace("\\\n", " ");
    let last_stage = dockerfile
        .rsplit_once("\nFROM ")
        .map_or(dockerfile.as_str(), |(_, stage)| stage);
    let mut env = Vec::new();
    for line in last_stage.lines() {
        let Some(rest) = line.trim().strip_prefix("ENV ") else {
            continue;
        };
        for pair in rest.split_whitespace() {
            let (k, v) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("Dockerfile: ENV `{pair}` is not KEY=value"));
            env.push((k.to_string(), v.trim_matches('"').to_string()));
        }
    }
    env
}

/// The image user's uid (`useradd --uid N`), if the Dockerfile names one.
fn image_uid() -> Option<i64> {
    let dockerfile = read("Dockerfile");
    let rest = dockerfile.split_once("--uid ")?.1;
    rest.split_whitespace().next()?.parse().ok()
}

/// Runs `holdfast check-config file` with only `env` of the `HOLDFAST_` variables, expects
/// exit 0 and returns the effective configuration it prints.
fn check_config(file: &Path, env: &[(String, String)]) -> Config {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast"));
    cmd.arg("check-config").arg(file);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("HOLDFAST_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().expect("runs the holdfast binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "holdfast check-config {} exited {:?}: {stderr}",
        file.display(),
        out.status.code()
    );
    let stdout = String::from_utf8(out.stdout).expect("check-config prints UTF-8");
    Config::from_toml(&stdout).unwrap_or_else(|e| {
        panic!(
            "the configuration check-config printed for {} does not load again: {e}\n{stdout}",
            file.display()
        )
    })
}

fn check_config_text(name: &str, toml: &str, env: &[(String, String)]) -> Config {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, toml).expect("writes the temp config");
    check_config(&path, env)
}

/// A configuration file's text as holdfast reads it where it is deployed: the compose
/// file's holdfast.toml with each secret the compose file mounts into the holdfast service
/// (`/run/secrets/NAME`) at the file it comes from.
fn deployed_text(path: &Path) -> String {
    let mut toml = read(path);
    if path.canonicalize().ok() != repo().join(COMPOSE_TOML).canonicalize().ok() {
        return toml;
    }
    let compose = yaml_file(COMPOSE);
    let mounted = seq(at(&compose, &["services", "holdfast"]).get("secrets"));
    for name in mounted.iter().map(scalar) {
        let source = text(&compose, &["secrets", &name, "file"]);
        let file = repo().join("deploy/compose").join(source);
        assert!(
            file.is_file(),
            "{COMPOSE}: secret {name}'s file {} is missing",
            file.display()
        );
        toml = toml.replace(&format!("/run/secrets/{name}"), &file.display().to_string());
    }
    toml
}

fn from_toml(place: &str, toml: &str) -> Config {
    Config::from_toml(toml).unwrap_or_else(|e| panic!("{place}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Kubernetes.

struct Manifest {
    docs: Vec<Yaml>,
}

impl Manifest {
    fn load() -> Manifest {
        let docs = yaml_documents(K8S);
        for doc in &docs {
            text(doc, &["apiVersion"]);
            text(doc, &["kind"]);
            text(doc, &["metadata", "name"]);
        }
        Manifest { docs }
    }

    fn of_kind(&self, kind: &str) -> Vec<&Yaml> {
        self.docs
            .iter()
            .filter(|d| d.get("kind").and_then(Yaml::as_str) == Some(kind))
            .collect()
    }

    fn named(&self, kind: &str, name: &str) -> &Yaml {
        self.of_kind(kind)
            .into_iter()
            .find(|d| text(d, &["metadata", "name"]) == name)
            .unwrap_or_else(|| panic!("{K8S}: no {kind} named `{name}`"))
    }

    /// The one workload and its pod template (Deployment, StatefulSet, DaemonSet or Pod).
    fn pod(&self) -> (&Yaml, &Yaml) {
        let mut pods = Vec::new();
        for doc in &self.docs {
            match doc.get("kind").and_then(Yaml::as_str) {
                Some("Deployment" | "StatefulSet" | "DaemonSet") => {
                    pods.push((doc, at(doc, &["spec", "template"])));
                }
                Some("Pod") => pods.push((doc, doc)),
                _ => {}
            }
        }
        assert_eq!(pods.len(), 1, "{K8S}: expected one workload");
        pods[0]
    }

    /// Resolves a container's environment: literal values, Secret and ConfigMap keys of this
    /// file.
    fn env(&self, container: &Yaml) -> Vec<(String, String)> {
        let mut env = Vec::new();
        for var in seq(container.get("env")) {
            let name = text(var, &["name"]).to_string();
            if let Some(value) = var.get("value") {
                env.push((name, scalar(value)));
                continue;
            }
            let from = at(var, &["valueFrom"]);
            if let Some(r) = from.get("secretKeyRef") {
                // The Secret is the operator's to create; the manifest only references it,
                // so a value stands in for what it will hold.
                let secret = text(r, &["name"]);
                assert!(
                    self.of_kind("Secret").is_empty(),
                    "{K8S}: ships a Secret; reference {secret} instead"
                );
                env.push((name, format!("from-secret-{secret}")));
            } else if let Some(r) = from.get("configMapKeyRef") {
                let map = self.named("ConfigMap", text(r, &["name"]));
                env.push((name, text(map, &["data", text(r, &["key"])]).to_string()));
            } else {
                assert!(
                    !name.starts_with("HOLDFAST_"),
                    "{K8S}: {name} comes from somewhere this test cannot resolve"
                );
            }
        }
        env
    }
}

fn containers(pod_spec: &Yaml) -> Vec<(&'static str, &Yaml)> {
    let mut out = Vec::new();
    for c in seq(pod_spec.get("initContainers")) {
        out.push(("initContainers", c));
    }
    for c in seq(pod_spec.get("containers")) {
        out.push(("containers", c));
    }
    out
}

/// The port number a probe's `port` means: a number, or the name of a container port.
fn probe_port(container: &Yaml, port: &Yaml) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port.as_str().expect("a probe port is a number or a name");
    seq(container.get("ports"))
        .iter()
        .find(|p| p.get("name").and_then(Yaml::as_str) == Some(name))
        .and_then(|p| p.get("containerPort"))
        .and_then(Yaml::as_u64)
        .unwrap_or_else(|| panic!("{K8S}: probe port `{name}` is not a container port"))
}

fn security_flag(pod_spec: &Yaml, container: &Yaml, key: &str) -> Option<bool> {
    container
        .get("securityContext")
        .and_then(|s| s.get(key))
        .or_else(|| pod_spec.get("securityContext").and_then(|s| s.get(key)))
        .and_then(Yaml::as_bool)
}

fn security_number(pod_spec: &Yaml, container: &Yaml, key: &str) -> Option<i64> {
    container
        .get("securityContext")
        .and_then(|s| s.get(key))
        .or_else(|| pod_spec.get("securityContext").and_then(|s| s.get(key)))
        .and_then(Yaml::as_i64)
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn the_scanner_finds_metric_names_and_nothing_else() {
    let found: Vec<&str> = metric_identifiers(
        "holdfast_a_total HOLDFAST_SERVER__LISTEN x_holdfast_b rate(holdfast_c_bucket{le=\"1\", holdfast_namespace=\"x\"}[5m]) holdfast_d2",
    )
    .into_iter()
    .map(|(_, name)| name)
    .collect();
    assert_eq!(
        found,
        ["holdfast_a_total", "holdfast_c_bucket", "holdfast_d2"]
    );
    assert_eq!(
        enclosing_function("sum by (x) (rate(holdfast_a[5m]))", 17),
        Some("rate")
    );
    assert_eq!(enclosing_function("sum by (x) (holdfast_a)", 12), Some(""));
    assert_eq!(enclosing_function("holdfast_a == 0", 0), None);
    assert_eq!(
        selector_labels("holdfast_a{x=~\"a,b}\", y!=\"\"}", 10),
        ["x", "y"]
    );
    let problems = promql_problems(
        "example",
        "sum by (colour) (rate(holdfast_requests_total{outcome=\"ok\", shade=\"x\"}[5m])) + holdfast_request_duration_seconds + rate(holdfast_held_requests[1m]) + holdfast_retries_total + holdfast_nonesuch",
        true,
    );
    for expected in [
        "no label `shade`",
        "grouped by `colour`",
        "histogram `holdfast_request_duration_seconds` has no series",
        "`holdfast_held_requests` is a gauge",
        "`holdfast_retries_total` only goes up",
        "`holdfast_nonesuch` is not in the catalogue",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "no problem saying {expected:?} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), 6, "{problems:#?}");
}

/// (a) Every YAML file (all its documents) and the dashboard parse.
#[test]
fn every_deploy_file_parses() {
    for required in [
        K8S,
        POD_MONITOR,
        COMPOSE,
        COMPOSE_TOML,
        PROMETHEUS,
        ALERTS,
        DASHBOARD,
    ] {
        assert!(repo().join(required).is_file(), "{required} is missing");
    }
    let mut parsed = 0;
    for path in files_under(&repo().join("deploy")) {
        match extension(&path) {
            "yml" | "yaml" => {
                yaml_documents(&path);
                parsed += 1;
            }
            "json" => {
                json_file(&path);
                parsed += 1;
            }
            "toml" => {
                from_toml(&relative(&path), &deployed_text(&path));
                parsed += 1;
            }
            _ => {}
        }
    }
    assert!(parsed >= 6, "only {parsed} deploy files parsed");
}

/// (b) Every `holdfast_…` identifier anywhere under deploy/ (queries, annotations,
/// comments) is a catalogue metric, or a histogram's `_bucket`, `_sum` or `_count`.
#[test]
fn every_metric_name_in_deploy_is_in_the_catalogue() {
    let mut problems = Vec::new();
    let mut seen = 0;
    for path in files_under(&repo().join("deploy")) {
        let Ok(content) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (_, name) in metric_identifiers(&content) {
            seen += 1;
            if catalogue_entry(name).is_none() {
                problems.push(format!(
                    "{}: `{name}` is not a catalogue metric",
                    relative(&path)
                ));
            }
        }
    }
    assert!(seen > 0, "no holdfast metric named under deploy/");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// (b) Alert expressions and dashboard queries use each metric as its kind and labels allow.
#[test]
fn queries_use_metrics_as_the_catalogue_declares_them() {
    let mut problems = Vec::new();
    for (i, rule) in alert_rules().iter().enumerate() {
        let name = rule.get("alert").and_then(Yaml::as_str).unwrap_or("?");
        let expr = text(rule, &["expr"]);
        problems.extend(promql_problems(
            &format!("{ALERTS}: rule {i} ({name})"),
            expr,
            true,
        ));
    }
    let dashboard = json_file(DASHBOARD);
    let queries = dashboard_queries(&dashboard);
    assert!(!queries.is_empty(), "{DASHBOARD}: no queries");
    for (place, expr, functions) in &queries {
        problems.extend(promql_problems(place, expr, *functions));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// (b) Every catalogue metric is on the dashboard.
#[test]
fn the_dashboard_shows_every_catalogue_metric() {
    let dashboard = json_file(DASHBOARD);
    let mut shown = BTreeSet::new();
    for (_, expr, functions) in dashboard_queries(&dashboard) {
        if !functions {
            continue; // a template variable shows nothing
        }
        for (_, name) in metric_identifiers(&expr) {
            if let Some((def, _)) = catalogue_entry(name) {
                shown.insert(def.name);
            }
        }
    }
    let missing: Vec<&str> = CATALOGUE
        .iter()
        .map(|d| d.name)
        .filter(|n| !shown.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "{DASHBOARD}: no panel shows {missing:?}"
    );
}

#[test]
fn the_dashboard_is_well_formed() {
    let dashboard = json_file(DASHBOARD);
    let schema = dashboard["schemaVersion"].as_u64().expect("schemaVersion");
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(dashboard["uid"].as_str().is_some_and(|t| !t.is_empty()));
    let mut ids = BTreeSet::new();
    for panel in dashboard_panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or("?");
        let id = panel["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("panel {title}: no id"));
        assert!(ids.insert(id), "panel id {id} twice");
        let grid = &panel["gridPos"];
        for k in ["h", "w", "x", "y"] {
            assert!(grid[k].is_u64(), "panel {title}: gridPos.{k}");
        }
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24, "panel {title}: wider than the grid");
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
        assert!(!targets.is_empty(), "panel {title}: no targets");
        let refs: BTreeSet<&str> = targets.iter().filter_map(|t| t["refId"].as_str()).collect();
        assert_eq!(refs.len(), targets.len(), "panel {title}: refIds");
    }
}

/// The alerts the runbook needs exist and are shaped like alerting rules.
#[test]
fn the_alerts_cover_exhaustions_holds_backends_and_refusals() {
    let rules = alert_rules();
    let mut names = BTreeSet::new();
    for rule in &rules {
        let name = text(rule, &["alert"]);
        assert!(
            names.insert(name.to_string()),
            "{ALERTS}: alert {name} twice"
        );
        text(rule, &["labels", "severity"]);
        text(rule, &["annotations", "summary"]);
        if let Some(f) = rule.get("for") {
            parse_duration(f.as_str().expect("`for` is a duration string"));
        }
    }
    let alerting_on = |metric: &str| -> Vec<&Yaml> {
        rules
            .iter()
            .filter(|r| {
                metric_identifiers(text(r, &["expr"]))
                    .iter()
                    .any(|(_, n)| *n == metric)
            })
            .collect()
    };
    let at_least_for = |metric: &str, min: Duration| {
        let found = alerting_on(metric);
        assert!(!found.is_empty(), "{ALERTS}: no alert on {metric}");
        assert!(
            found.iter().any(|r| r
                .get("for")
                .and_then(Yaml::as_str)
                .is_some_and(|f| parse_duration(f) >= min)),
            "{ALERTS}: no alert on {metric} holds for {min:?}"
        );
    };
    assert!(
        !alerting_on("holdfast_budget_exhaustions_total").is_empty(),
        "{ALERTS}: no alert on budget exhaustions"
    );
    assert!(
        !alerting_on("holdfast_client_connections_refused_total").is_empty(),
        "{ALERTS}: no alert on refused client connections"
    );
    at_least_for("holdfast_held_requests", Duration::from_secs(60));
    at_least_for("holdfast_backend_up", Duration::from_secs(60));
    // holdfast itself down: its scrape's `up`, for a target known to be holdfast.
    assert!(
        alerting_on("holdfast_build_info").iter().any(|r| {
            let expr = text(r, &["expr"]);
            expr.contains("up == 0") && r.get("for").is_some()
        }),
        "{ALERTS}: no alert on a holdfast target that stopped answering"
    );
}

/// (c)+(d) The sidecar: probes on the metrics port, a grace period longer than the drain, the
/// ConfigMap's configuration valid and, with the image's and the pod's environment, listening
/// where the manifest says.
#[test]
fn the_kubernetes_sidecar_is_wired_up() {
    let manifest = Manifest::load();
    let (workload, template) = manifest.pod();
    let spec = at(template, &["spec"]);
    if workload.get("kind").and_then(Yaml::as_str) != Some("Pod") {
        let selector = at(workload, &["spec", "selector", "matchLabels"])
            .as_mapping()
            .expect("matchLabels");
        let labels = at(template, &["metadata", "labels"])
            .as_mapping()
            .expect("pod labels");
        for (k, v) in selector {
            assert_eq!(
                labels.get(k),
                Some(v),
                "{K8S}: selector {k:?} does not match the pod"
            );
        }
    }

    let all = containers(spec);
    let sidecars: Vec<_> = all
        .iter()
        .filter(|(_, c)| text(c, &["name"]) == "holdfast")
        .collect();
    assert_eq!(sidecars.len(), 1, "{K8S}: one container named holdfast");
    let (list, sidecar) = *sidecars[0];
    if list == "initContainers" {
        assert_eq!(
            sidecar.get("restartPolicy").and_then(Yaml::as_str),
            Some("Always"),
            "{K8S}: holdfast as an init container must be a native sidecar (restartPolicy: Always), or the pod never starts"
        );
    }
    assert!(
        seq(spec.get("containers"))
            .iter()
            .any(|c| text(c, &["name"]) != "holdfast"),
        "{K8S}: no application container beside holdfast"
    );

    // The configuration: from the ConfigMap, at the path holdfast is told to read.
    let args: Vec<String> = seq(sidecar.get("args"))
        .iter()
        .chain(seq(sidecar.get("command")))
        .map(scalar)
        .collect();
    let config_path = args
        .iter()
        .position(|a| a == "--config")
        .map_or(IMAGE_CONFIG.to_string(), |i| args[i + 1].clone());
    assert!(read("Dockerfile").contains(IMAGE_CONFIG));
    let mut config_toml = None;
    for mount in seq(sidecar.get("volumeMounts")) {
        let mount_path = text(mount, &["mountPath"]).trim_end_matches('/');
        let volume = seq(spec.get("volumes"))
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("{K8S}: no volume {:?}", mount["name"]));
        let Some(cm) = volume.get("configMap") else {
            continue;
        };
        let map = manifest.named("ConfigMap", text(cm, &["name"]));
        let items = seq(cm.get("items"));
        let files: Vec<(String, String)> = if items.is_empty() {
            at(map, &["data"])
                .as_mapping()
                .expect("ConfigMap data")
                .keys()
                .map(|k| (scalar(k), scalar(k)))
                .collect()
        } else {
            items
                .iter()
                .map(|i| {
                    (
                        text(i, &["key"]).to_string(),
                        text(i, &["path"]).to_string(),
                    )
                })
                .collect()
        };
        for (key, path) in files {
            let full = match mount.get("subPath").and_then(Yaml::as_str) {
                Some(sub) if sub == path => mount_path.to_string(),
                Some(_) => continue,
                None => format!("{mount_path}/{path}"),
            };
            if full == config_path {
                config_toml = Some(text(map, &["data", &key]).to_string());
            }
        }
    }
    let config_toml = config_toml.unwrap_or_else(|| {
        panic!("{K8S}: {config_path}, which holdfast reads, is not mounted from a ConfigMap")
    });
    let in_file = from_toml(&format!("{K8S}: ConfigMap holdfast.toml"), &config_toml);

    // What holdfast runs with: the file, then the image's ENV, then the container's env.
    let mut env: BTreeMap<String, String> = image_env().into_iter().collect();
    let pod_env = manifest.env(sidecar);
    env.extend(pod_env.iter().cloned());
    let env: Vec<(String, String)> = env.into_iter().collect();
    let effective = check_config_text("holdfast.toml", &config_toml, &env);
    assert_eq!(
        effective.server.listen, in_file.server.listen,
        "{K8S}: the environment moves the Redis listener away from the ConfigMap's (the image sets HOLDFAST_SERVER__LISTEN)"
    );
    assert_eq!(
        effective.server.listen.to_string(),
        "127.0.0.1:6380",
        "{K8S}: only the application in the pod should reach holdfast"
    );
    assert_eq!(
        effective.server.metrics_listen, in_file.server.metrics_listen,
        "{K8S}: the environment moves the metrics listener away from the ConfigMap's"
    );
    assert!(
        effective.server.metrics_listen.ip().is_unspecified(),
        "{K8S}: probes and Prometheus reach the metrics port from outside the pod"
    );
    let metrics_port = u64::from(effective.server.metrics_listen.port());

    // requirepass from the Secret.
    let pass = seq(sidecar.get("env"))
        .iter()
        .find(|v| v["name"] == "HOLDFAST_SERVER__REQUIREPASS")
        .unwrap_or_else(|| panic!("{K8S}: no HOLDFAST_SERVER__REQUIREPASS"));
    assert!(
        pass.get("valueFrom")
            .and_then(|f| f.get("secretKeyRef"))
            .is_some(),
        "{K8S}: HOLDFAST_SERVER__REQUIREPASS does not come from a Secret"
    );
    assert!(effective.server.requirepass.is_some());

    // Probes, ports, grace.
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = at(sidecar, &[probe, "httpGet"]);
        assert_eq!(text(get, &["path"]), path, "{K8S}: {probe}");
        assert_eq!(
            probe_port(sidecar, at(get, &["port"])),
            metrics_port,
            "{K8S}: {probe} is not on the metrics port"
        );
    }
    if let Some(get) = sidecar.get("startupProbe").and_then(|p| p.get("httpGet")) {
        assert_eq!(text(get, &["path"]), "/healthz", "{K8S}: startupProbe");
        assert_eq!(probe_port(sidecar, at(get, &["port"])), metrics_port);
    }
    let ports: Vec<u64> = seq(sidecar.get("ports"))
        .iter()
        .filter_map(|p| p.get("containerPort").and_then(Yaml::as_u64))
        .collect();
    assert!(
        ports.contains(&metrics_port),
        "{K8S}: metrics port not declared"
    );
    let grace = at(spec, &["terminationGracePeriodSeconds"])
        .as_u64()
        .expect("terminationGracePeriodSeconds is a number");
    assert!(grace > 30, "{K8S}: terminationGracePeriodSeconds {grace}");
    assert!(
        Duration::from_secs(grace) > effective.server.shutdown_grace,
        "{K8S}: terminationGracePeriodSeconds {grace} is not longer than shutdown_grace {:?}",
        effective.server.shutdown_grace
    );

    // Scrape annotations.
    let annotations = at(template, &["metadata", "annotations"]);
    assert_eq!(text(annotations, &["prometheus.io/scrape"]), "true");
    assert_eq!(
        text(annotations, &["prometheus.io/port"]),
        metrics_port.to_string()
    );
    if let Some(path) = annotations.get("prometheus.io/path") {
        assert_eq!(path.as_str(), Some("/metrics"));
    }

    // Resources and security.
    for kind in ["requests", "limits"] {
        let r = at(sidecar, &["resources", kind]);
        assert!(r.get("memory").is_some(), "{K8S}: resources.{kind}.memory");
    }
    assert!(at(sidecar, &["resources", "requests"]).get("cpu").is_some());
    assert_eq!(
        security_flag(spec, sidecar, "runAsNonRoot"),
        Some(true),
        "{K8S}: runAsNonRoot"
    );
    assert_eq!(
        sidecar
            .get("securityContext")
            .and_then(|s| s.get("readOnlyRootFilesystem"))
            .and_then(Yaml::as_bool),
        Some(true),
        "{K8S}: readOnlyRootFilesystem"
    );
    assert_eq!(
        sidecar
            .get("securityContext")
            .and_then(|s| s.get("allowPrivilegeEscalation"))
            .and_then(Yaml::as_bool),
        Some(false),
        "{K8S}: allowPrivilegeEscalation"
    );
    if let Some(uid) = security_number(spec, sidecar, "runAsUser") {
        assert_ne!(uid, 0, "{K8S}: runAsUser 0");
        if let Some(image) = image_uid() {
            assert_eq!(uid, image, "{K8S}: runAsUser is not the image's user");
        }
    }
}

/// The compose stack: holdfast built from the repository, its configuration mounted where the
/// image reads it, a stop grace longer than the drain, Prometheus scraping its metrics port
/// and loading the alert rules.
#[test]
fn the_compose_stack_is_wired_up() {
    let compose = yaml_file(COMPOSE);
    let services = at(&compose, &["services"]);
    for s in ["holdfast", "redis", "postgres", "prometheus"] {
        assert!(services.get(s).is_some(), "{COMPOSE}: no service {s}");
    }
    let compose_dir = repo().join("deploy/compose");
    let holdfast = at(services, &["holdfast"]);
    let context = compose_dir.join(text(holdfast, &["build", "context"]));
    let dockerfile = holdfast
        .get("build")
        .and_then(|b| b.get("dockerfile"))
        .and_then(Yaml::as_str)
        .unwrap_or("Dockerfile");
    assert!(
        context.join(dockerfile).is_file(),
        "{COMPOSE}: no {dockerfile} in the build context {}",
        context.display()
    );

    // Bind mounts: `./src:/dst[:ro]`, sources relative to the compose file.
    let mounts = |service: &Yaml| -> Vec<(PathBuf, String)> {
        seq(service.get("volumes"))
            .iter()
            .filter_map(|v| v.as_str())
            .filter(|v| v.starts_with('.') || v.starts_with('/'))
            .map(|v| {
                let mut parts = v.split(':');
                let src = compose_dir.join(parts.next().unwrap());
                let dst = parts.next().expect("a mount target").to_string();
                assert!(src.exists(), "{COMPOSE}: {} does not exist", src.display());
                (src, dst)
            })
            .collect()
    };
    let command: Vec<String> = seq(holdfast.get("command")).iter().map(scalar).collect();
    let config_path = command
        .iter()
        .position(|a| a == "--config")
        .map_or(IMAGE_CONFIG.to_string(), |i| command[i + 1].clone());
    let (config_file, _) = mounts(holdfast)
        .into_iter()
        .find(|(_, dst)| *dst == config_path)
        .unwrap_or_else(|| panic!("{COMPOSE}: nothing mounted at {config_path}"));
    assert_eq!(
        config_file.canonicalize().unwrap(),
        repo().join(COMPOSE_TOML).canonicalize().unwrap()
    );

    let mut env: BTreeMap<String, String> = image_env().into_iter().collect();
    match holdfast.get("environment") {
        Some(Yaml::Mapping(m)) => {
            for (k, v) in m {
                env.insert(scalar(k), scalar(v));
            }
        }
        Some(Yaml::Sequence(items)) => {
            for item in items {
                let (k, v) = item
                    .as_str()
                    .and_then(|s| s.split_once('='))
                    .expect("KEY=value");
                env.insert(k.to_string(), v.to_string());
            }
        }
        _ => {}
    }
    for (k, v) in &env {
        assert!(!v.contains('$'), "{COMPOSE}: {k} needs interpolation: {v}");
    }
    let env: Vec<(String, String)> = env.into_iter().collect();
    let compose_toml = deployed_text(&repo().join(COMPOSE_TOML));
    let effective = check_config_text("holdfast.toml", &compose_toml, &env);
    let metrics_port = effective.server.metrics_listen.port();

    let grace = parse_duration(text(holdfast, &["stop_grace_period"]));
    assert!(
        grace > effective.server.shutdown_grace,
        "{COMPOSE}: stop_grace_period {grace:?} is not longer than shutdown_grace {:?}",
        effective.server.shutdown_grace
    );
    let published: Vec<String> = seq(holdfast.get("ports")).iter().map(scalar).collect();
    for port in [effective.server.listen.port(), metrics_port] {
        assert!(
            published.iter().any(|p| p.ends_with(&format!(":{port}"))),
            "{COMPOSE}: container port {port} is not published"
        );
    }

    // Prometheus: scrapes holdfast:<metrics port>, loads the alert rules of deploy/prometheus.
    let prometheus_service = at(services, &["prometheus"]);
    let prometheus_mounts = mounts(prometheus_service);
    let prometheus = yaml_file(PROMETHEUS);
    let target = format!("holdfast:{metrics_port}");
    let scraped = seq(prometheus.get("scrape_configs")).iter().any(|job| {
        seq(job.get("static_configs"))
            .iter()
            .flat_map(|c| seq(c.get("targets")))
            .any(|t| t.as_str() == Some(&target))
    });
    assert!(scraped, "{PROMETHEUS}: nothing scrapes {target}");
    let config_arg = seq(prometheus_service.get("command"))
        .iter()
        .filter_map(Yaml::as_str)
        .find_map(|a| a.strip_prefix("--config.file="))
        .unwrap_or("/etc/prometheus/prometheus.yml")
        .to_string();
    let (prometheus_file, _) = prometheus_mounts
        .iter()
        .find(|(_, dst)| *dst == config_arg)
        .unwrap_or_else(|| panic!("{COMPOSE}: {config_arg} is not mounted"));
    assert_eq!(
        prometheus_file.canonicalize().unwrap(),
        repo().join(PROMETHEUS).canonicalize().unwrap()
    );
    let rule_files: Vec<&str> = seq(prometheus.get("rule_files"))
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert!(!rule_files.is_empty(), "{PROMETHEUS}: no rule_files");
    let alerts = repo().join(ALERTS).canonicalize().unwrap();
    let mut loads_alerts = false;
    for rule_file in rule_files {
        let (src, _) = prometheus_mounts
            .iter()
            .find(|(_, dst)| dst == rule_file)
            .unwrap_or_else(|| panic!("{COMPOSE}: rule file {rule_file} is not mounted"));
        loads_alerts |= src.canonicalize().unwrap() == alerts;
    }
    assert!(loads_alerts, "{PROMETHEUS}: does not load {ALERTS}");
}

/// (c)+(d) Every configuration file of the repository (config/*.toml, deploy/**/*.toml and
/// the Kubernetes ConfigMap's) validates in-process and through `holdfast check-config`.
#[test]
fn every_configuration_file_validates() {
    let mut checked = 0;
    let tomls = files_under(&repo().join("config"))
        .into_iter()
        .chain(files_under(&repo().join("deploy")))
        .filter(|p| extension(p) == "toml");
    for path in tomls {
        let place = relative(&path);
        let text = deployed_text(&path);
        let in_process = from_toml(&place, &text);
        let by_binary = check_config_text("holdfast.toml", &text, &[]);
        assert_eq!(
            in_process.server.listen, by_binary.server.listen,
            "{place}: the binary reads another listen address"
        );
        checked += 1;
    }
    assert!(checked >= 2, "only {checked} TOML files found");

    let manifest = Manifest::load();
    let maps = manifest.of_kind("ConfigMap");
    let mut found = false;
    for map in maps {
        let Some(data) = map.get("data").and_then(Yaml::as_mapping) else {
            continue;
        };
        for (key, value) in data {
            let key = scalar(key);
            if !key.ends_with(".toml") {
                continue;
            }
            let toml = value.as_str().expect("ConfigMap data is text");
            from_toml(&format!("{K8S}: ConfigMap {key}"), toml);
            check_config_text(&key, toml, &[]);
            found = true;
        }
    }
    assert!(found, "{K8S}: no ConfigMap holds a .toml");
}

/// A Service named `holdfast` in the pod's namespace: Kubernetes puts `HOLDFAST_PORT`,
/// `HOLDFAST_SERVICE_HOST`, … into every pod. The manifest turns service links off, and the
/// binary starts with them all the same.
#[test]
fn kubernetes_service_links_do_not_stop_the_sidecar() {
    let manifest = Manifest::load();
    let (_, pod) = manifest.pod();
    assert_eq!(
        at(pod, &["spec", "enableServiceLinks"]).as_bool(),
        Some(false),
        "{K8S}: enableServiceLinks"
    );
    let env: Vec<(String, String)> = [
        ("HOLDFAST_PORT", "tcp://10.96.0.11:6380"),
        ("HOLDFAST_PORT_6380_TCP", "tcp://10.96.0.11:6380"),
        ("HOLDFAST_PORT_6380_TCP_PROTO", "tcp"),
        ("HOLDFAST_PORT_6380_TCP_PORT", "6380"),
        ("HOLDFAST_PORT_6380_TCP_ADDR", "10.96.0.11"),
        ("HOLDFAST_SERVICE_HOST", "10.96.0.11"),
        ("HOLDFAST_SERVICE_PORT", "6380"),
        ("HOLDFAST_SERVICE_PORT_REDIS", "6380"),
        ("HOLDFAST_SERVER__LISTEN", "127.0.0.1:7379"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let effective = check_config(&repo().join("config/holdfast.toml"), &env);
    assert_eq!(effective.server.listen.to_string(), "127.0.0.1:7379");
}

/// Runs `program` with `args` from the repository's root; panics with its output unless it
/// succeeds. The tools are installed by `tests/run`.
fn run_tool(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (tests/run installs it): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{text}"
    );
    text
}

/// The alert rules pass Prometheus's own checks, and every alert's unit test (its first
/// event included) passes `promtool test rules`.
#[test]
fn the_alert_rules_pass_promtool() {
    let checked = run_tool("promtool", &["check", "rules", ALERTS]);
    let rules = alert_rules().len();
    assert!(
        checked.contains(&format!("SUCCESS: {rules} rules found")),
        "{checked}"
    );
    let tested = run_tool("promtool", &["test", "rules", ALERT_TESTS]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a test that expects it to fire.
    let tests = read(ALERT_TESTS);
    for rule in alert_rules() {
        let name = text(&rule, &["alert"]);
        assert!(
            tests.contains(&format!(
                "alertname: {name}\n        exp_alerts:\n          - "
            )),
            "no test in {ALERT_TESTS} expects {name} to fire"
        );
    }
}

/// The Prometheus Operator's PodMonitor scrapes the sidecar the manifest deploys: its
/// selector matches the workload's pod labels, its port is the holdfast container's
/// `metrics` port, its path the metrics endpoint's.
#[test]
fn the_pod_monitor_scrapes_the_sidecar() {
    let docs = yaml_documents(repo().join(POD_MONITOR));
    let monitor = docs
        .iter()
        .find(|d| d.get("kind").and_then(Yaml::as_str) == Some("PodMonitor"))
        .unwrap_or_else(|| panic!("{POD_MONITOR}: no PodMonitor"));
    let manifest = Manifest::load();
    let (_, pod) = manifest.pod();
    let labels = at(pod, &["metadata", "labels"]);
    let selector = at(monitor, &["spec", "selector", "matchLabels"])
        .as_mapping()
        .unwrap_or_else(|| panic!("{POD_MONITOR}: spec.selector.matchLabels"));
    for (k, v) in selector {
        assert_eq!(
            labels.get(k),
            Some(v),
            "{POD_MONITOR}: selects {k:?}={v:?}, the pods are {labels:?}"
        );
    }
    let sidecar = containers(at(pod, &["spec"]))
        .into_iter()
        .map(|(_, c)| c)
        .find(|c| text(c, &["name"]) == "holdfast")
        .unwrap_or_else(|| panic!("{K8S}: no holdfast container"));
    let ports: Vec<&str> = seq(sidecar.get("ports"))
        .iter()
        .map(|p| text(p, &["name"]))
        .collect();
    for endpoint in seq(at(monitor, &["spec"]).get("podMetricsEndpoints")) {
        let port = text(endpoint, &["port"]);
        assert!(
            ports.contains(&port),
            "{POD_MONITOR}: port {port} is not the sidecar's ({ports:?})"
        );
        assert_eq!(text(endpoint, &["path"]), "/metrics");
    }
}

/// Each alert links its section of the runbook, which exists: `runbook_url` is
/// `docs/runbook.md#` and the alert's name in lower case, the anchor of a `## Name` heading.
#[test]
fn every_alert_links_its_runbook_section() {
    let runbook = read("docs/runbook.md");
    for rule in alert_rules() {
        let name = text(&rule, &["alert"]);
        let url = text(&rule, &["annotations", "runbook_url"]);
        assert_eq!(
            url,
            format!("docs/runbook.md#{}", name.to_ascii_lowercase()),
            "{ALERTS}: {name}"
        );
        assert!(
            runbook.lines().any(|l| l == format!("## {name}")),
            "docs/runbook.md has no section ## {name}"
        );
    }
}

/// One outage seen by many sidecars is one alert: every alert but `HoldfastDown` (about a
/// pod of its own) aggregates away the instance (alerts.test.yml fires each for 50
/// instances at once and expects one).
#[test]
fn alerts_about_the_fleet_page_once() {
    for rule in alert_rules() {
        let name = text(&rule, &["alert"]);
        if name == "HoldfastDown" {
            continue;
        }
        let expr = text(&rule, &["expr"]);
        assert!(
            expr.contains(" by (namespace, ") && !expr.contains("instance"),
            "{ALERTS}: {name} is not aggregated across instances: {expr}"
        );
    }
}

/// The Kubernetes manifests match the API's schemas, strictly (an unknown or misspelt field
/// is an error, as `kubectl apply --validate=strict` makes it), at 1.29, the first release
/// with native sidecars.
#[test]
fn the_kubernetes_manifests_match_their_schemas() {
    let out = run_tool(
        "kubernetes-validate",
        &["--strict", "--kubernetes-version", "1.29.0", K8S],
    );
    assert!(!out.contains("ERROR"), "{out}");
    let passed = out.matches(" passed for resource ").count();
    assert_eq!(passed, Manifest::load().docs.len(), "{out}");
}
