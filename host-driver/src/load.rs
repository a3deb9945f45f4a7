//! A checked random load: reads and writes on many queues at full depth against a model of what
//! the device must hold, so that every completion is accounted for and every byte read is
//! judged.
//!
//! The span of LBAs is cut into slots of `blocks_per_command` blocks; slot `k` belongs to queue
//! `1 + k mod queues`, so each queue touches only its own slots, and a slot has at most one
//! command in flight. The model knows each slot's last completed write (its version), and a
//! block's contents are a function of (LBA, version, seed) alone: a 16-byte stamp naming the
//! LBA and version, then bytes of a generator keyed by all three. A read must return exactly
//! its slot's version (zeros for a slot never written); any other data is reported with what it
//! is (another LBA's block, an older version, garbage). A completion must name a queue and a
//! command id that are in flight there: one that is not is a duplicate or misrouted completion;
//! a command whose completion does not come (the transport's command timeout) is lost.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sagessd_abi::nvme::SubmissionEntry;
use sagessd_abi::rng::SplitMix64;

use crate::nvme::NAMESPACE_ID;
use crate::transport::{Transport, TransportError};

/// Bytes of the stamp at the start of every block.
const STAMP_BYTES: usize = 16;

/// What load to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadSpec {
    /// I/O queues, numbered 1..=`queues`.
    pub queues: u16,
    /// Commands in flight per queue.
    pub depth: u16,
    /// Commands in all.
    pub commands: u64,
    /// Share of reads, in percent (0..=100).
    pub read_percent: u8,
    /// LBAs used, from LBA 0.
    pub span_blocks: u64,
    /// Bytes per LBA (the namespace's format).
    pub block_bytes: u32,
    /// LBAs per command.
    pub blocks_per_command: u32,
    /// Seed of the command mix and of the data.
    pub seed: u64,
}

impl LoadSpec {
    /// Slots in the span.
    fn slots(&self) -> u64 {
        self.span_blocks / u64::from(self.blocks_per_command.max(1))
    }

    /// Bytes one command moves.
    fn command_bytes(&self) -> Result<usize, LoadError> {
        let bytes = u64::from(self.block_bytes) * u64::from(self.blocks_per_command);
        usize::try_from(bytes)
            .ok()
            .filter(|b| *b >= STAMP_BYTES)
            .ok_or_else(|| LoadError::Spec(format!("{bytes} bytes per command")))
    }

    fn check(&self) -> Result<(), LoadError> {
        let bad = |what: String| Err(LoadError::Spec(what));
        if self.queues == 0 || self.depth == 0 || self.blocks_per_command == 0 {
            return bad("queues, depth and blocks per command must be at least 1".into());
        }
        if self.depth > u16::MAX / 2 {
            return bad(format!("depth {} is over {}", self.depth, u16::MAX / 2));
        }
        if self.read_percent > 100 {
            return bad(format!("read share {}% is over 100%", self.read_percent));
        }
        if self.block_bytes < STAMP_BYTES as u32 {
            return bad(format!("{}-byte blocks", self.block_bytes));
        }
        // Each queue needs room to pick a free slot among its own.
        let wanted = 2 * u64::from(self.queues) * u64::from(self.depth);
        if self.slots() < wanted {
            return bad(format!(
                "{} slots of {} blocks in {} blocks; {} queues × depth {} need {wanted}",
                self.slots(),
                self.blocks_per_command,
                self.span_blocks,
                self.queues,
                self.depth
            ));
        }
        self.command_bytes().map(|_| ())
    }
}

/// What a load did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Commands completed (all of them, when the load succeeded).
    pub commands: u64,
    /// Reads completed, every one checked against the model.
    pub reads: u64,
    /// Writes completed.
    pub writes: u64,
    /// Reads of slots that had been written (the rest returned zeros, as they must).
    pub reads_of_written: u64,
    /// Wall-clock time from the first submission to the last completion.
    pub elapsed: Duration,
}

