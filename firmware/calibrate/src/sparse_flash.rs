//! A RAM-backed NAND array that stores only the pages it was given: the calibration runs the
//! firmware on a full-size device (a Cosmos+ has 2^23 pages of 16 KiB) with a few MiB written.
//!
//! Pages live in a pool of page windows (data, then spare); an index maps each physical page to
//! its window or to "erased". It keeps the NAND rules the firmware relies on (a block programs
//! in page order, erased pages read 0xFF) and completes operations in submission order, one
//! per [`Flash::poll`]. It stands in for hardware: every call brackets itself with
//! [`Marks::leave`] and [`Marks::enter`] so that the profile counts only the firmware.

use heapless::Deque;
use sagessd_firmware::hal::{Flash, FlashCompletion, FlashError, FlashOp, Geometry};

use crate::Marks;

/// Operations the array holds at once (more is "busy").
pub const QUEUE_DEPTH: usize = 64;
/// Index value of a page that holds nothing (erased).
const ERASED: u32 = u32::MAX;

/// The memory a [`SparseFlash`] of `geometry` with room for `pages` written pages needs.
pub fn bytes_needed(geometry: &Geometry, pages: u32) -> Option<usize> {
    let index = usize::try_from(geometry.page_count())
        .ok()?
        .checked_mul(4)?;
    let points = (geometry.block_count() as usize).checked_mul(4)?;
    let windows = (pages as usize)
        .checked_add(1)?
        .checked_mul(geometry.window_bytes())?;
    index.checked_add(points)?.checked_add(windows)
}

/// The sparse array.
#[derive(Debug)]
pub struct SparseFlash<'a, K: Marks> {
    geometry: Geometry,
    /// Per physical page, its window in `pool` or [`ERASED`] (4 bytes, little-endian).
    index: &'a mut [u8],
    /// Per block, the next page that may be programmed (4 bytes each).
    write_points: &'a mut [u8],
    /// Window 0 reads as erased (0xFF); the others hold pages or the free list.
    pool: &'a mut [u8],
    /// Head of the free list of windows (each free window's first 4 bytes link the next).
    free: u32,
    pending: Deque<(u32, FlashOp), QUEUE_DEPTH>,
    marks: K,
}

impl<'a, K: Marks> SparseFlash<'a, K> {
    /// An erased array over `memory` (at least [`bytes_needed`] for `pages` pages; the rest
    /// is unused).
    pub fn new(geometry: Geometry, pages: u32, memory: &'a mut [u8], marks: K) -> Option<Self> {
        let index_len = usize::try_from(geometry.page_count())
            .ok()?
            .checked_mul(4)?;
        let points_len = geometry.block_count() as usize * 4;
        let window = geometry.window_bytes();
        let pool_len = (pages as usize + 1).checked_mul(window)?;
        if memory.len() < bytes_needed(&geometry, pages)? {
            return None;
        }
        let (index, rest) = memory.split_at_mut(index_len);
        let (write_points, rest) = rest.split_at_mut(points_len);
        let pool = &mut rest[..pool_len];
        index.fill(0xFF);
        write_points.fill(0);
        pool[..window].fill(0xFF);
        // Chain windows 1..=pages into the free list, the last pointing nowhere.
        for w in 1..=pages {
            let next = if w == pages { ERASED } else { w + 1 };
            let at = w as usize * window;
            pool[at..at + 4].copy_from_slice(&next.to_le_bytes());
        }
        Some(Self {
            geometry,
            index,
            write_points,
            pool,
            free: if pages == 0 { ERASED } else { 1 },
            pending: Deque::new(),
            marks,
        })
    }

