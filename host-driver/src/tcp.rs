//! [`TcpTransport`]: a userspace NVMe/TCP initiator (NVMe/TCP Transport Specification 1.0).
//!
//! It connects an admin queue and one or more I/O queues (one connection each) to a subsystem, sets the controller up (CAP,
//! CC.EN, CSTS.RDY, Identify for the in-capsule data size) and then carries any command: data up
//! to the in-capsule limit travels in the command capsule, more waits for the target's R2T and
//! goes in H2CData PDUs; returned data comes in C2HData PDUs. A reader thread per queue turns
//! the target's PDUs into completions, so many commands are in flight at once.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use sagessd_abi::fabrics::{
    CNTLID_DYNAMIC, ConnectData, DataPointer, FabricsCommand, cc, csts, data_direction, property,
};
use sagessd_abi::identify::CNS_CONTROLLER;
use sagessd_abi::nvme::{CompletionEntry, DataDirection, Status, SubmissionEntry, admin_opcode};
use sagessd_abi::tcp::stream::{RecvError, read_pdu, write_pdu};
use sagessd_abi::tcp::{
    CapsuleCmd, CapsuleResp, CommonHeader, DataHeader, Framing, IcReq, IcResp, R2t, digest, flags,
    pdu_type,
};
use zerocopy::{FromZeros, IntoBytes};

use crate::fabrics_auth::{DhchapSecrets, Peer, authenticate};
use crate::transport::{Completion, Transport, TransportError};
use sagessd_abi::auth::CONNECT_ATR;

/// Submission queue size asked for the admin queue (0-based).
const ADMIN_SQSIZE: u16 = 31;
/// In-capsule data a Linux-style target accepts on the admin queue.
const ADMIN_INLINE_BYTES: usize = 8192;
/// How long the controller may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a waiting `reap` checks whether the connection has died.
const DEAD_CHECK: Duration = Duration::from_millis(100);
/// The host NQN this initiator presents unless told another ([`TcpOptions::host_nqn`]).
pub const HOST_NQN: &str = "nqn.2026-11.io.sagessd:host";

/// Options of an NVMe/TCP connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// Subsystem NQN to connect to.
    pub nqn: String,
    /// The host NQN presented in Connect (a target may allow only some hosts).
    pub host_nqn: String,
    /// Ask for header and data digests.
    pub digests: bool,
    /// I/O queue entries wanted (capped by the controller's MQES).
    pub queue_entries: u16,
    /// I/O queues to connect, numbered 1..=`io_queues` (at least 1).
    pub io_queues: u16,
    /// How long `reap` waits for the next completion before it gives up on the outstanding
    /// commands (an error); `None`: for ever.
    pub command_timeout: Option<Duration>,
    /// DH-HMAC-CHAP secrets: each queue whose Connect asks for authentication authenticates
    /// with them (without them such a target cannot be used).
    pub dhchap: Option<DhchapSecrets>,
}

impl TcpOptions {
    /// Options for subsystem `nqn`: no digests, one 128-entry I/O queue.
    pub fn new(nqn: &str) -> Self {
        Self {
            nqn: nqn.to_owned(),
            host_nqn: HOST_NQN.to_owned(),
            digests: false,
            queue_entries: 128,
            io_queues: 1,
            command_timeout: None,
            dhchap: None,
        }
    }
}

/// Commands waiting for their completions, by command id, with their data buffers.
type PendingMap = Arc<Mutex<HashMap<u16, Vec<u8>>>>;
type Writer = Arc<Mutex<BufWriter<TcpStream>>>;

/// One connected queue.
struct QueueLink {
    writer: Writer,
    pending: PendingMap,
    framing: Framing,
    inline_bytes: usize,
    socket: TcpStream,
    reader: Option<JoinHandle<()>>,
}

