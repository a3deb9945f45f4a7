//! What the plugin counts: instructions and modelled cache misses of the measured code, split
//! into segments by marker stores.
//!
//! The program under measurement (the calibration image, `sagessd-calibrate-board`) tells the
//! plugin what is what by storing to an array of marker words, since a v1 plugin can read
//! neither registers nor stored values: a store to word [`MARK_ENTER`] starts counting (the
//! firmware is about to run), one to [`MARK_LEAVE`] stops it (control is back in the harness,
//! which stands in for hardware: the host, the DMA engines, the NAND), and one to
//! [`MARK_SEGMENT`] closes the current segment. While not counting, the harness's stores
//! invalidate the lines they write, as DMA into DRAM does; its loads and fetches are not seen.

use crate::cache_model::{CacheGeometry, Hierarchy, MissCounts};

/// Marker word: the measured code starts running.
pub const MARK_ENTER: u64 = 0;
/// Marker word: the measured code stops running.
pub const MARK_LEAVE: u64 = 1;
/// Marker word: the segment ends; the next one starts with zero counts.
pub const MARK_SEGMENT: u64 = 2;
/// Marker words the program has (each 4 bytes).
pub const MARK_WORDS: u64 = 3;

/// The counts of one segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Instructions executed while counting.
    pub instructions: u64,
    /// Cache behaviour of those instructions' fetches and data accesses.
    pub misses: MissCounts,
}

impl Segment {
    /// The report line's keys, in order, after `segment <k>`.
    const KEYS: [&'static str; 7] = [
        "instructions",
        "data_accesses",
        "l1d_misses",
        "l2_data_misses",
        "fetches",
        "l1i_misses",
        "l2_instruction_misses",
    ];

    /// Parses a line [`Segment::line`] wrote: the segment's number and its counts; `None` if
    /// the line is not one.
    pub fn parse(line: &str) -> Option<(usize, Self)> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != 2 + 2 * Self::KEYS.len() || words[0] != "segment" {
            return None;
        }
        let mut values = [0u64; 7];
        for (i, (key, value)) in Self::KEYS.iter().zip(&mut values).enumerate() {
            if words[2 + 2 * i] != *key {
                return None;
            }
            *value = words[3 + 2 * i].parse().ok()?;
        }
        let [
            instructions,
            data_accesses,
            l1d_misses,
            l2_data_misses,
            fetches,
            l1i_misses,
            l2_instruction_misses,
        ] = values;
        Some((
            words[1].parse().ok()?,
            Self {
                instructions,
                misses: MissCounts {
                    data_accesses,
                    l1d_misses,
                    l2_data_misses,
                    fetches,
                    l1i_misses,
                    l2_instruction_misses,
                },
            },
        ))
    }

    /// One report line: `segment <n> instructions <n> data_accesses <n> l1d_misses <n> ...`.
    pub fn line(&self, index: usize) -> String {
        let m = &self.misses;
        let values = [
            self.instructions,
            m.data_accesses,
            m.l1d_misses,
            m.l2_data_misses,
            m.fetches,
            m.l1i_misses,
            m.l2_instruction_misses,
        ];
        Self::KEYS
            .iter()
            .zip(values)
            .fold(format!("segment {index}"), |line, (key, value)| {
                format!("{line} {key} {value}")
            })
    }
}

/// The plugin's state for one run.
#[derive(Debug)]
pub struct Profile {
    marks: u64,
    line_shift: u32,
    counting: bool,
    instructions: u64,
    last_line: u64,
    hierarchy: Hierarchy,
    segment_start: Segment,
    /// Closed segments, in order.
    pub segments: Vec<Segment>,
}

impl Profile {
    /// A profile of a program whose marker words start at `marks`, with caches of the given
    /// shapes (L1I's line size decides what counts as a new fetch line).
    pub fn new(marks: u64, l1i: CacheGeometry, l1d: CacheGeometry, l2: CacheGeometry) -> Self {
        Self {
            marks,
            line_shift: l1i.line_bytes.trailing_zeros(),
            counting: false,
            instructions: 0,
            last_line: u64::MAX,
            hierarchy: Hierarchy::new(l1i, l1d, l2),
            segment_start: Segment::default(),
            segments: Vec::new(),
        }
    }

