//! Firmware tests through the NVMe interface, over the in-memory flash fake.

use std::collections::BTreeMap;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;
use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::identify::{ControllerInfo, NamespaceInfo};
use sagessd_abi::ns_config::{NsLimits, encode_ns_config, ns_config_size_bytes};
use sagessd_abi::nvme::{
    CompletionEntry, Status, SubmissionEntry, VendorStatus, admin_opcode, feature, io_opcode,
    log_page,
};
use sagessd_abi::subgraph::SubgraphView;
use zerocopy::IntoBytes;

use crate::fake::MemFlash;
use crate::hal::{Flash, Geometry};
use crate::host::{CommandId, DmaError, HostInterface};
use crate::{Firmware, FirmwareConfig};

/// Host memory and completion queue of a test.
#[derive(Default)]
struct TestHost {
    buffers: BTreeMap<(u16, u16), Vec<u8>>,
    completions: Vec<(CommandId, CompletionEntry)>,
}

impl HostInterface for TestHost {
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError> {
        let buf = self.buffers.get(&(cmd.sq_id, cmd.cid)).ok_or(DmaError)?;
        dst.copy_from_slice(buf.get(offset..offset + dst.len()).ok_or(DmaError)?);
        Ok(())
    }

    fn dma_to_host(&mut self, cmd: CommandId, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        let buf = self
            .buffers
            .get_mut(&(cmd.sq_id, cmd.cid))
            .ok_or(DmaError)?;
        buf.get_mut(offset..offset + src.len())
            .ok_or(DmaError)?
            .copy_from_slice(src);
        Ok(())
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        self.completions.push((cmd, cqe));
    }
}

type Fw = Firmware<MemFlash, Vec<u8>>;

pub(crate) struct Device {
    pub fw: Fw,
    host: TestHost,
    next_cid: u16,
}

impl Device {
    pub fn new(geometry: Geometry, config: FirmwareConfig, seed: u64) -> Self {
        let size = crate::dram_size_bytes(&config, &geometry).unwrap();
        let fw = Fw::new(config, MemFlash::new(geometry, 32, seed), vec![0u8; size]).unwrap();
        Self {
            fw,
            host: TestHost::default(),
            next_cid: 0,
        }
    }

    /// Submits `sqe` (its cid replaced) with host buffer `data`; returns the cid.
    fn submit(&mut self, sq_id: u16, mut sqe: SubmissionEntry, data: Vec<u8>) -> CommandId {
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.cid = self.next_cid.into();
        let id = CommandId {
            sq_id,
            cid: self.next_cid,
        };
        self.host.buffers.insert((sq_id, id.cid), data);
        while self.fw.submit(&mut self.host, id, &sqe).is_err() {
            assert!(self.fw.poll(&mut self.host), "busy and making no progress");
        }
        id
    }

    /// Submits a write of `data` at `slba` without waiting for it.
    pub fn submit_write(&mut self, slba: u64, data: &[u8]) -> CommandId {
        let blocks = (data.len() / self.fw.block_size_bytes() as usize) as u32;
        self.submit(
            1,
            SubmissionEntry::read_write(true, 0, 1, slba, blocks),
            data.to_vec(),
        )
    }

    /// Whether `id` has completed (successfully).
    pub fn is_complete(&self, id: CommandId) -> bool {
        self.host
            .completions
            .iter()
            .any(|(c, cqe)| *c == id && cqe.status().is_success())
    }

    /// One poll.
    pub fn poll_once(&mut self) {
        self.fw.poll(&mut self.host);
    }

    /// Polls until `id` completes; returns its completion and host buffer.
    fn wait(&mut self, id: CommandId) -> (CompletionEntry, Vec<u8>) {
        for _ in 0..10_000_000 {
            if let Some(i) = self.host.completions.iter().position(|(c, _)| *c == id) {
                let (_, cqe) = self.host.completions.remove(i);
                return (cqe, self.host.buffers.remove(&(id.sq_id, id.cid)).unwrap());
            }
            self.fw.poll(&mut self.host);
        }
        panic!("command {id:?} never completed\n{}", self.fw.describe());
    }

    fn exec(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> (CompletionEntry, Vec<u8>) {
        let id = self.submit(sq_id, sqe, data);
        self.wait(id)
    }

    /// Polls until the firmware is quiet (background GC finished).
    pub fn settle(&mut self) {
        for _ in 0..10_000_000 {
            if self.fw.is_quiet() {
                return;
            }
            self.fw.poll(&mut self.host);
        }
        panic!("never quiet\n{}", self.fw.describe());
    }

    /// A new firmware booted (recovered) from a copy of this device's flash as it is now, with
    /// the operations in flight cut as a power loss drawn from `cut_seed` would cut them.
    pub fn power_cycle(&self, cut_seed: u64) -> Result<Device, crate::RestoreError> {
        let mut flash = self.fw.flash().clone();
        flash.power_cut(cut_seed, self.fw.dram_bytes());
        Self::boot(*self.fw.config(), flash)
    }

    /// A firmware recovered from `flash`.
    pub fn boot(config: FirmwareConfig, flash: MemFlash) -> Result<Device, crate::RestoreError> {
        let size = crate::dram_size_bytes(&config, &flash.geometry()).unwrap();
        let (fw, _) = Fw::recover(config, flash, vec![0u8; size], &mut |_| {})?;
        Ok(Self::from_firmware(fw))
    }

    /// A device around a firmware already booted.
    pub fn from_firmware(fw: Fw) -> Self {
        Self {
            fw,
            host: TestHost::default(),
            next_cid: 0,
        }
    }

    pub fn write(&mut self, slba: u64, data: &[u8]) -> Status {
        let blocks = (data.len() / self.fw.block_size_bytes() as usize) as u32;
        self.exec(
            1,
            SubmissionEntry::read_write(true, 0, 1, slba, blocks),
            data.to_vec(),
        )
        .0
        .status()
    }

    pub fn read(&mut self, slba: u64, blocks: u32) -> (Status, Vec<u8>) {
        let len = (blocks * self.fw.block_size_bytes()) as usize;
        let (cqe, data) = self.exec(
            1,
            SubmissionEntry::read_write(false, 0, 1, slba, blocks),
            vec![0xAB; len],
        );
        (cqe.status(), data)
    }
}

/// 2 channels × 2 ways, 16 blocks of 8 pages of 2 KiB per die: 64 blocks, 512-B LBAs.
pub(crate) fn small_geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        dies_per_way: 1,
        blocks_per_die: 16,
        pages_per_block: 8,
        page_size_bytes: 2048,
    }
}

pub(crate) fn small_config() -> FirmwareConfig {
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
        // The FTL tests use the whole logical capacity; the tunnel test turns it on.
        tunnel: false,
        isp_window_pages: 4,
        ..FirmwareConfig::default()
    }
}

