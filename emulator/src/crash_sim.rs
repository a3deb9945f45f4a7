//! A seeded power-cut simulation in the spirit of TigerBeetle's VOPR: random workloads against
//! the firmware over the emulator's NAND model, with media faults injected and the power cut at
//! a random instant, then a boot from what the flash holds, checked against a model of what the
//! host was promised.
//!
//! ```plain
//!   seed ─► workload (writes, trims, Write Zeroes, flushes, reads, GRAPH_ATTACH, sampling jobs;
//!           queue depth 1..8, disjoint in flight) ─► firmware ─► NandArray (program/erase
//!           failures, transient read faults, uncorrectable pages, spikes)
//!                 cut at a random step: mid-program, mid-erase, mid-GC, mid-checkpoint
//!        ─► Firmware::recover over the same NAND ─► every LBA read back and judged:
//!           the last completed write, trim or Write Zeroes, or one of the commands in flight at the cut
//! ```
//!
//! Every 512-byte block a write stores names its LBA and the write's version in its first 16
//! bytes and fills the rest from both, so a block that is neither the completed nor an
//! in-flight version — a mix of sectors, another LBA's data, stale data, zeros that should not
//! be — is caught. Each failure names the seed, and `sagessd device crash-test --seed N`
//! replays exactly that run. The oracle is this model, not the firmware's own tables.

use std::collections::{BTreeMap, VecDeque};

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::ns_config::{NsLimits, encode_ns_config, ns_config_size_bytes};
use sagessd_abi::nvme::{
    CompletionEntry, DsmRange, Status, SubmissionEntry, VendorStatus, io_opcode,
};
use sagessd_abi::sample::mix;
use sagessd_firmware::hal::Geometry;
use sagessd_firmware::host::{CommandId, DmaError, HostInterface};
use sagessd_firmware::{BootReport, Firmware, FirmwareConfig};
use zerocopy::IntoBytes;

use crate::nand::{CutReport, NandArray, NandFaults, NandTiming};

/// Logical block size of the simulated namespace.
const BLOCK: usize = 512;
/// Most steps (polls and flash events) one phase may take before the run is called stuck.
const STEP_LIMIT: u64 = 20_000_000;

/// The simulated device's NAND: 4 dies of 12 blocks of 16 pages of 2 KiB, small enough that a
/// workload writes it over several times (garbage collection runs in most seeds).
fn geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        dies_per_way: 1,
        blocks_per_die: 12,
        pages_per_block: 16,
        page_size_bytes: 2048,
    }
}

/// The simulated firmware: 512-byte blocks, a small page buffer, frequent checkpoints.
fn firmware_config() -> FirmwareConfig {
    FirmwareConfig {
        block_size_log2: 9,
        page_buffer_pages: 16,
        limits: NsLimits {
            max_targets: 64,
            max_fanout: 16,
            max_minibatches: 4,
        },
        max_subgraph_nodes: 4096,
        max_subgraph_edges: 16384,
        max_transfer_bytes: 16 * 1024,
        tunnel: false,
        checkpoint_interval_pages: 256,
        ..FirmwareConfig::default()
    }
}

fn timing() -> NandTiming {
    NandTiming {
        t_read_ns: 50_000,
        t_program_ns: 500_000,
        t_erase_ns: 3_000_000,
        page_transfer_ns: 10_000,
        command_overhead_ns: 1_000,
    }
}