    /// The instruction at `address` executes.
    pub fn instruction(&mut self, address: u64) {
        if !self.counting {
            return;
        }
        self.instructions += 1;
        let line = address >> self.line_shift;
        if line != self.last_line {
            self.last_line = line;
            self.hierarchy.fetch(address);
        }
    }

    /// A load (`store == false`) or store at `address`.
    pub fn memory(&mut self, address: u64, store: bool) {
        let mark = address.wrapping_sub(self.marks) / 4;
        if store && address >= self.marks && mark < MARK_WORDS {
            match mark {
                MARK_ENTER => self.counting = true,
                MARK_LEAVE => {
                    self.counting = false;
                    self.last_line = u64::MAX;
                }
                _ => self.close_segment(),
            }
        } else if self.counting {
            self.hierarchy.data(address);
        } else if store {
            self.hierarchy.invalidate(address);
        }
    }

    fn now(&self) -> Segment {
        Segment {
            instructions: self.instructions,
            misses: self.hierarchy.counts,
        }
    }

    fn close_segment(&mut self) {
        let now = self.now();
        let s = &self.segment_start;
        let (a, b) = (&now.misses, &s.misses);
        self.segments.push(Segment {
            instructions: now.instructions - s.instructions,
            misses: MissCounts {
                data_accesses: a.data_accesses - b.data_accesses,
                l1d_misses: a.l1d_misses - b.l1d_misses,
                l2_data_misses: a.l2_data_misses - b.l2_data_misses,
                fetches: a.fetches - b.fetches,
                l1i_misses: a.l1i_misses - b.l1i_misses,
                l2_instruction_misses: a.l2_instruction_misses - b.l2_instruction_misses,
            },
        });
        self.segment_start = now;
    }

    /// The report: one line per closed segment.
    pub fn report(&self) -> String {
        self.segments
            .iter()
            .enumerate()
            .map(|(i, s)| s.line(i) + "\n")
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L1: CacheGeometry = CacheGeometry {
        size_bytes: 32 << 10,
        ways: 4,
        line_bytes: 32,
    };
    const L2: CacheGeometry = CacheGeometry {
        size_bytes: 512 << 10,
        ways: 8,
        line_bytes: 32,
    };
    const MARKS: u64 = 0x6000_1000;

    #[test]
    fn only_marked_code_counts_and_segments_split_it() {
        let mut p = Profile::new(MARKS, L1, L1, L2);
        p.instruction(0x100); // harness: not counted
        p.memory(0x8000, false);
        p.memory(MARKS + 4 * MARK_ENTER, true);
        for i in 0..10 {
            p.instruction(0x200 + 4 * i); // two lines
        }
        p.memory(0x9000, false);
        p.memory(0x9004, true);
        p.memory(MARKS + 4 * MARK_LEAVE, true);
        p.instruction(0x300);
        p.memory(MARKS + 4 * MARK_SEGMENT, true);
        p.memory(MARKS + 4 * MARK_ENTER, true);
        p.instruction(0x200);
        p.memory(0x9000, false); // still cached
        p.memory(MARKS + 4 * MARK_LEAVE, true);
        p.memory(0x9000, true); // the harness (DMA) overwrites it
        p.memory(MARKS + 4 * MARK_ENTER, true);
        p.memory(0x9000, false); // misses again
        p.memory(MARKS + 4 * MARK_LEAVE, true);
        p.memory(MARKS + 4 * MARK_SEGMENT, true);
        assert_eq!(p.segments.len(), 2);
        let (a, b) = (p.segments[0], p.segments[1]);
        assert_eq!(a.instructions, 10);
        assert_eq!(a.misses.fetches, 2);
        assert_eq!(a.misses.data_accesses, 2);
        assert_eq!(a.misses.l1d_misses, 1);
        assert_eq!(b.instructions, 1);
        assert_eq!(b.misses.data_accesses, 2);
        assert_eq!(
            b.misses.l1d_misses, 1,
            "the harness's store invalidated the line"
        );
        assert_eq!(b.misses.l2_data_misses, 1);
        assert!(
            p.report()
                .starts_with("segment 0 instructions 10 data_accesses 2 ")
        );
    }
}