#[test]
fn identify_reports_namespace_and_limits() {
    let mut d = Device::new(small_geometry(), small_config(), 1);
    let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, 0);
    sqe.cdw10 = 1.into();
    let (cqe, data) = d.exec(0, sqe, vec![0; 4096]);
    assert!(cqe.status().is_success());
    assert_eq!(
        ControllerInfo::decode_limits(&data),
        Some(small_config().limits)
    );
    // ONCS: Write Zeroes and Dataset Management; no volatile write cache.
    assert_eq!(u16::from_le_bytes([data[520], data[521]]), 0b1100);
    assert_eq!(data[525], 0);
    let mdts = data[77];
    assert_eq!(4096 << mdts, small_config().max_transfer_bytes);
    let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, 0);
    sqe.cdw10 = 6.into();
    let (cqe, data) = d.exec(0, sqe, vec![0; 4096]);
    assert!(cqe.status().is_success());
    // WZSL: a Write Zeroes may be as large as a transfer.
    assert_eq!(data[1], mdts);
    let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, 1);
    sqe.cdw10 = 0.into();
    let (cqe, data) = d.exec(0, sqe, vec![0; 4096]);
    assert!(cqe.status().is_success());
    // DLFEAT: deallocated blocks read as zeros; Write Zeroes honours Deallocate.
    assert_eq!(data[33], 0b1001);
    let ns = NamespaceInfo::decode(&data).unwrap();
    assert_eq!(ns.block_count, d.fw.namespace_block_count());
    assert_eq!(ns.block_size_log2, 9);
    // (64 blocks − 2·4 dies − 1 − 2 checkpoint blocks) · 8 pages · 93 % · 4 LBAs per page
    assert_eq!(ns.block_count, 53 * 8 * 93 / 100 * 4);
}

#[test]
fn the_admin_commands_a_host_kernel_sends_at_attach_are_served() {
    let mut d = Device::new(small_geometry(), small_config(), 1);
    let identify = |d: &mut Device, cns: u32, nsid: u32| {
        let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, nsid);
        sqe.cdw10 = cns.into();
        d.exec(0, sqe, vec![0; 4096])
    };
    // Active namespace list: namespace 1, then nothing after it.
    let (cqe, data) = identify(&mut d, 2, 0);
    assert!(cqe.status().is_success());
    assert_eq!(&data[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&identify(&mut d, 2, 1).1[..4], &[0; 4]);
    // One NGUID descriptor, equal to Identify Namespace's NGUID.
    let (cqe, descs) = identify(&mut d, 3, 1);
    assert!(cqe.status().is_success());
    assert_eq!((descs[0], descs[1]), (2, 16));
    let ns = NamespaceInfo::decode(&identify(&mut d, 0, 1).1).unwrap();
    assert_eq!(&descs[4..20], &ns.nguid);
    assert_eq!(identify(&mut d, 3, 2).0.status(), Status::INVALID_NAMESPACE);
    assert!(identify(&mut d, 6, 0).0.status().is_success());
    assert_eq!(identify(&mut d, 0x1F, 0).0.status(), Status::INVALID_FIELD);

    // Number of Queues: 4 asked, 4 granted (0-based in both halves); read back the same.
    let mut set = SubmissionEntry::new(admin_opcode::SET_FEATURES, 0, 0);
    set.cdw10 = u32::from(feature::NUMBER_OF_QUEUES).into();
    set.cdw11 = (3 | (3 << 16)).into();
    let (cqe, _) = d.exec(0, set, vec![]);
    assert_eq!(
        (cqe.status(), cqe.result.get()),
        (Status::SUCCESS, 3 | (3 << 16))
    );
    let mut get = SubmissionEntry::new(admin_opcode::GET_FEATURES, 0, 0);
    get.cdw10 = u32::from(feature::NUMBER_OF_QUEUES).into();
    assert_eq!(d.exec(0, get, vec![]).0.result.get(), 3 | (3 << 16));
    get.cdw10 = u32::from(feature::VOLATILE_WRITE_CACHE).into();
    assert_eq!(d.exec(0, get, vec![]).0.status(), Status::INVALID_FIELD);
    set.cdw10 = (u32::from(feature::ARBITRATION) | (1 << 31)).into();
    assert_eq!(
        d.exec(0, set, vec![]).0.status(),
        Status::FEATURE_NOT_SAVEABLE
    );

    // SMART log counts the host's reads and writes; unknown logs are Invalid Log Page.
    d.write(0, &vec![7u8; 2 * 512]);
    let mut log = SubmissionEntry::new(admin_opcode::GET_LOG_PAGE, 0, 0xFFFF_FFFF);
    log.cdw10 = (u32::from(log_page::SMART_HEALTH) | (127 << 16)).into();
    let (cqe, page) = d.exec(0, log, vec![0; 512]);
    assert!(cqe.status().is_success());
    assert_eq!(u64::from_le_bytes(page[80..88].try_into().unwrap()), 1);
    log.cdw10 = (0x7Fu32 | (127 << 16)).into();
    assert_eq!(
        d.exec(0, log, vec![0; 512]).0.status(),
        Status::INVALID_LOG_PAGE
    );
    let keep_alive = SubmissionEntry::new(admin_opcode::KEEP_ALIVE, 0, 0);
    assert!(d.exec(0, keep_alive, vec![]).0.status().is_success());
}

#[test]
fn unknown_and_malformed_commands_get_statuses_and_the_device_keeps_serving() {
    let mut d = Device::new(small_geometry(), small_config(), 2);
    assert_eq!(
        d.exec(0, SubmissionEntry::new(0x7E, 0, 0), vec![])
            .0
            .status(),
        Status::INVALID_OPCODE
    );
    assert_eq!(
        d.exec(1, SubmissionEntry::new(0xC4, 0, 1), vec![])
            .0
            .status(),
        Status::INVALID_OPCODE
    );
    let n = d.fw.namespace_block_count();
    assert_eq!(d.read(n, 1).0, Status::LBA_OUT_OF_RANGE);
    assert_eq!(d.read(u64::MAX, 1).0, Status::LBA_OUT_OF_RANGE);
    assert_eq!(d.read(0, 64).0, Status::INVALID_FIELD);
    let wrong_ns = SubmissionEntry::read_write(false, 0, 7, 0, 1);
    assert_eq!(
        d.exec(1, wrong_ns, vec![0; 512]).0.status(),
        Status::INVALID_NAMESPACE
    );
    // A host buffer shorter than the transfer is a data transfer error.
    let short = SubmissionEntry::read_write(false, 0, 1, 0, 4);
    assert_eq!(
        d.exec(1, short, vec![0; 100]).0.status(),
        Status::DATA_TRANSFER_ERROR
    );
    assert_eq!(d.write(3, &[7u8; 1024]), Status::SUCCESS);
    assert_eq!(d.read(3, 2), (Status::SUCCESS, vec![7u8; 1024]));
}

#[test]
fn unwritten_blocks_read_as_zeros_and_partial_pages_merge() {
    let mut d = Device::new(small_geometry(), small_config(), 3);
    assert_eq!(d.read(0, 8), (Status::SUCCESS, vec![0u8; 4096]));
    assert_eq!(d.write(1, &[1u8; 512]), Status::SUCCESS);
    assert_eq!(d.write(2, &[2u8; 2048]), Status::SUCCESS);
    let (s, data) = d.read(0, 8);
    assert!(s.is_success());
    let mut want = vec![0u8; 4096];
    want[512..1024].fill(1);
    want[1024..3072].fill(2);
    assert_eq!(data, want);
}

/// One step of the FTL oracle test.
#[derive(Clone, Debug)]
enum FtlOp {
    Write {
        slba: u64,
        blocks: u32,
        byte: u8,
    },
    Trim {
        slba: u64,
        blocks: u32,
    },
    Zeroes {
        slba: u64,
        blocks: u32,
        deallocate: bool,
    },
    Read {
        slba: u64,
        blocks: u32,
    },
}

