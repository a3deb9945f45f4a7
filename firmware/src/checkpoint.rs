//! FTL checkpoints on flash: the mapping and block tables written to reserved blocks from time
//! to time, so that a boot replays only the pages programmed since (`crate::recovery`).
//!
//! ```plain
//!   slot 0 blocks ─┐   two slots of `blocks_per_slot` reserved blocks each, at the top of the
//!   slot 1 blocks ─┘   dies; a checkpoint goes to the slot not holding the newest one, so a
//!                      power cut while one is written leaves the previous one whole
//! ```
//!
//! A checkpoint is one byte stream, its *payload*, cut into pages: a 256-byte header, the block
//! states, then the logical-to-physical table. Page `i` of a slot lives in slot
//! block `i % blocks_per_slot` at page `i / blocks_per_slot` (so consecutive pages go to
//! different dies and program in parallel); its spare area says "checkpoint page `i` of
//! checkpoint `id`, snapshot sequence `S`". A checkpoint is valid only if every one of its pages
//! reads back with that record: a torn one (the power went while it was written) is skipped.
//!
//! Writing one: once requested, new programs wait (writes park, garbage collection pauses) until
//! those in flight have finished; then the tables are frozen — nothing changes them until the
//! last page is programmed — the slot's blocks are erased, and the pages are programmed through
//! a few DRAM windows. Then every page is read back (retried like any read, `crate::read_retry`):
//! a page the media left uncorrectable fails the attempt, and another is written, before any
//! waiter is told the checkpoint is on flash — a checkpoint that a boot could not read would
//! silently undo the trims it holds. Reads go on meanwhile.
//!
//! Header, little-endian: magic `SGCKPT01`, version, the geometry (6 × u32), logical pages,
//! payload bytes, graph flag, checkpoint id (u64), snapshot sequence (u64: every page programmed
//! later has a program sequence at least this), the FTL counters (4 × u64), then at byte 128 the
//! attached graph's descriptor (128 bytes, its feature region included).

use sagessd_abi::graph::GraphDescriptor;

use crate::checkpoint_layout::{CheckpointLayout, HEADER_BYTES};
use crate::config::CHECKPOINT_WINDOWS;
use crate::dram::Region;
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::ftl::{Ftl, FtlStats};
use crate::hal::{FlashError, FlashOp, Sectors};
use crate::oob::{PageKind, ReadSpare, Spare};
use crate::read_retry::READ_RETRIES;

/// Magic of a checkpoint header.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"SGCKPT01";
/// Version of the checkpoint format.
pub const CHECKPOINT_VERSION: u32 = 1;
/// Byte of the header where the graph descriptor starts.
const GRAPH_AT: usize = 128;
/// Consecutive failed attempts after which the commands waiting for a checkpoint fail.
const MAX_ATTEMPTS: u32 = 16;

/// One piece of the payload: where it sits in the stream, and what holds it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Piece {
    /// Bytes of the header.
    Header,
    /// A DRAM table.
    Table(Region),
}

/// The payload's pieces in stream order, each with its first payload byte.
fn pieces(ftl: &Ftl) -> [(usize, Piece); 3] {
    let [states, l2p] = ftl.checkpointed_tables();
    [
        (0, Piece::Header),
        (HEADER_BYTES, Piece::Table(states)),
        (HEADER_BYTES + states.len, Piece::Table(l2p)),
    ]
}

/// Calls `each(payload_offset, piece_offset, len, piece)` for every run of payload bytes
/// `[start, start + len)` covers.
pub(crate) fn for_each_run(
    ftl: &Ftl,
    start: usize,
    len: usize,
    mut each: impl FnMut(usize, usize, usize, Piece),
) {
    let pieces = pieces(ftl);
    let end = start + len;
    for (at, piece) in pieces {
        let piece_len = match piece {
            Piece::Header => HEADER_BYTES,
            Piece::Table(r) => r.len,
        };
        let (lo, hi) = (start.max(at), end.min(at + piece_len));
        if lo < hi {
            each(lo - start, lo - at, hi - lo, piece);
        }
    }
}

/// The header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub id: u64,
    pub snapshot_seq: u64,
    pub stats: FtlStats,
    pub graph: Option<GraphDescriptor>,
}

