//! One NVMe/TCP connection: one queue (admin or I/O) of one controller.
//!
//! The reader (this thread) takes PDUs from the socket and the writer (a thread of its own)
//! sends PDUs to it, fed by a channel, so completions from the device thread go out while the
//! reader waits for the next command. A fatal protocol error ends the connection with a
//! C2HTermReq; a bad command only gets a status.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use sagessd_abi::fabrics::{
    ConnectData, DataPointer, FABRICS_OPCODE, FabricsCommand, connect_status, data_direction,
};
use sagessd_abi::identify::CNS_CONTROLLER;
use sagessd_abi::nvme::{
    AdminCommand, CompletionEntry, DataDirection, Status, SubmissionEntry, sct,
};
use sagessd_abi::tcp::stream::{Pdu, RecvError, read_pdu, write_pdu};
use sagessd_abi::tcp::{
    CapsuleCmd, CapsuleResp, CommonHeader, DataHeader, Fatal, Framing, IcReq, IcResp, R2t,
    TERM_REQ_MAX_DATA_BYTES, TermReq, digest, fes, flags, pdu_type,
};
use zerocopy::FromZeros;

use super::TargetOptions;
use super::device::{DeviceHandle, Reply, Request};
use super::subsystem::{Subsystem, VERSION};

/// How long a connection may take to send ICReq and Connect.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack on top of the host's keep-alive timeout before the target gives up on it: the keep
/// alive granularity the controller reports (KAS = 10, in 100 ms units).
const KEEP_ALIVE_SLACK: Duration = Duration::from_secs(1);
/// Largest C2HData PDU the target sends.
const C2H_CHUNK_BYTES: usize = 128 * 1024;
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

/// What the writer thread sends.
enum Outbound {
    /// A response capsule.
    Resp(CompletionEntry),
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
    cntlid: u16,
    entries: u16,
}