fn ftl_op(ns_blocks: u64) -> impl Strategy<Value = FtlOp> {
    let range =
        (0..ns_blocks, 1u32..=16).prop_map(move |(s, b)| (s.min(ns_blocks - u64::from(b)), b));
    prop_oneof![
        6 => (range.clone(), any::<u8>()).prop_map(|((slba, blocks), byte)| FtlOp::Write { slba, blocks, byte }),
        1 => range.clone().prop_map(|(slba, blocks)| FtlOp::Trim { slba, blocks }),
        1 => (range.clone(), any::<bool>()).prop_map(|((slba, blocks), deallocate)| FtlOp::Zeroes { slba, blocks, deallocate }),
        2 => range.prop_map(|(slba, blocks)| FtlOp::Read { slba, blocks }),
    ]
}

fn dsm(slba: u64, blocks: u32) -> (SubmissionEntry, Vec<u8>) {
    let mut sqe = SubmissionEntry::new(io_opcode::DATASET_MANAGEMENT, 0, 1);
    sqe.cdw10 = 0.into();
    sqe.cdw11 = (1 << 2).into();
    let range = sagessd_abi::nvme::DsmRange {
        attributes: 0.into(),
        block_count: blocks.into(),
        slba: slba.into(),
    };
    (sqe, range.as_bytes().to_vec())
}

/// A Write Zeroes of `blocks` at `slba`, with its Deallocate bit if asked.
fn write_zeroes(slba: u64, blocks: u32, deallocate: bool) -> SubmissionEntry {
    SubmissionEntry::write_zeroes(0, 1, slba, blocks, deallocate)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Writes, overwrites, trims and reads against a `BTreeMap` of block contents; the workload
    /// writes the namespace several times over, so garbage collection must run and be right.
    #[test]
    fn ftl_matches_a_btreemap_oracle(seed in any::<u64>(), ops in proptest::collection::vec(ftl_op(1576), 200..400)) {
        let mut d = Device::new(small_geometry(), small_config(), seed);
        let ns = d.fw.namespace_block_count();
        prop_assert_eq!(ns, 1576);
        let mut oracle: BTreeMap<u64, u8> = BTreeMap::new();
        // Fill the whole namespace once so every later write is an overwrite.
        for slba in (0..ns).step_by(16) {
            let blocks = 16.min(ns - slba) as usize;
            prop_assert_eq!(d.write(slba, &vec![0xEE; blocks * 512]), Status::SUCCESS);
            for b in slba..slba + blocks as u64 { oracle.insert(b, 0xEE); }
        }
        for op in ops {
            match op {
                FtlOp::Write { slba, blocks, byte } => {
                    prop_assert_eq!(d.write(slba, &vec![byte; blocks as usize * 512]), Status::SUCCESS);
                    for b in slba..slba + u64::from(blocks) { oracle.insert(b, byte); }
                }
                FtlOp::Trim { slba, blocks } => {
                    let (sqe, data) = dsm(slba, blocks);
                    prop_assert!(d.exec(1, sqe, data).0.status().is_success());
                    // Only whole flash pages (4 blocks) inside the range are deallocated.
                    let first = slba.div_ceil(4) * 4;
                    let last = (slba + u64::from(blocks)) / 4 * 4;
                    for b in first..last.max(first) { oracle.remove(&b); }
                }
                FtlOp::Zeroes { slba, blocks, deallocate } => {
                    let status = d.exec(1, write_zeroes(slba, blocks, deallocate), Vec::new()).0.status();
                    prop_assert_eq!(status, Status::SUCCESS);
                    // Every block of the range reads as zeros, deallocated or not.
                    for b in slba..slba + u64::from(blocks) { oracle.remove(&b); }
                }
                FtlOp::Read { slba, blocks } => {
                    let (s, data) = d.read(slba, blocks);
                    prop_assert!(s.is_success());
                    for (i, chunk) in data.chunks(512).enumerate() {
                        let want = oracle.get(&(slba + i as u64)).copied().unwrap_or(0);
                        prop_assert!(chunk.iter().all(|b| *b == want), "block {} wants {}", slba + i as u64, want);
                    }
                }
            }
        }
        for slba in (0..ns).step_by(16) {
            let blocks = 16.min(ns - slba) as u32;
            let (s, data) = d.read(slba, blocks);
            prop_assert!(s.is_success());
            for (i, chunk) in data.chunks(512).enumerate() {
                let want = oracle.get(&(slba + i as u64)).copied().unwrap_or(0);
                prop_assert!(chunk.iter().all(|b| *b == want));
            }
        }
        let stats = d.fw.ftl_stats();
        prop_assert!(stats.blocks_erased > 0, "GC never ran: {:?}", stats);
        // Nothing leaked: no command, flash operation or GC step is left over.
        d.fw.poll(&mut d.host);
        prop_assert!(d.fw.is_idle(), "{}", d.fw.describe());
    }
}

#[test]
fn write_zeroes_zeroes_exactly_its_range_and_unmaps_whole_pages_only_with_deallocate() {
    let mut d = Device::new(small_geometry(), small_config(), 9);
    let used = |d: &mut Device| {
        let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, 1);
        sqe.cdw10 = 0.into();
        NamespaceInfo::decode(&d.exec(0, sqe, vec![0; 4096]).1)
            .unwrap()
            .used_block_count
    };
    // 8 flash pages of 4 blocks, each block a different byte.
    let data: Vec<u8> = (0..32u8).flat_map(|b| [b + 1; 512]).collect();
    assert_eq!(d.write(0, &data), Status::SUCCESS);
    assert_eq!(used(&mut d), 32);
    // Blocks 2..14: the ends of pages 0 and 3 in part, pages 1 and 2 whole.
    let (cqe, _) = d.exec(1, write_zeroes(2, 12, false), Vec::new());
    assert_eq!(cqe.status(), Status::SUCCESS);
    let expect = |zeroed: std::ops::Range<usize>| -> Vec<u8> {
        let mut e = data.clone();
        e[zeroed.start * 512..zeroed.end * 512].fill(0);
        e
    };
    assert_eq!(d.read(0, 32), (Status::SUCCESS, expect(2..14)));
    // Without Deallocate the zeros are written: every page stays mapped.
    assert_eq!(used(&mut d), 32);
    // With it, the two whole pages of 18..30 are unmapped; 16..18 and 30..32 keep their data.
    let (cqe, _) = d.exec(1, write_zeroes(17, 13, true), Vec::new());
    assert_eq!(cqe.status(), Status::SUCCESS);
    let mut e = expect(2..14);
    e[17 * 512..30 * 512].fill(0);
    assert_eq!(d.read(0, 32), (Status::SUCCESS, e.clone()));
    assert_eq!(used(&mut d), 32 - 8);
    // Completed, it survives a power cut: the unmapping waited for a checkpoint.
    let mut after = d.power_cycle(3).unwrap();
    assert_eq!(after.read(0, 32), (Status::SUCCESS, e));

    // More than a transfer (WZSL = MDTS, 32 blocks) is an invalid field; past the end, out of
    // range; neither changes anything.
    let ns = d.fw.namespace_block_count();
    for (sqe, status) in [
        (write_zeroes(0, 33, true), Status::INVALID_FIELD),
        (write_zeroes(ns - 1, 2, false), Status::LBA_OUT_OF_RANGE),
        (write_zeroes(u64::MAX, 1, true), Status::LBA_OUT_OF_RANGE),
    ] {
        assert_eq!(d.exec(1, sqe, Vec::new()).0.status(), status);
    }
    assert_eq!(used(&mut d), 32 - 8);
}

