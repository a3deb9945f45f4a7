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

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
            max_connections: 64,
            paced: false,
        }
    }
}

/// A running NVMe/TCP target.
#[derive(Debug)]
pub struct Target {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: JoinHandle<()>,
    device: DeviceThread,
}

impl Target {
    /// Starts serving `ssd` on `addr` (its own threads: accept, device, two per connection).
    pub fn start(ssd: Ssd, addr: impl ToSocketAddrs, options: TargetOptions) -> io::Result<Self> {
        if options.max_inline_bytes < 8192 || options.max_h2c_data_bytes < 4096 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "in-capsule data must allow 8 KiB and MAXH2CDATA 4 KiB",
            ));
        }
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let device = DeviceThread::start(ssd, options.paced)?;
        let subsystem = Arc::new(Subsystem::new(&options.nqn, options.queue_entries));
        let stop = Arc::new(AtomicBool::new(false));
        let handle = device.handle();
        let stopping = Arc::clone(&stop);
        let accept = thread::Builder::new()
            .name("sagessd-tcp-accept".into())
            .spawn(move || {
                let live = Arc::new(AtomicUsize::new(0));
                while !stopping.load(Ordering::Relaxed) {
                    let (socket, peer) = match listener.accept() {
                        Ok(a) => a,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            thread::sleep(ACCEPT_POLL);
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!("accept failed: {e}");
                            continue;
                        }
                    };
                    if live.load(Ordering::Relaxed) >= options.max_connections
                        || socket.set_nonblocking(false).is_err()
                    {
                        tracing::warn!("refusing connection from {peer}: too many connections");
                        continue;
                    }
                    live.fetch_add(1, Ordering::Relaxed);
                    let (subsystem, handle, options) =
                        (Arc::clone(&subsystem), handle.clone(), options.clone());
                    let live = Arc::clone(&live);
                    let spawned = thread::Builder::new()
                        .name("sagessd-tcp-conn".into())
                        .spawn(move || {
                            if let Err(e) = connection::serve(socket, subsystem, handle, options) {
                                tracing::warn!("connection from {peer} ended: {e}");
                            }
                            live.fetch_sub(1, Ordering::Relaxed);
                        });
                    if spawned.is_err() {
                        tracing::warn!("cannot start a thread for {peer}");
                    }
                }
            })?;
        Ok(Self {
            addr,
            stop,
            accept,
            device,
        })
    }

    /// The address the target listens on (with the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, finishes the commands already given to the device and returns it.
    /// Connections still open get Internal Error for later commands.
    pub fn stop(self) -> Ssd {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.accept.join();
        self.device.stop()
    }
}
