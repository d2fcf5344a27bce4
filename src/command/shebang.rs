//! A script's shebang line as Redis 7.0 reads it (`#!lua flags=no-writes,allow-oom`): the
//! flags it declares, or the error for a bad one. The command table reads it to tell a
//! read-only script; the backends that run scripts read it too.

/// Flags a script's shebang line declares (`#!lua flags=no-writes,allow-oom`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// A shebang was there: the script is not in compatibility mode.
    pub shebang: bool,
    /// `no-writes`: the script may only read.
    pub no_writes: bool,
    /// `allow-oom` (accepted: a SQL backend has no `maxmemory`).
    pub allow_oom: bool,
    /// `allow-stale` (accepted: a SQL backend has no stale replica).
    pub allow_stale: bool,
    /// `no-cluster` (accepted: a SQL backend is no cluster).
    pub no_cluster: bool,
    /// `allow-cross-slot-keys` (accepted: a SQL backend has no slots).
    pub allow_cross_slot_keys: bool,
}

/// How many bytes the shebang line takes (its line feed excluded); 0 without one.
pub fn shebang_len(body: &[u8]) -> usize {
    if !body.starts_with(b"#!") {
        return 0;
    }
    body.iter().position(|b| *b == b'\n').unwrap_or(body.len())
}

/// The flags of `body`'s shebang, or the error Redis answers for a bad one.
pub fn flags(body: &[u8]) -> Result<Flags, String> {
    if !body.starts_with(b"#!") {
        return Ok(Flags::default());
    }
    let Some(end) = body.iter().position(|b| *b == b'\n') else {
        return Err("ERR Invalid script shebang".to_string());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split_ascii_whitespace();
    let Some(engine) = parts.next() else {
        return Err("ERR Invalid engine in script shebang".to_string());
    };
    if engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = Flags {
        shebang: true,
        ..Flags::default()
    };
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        for flag in list.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => flags.no_writes = true,
                "allow-oom" => flags.allow_oom = true,
                "allow-stale" => flags.allow_stale = true,
                "no-cluster" => flags.no_cluster = true,
                "allow-cross-slot-keys" => flags.allow_cross_slot_keys = true,
                other => return Err(format!("ERR Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_read_as_redis_reads_them() {
        assert_eq!(flags(b"return 1"), Ok(Flags::default()));
        let f = flags(b"#!lua flags=no-writes,allow-oom\nreturn 1").expect("valid");
        assert!(f.shebang && f.no_writes && f.allow_oom && !f.allow_stale);
        assert!(flags(b"#!lua\nreturn 1").expect("valid").shebang);
        for (body, want) in [
            ("#!lua", "ERR Invalid script shebang"),
            ("#!py\n", "ERR Unexpected engine in script shebang: #!py"),
            (
                "#!lua flags=bogus\n",
                "ERR Unexpected flag in script shebang: bogus",
            ),
            ("#!lua name=x\n", "ERR Unknown lua shebang option: name=x"),
        ] {
            assert_eq!(flags(body.as_bytes()), Err(want.to_string()), "{body}");
        }
        assert_eq!(shebang_len(b"#!lua\nreturn 1"), 5);
        assert_eq!(shebang_len(b"return 1"), 0);
    }
}