impl Header {
    /// The header bytes for this checkpoint of `ftl`.
    pub fn encode(&self, ftl: &Ftl, layout: &CheckpointLayout, out: &mut [u8; HEADER_BYTES]) {
        out.fill(0);
        let g = ftl.geometry();
        out[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
        let words = [
            CHECKPOINT_VERSION,
            g.channels,
            g.ways,
            g.dies_per_way,
            g.blocks_per_die,
            g.pages_per_block,
            g.page_size_bytes,
            ftl.logical_pages(),
            layout.payload_bytes,
            u32::from(self.graph.is_some()),
        ];
        for (i, w) in words.iter().enumerate() {
            out[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        let s = &self.stats;
        let longs = [
            self.id,
            self.snapshot_seq,
            s.host_pages_written,
            s.gc_pages_moved,
            s.blocks_erased,
            s.media_failures,
        ];
        for (i, v) in longs.iter().enumerate() {
            out[48 + 8 * i..56 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        if let Some(graph) = self.graph {
            let mut wire = [0u8; HEADER_BYTES - GRAPH_AT];
            graph.encode(&mut wire);
            out[GRAPH_AT..].copy_from_slice(&wire);
        }
    }

    /// Parses a header read back for `ftl`'s configuration; `Err` names the field that does
    /// not match.
    pub fn decode(
        bytes: &[u8; HEADER_BYTES],
        ftl: &Ftl,
        layout: &CheckpointLayout,
        block_size_bytes: u32,
        namespace_blocks: u64,
    ) -> Result<Self, &'static str> {
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        if bytes[0..8] != CHECKPOINT_MAGIC {
            return Err("checkpoint magic");
        }
        let g = ftl.geometry();
        let expect = [
            (CHECKPOINT_VERSION, "checkpoint version"),
            (g.channels, "checkpoint geometry.channels"),
            (g.ways, "checkpoint geometry.ways"),
            (g.dies_per_way, "checkpoint geometry.dies_per_way"),
            (g.blocks_per_die, "checkpoint geometry.blocks_per_die"),
            (g.pages_per_block, "checkpoint geometry.pages_per_block"),
            (g.page_size_bytes, "checkpoint geometry.page_size_bytes"),
            (ftl.logical_pages(), "checkpoint logical_pages"),
            (layout.payload_bytes, "checkpoint payload_bytes"),
        ];
        for (i, (want, field)) in expect.iter().enumerate() {
            if u32_at(8 + 4 * i) != *want {
                return Err(field);
            }
        }
        let graph = match u32_at(44) {
            0 => None,
            1 => Some(
                GraphDescriptor::parse(&bytes[GRAPH_AT..], block_size_bytes, namespace_blocks)
                    .map_err(|_| "checkpoint graph")?,
            ),
            _ => return Err("checkpoint graph flag"),
        };
        Ok(Self {
            id: u64_at(48),
            snapshot_seq: u64_at(56),
            stats: FtlStats {
                host_pages_written: u64_at(64),
                gc_pages_moved: u64_at(72),
                blocks_erased: u64_at(80),
                media_failures: u64_at(88),
            },
            graph,
        })
    }
}

/// What the checkpoint writer is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Idle,
    /// Requested: waiting for the programs in flight to finish.
    Draining,
    /// Tables frozen; erasing the slot's blocks (`issued` queued, `done` finished).
    Erasing {
        issued: u32,
        done: u32,
    },
    /// Programming page `next` onwards; `done` pages finished; `busy` marks the windows in use.
    Programming {
        next: u32,
        done: u32,
        busy: u32,
    },
    /// Reading the pages back, `next` onwards; `done` pages checked; `busy` marks the windows
    /// in use.
    Verifying {
        next: u32,
        done: u32,
        busy: u32,
    },
}

/// Checkpoint counters, for the footprint and `device info` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoints completed since boot.
    pub written: u64,
    /// Attempts abandoned after a program or erase failure.
    pub failed: u64,
    /// Flash pages programmed for checkpoints since boot.
    pub pages_programmed: u64,
    /// Pages of one checkpoint.
    pub pages_per_checkpoint: u32,
    /// Blocks the two checkpoint slots reserve.
    pub reserved_blocks: u32,
}

/// The checkpoint writer.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    pub layout: CheckpointLayout,
    windows: Region,
    window_bytes: usize,
    stage: Stage,
    /// The slot being written, or to be written next.
    slot: u32,
    /// Id the next checkpoint gets; the newest on flash is `next_id - 1`.
    next_id: u64,
    /// The newest checkpoint id whose pages are all on flash.
    durable_id: u64,
    /// The header of the checkpoint being written.
    header: [u8; HEADER_BYTES],
    /// Snapshot sequence of the checkpoint being written.
    snapshot_seq: u64,
    /// Whether the current attempt saw a failure.
    failing: bool,
    /// Consecutive failed attempts.
    attempts: u32,
    /// Bumped when waiting commands must give up (see [`Self::gave_up`]).
    give_ups: u32,
    /// Whether a request came after the snapshot being written: another checkpoint follows.
    again: bool,
    /// While verifying: the page each window reads back, and its failed attempts.
    verifying: [(u32, u8); CHECKPOINT_WINDOWS],
    /// Windows whose read-back failed and must be read again.
    reread: u32,
    pub stats: CheckpointStats,
}

/// A waiting command's claim: complete once the checkpoint with this id is durable.
pub(crate) type Ticket = u64;

impl Checkpointer {
    /// A writer whose next checkpoint is `next_id`, into slot `slot`.
    pub fn new(layout: CheckpointLayout, windows: Region, window_bytes: usize) -> Self {
        Self {
            layout,
            windows,
            window_bytes,
            stage: Stage::Idle,
            slot: 0,
            next_id: 1,
            durable_id: 0,
            header: [0; HEADER_BYTES],
            snapshot_seq: 0,
            failing: false,
            attempts: 0,
            give_ups: 0,
            again: false,
            verifying: [(0, 0); CHECKPOINT_WINDOWS],
            reread: 0,
            stats: CheckpointStats {
                pages_per_checkpoint: layout.pages,
                reserved_blocks: layout.reserved_blocks(),
                ..CheckpointStats::default()
            },
        }
    }