#[test]
fn writing_the_namespace_three_times_over_forces_gc() {
    let mut d = Device::new(small_geometry(), small_config(), 4);
    let ns = d.fw.namespace_block_count();
    // Write the namespace three times: far more than the free blocks.
    for pass in 0..3u8 {
        for slba in (0..ns).step_by(32) {
            let blocks = 32.min(ns - slba) as usize;
            assert_eq!(d.write(slba, &vec![pass; blocks * 512]), Status::SUCCESS);
        }
    }
    assert!(d.fw.ftl_stats().blocks_erased > 0);
    assert_eq!(d.read(ns - 4, 4), (Status::SUCCESS, vec![2u8; 2048]));
    assert_eq!(d.read(0, 4), (Status::SUCCESS, vec![2u8; 2048]));
}

#[test]
fn media_errors_become_nvme_statuses() {
    let mut d = Device::new(small_geometry(), small_config(), 5);
    assert_eq!(d.write(0, &[9u8; 2048]), Status::SUCCESS);
    let ppn = (0..small_geometry().page_count() as u32)
        .map(crate::hal::PhysPage)
        .find(|p| d.fw.flash().page(*p)[0] == 9)
        .unwrap();
    d.fw.flash_mut().fail_reads_of(ppn);
    // Evict the cached copy by reading many other pages through the small buffer.
    for slba in (64..64 + 4 * 64).step_by(4) {
        assert!(d.read(slba, 4).0.is_success());
    }
    assert_eq!(d.read(0, 4).0, Status::UNRECOVERED_READ_ERROR);
    assert!(d.read(8, 4).0.is_success());
}

// ---- in-storage sampling -------------------------------------------------------------------

/// A CSR graph written to the device, with its descriptor.
struct StoredGraph {
    indptr: Vec<u64>,
    indices: Vec<u32>,
    descriptor: GraphDescriptor,
}

fn store_graph(d: &mut Device, indptr: Vec<u64>, indices: Vec<u32>) -> StoredGraph {
    let descriptor = store_ids(d, &indptr, indices.as_bytes().to_vec(), 4);
    StoredGraph {
        indptr,
        indices,
        descriptor,
    }
}

/// Writes `indptr` and the id bytes (`width` bytes per id) at LBA 0 and after it, and attaches.
fn store_ids(d: &mut Device, indptr: &[u64], ids: Vec<u8>, width: u8) -> GraphDescriptor {
    let bs = 512u64;
    let edge_count = ids.len() as u64 / u64::from(width);
    let mut ip = indptr.as_bytes().to_vec();
    ip.resize(ip.len().div_ceil(512) * 512, 0);
    let mut ix = ids;
    ix.resize(ix.len().div_ceil(512).max(1) * 512, 0);
    let ip_blocks = ip.len() as u64 / bs;
    // Start indices on a fresh flash page, a few pages in.
    let ix_start = (ip_blocks + 12).div_ceil(4) * 4;
    for (i, chunk) in ip.chunks(8192).enumerate() {
        assert_eq!(d.write(i as u64 * 16, chunk), Status::SUCCESS);
    }
    for (i, chunk) in ix.chunks(8192).enumerate() {
        assert_eq!(d.write(ix_start + i as u64 * 16, chunk), Status::SUCCESS);
    }
    let descriptor = GraphDescriptor {
        node_count: indptr.len() as u64 - 1,
        edge_count,
        id_width_bytes: width,
        indptr: LbaRange {
            slba: 0,
            block_count: ip_blocks,
        },
        indices: LbaRange {
            slba: ix_start,
            block_count: ix.len() as u64 / bs,
        },
        features: None,
    };
    let sqe = SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 0, 1, 64, 0);
    assert!(
        d.exec(1, sqe, descriptor.to_wire().as_bytes().to_vec())
            .0
            .status()
            .is_success()
    );
    descriptor
}

/// A ring of `n` nodes plus a hub connected to everyone (degree ≫ page size / 4).
fn ring_with_hub(n: u32) -> (Vec<u64>, Vec<u32>) {
    let hub = n;
    let mut adj: Vec<Vec<u32>> = (0..n)
        .map(|v| vec![(v + n - 1) % n, (v + 1) % n, hub])
        .collect();
    adj.push((0..n).collect());
    adj.push(Vec::new()); // an isolated node, degree 0
    let mut indptr = vec![0u64];
    let mut indices = Vec::new();
    for mut a in adj {
        a.sort_unstable();
        a.dedup();
        indices.extend(a);
        indptr.push(indices.len() as u64);
    }
    (indptr, indices)
}

fn ns_submit(d: &mut Device, seed: u64, fanouts: &[u16], targets: &[u64]) -> (Status, u32) {
    let mut cfg = vec![0u8; ns_config_size_bytes(targets.len())];
    encode_ns_config(seed, fanouts, targets, &mut cfg).unwrap();
    let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, cfg.len() as u32, 0);
    let (cqe, _) = d.exec(1, sqe, cfg);
    (cqe.status(), cqe.result.get())
}

fn ns_collect(d: &mut Device, tag: u32, len: usize) -> (Status, u32, Vec<u8>) {
    let sqe = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 0, 1, len as u32, tag);
    let (cqe, data) = d.exec(1, sqe, vec![0; len]);
    (cqe.status(), cqe.result.get(), data)
}

#[test]
fn sampling_covers_hubs_isolated_nodes_and_repeated_targets() {
    let mut d = Device::new(small_geometry(), small_config(), 6);
    let (indptr, indices) = ring_with_hub(1500);
    let g = store_graph(&mut d, indptr, indices);
    let isolated = g.descriptor.node_count - 1;
    let hub = isolated - 1;
    let (s, tag) = ns_submit(&mut d, 42, &[5, 3, 2], &[hub, 7, isolated, 7, 1499]);
    assert!(s.is_success());
    // Too small a buffer: the size needed comes back and the result stays.
    let (s, need, _) = ns_collect(&mut d, tag, 64);
    assert_eq!(
        VendorStatus::from_status(s),
        Some(VendorStatus::BufferTooSmall)
    );
    let (s, size, data) = ns_collect(&mut d, tag, need as usize);
    assert!(s.is_success(), "{s:?}");
    assert_eq!(size, need);
    let view = SubgraphView::parse(&data).unwrap();
    assert_eq!(view.layer_count(), 3);
    let nodes: Vec<u64> = view.nodes().iter().map(|n| n.get()).collect();
    assert_eq!(&nodes[..4], &[hub, 7, isolated, 1499]);
    let l0 = view.layer(0);
    // The hub gets 5 neighbours, node 7 its three, the isolated node none.
    let deg: Vec<u32> = l0
        .indptr
        .windows(2)
        .map(|w| w[1].get() - w[0].get())
        .collect();
    assert_eq!(deg, vec![5, 3, 0, 3]);
    for l in 0..3 {
        let layer = view.layer(l);
        for v in 0..layer.counts.dst_count as usize {
            let node = nodes[v] as usize;
            let neigh = &g.indices[g.indptr[node] as usize..g.indptr[node + 1] as usize];
            for e in layer.indptr[v].get()..layer.indptr[v + 1].get() {
                let src = nodes[layer.indices[e as usize].get() as usize] as u32;
                assert!(
                    neigh.contains(&src),
                    "layer {l}: {src} is no neighbour of {node}"
                );
            }
        }
    }
    // Collected once: the tag is gone.
    let (s, _, _) = ns_collect(&mut d, tag, need as usize);
    assert_eq!(VendorStatus::from_status(s), Some(VendorStatus::UnknownTag));
}

