//! Taking a command: parse it apart from executing it ([`AdminCommand::parse`],
//! [`IoCommand::parse`]), then complete it at once (Identify and the other admin commands,
//! GRAPH_ATTACH's checks, NS_SUBMIT, a Flush with nothing to make durable, and every error) or
//! hand back the [`Op`] it parks as.

use sagessd_abi::graph::GraphDescriptor;
use sagessd_abi::identify::IDENTIFY_SIZE_BYTES;
use sagessd_abi::nvme::{
    AdminCommand, CompletionEntry, IoCommand, Status, SubmissionEntry, VendorStatus,
};
use sagessd_abi::tunnel::TunnelAccess;

use super::parked::{Op, Parked, Trim};
use super::transfer::{PageIo, Source, Transfer, dma_in, dma_out};
use super::{Busy, Firmware};
use crate::admin::{Facts, NSID};
use crate::hal::Flash;
use crate::host::{CommandId, HostInterface};
use crate::isp::Collect;

/// Command ID Conflict (generic status 0x03).
const COMMAND_ID_CONFLICT: Status = Status::generic(0x03, true);

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// Takes one command. Completes it through `host` at once when it can; otherwise parks it
    /// until [`Self::poll`] finishes it. `Err(Busy)`: no slot free, nothing was done.
    pub fn submit<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        sqe: &SubmissionEntry,
    ) -> Result<(), Busy> {
        let free = self.commands.iter().position(Option::is_none).ok_or(Busy)?;
        self.backend.work.commands += 1;
        if self
            .commands
            .iter()
            .flatten()
            .any(|c| c.id == id && !c.abandoned)
        {
            host.note_work(&self.backend.work);
            host.complete(
                id,
                CompletionEntry::new(id.sq_id, id.cid, COMMAND_ID_CONFLICT, 0),
            );
            return Ok(());
        }
        let outcome = if id.sq_id == 0 {
            self.admin(host, id, sqe)
        } else {
            self.io(host, id, sqe)
        };
        match outcome {
            Ok(Some(op)) => {
                if let Op::Read(t) | Op::Write(t) = &op {
                    let dram = self.dram.as_mut();
                    for p in 0..t.page_count {
                        self.pages.set(dram, free, p, PageIo::Todo);
                    }
                }
                self.asleep &= !(1u64 << free);
                self.commands[free] = Some(Parked {
                    id,
                    seq: self.next_seq,
                    op,
                    status: Status::SUCCESS,
                    abandoned: false,
                });
                self.next_seq = self.next_seq.wrapping_add(1);
            }
            Ok(None) => {}
            Err((status, result)) => {
                host.note_work(&self.backend.work);
                host.complete(id, CompletionEntry::new(id.sq_id, id.cid, status, result))
            }
        }
        Ok(())
    }

    /// Runs an admin command to completion. `Err` carries (status, result dword 0).
    fn admin<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        sqe: &SubmissionEntry,
    ) -> Result<Option<Op>, (Status, u32)> {
        let page_blocks =
            u64::from(self.backend.geometry.page_size_bytes / self.block_size_bytes());
        let facts = Facts {
            mdts: (self.config.max_transfer_bytes / 4096).trailing_zeros() as u8,
            limits: self.isp.limits(),
            namespace_blocks: self.namespace_blocks,
            used_blocks: self.backend.ftl.mapped_pages() * page_blocks,
            block_size_log2: self.config.block_size_log2,
            spare_percent: self.backend.ftl.spare_percent(),
            tunnel: self.tunnel,
        };
        let mut data = [0u8; IDENTIFY_SIZE_BYTES];
        let (len, result) = self
            .admin
            .execute(AdminCommand::parse(sqe), &facts, &mut data)
            .map_err(|s| (s, 0))?;
        if len > 0 {
            dma_out(&mut self.backend.work, host, id, 0, &data[..len])
                .map_err(|_| (Status::DATA_TRANSFER_ERROR, 0))?;
        }
        Err((Status::SUCCESS, result))
    }

    /// Starts an I/O command. `Ok(Some(op))`: park it; `Err`: complete now with (status, dw0).
    fn io<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        sqe: &SubmissionEntry,
    ) -> Result<Option<Op>, (Status, u32)> {
        let cmd = IoCommand::parse(sqe).map_err(|s| (s, 0))?;
        if matches!(cmd, IoCommand::Unsupported(_)) {
            return Err((Status::INVALID_OPCODE, 0));
        }
        if sqe.nsid.get() != NSID {
            return Err((Status::INVALID_NAMESPACE, 0));
        }
        let vendor = |v: VendorStatus| (Status::from(v), 0);
        // Past the namespace's end lies the tunnel window: a Read or Write wholly inside one
        // of its slots is the sampling exchange; anything else out there is out of range.
        if let IoCommand::Read { slba, block_count } | IoCommand::Write { slba, block_count } = cmd
            && let Some(window) = self.tunnel
            && slba.saturating_add(u64::from(block_count)) > self.namespace_blocks
        {
            let TunnelAccess::Slot {
                slot,
                offset_blocks,
            } = window.locate(slba, block_count)
            else {
                return Err((Status::LBA_OUT_OF_RANGE, 0));
            };
            let bs = self.block_size_bytes() as usize;
            let (offset, len) = (offset_blocks as usize * bs, block_count as usize * bs);
            return if matches!(cmd, IoCommand::Write { .. }) {
                self.tunnel_submit(host, id, slot, offset, len)
            } else {
                self.tunnel_collect(slot, offset, len)
            };
        }
        match cmd {
            // Every write completes only once programmed (the device reports no volatile write
            // cache), so a Flush has nothing to make durable; it takes a checkpoint when the
            // pages a boot would replay are at least a checkpoint's worth.
            IoCommand::Flush => {
                let b = &self.backend;
                if b.ftl.programs_since_snapshot() >= u64::from(b.checkpoint.layout.pages) {
                    Ok(Some(self.durable()))
                } else {
                    Err((Status::SUCCESS, 0))
                }
            }
            IoCommand::Read { slba, block_count } => {
                let t = self.transfer(slba, block_count)?;
                let health = &mut self.admin.health;
                health.host_reads += 1;
                health.sectors_read += u64::from(block_count) << (self.config.block_size_log2 - 9);
                Ok(Some(Op::Read(t)))
            }
            IoCommand::Write { slba, block_count } => {
                let t = self.transfer(slba, block_count)?;
                let health = &mut self.admin.health;
                health.host_writes += 1;
                health.sectors_written +=
                    u64::from(block_count) << (self.config.block_size_log2 - 9);
                Ok(Some(Op::Write(t)))
            }
            IoCommand::WriteZeroes {
                slba,
                block_count,
                deallocate,
            } => {
                // No data moves, but a command zeroes at most a transfer's pages (WZSL = MDTS
                // in Identify), so it fits a command slot like a Write.
                let mut t = self.transfer(slba, block_count)?;
                t.source = Source::Zeroes { deallocate };
                Ok(Some(Op::Write(t)))
            }
            IoCommand::DatasetManagement {
                range_count,
                deallocate,
            } => match deallocate {
                // Without the deallocate attribute the ranges are only hints: nothing to do.
                false => Err((Status::SUCCESS, 0)),
                true => Ok(Some(Op::Deallocate(Trim {
                    range_count,
                    range: 0,
                    next_lpn: 0,
                    end_lpn: 0,
                }))),
            },
            IoCommand::GraphAttach { data_len_bytes } => {
                // The descriptor, and its feature region if it has one.
                let mut wire = [0u8; 128];
                let n = (data_len_bytes as usize).min(wire.len());
                dma_in(&mut self.backend.work, host, id, 0, &mut wire[..n])
                    .map_err(|_| (Status::DATA_TRANSFER_ERROR, 0))?;
                let g = GraphDescriptor::parse(
                    &wire[..n],
                    self.block_size_bytes(),
                    self.namespace_blocks,
                )
                .map_err(vendor)?;
                // The sampler keeps node ids in 32 bits (its node table, its sort keys, the
                // neighbours it gathers), with u32::MAX never an id.
                if g.node_count > u64::from(u32::MAX) {
                    return Err(vendor(VendorStatus::GraphTooLarge));
                }
                // Feature rows are gathered a page at a time: none may straddle two pages.
                let page = u64::from(self.backend.geometry.page_size_bytes);
                if let Some(f) = g.features {
                    let start = f.range.slba * u64::from(self.block_size_bytes());
                    if !start.is_multiple_of(page) || f.stride_bytes() > page {
                        return Err(vendor(VendorStatus::BadDescriptor));
                    }
                }
                self.graph = Some(g);
                Ok(Some(self.durable()))
            }
            IoCommand::NsSubmit { data_len_bytes } => {
                let tag = self.ns_submit(host, id, data_len_bytes as usize, true)?;
                Err((Status::SUCCESS, tag))
            }
            IoCommand::NsCollect {
                tag,
                data_len_bytes,
                window,
                discard,
            } => match self.isp.collect_state(self.dram.as_ref(), tag) {
                Collect::Unknown => Err(vendor(VendorStatus::UnknownTag)),
                _ if window.is_some_and(|o| o % 4 != 0) => Err((Status::INVALID_FIELD, 0)),
                _ if discard => Ok(Some(Op::Collect {
                    tag,
                    data_len_bytes: 0,
                    window: None,
                    zero_fill: false,
                    discard: true,
                })),
                _ => Ok(Some(Op::Collect {
                    tag,
                    data_len_bytes: data_len_bytes as usize,
                    window: window.map(|o| o as usize),
                    zero_fill: false,
                    discard: false,
                })),
            },
            IoCommand::Unsupported(_) => Err((Status::INVALID_OPCODE, 0)),
        }
    }

    /// A command that completes once a checkpoint holding the current state is on flash.
    fn durable(&mut self) -> Op {
        let checkpoint = &mut self.backend.checkpoint;
        Op::Durable {
            ticket: checkpoint.request(),
            give_ups: checkpoint.gave_up(),
        }
    }

    /// NS_SUBMIT's work: takes a free sampling slot, DMAs the NS_config of `len` bytes into it
    /// and queues the job; returns its tag. `hyperbatch`: whether the path it came by can
    /// collect a hyperbatch's minibatches one by one.
    fn ns_submit<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        len: usize,
        hyperbatch: bool,
    ) -> Result<u32, (Status, u32)> {
        let vendor = |v: VendorStatus| (Status::from(v), 0);
        let graph = self.graph.ok_or(vendor(VendorStatus::NoGraphAttached))?;
        let (slot, window) = self
            .isp
            .free_slot()
            .ok_or(vendor(VendorStatus::NoFreeSlot))?;
        let n = len.min(window.len);
        let dram = self.dram.as_mut();
        dma_in(
            &mut self.backend.work,
            host,
            id,
            0,
            window.sub(0, n).bytes_mut(dram),
        )
        .map_err(|_| (Status::DATA_TRANSFER_ERROR, 0))?;
        self.isp
            .accept(dram, slot, n, &graph, hyperbatch)
            .map_err(vendor)
    }

    /// A Write into tunnel slot `slot`: an NS_SUBMIT of its data, which must start at the
    /// slot's first LBA. A finished, uncollected job of the slot is dropped first; a running
    /// one makes the Write fail with "no free slot" (retry after reading it).
    fn tunnel_submit<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        slot: usize,
        offset: usize,
        len: usize,
    ) -> Result<Option<Op>, (Status, u32)> {
        if offset != 0 {
            return Err((Status::INVALID_FIELD, 0));
        }
        if let Some(old) = self.tunnel_jobs[slot] {
            match self.isp.collect_state(self.dram.as_ref(), old) {
                Collect::Pending => return Err((VendorStatus::NoFreeSlot.into(), 0)),
                Collect::Unknown => {}
                Collect::Done(_) | Collect::Failed(_) => self.isp.release(old),
            }
        }
        // A tunnel slot's Reads name no minibatch: it carries plain NS_configs only.
        let tag = self.ns_submit(host, id, len, false)?;
        self.tunnel_jobs[slot] = Some(tag);
        Err((Status::SUCCESS, tag))
    }

    /// A Read inside tunnel slot `slot`: the bytes of its job's subgraph from `offset`,
    /// zero-filled past the end; waits while the job runs.
    fn tunnel_collect(
        &mut self,
        slot: usize,
        offset: usize,
        len: usize,
    ) -> Result<Option<Op>, (Status, u32)> {
        let tag = self.tunnel_jobs[slot]
            .filter(|t| {
                !matches!(
                    self.isp.collect_state(self.dram.as_ref(), *t),
                    Collect::Unknown
                )
            })
            .ok_or((VendorStatus::UnknownTag.into(), 0))?;
        Ok(Some(Op::Collect {
            tag,
            data_len_bytes: len,
            window: Some(offset),
            zero_fill: true,
            discard: false,
        }))
    }

    /// Checks a Read/Write range and lays out its pages.
    fn transfer(&self, slba: u64, block_count: u32) -> Result<Transfer, (Status, u32)> {
        let end = slba
            .checked_add(u64::from(block_count))
            .ok_or((Status::LBA_OUT_OF_RANGE, 0))?;
        if end > self.namespace_blocks {
            return Err((Status::LBA_OUT_OF_RANGE, 0));
        }
        let bs = u64::from(self.block_size_bytes());
        let len_bytes = u64::from(block_count) * bs;
        if len_bytes > u64::from(self.config.max_transfer_bytes) {
            return Err((Status::INVALID_FIELD, 0));
        }
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        let start_byte = slba * bs;
        let first = start_byte / ps;
        let last = (start_byte + len_bytes - 1) / ps;
        Ok(Transfer {
            start_byte,
            len_bytes,
            first_lpn: first as u32,
            page_count: (last - first + 1) as usize,
            source: Source::Host,
        })
    }
}
