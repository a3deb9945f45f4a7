//! Booting from flash after a clean stop or a power cut: [`Firmware::recover`].
//!
//! ```plain
//!   1. read the first page of both checkpoint slots; take the newest checkpoint whose every
//!      page reads back intact (a torn one is skipped), or none
//!   2. read the first readable page of every block: erased, rewritten or untouched since the
//!      snapshot
//!   3. replay: scan the blocks written since, page by page until an erased one (an unreadable
//!      page is skipped); then read the trim records found (`crate::trim_log`) and apply them
//!   4. rebuild the derived tables and continue the sequences; the blocks left free are
//!      erased only when they are about to be used (`crate::ftl` `lazy_erase`: one may hold a
//!      page whose program was cut short yet reads as erased), so a boot erases nothing
//! ```
//!
//! The rules of steps 2 and 3 live with the tables (`crate::ftl` `rebuild`). Boot runs to
//! completion before the firmware takes a command; it drives the flash directly, through the
//! checkpoint windows, and calls `wait` whenever it has nothing to do but wait for the flash (a
//! board spins or sleeps; the emulator advances its NAND clock).

use crate::checkpoint::{Header, Piece, for_each_run};
use crate::checkpoint_layout::HEADER_BYTES;
use crate::config::CHECKPOINT_WINDOWS;
use crate::config::MAX_UNSAVED_RECORDS;
use crate::config::{ConfigError, FirmwareConfig};
use crate::dispatch::Firmware;
use crate::ftl::{BlockScan, Replayed};
use crate::hal::{Flash, FlashError, FlashOp, PhysBlock, PhysPage, Sectors};
use crate::oob::{PageKind, ReadSpare, Spare};
use crate::read_retry::READ_RETRIES;
use crate::trim_log::{record_is_intact, record_range};

/// Why the firmware cannot boot from the flash it was given. Each variant names what is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// The configuration itself is invalid (as [`Firmware::new`] would say).
    Config(ConfigError),
    /// The flash holds a checkpoint this configuration cannot use: `field` differs (geometry,
    /// capacity, the attached graph).
    Invalid(&'static str),
    /// The flash refused an operation outright (out of range: the HAL and the geometry
    /// disagree).
    Flash(FlashError),
}

/// What a boot found and did, for `device info` and the footprint report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BootReport {
    /// The checkpoint booted from (`None`: none was valid; everything was replayed).
    pub checkpoint_id: Option<u64>,
    /// Checkpoints found torn and skipped.
    pub torn_checkpoints: u32,
    /// Pages read: checkpoint, first pages, replay.
    pub pages_read: u64,
    /// Pages the replay took into the mapping.
    pub pages_replayed: u64,
    /// Trim records the replay found made since the checkpoint, and applied
    /// (`crate::trim_log`).
    pub trim_records: u64,
    /// Reads issued again after a failed attempt (`crate::read_retry`; torn pages fail every
    /// attempt).
    pub read_retries: u64,
    /// The flash held nothing: a formatted device.
    pub blank: bool,
}

