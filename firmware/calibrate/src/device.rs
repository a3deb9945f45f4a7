//! The device under calibration: the firmware over a [`SparseFlash`], driven one NVMe command
//! at a time by a stand-in host whose memory is one buffer.

use sagessd_abi::graph::GraphDescriptor;
use sagessd_abi::nvme::{CompletionEntry, Status, SubmissionEntry, io_opcode};
use sagessd_firmware::host::{CommandId, DmaError, HostInterface};
use sagessd_firmware::work::WorkCounters;
use sagessd_firmware::{ConfigError, Firmware};
use zerocopy::IntoBytes;

use crate::sparse_flash::{SparseFlash, bytes_needed};
use crate::{Marks, Plan};

/// The namespace id the firmware serves.
const NSID: u32 = 1;
/// The I/O submission queue the harness uses.
const IO_QUEUE: u16 = 1;
/// Polls a command may take before the harness gives up on it.
const MAX_POLLS: u32 = 50_000_000;

/// Why a calibration run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalibrateError {
    /// The firmware refused the plan's configuration.
    Config(ConfigError),
    /// The memory given cannot hold the arena, the host buffer and some flash pages.
    Memory,
    /// A command failed: what it was, and its status.
    Command(&'static str, Status),
    /// A command never completed.
    Stuck(&'static str),
    /// A workload's host data did not fit the host buffer.
    HostBuffer,
}

/// The host's side: one buffer, one command at a time.
#[derive(Debug)]
struct HostMem<'a, K: Marks> {
    buffer: &'a mut [u8],
    /// The command in flight and its buffer length.
    command: Option<(CommandId, usize)>,
    completion: Option<(CommandId, CompletionEntry)>,
    marks: K,
}

impl<K: Marks> HostMem<'_, K> {
    fn range(&self, cmd: CommandId, offset: usize, len: usize) -> Result<(usize, usize), DmaError> {
        match self.command {
            Some((c, buffer_len)) if c == cmd && offset.saturating_add(len) <= buffer_len => {
                Ok((offset, offset + len))
            }
            _ => Err(DmaError),
        }
    }
}

impl<K: Marks> HostInterface for HostMem<'_, K> {
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError> {
        self.marks.leave();
        let r = self.range(cmd, offset_bytes, dst.len()).map(|(a, b)| {
            dst.copy_from_slice(&self.buffer[a..b]);
        });
        self.marks.enter();
        r
    }

    fn dma_to_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<(), DmaError> {
        self.marks.leave();
        let r = self.range(cmd, offset_bytes, src.len()).map(|(a, b)| {
            self.buffer[a..b].copy_from_slice(src);
        });
        self.marks.enter();
        r
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        self.marks.leave();
        self.completion = Some((cmd, cqe));
        self.marks.enter();
    }
}

/// The firmware on a sparse flash, with a host buffer of its own.
#[derive(Debug)]
pub struct Device<'a, K: Marks> {
    fw: Firmware<SparseFlash<'a, K>, &'a mut [u8]>,
    host: HostMem<'a, K>,
    marks: K,
    next_cid: u16,
}

impl<'a, K: Marks> Device<'a, K> {
    /// Boots the plan's device in `memory`: the firmware's arena first (`memory` must be
    /// zero-filled there), then a host buffer of `host_bytes`, then the flash, which keeps as
    /// many written pages as the rest holds.
    pub fn boot(
        plan: &Plan,
        memory: &'a mut [u8],
        host_bytes: usize,
        marks: K,
    ) -> Result<Self, CalibrateError> {
        let arena_bytes = sagessd_firmware::dram_size_bytes(&plan.config, &plan.geometry)
            .map_err(CalibrateError::Config)?;
        if memory.len() < arena_bytes.saturating_add(host_bytes) {
            return Err(CalibrateError::Memory);
        }
        let (arena, rest) = memory.split_at_mut(arena_bytes);
        let (buffer, flash_memory) = rest.split_at_mut(host_bytes);
        let overhead = bytes_needed(&plan.geometry, 0).ok_or(CalibrateError::Memory)?;
        let pages = flash_memory.len().saturating_sub(overhead) / plan.geometry.window_bytes();
        let pages = u32::try_from(pages.saturating_sub(1)).unwrap_or(u32::MAX - 1);
        let flash = SparseFlash::new(plan.geometry, pages, flash_memory, marks)
            .ok_or(CalibrateError::Memory)?;
        marks.enter();
        let fw = Firmware::new(plan.config, flash, arena);
        marks.leave();
        Ok(Self {
            fw: fw.map_err(CalibrateError::Config)?,
            host: HostMem {
                buffer,
                command: None,
                completion: None,
                marks,
            },
            marks,
            next_cid: 0,
        })
    }