/// NVMe/TCP connections to one controller: an admin queue and its I/O queues.
pub struct TcpTransport {
    admin: QueueLink,
    io: Vec<QueueLink>,
    completions: Receiver<Result<Completion, String>>,
    outstanding: usize,
    command_timeout: Option<Duration>,
    cntlid: u16,
    /// Set by a reader thread when its connection ends: no completion will come any more.
    dead: Arc<AtomicBool>,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("cntlid", &self.cntlid)
            .field("outstanding", &self.outstanding)
            .finish_non_exhaustive()
    }
}

fn device_error(msg: impl Into<String>) -> TransportError {
    TransportError::Device(msg.into().into())
}

fn io_error(e: io::Error) -> TransportError {
    TransportError::Device(Box::new(e))
}

impl TcpTransport {
    /// Connects to `addr` and sets the controller up; returns once the I/O queue is connected.
    pub fn connect(addr: impl ToSocketAddrs, options: &TcpOptions) -> Result<Self, TransportError> {
        let addr = addr
            .to_socket_addrs()
            .map_err(io_error)?
            .next()
            .ok_or_else(|| device_error("address resolves to nothing"))?;
        let (sender, completions) = mpsc::channel();
        let host_id = host_id();
        let dead = Arc::new(AtomicBool::new(false));
        let admin = QueueLink::open(
            addr,
            0,
            options.digests,
            ADMIN_INLINE_BYTES,
            sender.clone(),
            Arc::clone(&dead),
        )?;
        let mut t = Self {
            admin,
            io: Vec::new(),
            completions,
            outstanding: 0,
            command_timeout: options.command_timeout,
            cntlid: 0,
            dead: Arc::clone(&dead),
        };
        let data = ConnectData::new(host_id, CNTLID_DYNAMIC, &options.nqn, &options.host_nqn);
        let c = t.setup(
            0,
            FabricsCommand::connect(0, 0, ADMIN_SQSIZE, 0),
            data.as_bytes(),
        )?;
        t.cntlid = c.cqe.result.get() as u16;
        t.authenticate_if_asked(0, c.cqe.result.get(), options)?;
        let cap = t.property_get(property::CAP, true)?;
        let mqes = (cap & 0xFFFF) as u16;
        // EN, NVM command set, 4 KiB pages, 64-byte SQEs and 16-byte CQEs.
        let enable = cc::EN | (6 << 16) | (4 << 20);
        t.setup(
            0,
            FabricsCommand::property_set(0, property::CC, enable.into(), false),
            &[],
        )?;
        let deadline = Instant::now() + READY_TIMEOUT;
        while t.property_get(property::CSTS, false)? & u64::from(csts::RDY) == 0 {
            if Instant::now() > deadline {
                return Err(device_error("controller did not become ready"));
            }
            thread::sleep(Duration::from_millis(10));
        }
        let mut identify = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, 0);
        identify.cdw10 = u32::from(CNS_CONTROLLER).into();
        let id = t.setup(0, identify, &[0; 4096])?.data;
        let ioccsz = u32::from_le_bytes(id[1792..1796].try_into().unwrap_or([0; 4]));
        let inline_bytes = (ioccsz as usize * 16).saturating_sub(64);
        let sqsize = options.queue_entries.min(mqes.saturating_add(1)).max(2) - 1;
        let data = ConnectData::new(host_id, t.cntlid, &options.nqn, &options.host_nqn);
        for qid in 1..=options.io_queues.max(1) {
            let io = QueueLink::open(
                addr,
                qid,
                options.digests,
                inline_bytes,
                sender.clone(),
                Arc::clone(&dead),
            )?;
            t.io.push(io);
            let connect = FabricsCommand::connect(0, qid, sqsize, 0);
            let c = t.setup(qid, connect, data.as_bytes())?;
            t.authenticate_if_asked(qid, c.cqe.result.get(), options)?;
        }
        Ok(t)
    }

    /// Authenticates queue `qid` if its Connect's result (`connect_dw0`) asks for it; each
    /// queue's transaction has its own id (the queue's, as Linux numbers them per controller).
    fn authenticate_if_asked(
        &mut self,
        qid: u16,
        connect_dw0: u32,
        options: &TcpOptions,
    ) -> Result<(), TransportError> {
        if connect_dw0 & CONNECT_ATR == 0 {
            return Ok(());
        }
        let Some(secrets) = &options.dhchap else {
            return Err(device_error(format!(
                "the target requires DH-HMAC-CHAP authentication from host {:?} and no secret \
                 was given (dhchap_secret=)",
                options.host_nqn
            )));
        };
        let peer = Peer {
            qid,
            t_id: qid,
            host_nqn: &options.host_nqn,
            subsys_nqn: &options.nqn,
        };
        authenticate(self, &peer, secrets)
    }

    /// The controller id the subsystem gave this connection.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// Runs one setup command to completion and requires success.
    fn setup(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: &[u8],
    ) -> Result<Completion, TransportError> {
        let c = self.execute(sq_id, sqe, data.to_vec())?;
        let status = c.cqe.status();
        if !status.is_success() {
            return Err(device_error(format!(
                "setup command 0x{:02x} failed: sct {} sc 0x{:02x}",
                sqe.opcode, status.sct, status.sc
            )));
        }
        Ok(c)
    }

    fn property_get(&mut self, offset: u32, wide: bool) -> Result<u64, TransportError> {
        let c = self.setup(0, FabricsCommand::property_get(0, offset, wide), &[])?;
        Ok(u64::from(c.cqe.result.get()) | (u64::from(c.cqe.result_hi.get()) << 32))
    }

    fn queue(&self, sq_id: u16) -> Result<&QueueLink, TransportError> {
        match sq_id.checked_sub(1) {
            None => Ok(&self.admin),
            Some(i) => self.io.get(usize::from(i)).ok_or_else(|| {
                device_error(format!(
                    "no I/O queue {sq_id} ({} connected)",
                    self.io.len()
                ))
            }),
        }
    }
}

