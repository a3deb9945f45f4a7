//! The device thread: the one owner of the emulated [`Ssd`], serving commands from every
//! connection in arrival order.
//!
//! Connections send [`Request`]s; the thread gives each a device-unique command id (hosts
//! choose their ids per queue, so two connections may use the same one), submits everything
//! that has arrived, reaps the next completion in virtual-time order and sends it back. In
//! virtual time (the default) the device runs as fast as the host can feed it; paced, it
//! completes a command no earlier, in wall-clock time since start, than its modelled completion
//! time, and an idle device's clock follows the wall clock.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use sagessd_abi::nvme::{CompletionEntry, Status, SubmissionEntry};

use crate::Ssd;

/// Device queue used for every admin command (they are serialized per connection already).
const ADMIN_QUEUE: u16 = 0;
/// Device queue used for every I/O command, whatever fabrics queue it came on.
const IO_QUEUE: u16 = 1;
/// How long a paced device waits for new commands before looking at its clock again.
const PACE_TICK: Duration = Duration::from_micros(100);

/// Where a command's completion goes; called on the device thread. Dropped without being
/// called (a request lost in a stopping device), it completes the command with Internal Error,
/// so no host waits forever.
pub struct ReplyTo {
    cid: u16,
    deliver: Option<Box<dyn FnOnce(Reply) + Send>>,
}

impl std::fmt::Debug for ReplyTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyTo")
            .field("cid", &self.cid)
            .finish_non_exhaustive()
    }
}

impl ReplyTo {
    /// A reply path for host command `cid`.
    pub fn new(cid: u16, deliver: impl FnOnce(Reply) + Send + 'static) -> Self {
        Self {
            cid,
            deliver: Some(Box::new(deliver)),
        }
    }

    /// Delivers the completion.
    pub fn send(mut self, reply: Reply) {
        if let Some(deliver) = self.deliver.take() {
            deliver(reply);
        }
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if let Some(deliver) = self.deliver.take() {
            deliver(Reply {
                cqe: CompletionEntry::new(0, self.cid, Status::INTERNAL_ERROR, 0),
                data: Vec::new(),
            });
        }
    }
}

/// A command for the device.
pub struct Request {
    /// Admin (true) or I/O command.
    pub admin: bool,
    /// The command as the host sent it (its command id is restored in the reply).
    pub sqe: SubmissionEntry,
    /// Its data buffer: the payload, or a zeroed buffer of the length to return.
    pub data: Vec<u8>,
    /// Where the reply goes.
    pub reply: ReplyTo,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("admin", &self.admin)
            .field("sqe", &self.sqe)
            .field("data_len", &self.data.len())
            .finish_non_exhaustive()
    }
}

/// A completed command.
#[derive(Debug)]
pub struct Reply {
    /// The completion, with the host's command id (queue id and head are the connection's).
    pub cqe: CompletionEntry,
    /// The data buffer after the command.
    pub data: Vec<u8>,
}

/// Device command ids of one device queue not in use: taking one never searches, and running
/// out refuses the command instead of waiting for an id.
struct FreeIds(Vec<u16>);

impl FreeIds {
    /// Every id but 0xFFFF (the value NVMe reserves as "no command").
    fn all() -> Self {
        Self((0..u16::MAX).rev().collect())
    }

    fn take(&mut self) -> Option<u16> {
        self.0.pop()
    }

    fn give_back(&mut self, id: u16) {
        self.0.push(id);
    }
}

/// What the device thread owns while running.
struct Running {
    ssd: Ssd,
    /// Device command id → (host command id, where to reply).
    pending: FxHashMap<(u16, u16), (u16, ReplyTo)>,
    /// Free device command ids of the admin queue and of the I/O queue.
    free_ids: [FreeIds; 2],
    pace: Option<Instant>,
    /// The model failed (see [`Running::fail_all`]); every later command fails too.
    broken: bool,
}

/// A handle on the device thread; dropping every [`DeviceHandle`] clone and calling
/// [`DeviceThread::stop`] ends it and gives the SSD back.
#[derive(Debug)]
pub struct DeviceThread {
    handle: DeviceHandle,
    join: JoinHandle<Ssd>,
}

/// Where connections send their commands.
#[derive(Clone, Debug)]
pub struct DeviceHandle {
    tx: Sender<Option<Request>>,
}

impl DeviceHandle {
    /// Sends a command; `false` if the device thread has stopped.
    pub fn send(&self, request: Request) -> bool {
        self.tx.send(Some(request)).is_ok()
    }
}

