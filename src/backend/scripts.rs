//! The scripts clients loaded with `SCRIPT LOAD`, by SHA1 digest, so that an `EVALSHA` that
//! meets `NOSCRIPT` — a Redis restarted or failed over has an empty script cache, and a
//! Cluster node may never have seen the script — is sent again as `EVAL` with the script's
//! text: the client's `EVALSHA` keeps working, and it never sees the `NOSCRIPT`. `NOSCRIPT`
//! means nothing ran, so sending it again changes nothing the client could see.
//!
//! A digest names one text, so one cache serves every backend and every configuration
//! generation of one holdfast. It holds at most [`MAX_BYTES`] of scripts, the oldest loaded
//! forgotten first; `SCRIPT FLUSH` empties it.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The most script text kept.
pub const MAX_BYTES: usize = 64 << 20;

#[derive(Default)]
struct Cache {
    by_sha: HashMap<String, Bytes>,
    order: VecDeque<String>,
    bytes: usize,
    /// Function libraries loaded through holdfast, by library name: their code, loaded
    /// again where an `FCALL` finds no function (a restarted or failed-over Redis).
    libraries: HashMap<String, Bytes>,
}

/// One holdfast's scripts. Owned by its backends and handed on at every reload (not a
/// process-wide static: two holdfasts in one process, as in the tests, keep apart).
#[derive(Default)]
pub struct Scripts(Mutex<Cache>);

/// The library name of `#!lua name=mylib` (the first line's `name=`, any case).
fn library_name(code: &[u8]) -> Option<String> {
    let line = code.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    line.split_ascii_whitespace().skip(1).find_map(|part| {
        let (key, value) = part.split_once('=')?;
        key.eq_ignore_ascii_case("name").then(|| value.to_string())
    })
}

/// The SHA1 digest Redis names a script by, in lowercase hex.
pub fn digest(script: &[u8]) -> String {
    sha1_smol::Sha1::from(script).digest().to_string()
}

impl Scripts {
    fn with<T>(&self, f: impl FnOnce(&mut Cache) -> T) -> T {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Keeps a loaded script's text under its digest.
    pub fn remember(&self, script: &Bytes) {
        if script.len() > MAX_BYTES {
            return;
        }
        let sha = digest(script);
        self.with(|cache| {
            if cache.by_sha.contains_key(&sha) {
                return;
            }
            cache.bytes += script.len();
            cache.by_sha.insert(sha.clone(), script.clone());
            cache.order.push_back(sha);
            while cache.bytes > MAX_BYTES {
                let Some(old) = cache.order.pop_front() else {
                    break;
                };
                if let Some(text) = cache.by_sha.remove(&old) {
                    cache.bytes -= text.len();
                }
            }
        });
    }

    /// The text of a script loaded earlier, by its digest (any case).
    pub fn text(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.with(|cache| cache.by_sha.get(&sha).cloned())
    }

    /// `SCRIPT FLUSH`: every script forgotten (the function libraries stay).
    pub fn forget_all(&self) {
        self.with(|cache| {
            let libraries = std::mem::take(&mut cache.libraries);
            *cache = Cache {
                libraries,
                ..Cache::default()
            };
        });
    }

    /// Keeps a function library `FUNCTION LOAD` loaded, under its name (the metadata line's
    /// `name=`); a library with no readable name is not kept. At most [`MAX_BYTES`] in all.
    pub fn remember_library(&self, code: &Bytes) {
        let Some(name) = library_name(code) else {
            return;
        };
        self.with(|cache| {
            let held: usize = cache.libraries.values().map(Bytes::len).sum();
            if held + code.len() <= MAX_BYTES {
                cache.libraries.insert(name, code.clone());
            }
        });
    }

    /// `FUNCTION DELETE name`, or `FUNCTION FLUSH` (None): those libraries forgotten.
    pub fn forget_libraries(&self, name: Option<&[u8]>) {
        self.with(|cache| match name {
            Some(name) => {
                cache
                    .libraries
                    .remove(String::from_utf8_lossy(name).as_ref());
            }
            None => cache.libraries.clear(),
        });
    }

    /// Whether any library was loaded through holdfast.
    pub fn has_libraries(&self) -> bool {
        self.with(|cache| !cache.libraries.is_empty())
    }

    /// Every library loaded through holdfast: `FUNCTION LOAD REPLACE code` for each.
    pub fn library_loads(&self) -> Vec<[Bytes; 4]> {
        self.with(|cache| {
            cache
                .libraries
                .values()
                .map(|code| {
                    [
                        Bytes::from_static(b"FUNCTION"),
                        Bytes::from_static(b"LOAD"),
                        Bytes::from_static(b"REPLACE"),
                        code.clone(),
                    ]
                })
                .collect()
        })
    }

    /// `EVALSHA sha ...` (or `EVALSHA_RO`) as `EVAL script ...` (`EVAL_RO`), when the script
    /// is known; None otherwise.
    pub fn by_text(&self, args: &[Bytes]) -> Option<Vec<Bytes>> {
        let name = args.first()?;
        let eval: &'static [u8] = if name.eq_ignore_ascii_case(b"EVALSHA") {
            b"EVAL"
        } else if name.eq_ignore_ascii_case(b"EVALSHA_RO") {
            b"EVAL_RO"
        } else {
            return None;
        };
        let script = self.text(args.get(1)?)?;
        let mut out = args.to_vec();
        out[0] = Bytes::from_static(eval);
        out[1] = script;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_script_is_found_by_its_digest_and_evalsha_becomes_eval() {
        let script = Bytes::from_static(b"return 'scripts-test'");
        let sha = digest(&script);
        assert_eq!(sha.len(), 40);
        let scripts = Scripts::default();
        assert!(scripts.text(sha.as_bytes()).is_none());
        scripts.remember(&script);
        assert_eq!(
            scripts.text(sha.to_uppercase().as_bytes()),
            Some(script.clone())
        );
        let args = [
            Bytes::from_static(b"evalsha"),
            Bytes::from(sha.clone()),
            Bytes::from_static(b"0"),
        ];
        let eval = scripts.by_text(&args).expect("known");
        assert_eq!(eval[0], Bytes::from_static(b"EVAL"));
        assert_eq!(eval[1], script);
        assert_eq!(eval[2], Bytes::from_static(b"0"));
        assert!(scripts
            .by_text(&[Bytes::from_static(b"GET"), Bytes::from(sha.clone())])
            .is_none());
        // A library is kept by name, and stays through SCRIPT FLUSH.
        scripts.remember_library(&Bytes::from_static(b"#!lua name=lib\nreturn 1"));
        assert_eq!(scripts.library_loads().len(), 1);
        scripts.forget_all();
        assert_eq!(scripts.library_loads().len(), 1);
        scripts.forget_libraries(Some(b"lib"));
        assert!(scripts.library_loads().is_empty());
        scripts.remember(&script);
        // Another holdfast's cache, and a flushed one, know nothing of it.
        assert!(Scripts::default().text(sha.as_bytes()).is_none());
        scripts.forget_all();
        assert!(scripts.text(sha.as_bytes()).is_none());
    }
}
