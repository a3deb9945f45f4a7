//! Fuzz body `firmware_commands`: a sequence of NVMe commands and their payloads into the
//! firmware of an emulated SSD (the small test device), read from the input field by field.
//!
//! Most steps are well-formed commands built by the harness (Read, Write, Write Zeroes,
//! Dataset Management, Flush, a small CSR graph written and attached, NS_SUBMIT and NS_COLLECT
//! with encoded NS_configs), so that the firmware gets past its magic numbers and length checks
//! into the FTL and the sampling engine; the others are raw submission entries with arbitrary
//! fields and buffers, on the admin or the I/O queue, left in flight while later steps run.
//!
//! Checked, besides "no panic": every well-formed Read, Write, Write Zeroes, deallocate and
//! Flush succeeds; a Read returns what a model of the namespace (a map of the blocks the
//! harness wrote, independent of the firmware) says, as long as no raw command could have
//! changed the data; every command submitted completes exactly once; the device settles.

use std::collections::BTreeMap;

use sagessd_abi::graph::{FeatureRegion, GraphDescriptor, LbaRange};
use sagessd_abi::ns_config::{encode_ns_config, ns_config_size_bytes};
use sagessd_abi::nvme::{DsmRange, SubmissionEntry, io_opcode};
use sagessd_emulator::Ssd;
use zerocopy::{FromBytes, IntoBytes};

use super::input::Input;

/// Most steps one input runs (each runs to completion, or is left in flight if raw).
const MAX_STEPS: usize = 48;
/// Command ids of the harness's own commands have the top bit set; raw ones never do, so a raw
/// command cannot be mistaken for (or conflict with) a well-formed one.
const OWN_CID: u16 = 0x8000;

/// The namespace as the harness wrote it: block contents by LBA (absent: zeros).
struct Model {
    blocks: BTreeMap<u64, Vec<u8>>,
    block_bytes: usize,
    blocks_per_page: u64,
    /// False once a raw command that may change data was submitted: reads are then only
    /// checked for succeeding.
    trusted: bool,
}

impl Model {
    fn write(&mut self, slba: u64, data: &[u8]) {
        for (i, block) in data.chunks(self.block_bytes).enumerate() {
            self.blocks.insert(slba + i as u64, block.to_vec());
        }
    }

    fn zero(&mut self, lbas: std::ops::Range<u64>) {
        for lba in lbas {
            self.blocks.remove(&lba);
        }
    }

    /// Checks what a Read of `slba` returned.
    fn check(&self, slba: u64, data: &[u8]) {
        if !self.trusted {
            return;
        }
        for (i, got) in data.chunks(self.block_bytes).enumerate() {
            let lba = slba + i as u64;
            match self.blocks.get(&lba) {
                Some(want) => assert_eq!(got, &want[..], "lba {lba} is not what was written"),
                None => assert!(
                    got.iter().all(|b| *b == 0),
                    "lba {lba} should read as zeros"
                ),
            }
        }
    }
}

/// What one input reached, for tests that check a seed gets where it should.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Reads whose data the model checked.
    pub reads_checked: u32,
    /// GRAPH_ATTACHes the firmware accepted.
    pub graphs_attached: u32,
    /// NS_SUBMITs accepted.
    pub jobs_submitted: u32,
    /// NS_COLLECTs that succeeded.
    pub jobs_collected: u32,
    /// Raw commands submitted (each completed).
    pub raw_commands: u32,
}

/// The device, the model, and the commands in flight.
struct Harness {
    ssd: Ssd,
    model: Model,
    namespace_blocks: u64,
    max_blocks: u32,
    next_cid: u16,
    /// Raw commands submitted and not yet seen completing.
    raw_in_flight: usize,
    /// Tags NS_SUBMIT returned.
    tags: Vec<u32>,
    reached: Reached,
}

impl Harness {
    fn new() -> Self {
        let ssd = Ssd::new(&crate::small_config()).expect("the small device starts");
        let block_bytes = ssd.block_size_bytes() as usize;
        let page_bytes = crate::small_config().nand.page_size_bytes as usize;
        Self {
            namespace_blocks: ssd.namespace_block_count(),
            max_blocks: ssd.max_transfer_bytes() / block_bytes as u32,
            model: Model {
                blocks: BTreeMap::new(),
                block_bytes,
                blocks_per_page: (page_bytes / block_bytes) as u64,
                trusted: true,
            },
            ssd,
            next_cid: 0,
            raw_in_flight: 0,
            tags: Vec::new(),
            reached: Reached::default(),
        }
    }

