//! One NVMe/TCP connection: one queue (admin or I/O) of one controller.
//!
//! Three threads serve it. The socket reader takes PDUs off the socket (while the [`Flow`]
//! allows) and hands them to the connection (this thread), a state machine driven by
//! [`Event`]s: PDUs, and grants of the target's byte [`Budget`] for commands that waited for
//! one. The writer ([`outbound`](super::outbound)) sends what the connection and the device
//! thread put in its outbox, so completions go out while the connection waits for the next
//! event. A fatal protocol error ends the connection with a C2HTermReq; a bad command only gets
//! a status.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sagessd_abi::auth::{AUTH_REQUIRED, CONNECT_ATR, SECP_AUTH, SPSP_DHCHAP};
use sagessd_abi::fabrics::{
    ConnectData, DataPointer, FABRICS_OPCODE, FabricsCommand, connect_status, data_direction,
    fctype,
};
use sagessd_abi::identify::CNS_CONTROLLER;
use sagessd_abi::nvme::{
    AdminCommand, CompletionEntry, DataDirection, Status, SubmissionEntry, io_opcode, sct,
};
use sagessd_abi::tcp::stream::{Pdu, RecvError, read_pdu, write_pdu};
use sagessd_abi::tcp::{
    CapsuleCmd, DataHeader, Fatal, Framing, IcReq, IcResp, R2t, digest, fes, flags, pdu_type,
};
use zerocopy::FromZeros;

use super::TargetOptions;
use super::auth::{QueueAuth, Sent};
use super::budget::{self, Budget, Grant};
use super::device::{DeviceHandle, Reply, ReplyTo, Request};
use super::outbound::{Flow, Outbound, Outbox, write_loop, write_term};
use super::silence::{PatientReader, Silence};
use super::subsystem::{ControllerRef, Subsystem, VERSION};

/// Slack on top of the host's keep-alive timeout before the target gives up on it: the keep
/// alive granularity the controller reports (KAS = 10, in 100 ms units).
const KEEP_ALIVE_SLACK: Duration = Duration::from_secs(1);
/// How long one write to a host that does not read may block before the connection is ended.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of command data one connection may hold (read buffers, write data asked for),
/// unless one transfer is larger: its share of the target's budget, so that one host that stops
/// reading, or never sends the data it was asked for, cannot hold all of it.
const CONNECTION_SHARE_BYTES: usize = 8 << 20;
/// Most in-capsule data before Connect (the Connect data).
const CONNECT_DATA_BYTES: usize = 1024;
/// Command ID Conflict.
const COMMAND_ID_CONFLICT: Status = Status::generic(0x03, true);
/// Transient Transport Error: a data digest did not match; the host may retry.
const TRANSIENT_TRANSPORT_ERROR: Status = Status::generic(0x22, false);
/// Data SGL Length Invalid.
const SGL_LENGTH_INVALID: Status = Status::generic(0x0F, true);
/// Asynchronous Event Request Limit Exceeded.
const AER_LIMIT_EXCEEDED: Status = Status {
    sct: sct::COMMAND_SPECIFIC,
    sc: 0x05,
    dnr: true,
};
/// Outstanding Asynchronous Event Requests held per controller (AERL + 1).
const AER_LIMIT: usize = 1;

/// What the connection reacts to.
enum Event {
    /// The next PDU from the host, or why none came.
    Received(Result<Pdu, RecvError>),
    /// Budget for the command at the front of [`Connection::waiting`]: from the next of
    /// [`Connection::levels`].
    Granted(Grant),
}

/// The budget one command's buffer holds, given back when the buffer goes: the connection's
/// share, its controller's, and the target's, taken in that order.
#[derive(Default)]
pub(super) struct Held {
    grants: Vec<Grant>,
}

impl Held {
    /// How many levels have granted so far.
    fn levels(&self) -> usize {
        self.grants.len()
    }

    /// The next level's grant.
    fn push(&mut self, grant: Grant) {
        self.grants.push(grant);
    }
}

impl Drop for Held {
    /// Gives the grants back widest level first (the target's, then the controller's, then the
    /// connection's), so that every command holding a wider level's bytes also holds the
    /// narrower ones: a controller never holds more of the target's budget than its share,
    /// not even for the moment between two releases (released narrowest first, a waiter on the
    /// same controller took the freed share and then the target's bytes while the first
    /// command still held its own).
    fn drop(&mut self) {
        while let Some(grant) = self.grants.pop() {
            drop(grant);
        }
    }
}

/// The queue this connection carries, once connected.
#[derive(Clone, Copy, Debug)]
struct Queue {
    qid: u16,
    ctrl: ControllerRef,
    entries: u16,
}

/// A write-direction command waiting for its data (H2CData after an R2T).
struct Incoming {
    sqe: SubmissionEntry,
    ttag: u16,
    buf: Vec<u8>,
    /// The budget `buf` holds.
    held: Held,
    received: usize,
    /// A data digest failed: the data is taken and dropped, and the command fails at the end.
    failed: bool,
}