/// One boot step's reads: where to read next, and what to do with each page read.
trait Scan<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> {
    /// The next page to read, if any is due now.
    fn next(&mut self, fw: &mut Firmware<F, M>) -> Option<PhysPage>;
    /// Handles the read of `ppn` into window `k`.
    fn done(&mut self, fw: &mut Firmware<F, M>, k: usize, ppn: PhysPage, ok: bool);
    /// The sectors each read needs: none (the spare alone, a column read of the out-of-band
    /// record) unless the step reads page data.
    fn sectors(&self) -> Sectors {
        Sectors::NONE
    }
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// Boots from what `flash` holds: the newest intact checkpoint plus a replay of the pages
    /// programmed after it, so that every write whose completion was posted is mapped again and
    /// any other write reads as its old or its new data. On blank flash this is [`Self::new`].
    /// `dram` must be zeroed, as for [`Self::new`].
    pub fn recover(
        config: FirmwareConfig,
        flash: F,
        dram: M,
        wait: &mut dyn FnMut(&mut F),
    ) -> Result<(Self, BootReport), RestoreError> {
        let mut fw = Self::new(config, flash, dram).map_err(RestoreError::Config)?;
        let mut report = BootReport::default();
        let (checkpoint, highest_id) = fw.load_checkpoint(wait, &mut report)?;
        let snapshot_seq = checkpoint.map_or(0, |(h, _)| h.snapshot_seq);
        match checkpoint {
            Some(_) => {
                let (ftl, dram) = fw.ftl_dram();
                ftl.adopt_checkpoint(dram).map_err(RestoreError::Invalid)?;
            }
            None => {
                let (ftl, dram) = fw.ftl_dram();
                ftl.adopt_blank(dram);
            }
        }
        let mut first = FirstPages {
            walk: BlockWalk::new(),
            snapshot_seq,
            programmed: 0,
        };
        fw.run_scan(&mut first, wait, &mut report)?;
        let mut replay = ReplayScan {
            walk: BlockWalk::new(),
            snapshot_seq,
            highest_seq: snapshot_seq,
            replayed: 0,
            records: heapless::Vec::new(),
            too_many_records: false,
        };
        fw.run_scan(&mut replay, wait, &mut report)?;
        if replay.too_many_records {
            return Err(RestoreError::Invalid("trim records since the checkpoint"));
        }
        let mut trims = TrimRecords {
            records: core::mem::take(&mut replay.records),
            next: 0,
            snapshot_seq,
            applied: 0,
        };
        fw.run_scan(&mut trims, wait, &mut report)?;
        report.trim_records = trims.applied;
        report.pages_replayed = replay.replayed;
        report.blank = checkpoint.is_none() && first.programmed == 0;
        let stats = checkpoint.map(|(h, _)| h.stats).unwrap_or_default();
        let next_seq = replay.highest_seq.saturating_add(1);
        let (ftl, dram) = fw.ftl_dram();
        ftl.finish_recovery(dram, next_seq, stats, report.pages_replayed, report.blank);
        fw.finish_boot(checkpoint, highest_id, report);
        Ok((fw, report))
    }

    /// Step 1: the newest intact checkpoint, copied into the tables, with its slot; and the
    /// highest checkpoint id seen (torn ones included), so ids never repeat.
    fn load_checkpoint(
        &mut self,
        wait: &mut dyn FnMut(&mut F),
        report: &mut BootReport,
    ) -> Result<(Option<(Header, u32)>, u64), RestoreError> {
        let mut heads = [None; 2];
        for (slot, head) in heads.iter_mut().enumerate() {
            let ppn = self.checkpointer().layout.page(slot as u32, 0);
            if let Some(Spare {
                kind: PageKind::Checkpoint,
                index: 0,
                data_seq,
                program_seq,
            }) = self.read_one(ppn, wait, report)?
            {
                *head = Some((data_seq, program_seq));
            }
        }
        let highest = heads.iter().flatten().map(|(id, _)| *id).max().unwrap_or(0);
        let mut order = [0u32, 1];
        if heads[1].map(|h| h.0) > heads[0].map(|h| h.0) {
            order = [1, 0];
        }
        for slot in order {
            let Some((id, seq)) = heads[slot as usize] else {
                continue;
            };
            let mut copy = CheckpointCopy {
                slot,
                id,
                snapshot_seq: seq,
                next: 0,
                intact: true,
                header: [0; HEADER_BYTES],
            };
            self.run_scan(&mut copy, wait, report)?;
            if !copy.intact {
                report.torn_checkpoints += 1;
                continue;
            }
            let header = match Header::decode(
                &copy.header,
                self.ftl(),
                &self.checkpointer().layout,
                self.block_size_bytes(),
                self.namespace_block_count(),
            ) {
                Ok(h) => h,
                // Pages that read back intact but do not hold a checkpoint of this format:
                // skipped like a torn one.
                Err("checkpoint magic" | "checkpoint version") => {
                    report.torn_checkpoints += 1;
                    continue;
                }
                // A checkpoint of another configuration: booting would lose it.
                Err(field) => return Err(RestoreError::Invalid(field)),
            };
            if header.id != id || header.snapshot_seq != seq {
                report.torn_checkpoints += 1;
                continue;
            }
            report.checkpoint_id = Some(id);
            return Ok((Some((header, slot)), highest));
        }
        Ok((None, highest))
    }