    /// A range of 1..=MDTS blocks inside the namespace.
    fn range(&self, input: &mut Input) -> (u64, u32) {
        let blocks = 1 + u32::from(input.u8()) % self.max_blocks;
        let slba = u64::from(input.u16()) % (self.namespace_blocks - u64::from(blocks) + 1);
        (slba, blocks)
    }

    /// Runs one of the harness's commands to completion: (status is success, result, data).
    fn run(&mut self, mut sqe: SubmissionEntry, data: Vec<u8>) -> (bool, u32, Vec<u8>) {
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.cid = (OWN_CID | self.next_cid).into();
        let done = self
            .ssd
            .execute(1, sqe, data)
            .unwrap_or_else(|e| panic!("opcode 0x{:02x} never completed: {e}", sqe.opcode));
        let status = done.cqe.status();
        (status.is_success(), done.cqe.result.get(), done.data)
    }

    /// Runs a data command that must succeed.
    fn must(&mut self, sqe: SubmissionEntry, data: Vec<u8>) -> Vec<u8> {
        let opcode = sqe.opcode;
        let (ok, _, data) = self.run(sqe, data);
        assert!(ok, "a well-formed command (opcode 0x{opcode:02x}) failed");
        data
    }

    fn write(&mut self, slba: u64, data: Vec<u8>) {
        let blocks = (data.len() / self.model.block_bytes) as u32;
        self.model.write(slba, &data);
        self.must(SubmissionEntry::read_write(true, 0, 1, slba, blocks), data);
    }

