//! A fault-injecting TCP relay for tests: `client -> Relay -> target`.
//!
//! Listens on a free 127.0.0.1 port and forwards each accepted connection to
//! the target over its own backend connection. The fault mode is shared
//! (`Arc`) and can be switched at any time from the test:
//!
//! - `pass()`: forward both ways (the default).
//! - `drop_after_request()`: one-shot. The next chunk read from any client is
//!   written to the backend in full; then the backend side is half-closed and
//!   its replies are read and discarded until the backend closes (or
//!   `APPLY_WAIT` passes), and then both sockets are closed. So by the time the
//!   client sees EOF the request has been applied, and its reply is lost. The
//!   mode returns to `pass` as the fault fires; `fired()` counts firings.
//!   `drop_after_request_with(needle)` fires only on a chunk containing
//!   `needle`, so a pool connection's handshake cannot take the fault meant
//!   for the test's command.
//! - `blackhole()`: connections are accepted and kept open, nothing is
//!   forwarded either way (bytes read on both sides are discarded) until
//!   `pass()`. A backend that hangs up meanwhile is forgotten silently; its
//!   client is then closed when the mode goes back to `pass`.
//! - `refuse()`: every open connection is closed and new ones are accepted
//!   and closed at once, until `pass()`.
//!
//! Dropping the `Relay` stops the listener and closes all its connections.
//! Needs a running tokio runtime (`Relay::start` spawns tasks).
#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

/// Timeout for connecting to the target.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `drop_after_request` waits for the backend to process the request
/// (reply read and discarded, then backend EOF) before closing anyway, e.g.
/// for a blocking command or a partial request.
pub const APPLY_WAIT: Duration = Duration::from_secs(2);

const BUF_SIZE: usize = 64 * 1024;

/// The relay's fault mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Pass,
    DropAfterRequest,
    Blackhole,
    Refuse,
}

struct Shared {
    mode: watch::Sender<Fault>,
    target: Mutex<String>,
    /// When set, DropAfterRequest fires only on a chunk containing it.
    needle: Mutex<Option<Vec<u8>>>,
    /// Firings left before DropAfterRequest turns back into Pass.
    shots: AtomicUsize,
    fired: AtomicUsize,
    accepted: AtomicUsize,
    open: AtomicUsize,
}

impl Shared {
    fn mode(&self) -> Fault {
        *self.mode.borrow()
    }

    /// Atomically turns DropAfterRequest into Pass when `chunk` is the one the
    /// fault is armed for; true if this caller did.
    fn claim_drop(&self, chunk: &[u8]) -> bool {
        let wanted = match &*self.needle.lock().expect("relay needle lock") {
            Some(needle) => chunk.windows(needle.len()).any(|w| w == needle.as_slice()),
            None => true,
        };
        if !wanted {
            return false;
        }
        let mut claimed = false;
        self.mode.send_if_modified(|m| {
            if *m != Fault::DropAfterRequest {
                return false;
            }
            claimed = true;
            if self.shots.fetch_sub(1, Ordering::SeqCst) <= 1 {
                *m = Fault::Pass;
                true
            } else {
                false
            }
        });
        claimed
    }
}