    /// Reads one page into window 0 and returns its spare record if the read succeeded and the
    /// record is intact.
    fn read_one(
        &mut self,
        ppn: PhysPage,
        wait: &mut dyn FnMut(&mut F),
        report: &mut BootReport,
    ) -> Result<Option<Spare>, RestoreError> {
        struct One {
            ppn: Option<PhysPage>,
            spare: Option<Spare>,
        }
        impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Scan<F, M> for One {
            fn next(&mut self, _: &mut Firmware<F, M>) -> Option<PhysPage> {
                self.ppn.take()
            }
            fn done(&mut self, fw: &mut Firmware<F, M>, k: usize, _: PhysPage, ok: bool) {
                if let (true, ReadSpare::Valid(s)) = (ok, fw.window_spare(k)) {
                    self.spare = Some(s);
                }
            }
        }
        let mut one = One {
            ppn: Some(ppn),
            spare: None,
        };
        self.run_scan(&mut one, wait, report)?;
        Ok(one.spare)
    }

    /// The spare record read into window `k`.
    fn window_spare(&self, k: usize) -> ReadSpare {
        let window = self.checkpointer().window(k);
        let page = self.ftl().geometry().page_size_bytes as usize;
        Spare::decode(&window.bytes(self.dram_bytes())[page..])
    }

    /// Runs `scan`'s reads through the checkpoint windows until it has none left. A read that
    /// fails is retried in its window (`crate::read_retry`) before `scan` hears of it.
    fn run_scan(
        &mut self,
        scan: &mut dyn Scan<F, M>,
        wait: &mut dyn FnMut(&mut F),
        report: &mut BootReport,
    ) -> Result<(), RestoreError> {
        const W: usize = CHECKPOINT_WINDOWS;
        let mut reading: [Option<PhysPage>; W] = [None; W];
        // A failed read to issue again in its window, and the failed attempts of each window's
        // page.
        let mut again: [Option<PhysPage>; W] = [None; W];
        let mut failures = [0u8; W];
        let mut held: Option<PhysPage> = None;
        loop {
            for k in 0..W {
                let Some(ppn) = again[k] else { continue };
                match self.submit_boot_read(k, ppn, scan.sectors()) {
                    Ok(()) => (reading[k], again[k]) = (Some(ppn), None),
                    Err(FlashError::Busy) => break,
                    Err(e) => return Err(RestoreError::Flash(e)),
                }
            }
            while let Some(k) = (0..W).position(|k| reading[k].is_none() && again[k].is_none()) {
                let Some(ppn) = held.take().or_else(|| scan.next(self)) else {
                    break;
                };
                match self.submit_boot_read(k, ppn, scan.sectors()) {
                    Ok(()) => (reading[k], failures[k]) = (Some(ppn), 0),
                    Err(FlashError::Busy) => {
                        held = Some(ppn);
                        break;
                    }
                    Err(e) => return Err(RestoreError::Flash(e)),
                }
            }
            if reading.iter().all(Option::is_none) {
                if held.is_none() && again.iter().all(Option::is_none) {
                    return Ok(());
                }
                continue;
            }
            match self.poll_boot_flash() {
                Some(c) => {
                    let k = c.tag as usize;
                    if let Some(ppn) = reading.get_mut(k).and_then(Option::take) {
                        report.pages_read += 1;
                        if c.result.is_err() && failures[k] < READ_RETRIES {
                            failures[k] += 1;
                            report.read_retries += 1;
                            again[k] = Some(ppn);
                        } else {
                            scan.done(self, k, ppn, c.result.is_ok());
                        }
                    }
                }
                None => wait(self.flash_mut()),
            }
        }
    }

    /// Starts a boot read of `sectors` of `ppn` into checkpoint window `k`.
    fn submit_boot_read(
        &mut self,
        k: usize,
        ppn: PhysPage,
        sectors: Sectors,
    ) -> Result<(), FlashError> {
        let op = FlashOp::Read {
            ppn,
            dram_offset_bytes: self.checkpointer().window(k).start,
            sectors,
        };
        self.submit_boot_op(k as u32, op)
    }
}

