//! The emulated SSD as an NVMe/TCP target (NVMe/TCP Transport Specification 1.0 over NVMe-oF):
//! what the Linux `nvme-tcp` initiator, `nvme-cli` and the host driver's TCP transport connect
//! to.
//!
//! ```plain
//!   TCP connection ─► connection (reader) ─┬─ Fabrics: Connect, Property Get/Set ─► subsystem
//!        ▲    (one queue each)              ├─ Keep Alive, AER (held)
//!        │                                  └─ admin / I/O commands ─► device thread ─► Ssd
//!        └──── writer thread ◄── R2T, C2HData, response capsules ◄──────────┘
//! ```
//!
//! Each connection carries one queue; the admin queue's Connect creates a controller (dynamic
//! controller model), later I/O queue Connects join it. Every command of every connection goes to
//! the one device thread ([`device`]), which owns the [`Ssd`]. Bounds: connections
//! ([`TargetOptions::max_connections`]), commands per queue (the size the host asked for, at most
//! [`TargetOptions::queue_entries`]), in-capsule and H2CData sizes, data per command.

mod connection;
pub mod device;
pub mod subsystem;

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::Ssd;
use device::DeviceThread;
use subsystem::Subsystem;

/// The subsystem NQN served when none is given.
pub const DEFAULT_NQN: &str = "nqn.2026-11.io.sagessd:emulator";
/// The IANA-assigned NVMe/TCP port.
pub const DEFAULT_PORT: u16 = 4420;
/// How often the accept loop looks at its stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

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
    /// Most connections at once; more are closed at accept.
    pub max_connections: usize,
    /// Complete commands no earlier than their modelled time on the wall clock.
    pub paced: bool,
}

impl Default for TargetOptions {
    fn default() -> Self {
        Self {
            nqn: DEFAULT_NQN.to_owned(),
            queue_entries: 128,
            max_inline_bytes: 8192,
            max_h2c_data_bytes: 128 * 1024,
            max_transfer_bytes: 64 << 20,
            max_connections: 32,
            paced: false,
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
        let options = TargetOptions {
            max_transfer_bytes: options.max_transfer_bytes.min(ssd.max_transfer_bytes()),
            ..options
        };
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let device = DeviceThread::start(ssd, options.paced)?;
        let subsystem = Arc::new(Subsystem::new(&options.nqn, options.queue_entries));
        let stop = Arc::new(AtomicBool::new(false));
        let sockets: Sockets = Arc::new(Mutex::new(HashMap::new()));
        let handle = device.handle();
        let (stopping, live_sockets) = (Arc::clone(&stop), Arc::clone(&sockets));
        let accept = thread::Builder::new()
            .name("sagessd-tcp-accept".into())
            .spawn(move || {
                let mut next_id = 0u64;
                while !stopping.load(Ordering::Relaxed) {
                    let (socket, peer) = match listener.accept() {
                        Ok(a) => a,
                        Err(e) => {
                            if e.kind() != io::ErrorKind::WouldBlock {
                                tracing::warn!("accept failed: {e}");
                            }
                            thread::sleep(ACCEPT_POLL);
                            continue;
                        }
                    };
                    let registered = socket.try_clone();
                    let full = lock(&live_sockets).len() >= options.max_connections;
                    if full || socket.set_nonblocking(false).is_err() {
                        tracing::warn!("refusing connection from {peer}: too many connections");
                        continue;
                    }
                    let Ok(registered) = registered else {
                        continue;
                    };
                    let id = next_id;
                    next_id += 1;
                    lock(&live_sockets).insert(id, registered);
                    let (subsystem, handle, options) =
                        (Arc::clone(&subsystem), handle.clone(), options.clone());
                    let live = Arc::clone(&live_sockets);
                    let spawned = thread::Builder::new()
                        .name("sagessd-tcp-conn".into())
                        .spawn(move || {
                            if let Err(e) = connection::serve(socket, subsystem, handle, options) {
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
        })
    }

    /// The address the target listens on (with the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection, finishes the commands already given to the
    /// device and returns it (commands arriving meanwhile get Internal Error).
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
            let _ = accept.join();
        }
        for socket in lock(&self.sockets).values() {
            let _ = socket.shutdown(Shutdown::Both);
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