/// A collect costs the firmware the bytes it moves, not the size of the host's buffer.
#[test]
fn a_collect_is_charged_the_subgraph_not_the_buffer() {
    let mut d = Device::new(small_geometry(), small_config(), 6);
    let (indptr, indices) = ring_with_hub(600);
    store_graph(&mut d, indptr, indices);
    let mut copied = Vec::new();
    for buffer_bytes in [None, Some(1 << 20)] {
        let (s, tag) = ns_submit(&mut d, 5, &[4, 2], &[1, 2, 3]);
        assert!(s.is_success());
        let (_, need, _) = ns_collect(&mut d, tag, 64);
        let before = d.fw.work().bytes_copied;
        let (s, size, _) = ns_collect(&mut d, tag, buffer_bytes.unwrap_or(need as usize));
        assert!(s.is_success() && size == need, "{s:?}");
        copied.push(d.fw.work().bytes_copied - before);
    }
    assert_eq!(
        copied[0], copied[1],
        "a 1 MiB buffer costs what an exact one does"
    );
    let (s, tag) = ns_submit(&mut d, 5, &[4, 2], &[1, 2, 3]);
    assert!(s.is_success());
    let (_, need, _) = ns_collect(&mut d, tag, 64);
    assert_eq!(copied[0], u64::from(need), "the subgraph's bytes");
}

#[test]
fn each_malformed_ns_config_gets_its_status_and_the_device_keeps_serving() {
    let mut d = Device::new(small_geometry(), small_config(), 7);
    let (s, _) = ns_submit(&mut d, 1, &[2], &[0]);
    assert_eq!(
        VendorStatus::from_status(s),
        Some(VendorStatus::NoGraphAttached)
    );
    let (indptr, indices) = ring_with_hub(100);
    store_graph(&mut d, indptr, indices);
    let good = {
        let mut cfg = vec![0u8; ns_config_size_bytes(2)];
        encode_ns_config(9, &[2, 2], &[1, 2], &mut cfg).unwrap();
        cfg
    };
    let send = |d: &mut Device, cfg: Vec<u8>, len: u32| {
        let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, len, 0);
        d.exec(1, sqe, cfg).0.status()
    };
    let patched = |offset: usize, value: &[u8]| {
        let mut b = good.clone();
        b[offset..offset + value.len()].copy_from_slice(value);
        b
    };
    let len = good.len() as u32;
    let v = Status::from;
    let cases: Vec<(Vec<u8>, u32, Status)> = vec![
        (patched(0, b"XSCF"), len, v(VendorStatus::BadMagic)),
        (patched(4, &[9, 0]), len, v(VendorStatus::BadVersion)),
        (patched(6, &[0]), len, v(VendorStatus::BadLayerCount)),
        (patched(6, &[5]), len, v(VendorStatus::BadLayerCount)),
        (patched(16, &[0, 0]), len, v(VendorStatus::BadFanout)),
        (patched(16, &[17, 0]), len, v(VendorStatus::BadFanout)),
        (
            patched(24, &[0, 0, 0, 0]),
            len,
            v(VendorStatus::BadTargetCount),
        ),
        (
            patched(24, &[65, 0, 0, 0]),
            len,
            v(VendorStatus::BadTargetCount),
        ),
        (
            patched(32, &[102, 0, 0, 0]),
            len,
            v(VendorStatus::NodeOutOfRange),
        ),
        (good.clone(), 40, v(VendorStatus::Truncated)),
        // The command says 48 bytes but the host buffer has 40: the DMA fails.
        (good[..40].to_vec(), len, Status::DATA_TRANSFER_ERROR),
        (patched(7, &[1]), len, v(VendorStatus::ReservedField)),
    ];
    for (cfg, len, want) in cases {
        assert_eq!(send(&mut d, cfg, len), want);
        // The device still serves: a good config samples.
        let (s, tag) = ns_submit(&mut d, 3, &[2], &[5]);
        assert!(s.is_success());
        let (s, _, _) = ns_collect(&mut d, tag, 1 << 16);
        assert!(s.is_success());
    }
    let (s, _, _) = ns_collect(&mut d, 0xDEAD, 4096);
    assert_eq!(VendorStatus::from_status(s), Some(VendorStatus::UnknownTag));
    // A descriptor past the namespace is refused.
    let bad = GraphDescriptor {
        node_count: 10,
        edge_count: 10,
        id_width_bytes: 4,
        indptr: LbaRange {
            slba: d.fw.namespace_block_count(),
            block_count: 1,
        },
        indices: LbaRange {
            slba: 0,
            block_count: 1,
        },
        features: None,
    };
    let sqe = SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 0, 1, 64, 0);
    let s = d.exec(1, sqe, bad.to_wire().as_bytes().to_vec()).0.status();
    assert_eq!(
        VendorStatus::from_status(s),
        Some(VendorStatus::BadDescriptor)
    );
}

#[test]
fn a_corrupt_graph_fails_the_job_not_the_firmware() {
    let mut d = Device::new(small_geometry(), small_config(), 8);
    // indptr decreases at node 1.
    store_graph(&mut d, vec![0, 3, 2, 4], vec![1, 2, 0, 1]);
    let (s, tag) = ns_submit(&mut d, 1, &[2], &[1]);
    assert!(s.is_success());
    let (s, _, _) = ns_collect(&mut d, tag, 4096);
    assert_eq!(
        VendorStatus::from_status(s),
        Some(VendorStatus::GraphCorrupt)
    );
    // Neighbour id past the node count.
    store_graph(&mut d, vec![0, 1, 2, 3], vec![1, 2, 77]);
    let (_, tag) = ns_submit(&mut d, 1, &[2], &[2]);
    let (s, _, _) = ns_collect(&mut d, tag, 4096);
    assert_eq!(
        VendorStatus::from_status(s),
        Some(VendorStatus::GraphCorrupt)
    );
    let (_, tag) = ns_submit(&mut d, 1, &[2], &[0]);
    assert!(ns_collect(&mut d, tag, 4096).0.is_success());
}

#[test]
fn every_slot_busy_is_reported_and_slots_come_back() {
    let mut d = Device::new(small_geometry(), small_config(), 9);
    let (indptr, indices) = ring_with_hub(50);
    store_graph(&mut d, indptr, indices);
    let (_, t1) = ns_submit(&mut d, 1, &[2], &[1]);
    let (_, t2) = ns_submit(&mut d, 1, &[2], &[2]);
    let (s, _) = ns_submit(&mut d, 1, &[2], &[3]);
    assert_eq!(VendorStatus::from_status(s), Some(VendorStatus::NoFreeSlot));
    assert!(ns_collect(&mut d, t2, 4096).0.is_success());
    assert!(ns_collect(&mut d, t1, 4096).0.is_success());
    let (s, t3) = ns_submit(&mut d, 1, &[2], &[3]);
    assert!(s.is_success());
    assert_ne!(t3, t1, "a reused slot gets a new generation");
    assert_eq!(
        VendorStatus::from_status(ns_collect(&mut d, t1, 4096).0),
        Some(VendorStatus::UnknownTag)
    );
}

