//! The log's two settings, `HOLDFAST_LOG` and `HOLDFAST_LOG_FORMAT`, read before the
//! configuration is (they say where its errors go), and checked as strictly as its keys: a
//! value holdfast would not act on is refused at start, not silently taken for something else.
//!
//! - `HOLDFAST_LOG`: a level — `error`, `warn` (or `warning`), `info`, `debug`, `trace`,
//!   `off`, in any case — then, comma-separated, any `target=level` directives
//!   (`info,holdfast::exec=debug`). A bare word that is not a level is refused: `tracing`
//!   would take it for a target and log nothing else. Unset or empty: `info`.
//! - `HOLDFAST_LOG_FORMAT`: `text` (the default) or `json`, in any case.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One line of text each (coloured only at a terminal).
    Text,
    /// One JSON object a line, for log shippers.
    Json,
}

/// The filter directives `log` asks for (`HOLDFAST_LOG`'s value; None: unset), in `tracing`'s
/// spelling, or what is wrong with it.
pub fn filter(log: Option<&str>) -> Result<String, String> {
    let log = log
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .unwrap_or("info");
    let mut directives = Vec::new();
    for directive in log.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target.trim()), level),
            None => (None, directive),
        };
        let Some(level) = level_of(level) else {
            return Err(format!(
                "HOLDFAST_LOG: `{directive}`: {} is not a level (error, warn, info, debug, trace, off){}",
                level.trim(),
                if target.is_none() {
                    "; a target takes its level after `=` (holdfast::exec=debug)"
                } else {
                    ""
                }
            ));
        };
        match target {
            Some("") => return Err(format!("HOLDFAST_LOG: `{directive}` names no target")),
            Some(target) => directives.push(format!("{target}={level}")),
            None => directives.push(level.to_string()),
        }
    }
    let joined = directives.join(",");
    // What tracing itself refuses (a malformed target filter) is refused too.
    EnvFilter::try_new(&joined).map_err(|e| format!("HOLDFAST_LOG: `{log}`: {e}"))?;
    Ok(joined)
}

/// A level as `tracing` spells it, from any case, `warning` for `warn`.
fn level_of(word: &str) -> Option<&'static str> {
    Some(match word.trim().to_ascii_lowercase().as_str() {
        "error" => "error",
        "warn" | "warning" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" => "trace",
        "off" => "off",
        _ => return None,
    })
}

/// The format `format` asks for (`HOLDFAST_LOG_FORMAT`'s value; None: unset).
pub fn format(format: Option<&str>) -> Result<LogFormat, String> {
    match format.map(|f| f.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(format!(
            "HOLDFAST_LOG_FORMAT: `{other}` is not a format (text, json)"
        )),
    }
}

/// Starts logging to stderr as `HOLDFAST_LOG` and `HOLDFAST_LOG_FORMAT` say.
///
/// # Errors
/// What is wrong with either variable; nothing is logged then.
pub fn init() -> Result<(), String> {
    let var = |name: &str| std::env::var(name).ok();
    let directives = filter(var("HOLDFAST_LOG").as_deref())?;
    let format = format(var("HOLDFAST_LOG_FORMAT").as_deref())?;
    let mut filter = EnvFilter::try_new(&directives).map_err(|e| e.to_string())?;
    // The PostgreSQL driver warns of a URL parameter it ignores with its value, which may be
    // a secret: never shown, whatever HOLDFAST_LOG says.
    if let Ok(quiet) = "sqlx_postgres::options::parse=error".parse() {
        filter = filter.add_directive(quiet);
    }
    // Colour only for a person at a terminal: a log shipper would keep the escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.init(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_any_case_targets_after_equals_and_nothing_else() {
        let table: &[(Option<&str>, Result<&str, &str>)] = &[
            (None, Ok("info")),
            (Some(""), Ok("info")),
            (Some("debug"), Ok("debug")),
            (Some("WARN"), Ok("warn")),
            (Some("warning"), Ok("warn")),
            (Some("Error"), Ok("error")),
            (Some("off"), Ok("off")),
            (
                Some("info,holdfast::exec=DEBUG"),
                Ok("info,holdfast::exec=debug"),
            ),
            (Some(" info , sqlx=warning "), Ok("info,sqlx=warn")),
            // A bare word tracing would take for a target, silencing everything else.
            (Some("verbose"), Err("`verbose`: verbose is not a level")),
            (Some("holdfast"), Err("a target takes its level after `=`")),
            (Some("holdfast=loud"), Err("loud is not a level")),
            (Some("=debug"), Err("names no target")),
        ];
        for (given, want) in table {
            match (filter(*given), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{given:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{given:?}: {got}"),
                (got, want) => panic!("{given:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn formats_any_case_and_nothing_else() {
        assert_eq!(format(None), Ok(LogFormat::Text));
        assert_eq!(format(Some("text")), Ok(LogFormat::Text));
        assert_eq!(format(Some("JSON")), Ok(LogFormat::Json));
        assert_eq!(format(Some("Json ")), Ok(LogFormat::Json));
        assert!(format(Some("logfmt")).unwrap_err().contains("logfmt"));
    }
}
