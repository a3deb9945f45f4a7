//! The trim log: deallocations made durable by a *trim record*, one flash page, instead of a
//! whole checkpoint.
//!
//! ```plain
//!   DSM deallocate / deallocating Write Zeroes
//!     └─ unmap page (RAM) + append it to the open record ──► seal ──► program a record page
//!                                                                       └─► command completes
//!   boot: replay (crate::recovery) reads each record programmed since the checkpoint and
//!         unmaps its pages, unless a newer version of a page was written after the trim
//! ```
//!
//! A record is a page in garbage collection's write stream (which may use the reserve of free
//! blocks: on a full device a trim is what frees space). Its spare says "trim record, `n` ranges,
//! data sequence `T`" (`crate::oob`); its data holds `n`, a CRC32C of the ranges, then the
//! ranges as (first logical page, pages), all little-endian u32. `T` is a sequence number
//! drawn from the same counter as the data sequences of host writes, reserved when the record
//! is opened; a record takes unmaps only while no new data version has been stamped since (else
//! it is sealed and another opened), so that every write before one of its unmaps has a smaller
//! data sequence and every write after a larger one. GC copies keep their version and records
//! have none, so neither seals the open record. Replay then needs no order: a page's
//! newest version wins if its data sequence is above `T`, and the record's unmap wins
//! otherwise.
//!
//! A record counts only once it reads back whole (retried like any read, `crate::read_retry`):
//! one the media left unreadable is written again elsewhere, as a checkpoint page would be.
//!
//! A record must outlive the pages it kills: garbage collection does not erase a block that
//! holds one no durable checkpoint covers yet (`Ftl::record_programmed`), a checkpoint is
//! requested once half of [`MAX_UNSAVED_RECORDS`] are unsaved, and at the bound new trims wait
//! for it. On a device with no page left at all (retired blocks have eaten the spare), a
//! checkpoint holds a sealed record's unmaps instead. Records are programmed one at a time, in
//! the order they were opened, so a command that waits for record `r` waits for every unmap it
//! made.

use sagessd_abi::crc32c::crc32c;

use crate::checkpoint::{Checkpointer, Ticket};
use crate::config::{MAX_UNSAVED_RECORDS, TRIM_LOG_WINDOWS};
use crate::dram::Region;
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::ftl::Ftl;
use crate::hal::{FlashError, FlashOp, PhysPage, SPARE_BYTES, Sectors};
use crate::oob::{PageKind, ReadSpare, Spare};
use crate::read_retry::READ_RETRIES;

/// The DRAM window after the record windows, which a programmed record is read back into.
const READBACK: usize = TRIM_LOG_WINDOWS;
/// Bytes before a record's ranges: the range count and their CRC32C.
const RECORD_HEADER_BYTES: usize = 8;
/// Program attempts of one record before its waiters are failed.
const MAX_ATTEMPTS: u8 = 8;

/// Ranges of logical pages a record of a page of `page_size_bytes` holds at most.
pub(crate) fn ranges_per_record(page_size_bytes: usize) -> usize {
    (page_size_bytes - RECORD_HEADER_BYTES) / 8
}

/// Whether a record's data holds `ranges` ranges (the spare's count) under an intact CRC.
pub(crate) fn record_is_intact(data: &[u8], ranges: u32) -> bool {
    let body = (ranges as usize)
        .checked_mul(8)
        .and_then(|len| data.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES.checked_add(len)?));
    match (body, data.get(..RECORD_HEADER_BYTES)) {
        (Some(body), Some(header)) => {
            header[..4] == ranges.to_le_bytes() && header[4..] == crc32c(body).to_le_bytes()
        }
        _ => false,
    }
}

/// Range `i` of an intact record held in `window` (data, then spare): (first logical page,
/// pages).
pub(crate) fn record_range(window: Region, dram: &[u8], i: usize) -> (u32, u32) {
    let at = RECORD_HEADER_BYTES / 4 + 2 * i;
    (window.u32(dram, at), window.u32(dram, at + 1))
}