/// Step 1's copy of one checkpoint into the tables.
struct CheckpointCopy {
    slot: u32,
    id: u64,
    snapshot_seq: u64,
    next: u32,
    intact: bool,
    header: [u8; HEADER_BYTES],
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Scan<F, M> for CheckpointCopy {
    fn sectors(&self) -> Sectors {
        Sectors::ALL
    }

    fn next(&mut self, fw: &mut Firmware<F, M>) -> Option<PhysPage> {
        let layout = fw.checkpointer().layout;
        (self.intact && self.next < layout.pages).then(|| {
            self.next += 1;
            layout.page(self.slot, self.next - 1)
        })
    }

    fn done(&mut self, fw: &mut Firmware<F, M>, k: usize, ppn: PhysPage, ok: bool) {
        let index = fw.checkpointer().layout.index_of(self.slot, ppn);
        let expected = index.map(|i| Spare {
            kind: PageKind::Checkpoint,
            index: i,
            data_seq: self.id,
            program_seq: self.snapshot_seq,
        });
        let (Some(i), true, ReadSpare::Valid(s)) = (index, ok, fw.window_spare(k)) else {
            self.intact = false;
            return;
        };
        if Some(s) != expected {
            self.intact = false;
            return;
        }
        let window = fw.checkpointer().window(k);
        let mut header = self.header;
        let (ftl, dram) = fw.ftl_dram();
        let page = ftl.geometry().page_size_bytes as usize;
        for_each_run(ftl, i as usize * page, page, |at, to, len, piece| {
            let from = window.start + at;
            match piece {
                Piece::Header => header[to..to + len].copy_from_slice(&dram[from..from + len]),
                Piece::Table(r) => dram.copy_within(from..from + len, r.start + to),
            }
        });
        self.header = header;
    }
}

/// The walk both block scans share: every block once, each from a first page, and the page
/// after one just read when the block goes on. Blocks come die by die in turn (the first block
/// of every die, then the second, ...), so the reads in flight fall on as many dies as there are
/// windows rather than queueing on one die.
struct BlockWalk {
    /// How many blocks the walk has passed.
    walked: u32,
    /// Pages due next because the page before them in their block was just read. There is
    /// always room: each entry comes from a read that just freed its window, and `run_scan` asks
    /// for a page only when a window is free.
    follow: [Option<PhysPage>; CHECKPOINT_WINDOWS],
}

impl BlockWalk {
    fn new() -> Self {
        Self {
            walked: 0,
            follow: [None; CHECKPOINT_WINDOWS],
        }
    }

    /// A page due after a read, else the first page `start(block)` names (`None`: skip the
    /// block) of the next block recovery must look at.
    fn next<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        fw: &Firmware<F, M>,
        start: impl Fn(PhysBlock) -> Option<u32>,
    ) -> Option<PhysPage> {
        if let Some(ppn) = self.follow.iter_mut().find_map(Option::take) {
            return Some(ppn);
        }
        let g = fw.ftl().geometry();
        while self.walked < g.block_count() {
            let (dies, i) = (g.die_count(), self.walked);
            let block = PhysBlock((i % dies) * g.blocks_per_die + i / dies);
            self.walked += 1;
            if fw.ftl().needs_scan(fw.dram_bytes(), block)
                && let Some(page) = start(block)
            {
                return Some(block.page(&g, page));
            }
        }
        None
    }

    /// Queues the page after `ppn` in its block; `false` if `ppn` was its block's last.
    fn go_on(&mut self, g: &crate::hal::Geometry, ppn: PhysPage) -> bool {
        let (block, page) = g.block_and_page(ppn);
        if page + 1 >= g.pages_per_block {
            return false;
        }
        match self.follow.iter_mut().find(|f| f.is_none()) {
            Some(slot) => {
                *slot = Some(block.page(g, page + 1));
                true
            }
            None => false,
        }
    }
}