    fn get(bytes: &[u8], i: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&bytes[4 * i..4 * i + 4]);
        u32::from_le_bytes(w)
    }

    fn set(bytes: &mut [u8], i: usize, v: u32) {
        bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn window(&self, w: u32) -> core::ops::Range<usize> {
        let size = self.geometry.window_bytes();
        w as usize * size..(w as usize + 1) * size
    }

    fn perform(&mut self, op: FlashOp, dram: &mut [u8]) -> Result<(), FlashError> {
        let size = self.geometry.window_bytes();
        let ppb = self.geometry.pages_per_block;
        match op {
            FlashOp::Read {
                ppn,
                dram_offset_bytes,
                sectors,
            } => {
                let dst = dram
                    .get_mut(dram_offset_bytes..dram_offset_bytes.saturating_add(size))
                    .ok_or(FlashError::OutOfRange)?;
                let w = match Self::get(self.index, ppn.0 as usize) {
                    ERASED => 0,
                    w => w,
                };
                let src = &self.pool[self.window(w)];
                sectors.copy_window(self.geometry.page_size_bytes as usize, src, dst);
            }
            FlashOp::Program {
                ppn,
                dram_offset_bytes,
            } => {
                let src = dram
                    .get(dram_offset_bytes..dram_offset_bytes.saturating_add(size))
                    .ok_or(FlashError::OutOfRange)?;
                let block = (ppn.0 / ppb) as usize;
                if ppn.0 % ppb != Self::get(self.write_points, block) {
                    return Err(FlashError::NotErased);
                }
                let w = self.free;
                if w == ERASED {
                    // The pool is full: the calibration wrote more than it planned for.
                    return Err(FlashError::Media);
                }
                let range = self.window(w);
                self.free = Self::get(&self.pool[range.clone()], 0);
                self.pool[range].copy_from_slice(src);
                Self::set(self.index, ppn.0 as usize, w);
                Self::set(self.write_points, block, ppn.0 % ppb + 1);
            }
            FlashOp::Erase { block } => {
                for p in 0..ppb {
                    let page = (block.0 * ppb + p) as usize;
                    let w = Self::get(self.index, page);
                    if w != ERASED {
                        let at = self.window(w).start;
                        Self::set(&mut self.pool[at..], 0, self.free);
                        self.free = w;
                        Self::set(self.index, page, ERASED);
                    }
                }
                Self::set(self.write_points, block.0 as usize, 0);
            }
        }
        Ok(())
    }
}

impl<K: Marks> Flash for SparseFlash<'_, K> {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&mut self, tag: u32, op: FlashOp, _dram: &[u8]) -> Result<(), FlashError> {
        self.marks.leave();
        let result = if !op.is_within(&self.geometry) {
            Err(FlashError::OutOfRange)
        } else {
            self.pending
                .push_back((tag, op))
                .map_err(|_| FlashError::Busy)
        };
        self.marks.enter();
        result
    }

    fn poll(&mut self, dram: &mut [u8]) -> Option<FlashCompletion> {
        self.marks.leave();
        let done = self.pending.pop_front().map(|(tag, op)| FlashCompletion {
            tag,
            result: self.perform(op, dram),
        });
        self.marks.enter();
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoMarks;
    use sagessd_firmware::hal::{PhysBlock, PhysPage, Sectors};
    use std::vec;

    fn geometry() -> Geometry {
        Geometry {
            channels: 2,
            ways: 1,
            dies_per_way: 1,
            blocks_per_die: 4,
            pages_per_block: 4,
            page_size_bytes: 512,
        }
    }

    #[test]
    fn pages_program_in_order_read_back_and_erase_frees_them() {
        let g = geometry();
        let mut memory = vec![0u8; bytes_needed(&g, 3).unwrap()];
        let mut f = SparseFlash::new(g, 3, &mut memory, NoMarks).unwrap();
        let w = g.window_bytes();
        let mut dram = vec![0u8; 2 * w];
        dram[..w].fill(7);
        let program = |ppn| FlashOp::Program {
            ppn: PhysPage(ppn),
            dram_offset_bytes: 0,
        };
        let read = |ppn| FlashOp::Read {
            ppn: PhysPage(ppn),
            dram_offset_bytes: w,
            sectors: Sectors::ALL,
        };
        let run = |f: &mut SparseFlash<'_, NoMarks>, op, dram: &mut [u8]| {
            f.submit(1, op, dram).unwrap();
            f.poll(dram).unwrap().result
        };
        assert_eq!(
            run(&mut f, program(1), &mut dram),
            Err(FlashError::NotErased)
        );
        for p in 0..3 {
            assert_eq!(run(&mut f, program(p), &mut dram), Ok(()));
        }
        // The pool of 3 is full.
        assert_eq!(run(&mut f, program(3), &mut dram), Err(FlashError::Media));
        assert_eq!(run(&mut f, read(2), &mut dram), Ok(()));
        assert!(dram[w..].iter().all(|b| *b == 7));
        assert_eq!(run(&mut f, read(5), &mut dram), Ok(()));
        assert!(dram[w..].iter().all(|b| *b == 0xFF));
        let erase = FlashOp::Erase {
            block: PhysBlock(0),
        };
        assert_eq!(run(&mut f, erase, &mut dram), Ok(()));
        assert_eq!(run(&mut f, read(2), &mut dram), Ok(()));
        assert!(dram[w..].iter().all(|b| *b == 0xFF));
        // The erase gave the windows back.
        for p in 4..7 {
            assert_eq!(run(&mut f, program(p), &mut dram), Ok(()));
        }
        assert!(f.poll(&mut dram).is_none());
    }
}
