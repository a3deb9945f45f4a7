//! One NVMe/TCP connection: one queue (admin or I/O) of one controller.
//!
//! The reader (this thread) takes PDUs from the socket and the writer (a thread of its own)
//! sends PDUs to it, fed by a channel, so completions from the device thread go out while the
//! reader waits for the next command. A fatal protocol error ends the connection with a
//! C2HTermReq; a bad command only gets a status.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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
    CapsuleCmd, CapsuleResp, CommonHeader, DataHeader, Fatal, Framing, IcReq, IcResp, R2t,
    TERM_REQ_MAX_DATA_BYTES, TermReq, digest, fes, flags, pdu_type,
};
use zerocopy::FromZeros;

use super::TargetOptions;
use super::device::{DeviceHandle, Reply, ReplyTo, Request};
use super::subsystem::{ControllerRef, Subsystem, VERSION};

/// How long a connection may take to send ICReq and Connect, in all.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack on top of the host's keep-alive timeout before the target gives up on it: the keep
/// alive granularity the controller reports (KAS = 10, in 100 ms units).
const KEEP_ALIVE_SLACK: Duration = Duration::from_secs(1);
/// How long one write to a host that does not read may block before the connection is ended.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest C2HData PDU the target sends.
const C2H_CHUNK_BYTES: usize = 128 * 1024;
/// Most bytes of write data a connection may have asked for with R2Ts and not yet received;
/// further writes wait for their R2T.
const MAX_INCOMING_BYTES: usize = 8 << 20;
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

/// What the writer thread sends. Every completion names whether it ends a command the
/// connection counts in flight (`release`): the writer takes it out just before sending, so
/// completions waiting for a host that does not read still count against its queue size.
enum Outbound {
    /// A response capsule.
    Resp { cqe: CompletionEntry, release: bool },
    /// Data for the host (C2HData PDUs), then its response capsule.
    Data(CompletionEntry, Vec<u8>),
    /// Ask for a command's data.
    R2t(R2t),
    /// End the connection with a C2HTermReq.
    Term(Fatal, Vec<u8>),
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
    received: usize,
    /// A data digest failed: the data is taken and dropped, and the command fails at the end.
    failed: bool,
}

type InFlight = Arc<Mutex<HashSet<u16>>>;

/// The reader side of one connection.
struct Connection {
    reader: BufReader<TcpStream>,
    socket: TcpStream,
    framing: Framing,
    out: Sender<Outbound>,
    subsystem: Arc<Subsystem>,
    device: DeviceHandle,
    options: TargetOptions,
    queue: Option<Queue>,
    /// Until Connect succeeds, the connection must make it by this time.
    setup_deadline: Instant,
    /// The submission queue head the completions report.
    sq_head: Arc<AtomicU16>,
    /// Command ids accepted and not yet answered on the wire (in the device, held, or with
    /// their completion waiting for the writer).
    in_flight: InFlight,
    incoming: HashMap<u16, Incoming>,
    /// Bytes of `incoming` buffers.
    incoming_bytes: usize,
    /// Writes waiting for R2T room (command, data length).
    deferred: VecDeque<(SubmissionEntry, usize)>,
    held_aers: Vec<u16>,
    /// Per sampling slot, the last job this connection submitted: discarded when it leaves.
    jobs: Arc<Mutex<HashMap<u32, u32>>>,
    next_ttag: u16,
    closing: bool,
}