/// A command that moves its data by the transport, waiting for budget.
#[derive(Clone, Copy)]
struct Waiting {
    sqe: SubmissionEntry,
    len: usize,
    write: bool,
}

/// Command ids a connection has accepted and not yet answered on the wire.
pub(super) type InFlight = Arc<Mutex<HashSet<u16>>>;

/// The state machine of one connection.
struct Connection {
    socket: TcpStream,
    events: Receiver<Event>,
    /// Where budget grants for this connection are delivered.
    events_tx: Sender<Event>,
    out: Outbox,
    flow: Arc<Flow>,
    subsystem: Arc<Subsystem>,
    device: DeviceHandle,
    /// The budgets a command takes its bytes from, in order: this connection's share, its
    /// controller's (every queue of one host together; added at Connect), the target's.
    levels: Vec<Arc<Budget>>,
    options: TargetOptions,
    queue: Option<Queue>,
    /// Until Connect succeeds, the connection must make it by this time.
    setup_deadline: Instant,
    /// How long the host may be silent (the set-up timeout, then its keep-alive timeout).
    silence: Arc<Silence>,
    /// The submission queue head the completions report.
    sq_head: Arc<AtomicU16>,
    /// Command ids accepted and not yet answered on the wire (in the device, held, or with
    /// their completion waiting for the writer).
    in_flight: InFlight,
    incoming: HashMap<u16, Incoming>,
    /// Commands waiting for budget, in arrival order.
    waiting: VecDeque<Waiting>,
    /// What the front of `waiting` already has of its levels (the connection's share, the
    /// controller's, the target's) while it waits for the next.
    front_grants: Held,
    /// A budget owes the front of `waiting` a grant ([`Event::Granted`]).
    granting: bool,
    held_aers: Vec<u16>,
    /// Per sampling slot, the last job this connection submitted: discarded when it leaves.
    jobs: Arc<Mutex<HashMap<u32, u32>>>,
    next_ttag: u16,
    closing: bool,
    /// DH-HMAC-CHAP, on a queue whose host has a secret.
    auth: Option<QueueAuth>,
    /// The keep-alive timeout the host asked for, applied once the queue has authenticated.
    keep_alive: Option<Duration>,
}

/// Serves one connection until the host closes it or breaks the protocol.
pub(super) fn serve(
    socket: TcpStream,
    subsystem: Arc<Subsystem>,
    device: DeviceHandle,
    budget: Arc<Budget>,
    options: TargetOptions,
) -> io::Result<()> {
    socket.set_nodelay(true)?;
    socket.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let setup_deadline = Instant::now() + options.setup_timeout;
    let silence = Silence::new(Some(options.setup_timeout));
    // Unbuffered: `read_pdu` reads each part of a PDU with reads of its own length, which keeps
    // a guest kernel's usercopy check from stopping it (`sagessd_abi::tcp::stream::DATA_READ_BYTES`).
    let mut reader = PatientReader::new(
        socket.try_clone()?,
        Arc::clone(&silence),
        options.setup_timeout,
    )?;
    let mut raw = socket.try_clone()?;
    let framing = match handshake(&mut reader, &mut raw, &options)? {
        Some(f) => f,
        None => return Ok(()),
    };
    let flow = Flow::new(options.queue_entries);
    let (out, rx) = mpsc::channel();
    let in_flight: InFlight = Arc::new(Mutex::new(HashSet::new()));
    let writer = {
        let (socket, in_flight, flow) = (socket.try_clone()?, Arc::clone(&in_flight), flow.clone());
        thread::Builder::new()
            .name("sagessd-tcp-writer".into())
            .spawn(move || write_loop(socket, framing, rx, &in_flight, &flow))?
    };
    let (events_tx, events) = mpsc::channel();
    let reading = Framing {
        max_data_bytes: (options.max_inline_bytes as usize)
            .max(options.max_h2c_data_bytes as usize),
        ..framing
    };
    let reader = {
        let (events, flow) = (events_tx.clone(), Arc::clone(&flow));
        thread::Builder::new()
            .name("sagessd-tcp-reader".into())
            .spawn(move || read_pdus(reader, reading, &events, &flow))?
    };
    let mut c = Connection {
        socket,
        events,
        events_tx,
        out: Outbox::new(out, Arc::clone(&flow)),
        flow: Arc::clone(&flow),
        subsystem,
        device,
        levels: vec![
            Budget::new(CONNECTION_SHARE_BYTES.max(options.max_transfer_bytes as usize)),
            budget,
        ],
        options,
        queue: None,
        setup_deadline,
        silence,
        sq_head: Arc::new(AtomicU16::new(0)),
        in_flight,
        incoming: HashMap::new(),
        waiting: VecDeque::new(),
        front_grants: Held::default(),
        granting: false,
        held_aers: Vec::new(),
        jobs: Arc::new(Mutex::new(HashMap::new())),
        next_ttag: 0,
        closing: false,
        auth: None,
        keep_alive: None,
    };
    let result = c.run();
    c.discard_jobs();
    if let Some(q) = c.queue {
        c.subsystem.disconnect(q.ctrl, q.qid);
    }
    // The reader stops at its next PDU, or at once if it waits for room or for the socket.
    flow.close();
    let _ = c.socket.shutdown(Shutdown::Read);
    let socket = c.socket.try_clone();
    // The writer ends once every pending completion is sent (or a write times out).
    drop(c);
    let _ = reader.join();
    let _ = writer.join();
    if let Ok(s) = socket {
        let _ = s.shutdown(Shutdown::Both);
    }
    result
}