#[test]
fn command_id_conflicts_are_refused() {
    let mut d = Device::new(small_geometry(), small_config(), 10);
    let (indptr, indices) = ring_with_hub(50);
    store_graph(&mut d, indptr, indices);
    let (_, tag) = ns_submit(&mut d, 1, &[2], &[1]);
    // Park a collect, then reuse its cid before polling.
    let sqe = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 77, 1, 4096, tag);
    let id = CommandId { sq_id: 1, cid: 77 };
    d.host.buffers.insert((1, 77), vec![0; 4096]);
    d.fw.submit(&mut d.host, id, &sqe).unwrap();
    d.fw.submit(&mut d.host, id, &sqe).unwrap();
    assert_eq!(d.host.completions[0].1.status().sc, 0x03);
    d.host.completions.clear();
    assert!(d.wait(id).0.status().is_success());
}

/// A command with arbitrary fields, its opcode biased towards the ones the firmware implements.
fn arbitrary_command() -> impl Strategy<Value = (u16, SubmissionEntry, Vec<u8>)> {
    let opcode = prop_oneof![
        Just(io_opcode::READ),
        Just(io_opcode::WRITE),
        Just(io_opcode::FLUSH),
        Just(io_opcode::DATASET_MANAGEMENT),
        Just(io_opcode::WRITE_ZEROES),
        Just(io_opcode::GRAPH_ATTACH),
        Just(io_opcode::NS_SUBMIT),
        Just(io_opcode::NS_COLLECT),
        Just(admin_opcode::IDENTIFY),
        any::<u8>(),
    ];
    let small = prop_oneof![0u32..8, 0u32..5000, any::<u32>()];
    (
        0u16..3,
        opcode,
        any::<u8>(),
        prop_oneof![Just(1u32), any::<u32>()],
        proptest::collection::vec(small, 6),
        proptest::collection::vec(any::<u8>(), 0..3000),
    )
        .prop_map(|(sq, opcode, flags, nsid, cdw, data)| {
            let mut sqe = SubmissionEntry::new(opcode, 0, nsid);
            sqe.flags = flags & 0x3F;
            sqe.cdw10 = cdw[0].into();
            sqe.cdw11 = cdw[1].into();
            sqe.cdw12 = cdw[2].into();
            sqe.cdw13 = cdw[3].into();
            sqe.cdw14 = cdw[4].into();
            sqe.cdw15 = cdw[5].into();
            (sq.min(1), sqe, data)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the host sends — arbitrary fields, payloads, tags, lengths — the firmware answers
    /// every command with a completion, never panics, and still serves a well-formed write, read
    /// and sample afterwards.
    #[test]
    fn arbitrary_commands_never_break_the_firmware(
        seed in any::<u64>(),
        commands in proptest::collection::vec(arbitrary_command(), 1..40),
    ) {
        let mut d = Device::new(small_geometry(), small_config(), seed);
        let (indptr, indices) = ring_with_hub(300);
        store_graph(&mut d, indptr, indices);
        for (sq, sqe, data) in commands {
            let id = d.submit(sq, sqe, data);
            let (cqe, _) = d.wait(id);
            prop_assert_eq!(cqe.cid.get(), id.cid);
        }
        prop_assert_eq!(d.write(100, &[5u8; 1024]), Status::SUCCESS);
        prop_assert_eq!(d.read(100, 2), (Status::SUCCESS, vec![5u8; 1024]));
        // The graph may have been overwritten or detached by the commands: re-store it.
        let (indptr, indices) = ring_with_hub(300);
        store_graph(&mut d, indptr, indices);
        let (s, tag) = ns_submit(&mut d, 1, &[3, 3], &[5, 6]);
        prop_assert!(s.is_success() || VendorStatus::from_status(s) == Some(VendorStatus::NoFreeSlot));
        if s.is_success() {
            prop_assert!(ns_collect(&mut d, tag, 1 << 16).0.is_success());
        }
    }
}

#[test]
fn eight_byte_ids_sample_like_four_byte_ids() {
    let (indptr, indices) = ring_with_hub(1500);
    let wide: Vec<u64> = indices.iter().map(|i| u64::from(*i)).collect();
    let mut narrow_dev = Device::new(small_geometry(), small_config(), 11);
    store_ids(&mut narrow_dev, &indptr, indices.as_bytes().to_vec(), 4);
    let mut wide_dev = Device::new(small_geometry(), small_config(), 12);
    store_ids(&mut wide_dev, &indptr, wide.as_bytes().to_vec(), 8);
    for seed in 0..4 {
        let targets = [1500, 3, 700, 3, 1499];
        let (s, t) = ns_submit(&mut narrow_dev, seed, &[6, 4, 2], &targets);
        assert!(s.is_success());
        let a = ns_collect(&mut narrow_dev, t, 1 << 17);
        let (s, t) = ns_submit(&mut wide_dev, seed, &[6, 4, 2], &targets);
        assert!(s.is_success());
        let b = ns_collect(&mut wide_dev, t, 1 << 17);
        assert!(a.0.is_success() && b.0.is_success());
        assert_eq!(a.2[..a.1 as usize], b.2[..b.1 as usize]);
    }
}

/// Many commands in flight at once: overlapping writes land in submission order, reads and
/// sampling jobs run beside them, and everything matches a one-at-a-time run.
#[test]
fn concurrent_writes_reads_and_sampling_jobs() {
    let mut d = Device::new(small_geometry(), small_config(), 13);
    let (indptr, indices) = ring_with_hub(400);
    let g = store_graph(&mut d, indptr, indices);
    let graph_end = g.descriptor.indices.slba + g.descriptor.indices.block_count;
    let (s, t) = ns_submit(&mut d, 77, &[4, 4], &[1, 2, 3, 400]);
    assert!(s.is_success());
    let alone = ns_collect(&mut d, t, 1 << 16);
    // Now the same job with 24 overlapping writes and 8 reads in flight around it.
    let base = graph_end + 64;
    let mut ids = Vec::new();
    for k in 0..24u64 {
        let data = vec![k as u8 + 1; 512 * (1 + (k as usize % 7))];
        let blocks = (data.len() / 512) as u32;
        ids.push(d.submit(
            1,
            SubmissionEntry::read_write(true, 0, 1, base + (k % 5), blocks),
            data,
        ));
    }
    let mut cfg = vec![0u8; ns_config_size_bytes(4)];
    encode_ns_config(77, &[4, 4], &[1, 2, 3, 400], &mut cfg).unwrap();
    let submit = d.submit(
        1,
        SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, cfg.len() as u32, 0),
        cfg,
    );
    for k in 0..8u64 {
        ids.push(d.submit(
            1,
            SubmissionEntry::read_write(false, 0, 1, base + k, 4),
            vec![0; 2048],
        ));
    }
    let (cqe, _) = d.wait(submit);
    assert!(cqe.status().is_success());
    let together = ns_collect(&mut d, cqe.result.get(), 1 << 16);
    assert_eq!(alone, together);
    for id in ids {
        assert!(d.wait(id).0.status().is_success());
    }
    // The last write to touch each block wins: writes to one page run in submission order.
    let mut want = vec![0u8; 512 * 16];
    for k in 0..24u64 {
        let (start, len) = ((k % 5) as usize, 1 + (k as usize % 7));
        want[start * 512..(start + len) * 512].fill(k as u8 + 1);
    }
    assert_eq!(d.read(base, 16), (Status::SUCCESS, want));
    assert!(d.fw.is_idle());
}

/// Fills the namespace with 0x11, logical page 0 with 0x5A; returns the physical page holding
/// logical page 0 (the one a GC test makes fail).
pub(crate) fn fill_with_page_zero_marked(d: &mut Device) -> crate::hal::PhysPage {
    let ns = d.fw.namespace_block_count();
    for slba in (0..ns).step_by(32) {
        let blocks = 32.min(ns - slba) as usize;
        let mut data = vec![0x11u8; blocks * 512];
        if slba == 0 {
            data[..2048].fill(0x5A);
        }
        assert_eq!(d.write(slba, &data), Status::SUCCESS);
    }
    (0..small_geometry().page_count() as u32)
        .map(crate::hal::PhysPage)
        .find(|p| d.fw.flash().page(*p)[0] == 0x5A)
        .expect("logical page 0 is programmed")
}

/// Rewrites random logical pages other than page 0 (xorshift from `seed`) until `done` says
/// so, at most six namespaces' worth: random overwrites leave few blocks wholly invalid, so
/// GC's victims have pages to copy, page 0's among them sooner or later.
pub(crate) fn overwrite_until(d: &mut Device, seed: u64, done: impl Fn(&Device) -> bool) {
    let pages = d.fw.namespace_block_count() / 4;
    let mut x = seed;
    for _ in 0..pages * 6 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lpn = 1 + x % (pages - 1);
        assert_eq!(d.write(lpn * 4, &[0x22; 2048]), Status::SUCCESS);
        if done(d) {
            return;
        }
    }
}