impl Transport for TcpTransport {
    fn submit(
        &mut self,
        sq_id: u16,
        mut sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<(), TransportError> {
        if self.dead.load(Ordering::Relaxed) {
            return Err(device_error("the NVMe/TCP connection is closed"));
        }
        let q = self.queue(sq_id)?;
        let cid = sqe.cid.get();
        let direction = data_direction(&sqe);
        let len = data.len() as u32;
        let inline = direction == DataDirection::HostToDevice && data.len() <= q.inline_bytes;
        let pointer = match direction {
            _ if data.is_empty() => DataPointer::None,
            DataDirection::HostToDevice if inline => DataPointer::InCapsule { offset: 0, len },
            DataDirection::HostToDevice | DataDirection::DeviceToHost => {
                DataPointer::Transport { len }
            }
            _ => return Err(device_error("bidirectional commands are not supported")),
        };
        pointer.encode(&mut sqe);
        let mut capsule = CapsuleCmd::new_zeroed();
        capsule.ch.pdu_type = pdu_type::CAPSULE_CMD;
        capsule.sqe = sqe;
        let in_capsule: &[u8] = if inline { &data } else { &[] };
        {
            let mut pending = lock(&q.pending);
            if pending.contains_key(&cid) {
                return Err(device_error(format!("command id {cid} already in flight")));
            }
            let mut w = lock(&q.writer);
            write_pdu(&mut *w, &q.framing, &capsule, in_capsule)
                .and_then(|()| w.flush())
                .map_err(io_error)?;
            pending.insert(cid, data);
        }
        self.outstanding += 1;
        Ok(())
    }

    fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
        if self.outstanding == 0 {
            return Ok(None);
        }
        let deadline = self.command_timeout.map(|t| (Instant::now() + t, t));
        loop {
            match self.completions.recv_timeout(DEAD_CHECK) {
                Ok(Ok(c)) => {
                    self.outstanding -= 1;
                    return Ok(Some(c));
                }
                Ok(Err(msg)) => return Err(device_error(msg)),
                Err(RecvTimeoutError::Timeout) if !self.dead.load(Ordering::Relaxed) => {
                    if let Some((at, timeout)) = deadline
                        && Instant::now() > at
                    {
                        return Err(device_error(format!(
                            "no completion within {timeout:?}; {} commands outstanding",
                            self.outstanding
                        )));
                    }
                }
                Err(_) => return Err(device_error("the NVMe/TCP connection is closed")),
            }
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        // Closing the sockets ends the reader threads; the target removes the controller.
        for q in self.io.iter_mut().chain(std::iter::once(&mut self.admin)) {
            let _ = q.socket.shutdown(Shutdown::Both);
            if let Some(r) = q.reader.take() {
                let _ = r.join();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A host identifier unique to this process and moment.
fn host_id() -> [u8; 16] {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut id = [0u8; 16];
    id[..12].copy_from_slice(&nanos.to_le_bytes()[..12]);
    id[12..].copy_from_slice(&std::process::id().to_le_bytes());
    id
}

impl QueueLink {
    /// Opens a TCP connection for queue `qid`, exchanges ICReq/ICResp and starts its reader
    /// thread.
    fn open(
        addr: std::net::SocketAddr,
        qid: u16,
        digests: bool,
        inline_bytes: usize,
        completions: Sender<Result<Completion, String>>,
        dead: Arc<AtomicBool>,
    ) -> Result<Self, TransportError> {
        let socket = TcpStream::connect(addr).map_err(io_error)?;
        socket.set_nodelay(true).map_err(io_error)?;
        let mut req = IcReq::new_zeroed();
        req.ch.pdu_type = pdu_type::IC_REQ;
        if digests {
            req.digest = digest::HEADER | digest::DATA;
        }
        let mut raw = socket.try_clone().map_err(io_error)?;
        write_pdu(&mut raw, &Framing::INITIAL, &req, &[]).map_err(io_error)?;
        let mut reader =
            BufReader::with_capacity(256 * 1024, socket.try_clone().map_err(io_error)?);
        let pdu = read_pdu(&mut reader, &Framing::INITIAL, &[pdu_type::IC_RESP])
            .map_err(|e| device_error(format!("ICResp: {e:?}")))?;
        let resp: IcResp = pdu
            .header_as()
            .ok_or_else(|| device_error("short ICResp"))?;
        let maxh2cdata = resp.maxh2cdata.get() as usize;
        if resp.pfv.get() != 0 || maxh2cdata < 4096 || resp.cpda > 31 {
            return Err(device_error("ICResp parameters not supported"));
        }
        let framing = Framing {
            header_digest: resp.digest & digest::HEADER != 0,
            data_digest: resp.digest & digest::DATA != 0,
            max_data_bytes: 64 << 20,
            data_alignment_bytes: (usize::from(resp.cpda) + 1) * 4,
        };
        let writer: Writer = Arc::new(Mutex::new(BufWriter::with_capacity(
            256 * 1024,
            socket.try_clone().map_err(io_error)?,
        )));
        let pending: PendingMap = Arc::new(Mutex::new(HashMap::new()));
        let (w, p) = (Arc::clone(&writer), Arc::clone(&pending));
        let thread = thread::Builder::new()
            .name("sagessd-tcp-initiator".into())
            .spawn(move || {
                let err = read_loop(reader, qid, framing, maxh2cdata, &w, &p, &completions);
                dead.store(true, Ordering::Relaxed);
                // Everything still pending fails with the connection.
                if lock(&p).drain().next().is_some() || err.is_some() {
                    let _ =
                        completions.send(Err(err.unwrap_or_else(|| "connection closed".into())));
                }
            })
            .map_err(io_error)?;
        Ok(Self {
            writer,
            pending,
            framing,
            inline_bytes,
            socket,
            reader: Some(thread),
        })
    }
}

/// The reader thread of queue `qid`: completions, returned data and R2Ts. Returns why it
/// stopped, if it was an error (a completion naming another queue is one).
fn read_loop(
    mut reader: BufReader<TcpStream>,
    qid: u16,
    framing: Framing,
    maxh2cdata: usize,
    writer: &Writer,
    pending: &PendingMap,
    completions: &Sender<Result<Completion, String>>,
) -> Option<String> {
    let allowed = [
        pdu_type::CAPSULE_RESP,
        pdu_type::C2H_DATA,
        pdu_type::R2T,
        pdu_type::C2H_TERM_REQ,
    ];
    loop {
        let pdu = match read_pdu(&mut reader, &framing, &allowed) {
            Ok(p) => p,
            Err(RecvError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return None,
            Err(e) => return Some(format!("NVMe/TCP receive failed: {e:?}")),
        };
        let short = || Some(format!("short PDU header of type {}", pdu.pdu_type()));
        match pdu.pdu_type() {
            pdu_type::CAPSULE_RESP => {
                let Some(resp) = pdu.header_as::<CapsuleResp>() else {
                    return short();
                };
                if resp.cqe.sq_id.get() != qid {
                    return Some(format!(
                        "a completion on queue {qid} names queue {}",
                        resp.cqe.sq_id.get()
                    ));
                }
                finish(pending, completions, resp.cqe);
            }
            pdu_type::C2H_DATA => {
                let Some(h) = pdu.header_as::<DataHeader>() else {
                    return short();
                };
                let cid = h.cccid.get();
                {
                    let mut map = lock(pending);
                    let Some(p) = map.get_mut(&cid) else {
                        return Some(format!("C2HData for unknown command {cid}"));
                    };
                    let at = h.datao.get() as usize;
                    let Some(dst) = p.get_mut(at..at + pdu.data.len()) else {
                        return Some(format!("C2HData past the buffer of command {cid}"));
                    };
                    dst.copy_from_slice(&pdu.data);
                }
                if h.ch.flags & flags::DATA_SUCCESS != 0 {
                    let cqe = CompletionEntry::new(qid, cid, Status::SUCCESS, 0);
                    finish(pending, completions, cqe);
                }
            }
            pdu_type::R2T => {
                let Some(r2t) = pdu.header_as::<R2t>() else {
                    return short();
                };
                if let Err(e) = send_data(&r2t, &framing, maxh2cdata, writer, pending) {
                    return Some(e);
                }
            }
            _ => return Some("the target terminated the connection".into()),
        }
    }
}

/// Answers an R2T with the requested range of the command's data.
fn send_data(
    r2t: &R2t,
    framing: &Framing,
    maxh2cdata: usize,
    writer: &Writer,
    pending: &PendingMap,
) -> Result<(), String> {
    let cid = r2t.cccid.get();
    let map = lock(pending);
    let p = map
        .get(&cid)
        .ok_or_else(|| format!("R2T for unknown command {cid}"))?;
    let start = r2t.r2to.get() as usize;
    let range = p
        .get(start..start + r2t.r2tl.get() as usize)
        .ok_or_else(|| format!("R2T past the data of command {cid}"))?;
    let mut w = lock(writer);
    let chunks = range.len().div_ceil(maxh2cdata);
    for (i, chunk) in range.chunks(maxh2cdata).enumerate() {
        let mut h = DataHeader::new_zeroed();
        h.ch = CommonHeader {
            pdu_type: pdu_type::H2C_DATA,
            flags: if i + 1 == chunks { flags::DATA_LAST } else { 0 },
            ..CommonHeader::default()
        };
        h.cccid = r2t.cccid;
        h.ttag = r2t.ttag;
        h.datao = ((start + i * maxh2cdata) as u32).into();
        h.datal = (chunk.len() as u32).into();
        write_pdu(&mut *w, framing, &h, chunk).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())
}

/// A command completed: hand it to the caller with its data.
fn finish(
    pending: &PendingMap,
    completions: &Sender<Result<Completion, String>>,
    cqe: CompletionEntry,
) {
    let Some(data) = lock(pending).remove(&cqe.cid.get()) else {
        let _ = completions.send(Err(format!(
            "completion for unknown command {}",
            cqe.cid.get()
        )));
        return;
    };
    let _ = completions.send(Ok(Completion {
        cqe,
        data,
        submitted_at_ns: None,
        completed_at_ns: None,
    }));
}