/// The socket reader thread: hands each PDU (or why none came) to the connection, reading the
/// next one only when the [`Flow`] has room; ends at the first failure.
fn read_pdus(mut reader: PatientReader, framing: Framing, events: &Sender<Event>, flow: &Flow) {
    let allowed = [
        pdu_type::CAPSULE_CMD,
        pdu_type::H2C_DATA,
        pdu_type::H2C_TERM_REQ,
    ];
    while flow.wait_to_read() {
        let received = read_pdu(&mut reader, &framing, &allowed);
        let last = matches!(received, Err(RecvError::Io(_) | RecvError::Fatal(..)));
        if events.send(Event::Received(received)).is_err() || last {
            return;
        }
    }
}

/// ICReq → ICResp. `None`: the host broke the protocol (a TermReq was sent).
fn handshake(
    reader: &mut impl Read,
    raw: &mut TcpStream,
    options: &TargetOptions,
) -> io::Result<Option<Framing>> {
    let pdu = match read_pdu(reader, &Framing::INITIAL, &[pdu_type::IC_REQ]) {
        Ok(p) => p,
        Err(RecvError::Io(e)) => return Err(e),
        Err(RecvError::Fatal(f, header)) => {
            send_term(raw, f, &header)?;
            return Ok(None);
        }
        // ICReq carries no data, so it has no data digest to fail.
        Err(RecvError::DataDigest(pdu)) => pdu,
    };
    let req: IcReq = pdu.header_as().unwrap_or_else(IcReq::new_zeroed);
    let bad = if req.pfv.get() != 0 {
        Some(8)
    } else if req.hpda > 31 {
        Some(10)
    } else {
        None
    };
    if let Some(fei) = bad {
        let fatal = Fatal {
            fes: fes::UNSUPPORTED_PARAMETER,
            fei,
        };
        send_term(raw, fatal, &pdu.header)?;
        return Ok(None);
    }
    let enabled = req.digest & (digest::HEADER | digest::DATA);
    let mut resp = IcResp::new_zeroed();
    resp.ch.pdu_type = pdu_type::IC_RESP;
    resp.digest = enabled;
    resp.maxh2cdata = options.max_h2c_data_bytes.into();
    write_pdu(raw, &Framing::INITIAL, &resp, &[])?;
    Ok(Some(Framing {
        header_digest: enabled & digest::HEADER != 0,
        data_digest: enabled & digest::DATA != 0,
        max_data_bytes: 0,
        data_alignment_bytes: (usize::from(req.hpda) + 1) * 4,
    }))
}

/// Sends a C2HTermReq for `fatal` carrying the offending header, on a socket nobody else
/// writes to.
fn send_term(socket: &mut TcpStream, fatal: Fatal, header: &[u8]) -> io::Result<()> {
    write_term(socket, fatal, header)?;
    socket.flush()?;
    socket.shutdown(Shutdown::Both)
}