/// A record: its number (records are numbered from 1, in the order they open), its data
/// sequence, its ranges so far, and the program attempts that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    number: u64,
    ts: u64,
    ranges: u32,
    attempts: u8,
}

/// What a window holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    Free,
    /// Taking unmaps.
    Open(Record),
    /// Closed, waiting for its program.
    Sealed(Record),
    /// No page to program it into (the device is full: retired blocks ate the spare): the
    /// checkpoint `ticket` holds record `number`'s unmaps instead; `give_ups` is the writer's
    /// count then.
    Checkpointing {
        number: u64,
        ticket: Ticket,
        give_ups: u32,
    },
    /// Being programmed into `ppn`, at program sequence `program_seq`.
    Programming {
        record: Record,
        ppn: PhysPage,
        program_seq: u64,
    },
    /// Programmed; being read back (`reads_failed` attempts failed so far; `due`: the next
    /// read waits for flash-queue room).
    Verifying {
        record: Record,
        ppn: PhysPage,
        program_seq: u64,
        reads_failed: u8,
        due: bool,
    },
}

/// Trim-log counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimLogStats {
    /// Records programmed.
    pub records: u64,
    /// Ranges of logical pages they held.
    pub ranges: u64,
}

/// The trim log's state: its windows and how far its records are on flash.
#[derive(Debug)]
pub(crate) struct TrimLog {
    windows: Region,
    window_bytes: usize,
    page_bytes: usize,
    state: [Window; TRIM_LOG_WINDOWS],
    /// The number the next opened record gets (records are numbered from 1).
    next_record: u64,
    /// Every record numbered up to this is on flash (or failed for good).
    done_through: u64,
    /// The newest record that failed for good (0: none): its waiters fail.
    last_failed: u64,
    pub stats: TrimLogStats,
}

/// Whether a trim may go on now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The page was appended to the open record: unmap it.
    Logged,
    /// No window or no record budget now: try again later.
    Wait,
}

impl TrimLog {
    /// A log over `windows` ([`TRIM_LOG_REGION_WINDOWS`](crate::config::TRIM_LOG_REGION_WINDOWS) page windows of `window_bytes`: the
    /// record windows, then the read-back one).
    pub fn new(windows: Region, window_bytes: usize, page_bytes: usize) -> Self {
        Self {
            windows,
            window_bytes,
            page_bytes,
            state: [Window::Free; TRIM_LOG_WINDOWS],
            next_record: 1,
            done_through: 0,
            last_failed: 0,
            stats: TrimLogStats::default(),
        }
    }

    fn window(&self, k: usize) -> Region {
        self.windows.sub(k * self.window_bytes, self.window_bytes)
    }

    /// Appends logical page `lpn`, about to be unmapped, to the open record (opening one, or
    /// sealing a record that can take no more, as needed).
    pub fn admit(&mut self, dram: &mut [u8], ftl: &mut Ftl, lpn: u32) -> Admit {
        let per_record = ranges_per_record(self.page_bytes) as u32;
        if let Some((k, mut record)) = self.open_record() {
            let body = self.window(k).sub(RECORD_HEADER_BYTES, self.page_bytes);
            if !ftl.versioned_since(record.ts) {
                // Extends the last range when `lpn` follows it, else starts one.
                let last = (record.ranges as usize - 1) * 2;
                let (first, count) = (body.u32(dram, last), body.u32(dram, last + 1));
                if first.checked_add(count) == Some(lpn) {
                    body.set_u32(dram, last + 1, count + 1);
                    return Admit::Logged;
                }
                if record.ranges < per_record {
                    body.set_u32(dram, last + 2, lpn);
                    body.set_u32(dram, last + 3, 1);
                    record.ranges += 1;
                    self.state[k] = Window::Open(record);
                    return Admit::Logged;
                }
            }
            self.state[k] = Window::Sealed(record);
        }
        // A new record: a free window, and room under the unsaved bound.
        let in_log = self.state.iter().filter(|w| **w != Window::Free).count();
        let Some(k) = self.state.iter().position(|w| *w == Window::Free) else {
            return Admit::Wait;
        };
        if in_log + ftl.unsaved_records() >= MAX_UNSAVED_RECORDS {
            return Admit::Wait;
        }
        let body = self.window(k).sub(RECORD_HEADER_BYTES, self.page_bytes);
        body.set_u32(dram, 0, lpn);
        body.set_u32(dram, 1, 1);
        self.state[k] = Window::Open(Record {
            number: self.next_record,
            ts: ftl.reserve_seq(),
            ranges: 1,
            attempts: 0,
        });
        self.next_record += 1;
        Admit::Logged
    }