    /// Continues after the newest valid checkpoint found at boot: `newest` (id, slot), if any.
    pub fn resume_after(&mut self, newest: Option<(u64, u32)>, highest_id_seen: u64) {
        if let Some((id, slot)) = newest {
            self.durable_id = id;
            self.slot = 1 - slot;
        }
        self.next_id = highest_id_seen.max(self.durable_id) + 1;
    }

    /// The DRAM window `k` (data then spare).
    pub fn window(&self, k: usize) -> Region {
        self.windows.sub(k * self.window_bytes, self.window_bytes)
    }

    /// Asks for a checkpoint that includes every table change made so far; returns the ticket
    /// to wait on.
    pub fn request(&mut self) -> Ticket {
        match self.stage {
            Stage::Idle => {
                self.stage = Stage::Draining;
                self.next_id
            }
            Stage::Draining => self.next_id,
            // The snapshot is taken: the changes since go into the one after it, which starts
            // as soon as this one ends.
            Stage::Erasing { .. } | Stage::Programming { .. } | Stage::Verifying { .. } => {
                self.again = true;
                self.next_id + 1
            }
        }
    }

    /// Whether programs must wait: a checkpoint is requested or being written.
    pub fn holds_programs(&self) -> bool {
        self.stage != Stage::Idle
    }

    /// Whether the tables are frozen (a snapshot is being written): nothing may change them.
    pub fn tables_frozen(&self) -> bool {
        matches!(
            self.stage,
            Stage::Erasing { .. } | Stage::Programming { .. }
        )
    }

    /// Whether the checkpoint `ticket` names is on flash.
    pub fn is_durable(&self, ticket: Ticket) -> bool {
        self.durable_id >= ticket
    }

    /// What became of a wait for checkpoint `ticket` that began when [`Self::gave_up`] was
    /// `give_ups`: `Some(true)` durable, `Some(false)` given up, `None` still pending.
    pub fn outcome(&self, ticket: Ticket, give_ups: u32) -> Option<bool> {
        if self.is_durable(ticket) {
            Some(true)
        } else {
            (self.give_ups != give_ups).then_some(false)
        }
    }