impl LoadReport {
    /// Completed commands per second of wall-clock time.
    pub fn iops(&self) -> f64 {
        self.commands as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The load cannot run as asked.
    #[error("load not runnable: {0}")]
    Spec(String),
    /// The transport failed (a lost completion shows as its command timeout).
    #[error("after {completed} completions: {source}")]
    Transport {
        /// Completions before the failure.
        completed: u64,
        /// The transport's error.
        source: TransportError,
    },
    /// A completion for a command that is not in flight on the queue it names.
    #[error(
        "completion on queue {sq_id} for command {cid}, which is not in flight there (duplicate or misrouted)"
    )]
    Unexpected {
        /// Queue the completion names.
        sq_id: u16,
        /// Command id it names.
        cid: u16,
    },
    /// A command failed.
    #[error("{what} of LBA {lba} on queue {sq_id} failed: status type {sct} code {sc:#04x}")]
    Failed {
        /// "read" or "write".
        what: &'static str,
        /// Its first LBA.
        lba: u64,
        /// Its queue.
        sq_id: u16,
        /// Status code type.
        sct: u8,
        /// Status code.
        sc: u8,
    },
    /// A read returned other data than the last completed write (or zeros).
    #[error("read of LBA {lba} returned {found}, not {expected}")]
    Mismatch {
        /// The LBA whose block was wrong.
        lba: u64,
        /// What the model holds.
        expected: String,
        /// What came back.
        found: String,
    },
    /// Completions stopped before every command completed.
    #[error("{outstanding} commands never completed")]
    Lost {
        /// Commands in flight when completions stopped.
        outstanding: usize,
    },
}

/// One command in flight.
#[derive(Clone, Copy, Debug)]
struct Flying {
    slot: u64,
    /// The version a write stores (a read: the version it must see).
    version: u32,
    write: bool,
}

/// What the model tracks of one queue.
struct QueueState {
    /// Command ids free on this queue: twice the depth, reused oldest first, so that an id
    /// comes back only after `depth` other completions and a duplicate completion cannot pass
    /// for the next command's.
    free_cids: VecDeque<u16>,
    /// In flight, by command id.
    flying: Vec<Option<Flying>>,
}

/// The model: each slot's version and whether a command is in flight on it.
struct Model {
    versions: Vec<u32>,
    busy: Vec<bool>,
    queues: Vec<QueueState>,
}