/// Serves one connection until the host closes it or breaks the protocol.
pub(super) fn serve(
    socket: TcpStream,
    subsystem: Arc<Subsystem>,
    device: DeviceHandle,
    options: TargetOptions,
) -> io::Result<()> {
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(SETUP_TIMEOUT))?;
    socket.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let setup_deadline = Instant::now() + SETUP_TIMEOUT;
    let mut reader = BufReader::with_capacity(256 * 1024, socket.try_clone()?);
    let mut raw = socket.try_clone()?;
    let framing = match handshake(&mut reader, &mut raw, &options)? {
        Some(f) => f,
        None => return Ok(()),
    };
    let (out, rx) = mpsc::channel();
    let in_flight: InFlight = Arc::new(Mutex::new(HashSet::new()));
    let writer = {
        let (socket, in_flight) = (socket.try_clone()?, Arc::clone(&in_flight));
        thread::Builder::new()
            .name("sagessd-tcp-writer".into())
            .spawn(move || write_loop(socket, framing, rx, &in_flight))?
    };
    let mut c = Connection {
        reader,
        socket,
        framing: Framing {
            max_data_bytes: (options.max_inline_bytes as usize)
                .max(options.max_h2c_data_bytes as usize),
            ..framing
        },
        out,
        subsystem,
        device,
        options,
        queue: None,
        setup_deadline,
        sq_head: Arc::new(AtomicU16::new(0)),
        in_flight,
        incoming: HashMap::new(),
        incoming_bytes: 0,
        deferred: VecDeque::new(),
        held_aers: Vec::new(),
        jobs: Arc::new(Mutex::new(HashMap::new())),
        next_ttag: 0,
        closing: false,
    };
    let result = c.read_loop();
    c.discard_jobs();
    if let Some(q) = c.queue {
        c.subsystem.disconnect(q.ctrl, q.qid);
    }
    let socket = c.socket.try_clone();
    // The writer ends once every pending completion is sent (or a write times out).
    drop(c);
    let _ = writer.join();
    if let Ok(s) = socket {
        let _ = s.shutdown(Shutdown::Both);
    }
    result
}