/// What one seed did, for the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeedOutcome {
    /// Commands submitted before the cut.
    pub commands: u64,
    /// Writes completed before the cut (each one promised durable).
    pub writes_completed: u64,
    /// Writes, trims and Write Zeroes that completed with an error status before the cut
    /// (allowed: injected media faults can fail one; what it may have changed stays possible).
    pub commands_failed: u64,
    /// Commands in flight at the cut.
    pub in_flight: u64,
    /// Whether garbage collection had erased blocks, and checkpoints were written, before it.
    pub blocks_erased: u64,
    /// Checkpoints written before the cut.
    pub checkpoints: u64,
    /// What the cut did to the NAND operations under way.
    pub cut: CutReport,
    /// What the boot found.
    pub boot: BootReport,
    /// LBAs checked after the boot.
    pub lbas_checked: u64,
    /// Flash reads the firmware issued again after a failed attempt (before the cut, at the
    /// boot and after it).
    pub read_retries: u64,
    /// Reads the media failed (transient faults, and reads of uncorrectable pages).
    pub media_read_failures: u64,
    /// Pages the media left uncorrectable.
    pub uncorrectable_pages: u64,
    /// Commands that still failed with Unrecovered Read Error after the retries (reads, and
    /// writes whose read-modify-write could not read the old page), and LBAs the check after
    /// the boot could not read: allowed only once the media has made a page uncorrectable
    /// (a transient fault must never reach the host).
    pub unrecovered: u64,
}

/// A seed whose boot did not give back what the host was promised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedFailure {
    /// The seed.
    pub seed: u64,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for SeedFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} (replay: sagessd device crash-test --seed {})",
            self.seed, self.message, self.seed
        )
    }
}

/// What an LBA may read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// Never written, or trimmed: zeros.
    Zero,
    /// Written by the write with this version.
    Data(u64),
}

/// A command of the workload.
#[derive(Clone, Copy, Debug)]
enum Command {
    Write {
        slba: u64,
        blocks: u32,
        version: u64,
    },
    Trim {
        slba: u64,
        blocks: u32,
    },
    /// Write Zeroes, deallocating the pages it covers whole if `deallocate`.
    Zeroes {
        slba: u64,
        blocks: u32,
        deallocate: bool,
    },
    Read {
        slba: u64,
        blocks: u32,
    },
    Flush,
    Attach,
    Sample,
    /// The discarding NS_COLLECT of a sampling job.
    Discard,
}

/// The host: buffers of the commands in flight, and their completions.
#[derive(Default)]
struct SimHost {
    buffers: BTreeMap<u16, Vec<u8>>,
    done: VecDeque<(u16, CompletionEntry)>,
}

impl HostInterface for SimHost {
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError> {
        let buf = self.buffers.get(&cmd.cid).ok_or(DmaError)?;
        let src = buf.get(offset..offset + dst.len()).ok_or(DmaError)?;
        dst.copy_from_slice(src);
        Ok(())
    }

    fn dma_to_host(&mut self, cmd: CommandId, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        let buf = self.buffers.get_mut(&cmd.cid).ok_or(DmaError)?;
        buf.get_mut(offset..offset + src.len())
            .ok_or(DmaError)?
            .copy_from_slice(src);
        Ok(())
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        self.done.push_back((cmd.cid, cqe));
    }
}

type Fw = Firmware<NandArray, Vec<u8>>;

/// The contents a write of `version` stores in LBA `lba`.
fn block_contents(lba: u64, version: u64) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    b[0..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&version.to_le_bytes());
    let mut x = mix(lba ^ mix(version));
    for chunk in b[16..].chunks_mut(8) {
        x = mix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    b
}

/// The model of what the host was promised, per LBA.
struct Model {
    /// The last completed write or trim.
    durable: Vec<Version>,
    /// Versions of the commands in flight, per LBA.
    in_flight: Vec<Vec<Version>>,
    /// Whether a GRAPH_ATTACH completed, and whether one is in flight.
    attached: bool,
    attach_in_flight: bool,
}

impl Model {
    fn new(lbas: u64) -> Self {
        Self {
            durable: vec![Version::Zero; lbas as usize],
            in_flight: vec![Vec::new(); lbas as usize],
            attached: false,
            attach_in_flight: false,
        }
    }