    /// How often waiting commands were told to give up; a waiter that saw a smaller count when
    /// it started waiting fails.
    pub fn gave_up(&self) -> u32 {
        self.give_ups
    }

    /// Whether nothing is requested or under way.
    pub fn is_idle(&self) -> bool {
        self.stage == Stage::Idle
    }

    /// Advances the writer: starts the snapshot once `ftl` has no program in flight and GC is
    /// at a safe point, queues erases, then programs. Returns whether anything changed.
    pub fn step(
        &mut self,
        dram: &mut [u8],
        ftl: &mut Ftl,
        queue: &mut FlashQueue,
        graph: Option<GraphDescriptor>,
    ) -> bool {
        match self.stage {
            Stage::Idle => false,
            Stage::Draining => {
                if !ftl.can_snapshot() {
                    return false;
                }
                self.snapshot_seq = ftl.take_snapshot_seq();
                let header = Header {
                    id: self.next_id,
                    snapshot_seq: self.snapshot_seq,
                    stats: ftl.stats,
                    graph,
                };
                let mut bytes = [0u8; HEADER_BYTES];
                header.encode(ftl, &self.layout, &mut bytes);
                self.header = bytes;
                self.failing = false;
                self.stage = Stage::Erasing { issued: 0, done: 0 };
                true
            }
            Stage::Erasing { issued, done } => {
                let total = self.layout.blocks_per_slot;
                let mut n = issued;
                while n < total && queue.has_room(1) {
                    let block = self.layout.block(self.slot, n);
                    queue.push(
                        Tag::new(TagKind::CheckpointErase, 0, 0),
                        FlashOp::Erase { block },
                    );
                    n += 1;
                }
                if done == total {
                    if self.failing {
                        self.abandon(ftl);
                    } else {
                        self.stage = Stage::Programming {
                            next: 0,
                            done: 0,
                            busy: 0,
                        };
                    }
                    return true;
                }
                self.stage = Stage::Erasing { issued: n, done };
                n != issued
            }
            Stage::Programming {
                mut next,
                done,
                mut busy,
            } => {
                if done == self.layout.pages {
                    if self.failing {
                        self.abandon(ftl);
                    } else {
                        self.reread = 0;
                        self.stage = Stage::Verifying {
                            next: 0,
                            done: 0,
                            busy: 0,
                        };
                    }
                    return true;
                }
                let mut progress = false;
                while next < self.layout.pages && queue.has_room(1) {
                    let Some(k) = (0..CHECKPOINT_WINDOWS).find(|k| busy & (1 << k) == 0) else {
                        break;
                    };
                    let window = self.window(k);
                    self.fill_window(dram, ftl, next, window);
                    let op = FlashOp::Program {
                        ppn: self.layout.page(self.slot, next),
                        dram_offset_bytes: window.start,
                    };
                    queue.push(Tag::new(TagKind::CheckpointProgram, 0, k as u16), op);
                    busy |= 1 << k;
                    next += 1;
                    progress = true;
                }
                self.stage = Stage::Programming { next, done, busy };
                progress
            }
            Stage::Verifying {
                mut next,
                done,
                mut busy,
            } => {
                if done == self.layout.pages {
                    if self.failing {
                        self.abandon(ftl);
                    } else {
                        self.finish(ftl);
                    }
                    return true;
                }
                let mut progress = false;
                // Windows whose read failed read their page again, first.
                while self.reread != 0 && queue.has_room(1) {
                    let k = self.reread.trailing_zeros() as usize;
                    self.reread &= self.reread - 1;
                    self.push_verify(queue, k);
                    progress = true;
                }
                while next < self.layout.pages && queue.has_room(1) {
                    let Some(k) = (0..CHECKPOINT_WINDOWS).find(|k| busy & (1 << k) == 0) else {
                        break;
                    };
                    self.verifying[k] = (next, 0);
                    self.push_verify(queue, k);
                    busy |= 1 << k;
                    next += 1;
                    progress = true;
                }
                self.stage = Stage::Verifying { next, done, busy };
                progress
            }
        }
    }