/// A write-direction command waiting for its data (H2CData after an R2T).
struct Incoming {
    sqe: SubmissionEntry,
    ttag: u16,
    buf: Vec<u8>,
    received: usize,
}

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
    /// The submission queue head the completions report.
    sq_head: Arc<AtomicU16>,
    /// Command ids in the device or held (AER), removed when their completion is queued.
    in_flight: Arc<Mutex<HashSet<u16>>>,
    incoming: HashMap<u16, Incoming>,
    held_aers: Vec<u16>,
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
    let mut reader = BufReader::with_capacity(256 * 1024, socket.try_clone()?);
    let mut raw = socket.try_clone()?;
    let framing = match handshake(&mut reader, &mut raw, &options)? {
        Some(f) => f,
        None => return Ok(()),
    };
    let (out, rx) = mpsc::channel();
    let writer_socket = socket.try_clone()?;
    let writer = thread::Builder::new()
        .name("sagessd-tcp-writer".into())
        .spawn(move || write_loop(writer_socket, framing, rx))?;
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
        sq_head: Arc::new(AtomicU16::new(0)),
        in_flight: Arc::new(Mutex::new(HashSet::new())),
        incoming: HashMap::new(),
        held_aers: Vec::new(),
        next_ttag: 0,
        closing: false,
    };
    let result = c.read_loop();
    if let Some(q) = c.queue {
        c.subsystem.disconnect(q.cntlid, q.qid);
    }
    let socket = c.socket.try_clone();
    drop(c); // the writer ends once every pending completion is sent
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
                            tracing::warn!("host silent past its keep-alive timeout; closing");
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
        }
        Ok(())
    }

    /// A command capsule.
    fn capsule(&mut self, pdu: Pdu) -> Result<(), (Fatal, Vec<u8>)> {
        let Some(cmd) = pdu.header_as::<CapsuleCmd>() else {
            return Err((Fatal::field(0), pdu.header));
        };
        let sqe = cmd.sqe;
        let cid = sqe.cid.get();
        if let Some(q) = self.queue {
            self.sq_head.store(
                (self.sq_head.load(Ordering::Relaxed) + 1) % q.entries,
                Ordering::Relaxed,
            );
            if self.in_flight_count() >= usize::from(q.entries) {
                // The host overran the queue size it asked for at Connect.
                let fatal = Fatal {
                    fes: fes::PDU_SEQUENCE_ERROR,
                    fei: 0,
                };
                return Err((fatal, pdu.header));
            }
        }
        if self.is_in_flight(cid) {
            self.respond(cid, COMMAND_ID_CONFLICT, 0);
            return Ok(());
        }
        let pointer = match DataPointer::parse(&sqe) {
            Ok(p) => p,
            Err(status) => {
                self.respond(cid, status, 0);
                return Ok(());
            }
        };
        let direction = data_direction(&sqe);
        let len = pointer.len() as usize;
        if len > self.options.max_transfer_bytes as usize {
            self.respond(cid, Status::INVALID_FIELD, 0);
            return Ok(());
        }
        match (pointer, direction) {
            (DataPointer::None, _) if pdu.data.is_empty() => self.dispatch(sqe, Vec::new()),
            (DataPointer::InCapsule { offset: 0, len }, DataDirection::HostToDevice)
                if len as usize == pdu.data.len() =>
            {
                self.dispatch(sqe, pdu.data)
            }
            (DataPointer::InCapsule { .. }, _) => self.respond(cid, SGL_LENGTH_INVALID, 0),
            (DataPointer::Transport { .. }, DataDirection::DeviceToHost) if pdu.data.is_empty() => {
                self.dispatch(sqe, vec![0; len])
            }
            (DataPointer::Transport { .. }, DataDirection::HostToDevice) if pdu.data.is_empty() => {
                self.request_data(sqe, len)
            }
            _ => self.respond(cid, Status::INVALID_FIELD, 0),
        }
        Ok(())
    }

    /// Sends an R2T for all of a write-direction command's data.
    fn request_data(&mut self, sqe: SubmissionEntry, len: usize) {
        let ttag = self.next_ttag;
        self.next_ttag = self.next_ttag.wrapping_add(1);
        let cid = sqe.cid.get();
        let mut r2t = R2t::new_zeroed();
        r2t.ch.pdu_type = pdu_type::R2T;
        r2t.cccid = cid.into();
        r2t.ttag = ttag.into();
        r2t.r2tl = (len as u32).into();
        self.incoming.insert(
            cid,
            Incoming {
                sqe,
                ttag,
                buf: vec![0; len],
                received: 0,
            },
        );
        let _ = self.out.send(Outbound::R2t(r2t));
    }

    /// An H2CData PDU: the next piece of a command's data, in order.
    fn h2c_data(&mut self, pdu: Pdu) -> Result<(), (Fatal, Vec<u8>)> {
        let Some(h) = pdu.header_as::<DataHeader>() else {
            return Err((Fatal::field(0), pdu.header));
        };
        let cid = h.cccid.get();
        let Some(incoming) = self.incoming.get_mut(&cid) else {
            return Err((Fatal::field(8), pdu.header));
        };
        let fatal = if h.ttag.get() != incoming.ttag {
            Some(Fatal::field(10))
        } else if h.datao.get() as usize != incoming.received {
            Some(Fatal {
                fes: fes::DATA_OUT_OF_RANGE,
                fei: 12,
            })
        } else if h.datal.get() as usize != pdu.data.len()
            || incoming.received + pdu.data.len() > incoming.buf.len()
        {
            Some(Fatal {
                fes: fes::DATA_OUT_OF_RANGE,
                fei: 16,
            })
        } else {
            None
        };
        if let Some(f) = fatal {
            return Err((f, pdu.header));
        }
        let at = incoming.received;
        incoming.buf[at..at + pdu.data.len()].copy_from_slice(&pdu.data);
        incoming.received += pdu.data.len();
        let complete = incoming.received == incoming.buf.len();
        let last = h.ch.flags & flags::DATA_LAST != 0;
        if complete != last {
            return Err((Fatal::field(1), pdu.header));
        }
        if complete && let Some(done) = self.incoming.remove(&cid) {
            self.dispatch(done.sqe, done.buf);
        }
        Ok(())
    }

    /// A PDU whose data digest failed: its command completes with a transient transport error.
    fn data_digest_failed(&mut self, pdu: Pdu) -> Result<(), (Fatal, Vec<u8>)> {
        let cid = match pdu.pdu_type() {
            pdu_type::CAPSULE_CMD => pdu.header_as::<CapsuleCmd>().map(|c| c.sqe.cid.get()),
            _ => pdu.header_as::<DataHeader>().map(|h| h.cccid.get()),
        };
        let Some(cid) = cid else {
            return Err((Fatal::field(0), pdu.header));
        };
        self.incoming.remove(&cid);
        self.respond(cid, TRANSIENT_TRANSPORT_ERROR, 0);
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
        if !self.subsystem.ready(q.cntlid) {
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
            AdminCommand::AsyncEventRequest => {
                self.held_aers.push(cid);
                self.lock_in_flight().insert(cid);
            }
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
            reply: Box::new(move |reply| {
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
            fabrics_identify(&mut reply.data, q.cntlid, &self.subsystem, &self.options);
        }
        self.finish(sqe.opcode, reply);
    }

    /// An I/O command: its completion goes straight from the device thread to the writer.
    fn io_to_device(&mut self, sqe: SubmissionEntry, data: Vec<u8>) {
        let cid = sqe.cid.get();
        self.lock_in_flight().insert(cid);
        let out = self.out.clone();
        let in_flight = Arc::clone(&self.in_flight);
        let sq_head = Arc::clone(&self.sq_head);
        let qid = self.queue.map_or(0, |q| q.qid);
        let opcode = sqe.opcode;
        let request = Request {
            admin: false,
            sqe,
            data,
            reply: Box::new(move |reply: Reply| {
                let cqe = completion(reply.cqe, qid, sq_head.load(Ordering::Relaxed));
                lock(&in_flight).remove(&cid);
                let _ = out.send(outbound(opcode, cqe, reply.data));
            }),
        };
        if !self.device.send(request) {
            self.lock_in_flight().remove(&cid);
            self.respond(cid, Status::INTERNAL_ERROR, 0);
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
                match self.subsystem.connect(qid, sqsize, &connect) {
                    Ok(cntlid) => {
                        self.queue = Some(Queue {
                            qid,
                            cntlid,
                            entries: sqsize + 1,
                        });
                        let timeout = (qid == 0 && kato_ms > 0)
                            .then(|| Duration::from_millis(kato_ms.into()) + KEEP_ALIVE_SLACK);
                        if self.socket.set_read_timeout(timeout).is_err() {
                            self.closing = true;
                        }
                        self.respond(cid, Status::SUCCESS, cntlid.into());
                    }
                    Err(refused) => self.respond(cid, refused.status, refused.dw0.into()),
                }
            }
            FabricsCommand::PropertyGet { wide, offset } => match admin_queue {
                None => self.respond(cid, Status::COMMAND_SEQUENCE_ERROR, 0),
                Some(q) => match self.subsystem.get_property(q.cntlid, offset, wide) {
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
                Some(q) => match self.subsystem.set_property(q.cntlid, offset, value, wide) {
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

    /// Completes command `cid` now with `status` and a 64-bit result.
    fn respond(&self, cid: u16, status: Status, result: u64) {
        let mut cqe = CompletionEntry::new(0, cid, status, result as u32);
        cqe.result_hi = ((result >> 32) as u32).into();
        let cqe = completion(cqe, self.queue.map_or(0, |q| q.qid), self.head());
        let _ = self.out.send(Outbound::Resp(cqe));
    }

    /// Completes an admin command the device ran.
    fn finish(&self, opcode: u8, reply: Reply) {
        let cqe = completion(reply.cqe, 0, self.head());
        let _ = self.out.send(outbound(opcode, cqe, reply.data));
    }

    fn head(&self) -> u16 {
        self.sq_head.load(Ordering::Relaxed)
    }

    fn in_flight_count(&self) -> usize {
        self.lock_in_flight().len() + self.incoming.len()
    }

    fn is_in_flight(&self, cid: u16) -> bool {
        self.incoming.contains_key(&cid) || self.lock_in_flight().contains(&cid)
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
        Outbound::Resp(cqe)
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
/// are gone, or the connection is terminated.
fn write_loop(socket: TcpStream, framing: Framing, rx: Receiver<Outbound>) {
    let mut w = BufWriter::with_capacity(256 * 1024, socket);
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            let result = match msg {
                Outbound::Resp(cqe) => write_resp(&mut w, &framing, cqe),
                Outbound::Data(cqe, data) => write_data(&mut w, &framing, cqe, &data),
                Outbound::R2t(r2t) => write_pdu(&mut w, &framing, &r2t, &[]),
                Outbound::Term(fatal, header) => {
                    let _ = write_term(&mut w, fatal, &header).and_then(|()| w.flush());
                    let _ = w.get_ref().shutdown(Shutdown::Both);
                    return;
                }
            };
            if result.is_err() {
                return;
            }
            next = rx.try_recv().ok();
        }
        if w.flush().is_err() {
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