    /// Judges what LBA `lba` read back as.
    fn judge(&self, lba: u64, got: &[u8]) -> Result<(), String> {
        let allowed = std::iter::once(self.durable[lba as usize])
            .chain(self.in_flight[lba as usize].iter().copied());
        let mut names = Vec::new();
        for v in allowed {
            let matches = match v {
                Version::Zero => got.iter().all(|b| *b == 0),
                Version::Data(version) => got == block_contents(lba, version),
            };
            if matches {
                return Ok(());
            }
            names.push(v);
        }
        let seen = match got.iter().all(|b| *b == 0) {
            true => "zeros".to_string(),
            false => format!(
                "a block naming lba {} version {}",
                u64::from_le_bytes(got[0..8].try_into().unwrap_or([0; 8])),
                u64::from_le_bytes(got[8..16].try_into().unwrap_or([0; 8]))
            ),
        };
        Err(format!("lba {lba} reads as {seen}; allowed: {names:?}"))
    }
}

/// The workload's random stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One simulated run: the device, its host, the model, and the workload's state.
struct Run {
    seed: u64,
    /// The media faults injected.
    faults: Option<NandFaults>,
    fw: Fw,
    host: SimHost,
    model: Model,
    rng: Rng,
    lbas: u64,
    blocks_per_page: u64,
    next_cid: u16,
    next_version: u64,
    /// Commands in flight: cid → command.
    in_flight: BTreeMap<u16, Command>,
    outcome: SeedOutcome,
    steps: u64,
}

/// Runs seed `seed`: the workload, the cut, the boot and the check.
pub fn run_seed(seed: u64) -> Result<SeedOutcome, SeedFailure> {
    let fail = |message: String| SeedFailure { seed, message };
    let mut rng = Rng(mix(seed ^ 0x5EED_C0DE));
    let faults = NandFaults {
        seed: rng.next(),
        read_fail_ppm: [0, 2_000, 20_000][rng.below(3) as usize],
        uncorrectable_ppm: [0, 0, 0, 2_000][rng.below(4) as usize],
        program_fail_ppm: [0, 500, 5_000][rng.below(3) as usize],
        erase_fail_ppm: [0, 1_000, 20_000][rng.below(3) as usize],
        spike_ppm: 20_000,
        spike_ns: 2_000_000,
    };
    let nand = NandArray::with_timing(geometry(), timing()).with_faults(faults);
    let config = firmware_config();
    let size = sagessd_firmware::dram_size_bytes(&config, &geometry())
        .map_err(|e| fail(format!("{e:?}")))?;
    let fw = Fw::new(config, nand, vec![0u8; size]).map_err(|e| fail(format!("{e:?}")))?;
    let lbas = fw.namespace_block_count();
    let mut run = Run {
        seed,
        faults: Some(faults),
        fw,
        host: SimHost::default(),
        model: Model::new(lbas),
        rng,
        lbas,
        blocks_per_page: u64::from(geometry().page_size_bytes) / BLOCK as u64,
        next_cid: 0,
        next_version: 1,
        in_flight: BTreeMap::new(),
        outcome: SeedOutcome::default(),
        steps: 0,
    };
    run.workload().map_err(fail)?;
    let mut run = run.cut_and_boot().map_err(fail)?;
    run.check().map_err(fail)?;
    Ok(run.outcome)
}

impl Run {
    /// Submits commands and runs the device until the cut.
    fn workload(&mut self) -> Result<(), String> {
        let commands = 50 + self.rng.below(700);
        let depth = 1 + self.rng.below(8) as usize;
        let cut_after = 1 + self.rng.below(commands);
        let extra_steps = self.rng.below(400);
        let mut submitted = 0u64;
        let mut after_cut_point = 0u64;
        loop {
            while submitted < commands && self.in_flight.len() < depth {
                let cmd = self.draw();
                if !self.submit(cmd)? {
                    break;
                }
                submitted += 1;
            }
            self.reap()?;
            if submitted >= cut_after {
                if after_cut_point >= extra_steps {
                    break;
                }
                after_cut_point += 1;
            }
            if !self.step()? && submitted >= commands && self.in_flight.is_empty() {
                break;
            }
        }
        self.outcome.commands = submitted;
        self.outcome.in_flight = self.in_flight.len() as u64;
        self.outcome.blocks_erased = self.fw.ftl_stats().blocks_erased;
        self.outcome.checkpoints = self.fw.checkpoint_stats().written;
        Ok(())
    }