/// The contents of one block at `version` (≥ 1): its stamp, then generator bytes.
pub fn block_contents(lba: u64, version: u32, seed: u64, out: &mut [u8]) {
    let mut g = SplitMix64::new(seed ^ lba.rotate_left(17) ^ u64::from(version).rotate_left(43));
    for chunk in out.chunks_mut(8) {
        let bytes = g.next_u64().to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    stamp(lba, version, seed)
        .iter()
        .zip(out.iter_mut())
        .for_each(|(s, o)| *o = *s);
}

fn stamp(lba: u64, version: u32, seed: u64) -> [u8; STAMP_BYTES] {
    let mut s = [0u8; STAMP_BYTES];
    s[..8].copy_from_slice(&lba.to_le_bytes());
    s[8..12].copy_from_slice(&version.to_le_bytes());
    s[12..].copy_from_slice(&(seed as u32).to_le_bytes());
    s
}

/// Judges one block read at `lba` that must hold `version` (0: never written, zeros).
pub fn check_block(lba: u64, version: u32, seed: u64, got: &[u8]) -> Result<(), LoadError> {
    let mut want = vec![0u8; got.len()];
    if version > 0 {
        block_contents(lba, version, seed, &mut want);
    }
    if want == got {
        return Ok(());
    }
    let describe = |v: u32| match v {
        0 => "zeros".to_string(),
        v => format!("version {v} of LBA {lba}"),
    };
    let found = if got.iter().all(|b| *b == 0) {
        "zeros".to_string()
    } else {
        let at = u64::from_le_bytes(got[..8].try_into().unwrap_or([0; 8]));
        let v = u32::from_le_bytes(got[8..12].try_into().unwrap_or([0; 4]));
        let mut whole = vec![0u8; got.len()];
        block_contents(at, v, seed, &mut whole);
        match (whole == got, at == lba) {
            (true, true) => format!("version {v} of LBA {lba} (stale or ahead)"),
            (true, false) => format!("version {v} of another LBA, {at}"),
            (false, _) => "data no write of this load stored (torn or garbage)".to_string(),
        }
    };
    Err(LoadError::Mismatch {
        lba,
        expected: describe(version),
        found,
    })
}

impl Model {
    fn new(spec: &LoadSpec) -> Self {
        let slots = spec.slots() as usize;
        let queue = || QueueState {
            free_cids: (0..2 * spec.depth).collect(),
            flying: vec![None; 2 * usize::from(spec.depth)],
        };
        Self {
            versions: vec![0; slots],
            busy: vec![false; slots],
            queues: (0..spec.queues).map(|_| queue()).collect(),
        }
    }

    /// Picks a free slot of queue `q` (0-based): a random one of its own, or the next free
    /// one after it.
    fn pick(&self, q: usize, mix: &mut SplitMix64) -> u64 {
        let queues = self.queues.len() as u64;
        let own = self.versions.len() as u64 / queues;
        let mut k = mix.below(own);
        while self.busy[(k * queues) as usize + q] {
            k = (k + 1) % own;
        }
        k * queues + q as u64
    }
}

/// Runs `spec` on `transport` (whose I/O queues 1..=`spec.queues` are connected) and checks
/// every completion. The transport should time out commands that never complete, or a lost
/// completion makes this wait for ever.
pub fn run_load<T: Transport>(transport: &mut T, spec: &LoadSpec) -> Result<LoadReport, LoadError> {
    spec.check()?;
    let bytes = spec.command_bytes()?;
    let block = spec.block_bytes as usize;
    let mut model = Model::new(spec);
    let mut mix = SplitMix64::new(spec.seed);
    let mut report = LoadReport::default();
    let mut submitted = 0u64;
    let mut outstanding = 0usize;
    let start = Instant::now();
    let transport_error = |completed, source| LoadError::Transport { completed, source };
    // Fill every queue, then replace each completion with a command on its queue.
    for q in 0..model.queues.len() {
        for _ in 0..spec.depth {
            if submitted == spec.commands {
                break;
            }
            submit(transport, spec, &mut model, &mut mix, q, bytes)
                .map_err(|e| transport_error(report.commands, e))?;
            submitted += 1;
            outstanding += 1;
        }
    }
    while outstanding > 0 {
        let done = match transport.reap() {
            Ok(Some(done)) => done,
            Ok(None) => return Err(LoadError::Lost { outstanding }),
            Err(e) => return Err(transport_error(report.commands, e)),
        };
        outstanding -= 1;
        let (sq_id, cid) = (done.sq_id(), done.cid());
        let q = usize::from(
            sq_id
                .checked_sub(1)
                .ok_or_else(|| unexpected_of(sq_id, cid))?,
        );
        let state = model
            .queues
            .get_mut(q)
            .ok_or_else(|| unexpected_of(sq_id, cid))?;
        let f = state
            .flying
            .get_mut(usize::from(cid))
            .and_then(Option::take)
            .ok_or_else(|| unexpected_of(sq_id, cid))?;
        state.free_cids.push_back(cid);
        let lba = f.slot * u64::from(spec.blocks_per_command);
        let status = done.cqe.status();
        if !status.is_success() {
            return Err(LoadError::Failed {
                what: if f.write { "write" } else { "read" },
                lba,
                sq_id,
                sct: status.sct,
                sc: status.sc,
            });
        }
        model.busy[f.slot as usize] = false;
        if f.write {
            model.versions[f.slot as usize] = f.version;
            report.writes += 1;
        } else {
            for (i, got) in done.data.chunks(block).enumerate() {
                check_block(lba + i as u64, f.version, spec.seed, got)?;
            }
            report.reads += 1;
            report.reads_of_written += u64::from(f.version > 0);
        }
        report.commands += 1;
        if submitted < spec.commands {
            submit(transport, spec, &mut model, &mut mix, q, bytes)
                .map_err(|e| transport_error(report.commands, e))?;
            submitted += 1;
            outstanding += 1;
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

fn unexpected_of(sq_id: u16, cid: u16) -> LoadError {
    LoadError::Unexpected { sq_id, cid }
}

/// Submits one random command on queue `q` (0-based) to a free slot of its own.
fn submit<T: Transport>(
    transport: &mut T,
    spec: &LoadSpec,
    model: &mut Model,
    mix: &mut SplitMix64,
    q: usize,
    bytes: usize,
) -> Result<(), TransportError> {
    let slot = model.pick(q, mix);
    let write = mix.below(100) >= u64::from(spec.read_percent);
    let current = model.versions[slot as usize];
    let version = if write { current + 1 } else { current };
    let lba = slot * u64::from(spec.blocks_per_command);
    let state = &mut model.queues[q];
    let cid = state
        .free_cids
        .pop_front()
        .expect("a queue below its depth has a free command id");
    let mut data = vec![0u8; bytes];
    if write {
        let block = spec.block_bytes as usize;
        for (i, b) in data.chunks_mut(block).enumerate() {
            block_contents(lba + i as u64, version, spec.seed, b);
        }
    }
    let sqe = SubmissionEntry::read_write(write, cid, NAMESPACE_ID, lba, spec.blocks_per_command);
    let sq_id = q as u16 + 1;
    transport.submit(sq_id, sqe, data)?;
    state.flying[usize::from(cid)] = Some(Flying {
        slot,
        version,
        write,
    });
    model.busy[slot as usize] = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Completion;
    use sagessd_abi::nvme::{CompletionEntry, Status, io_opcode};
    use std::collections::HashMap;

    /// What the fake device does wrong, at its `at`-th completion.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Fault {
        None,
        /// One read returns its neighbour's block.
        WrongBlock,
        /// One completion comes twice.
        Duplicate,
        /// One completion names the next queue.
        Misroute,
        /// One completion never comes.
        Lose,
    }

    /// An in-memory device that completes in submission order, with one fault.
    struct FakeDevice {
        blocks: HashMap<u64, Vec<u8>>,
        block_bytes: usize,
        done: VecDeque<Completion>,
        fault: Fault,
        at: usize,
        completed: usize,
    }

    impl Transport for FakeDevice {
        fn submit(
            &mut self,
            sq_id: u16,
            sqe: SubmissionEntry,
            mut data: Vec<u8>,
        ) -> Result<(), TransportError> {
            let slba = u64::from(sqe.cdw10.get()) | (u64::from(sqe.cdw11.get()) << 32);
            let b = self.block_bytes;
            for (i, chunk) in data.chunks_mut(b).enumerate() {
                let lba = slba + i as u64;
                if sqe.opcode == io_opcode::WRITE {
                    self.blocks.insert(lba, chunk.to_vec());
                } else {
                    let hit = self.fault == Fault::WrongBlock && self.completed == self.at;
                    let from = if hit { lba + 1 } else { lba };
                    match self.blocks.get(&from) {
                        Some(stored) => chunk.copy_from_slice(stored),
                        None => chunk.fill(0),
                    }
                }
            }
            let cqe = CompletionEntry::new(sq_id, sqe.cid.get(), Status::SUCCESS, 0);
            let c = Completion {
                cqe,
                data,
                submitted_at_ns: None,
                completed_at_ns: None,
            };
            let n = self.completed;
            self.completed += 1;
            match self.fault {
                _ if n != self.at => self.done.push_back(c),
                Fault::Lose => {}
                Fault::Duplicate => {
                    let twin = Completion {
                        cqe: c.cqe,
                        data: c.data.clone(),
                        submitted_at_ns: None,
                        completed_at_ns: None,
                    };
                    self.done.push_back(c);
                    self.done.push_back(twin);
                }
                Fault::Misroute => {
                    let mut c = c;
                    c.cqe.sq_id = (sq_id % 4 + 1).into();
                    self.done.push_back(c);
                }
                Fault::None | Fault::WrongBlock => self.done.push_back(c),
            }
            Ok(())
        }

        fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
            Ok(self.done.pop_front())
        }
    }

    fn run(fault: Fault) -> Result<LoadReport, LoadError> {
        let spec = LoadSpec {
            queues: 4,
            depth: 8,
            commands: 4_000,
            read_percent: 50,
            span_blocks: 512,
            block_bytes: 512,
            blocks_per_command: 2,
            seed: 5,
        };
        let mut dev = FakeDevice {
            blocks: HashMap::new(),
            block_bytes: 512,
            done: VecDeque::new(),
            fault,
            at: 3_000,
            completed: 0,
        };
        run_load(&mut dev, &spec)
    }

    #[test]
    fn a_correct_device_passes_and_each_kind_of_wrong_completion_is_caught() {
        let report = run(Fault::None).expect("a correct device passes");
        assert_eq!(report.commands, 4_000);
        assert_eq!(report.reads + report.writes, 4_000);
        // At the 3,000th command: a read returns another LBA's block (the load is half reads
        // over a small span, so it is one that sees a written neighbour), a completion comes
        // twice, names the wrong queue, or never comes.
        let caught = |fault| match run(fault) {
            Err(e) => e.to_string(),
            Ok(r) => panic!("{fault:?} not caught: {r:?}"),
        };
        let wrong = caught(Fault::WrongBlock);
        assert!(wrong.contains("returned"), "{wrong}");
        let twice = caught(Fault::Duplicate);
        assert!(twice.contains("duplicate or misrouted"), "{twice}");
        assert!(caught(Fault::Misroute).contains("duplicate or misrouted"));
        assert!(caught(Fault::Lose).contains("never completed"));
    }

    #[test]
    fn the_judge_names_what_a_wrong_block_is() {
        let seed = 7;
        let mut block = vec![0u8; 512];
        block_contents(10, 3, seed, &mut block);
        assert!(check_block(10, 3, seed, &block).is_ok());
        let found = |r: Result<(), LoadError>| match r {
            Err(LoadError::Mismatch { found, .. }) => found,
            other => panic!("{other:?}"),
        };
        assert!(found(check_block(10, 4, seed, &block)).contains("stale or ahead"));
        assert!(found(check_block(11, 3, seed, &block)).contains("another LBA, 10"));
        assert_eq!(
            found(check_block(10, 0, seed, &block)),
            "version 3 of LBA 10 (stale or ahead)"
        );
        assert_eq!(found(check_block(10, 3, seed, &[0; 512])), "zeros");
        block[300] ^= 1;
        assert!(found(check_block(10, 3, seed, &block)).contains("torn or garbage"));
        assert!(check_block(5, 0, seed, &[0; 512]).is_ok());
    }
}
