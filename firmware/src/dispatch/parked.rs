//! The command table's other half: what a parked command is waiting for ([`Op`]), and the
//! steps that advance each kind in place until it completes (a Read or Write through
//! [`super::transfer`], a deallocate a bounded number of pages per poll, a Flush or a trim on
//! the checkpoint or trim log that makes it durable, an NS_COLLECT on its sampling job).

use sagessd_abi::nvme::{CompletionEntry, DsmRange, Status, VendorStatus};
use zerocopy::FromBytes;

use super::Firmware;
use super::transfer::{Io, Transfer, dma_in, zero};
use crate::checkpoint::Ticket;
use crate::hal::Flash;
use crate::host::{CommandId, DmaError, HostInterface};
use crate::isp::Collect;

/// Most logical pages one poll trims, bounding the time a poll can take.
const TRIM_PAGES_PER_POLL: u32 = 1024;

/// A Dataset Management deallocate in progress.
#[derive(Clone, Copy, Debug)]
pub(super) struct Trim {
    pub(super) range_count: u32,
    /// The next range to fetch from the host.
    pub(super) range: u32,
    /// The next logical page of the current range, and one past its last.
    pub(super) next_lpn: u32,
    pub(super) end_lpn: u32,
}

/// What a parked command is doing, or waiting for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    Read(Transfer),
    Write(Transfer),
    Deallocate(Trim),
    /// A Flush or a GRAPH_ATTACH waiting for the checkpoint that makes it durable;
    /// `give_ups`: the writer's give-up count when it started waiting.
    Durable {
        ticket: Ticket,
        give_ups: u32,
    },
    /// A finished Dataset Management or deallocating Write Zeroes waiting for the trim records
    /// `from + 1 ..= to` that hold its unmaps (`crate::trim_log`).
    Logged {
        from: u64,
        to: u64,
    },
    /// `window`: the byte offset of a windowed collect; `zero_fill`: a tunnel Read, whose
    /// buffer is zero past the subgraph's end (a window may start past it); `discard`: end the
    /// job without returning it.
    Collect {
        tag: u32,
        data_len_bytes: usize,
        window: Option<usize>,
        zero_fill: bool,
        discard: bool,
    },
}

/// How far one [`Firmware::step_trim`] got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TrimStep {
    /// Every range is trimmed (or the command failed).
    Done,
    /// Some ranges fetched or pages trimmed; more to do.
    Moved,
    /// Nothing moved: the trim log has no room until a record is on flash.
    Stuck,
}