    /// One step of the device: a poll, or (when the firmware has nothing to do) the next flash
    /// event. Returns whether anything is left to happen.
    fn step(&mut self) -> Result<bool, String> {
        self.steps += 1;
        if self.steps > STEP_LIMIT {
            return Err(format!(
                "stuck after {STEP_LIMIT} steps {}: {:?} {:?}, {} commands in flight, quiet {}",
                if self.outcome.boot.pages_read > 0 {
                    "after the boot"
                } else {
                    "before the cut"
                },
                self.fw.ftl_stats(),
                self.fw.checkpoint_stats(),
                self.in_flight.len(),
                self.fw.is_quiet(),
            ));
        }
        if self.fw.poll(&mut self.host) {
            return Ok(true);
        }
        let nand = self.fw.flash_mut();
        nand.issue_staged(nand.now_ns());
        Ok(nand.process_next_event().is_some())
    }

    /// A random command whose range overlaps no flash page of a command in flight (the model
    /// needs each LBA's in-flight versions to be unordered among themselves only).
    fn draw(&mut self) -> Command {
        let roll = self.rng.below(100);
        let blocks = 1 + self.rng.below(32) as u32;
        let slba = self.rng.below(self.lbas - u64::from(blocks));
        match roll {
            0..=59 => {
                let version = self.next_version;
                self.next_version += 1;
                Command::Write {
                    slba,
                    blocks,
                    version,
                }
            }
            60..=64 => Command::Trim {
                slba,
                blocks: blocks * 4,
            },
            65..=69 => Command::Zeroes {
                slba,
                blocks,
                deallocate: self.rng.below(2) == 0,
            },
            70..=84 => Command::Read { slba, blocks },
            85..=93 => Command::Flush,
            94..=96 => Command::Attach,
            _ => Command::Sample,
        }
    }

    /// The LBA range a command touches, widened to whole flash pages.
    fn pages_of(&self, cmd: &Command) -> Option<(u64, u64)> {
        let (slba, blocks) = match *cmd {
            Command::Write { slba, blocks, .. }
            | Command::Read { slba, blocks }
            | Command::Zeroes { slba, blocks, .. } => (slba, blocks),
            Command::Trim { slba, blocks } => (slba, blocks.min((self.lbas - slba) as u32)),
            _ => return None,
        };
        let p = self.blocks_per_page;
        Some((slba / p, (slba + u64::from(blocks)).div_ceil(p)))
    }