pub struct Relay {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Relay {
    /// Binds 127.0.0.1:0 and starts relaying to `target` ("host:port").
    pub async fn start(target: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("Relay: cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .expect("local_addr of a bound listener");
        let (mode, _) = watch::channel(Fault::Pass);
        let shared = Arc::new(Shared {
            mode,
            target: Mutex::new(target.to_string()),
            needle: Mutex::new(None),
            shots: AtomicUsize::new(0),
            fired: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Relay { shared, addr, task }
    }

    /// `"127.0.0.1:PORT"` to point clients at.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Forward both ways.
    pub fn pass(&self) {
        self.shared.mode.send_replace(Fault::Pass);
    }

    /// Arm the one-shot "request applied, reply lost" fault.
    pub fn drop_after_request(&self) {
        *self.shared.needle.lock().expect("relay needle lock") = None;
        self.shared.shots.store(1, Ordering::SeqCst);
        self.shared.mode.send_replace(Fault::DropAfterRequest);
    }

    /// Arm the one-shot fault for the next chunk that contains `needle`.
    pub fn drop_after_request_with(&self, needle: &[u8]) {
        self.drop_requests_with(needle, 1);
    }

    /// Arm the fault for the next `n` chunks that contain `needle`.
    pub fn drop_requests_with(&self, needle: &[u8], n: usize) {
        *self.shared.needle.lock().expect("relay needle lock") = Some(needle.to_vec());
        self.shared.shots.store(n, Ordering::SeqCst);
        self.shared.mode.send_replace(Fault::DropAfterRequest);
    }

    /// Keep connections open but forward nothing, until `pass()`.
    pub fn blackhole(&self) {
        self.shared.mode.send_replace(Fault::Blackhole);
    }

    /// Close all connections, and new ones at once, until `pass()`.
    pub fn refuse(&self) {
        self.shared.mode.send_replace(Fault::Refuse);
    }

    /// The current mode (`DropAfterRequest` turns back into `Pass` on firing).
    pub fn mode(&self) -> Fault {
        self.shared.mode()
    }

    /// How many times `drop_after_request` has fired.
    pub fn fired(&self) -> usize {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// Client connections accepted so far (including ones closed by `refuse`).
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Client connections currently open through the relay.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Points backend connections made from now on at another address.
    /// Existing connections keep their backend.
    pub fn retarget(&self, target: &str) {
        *self.shared.target.lock().expect("relay target lock") = target.to_string();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Aborting the listener task drops its JoinSet, which aborts (and so
        // closes) every connection task.
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            res = listener.accept() => match res {
                Ok((sock, _peer)) => {
                    shared.accepted.fetch_add(1, Ordering::SeqCst);
                    if shared.mode() == Fault::Refuse {
                        drop(sock);
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    conns.spawn(run_conn(sock, shared.clone()));
                }
                // E.g. EMFILE: back off briefly rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Event {
    ModeChanged,
    Client(io::Result<usize>),
    Backend(io::Result<usize>),
}

async fn read_if(cond: bool, s: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    if cond {
        s.read(buf).await
    } else {
        std::future::pending().await
    }
}

async fn read_opt(s: Option<&mut TcpStream>, buf: &mut [u8]) -> io::Result<usize> {
    match s {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn connect_backend(shared: &Shared) -> Option<TcpStream> {
    let target = shared.target.lock().expect("relay target lock").clone();
    match timeout(CONNECT_TIMEOUT, TcpStream::connect(&target)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Some(s)
        }
        _ => None,
    }
}

/// One client connection. Returning drops (closes) both sockets.
async fn run_conn(mut client: TcpStream, shared: Arc<Shared>) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let _guard = OpenGuard(shared.clone());
    let mut rx = shared.mode.subscribe();
    let mut backend: Option<TcpStream> = None;
    // The backend hung up during a blackhole: the client's session is gone.
    let mut backend_lost = false;
    // The client half-closed: stop reading it, keep relaying replies.
    let mut client_eof = false;
    let mut cbuf = vec![0u8; BUF_SIZE];
    let mut bbuf = vec![0u8; BUF_SIZE];

    loop {
        let mode = *rx.borrow_and_update();
        match mode {
            Fault::Refuse => return,
            Fault::Pass | Fault::DropAfterRequest => {
                if backend.is_none() {
                    if backend_lost {
                        return;
                    }
                    match connect_backend(&shared).await {
                        Some(b) => backend = Some(b),
                        None => return, // target down: close the client
                    }
                }
            }
            Fault::Blackhole => {}
        }

        let event = tokio::select! {
            biased;
            r = rx.changed() => match r {
                Ok(()) => Event::ModeChanged,
                Err(_) => return,
            },
            r = read_if(!client_eof, &mut client, &mut cbuf) => Event::Client(r),
            r = read_opt(backend.as_mut(), &mut bbuf) => Event::Backend(r),
        };

        match event {
            Event::ModeChanged => continue,
            Event::Client(Ok(0)) => {
                // Client half-closed (or closed): pass the FIN on, if we can.
                match (shared.mode(), backend.as_mut()) {
                    (Fault::Pass | Fault::DropAfterRequest, Some(b)) => {
                        let _ = b.shutdown().await;
                        client_eof = true;
                    }
                    _ => return,
                }
            }
            Event::Client(Err(_)) => return,
            Event::Client(Ok(n)) => {
                let chunk = &cbuf[..n];
                if shared.claim_drop(chunk) {
                    if backend.is_none() {
                        backend = connect_backend(&shared).await;
                    }
                    if let Some(b) = backend.as_mut() {
                        if b.write_all(chunk).await.is_ok() {
                            // FIN after the request: redis executes it, writes
                            // the reply (discarded here), then closes.
                            let _ = b.shutdown().await;
                            let _ = timeout(APPLY_WAIT, async {
                                let mut sink = vec![0u8; BUF_SIZE];
                                loop {
                                    match b.read(&mut sink).await {
                                        Ok(0) | Err(_) => break,
                                        Ok(_) => {}
                                    }
                                }
                            })
                            .await;
                        }
                    }
                    shared.fired.fetch_add(1, Ordering::SeqCst);
                    return; // closes client and backend
                }
                match shared.mode() {
                    Fault::Blackhole => {} // discard
                    Fault::Refuse => return,
                    Fault::Pass | Fault::DropAfterRequest => {
                        if backend.is_none() {
                            if backend_lost {
                                return;
                            }
                            backend = connect_backend(&shared).await;
                        }
                        let Some(b) = backend.as_mut() else { return };
                        if b.write_all(chunk).await.is_err() {
                            return;
                        }
                    }
                }
            }
            Event::Backend(r) => {
                let n = match r {
                    Ok(n) if n > 0 => n,
                    _ => {
                        // Backend closed or failed.
                        if shared.mode() == Fault::Blackhole && !client_eof {
                            backend = None;
                            backend_lost = true;
                            continue;
                        }
                        return;
                    }
                };
                match shared.mode() {
                    Fault::Blackhole => {} // discard
                    Fault::Refuse => return,
                    Fault::Pass | Fault::DropAfterRequest => {
                        if client.write_all(&bbuf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}
