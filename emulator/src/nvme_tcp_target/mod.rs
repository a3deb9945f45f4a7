//! The emulated SSD as an NVMe/TCP target (NVMe/TCP Transport Specification 1.0 over NVMe-oF):
//! what the Linux `nvme-tcp` initiator, `nvme-cli` and the host driver's TCP transport connect
//! to.
//!
//! ```plain
//!   TCP connection ─► connection (reader) ─┬─ Fabrics: Connect, Property Get/Set ─► subsystem
//!        ▲    (one queue each)              ├─ AUTH_Send/AUTH_Receive ─► auth (DH-HMAC-CHAP)
//!        │                                  ├─ Keep Alive, AER (held)
//!        │                                  └─ admin / I/O commands ─► device thread ─► Ssd
//!        └──── writer thread ◄── R2T, C2HData, response capsules ◄──────────┘
//! ```
//!
//! Each connection carries one queue; the admin queue's Connect creates a controller (dynamic
//! controller model), later I/O queue Connects join it. A host with a secret
//! ([`TargetOptions::auth`]) must authenticate each queue before it serves anything ([`auth`]). Every command of every connection goes to
//! the one device thread ([`device`]), which owns the [`Ssd`]. Bounds, so that no host can make
//! the target's memory grow without limit: connections ([`TargetOptions::max_connections`]),
//! commands per queue (the size the host asked for, at most [`TargetOptions::queue_entries`]),
//! in-capsule and H2CData sizes, data per command, command data held at once across all
//! connections ([`TargetOptions::max_outstanding_bytes`], see `budget`) and answers waiting
//! for a host that does not read (see `outbound`).

pub mod auth;
mod budget;
mod connection;
pub mod device;
mod outbound;
mod silence;
pub mod subsystem;

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::Ssd;
use auth::AuthOptions;
use budget::Budget;
use device::DeviceThread;
use subsystem::{AllowedHosts, Subsystem};

/// The subsystem NQN served when none is given.
pub const DEFAULT_NQN: &str = "nqn.2026-11.io.sagessd:emulator";
/// The IANA-assigned NVMe/TCP port.
pub const DEFAULT_PORT: u16 = 4420;
/// How long [`Target::stop`] waits for the connections' sockets to shut down (a socket wedged
/// in the kernel is left behind) before it stops the device.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);
/// How long an accept that failed for lack of resources (file descriptors) waits to retry.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// How the target serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetOptions {
    /// The subsystem NQN hosts connect to.
    pub nqn: String,
    /// Most entries per queue (CAP.MQES + 1).
    pub queue_entries: u16,
    /// Most in-capsule data per command (sets IOCCSZ); Linux sends up to 8 KiB of admin data
    /// in-capsule whatever IOCCSZ says, so this is at least 8 KiB.
    pub max_inline_bytes: u32,
    /// Most data per H2CData PDU (MAXH2CDATA).
    pub max_h2c_data_bytes: u32,
    /// Most data one command may move.
    pub max_transfer_bytes: u32,
    /// Most connections at once; more are closed at accept. Together with `queue_entries` it
    /// bounds the commands in the device at once, which must stay below 65,536.
    pub max_connections: usize,
    /// Most bytes of command data (read buffers, write data asked for with R2T) held at once
    /// across all connections; commands beyond it wait, in arrival order. At least one largest
    /// transfer.
    pub max_outstanding_bytes: usize,
    /// Complete commands no earlier than their modelled time on the wall clock.
    pub paced: bool,
    /// How long a connection may take to send ICReq and Connect, in all (and stay silent
    /// before its Connect); after Connect only the host's keep-alive timeout applies.
    pub setup_timeout: Duration,
    /// The hosts that may connect.
    pub hosts: AllowedHosts,
    /// The hosts that must authenticate (DH-HMAC-CHAP) before their queues serve anything.
    pub auth: AuthOptions,
}

impl Default for TargetOptions {
    fn default() -> Self {
        Self {
            nqn: DEFAULT_NQN.to_owned(),
            queue_entries: 128,
            max_inline_bytes: 8192,
            max_h2c_data_bytes: 128 * 1024,
            max_transfer_bytes: 64 << 20,
            // Several hosts, each with an admin queue and 64 I/O queues.
            max_connections: 260,
            max_outstanding_bytes: 64 << 20,
            paced: false,
            setup_timeout: Duration::from_secs(30),
            hosts: AllowedHosts::AnyOnLoopback,
            auth: AuthOptions::default(),
        }
    }
}

/// Open connections, by accept order: clones of their sockets, to shut them down at stop.
type Sockets = Arc<Mutex<HashMap<u64, TcpStream>>>;

/// A running NVMe/TCP target. Dropping it without [`Target::stop`] stops accepting and closes
/// every connection; the device is then lost.
#[derive(Debug)]
pub struct Target {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    device: Option<DeviceThread>,
    sockets: Sockets,
    budget: Arc<Budget>,
}