#[test]
fn a_page_gc_cannot_read_is_reported_lost_not_zero() {
    let mut d = Device::new(small_geometry(), small_config(), 14);
    let ppn = fill_with_page_zero_marked(&mut d);
    d.fw.flash_mut().fail_reads_of(ppn);
    overwrite_until(&mut d, 0x9E37_79B9_7F4A_7C15, |d| {
        d.fw.ftl_stats().media_failures > 0
    });
    assert!(
        d.fw.ftl_stats().media_failures > 0,
        "GC never read the failing page"
    );
    assert_eq!(d.read(0, 4).0, Status::UNRECOVERED_READ_ERROR);
    assert!(d.read(4, 4).0.is_success());
    // Writing the page again makes it readable.
    assert_eq!(d.write(0, &[0x33; 2048]), Status::SUCCESS);
    assert_eq!(d.read(0, 4), (Status::SUCCESS, vec![0x33; 2048]));
}

#[test]
fn a_huge_deallocate_does_not_hold_up_other_commands() {
    let mut d = Device::new(small_geometry(), small_config(), 15);
    assert_eq!(d.write(8, &[1u8; 2048]), Status::SUCCESS);
    let ns = d.fw.namespace_block_count();
    // 256 ranges, each the whole namespace.
    let range = sagessd_abi::nvme::DsmRange {
        attributes: 0.into(),
        block_count: (ns as u32).into(),
        slba: 0.into(),
    };
    let ranges: Vec<u8> = (0..256).flat_map(|_| range.as_bytes().to_vec()).collect();
    let mut sqe = SubmissionEntry::new(io_opcode::DATASET_MANAGEMENT, 0, 1);
    sqe.cdw10 = 255.into();
    sqe.cdw11 = (1 << 2).into();
    let trim = d.submit(1, sqe, ranges);
    let read = d.submit(
        1,
        SubmissionEntry::read_write(false, 0, 1, 100, 4),
        vec![0; 2048],
    );
    let (cqe, _) = d.wait(read);
    assert!(cqe.status().is_success());
    assert!(
        !d.host.completions.iter().any(|(c, _)| *c == trim),
        "the read waited for the whole deallocate"
    );
    assert!(d.wait(trim).0.status().is_success());
    assert_eq!(d.read(8, 4), (Status::SUCCESS, vec![0u8; 2048]));
    // A range past the namespace is an error, not a silent no-op.
    let (mut sqe, data) = dsm(ns - 2, 4);
    sqe.cid = 0.into();
    assert_eq!(d.exec(1, sqe, data).0.status(), Status::LBA_OUT_OF_RANGE);
}

#[test]
fn a_read_larger_than_the_page_buffer_looks_each_waiting_page_up_once_a_step() {
    // 32 pages through a 16-slot buffer: half the read waits for slots the other half holds.
    // A step starts its pages in order and stops at the first that finds no slot, so the
    // pages behind it cost no page-buffer lookup until a later step (a page lookup is the
    // dearest unit a plain read pays on the embedded core).
    let config = FirmwareConfig {
        max_transfer_bytes: 64 * 1024,
        ..small_config()
    };
    let mut d = Device::new(small_geometry(), config, 21);
    let a: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(d.write(0, &a), Status::SUCCESS);
    // Another 64 KiB so that none of the first write's pages is still in the buffer.
    assert_eq!(d.write(256, &[7u8; 64 * 1024]), Status::SUCCESS);
    d.settle();
    let before = d.fw.work();
    assert_eq!(d.read(0, 128), (Status::SUCCESS, a));
    let work = d.fw.work().since(&before);
    // One lookup per page that gets its slot, plus at most one that finds none per step.
    assert!(
        work.page_lookups <= 32 + work.parked_checked,
        "{} page lookups in {} steps of a 32-page read",
        work.page_lookups,
        work.parked_checked
    );
    assert!(work.page_lookups > 32, "the read never waited for a slot");
}

#[test]
fn the_tunnel_window_carries_the_same_exchange_in_writes_and_reads() {
    let config = FirmwareConfig {
        tunnel: true,
        ..small_config()
    };
    let mut d = Device::new(small_geometry(), config, 8);
    let (indptr, indices) = ring_with_hub(300);
    store_graph(&mut d, indptr, indices);
    let targets: Vec<u64> = (0..40).map(|i| i * 7 % 300).collect();
    let (_, tag) = ns_submit(&mut d, 5, &[8, 4], &targets);
    let (_, size, expected) = ns_collect(&mut d, tag, 1 << 16);
    assert!(size as usize > 2 * 512, "a subgraph of several blocks");
    let expected = expected[..size as usize].to_vec();

    let mut id = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, 0);
    id.cdw10 = 1.into();
    let window = ControllerInfo::decode_tunnel(&d.exec(0, id, vec![0; 4096]).1)
        .expect("the device reports its tunnel window");
    let bs = d.fw.block_size_bytes() as usize;
    let mut cfg = vec![0u8; ns_config_size_bytes(targets.len()).next_multiple_of(bs)];
    encode_ns_config(5, &[8, 4], &targets, &mut cfg).unwrap();
    let slot = window.slot_lba(1);
    assert!(d.write(slot, &cfg).is_success());
    // The subgraph in two reads (header block first), zero past its end.
    let blocks = (size as usize).div_ceil(bs) as u32 + 1;
    let (s, head) = d.read(slot, 1);
    assert!(s.is_success(), "{s:?}");
    let (s, rest) = d.read(slot + 1, blocks - 1);
    assert!(s.is_success(), "{s:?} size {size} blocks {blocks}");
    let got = [head, rest].concat();
    assert_eq!(&got[..size as usize], &expected[..]);
    assert!(got[size as usize..].iter().all(|b| *b == 0));
    // The last read reached the end: the job is gone.
    assert_eq!(
        VendorStatus::from_status(d.read(slot, 1).0),
        Some(VendorStatus::UnknownTag)
    );
    // The namespace ends where the window begins. A write not at a slot's start is refused;
    // accesses across the namespace's end, across two slots or past the window are out of range.
    assert_eq!(d.fw.namespace_block_count(), window.base_lba);
    assert_eq!(d.write(slot + 1, &cfg), Status::INVALID_FIELD);
    assert_eq!(d.read(window.base_lba - 1, 2).0, Status::LBA_OUT_OF_RANGE);
    let across = window.slot_lba(1) - 1;
    assert_eq!(d.read(across, 2).0, Status::LBA_OUT_OF_RANGE);
    let end = window.slot_lba(usize::from(window.slots));
    assert_eq!(d.read(end, 1).0, Status::LBA_OUT_OF_RANGE);
    // Garbage in a slot is a malformed NS_config, as through NS_SUBMIT.
    assert_eq!(
        VendorStatus::from_status(d.write(slot, &vec![0xAB; bs])),
        Some(VendorStatus::BadMagic)
    );
    // Ordinary I/O outside the window is untouched.
    assert!(d.write(0, &vec![7; bs]).is_success());
    assert_eq!(d.read(0, 1).1, vec![7; bs]);
}