/// A command in a command slot: taken by [`Firmware::submit`], finished by a poll.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parked {
    pub(super) id: CommandId,
    /// Submission order (wrapping): an older overlapping Write goes first.
    pub(super) seq: u32,
    pub(super) op: Op,
    pub(super) status: Status,
    /// Abandoned by [`Firmware::abandon_commands`]: it only finishes its flash work (no host
    /// DMA, no completion), and its id may be reused at once.
    pub(super) abandoned: bool,
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// Advances a Dataset Management deallocate by at most [`TRIM_PAGES_PER_POLL`] pages, so a
    /// command naming the whole namespace cannot stall the poll loop. Ranges are fetched from the
    /// host one at a time; only flash pages wholly inside a range are trimmed, and pages a write
    /// is changing are skipped (deallocation is advisory).
    fn step_trim<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        t: &mut Trim,
        status: &mut Status,
    ) -> TrimStep {
        let bs = u64::from(self.block_size_bytes());
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        let mut budget = TRIM_PAGES_PER_POLL;
        let mut step = TrimStep::Stuck;
        while budget > 0 {
            if t.next_lpn == t.end_lpn {
                if t.range == t.range_count {
                    return TrimStep::Done;
                }
                let mut wire = [0u8; 16];
                if dma_in(
                    &mut self.backend.work,
                    host,
                    id,
                    16 * t.range as usize,
                    &mut wire,
                )
                .is_err()
                {
                    *status = Status::DATA_TRANSFER_ERROR;
                    return TrimStep::Done;
                }
                t.range += 1;
                step = TrimStep::Moved;
                let Ok(r) = DsmRange::read_from_bytes(&wire) else {
                    continue;
                };
                let (slba, blocks) = (r.slba.get(), u64::from(r.block_count.get()));
                let Some(end) = slba
                    .checked_add(blocks)
                    .filter(|e| *e <= self.namespace_blocks)
                else {
                    *status = Status::LBA_OUT_OF_RANGE;
                    return TrimStep::Done;
                };
                t.next_lpn = (slba * bs).div_ceil(ps) as u32;
                t.end_lpn = (end * bs / ps).max(u64::from(t.next_lpn)) as u32;
                continue;
            }
            let lpn = t.next_lpn;
            let busy = self.commands.iter().flatten().any(|c| match c.op {
                Op::Write(w) => (w.first_lpn..w.first_lpn + w.page_count as u32).contains(&lpn),
                _ => false,
            });
            if !busy && !self.backend.unmap_logged(self.dram.as_mut(), lpn) {
                // The trim log is full: go on once a record is on flash.
                return step;
            }
            t.next_lpn += 1;
            budget -= 1;
            step = TrimStep::Moved;
        }
        step
    }

    /// Advances parked command `i` in place; completes it when it is done.
    pub(super) fn step_command<H: HostInterface>(&mut self, host: &mut H, i: usize) -> bool {
        if self.commands[i].is_none() {
            return false;
        }
        self.backend.work.parked_checked += 1;
        let (blocked, trim) = match &self.commands[i] {
            None => return false,
            Some(Parked {
                op: Op::Write(t),
                seq,
                ..
            }) => (self.write_blocked(i, *seq, t), false),
            Some(Parked {
                op: Op::Deallocate(_),
                ..
            }) => (false, true),
            Some(_) => (false, false),
        };
        if trim {
            return self.step_deallocate(host, i);
        }
        let Self {
            backend,
            dram,
            commands,
            pages,
            isp,
            asleep,
            ..
        } = self;
        let Some(cmd) = commands[i].as_mut() else {
            return false;
        };
        let mut io = Io {
            backend,
            dram: dram.as_mut(),
            pages: *pages,
        };
        let (progress, done, result) = match &mut cmd.op {
            Op::Read(t) => {
                let (p, waits_on_loads) = io.step_read(host, cmd.id, i, t, &mut cmd.status);
                let done = io.pages.all_done(io.dram, i, t);
                if !p && !done && waits_on_loads {
                    *asleep |= 1u64 << i;
                }
                (p, done, 0)
            }
            Op::Write(t) => {
                let p = !blocked && io.step_write(host, cmd.id, i, t, &mut cmd.status);
                let done = io.pages.all_done(io.dram, i, t);
                if done && cmd.status.is_success() && io.unmaps_pages(t) {
                    // Unmapped pages are on flash once the trim records holding them are.
                    let (from, to) = io.backend.trim_log.seal_all();
                    cmd.op = Op::Logged { from, to };
                    (true, false, 0)
                } else {
                    (p, done, 0)
                }
            }
            // Handled above: trimming looks at the whole command table.
            Op::Deallocate(_) => (false, false, 0),
            Op::Logged { from, to } => {
                waited(io.backend.trim_log.outcome(*from, *to), &mut cmd.status)
            }
            Op::Durable { ticket, give_ups } => waited(
                io.backend.checkpoint.outcome(*ticket, *give_ups),
                &mut cmd.status,
            ),
            Op::Collect {
                tag,
                data_len_bytes,
                window,
                zero_fill,
                discard,
            } => match isp.collect_state(io.dram, *tag) {
                Collect::Pending => (false, false, 0),
                Collect::Unknown => {
                    cmd.status = VendorStatus::UnknownTag.into();
                    (true, true, 0)
                }
                Collect::Failed(_) | Collect::Done(_) if *discard => {
                    isp.release(*tag);
                    (true, true, 0)
                }
                Collect::Failed(s) => {
                    cmd.status = s;
                    isp.release(*tag);
                    (true, true, 0)
                }
                Collect::Done(size) if window.is_none() && size > *data_len_bytes => {
                    cmd.status = VendorStatus::BufferTooSmall.into();
                    (true, true, size as u32)
                }
                Collect::Done(size) if !*zero_fill && window.is_some_and(|o| o > size) => {
                    cmd.status = Status::INVALID_FIELD;
                    (true, true, size as u32)
                }
                Collect::Done(size) => {
                    let start = window.unwrap_or(0).min(size);
                    let len = (*data_len_bytes).min(size - start);
                    // The subgraph's bytes, and for a tunnel Read the zeros after them.
                    io.backend.work.bytes_copied +=
                        if *zero_fill { *data_len_bytes } else { len } as u64;
                    host.note_work(&io.backend.work);
                    let mut to = Window {
                        host: &mut *host,
                        start,
                        len,
                    };
                    let written = isp
                        .write_result(io.dram, *tag, &mut to, cmd.id)
                        .and_then(|_| {
                            if *zero_fill {
                                zero(host, cmd.id, len, *data_len_bytes)
                            } else {
                                Ok(())
                            }
                        });
                    match written {
                        Ok(()) if start + len == size => isp.release(*tag),
                        Ok(()) => {}
                        Err(DmaError) => cmd.status = Status::DATA_TRANSFER_ERROR,
                    }
                    (true, true, size as u32)
                }
            },
        };
        if done {
            host.note_work(&io.backend.work);
            host.complete(
                cmd.id,
                CompletionEntry::new(cmd.id.sq_id, cmd.id.cid, cmd.status, result),
            );
            commands[i] = None;
        }
        progress || done
    }

    /// Advances parked Dataset Management command `i` (a copy of it: trimming consults the
    /// whole command table); completes it when it is done.
    fn step_deallocate<H: HostInterface>(&mut self, host: &mut H, i: usize) -> bool {
        let Some(mut cmd) = self.commands[i] else {
            return false;
        };
        let Op::Deallocate(mut t) = cmd.op else {
            return false;
        };
        // A checkpoint is copying the mapping out: it must not change meanwhile.
        if self.backend.checkpoint.tables_frozen() {
            return false;
        }
        let step = self.step_trim(host, cmd.id, &mut t, &mut cmd.status);
        let done = step == TrimStep::Done;
        if done && cmd.status.is_success() {
            // Trims are on flash once the records holding them are.
            let (from, to) = self.backend.trim_log.seal_all();
            cmd.op = Op::Logged { from, to };
            self.commands[i] = Some(cmd);
        } else if done {
            host.note_work(&self.backend.work);
            host.complete(
                cmd.id,
                CompletionEntry::new(cmd.id.sq_id, cmd.id.cid, cmd.status, 0),
            );
            self.commands[i] = None;
        } else {
            cmd.op = Op::Deallocate(t);
            self.commands[i] = Some(cmd);
        }
        step != TrimStep::Stuck
    }

    /// Whether an older write that overlaps `t` is still in progress (writes to one page must
    /// not interleave their read-modify-write).
    fn write_blocked(&self, me: usize, seq: u32, t: &Transfer) -> bool {
        let (a0, a1) = (t.first_lpn, t.first_lpn + t.page_count as u32);
        self.commands
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != me)
            .filter_map(|(_, c)| c.as_ref())
            .any(|c| match c.op {
                Op::Write(o) => {
                    let older = c.seq.wrapping_sub(seq) > u32::MAX / 2;
                    older && o.first_lpn < a1 && a0 < o.first_lpn + o.page_count as u32
                }
                _ => false,
            })
    }
}