    /// Submits `cmd` unless it overlaps a command in flight; returns whether it did.
    fn submit(&mut self, cmd: Command) -> Result<bool, String> {
        if let Some((a0, a1)) = self.pages_of(&cmd) {
            let overlaps = self.in_flight.values().any(|other| {
                self.pages_of(other)
                    .is_some_and(|(b0, b1)| a0 < b1 && b0 < a1)
            });
            if overlaps {
                return Ok(false);
            }
        }
        if matches!(cmd, Command::Attach) && self.model.attach_in_flight {
            return Ok(false);
        }
        let (sqe, data) = match cmd {
            Command::Write {
                slba,
                blocks,
                version,
            } => {
                let mut data = Vec::with_capacity(blocks as usize * BLOCK);
                for lba in slba..slba + u64::from(blocks) {
                    data.extend_from_slice(&block_contents(lba, version));
                    self.model.in_flight[lba as usize].push(Version::Data(version));
                }
                (SubmissionEntry::read_write(true, 0, 1, slba, blocks), data)
            }
            Command::Zeroes {
                slba,
                blocks,
                deallocate,
            } => {
                for lba in self.zeroed(&cmd) {
                    self.model.in_flight[lba as usize].push(Version::Zero);
                }
                (
                    SubmissionEntry::write_zeroes(0, 1, slba, blocks, deallocate),
                    Vec::new(),
                )
            }
            Command::Trim { slba, blocks } => {
                let blocks = blocks.min((self.lbas - slba) as u32);
                let range = DsmRange {
                    attributes: 0.into(),
                    block_count: blocks.into(),
                    slba: slba.into(),
                };
                for lba in self.zeroed(&cmd) {
                    self.model.in_flight[lba as usize].push(Version::Zero);
                }
                // One range (CDW10 = count − 1), attribute deallocate (CDW11 bit 2).
                let mut sqe = SubmissionEntry::new(io_opcode::DATASET_MANAGEMENT, 0, 1);
                sqe.cdw10 = 0.into();
                sqe.cdw11 = 0x4.into();
                (sqe, range.as_bytes().to_vec())
            }
            Command::Read { slba, blocks } => (
                SubmissionEntry::read_write(false, 0, 1, slba, blocks),
                vec![0xEE; blocks as usize * BLOCK],
            ),
            Command::Flush => (SubmissionEntry::new(io_opcode::FLUSH, 0, 1), Vec::new()),
            // Submitted by `reap` for the job it drops, never drawn.
            Command::Discard => return Ok(false),
            Command::Attach => {
                self.model.attach_in_flight = true;
                let descriptor = GraphDescriptor {
                    node_count: 100,
                    edge_count: 300,
                    id_width_bytes: 4,
                    indptr: LbaRange {
                        slba: 0,
                        block_count: 2,
                    },
                    indices: LbaRange {
                        slba: 8,
                        block_count: 3,
                    },
                    features: None,
                };
                (
                    SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 0, 1, 64, 0),
                    descriptor.to_wire().as_bytes().to_vec(),
                )
            }
            Command::Sample => {
                let targets = [self.rng.below(100), self.rng.below(100)];
                let mut config = vec![0u8; ns_config_size_bytes(targets.len())];
                encode_ns_config(self.rng.next(), &[4, 4], &targets, &mut config)
                    .ok_or("an NS_config that does not fit its buffer")?;
                (
                    SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, config.len() as u32, 0),
                    config,
                )
            }
        };
        let cid = self.send(sqe, data)?;
        self.in_flight.insert(cid, cmd);
        Ok(true)
    }

    /// Hands `sqe` (its cid replaced by a fresh one) and its host buffer to the firmware,
    /// stepping the device while every command slot is busy; returns the cid.
    fn send(&mut self, mut sqe: SubmissionEntry, data: Vec<u8>) -> Result<u16, String> {
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        let cid = self.next_cid;
        sqe.cid = cid.into();
        self.host.buffers.insert(cid, data);
        let id = CommandId { sq_id: 1, cid };
        while self.fw.submit(&mut self.host, id, &sqe).is_err() {
            self.step()?;
        }
        Ok(cid)
    }

    /// The LBAs a trim or Write Zeroes may leave reading as zeros: a Write Zeroes' whole range;
    /// only the flash pages inside a trim's range (a trim deallocates whole pages only).
    fn zeroed(&self, cmd: &Command) -> std::ops::Range<u64> {
        match *cmd {
            Command::Zeroes { slba, blocks, .. } => slba..slba + u64::from(blocks),
            Command::Trim { slba, blocks } => {
                let blocks = blocks.min((self.lbas - slba) as u32);
                let p = self.blocks_per_page;
                let first = slba.div_ceil(p) * p;
                let end = (slba + u64::from(blocks)) / p * p;
                first..end.max(first)
            }
            _ => 0..0,
        }
    }

    /// Takes the completions the host has seen into the model.
    fn reap(&mut self) -> Result<(), String> {
        while let Some((cid, cqe)) = self.host.done.pop_front() {
            let data = self.host.buffers.remove(&cid).unwrap_or_default();
            let Some(cmd) = self.in_flight.remove(&cid) else {
                return Err(format!(
                    "a completion for cid {cid}, which is not in flight"
                ));
            };
            let status = cqe.status();
            match cmd {
                Command::Write {
                    slba,
                    blocks,
                    version,
                } => {
                    self.unrecoverable(status)?;
                    self.outcome.writes_completed += u64::from(status.is_success());
                    self.outcome.commands_failed += u64::from(!status.is_success());
                    for lba in slba..slba + u64::from(blocks) {
                        let v = &mut self.model.in_flight[lba as usize];
                        v.retain(|x| *x != Version::Data(version));
                        if status.is_success() {
                            self.model.durable[lba as usize] = Version::Data(version);
                        } else {
                            // A failed write may have landed on some pages: keep it possible.
                            v.push(Version::Data(version));
                        }
                    }
                }
                Command::Trim { .. } | Command::Zeroes { .. } => {
                    self.outcome.commands_failed += u64::from(!status.is_success());
                    for lba in self.zeroed(&cmd) {
                        let v = &mut self.model.in_flight[lba as usize];
                        if let Some(i) = v.iter().position(|x| *x == Version::Zero) {
                            v.remove(i);
                        }
                        if status.is_success() {
                            self.model.durable[lba as usize] = Version::Zero;
                        } else {
                            v.push(Version::Zero);
                        }
                    }
                }
                Command::Read { slba, blocks } => {
                    if self.unrecoverable(status)? {
                        continue;
                    }
                    if !status.is_success() {
                        return Err(format!("read of lba {slba}+{blocks} failed: {status:?}"));
                    }
                    for (i, got) in data.chunks(BLOCK).enumerate() {
                        self.model.judge(slba + i as u64, got)?;
                    }
                }
                Command::Flush => {
                    if !status.is_success() {
                        return Err(format!("flush failed: {status:?}"));
                    }
                }
                Command::Attach => {
                    self.model.attach_in_flight = false;
                    if status.is_success() {
                        self.model.attached = true;
                    } else {
                        return Err(format!("GRAPH_ATTACH failed: {status:?}"));
                    }
                }
                Command::Sample => {
                    let no_graph = Status::from(VendorStatus::NoGraphAttached);
                    if self.model.attached && status == no_graph {
                        return Err("a sampling job found no graph after an attach".into());
                    }
                    if status.is_success() {
                        // Let the job run; a discarding collect drops it once it has finished.
                        let sqe = SubmissionEntry::ns_discard(0, 1, cqe.result.get());
                        let cid = self.send(sqe, Vec::new())?;
                        self.in_flight.insert(cid, Command::Discard);
                    }
                }
                Command::Discard => {}
            }
        }
        Ok(())
    }

    /// Cuts the power and boots a new firmware from the NAND; the host loses its queues.
    fn cut_and_boot(self) -> Result<Self, String> {
        let config = *self.fw.config();
        let mut outcome = self.outcome;
        outcome.read_retries = self.fw.read_retry_stats().retries;
        let (mut nand, _dram) = self.fw.into_parts();
        outcome.cut = nand.power_cut(self.seed);
        // The boot and the check keep the read faults (the firmware must read past transient
        // ones) but no program or erase fails: what the boot builds on is what the cut left (a
        // failed boot erase is covered by the firmware's own tests).
        nand.set_faults(self.faults.map(|f| NandFaults {
            program_fail_ppm: 0,
            erase_fail_ppm: 0,
            ..f
        }));
        let size = sagessd_firmware::dram_size_bytes(&config, &geometry())
            .map_err(|e| format!("{e:?}"))?;
        let (fw, boot) = Fw::recover(
            config,
            nand,
            vec![0u8; size],
            &mut NandArray::wait_for_completion,
        )
        .map_err(|e| format!("boot failed: {e:?}"))?;
        outcome.read_retries += boot.read_retries;
        outcome.boot = boot;
        Ok(Self {
            fw,
            host: SimHost::default(),
            in_flight: BTreeMap::new(),
            outcome,
            steps: 0,
            ..self
        })
    }

    /// Reads every LBA back and judges it; checks the graph is attached if an attach completed.
    fn check(&mut self) -> Result<(), String> {
        let chunk = 32u32;
        let mut lba = 0u64;
        while lba < self.lbas {
            let blocks = chunk.min((self.lbas - lba) as u32);
            let got = self.exec(
                SubmissionEntry::read_write(false, 0, 1, lba, blocks),
                vec![0xEE; blocks as usize * BLOCK],
            )?;
            if got.0 == Status::UNRECOVERED_READ_ERROR {
                // Block by block: those that read are judged, the others counted (and allowed
                // only after the media made a page uncorrectable).
                for one in lba..lba + u64::from(blocks) {
                    let (status, data) = self.exec(
                        SubmissionEntry::read_write(false, 0, 1, one, 1),
                        vec![0xEE; BLOCK],
                    )?;
                    if !self.unrecoverable(status)? {
                        self.model.judge(one, &data)?;
                    }
                }
            } else if !got.0.is_success() {
                return Err(format!(
                    "after the boot, a read of lba {lba}+{blocks} failed: {:?}",
                    got.0
                ));
            } else {
                for (i, block) in got.1.chunks(BLOCK).enumerate() {
                    self.model.judge(lba + i as u64, block)?;
                }
            }
            lba += u64::from(blocks);
        }
        self.outcome.lbas_checked = self.lbas;
        self.outcome.read_retries += self.fw.read_retry_stats().retries;
        let nand = self.fw.flash().stats();
        self.outcome.media_read_failures = nand.read_failures;
        self.outcome.uncorrectable_pages = nand.uncorrectable_pages;
        if self.model.attached {
            let mut config = vec![0u8; ns_config_size_bytes(1)];
            encode_ns_config(1, &[2], &[1], &mut config)
                .ok_or("an NS_config that does not fit its buffer")?;
            let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, config.len() as u32, 0);
            let (status, _) = self.exec(sqe, config)?;
            if status == Status::from(VendorStatus::NoGraphAttached) {
                return Err("the attached graph was lost".into());
            }
        }
        Ok(())
    }

    /// Whether `status` is Unrecovered Read Error, counted; an error if no page has been made
    /// uncorrectable (then every read fault was transient, and the retries must have hidden it).
    fn unrecoverable(&mut self, status: Status) -> Result<bool, String> {
        if status != Status::UNRECOVERED_READ_ERROR {
            return Ok(false);
        }
        if self.fw.flash().stats().uncorrectable_pages == 0 {
            return Err(format!(
                "Unrecovered Read Error with no uncorrectable page: a transient read fault \
                 reached the host ({} media read failures so far)",
                self.fw.flash().stats().read_failures
            ));
        }
        self.outcome.unrecovered += 1;
        Ok(true)
    }

    /// Runs one command on the booted firmware to completion.
    fn exec(&mut self, sqe: SubmissionEntry, data: Vec<u8>) -> Result<(Status, Vec<u8>), String> {
        let cid = self.send(sqe, data)?;
        loop {
            if let Some(i) = self.host.done.iter().position(|(c, _)| *c == cid)
                && let Some((_, cqe)) = self.host.done.remove(i)
            {
                return Ok((
                    cqe.status(),
                    self.host.buffers.remove(&cid).unwrap_or_default(),
                ));
            }
            if !self.step()? {
                return Err(format!("command {cid} never completed after the boot"));
            }
        }
    }
}