impl DeviceThread {
    /// Starts the device thread around `ssd`; `paced`: complete no earlier than modelled time.
    pub fn start(ssd: Ssd, paced: bool) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let running = Running {
            ssd,
            pending: FxHashMap::default(),
            free_ids: [FreeIds::all(), FreeIds::all()],
            pace: paced.then(Instant::now),
            broken: false,
        };
        let join = thread::Builder::new()
            .name("sagessd-device".into())
            .spawn(move || running.run(rx))?;
        Ok(Self {
            handle: DeviceHandle { tx },
            join,
        })
    }

    /// A handle for a connection.
    pub fn handle(&self) -> DeviceHandle {
        self.handle.clone()
    }

    /// Finishes every command already sent, stops the thread and returns the SSD.
    pub fn stop(self) -> Ssd {
        // A `None` asks the thread to finish; it exits once its queue has drained.
        let _ = self.handle.tx.send(None);
        match self.join.join() {
            Ok(ssd) => ssd,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Running {
    fn run(mut self, rx: Receiver<Option<Request>>) -> Ssd {
        let mut stopping = false;
        loop {
            // Take everything that has arrived; block only when the device is idle. Once
            // stopping, new commands are refused (their replies say Internal Error) and the
            // thread ends when the commands already in the device have completed.
            if !self.busy() {
                if stopping {
                    return self.ssd;
                }
                match rx.recv() {
                    Ok(Some(r)) => self.submit(r),
                    Ok(None) | Err(_) => stopping = true,
                }
            }
            while let Ok(message) = rx.try_recv() {
                match message {
                    Some(r) if !stopping => self.submit(r),
                    Some(r) => drop(r.reply),
                    None => stopping = true,
                }
            }
            if !self.busy() {
                continue;
            }
            match self.pace {
                None => self.reap_next(),
                Some(start) => self.reap_paced(start, &rx, &mut stopping),
            }
        }
    }

    /// Whether commands are in the simulation.
    fn busy(&self) -> bool {
        !self.broken && self.ssd.outstanding() > 0
    }

    fn submit(&mut self, r: Request) {
        if self.broken {
            drop(r.reply);
            return;
        }
        if let Some(start) = self.pace {
            self.ssd.advance_to_ns(start.elapsed().as_nanos() as u64);
        }
        let sq = if r.admin { ADMIN_QUEUE } else { IO_QUEUE };
        // The target bounds the commands in flight below 65,535, so ids do not run out; if
        // they did, the command would fail (Internal Error) rather than wait.
        let Some(cid) = self.free_ids[usize::from(sq)].take() else {
            tracing::warn!("device command ids exhausted; failing a command");
            drop(r.reply);
            return;
        };
        let host_cid = r.sqe.cid.get();
        let mut sqe = r.sqe;
        sqe.cid = cid.into();
        match self.ssd.submit(sq, sqe, r.data) {
            Ok(()) => {
                self.pending.insert((sq, cid), (host_cid, r.reply));
            }
            Err(e) => {
                tracing::warn!("device refused a command: {e}");
                self.free_ids[usize::from(sq)].give_back(cid);
                drop(r.reply);
            }
        }
    }

    /// Runs the simulation to the next completion and delivers it.
    fn reap_next(&mut self) {
        match self.ssd.reap() {
            Ok(Some(done)) => self.deliver(done.cqe, done.data),
            Ok(None) => {}
            Err(e) => self.fail_all(&e),
        }
    }

    /// Delivers completions whose modelled time has passed on the wall clock, taking new
    /// commands meanwhile.
    fn reap_paced(&mut self, start: Instant, rx: &Receiver<Option<Request>>, stopping: &mut bool) {
        let now_ns = start.elapsed().as_nanos() as u64;
        match self.ssd.reap_until(now_ns) {
            Ok(Some(done)) => self.deliver(done.cqe, done.data),
            Ok(None) => match rx.recv_timeout(PACE_TICK) {
                Ok(Some(r)) if !*stopping => self.submit(r),
                Ok(Some(r)) => drop(r.reply),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => *stopping = true,
                Err(RecvTimeoutError::Timeout) => {}
            },
            Err(e) => self.fail_all(&e),
        }
    }

    fn deliver(&mut self, cqe: CompletionEntry, data: Vec<u8>) {
        let key = (cqe.sq_id.get(), cqe.cid.get());
        let Some((host_cid, reply)) = self.pending.remove(&key) else {
            tracing::warn!("completion for unknown device command {key:?}");
            return;
        };
        if let Some(ids) = self.free_ids.get_mut(usize::from(key.0)) {
            ids.give_back(key.1);
        }
        let mut cqe = cqe;
        cqe.cid = host_cid.into();
        // The connection may have gone; its commands still had to finish.
        reply.send(Reply { cqe, data });
    }

    /// The simulation cannot go on (a model error): every pending and later command fails.
    fn fail_all(&mut self, e: &crate::EmulatorError) {
        tracing::error!("emulated device failed: {e}");
        self.broken = true;
        // Dropping the reply paths completes every pending command with Internal Error.
        self.pending.clear();
    }
}