/// Step 2: the first readable page of every block that needs a look. An unreadable page 0 may
/// be a torn erase (nothing after it reads either), a torn first program (erased after it) or a
/// program that failed (the block went on, or was retired, with good pages after it): the pages
/// after it decide.
struct FirstPages {
    walk: BlockWalk,
    snapshot_seq: u64,
    /// Blocks found holding anything.
    programmed: u64,
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Scan<F, M> for FirstPages {
    fn next(&mut self, fw: &mut Firmware<F, M>) -> Option<PhysPage> {
        self.walk.next(fw, |_| Some(0))
    }

    fn done(&mut self, fw: &mut Firmware<F, M>, k: usize, ppn: PhysPage, ok: bool) {
        let g = fw.ftl().geometry();
        let (block, page) = g.block_and_page(ppn);
        let scan = match (ok, fw.window_spare(k)) {
            // Erased: at page 0 the block is erased; after unreadable pages it holds nothing
            // readable.
            (true, ReadSpare::Erased) if page == 0 => BlockScan::Erased,
            (true, ReadSpare::Erased) => BlockScan::Garbled,
            (true, ReadSpare::Valid(s)) if s.kind != PageKind::Checkpoint => BlockScan::Data {
                program_seq: s.program_seq,
            },
            _ if self.walk.go_on(&g, ppn) => return,
            _ => BlockScan::Garbled,
        };
        if scan != BlockScan::Erased {
            self.programmed += 1;
        }
        let (ftl, dram) = fw.ftl_dram();
        let start = ftl.classify(dram, block, scan, self.snapshot_seq);
        ftl.set_replay_start(dram, block, start);
    }
}

/// Step 3: each block to replay, page by page from where step 2 said, up to its first erased
/// page.
struct ReplayScan {
    walk: BlockWalk,
    snapshot_seq: u64,
    highest_seq: u64,
    replayed: u64,
    /// The trim records found, made since the snapshot, for step 3's second part.
    records: heapless::Vec<FoundRecord, { 2 * MAX_UNSAVED_RECORDS }>,
    /// More records than the log ever leaves unsaved: the flash is not what this firmware
    /// wrote.
    too_many_records: bool,
}

/// A trim record the replay found.
#[derive(Clone, Copy, Debug)]
struct FoundRecord {
    ppn: PhysPage,
    ranges: u32,
    ts: u64,
    program_seq: u64,
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Scan<F, M> for ReplayScan {
    fn next(&mut self, fw: &mut Firmware<F, M>) -> Option<PhysPage> {
        let ppb = fw.ftl().geometry().pages_per_block;
        let (ftl, dram) = (fw.ftl(), fw.dram_bytes());
        self.walk.next(fw, |block| {
            Some(ftl.replay_start(dram, block)).filter(|p| *p < ppb)
        })
    }

    fn done(&mut self, fw: &mut Firmware<F, M>, k: usize, ppn: PhysPage, ok: bool) {
        // The block's programmed pages end at its first erased one. An unreadable page (a
        // program that failed, or was torn) is skipped: the pages after it still count.
        let spare = fw.window_spare(k);
        if ok && spare == ReadSpare::Erased {
            return;
        }
        match spare {
            ReadSpare::Valid(s) if ok && s.kind == PageKind::Data => {
                self.highest_seq = self.highest_seq.max(s.program_seq);
                let page_seen = Replayed {
                    ppn,
                    lpn: s.index,
                    data_seq: s.data_seq,
                    program_seq: s.program_seq,
                };
                let (ftl, dram) = fw.ftl_dram();
                self.replayed += u64::from(ftl.replay(dram, page_seen, self.snapshot_seq));
            }
            ReadSpare::Valid(s)
                if ok && s.kind == PageKind::Trim && s.program_seq >= self.snapshot_seq =>
            {
                self.highest_seq = self.highest_seq.max(s.program_seq);
                // A record made before the snapshot holds unmaps the checkpoint has.
                if s.data_seq >= self.snapshot_seq {
                    let found = FoundRecord {
                        ppn,
                        ranges: s.index,
                        ts: s.data_seq,
                        program_seq: s.program_seq,
                    };
                    self.too_many_records |= self.records.push(found).is_err();
                }
            }
            _ => {}
        }
        let g = fw.ftl().geometry();
        self.walk.go_on(&g, ppn);
    }
}

/// Step 3's second part: each trim record the replay found, read whole and applied after every
/// page is replayed (`crate::trim_log`; a record whose data does not check is one a cut tore).
struct TrimRecords {
    records: heapless::Vec<FoundRecord, { 2 * MAX_UNSAVED_RECORDS }>,
    next: usize,
    snapshot_seq: u64,
    /// Records read back intact and applied.
    applied: u64,
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Scan<F, M> for TrimRecords {
    fn sectors(&self) -> Sectors {
        Sectors::ALL
    }

    fn next(&mut self, _: &mut Firmware<F, M>) -> Option<PhysPage> {
        let r = self.records.get(self.next)?;
        self.next += 1;
        Some(r.ppn)
    }

    fn done(&mut self, fw: &mut Firmware<F, M>, k: usize, ppn: PhysPage, ok: bool) {
        let Some(r) = self.records.iter().find(|r| r.ppn == ppn).copied() else {
            return;
        };
        let window = fw.checkpointer().window(k);
        let page = fw.ftl().geometry().page_size_bytes as usize;
        let (ftl, dram) = fw.ftl_dram();
        if ok && record_is_intact(&window.bytes(dram)[..page], r.ranges) {
            for i in 0..r.ranges as usize {
                let (first, count) = record_range(window, dram, i);
                ftl.replay_trim(dram, first, count, r.ts, self.snapshot_seq);
            }
            ftl.record_programmed(ppn, r.program_seq);
            self.applied += 1;
        }
    }
}