    /// The open record and its window, if any.
    fn open_record(&self) -> Option<(usize, Record)> {
        self.state.iter().enumerate().find_map(|(k, w)| match w {
            Window::Open(record) => Some((k, *record)),
            _ => None,
        })
    }

    /// Seals the open record, if any, and returns what a command that made unmaps so far
    /// waits for: the records after the first (done then) through the second (the newest one
    /// opened).
    pub fn seal_all(&mut self) -> (u64, u64) {
        if let Some((k, record)) = self.open_record() {
            self.state[k] = Window::Sealed(record);
        }
        (self.done_through, self.next_record - 1)
    }

    /// Whether records `from + 1 ..= to` are on flash: `Some(true)`; done but one failed for
    /// good: `Some(false)`; not yet: `None`.
    pub fn outcome(&self, from: u64, to: u64) -> Option<bool> {
        (to <= self.done_through).then_some(!(from < self.last_failed && self.last_failed <= to))
    }

    /// Whether nothing waits to be programmed or is being programmed.
    pub fn is_idle(&self) -> bool {
        self.state
            .iter()
            .all(|w| matches!(w, Window::Free | Window::Open(_)))
    }

    /// Programs the oldest sealed record when none is being programmed (or, on a full device,
    /// has a checkpoint hold it). Returns whether anything changed.
    pub fn step(
        &mut self,
        dram: &mut [u8],
        ftl: &mut Ftl,
        queue: &mut FlashQueue,
        checkpoint: &mut Checkpointer,
    ) -> bool {
        if self.is_idle() {
            return false;
        }
        for k in 0..TRIM_LOG_WINDOWS {
            if let Window::Checkpointing {
                number,
                ticket,
                give_ups,
            } = self.state[k]
            {
                let Some(durable) = checkpoint.outcome(ticket, give_ups) else {
                    return false;
                };
                self.finish(k, number, durable);
                return true;
            }
        }
        for k in 0..TRIM_LOG_WINDOWS {
            if let Window::Verifying { ppn, due: true, .. } = self.state[k] {
                if !queue.has_room(1) {
                    return false;
                }
                self.push_readback(queue, k, ppn);
                if let Window::Verifying { due, .. } = &mut self.state[k] {
                    *due = false;
                }
                return true;
            }
        }
        if self
            .state
            .iter()
            .any(|w| matches!(w, Window::Programming { .. } | Window::Verifying { .. }))
        {
            return false;
        }
        let oldest = (0..TRIM_LOG_WINDOWS)
            .filter_map(|k| match self.state[k] {
                Window::Sealed(record) => Some((record.number, k, record)),
                _ => None,
            })
            .min_by_key(|(number, _, _)| *number);
        let Some((_, k, record)) = oldest else {
            return false;
        };
        if !queue.has_room(1) {
            return false;
        }
        // From GC's frontier, which may dip into the reserve: on a full device a trim is what
        // frees space, so its record must not wait for space.
        let Some(ppn) = ftl.allocate(dram, true) else {
            if ftl.is_full() && !ftl.hold_programs {
                self.state[k] = Window::Checkpointing {
                    number: record.number,
                    ticket: checkpoint.request(),
                    give_ups: checkpoint.gave_up(),
                };
                return true;
            }
            return false;
        };
        let window = self.window(k);
        let body_len = record.ranges as usize * 8;
        let body = window.sub(RECORD_HEADER_BYTES, body_len);
        let crc = crc32c(body.bytes(dram));
        let bytes = window.bytes_mut(dram);
        bytes[0..4].copy_from_slice(&record.ranges.to_le_bytes());
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        bytes[RECORD_HEADER_BYTES + body_len..self.page_bytes].fill(0);
        let spare = &mut bytes[self.page_bytes..self.page_bytes + SPARE_BYTES];
        let program_seq = ftl.stamp_trim_record(spare, record.ranges, record.ts);
        queue.push(
            Tag::new(TagKind::TrimRecord, 0, k as u16),
            FlashOp::Program {
                ppn,
                dram_offset_bytes: window.start,
            },
        );
        self.state[k] = Window::Programming {
            record,
            ppn,
            program_seq,
        };
        true
    }