impl Connection {
    /// Handles events until the host leaves, breaks the protocol or disconnects the queue.
    fn run(&mut self) -> io::Result<()> {
        while !self.closing {
            // The connection holds a sender itself, so the channel never disconnects.
            let Ok(event) = self.events.recv() else {
                return Ok(());
            };
            let received = match event {
                Event::Granted(grant) => {
                    self.granted(grant);
                    continue;
                }
                Event::Received(received) => received,
            };
            self.flow.handled();
            let result = match received {
                Ok(pdu) => match pdu.pdu_type() {
                    pdu_type::CAPSULE_CMD => self.capsule(pdu),
                    pdu_type::H2C_DATA => self.h2c_data(pdu),
                    _ => return Ok(()), // H2CTermReq: the host is closing
                },
                Err(RecvError::Io(e)) => {
                    return match e.kind() {
                        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => Ok(()),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                            tracing::warn!("host silent past its timeout; closing");
                            Ok(())
                        }
                        _ => Err(e),
                    };
                }
                Err(RecvError::Fatal(f, header)) => Err((f, header)),
                Err(RecvError::DataDigest(pdu)) => self.data_digest_failed(pdu),
            };
            if let Err((fatal, header)) = result {
                tracing::warn!("ending connection: NVMe/TCP fatal error {fatal:?}");
                self.out.send(Outbound::Term(fatal, header));
                return Ok(());
            }
            if !self.authenticated() && Instant::now() > self.setup_deadline {
                tracing::warn!(
                    "no Connect{} within {:?}; closing",
                    if self.queue.is_some() {
                        " and authentication"
                    } else {
                        ""
                    },
                    self.options.setup_timeout
                );
                return Ok(());
            }
        }
        Ok(())
    }

    /// Most commands this connection may hold: its queue's size, or one before Connect.
    fn entries(&self) -> usize {
        self.queue.map_or(1, |q| usize::from(q.entries))
    }

    /// A command capsule.
    fn capsule(&mut self, pdu: Pdu) -> Result<(), (Fatal, Vec<u8>)> {
        let Some(cmd) = pdu.header_as::<CapsuleCmd>() else {
            return Err((Fatal::field(0), pdu.header));
        };
        let inline_limit = match self.queue {
            None => CONNECT_DATA_BYTES,
            Some(_) => self.options.max_inline_bytes as usize,
        };
        if pdu.data.len() > inline_limit {
            let fatal = Fatal {
                fes: fes::DATA_LIMIT_EXCEEDED,
                fei: 4,
            };
            return Err((fatal, pdu.header));
        }
        let sqe = cmd.sqe;
        let cid = sqe.cid.get();
        if let Some(q) = self.queue {
            let head = (self.sq_head.load(Ordering::Relaxed) + 1) % q.entries;
            self.sq_head.store(head, Ordering::Relaxed);
        }
        if self.is_in_flight(cid) {
            self.respond_conflict(cid);
            return Ok(());
        }
        if self.commands() >= self.entries() {
            // The host overran the queue size it asked for at Connect (one before it).
            let fatal = Fatal {
                fes: fes::PDU_SEQUENCE_ERROR,
                fei: 0,
            };
            return Err((fatal, pdu.header));
        }
        self.lock_in_flight().insert(cid);
        let connect = sqe.opcode == FABRICS_OPCODE && sqe.nsid.get() as u8 == fctype::CONNECT;
        if self.queue.is_none() && !connect {
            self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0);
            return Ok(());
        }
        if self.queue.is_some() && !self.authenticated() && !serves_unauthenticated(&sqe) {
            self.respond(cid, AUTH_REQUIRED, 0);
            return Ok(());
        }
        let pointer = match DataPointer::parse(&sqe) {
            Ok(p) => p,
            Err(status) => {
                self.respond(cid, status, 0);
                return Ok(());
            }
        };
        let len = pointer.len() as usize;
        if len > self.options.max_transfer_bytes as usize {
            self.respond(cid, Status::INVALID_FIELD, 0);
            return Ok(());
        }
        match (pointer, data_direction(&sqe)) {
            (DataPointer::None, _) if pdu.data.is_empty() => self.dispatch(sqe, Vec::new(), None),
            (DataPointer::InCapsule { offset: 0, len }, DataDirection::HostToDevice)
                if len as usize == pdu.data.len() =>
            {
                self.dispatch(sqe, pdu.data, None)
            }
            (DataPointer::InCapsule { .. }, _) => self.respond(cid, SGL_LENGTH_INVALID, 0),
            (
                DataPointer::Transport { .. },
                direction @ (DataDirection::DeviceToHost | DataDirection::HostToDevice),
            ) if pdu.data.is_empty() && self.runnable(&sqe) => {
                let write = direction == DataDirection::HostToDevice;
                self.waiting.push_back(Waiting { sqe, len, write });
                self.admit();
            }
            (
                DataPointer::Transport { .. },
                DataDirection::HostToDevice | DataDirection::DeviceToHost,
            ) if pdu.data.is_empty() => {}
            _ => self.respond(cid, Status::INVALID_FIELD, 0),
        }
        Ok(())
    }

    /// Whether a command that moves data by the transport may run now: its controller is ready,
    /// or it is a Fabrics command (authentication comes before the controller is enabled).
    /// Otherwise it is answered here, before any buffer is allocated for it.
    fn runnable(&self, sqe: &SubmissionEntry) -> bool {
        let ready = sqe.opcode == FABRICS_OPCODE
            || self.queue.is_some_and(|q| self.subsystem.ready(q.ctrl));
        if !ready {
            self.respond(sqe.cid.get(), Status::COMMAND_SEQUENCE_ERROR, 0);
        }
        ready
    }

    /// The queue's id and its authentication state, for an AUTH_Send or AUTH_Receive naming
    /// protocol `secp`/`spsp` and `len` bytes of which `data_len` came: Invalid Field unless
    /// they are DH-HMAC-CHAP's and agree, Command Sequence Error if its host has no secret.
    fn auth_for(
        &mut self,
        secp: u8,
        spsp: [u8; 2],
        len: u32,
        data_len: usize,
    ) -> Result<(u16, &mut QueueAuth), Status> {
        if secp != SECP_AUTH || spsp != [SPSP_DHCHAP; 2] || len as usize != data_len {
            return Err(Status::INVALID_FIELD);
        }
        let qid = self.qid();
        let auth = self.auth.as_mut().ok_or(Status::COMMAND_SEQUENCE_ERROR)?;
        Ok((qid, auth))
    }

    /// Whether the queue may serve commands: it has authenticated, or its host needs not.
    fn authenticated(&self) -> bool {
        self.queue.is_some() && self.auth.as_ref().is_none_or(QueueAuth::authenticated)
    }

    /// Commands this connection holds: answered-not-yet-sent, in the device, waiting for data.
    fn commands(&self) -> usize {
        self.lock_in_flight().len()
    }

    /// Starts the waiting commands, in order, while each of [`Self::levels`] grants them their
    /// bytes. The first that must wait gets its grant as an event ([`Self::granted`]).
    fn admit(&mut self) {
        while !self.granting {
            let Some(&w) = self.waiting.front() else {
                return;
            };
            while self.front_grants.levels() < self.levels.len() {
                match self.levels[self.front_grants.levels()].take(w.len, || self.deliver()) {
                    Some(grant) => self.front_grants.push(grant),
                    None => {
                        self.granting = true;
                        return;
                    }
                }
            }
            self.waiting.pop_front();
            let held = std::mem::take(&mut self.front_grants);
            self.start(w, held);
        }
    }

    /// Where a budget delivers a grant this connection waits for (made only when it waits).
    fn deliver(&self) -> budget::Deliver {
        let events = self.events_tx.clone();
        Box::new(move |grant| {
            let _ = events.send(Event::Granted(grant));
        })
    }

    /// A budget granted the command at the front of the line what it waited for from its next
    /// level; it asks the levels after it ([`Self::admit`]) and starts once it has them all.
    fn granted(&mut self, grant: Grant) {
        self.granting = false;
        debug_assert_eq!(Some(grant.bytes()), self.waiting.front().map(|w| w.len));
        if self.waiting.is_empty() {
            debug_assert!(false, "a grant with nobody waiting");
            return;
        }
        self.front_grants.push(grant);
        self.admit();
    }

    /// A command that has its budget: a read goes to the device with a buffer for its data, a
    /// write asks the host for its data.
    fn start(&mut self, w: Waiting, held: Held) {
        let cid = w.sqe.cid.get();
        if !w.write {
            return self.dispatch(w.sqe, vec![0; w.len], Some(held));
        }
        let ttag = self.next_ttag;
        self.next_ttag = self.next_ttag.wrapping_add(1);
        let mut r2t = R2t::new_zeroed();
        r2t.ch.pdu_type = pdu_type::R2T;
        r2t.cccid = cid.into();
        r2t.ttag = ttag.into();
        r2t.r2tl = (w.len as u32).into();
        let incoming = Incoming {
            sqe: w.sqe,
            ttag,
            buf: vec![0; w.len],
            held,
            received: 0,
            failed: false,
        };
        self.incoming.insert(cid, incoming);
        self.out.send(Outbound::R2t(r2t));
    }

    /// An H2CData PDU: the next piece of a command's data, in order.
    fn h2c_data(&mut self, pdu: Pdu) -> Result<(), (Fatal, Vec<u8>)> {
        let Some(h) = pdu.header_as::<DataHeader>() else {
            return Err((Fatal::field(0), pdu.header));
        };
        if pdu.data.len() > self.options.max_h2c_data_bytes as usize {
            let fatal = Fatal {
                fes: fes::DATA_LIMIT_EXCEEDED,
                fei: 4,
            };
            return Err((fatal, pdu.header));
        }
        self.take_data(&h, &pdu.data, false)
            .map_err(|f| (f, pdu.header))
    }

    /// Adds an H2CData PDU's data to its command (`failed`: its data digest did not match);
    /// runs the command, or fails it, once its last piece is in.
    fn take_data(&mut self, h: &DataHeader, data: &[u8], failed: bool) -> Result<(), Fatal> {
        let cid = h.cccid.get();
        let incoming = self.incoming.get_mut(&cid).ok_or(Fatal::field(8))?;
        if h.ttag.get() != incoming.ttag {
            return Err(Fatal::field(10));
        }
        if h.datao.get() as usize != incoming.received {
            return Err(Fatal {
                fes: fes::DATA_OUT_OF_RANGE,
                fei: 12,
            });
        }
        if h.datal.get() as usize != data.len()
            || incoming.received + data.len() > incoming.buf.len()
        {
            return Err(Fatal {
                fes: fes::DATA_OUT_OF_RANGE,
                fei: 16,
            });
        }
        let at = incoming.received;
        incoming.buf[at..at + data.len()].copy_from_slice(data);
        incoming.received += data.len();
        incoming.failed |= failed;
        let complete = incoming.received == incoming.buf.len();
        if complete != (h.ch.flags & flags::DATA_LAST != 0) {
            return Err(Fatal::field(1));
        }
        if complete && let Some(done) = self.incoming.remove(&cid) {
            if done.failed {
                self.respond(cid, TRANSIENT_TRANSPORT_ERROR, 0);
            } else {
                self.dispatch(done.sqe, done.buf, Some(done.held));
            }
        }
        Ok(())
    }

    /// A PDU whose data digest failed: its command completes with a transient transport error
    /// once all its data has arrived; the connection lives on.
    fn data_digest_failed(&mut self, pdu: Pdu) -> Result<(), (Fatal, Vec<u8>)> {
        if pdu.pdu_type() == pdu_type::H2C_DATA {
            let Some(h) = pdu.header_as::<DataHeader>() else {
                return Err((Fatal::field(0), pdu.header));
            };
            return self
                .take_data(&h, &pdu.data, true)
                .map_err(|f| (f, pdu.header));
        }
        let Some(cmd) = pdu.header_as::<CapsuleCmd>() else {
            return Err((Fatal::field(0), pdu.header));
        };
        let cid = cmd.sqe.cid.get();
        if self.is_in_flight(cid) {
            self.respond_conflict(cid);
        } else {
            self.lock_in_flight().insert(cid);
            self.respond(cid, TRANSIENT_TRANSPORT_ERROR, 0);
        }
        Ok(())
    }

    /// Runs a command whose data has arrived (or, for a read, whose buffer is ready); `grant`
    /// is the budget the buffer holds, given back when the command is done with it.
    fn dispatch(&mut self, sqe: SubmissionEntry, data: Vec<u8>, held: Option<Held>) {
        let cid = sqe.cid.get();
        if sqe.opcode == FABRICS_OPCODE {
            return self.fabrics(sqe, data, held);
        }
        let Some(q) = self.queue else {
            return self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0);
        };
        if !self.subsystem.ready(q.ctrl) {
            return self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0);
        }
        if q.qid != 0 {
            return self.io_to_device(sqe, data, held);
        }
        match AdminCommand::parse(&sqe) {
            AdminCommand::AsyncEventRequest if self.held_aers.len() >= AER_LIMIT => {
                self.respond(cid, AER_LIMIT_EXCEEDED, 0)
            }
            // Held until the connection ends: the emulated device raises no events.
            AdminCommand::AsyncEventRequest => self.held_aers.push(cid),
            // Keep Alive is the fabric's: reading it already reset the connection's timer.
            AdminCommand::KeepAlive => self.respond(cid, Status::SUCCESS, 0),
            _ => self.admin_to_device(q, sqe, data, held),
        }
    }

    /// An admin command the firmware serves; Identify Controller gets the fabrics fields this
    /// transport and controller define.
    fn admin_to_device(
        &mut self,
        q: Queue,
        sqe: SubmissionEntry,
        data: Vec<u8>,
        held: Option<Held>,
    ) {
        let cid = sqe.cid.get();
        let (tx, rx) = mpsc::channel();
        let request = Request {
            admin: true,
            sqe,
            data,
            reply: ReplyTo::new(cid, move |reply| {
                let _ = tx.send(reply);
            }),
        };
        let Some(mut reply) = self.device.send(request).then(|| rx.recv().ok()).flatten() else {
            return self.respond(cid, Status::INTERNAL_ERROR, 0);
        };
        let identify_controller = matches!(
            AdminCommand::parse(&sqe),
            AdminCommand::Identify {
                cns: CNS_CONTROLLER,
                ..
            }
        );
        if identify_controller && reply.cqe.status().is_success() {
            fabrics_identify(
                &mut reply.data,
                q.ctrl.cntlid,
                &self.subsystem,
                &self.options,
            );
        }
        let cqe = completion(reply.cqe, 0, self.head());
        self.out
            .send(Outbound::finished(sqe.opcode, cqe, reply.data, held));
    }

    /// An I/O command: its completion goes straight from the device thread to the writer.
    fn io_to_device(&mut self, sqe: SubmissionEntry, data: Vec<u8>, held: Option<Held>) {
        let cid = sqe.cid.get();
        let out = self.out.clone();
        let sq_head = Arc::clone(&self.sq_head);
        let jobs = Arc::clone(&self.jobs);
        let qid = self.queue.map_or(0, |q| q.qid);
        let opcode = sqe.opcode;
        let request = Request {
            admin: false,
            sqe,
            data,
            reply: ReplyTo::new(cid, move |reply: Reply| {
                let cqe = completion(reply.cqe, qid, sq_head.load(Ordering::Relaxed));
                if opcode == io_opcode::NS_SUBMIT && cqe.status().is_success() {
                    let tag = cqe.result.get();
                    lock(&jobs).insert(tag & 0xFF, tag);
                }
                out.send(Outbound::finished(opcode, cqe, reply.data, held));
            }),
        };
        // A refused send drops the reply path, which answers Internal Error.
        let _ = self.device.send(request);
    }

    /// Discards the sampling jobs this connection submitted and may not have collected, so a
    /// host that leaves does not hold the device's slots (a job already collected, or replaced,
    /// answers "unknown tag").
    fn discard_jobs(&mut self) {
        let jobs: Vec<u32> = lock(&self.jobs).drain().map(|(_, tag)| tag).collect();
        for tag in jobs {
            let sqe = SubmissionEntry::ns_discard(0, 1, tag);
            let request = Request {
                admin: false,
                sqe,
                data: Vec::new(),
                reply: ReplyTo::new(0, |_| {}),
            };
            let _ = self.device.send(request);
        }
    }

    /// A Fabrics command; `held` is the budget an AUTH_Receive's buffer holds.
    fn fabrics(&mut self, sqe: SubmissionEntry, data: Vec<u8>, held: Option<Held>) {
        let cid = sqe.cid.get();
        let admin_queue = self.queue.filter(|q| q.qid == 0);
        match FabricsCommand::parse(&sqe) {
            FabricsCommand::Connect { .. } if self.queue.is_some() => {
                self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0)
            }
            FabricsCommand::Connect {
                recfmt,
                qid,
                sqsize,
                kato_ms,
            } => {
                if recfmt != 0 {
                    return self.respond(cid, connect_status::INCOMPATIBLE_FORMAT, 0);
                }
                let Ok(connect) = zerocopy::FromBytes::read_from_bytes(&data[..]) else {
                    return self.respond(cid, connect_status::INVALID_PARAMETERS, 1 << 16);
                };
                let connect: ConnectData = connect;
                let io_socket = (qid != 0).then(|| self.socket.try_clone().ok()).flatten();
                match self.subsystem.connect(qid, sqsize, &connect, io_socket) {
                    Ok(ctrl) => {
                        // Commands are admitted only once connected, so no grant is held
                        // against the levels as they were before.
                        if let Some(share) = self.subsystem.share_of(ctrl) {
                            self.levels.insert(1, share);
                        }
                        self.queue = Some(Queue {
                            qid,
                            ctrl,
                            entries: sqsize + 1,
                        });
                        // The Connect itself was entry 0.
                        self.sq_head.store(1, Ordering::Relaxed);
                        // Once authenticated (at once, for a host without a secret), only the
                        // keep-alive timeout the host asked for may end an idle connection:
                        // none on an I/O queue or with KATO 0.
                        self.keep_alive = (qid == 0 && kato_ms > 0)
                            .then(|| Duration::from_millis(kato_ms.into()) + KEEP_ALIVE_SLACK);
                        let hostnqn = connect.hostnqn().unwrap_or_default();
                        self.auth = self.options.auth.hosts.get(hostnqn).map(|secrets| {
                            let nqn = self.subsystem.nqn();
                            QueueAuth::new(secrets, &self.options.auth, hostnqn, nqn)
                        });
                        let mut result = u32::from(ctrl.cntlid);
                        match self.auth {
                            Some(_) => result |= CONNECT_ATR,
                            None => self.silence.set(self.keep_alive),
                        }
                        self.respond(cid, Status::SUCCESS, result.into());
                    }
                    // The completion names the queue the Connect was for.
                    Err(refused) => {
                        self.send_resp(qid, cid, refused.status, refused.dw0.into(), true)
                    }
                }
            }
            FabricsCommand::PropertyGet { wide, offset } => match admin_queue {
                None => self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0),
                Some(q) => match self.subsystem.get_property(q.ctrl, offset, wide) {
                    Ok(v) => self.respond(cid, Status::SUCCESS, v),
                    Err(s) => self.respond(cid, s, 0),
                },
            },
            FabricsCommand::PropertySet {
                wide,
                offset,
                value,
            } => match admin_queue {
                None => self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0),
                Some(q) => match self.subsystem.set_property(q.ctrl, offset, value, wide) {
                    Ok(()) => self.respond(cid, Status::SUCCESS, 0),
                    Err(s) => self.respond(cid, s, 0),
                },
            },
            FabricsCommand::Disconnect => match self.queue {
                Some(q) if q.qid != 0 => {
                    self.respond(cid, Status::SUCCESS, 0);
                    self.closing = true;
                }
                _ => self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0),
            },
            FabricsCommand::AuthSend { secp, spsp, len } => {
                let (qid, auth) = match self.auth_for(secp, spsp, len, data.len()) {
                    Ok(auth) => auth,
                    Err(status) => return self.respond(cid, status, 0),
                };
                let sent = auth.send(&data);
                let host = auth.host_nqn();
                match sent {
                    Sent::Accepted => {}
                    Sent::Authenticated => {
                        tracing::info!("host {host:?} authenticated queue {qid} (DH-HMAC-CHAP)");
                        self.silence.set(self.keep_alive);
                    }
                    Sent::Refused(why) => {
                        tracing::warn!("host {host:?} failed DH-HMAC-CHAP on queue {qid}: {why:?}")
                    }
                    Sent::HostFailed(why) => {
                        tracing::warn!(
                            "host {host:?} gave up DH-HMAC-CHAP on queue {qid} (explanation \
                             {why:#04x}); closing"
                        );
                        self.closing = true;
                    }
                }
                self.respond(cid, Status::SUCCESS, 0)
            }
            FabricsCommand::AuthReceive { secp, spsp, len } => {
                let received = self
                    .auth_for(secp, spsp, len, data.len())
                    .and_then(|(_, auth)| auth.receive(data.len()));
                match received {
                    Ok((message, failure)) => {
                        let cqe = CompletionEntry::new(0, cid, Status::SUCCESS, 0);
                        let cqe = completion(cqe, self.qid(), self.head());
                        self.out.send(Outbound::Data {
                            cqe,
                            data: message,
                            held,
                        });
                        // After a Failure1 the association ends, as Linux's target ends it:
                        // the host has its answer, and gets no second guess on this queue.
                        self.closing |= failure;
                    }
                    Err(status) => self.respond(cid, status, 0),
                }
            }
            FabricsCommand::Unsupported(_) => self.respond(cid, Status::INVALID_OPCODE, 0),
        }
    }

    /// Completes command `cid`, which this connection counts in flight, with `status` and a
    /// 64-bit result.
    fn respond(&self, cid: u16, status: Status, result: u64) {
        self.send_resp(self.qid(), cid, status, result, true);
    }

    /// Answers a command whose id is already in flight (the one in flight keeps its id).
    fn respond_conflict(&self, cid: u16) {
        self.send_resp(self.qid(), cid, COMMAND_ID_CONFLICT, 0, false);
    }

    /// The queue this connection carries (0 before Connect).
    fn qid(&self) -> u16 {
        self.queue.map_or(0, |q| q.qid)
    }

    fn send_resp(&self, qid: u16, cid: u16, status: Status, result: u64, release: bool) {
        let mut cqe = CompletionEntry::new(0, cid, status, result as u32);
        cqe.result_hi = ((result >> 32) as u32).into();
        let cqe = completion(cqe, qid, self.head());
        self.out.send(Outbound::Resp { cqe, release });
    }

    fn head(&self) -> u16 {
        self.sq_head.load(Ordering::Relaxed)
    }

    fn is_in_flight(&self, cid: u16) -> bool {
        self.lock_in_flight().contains(&cid)
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<u16>> {
        lock(&self.in_flight)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every holder only inserts or removes one id: a poisoned set is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a queue that has not authenticated serves the command: only the ones that
/// authenticate it, and Disconnect.
fn serves_unauthenticated(sqe: &SubmissionEntry) -> bool {
    sqe.opcode == FABRICS_OPCODE
        && matches!(
            FabricsCommand::parse(sqe),
            FabricsCommand::AuthSend { .. }
                | FabricsCommand::AuthReceive { .. }
                | FabricsCommand::Disconnect
        )
}

/// The completion as this queue reports it.
fn completion(mut cqe: CompletionEntry, qid: u16, sq_head: u16) -> CompletionEntry {
    cqe.sq_id = qid.into();
    cqe.sq_head = sq_head.into();
    cqe
}

/// Fills the Identify Controller fields an NVMe-oF controller on this transport defines.
fn fabrics_identify(id: &mut [u8], cntlid: u16, subsystem: &Subsystem, options: &TargetOptions) {
    if id.len() < 4096 {
        return;
    }
    let put16 = |id: &mut [u8], at: usize, v: u16| id[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |id: &mut [u8], at: usize, v: u32| id[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put16(id, 78, cntlid); // CNTLID
    put32(id, 80, VERSION); // VER
    id[111] = 1; // CNTRLTYPE: I/O controller
    put16(id, 320, 10); // KAS: keep alive granularity 1 s (100 ms units)
    put16(id, 514, subsystem.queue_entries()); // MAXCMD
    put32(id, 536, 1); // SGLS: SGLs supported, no alignment
    let nqn = subsystem.nqn().as_bytes();
    id[768..1024].fill(0);
    id[768..768 + nqn.len().min(255)].copy_from_slice(&nqn[..nqn.len().min(255)]); // SUBNQN
    put32(id, 1792, (64 + options.max_inline_bytes) / 16); // IOCCSZ
    put32(id, 1796, 1); // IORCSZ
    put16(id, 1800, 0); // ICDOFF
    id[1802] = 0; // FCATT: dynamic controller model
    id[1803] = 1; // MSDBD
}
