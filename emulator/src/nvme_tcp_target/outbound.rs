//! What one connection sends, and how much of it may wait: the writer thread, the PDUs it
//! writes, and the flow control between it and the connection's socket reader.
//!
//! Everything a connection sends goes through its [`Outbox`] to the writer thread. The
//! [`Flow`] counts what waits there and what the reader has handed to the connection but the
//! connection has not yet handled; the reader takes the next PDU off the socket only while both
//! are below their bounds. A host that stops reading its completions (or floods the target with
//! commands it must answer with an error) therefore stops being read, and TCP slows it down,
//! instead of the target queueing answers for it without limit.

use std::io::{self, BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use sagessd_abi::fabrics::FABRICS_OPCODE;
use sagessd_abi::nvme::{CompletionEntry, DataDirection};
use sagessd_abi::tcp::stream::write_pdu;
use sagessd_abi::tcp::{
    CapsuleResp, CommonHeader, DataHeader, Fatal, Framing, R2t, TERM_REQ_MAX_DATA_BYTES, TermReq,
    flags, pdu_type,
};
use zerocopy::FromZeros;

use super::connection::{Held, InFlight};

/// Largest C2HData PDU the target sends.
const C2H_CHUNK_BYTES: usize = 128 * 1024;
/// PDUs the reader may hand over before the connection has handled them.
const RECEIVED_LIMIT: usize = 4;

/// What the writer thread sends. Every completion names whether it ends a command the
/// connection counts in flight (`release`): the writer takes it out just before sending, so
/// completions waiting for a host that does not read still count against its queue size.
pub(super) enum Outbound {
    /// A response capsule.
    Resp {
        /// The completion.
        cqe: CompletionEntry,
        /// Whether it ends a command counted in flight.
        release: bool,
    },
    /// Data for the host (C2HData PDUs), then its response capsule; the budget the data holds
    /// is given back once the data is written, before the response.
    Data {
        /// The completion.
        cqe: CompletionEntry,
        /// The data.
        data: Vec<u8>,
        /// The budget the buffer holds, if it came from the transport.
        held: Option<Held>,
    },
    /// Ask for a command's data.
    R2t(R2t),
    /// End the connection with a C2HTermReq carrying the offending header.
    Term(Fatal, Vec<u8>),
}

impl Outbound {
    /// What to send for a finished command: its data first if it returns data and succeeded
    /// (otherwise the buffer, and its grant, go at once).
    pub(super) fn finished(
        opcode: u8,
        cqe: CompletionEntry,
        data: Vec<u8>,
        held: Option<Held>,
    ) -> Self {
        let returns_data = opcode != FABRICS_OPCODE
            && DataDirection::of(opcode) == DataDirection::DeviceToHost
            && cqe.status().is_success()
            && !data.is_empty();
        if returns_data {
            Self::Data { cqe, data, held }
        } else {
            Self::Resp { cqe, release: true }
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// PDUs read and not yet handled by the connection.
    received: usize,
    /// Messages in the outbox not yet written.
    outbound: usize,
    /// The connection has ended: the reader stops.
    closed: bool,
}

/// Flow control between one connection's socket reader, the connection and its writer.
#[derive(Debug)]
pub(super) struct Flow {
    counts: Mutex<Counts>,
    changed: Condvar,
    /// Most unwritten messages before the reader stops reading.
    outbound_limit: usize,
}

impl Flow {
    /// Flow control for a connection whose queues hold at most `queue_entries` commands: a
    /// host within its queue size never waits (each command has at most one R2T and one
    /// completion outstanding).
    pub(super) fn new(queue_entries: u16) -> Arc<Self> {
        Arc::new(Self {
            counts: Mutex::new(Counts::default()),
            changed: Condvar::new(),
            outbound_limit: 2 * usize::from(queue_entries) + 16,
        })
    }

    /// Waits until the reader may read the next PDU; `false` once the connection has ended.
    pub(super) fn wait_to_read(&self) -> bool {
        let mut c = self.lock();
        while !c.closed && (c.received >= RECEIVED_LIMIT || c.outbound >= self.outbound_limit) {
            c = self.changed.wait(c).unwrap_or_else(|p| p.into_inner());
        }
        if c.closed {
            return false;
        }
        c.received += 1;
        true
    }

    /// The connection has handled a PDU the reader handed over.
    pub(super) fn handled(&self) {
        self.update(|c| c.received = c.received.saturating_sub(1));
    }

    /// The connection has ended: wakes and stops the reader.
    pub(super) fn close(&self) {
        self.update(|c| c.closed = true);
    }

    fn queued(&self) {
        self.update(|c| c.outbound += 1);
    }

    fn written(&self) {
        self.update(|c| c.outbound = c.outbound.saturating_sub(1));
    }

    fn update(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Holders change one counter: a poisoned lock is still consistent.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a connection (and the device thread, for its completions) puts what goes out.
#[derive(Clone)]
pub(super) struct Outbox {
    tx: Sender<Outbound>,
    flow: Arc<Flow>,
}

impl Outbox {
    /// An outbox feeding `tx`, counted by `flow`.
    pub(super) fn new(tx: Sender<Outbound>, flow: Arc<Flow>) -> Self {
        Self { tx, flow }
    }

    /// Queues `message` for the writer (dropped if the writer has ended).
    pub(super) fn send(&self, message: Outbound) {
        self.flow.queued();
        if self.tx.send(message).is_err() {
            self.flow.written();
        }
    }
}

/// The writer thread: sends every outbound PDU until the connection and every pending
/// completion are gone, a write fails or times out, or the connection is terminated. A
/// completion's command leaves `in_flight` just before it goes on the wire.
pub(super) fn write_loop(
    socket: TcpStream,
    framing: Framing,
    rx: Receiver<Outbound>,
    in_flight: &InFlight,
    flow: &Flow,
) {
    let mut w = BufWriter::with_capacity(256 * 1024, socket);
    let lock_in_flight = || in_flight.lock().unwrap_or_else(|p| p.into_inner());
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            let result = match msg {
                Outbound::Resp { cqe, release } => {
                    if release {
                        lock_in_flight().remove(&cqe.cid.get());
                    }
                    write_resp(&mut w, &framing, cqe)
                }
                Outbound::Data { cqe, data, held } => {
                    lock_in_flight().remove(&cqe.cid.get());
                    let written = write_data(&mut w, &framing, cqe.cid.get(), &data);
                    // The data is out of the buffer (in the socket or the writer's own
                    // bounded buffer): its bytes go back before the host can see the command
                    // complete.
                    drop((data, held));
                    written.and_then(|()| write_resp(&mut w, &framing, cqe))
                }
                Outbound::R2t(r2t) => write_pdu(&mut w, &framing, &r2t, &[]),
                Outbound::Term(fatal, header) => {
                    let _ = write_term(&mut w, fatal, &header).and_then(|()| w.flush());
                    let _ = w.get_ref().shutdown(Shutdown::Both);
                    return;
                }
            };
            flow.written();
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

/// Writes a C2HTermReq for `fatal` carrying (the start of) the offending header.
pub(super) fn write_term<W: Write>(w: &mut W, fatal: Fatal, header: &[u8]) -> io::Result<()> {
    let mut term = TermReq::new_zeroed();
    term.ch.pdu_type = pdu_type::C2H_TERM_REQ;
    term.fes = fatal.fes.into();
    term.fei = fatal.fei.into();
    let n = header.len().min(TERM_REQ_MAX_DATA_BYTES);
    write_pdu(w, &Framing::INITIAL, &term, &header[..n])
}

fn write_resp<W: Write>(w: &mut W, framing: &Framing, cqe: CompletionEntry) -> io::Result<()> {
    let mut resp = CapsuleResp::new_zeroed();
    resp.ch.pdu_type = pdu_type::CAPSULE_RESP;
    resp.cqe = cqe;
    write_pdu(w, framing, &resp, &[])
}

/// Writes a command's data as C2HData PDUs (its response capsule follows separately).
fn write_data<W: Write>(w: &mut W, framing: &Framing, cid: u16, data: &[u8]) -> io::Result<()> {
    let chunks = data.len().div_ceil(C2H_CHUNK_BYTES);
    for (i, chunk) in data.chunks(C2H_CHUNK_BYTES).enumerate() {
        let mut h = DataHeader::new_zeroed();
        h.ch = CommonHeader {
            pdu_type: pdu_type::C2H_DATA,
            flags: if i + 1 == chunks { flags::DATA_LAST } else { 0 },
            ..CommonHeader::default()
        };
        h.cccid = cid.into();
        h.datao = ((i * C2H_CHUNK_BYTES) as u32).into();
        h.datal = (chunk.len() as u32).into();
        write_pdu(w, framing, &h, chunk)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn the_reader_waits_while_answers_pile_up_and_goes_on_as_they_are_written() {
        let flow = Flow::new(2);
        let (tx, rx) = mpsc::channel();
        let outbox = Outbox::new(tx, Arc::clone(&flow));
        let conflict = |cid: u16| Outbound::Resp {
            cqe: CompletionEntry::new(0, cid, sagessd_abi::nvme::Status::SUCCESS, 0),
            release: false,
        };
        for cid in 0..flow.outbound_limit as u16 {
            outbox.send(conflict(cid));
        }
        let (done, read) = mpsc::channel();
        let waiting = Arc::clone(&flow);
        let reader = std::thread::spawn(move || {
            let _ = done.send(waiting.wait_to_read());
        });
        assert!(
            read.recv_timeout(Duration::from_millis(100)).is_err(),
            "the reader must wait while {} answers are unwritten",
            flow.outbound_limit
        );
        // The writer sends one: the reader may read again.
        drop(rx.recv());
        flow.written();
        assert_eq!(read.recv_timeout(Duration::from_secs(10)), Ok(true));
        reader.join().expect("reader");
        // PDUs handed over but not handled count too; closing wakes a waiting reader.
        for _ in 1..RECEIVED_LIMIT {
            assert!(flow.wait_to_read());
        }
        let (done, read) = mpsc::channel();
        let waiting = Arc::clone(&flow);
        std::thread::spawn(move || {
            let _ = done.send(waiting.wait_to_read());
        });
        assert!(read.recv_timeout(Duration::from_millis(100)).is_err());
        flow.close();
        assert_eq!(read.recv_timeout(Duration::from_secs(10)), Ok(false));
    }
}