    /// Queues the read-back of the page window `k` verifies.
    fn push_verify(&self, queue: &mut FlashQueue, k: usize) {
        let op = FlashOp::Read {
            ppn: self.layout.page(self.slot, self.verifying[k].0),
            dram_offset_bytes: self.window(k).start,
            sectors: Sectors::ALL,
        };
        queue.push(Tag::new(TagKind::CheckpointVerify, 0, k as u16), op);
    }

    /// Copies checkpoint page `i` and its spare record into `window`.
    fn fill_window(&self, dram: &mut [u8], ftl: &Ftl, i: u32, window: Region) {
        let page = ftl.geometry().page_size_bytes as usize;
        let start = i as usize * page;
        window.bytes_mut(dram)[..page].fill(0);
        for_each_run(ftl, start, page, |at, from, len, piece| {
            let to = window.start + at;
            match piece {
                Piece::Header => dram[to..to + len].copy_from_slice(&self.header[from..from + len]),
                Piece::Table(r) => dram.copy_within(r.start + from..r.start + from + len, to),
            }
        });
        Spare {
            kind: PageKind::Checkpoint,
            index: i,
            data_seq: self.next_id,
            program_seq: self.snapshot_seq,
        }
        .encode(&mut window.bytes_mut(dram)[page..]);
    }

    /// Handles the completion of one of the writer's flash operations.
    pub fn complete(
        &mut self,
        dram: &[u8],
        kind: TagKind,
        window: u16,
        result: Result<(), FlashError>,
    ) {
        if kind == TagKind::CheckpointVerify {
            return self.verified(dram, usize::from(window), result);
        }
        if result.is_err() {
            self.failing = true;
        }
        match (self.stage, kind) {
            (Stage::Erasing { issued, done }, TagKind::CheckpointErase) => {
                self.stage = Stage::Erasing {
                    issued,
                    done: done + 1,
                };
            }
            (Stage::Programming { next, done, busy }, TagKind::CheckpointProgram) => {
                self.stats.pages_programmed += 1;
                self.stage = Stage::Programming {
                    next,
                    done: done + 1,
                    busy: busy & !(1u32 << window),
                };
            }
            _ => {}
        }
    }

    /// A read-back into window `k` finished: the page is intact (it reads, and its spare
    /// record is this checkpoint's), read again, or — out of attempts — fails the attempt.
    fn verified(&mut self, dram: &[u8], k: usize, result: Result<(), FlashError>) {
        let Stage::Verifying { next, done, busy } = self.stage else {
            return;
        };
        let Some(&(page, failures)) = self.verifying.get(k) else {
            return;
        };
        let page_bytes = self.layout.geometry.page_size_bytes as usize;
        let expected = Spare {
            kind: PageKind::Checkpoint,
            index: page,
            data_seq: self.next_id,
            program_seq: self.snapshot_seq,
        };
        let intact = result.is_ok()
            && Spare::decode(&self.window(k).bytes(dram)[page_bytes..])
                == ReadSpare::Valid(expected);
        if !intact && failures < READ_RETRIES {
            self.verifying[k].1 += 1;
            self.reread |= 1 << k;
            return;
        }
        self.failing |= !intact;
        self.stage = Stage::Verifying {
            next,
            done: done + 1,
            busy: busy & !(1u32 << k),
        };
    }

    fn finish(&mut self, ftl: &mut Ftl) {
        ftl.checkpoint_durable();
        self.durable_id = self.next_id;
        self.next_id += 1;
        self.slot = 1 - self.slot;
        self.attempts = 0;
        self.stats.written += 1;
        self.stage = if self.again {
            Stage::Draining
        } else {
            Stage::Idle
        };
        self.again = false;
    }

    /// Gives the attempt up (a program or erase failed): the previous checkpoint stays the
    /// newest. A new attempt starts at once; after [`MAX_ATTEMPTS`] the waiters are failed.
    fn abandon(&mut self, ftl: &mut Ftl) {
        ftl.checkpoint_abandoned();
        self.stats.failed += 1;
        self.next_id += 1;
        self.attempts += 1;
        if self.attempts >= MAX_ATTEMPTS {
            self.attempts = 0;
            self.give_ups = self.give_ups.wrapping_add(1);
            self.again = false;
            self.stage = Stage::Idle;
        } else {
            self.stage = Stage::Draining;
        }
    }
}