impl Target {
    /// Starts serving `ssd` on `addr` (its own threads: accept, device, two per connection).
    /// Commands may move at most the device's maximum transfer size (MDTS), and no more than
    /// `options.max_transfer_bytes`.
    pub fn start(ssd: Ssd, addr: impl ToSocketAddrs, options: TargetOptions) -> io::Result<Self> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
        if options.max_inline_bytes < 8192 {
            return Err(invalid(
                "in-capsule data must allow 8 KiB (Linux sends that much)",
            ));
        }
        if options.max_h2c_data_bytes < 4096 || !options.max_h2c_data_bytes.is_multiple_of(4) {
            return Err(invalid(
                "MAXH2CDATA must be a multiple of 4 of at least 4 KiB",
            ));
        }
        if options.queue_entries < 2 {
            return Err(invalid("queues must hold at least 2 entries"));
        }
        let commands = options
            .max_connections
            .saturating_mul(usize::from(options.queue_entries));
        if options.max_connections == 0 || commands > usize::from(u16::MAX) {
            return Err(invalid(
                "max_connections × queue_entries must be 1..=65,535 (device command ids)",
            ));
        }
        let options = TargetOptions {
            max_transfer_bytes: options.max_transfer_bytes.min(ssd.max_transfer_bytes()),
            ..options
        };
        if options.max_outstanding_bytes < options.max_transfer_bytes as usize {
            return Err(invalid(
                "max_outstanding_bytes must hold the largest transfer (MDTS)",
            ));
        }
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        if options.hosts == AllowedHosts::AnyOnLoopback && !addr.ip().is_loopback() {
            return Err(invalid(
                "listening beyond loopback lets anyone who reaches the port read and write the \
                 namespace: name the hosts that may connect (AllowedHosts::Only) or allow any \
                 host explicitly (AllowedHosts::Any)",
            ));
        }
        let device = DeviceThread::start(ssd, options.paced)?;
        // A controller may hold half the budget (at least one largest transfer): a host that
        // stops reading keeps the other half for the others.
        let controller_share =
            (options.max_outstanding_bytes / 2).max(options.max_transfer_bytes as usize);
        let subsystem = Arc::new(Subsystem::new(
            &options.nqn,
            options.queue_entries,
            options.hosts.clone(),
            controller_share,
        ));
        let budget = Budget::new(options.max_outstanding_bytes);
        let stop = Arc::new(AtomicBool::new(false));
        let sockets: Sockets = Arc::new(Mutex::new(HashMap::new()));
        let handle = device.handle();
        let (stopping, live_sockets) = (Arc::clone(&stop), Arc::clone(&sockets));
        let shared_budget = Arc::clone(&budget);
        let accept = thread::Builder::new()
            .name("sagessd-tcp-accept".into())
            .spawn(move || {
                let mut next_id = 0u64;
                // Accept blocks; `close` wakes it with a connection of its own.
                loop {
                    let accepted = listener.accept();
                    if stopping.load(Ordering::Relaxed) {
                        return;
                    }
                    let (socket, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!("accept failed: {e}");
                            thread::sleep(ACCEPT_RETRY);
                            continue;
                        }
                    };
                    if lock(&live_sockets).len() >= options.max_connections {
                        tracing::warn!(
                            "refusing connection from {peer}: {} connections open",
                            options.max_connections
                        );
                        continue;
                    }
                    let Ok(registered) = socket.try_clone() else {
                        continue;
                    };
                    let id = next_id;
                    next_id += 1;
                    lock(&live_sockets).insert(id, registered);
                    let (subsystem, handle, budget, options) = (
                        Arc::clone(&subsystem),
                        handle.clone(),
                        Arc::clone(&shared_budget),
                        options.clone(),
                    );
                    let live = Arc::clone(&live_sockets);
                    let spawned = thread::Builder::new()
                        .name("sagessd-tcp-conn".into())
                        .spawn(move || {
                            let served =
                                connection::serve(socket, subsystem, handle, budget, options);
                            if let Err(e) = served {
                                tracing::warn!("connection from {peer} ended: {e}");
                            }
                            lock(&live).remove(&id);
                        });
                    if spawned.is_err() {
                        tracing::warn!("cannot start a thread for {peer}");
                        lock(&live_sockets).remove(&id);
                    }
                }
            })?;
        Ok(Self {
            addr,
            stop,
            accept: Some(accept),
            device: Some(device),
            sockets,
            budget,
        })
    }

    /// Bytes of command data the target holds now (read buffers, write data asked for), at most
    /// [`TargetOptions::max_outstanding_bytes`].
    pub fn held_bytes(&self) -> usize {
        self.budget.held_bytes()
    }

    /// The address the target listens on (with the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection, finishes the commands already given to the
    /// device and returns it (commands arriving meanwhile get Internal Error). It does not wait
    /// for the connections' threads, and waits at most a few seconds for their sockets to shut
    /// down, so it ends even when a socket is stuck in the kernel.
    pub fn stop(mut self) -> Ssd {
        self.close();
        match self.device.take() {
            Some(device) => device.stop(),
            None => unreachable!("the device thread is only taken here"),
        }
    }

    /// Stops the accept loop and shuts every connection down.
    fn close(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            // Wake the blocking accept; if even that fails, the thread is left to the process.
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            if TcpStream::connect_timeout(&wake, SHUTDOWN_WAIT).is_ok() {
                let _ = accept.join();
            }
        }
        let sockets: Vec<TcpStream> = lock(&self.sockets)
            .values()
            .filter_map(|s| s.try_clone().ok())
            .collect();
        let (done, finished) = mpsc::channel();
        let shut = thread::Builder::new()
            .name("sagessd-tcp-stop".into())
            .spawn(move || {
                for socket in sockets {
                    let _ = socket.shutdown(Shutdown::Both);
                }
                let _ = done.send(());
            });
        if shut.is_ok() && finished.recv_timeout(SHUTDOWN_WAIT).is_err() {
            tracing::warn!("a connection's socket did not shut down within {SHUTDOWN_WAIT:?}");
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.close();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Holders only insert or remove one entry: a poisoned map is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