    /// Queues the read-back of record window `k`, programmed into `ppn`.
    fn push_readback(&self, queue: &mut FlashQueue, k: usize, ppn: PhysPage) {
        queue.push(
            Tag::new(TagKind::TrimRecordVerify, 0, k as u16),
            FlashOp::Read {
                ppn,
                dram_offset_bytes: self.window(READBACK).start,
                sectors: Sectors::ALL,
            },
        );
    }

    /// The program of the record in window `k` finished: it is read back next, or (the media
    /// failed it) written again elsewhere.
    pub fn programmed(
        &mut self,
        dram: &mut [u8],
        ftl: &mut Ftl,
        queue: &mut FlashQueue,
        k: usize,
        result: Result<(), FlashError>,
    ) {
        let Some(&Window::Programming {
            record,
            ppn,
            program_seq,
        }) = self.state.get(k)
        else {
            return;
        };
        ftl.program_finished(dram, ppn, result.is_ok());
        if result.is_err() {
            self.program_again(k, record);
            return;
        }
        // Its block is kept from now: a record that does not read back is written again, and
        // the block holding the bad copy is kept until a checkpoint too (harmless).
        ftl.record_programmed(ppn, program_seq);
        let due = !queue.has_room(1);
        if !due {
            self.push_readback(queue, k, ppn);
        }
        self.state[k] = Window::Verifying {
            record,
            ppn,
            program_seq,
            reads_failed: 0,
            due,
        };
    }

    /// The read-back of the record in window `k` finished: the record counts if the page
    /// holds what was programmed; a failed read is retried; a page that never reads back is
    /// written again elsewhere.
    pub fn read_back(&mut self, dram: &[u8], k: usize, result: Result<(), FlashError>) {
        let Some(&Window::Verifying {
            record,
            program_seq,
            reads_failed,
            ..
        }) = self.state.get(k)
        else {
            return;
        };
        let len = RECORD_HEADER_BYTES + record.ranges as usize * 8;
        let back = self.window(READBACK).bytes(dram);
        let expected = Spare {
            kind: PageKind::Trim,
            index: record.ranges,
            data_seq: record.ts,
            program_seq,
        };
        let intact = result.is_ok()
            && back[..len] == self.window(k).bytes(dram)[..len]
            && Spare::decode(&back[self.page_bytes..]) == ReadSpare::Valid(expected);
        if intact {
            self.stats.records += 1;
            self.stats.ranges += u64::from(record.ranges);
            self.finish(k, record.number, true);
        } else if reads_failed < READ_RETRIES {
            if let Window::Verifying {
                reads_failed, due, ..
            } = &mut self.state[k]
            {
                *reads_failed += 1;
                *due = true;
            }
        } else {
            self.program_again(k, record);
        }
    }

    /// `record`, in window `k`, did not make it to flash: program it again elsewhere, or
    /// after [`MAX_ATTEMPTS`] fail its waiters.
    fn program_again(&mut self, k: usize, record: Record) {
        if record.attempts + 1 < MAX_ATTEMPTS {
            self.state[k] = Window::Sealed(Record {
                attempts: record.attempts + 1,
                ..record
            });
        } else {
            self.finish(k, record.number, false);
        }
    }

    /// Record `record` in window `k` is on flash (`ok`) or failed for good.
    fn finish(&mut self, k: usize, record: u64, ok: bool) {
        if !ok {
            self.last_failed = record;
        }
        self.done_through = record;
        self.state[k] = Window::Free;
    }
}