    /// The work the firmware counted since boot.
    pub fn work(&self) -> WorkCounters {
        self.fw.work()
    }

    /// The firmware's logical block size.
    pub fn block_size_bytes(&self) -> u32 {
        self.fw.block_size_bytes()
    }

    /// The host buffer, to fill before a command or read after one.
    pub fn buffer(&mut self) -> &mut [u8] {
        self.host.buffer
    }

    /// One poll of the firmware; whether it did anything.
    pub fn poll(&mut self) -> bool {
        self.marks.enter();
        let busy = self.fw.poll(&mut self.host);
        self.marks.leave();
        busy
    }

    /// Forgets every page in the DRAM page buffer (not measured: a harness action), so that
    /// the next reads come from flash.
    pub fn drop_page_buffer(&mut self) {
        self.fw.drop_page_buffer();
    }

    /// Runs `sqe` (its cid replaced) with the first `len` bytes of the host buffer as its data,
    /// polling until it completes; its status must be success. Returns its result dword.
    pub fn exec(
        &mut self,
        what: &'static str,
        sq_id: u16,
        mut sqe: SubmissionEntry,
        len: usize,
    ) -> Result<u32, CalibrateError> {
        if len > self.host.buffer.len() {
            return Err(CalibrateError::HostBuffer);
        }
        self.next_cid = self.next_cid.wrapping_add(1);
        let id = CommandId {
            sq_id,
            cid: self.next_cid,
        };
        sqe.cid = id.cid.into();
        self.host.command = Some((id, len));
        self.host.completion = None;
        let mut polls = 0u32;
        loop {
            self.marks.enter();
            let accepted = self.fw.submit(&mut self.host, id, &sqe);
            self.marks.leave();
            if accepted.is_ok() {
                break;
            }
            self.poll();
            polls += 1;
            if polls > MAX_POLLS {
                return Err(CalibrateError::Stuck(what));
            }
        }
        while self.host.completion.is_none() {
            self.poll();
            polls += 1;
            if polls > MAX_POLLS {
                return Err(CalibrateError::Stuck(what));
            }
        }
        self.host.command = None;
        match self.host.completion.take() {
            Some((_, cqe)) if cqe.status().is_success() => Ok(cqe.result.get()),
            Some((_, cqe)) => Err(CalibrateError::Command(what, cqe.status())),
            None => Err(CalibrateError::Stuck(what)),
        }
    }

    /// Writes the first `len` bytes of the host buffer at `slba` (whole blocks).
    pub fn write(&mut self, slba: u64, len: usize) -> Result<(), CalibrateError> {
        let blocks = (len / self.block_size_bytes() as usize) as u32;
        let sqe = SubmissionEntry::read_write(true, 0, NSID, slba, blocks);
        self.exec("Write", IO_QUEUE, sqe, len).map(|_| ())
    }

    /// Reads `blocks` blocks at `slba` into the host buffer.
    pub fn read(&mut self, slba: u64, blocks: u32) -> Result<(), CalibrateError> {
        let len = blocks as usize * self.block_size_bytes() as usize;
        let sqe = SubmissionEntry::read_write(false, 0, NSID, slba, blocks);
        self.exec("Read", IO_QUEUE, sqe, len).map(|_| ())
    }

    /// Attaches `graph` with GRAPH_ATTACH.
    pub fn attach(&mut self, graph: &GraphDescriptor) -> Result<(), CalibrateError> {
        let wire = graph.to_wire();
        let bytes = wire.as_bytes();
        self.host
            .buffer
            .get_mut(..bytes.len())
            .ok_or(CalibrateError::HostBuffer)?
            .copy_from_slice(bytes);
        let sqe = SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 0, NSID, 64, 0);
        self.exec("GRAPH_ATTACH", IO_QUEUE, sqe, bytes.len())
            .map(|_| ())
    }

    /// Samples the NS_config in the first `len` bytes of the host buffer: NS_SUBMIT, then
    /// NS_COLLECT into the whole buffer. Returns the subgraph's size.
    pub fn sample(&mut self, len: usize) -> Result<usize, CalibrateError> {
        let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, NSID, len as u32, 0);
        let tag = self.exec("NS_SUBMIT", IO_QUEUE, sqe, len)?;
        let room = self.host.buffer.len() & !3;
        let sqe = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 0, NSID, room as u32, tag);
        self.exec("NS_COLLECT", IO_QUEUE, sqe, room)
            .map(|size| size as usize)
    }
}