    /// One step read from `input`.
    fn step(&mut self, input: &mut Input) {
        match input.u8() % 11 {
            0 => {
                let (slba, blocks) = self.range(input);
                let seed = input.u8();
                let bs = self.model.block_bytes;
                let data = (0..blocks as usize * bs)
                    .map(|i| seed ^ (i / bs) as u8 ^ (slba as u8).wrapping_add(i as u8))
                    .collect();
                self.write(slba, data);
            }
            1 => {
                let (slba, blocks) = self.range(input);
                let len = blocks as usize * self.model.block_bytes;
                let data = self.must(
                    SubmissionEntry::read_write(false, 0, 1, slba, blocks),
                    vec![0xA5; len],
                );
                self.model.check(slba, &data);
                self.reached.reads_checked += u32::from(self.model.trusted);
            }
            2 => {
                let (slba, blocks) = self.range(input);
                let sqe = SubmissionEntry::write_zeroes(0, 1, slba, blocks, input.flag());
                self.must(sqe, Vec::new());
                self.model.zero(slba..slba + u64::from(blocks));
            }
            3 => {
                let (slba, blocks) = self.range(input);
                let range = DsmRange {
                    attributes: 0.into(),
                    block_count: blocks.into(),
                    slba: slba.into(),
                };
                let mut sqe = SubmissionEntry::new(io_opcode::DATASET_MANAGEMENT, 0, 1);
                sqe.cdw11 = (1 << 2).into();
                self.must(sqe, range.as_bytes().to_vec());
                // Only the flash pages inside the range are deallocated.
                let p = self.model.blocks_per_page;
                let first = slba.div_ceil(p) * p;
                let end = (slba + u64::from(blocks)) / p * p;
                self.model.zero(first..end.max(first));
            }
            4 => {
                self.must(SubmissionEntry::new(io_opcode::FLUSH, 0, 1), Vec::new());
            }
            5 => self.graph(input),
            6 => {
                let targets: Vec<u64> = (0..1 + input.u8() % 8)
                    .map(|_| u64::from(input.u16()))
                    .collect();
                let fanouts: Vec<u16> = (0..1 + input.u8() % 3)
                    .map(|_| u16::from(input.u8() % 9))
                    .collect();
                let mut config = vec![0u8; ns_config_size_bytes(targets.len())];
                let seed = input.u64();
                encode_ns_config(seed, &fanouts, &targets, &mut config).expect("sized for it");
                let sqe =
                    SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, config.len() as u32, 0);
                if let (true, tag, _) = self.run(sqe, config) {
                    self.tags.push(tag);
                    self.reached.jobs_submitted += 1;
                }
            }
            7 => {
                let pick = input.u8();
                let tag = match self.tags.is_empty() || pick == 0xFF {
                    true => input.u32(),
                    false => self.tags[usize::from(pick) % self.tags.len()],
                };
                let len = 4 * (1 + usize::from(input.u16()) % 4096);
                let mut sqe = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 0, 1, len as u32, tag);
                sqe.cdw14 = input.u32().into();
                sqe.cdw15 = u32::from(input.u8() % 4).into();
                if self.run(sqe, vec![0; len]).0 {
                    self.reached.jobs_collected += 1;
                }
            }
            8 | 9 => {
                let sq_id = u16::from(input.u8() % 2);
                let mut raw = [0u8; 64];
                let fields = input.bytes(64);
                raw[..fields.len()].copy_from_slice(fields);
                let mut sqe = SubmissionEntry::read_from_bytes(&raw).expect("64 bytes");
                sqe.cid = (sqe.cid.get() & !OWN_CID).into();
                let len = usize::from(input.u16());
                let mut buffer = input.bytes(len).to_vec();
                buffer.resize(len, 0);
                if sq_id == 1
                    && matches!(
                        sqe.opcode,
                        io_opcode::WRITE | io_opcode::WRITE_ZEROES | io_opcode::DATASET_MANAGEMENT
                    )
                {
                    self.model.trusted = false;
                }
                self.ssd
                    .submit(sq_id, sqe, buffer)
                    .expect("the emulator takes the command");
                self.raw_in_flight += 1;
                self.reached.raw_commands += 1;
            }
            _ => self.drain(),
        }
    }

    /// A small CSR graph built from the input, written and attached (GRAPH_ATTACH may refuse
    /// it: the input chooses sizes and places freely).
    fn graph(&mut self, input: &mut Input) {
        let bs = self.model.block_bytes;
        let nodes = 1 + u64::from(input.u8() % 64);
        let mut indptr = vec![0u64];
        let mut indices = Vec::new();
        for _ in 0..nodes {
            let degree = input.u8() % 8;
            for _ in 0..degree {
                // Mostly inside the graph; a few ids past its end.
                indices.push(u32::from(input.u8()) % (nodes as u32 + 2));
            }
            indptr.push(indices.len() as u64);
        }
        let to_blocks = |mut bytes: Vec<u8>| {
            bytes.resize(bytes.len().div_ceil(bs).max(1) * bs, 0);
            bytes
        };
        let indptr_bytes = to_blocks(indptr.iter().flat_map(|p| p.to_le_bytes()).collect());
        let indices_bytes = to_blocks(indices.iter().flat_map(|i| i.to_le_bytes()).collect());
        let indptr_at = u64::from(input.u8()) * 4;
        let indices_at = indptr_at + (indptr_bytes.len() / bs) as u64 + u64::from(input.u8() % 4);
        let fits =
            |at: u64, bytes: &Vec<u8>| at + (bytes.len() / bs) as u64 <= self.namespace_blocks;
        if !fits(indptr_at, &indptr_bytes) || !fits(indices_at, &indices_bytes) {
            return;
        }
        let (indptr_blocks, indices_blocks) = (indptr_bytes.len() / bs, indices_bytes.len() / bs);
        for (at, bytes) in [(indptr_at, indptr_bytes), (indices_at, indices_bytes)] {
            for (i, chunk) in bytes.chunks(self.max_blocks as usize * bs).enumerate() {
                self.write(at + (i * self.max_blocks as usize) as u64, chunk.to_vec());
            }
        }
        let features = input.flag().then(|| FeatureRegion {
            range: LbaRange {
                slba: u64::from(input.u16()),
                block_count: u64::from(input.u16()),
            },
            row_bytes: u32::from(input.u16()),
        });
        let descriptor = GraphDescriptor {
            node_count: nodes + u64::from(input.u8() == 0xFF),
            edge_count: indices.len() as u64,
            id_width_bytes: 4,
            indptr: LbaRange {
                slba: indptr_at,
                block_count: indptr_blocks as u64,
            },
            indices: LbaRange {
                slba: indices_at,
                block_count: indices_blocks as u64,
            },
            features,
        };
        let mut wire = [0u8; 128];
        let n = descriptor.encode(&mut wire);
        let sqe = SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 0, 1, n as u32, 0);
        if self.run(sqe, wire[..n].to_vec()).0 {
            self.reached.graphs_attached += 1;
        }
    }

    /// Waits for every raw command in flight: each must complete, once.
    fn drain(&mut self) {
        while self.raw_in_flight > 0 {
            match self.ssd.reap() {
                Ok(Some(_)) => self.raw_in_flight -= 1,
                Ok(None) => panic!("{} raw commands never completed", self.raw_in_flight),
                Err(e) => panic!("the device stalled: {e}"),
            }
        }
        assert!(
            matches!(self.ssd.reap(), Ok(None)),
            "a completion nobody submitted"
        );
    }
}

/// The target's body (see the module documentation).
pub fn firmware_commands(data: &[u8]) {
    run(data);
}

/// [`firmware_commands`], saying what the input reached.
pub fn run(data: &[u8]) -> Reached {
    let mut input = Input::new(data);
    let mut h = Harness::new();
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        h.step(&mut input);
    }
    h.drain();
    h.ssd.settle().expect("the device settles");
    h.reached
}
