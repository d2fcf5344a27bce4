//! `holdfast copy` and `holdfast verify`: a client of the running holdfast that drives
//! `HOLDFAST COPY`/`RECOPY`/`VERIFY` a batch at a time (`connection/moving.rs`), shows
//! progress, and keeps a copy's position in a state file so that a stopped copy resumes
//! where it was.

use crate::cli::MoveTarget;
use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::types::BytesFrame as Frame;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a copy or verify stopped.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// holdfast could not be reached.
    #[error("cannot reach holdfast at {addr}: {source}")]
    Connect {
        /// Where it was looked for.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed midway.
    #[error("connection to holdfast: {0}")]
    Io(#[from] std::io::Error),
    /// holdfast answered an error.
    #[error("holdfast answered: {0}")]
    Refused(String),
    /// holdfast answered something else than expected.
    #[error("holdfast answered an unexpected reply: {0}")]
    Unexpected(String),
    /// The state file could not be written.
    #[error("state file {path}: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// One plain RESP2 connection to holdfast.
struct MoverConn {
    stream: TcpStream,
    input: BytesMut,
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl MoverConn {
    async fn connect(target: &MoveTarget, listen: SocketAddr) -> Result<MoverConn, MoveError> {
        let addr = target.address.clone().unwrap_or_else(|| listen.to_string());
        let stream = TcpStream::connect(&addr)
            .await
            .map_err(|source| MoveError::Connect { addr, source })?;
        let mut client = MoverConn {
            stream,
            input: BytesMut::new(),
        };
        if let Ok(password) = std::env::var("REDISCLI_AUTH") {
            let user = target.user.clone().unwrap_or_else(|| "default".into());
            client
                .call(&[b"AUTH", user.as_bytes(), password.as_bytes()])
                .await?;
        }
        Ok(client)
    }

    /// Sends one command and reads its reply; an error reply is [`MoveError::Refused`].
    async fn call(&mut self, args: &[&[u8]]) -> Result<Frame, MoveError> {
        self.stream.write_all(&encode(args)).await?;
        loop {
            match decode_bytes_mut(&mut self.input) {
                Ok(Some((Frame::Error(text), _, _))) => {
                    return Err(MoveError::Refused(text.to_string()))
                }
                Ok(Some((frame, _, _))) => return Ok(frame),
                Ok(None) => {}
                Err(e) => return Err(MoveError::Unexpected(e.to_string())),
            }
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(MoveError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }
}

fn items(frame: Frame) -> Result<Vec<Frame>, MoveError> {
    match frame {
        Frame::Array(items) => Ok(items),
        other => Err(MoveError::Unexpected(format!("{other:?}"))),
    }
}

fn int(frame: &Frame) -> Result<i64, MoveError> {
    match frame {
        Frame::Integer(n) => Ok(*n),
        other => Err(MoveError::Unexpected(format!("{other:?}"))),
    }
}

fn text(frame: &Frame) -> Result<Bytes, MoveError> {
    match frame {
        Frame::BulkString(b) => Ok(b.clone()),
        other => Err(MoveError::Unexpected(format!("{other:?}"))),
    }
}

/// A progress line, written over itself on a terminal.
fn progress(what: &str, (keys, now): (u64, u64), of: Option<u64>, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    let mut err = std::io::stderr();
    let _ = write!(err, "\r{}   ", progress_line(what, (keys, now), of, secs));
    let _ = err.flush();
}

/// What the progress line says after `keys` keys, `now` of them in this run's `secs`
/// seconds, of about `of` (the primary's `DBSIZE` when the copy began: other namespaces'
/// keys count too, so the bar may end short of full; keys written meanwhile may pass it).
fn progress_line(what: &str, (keys, now): (u64, u64), of: Option<u64>, secs: f64) -> String {
    let rate = now as f64 / secs.max(0.001);
    let mut line = format!("{what}: {keys} keys");
    if let Some(total) = of.filter(|&t| t > 0) {
        const WIDTH: u64 = 20;
        let done = keys.min(total);
        let filled = (done * WIDTH / total) as usize;
        let bar = format!(
            "{}{}",
            "#".repeat(filled),
            ".".repeat(WIDTH as usize - filled)
        );
        line.push_str(&format!(" of ~{total} [{bar}] {}%", done * 100 / total));
        if rate > 0.0 {
            let left = (total - done) as f64 / rate;
            line.push_str(&format!(", ~{left:.0} s left"));
        }
    }
    line.push_str(&format!(", {rate:.0} keys/s, {secs:.0} s"));
    line
}

/// The most keys the namespace has: the primary database's (`HOLDFAST MIRROR`), if known.
async fn at_most(client: &mut MoverConn, ns: &[u8]) -> Result<Option<u64>, MoveError> {
    let parts = items(client.call(&[b"HOLDFAST", b"MIRROR", ns]).await?)?;
    let size = parts
        .chunks(2)
        .find(|pair| matches!(&pair[0], Frame::BulkString(name) if &name[..] == b"primary_keys"))
        .and_then(|pair| pair.get(1))
        .and_then(|n| int(n).ok());
    Ok(size.and_then(|n| u64::try_from(n).ok()))
}

/// The state file: the walk's position and the keys copied so far.
fn read_state(path: &Path) -> Option<(String, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let walk = lines.next()?.to_string();
    let keys = lines.next()?.parse().ok()?;
    Some((walk, keys))
}

fn write_state(path: &Path, walk: &str, keys: u64) -> Result<(), MoveError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{walk}\n{keys}\n"))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| MoveError::State {
            path: path.to_path_buf(),
            source,
        })
}

/// `holdfast copy`: walks the namespace, then copies again what was marked meanwhile.
///
/// # Errors
/// [`MoveError`]; the state file keeps the position reached.
pub async fn copy(
    target: &MoveTarget,
    listen: SocketAddr,
    state: Option<PathBuf>,
    restart: bool,
) -> Result<u64, MoveError> {
    let ns = target.namespace.as_bytes();
    let state = state.unwrap_or_else(|| format!("holdfast-copy-{}.state", target.namespace).into());
    let mut client = MoverConn::connect(target, listen).await?;
    let (mut walk, mut keys) = match read_state(&state) {
        Some(found) if !restart => {
            eprintln!(
                "resuming at {} after {} keys ({})",
                found.0,
                found.1,
                state.display()
            );
            found
        }
        _ => ("0".to_string(), 0),
    };
    let batch = target.batch.to_string();
    let of = at_most(&mut client, ns).await?;
    let started = Instant::now();
    let (mut copied_now, mut whole_again) = (0u64, false);
    loop {
        let reply = client
            .call(&[
                b"HOLDFAST",
                b"COPY",
                ns,
                walk.as_bytes(),
                b"COUNT",
                batch.as_bytes(),
            ])
            .await?;
        let parts = items(reply)?;
        let (Some(next), Some(n)) = (parts.first(), parts.get(1)) else {
            return Err(MoveError::Unexpected(format!("{parts:?}")));
        };
        let n = int(n)? as u64;
        keys += n;
        copied_now += n;
        let next = String::from_utf8_lossy(&text(next)?).into_owned();
        // Resumed: the bar counts what was copied before too, the rate this run's.
        progress("copying", (keys, copied_now), of, started);
        if next.is_empty() {
            // The walk is over: the keys marked meanwhile (writes the mirror missed).
            let again = int(&client.call(&[b"HOLDFAST", b"RECOPY", ns]).await?)?;
            if again >= 0 {
                keys += again as u64;
                write_state(&state, "0", 0)?;
                let _ = std::fs::remove_file(&state);
                eprintln!();
                return Ok(keys);
            }
            if whole_again {
                return Err(MoveError::Refused(
                    "every key is marked to be copied again twice running: the mirror misses writes faster than a copy carries them".into(),
                ));
            }
            // Every key marked: once more from the start.
            whole_again = true;
            walk = "0".into();
            continue;
        }
        walk = next;
        write_state(&state, &walk, keys)?;
    }
}

/// `holdfast verify`: the differences found (the first `show` printed).
///
/// # Errors
/// [`MoveError`].
pub async fn verify(
    target: &MoveTarget,
    listen: SocketAddr,
    show: usize,
) -> Result<(u64, u64), MoveError> {
    let ns = target.namespace.as_bytes();
    let mut client = MoverConn::connect(target, listen).await?;
    let batch = target.batch.to_string();
    let started = Instant::now();
    let (mut walk, mut keys, mut found) = (Bytes::from_static(b"0"), 0u64, 0u64);
    loop {
        let reply = client
            .call(&[
                b"HOLDFAST",
                b"VERIFY",
                ns,
                &walk,
                b"COUNT",
                batch.as_bytes(),
            ])
            .await?;
        let parts = items(reply)?;
        let [next, n, differences] =
            <[Frame; 3]>::try_from(parts).map_err(|p| MoveError::Unexpected(format!("{p:?}")))?;
        keys += int(&n)? as u64;
        let differences = items(differences)?;
        for pair in differences.chunks(2) {
            found += 1;
            if found as usize <= show {
                let key = String::from_utf8_lossy(&text(&pair[0])?).into_owned();
                let how = pair.get(1).map(text).transpose()?.unwrap_or_default();
                eprintln!("\r{key}: {}", String::from_utf8_lossy(&how));
            }
        }
        // No bar: a verify walks the primary's keys, then the mirror's.
        progress("verifying", (keys, keys), None, started);
        walk = text(&next)?;
        if walk.is_empty() {
            eprintln!();
            return Ok((keys, found));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::progress_line;

    /// Keys (all, this run's), the size if known, seconds, and the line.
    type Row = ((u64, u64), Option<u64>, f64, &'static str);

    #[test]
    fn the_progress_line_has_a_bar_and_the_time_left_when_the_size_is_known() {
        let rows: Vec<Row> = vec![
            ((0, 0), None, 0.0, "copying: 0 keys, 0 keys/s, 0 s"),
            ((500, 500), None, 2.0, "copying: 500 keys, 250 keys/s, 2 s"),
            (
                (500, 500),
                Some(2000),
                2.0,
                "copying: 500 keys of ~2000 [#####...............] 25%, ~6 s left, 250 keys/s, 2 s",
            ),
            // Resumed after 1,000 keys: the bar counts them, the rate is this run's.
            (
                (1500, 500),
                Some(2000),
                1.0,
                "copying: 1500 keys of ~2000 [###############.....] 75%, ~1 s left, 500 keys/s, 1 s",
            ),
            // Fewer keys than DBSIZE said (other namespaces), or more (written meanwhile).
            (
                (2500, 2500),
                Some(2000),
                5.0,
                "copying: 2500 keys of ~2000 [####################] 100%, ~0 s left, 500 keys/s, 5 s",
            ),
            ((10, 10), Some(0), 1.0, "copying: 10 keys, 10 keys/s, 1 s"),
        ];
        for (keys, of, secs, want) in rows {
            assert_eq!(progress_line("copying", keys, of, secs), want);
        }
    }
}