/// A step of a command that waits for its changes to be durable (`Some(true)`) or given up
/// (`Some(false)`: Write Fault): (progress, done, result).
fn waited(outcome: Option<bool>, status: &mut Status) -> (bool, bool, u32) {
    match outcome {
        None => (false, false, 0),
        Some(durable) => {
            if !durable {
                *status = Status::WRITE_FAULT;
            }
            (true, true, 0)
        }
    }
}

/// The host as a window `[start, start + len)` of a command's result sees it: the result is
/// written whole, and only the window's bytes reach the host buffer, at offset 0 (a windowed
/// NS_COLLECT).
struct Window<'a, H> {
    host: &'a mut H,
    start: usize,
    len: usize,
}

impl<H: HostInterface> HostInterface for Window<'_, H> {
    fn dma_from_host(&mut self, _: CommandId, _: usize, _: &mut [u8]) -> Result<(), DmaError> {
        Err(DmaError)
    }

    fn dma_to_host(&mut self, cmd: CommandId, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        let end = (offset + src.len()).min(self.start + self.len);
        let from = offset.max(self.start);
        if from >= end {
            return Ok(());
        }
        let piece = &src[from - offset..end - offset];
        self.host.dma_to_host(cmd, from - self.start, piece)
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        self.host.complete(cmd, cqe);
    }
}

/// The host as an abandoned command sees it: no buffer to move data to or from, and nobody to
/// take its completion.
pub(super) struct Abandoned;

impl HostInterface for Abandoned {
    fn dma_from_host(&mut self, _: CommandId, _: usize, _: &mut [u8]) -> Result<(), DmaError> {
        Err(DmaError)
    }

    fn dma_to_host(&mut self, _: CommandId, _: usize, _: &[u8]) -> Result<(), DmaError> {
        Err(DmaError)
    }

    fn complete(&mut self, _: CommandId, _: CompletionEntry) {}
}