#[test]
fn a_discarded_job_frees_its_slot_once_finished() {
    let mut d = Device::new(small_geometry(), small_config(), 9);
    let (indptr, indices) = ring_with_hub(200);
    store_graph(&mut d, indptr, indices);
    let (s, tag) = ns_submit(&mut d, 3, &[4], &[1, 2]);
    assert!(s.is_success());
    let (cqe, _) = d.exec(1, SubmissionEntry::ns_discard(0, 1, tag), vec![]);
    assert!(cqe.status().is_success());
    assert_eq!(
        VendorStatus::from_status(ns_collect(&mut d, tag, 4096).0),
        Some(VendorStatus::UnknownTag)
    );
    // Every slot is free again.
    for _ in 0..small_config().isp_slots {
        assert!(ns_submit(&mut d, 3, &[4], &[1, 2]).0.is_success());
    }
}

#[test]
fn a_reset_abandons_commands_and_jobs_and_leaves_each_page_old_or_new() {
    let mut d = Device::new(small_geometry(), small_config(), 21);
    let (indptr, indices) = ring_with_hub(400);
    let g = store_graph(&mut d, indptr, indices);
    let (s, tag) = ns_submit(&mut d, 5, &[4, 4], &[1, 2, 3, 400]);
    assert!(s.is_success());
    let reference = ns_collect(&mut d, tag, 1 << 16);
    assert!(reference.0.is_success());
    // Old data, then writes, reads, a job and its collect in flight when the reset comes.
    let base = g.descriptor.indices.slba + g.descriptor.indices.block_count + 64;
    let old: Vec<u8> = (0..512 * 32).map(|i| (i / 512) as u8).collect();
    assert_eq!(d.write(base, &old), Status::SUCCESS);
    let (s, running) = ns_submit(&mut d, 5, &[4, 4], &[1, 2, 3, 400]);
    assert!(s.is_success());
    let (s, queued) = ns_submit(&mut d, 6, &[4], &[7]);
    assert!(s.is_success());
    let mut abandoned = vec![d.submit(
        1,
        SubmissionEntry::vendor(io_opcode::NS_COLLECT, 0, 1, 1 << 16, running),
        vec![0; 1 << 16],
    )];
    for k in 0..6u64 {
        let data = vec![0xC0 + k as u8; 512 * 16];
        abandoned.push(d.submit(
            1,
            SubmissionEntry::read_write(true, 0, 1, base + 4 * k, 16),
            data,
        ));
        abandoned.push(d.submit(
            1,
            SubmissionEntry::read_write(false, 0, 1, base, 32),
            vec![0; 512 * 32],
        ));
    }
    d.fw.poll(&mut d.host);
    d.fw.poll(&mut d.host);
    let posted = d.host.completions.len();
    let started = d.fw.work().flash_ops;
    assert!(
        !d.fw.is_quiet(),
        "the reset should find flash work in flight"
    );
    d.fw.abandon_commands();
    // The host forgets everything: the ids are free at once, the buffers never touched again.
    let before: Vec<_> = abandoned[1..]
        .iter()
        .map(|id| d.host.buffers[&(id.sq_id, id.cid)].clone())
        .collect();
    // A reused id is taken as a new command, not refused as a conflict.
    let reuse = abandoned.remove(0);
    d.host
        .buffers
        .insert((reuse.sq_id, reuse.cid), vec![0; 512]);
    let sqe = SubmissionEntry::read_write(false, reuse.cid, 1, base, 1);
    while d.fw.submit(&mut d.host, reuse, &sqe).is_err() {
        d.fw.poll(&mut d.host);
    }
    let (cqe, data) = d.wait(reuse);
    assert!(cqe.status().is_success(), "{:?}", cqe.status());
    assert!(data == old[..512] || data.iter().all(|&x| x == 0xC0));
    for _ in 0..10_000_000 {
        if d.fw.is_idle() {
            break;
        }
        d.fw.poll(&mut d.host);
    }
    assert!(d.fw.is_idle(), "{}", d.fw.describe());
    assert_eq!(
        d.host.completions.len(),
        posted,
        "an abandoned command completed"
    );
    for (id, b) in abandoned.iter().zip(&before) {
        assert_eq!(
            &d.host.buffers[&(id.sq_id, id.cid)],
            b,
            "{id:?}'s buffer moved"
        );
    }
    assert!(d.fw.work().flash_ops >= started);
    // Every block holds its old data or one of the abandoned writes' data.
    let (s, now) = d.read(base, 32);
    assert_eq!(s, Status::SUCCESS);
    for (b, block) in now.chunks(512).enumerate() {
        let new = (0..6)
            .filter(|k| (4 * k..4 * k + 16).contains(&b))
            .map(|k| 0xC0 + k as u8);
        let ok = block.iter().all(|&x| x == old[b * 512])
            || new.clone().any(|v| block.iter().all(|&x| x == v));
        assert!(ok, "block {b} holds neither its old nor a new value");
    }
    // The old tags name nothing; every job slot is free; the graph is still attached.
    for t in [tag, running, queued] {
        assert_eq!(
            VendorStatus::from_status(ns_collect(&mut d, t, 4096).0),
            Some(VendorStatus::UnknownTag)
        );
    }
    let (s, again) = ns_submit(&mut d, 5, &[4, 4], &[1, 2, 3, 400]);
    assert!(s.is_success());
    assert_eq!(ns_collect(&mut d, again, 1 << 16), reference);
    // The FTL is consistent: a full rewrite and GC keep every block readable.
    let fresh: Vec<u8> = (0..512 * 32).map(|i| (i / 512) as u8 ^ 0x5A).collect();
    for _ in 0..3 {
        assert_eq!(d.write(base, &fresh), Status::SUCCESS);
    }
    d.settle();
    assert_eq!(d.read(base, 32), (Status::SUCCESS, fresh));
}

mod hyperbatch;
mod lanes;
mod read_retry;
mod recovery;