/// The totals of a campaign over many seeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Campaign {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds whose check failed.
    pub failures: Vec<SeedFailure>,
    /// Commands submitted before the cuts (the seeds that passed, as every sum below).
    pub commands: u64,
    /// Writes completed before the cuts: each one promised durable, and found again.
    pub writes_completed: u64,
    /// Writes, trims and Write Zeroes failed with an error status before the cuts.
    pub commands_failed: u64,
    /// Commands in flight at the cuts.
    pub in_flight_at_cut: u64,
    /// Programs the cuts tore.
    pub torn_programs: u64,
    /// Erases the cuts tore.
    pub torn_erases: u64,
    /// Checkpoints the boots found torn and skipped.
    pub torn_checkpoints: u64,
    /// Pages the boots replayed.
    pub pages_replayed: u64,
    /// Seeds whose garbage collection had erased blocks before the cut.
    pub seeds_with_gc: u64,
    /// Seeds that had written a checkpoint before the cut.
    pub seeds_with_checkpoints: u64,
    /// LBAs read back and judged after the boots.
    pub lbas_checked: u64,
    /// Reads the media failed, transiently or of an uncorrectable page.
    pub media_read_failures: u64,
    /// Flash reads the firmware issued again after a failed attempt.
    pub read_retries: u64,
    /// Pages the media left uncorrectable.
    pub uncorrectable_pages: u64,
    /// Commands and LBAs that still failed with Unrecovered Read Error (each in a seed with an
    /// uncorrectable page).
    pub unrecovered: u64,
}