/// ICReq → ICResp. `None`: the host broke the protocol (a TermReq was sent).
fn handshake(
    reader: &mut BufReader<TcpStream>,
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

fn write_term<W: Write>(w: &mut W, fatal: Fatal, header: &[u8]) -> io::Result<()> {
    let mut term = TermReq::new_zeroed();
    term.ch.pdu_type = pdu_type::C2H_TERM_REQ;
    term.fes = fatal.fes.into();
    term.fei = fatal.fei.into();
    let n = header.len().min(TERM_REQ_MAX_DATA_BYTES);
    write_pdu(w, &Framing::INITIAL, &term, &header[..n])
}

impl Connection {
    fn read_loop(&mut self) -> io::Result<()> {
        let allowed = [
            pdu_type::CAPSULE_CMD,
            pdu_type::H2C_DATA,
            pdu_type::H2C_TERM_REQ,
        ];
        while !self.closing {
            let result = match read_pdu(&mut self.reader, &self.framing, &allowed) {
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
                let _ = self.out.send(Outbound::Term(fatal, header));
                return Ok(());
            }
            if self.queue.is_none() && Instant::now() > self.setup_deadline {
                tracing::warn!("no Connect within {SETUP_TIMEOUT:?}; closing");
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
            (DataPointer::None, _) if pdu.data.is_empty() => self.dispatch(sqe, Vec::new()),
            (DataPointer::InCapsule { offset: 0, len }, DataDirection::HostToDevice)
                if len as usize == pdu.data.len() =>
            {
                self.dispatch(sqe, pdu.data)
            }
            (DataPointer::InCapsule { .. }, _) => self.respond(cid, SGL_LENGTH_INVALID, 0),
            (DataPointer::Transport { .. }, DataDirection::DeviceToHost)
                if pdu.data.is_empty() && self.runnable(cid) =>
            {
                self.dispatch(sqe, vec![0; len])
            }
            (DataPointer::Transport { .. }, DataDirection::HostToDevice)
                if pdu.data.is_empty() && self.runnable(cid) =>
            {
                self.deferred.push_back((sqe, len));
                self.request_data();
            }
            (
                DataPointer::Transport { .. },
                DataDirection::HostToDevice | DataDirection::DeviceToHost,
            ) if pdu.data.is_empty() => {}
            _ => self.respond(cid, Status::INVALID_FIELD, 0),
        }
        Ok(())
    }

    /// Whether a command that moves data by the transport may run now: its controller is ready
    /// (otherwise it is answered here, before any buffer is allocated for it).
    fn runnable(&self, cid: u16) -> bool {
        let ready = self.queue.is_some_and(|q| self.subsystem.ready(q.ctrl));
        if !ready {
            self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0);
        }
        ready
    }

    /// Commands this connection holds: answered-not-yet-sent, in the device, waiting for data.
    fn commands(&self) -> usize {
        self.lock_in_flight().len()
    }

    /// Sends R2Ts for waiting writes while their data fits the connection's budget (one write
    /// at a time always fits).
    fn request_data(&mut self) {
        while let Some((sqe, len)) = self.deferred.front().copied() {
            if !self.incoming.is_empty() && self.incoming_bytes + len > MAX_INCOMING_BYTES {
                return;
            }
            self.deferred.pop_front();
            let ttag = self.next_ttag;
            self.next_ttag = self.next_ttag.wrapping_add(1);
            let cid = sqe.cid.get();
            let mut r2t = R2t::new_zeroed();
            r2t.ch.pdu_type = pdu_type::R2T;
            r2t.cccid = cid.into();
            r2t.ttag = ttag.into();
            r2t.r2tl = (len as u32).into();
            self.incoming_bytes += len;
            self.incoming.insert(
                cid,
                Incoming {
                    sqe,
                    ttag,
                    buf: vec![0; len],
                    received: 0,
                    failed: false,
                },
            );
            let _ = self.out.send(Outbound::R2t(r2t));
        }
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
            self.incoming_bytes -= done.buf.len();
            if done.failed {
                self.respond(cid, TRANSIENT_TRANSPORT_ERROR, 0);
            } else {
                self.dispatch(done.sqe, done.buf);
            }
            self.request_data();
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

    /// Runs a command whose data has arrived.
    fn dispatch(&mut self, sqe: SubmissionEntry, data: Vec<u8>) {
        let cid = sqe.cid.get();
        if sqe.opcode == FABRICS_OPCODE {
            return self.fabrics(sqe, &data);
        }
        let Some(q) = self.queue else {
            return self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0);
        };
        if !self.subsystem.ready(q.ctrl) {
            return self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0);
        }
        if q.qid != 0 {
            return self.io_to_device(sqe, data);
        }
        match AdminCommand::parse(&sqe) {
            AdminCommand::AsyncEventRequest if self.held_aers.len() >= AER_LIMIT => {
                self.respond(cid, AER_LIMIT_EXCEEDED, 0)
            }
            // Held until the connection ends: the emulated device raises no events.
            AdminCommand::AsyncEventRequest => self.held_aers.push(cid),
            // Keep Alive is the fabric's: reading it already reset the connection's timer.
            AdminCommand::KeepAlive => self.respond(cid, Status::SUCCESS, 0),
            _ => self.admin_to_device(q, sqe, data),
        }
    }

    /// An admin command the firmware serves; Identify Controller gets the fabrics fields this
    /// transport and controller define.
    fn admin_to_device(&mut self, q: Queue, sqe: SubmissionEntry, data: Vec<u8>) {
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
        let _ = self.out.send(outbound(sqe.opcode, cqe, reply.data));
    }

    /// An I/O command: its completion goes straight from the device thread to the writer.
    fn io_to_device(&mut self, sqe: SubmissionEntry, data: Vec<u8>) {
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
                let _ = out.send(outbound(opcode, cqe, reply.data));
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

    /// A Fabrics command.
    fn fabrics(&mut self, sqe: SubmissionEntry, data: &[u8]) {
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
                let Ok(connect) = zerocopy::FromBytes::read_from_bytes(data) else {
                    return self.respond(cid, connect_status::INVALID_PARAMETERS, 1 << 16);
                };
                let connect: ConnectData = connect;
                let io_socket = (qid != 0).then(|| self.socket.try_clone().ok()).flatten();
                match self.subsystem.connect(qid, sqsize, &connect, io_socket) {
                    Ok(ctrl) => {
                        self.queue = Some(Queue {
                            qid,
                            ctrl,
                            entries: sqsize + 1,
                        });
                        // The Connect itself was entry 0.
                        self.sq_head.store(1, Ordering::Relaxed);
                        let timeout = (qid == 0 && kato_ms > 0)
                            .then(|| Duration::from_millis(kato_ms.into()) + KEEP_ALIVE_SLACK);
                        if self.socket.set_read_timeout(timeout).is_err() {
                            self.closing = true;
                        }
                        self.respond(cid, Status::SUCCESS, ctrl.cntlid.into());
                    }
                    Err(refused) => self.respond(cid, refused.status, refused.dw0.into()),
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
            FabricsCommand::Unsupported(_) => self.respond(cid, Status::INVALID_OPCODE, 0),
        }
    }

    /// Completes command `cid`, which this connection counts in flight, with `status` and a
    /// 64-bit result.
    fn respond(&self, cid: u16, status: Status, result: u64) {
        self.send_resp(cid, status, result, true);
    }

    /// Answers a command whose id is already in flight (the one in flight keeps its id).
    fn respond_conflict(&self, cid: u16) {
        self.send_resp(cid, COMMAND_ID_CONFLICT, 0, false);
    }

    fn send_resp(&self, cid: u16, status: Status, result: u64, release: bool) {
        let mut cqe = CompletionEntry::new(0, cid, status, result as u32);
        cqe.result_hi = ((result >> 32) as u32).into();
        let cqe = completion(cqe, self.queue.map_or(0, |q| q.qid), self.head());
        let _ = self.out.send(Outbound::Resp { cqe, release });
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

/// The completion as this queue reports it.
fn completion(mut cqe: CompletionEntry, qid: u16, sq_head: u16) -> CompletionEntry {
    cqe.sq_id = qid.into();
    cqe.sq_head = sq_head.into();
    cqe
}

/// What to send for a finished command: its data first if it returns data and succeeded.
fn outbound(opcode: u8, cqe: CompletionEntry, data: Vec<u8>) -> Outbound {
    let returns_data = opcode != FABRICS_OPCODE
        && DataDirection::of(opcode) == DataDirection::DeviceToHost
        && cqe.status().is_success()
        && !data.is_empty();
    if returns_data {
        Outbound::Data(cqe, data)
    } else {
        Outbound::Resp { cqe, release: true }
    }
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

/// The writer thread: sends every outbound PDU until the reader and every pending completion
/// are gone, a write fails or times out, or the connection is terminated. A completion's
/// command leaves `in_flight` just before it goes on the wire.
fn write_loop(socket: TcpStream, framing: Framing, rx: Receiver<Outbound>, in_flight: &InFlight) {
    let mut w = BufWriter::with_capacity(256 * 1024, socket);
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            let result = match msg {
                Outbound::Resp { cqe, release } => {
                    if release {
                        lock(in_flight).remove(&cqe.cid.get());
                    }
                    write_resp(&mut w, &framing, cqe)
                }
                Outbound::Data(cqe, data) => {
                    lock(in_flight).remove(&cqe.cid.get());
                    write_data(&mut w, &framing, cqe, &data)
                }
                Outbound::R2t(r2t) => write_pdu(&mut w, &framing, &r2t, &[]),
                Outbound::Term(fatal, header) => {
                    let _ = write_term(&mut w, fatal, &header).and_then(|()| w.flush());
                    let _ = w.get_ref().shutdown(Shutdown::Both);
                    return;
                }
            };
            if result.is_err() {
                let _ = w.get_ref().shutdown(Shutdown::Both);
                return;
            }
            next = rx.try_recv().ok();
        }
        if w.flush().is_err() {
            let _ = w.get_ref().shutdown(Shutdown::Both);
            return;
        }
    }
}

fn write_resp<W: Write>(w: &mut W, framing: &Framing, cqe: CompletionEntry) -> io::Result<()> {
    let mut resp = CapsuleResp::new_zeroed();
    resp.ch.pdu_type = pdu_type::CAPSULE_RESP;
    resp.cqe = cqe;
    write_pdu(w, framing, &resp, &[])
}

fn write_data<W: Write>(
    w: &mut W,
    framing: &Framing,
    cqe: CompletionEntry,
    data: &[u8],
) -> io::Result<()> {
    let chunks = data.len().div_ceil(C2H_CHUNK_BYTES);
    for (i, chunk) in data.chunks(C2H_CHUNK_BYTES).enumerate() {
        let mut h = DataHeader::new_zeroed();
        h.ch = CommonHeader {
            pdu_type: pdu_type::C2H_DATA,
            flags: if i + 1 == chunks { flags::DATA_LAST } else { 0 },
            ..CommonHeader::default()
        };
        h.cccid = cqe.cid;
        h.datao = ((i * C2H_CHUNK_BYTES) as u32).into();
        h.datal = (chunk.len() as u32).into();
        write_pdu(w, framing, &h, chunk)?;
    }
    write_resp(w, framing, cqe)
}