/// Runs seeds `first..first + count` and sums what they did.
pub fn run_campaign(first: u64, count: u64) -> Campaign {
    let mut c = Campaign::default();
    for seed in first..first + count {
        c.seeds += 1;
        match run_seed(seed) {
            Ok(o) => {
                c.commands += o.commands;
                c.writes_completed += o.writes_completed;
                c.commands_failed += o.commands_failed;
                c.in_flight_at_cut += o.in_flight;
                c.torn_programs += u64::from(o.cut.torn_programs);
                c.torn_erases += u64::from(o.cut.torn_erases);
                c.torn_checkpoints += u64::from(o.boot.torn_checkpoints);
                c.pages_replayed += o.boot.pages_replayed;
                c.seeds_with_gc += u64::from(o.blocks_erased > 0);
                c.seeds_with_checkpoints += u64::from(o.checkpoints > 0);
                c.lbas_checked += o.lbas_checked;
                c.media_read_failures += o.media_read_failures;
                c.read_retries += o.read_retries;
                c.uncorrectable_pages += o.uncorrectable_pages;
                c.unrecovered += o.unrecovered;
            }
            Err(f) => c.failures.push(f),
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_seeds_pass_and_a_wrong_block_is_caught() {
        let c = run_campaign(0, 20);
        assert!(c.failures.is_empty(), "{}", c.failures[0]);
        assert!(c.writes_completed > 0 && c.lbas_checked > 0, "{c:?}");
        // The judge itself: another version, another LBA's block, a torn mix, stray zeros.
        let mut model = Model::new(4);
        model.durable[1] = Version::Data(7);
        model.in_flight[1].push(Version::Data(9));
        assert!(model.judge(1, &block_contents(1, 7)).is_ok());
        assert!(model.judge(1, &block_contents(1, 9)).is_ok());
        assert!(model.judge(1, &block_contents(1, 8)).is_err());
        assert!(model.judge(1, &block_contents(2, 7)).is_err());
        let mut mix = block_contents(1, 7);
        mix[256..].copy_from_slice(&block_contents(1, 9)[256..]);
        assert!(model.judge(1, &mix).is_err());
        assert!(model.judge(1, &[0u8; BLOCK]).is_err());
        assert!(model.judge(0, &[0u8; BLOCK]).is_ok());
    }
}
