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
//!
//! Segments named at load (`attribute=`) are also counted per instruction address
//! ([`PcLine`]): what each instruction executed, fetched and accessed, and what that did in
//! the caches. `sagessd firmware profile` maps the addresses to functions and source lines, so
//! a workload's cost can be read by where in the firmware it goes.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::cache_model::{CacheGeometry, Hierarchy, MissCounts, Served};

/// Marker word: the measured code starts running.
pub const MARK_ENTER: u64 = 0;
/// Marker word: the measured code stops running.
pub const MARK_LEAVE: u64 = 1;
/// Marker word: the segment ends; the next one starts with zero counts.
pub const MARK_SEGMENT: u64 = 2;
/// Marker words the program has (each 4 bytes).
pub const MARK_WORDS: u64 = 3;

/// The counts of one segment (or of one instruction address within one: [`PcLine`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Instructions executed while counting.
    pub instructions: u64,
    /// Cache behaviour of those instructions' fetches and data accesses.
    pub misses: MissCounts,
}

impl Segment {
    /// The report line's keys, in order, after `segment <k>` (or `pc <k> <address>`).
    const KEYS: [&'static str; 7] = [
        "instructions",
        "data_accesses",
        "l1d_misses",
        "l2_data_misses",
        "fetches",
        "l1i_misses",
        "l2_instruction_misses",
    ];

    /// The counts in [`Self::KEYS`] order.
    fn values(&self) -> [u64; 7] {
        let m = &self.misses;
        [
            self.instructions,
            m.data_accesses,
            m.l1d_misses,
            m.l2_data_misses,
            m.fetches,
            m.l1i_misses,
            m.l2_instruction_misses,
        ]
    }

    /// The counts from `key value` pairs in [`Self::KEYS`] order; `None` if they are not.
    fn from_words(words: &[&str]) -> Option<Self> {
        if words.len() != 2 * Self::KEYS.len() {
            return None;
        }
        let mut values = [0u64; 7];
        for (i, (key, value)) in Self::KEYS.iter().zip(&mut values).enumerate() {
            if words[2 * i] != *key {
                return None;
            }
            *value = words[2 * i + 1].parse().ok()?;
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
        Some(Self {
            instructions,
            misses: MissCounts {
                data_accesses,
                l1d_misses,
                l2_data_misses,
                fetches,
                l1i_misses,
                l2_instruction_misses,
            },
        })
    }

    /// The `key value` pairs of the counts, each preceded by a space.
    fn pairs(&self) -> String {
        Self::KEYS
            .iter()
            .zip(self.values())
            .fold(String::new(), |line, (key, value)| {
                format!("{line} {key} {value}")
            })
    }

    /// Parses a line [`Segment::line`] wrote: the segment's number and its counts; `None` if
    /// the line is not one.
    pub fn parse(line: &str) -> Option<(usize, Self)> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 2 || words[0] != "segment" {
            return None;
        }
        Some((words[1].parse().ok()?, Self::from_words(&words[2..])?))
    }

    /// One report line: `segment <n> instructions <n> data_accesses <n> l1d_misses <n> ...`.
    pub fn line(&self, index: usize) -> String {
        format!("segment {index}{}", self.pairs())
    }

    /// Each count divided by `n` (rounded to the nearest): the mean of `n` segments added up.
    pub fn divided(&self, n: u64) -> Self {
        let d = |x: u64| (x + n / 2) / n.max(1);
        let m = &self.misses;
        Self {
            instructions: d(self.instructions),
            misses: MissCounts {
                data_accesses: d(m.data_accesses),
                l1d_misses: d(m.l1d_misses),
                l2_data_misses: d(m.l2_data_misses),
                fetches: d(m.fetches),
                l1i_misses: d(m.l1i_misses),
                l2_instruction_misses: d(m.l2_instruction_misses),
            },
        }
    }

    /// Adds another's counts.
    pub fn add(&mut self, other: &Self) {
        let (a, b) = (&mut self.misses, &other.misses);
        self.instructions += other.instructions;
        a.data_accesses += b.data_accesses;
        a.l1d_misses += b.l1d_misses;
        a.l2_data_misses += b.l2_data_misses;
        a.fetches += b.fetches;
        a.l1i_misses += b.l1i_misses;
        a.l2_instruction_misses += b.l2_instruction_misses;
    }
}

/// What one instruction address did within one attributed segment: the instructions executed
/// there, the line fetches that started there, and the data accesses it made, with what each
/// did in the caches. A segment's lines add up to its [`Segment`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcLine {
    /// The segment.
    pub segment: usize,
    /// The instruction's address.
    pub address: u64,
    /// Its counts.
    pub counts: Segment,
}

impl PcLine {
    /// Parses a line [`PcLine::line`] wrote; `None` if the line is not one.
    pub fn parse(line: &str) -> Option<Self> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 3 || words[0] != "pc" {
            return None;
        }
        Some(Self {
            segment: words[1].parse().ok()?,
            address: u64::from_str_radix(words[2].strip_prefix("0x")?, 16).ok()?,
            counts: Segment::from_words(&words[3..])?,
        })
    }

    /// One report line: `pc <segment> 0x<address> instructions <n> ...`.
    pub fn line(&self) -> String {
        format!(
            "pc {} {:#x}{}",
            self.segment,
            self.address,
            self.counts.pairs()
        )
    }
}

/// A cheap hasher for instruction addresses (the attribution table is hit once per
/// instruction): one multiply.
#[derive(Clone, Copy, Debug, Default)]
struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type AddressMap = HashMap<u64, Segment, BuildHasherDefault<AddressHasher>>;

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
    /// The segments whose counts are also kept per instruction address.
    attribute: Vec<usize>,
    /// The open segment's counts per instruction address, if it is attributed.
    open: Option<AddressMap>,
    /// The attributed segments closed so far, each with its counts per address.
    attributed: Vec<(usize, AddressMap)>,
}

impl Profile {
    /// A profile of a program whose marker words start at `marks`, with caches of the given
    /// shapes (L1I's line size decides what counts as a new fetch line); the segments named in
    /// `attribute` are also counted per instruction address.
    pub fn new(
        marks: u64,
        l1i: CacheGeometry,
        l1d: CacheGeometry,
        l2: CacheGeometry,
        attribute: Vec<usize>,
    ) -> Self {
        let open = attribute.contains(&0).then(AddressMap::default);
        Self {
            marks,
            line_shift: l1i.line_bytes.trailing_zeros(),
            counting: false,
            instructions: 0,
            last_line: u64::MAX,
            hierarchy: Hierarchy::new(l1i, l1d, l2),
            segment_start: Segment::default(),
            segments: Vec::new(),
            attribute,
            open,
            attributed: Vec::new(),
        }
    }

    /// The instruction at `address` executes.
    pub fn instruction(&mut self, address: u64) {
        if !self.counting {
            return;
        }
        self.instructions += 1;
        let line = address >> self.line_shift;
        let fetched = (line != self.last_line).then(|| {
            self.last_line = line;
            self.hierarchy.fetch(address)
        });
        if let Some(open) = &mut self.open {
            let at = open.entry(address).or_default();
            at.instructions += 1;
            if let Some(served) = fetched {
                let m = &mut at.misses;
                m.fetches += 1;
                m.l1i_misses += u64::from(served != Served::L1);
                m.l2_instruction_misses += u64::from(served == Served::Dram);
            }
        }
    }

    /// A load (`store == false`) or store at `address` by the instruction at `pc`.
    pub fn memory(&mut self, address: u64, store: bool, pc: u64) {
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
            let served = self.hierarchy.data(address);
            if let Some(open) = &mut self.open {
                let m = &mut open.entry(pc).or_default().misses;
                m.data_accesses += 1;
                m.l1d_misses += u64::from(served != Served::L1);
                m.l2_data_misses += u64::from(served == Served::Dram);
            }
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
        let index = self.segments.len();
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
        if let Some(open) = self.open.take() {
            self.attributed.push((index, open));
        }
        if self.attribute.contains(&(index + 1)) {
            self.open = Some(AddressMap::default());
        }
    }

    /// The report: one line per closed segment, then one per instruction address of each
    /// attributed segment (by address).
    pub fn report(&self) -> String {
        let mut out: String = self
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| s.line(i) + "\n")
            .collect();
        for (segment, map) in &self.attributed {
            let mut lines: Vec<PcLine> = map
                .iter()
                .map(|(address, counts)| PcLine {
                    segment: *segment,
                    address: *address,
                    counts: *counts,
                })
                .collect();
            lines.sort_unstable_by_key(|l| l.address);
            for l in lines {
                out += &l.line();
                out.push('\n');
            }
        }
        out
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
        let mut p = Profile::new(MARKS, L1, L1, L2, vec![1]);
        p.instruction(0x100); // harness: not counted
        p.memory(0x8000, false, 0x100);
        p.memory(MARKS + 4 * MARK_ENTER, true, 0x104);
        for i in 0..10 {
            p.instruction(0x200 + 4 * i); // two lines
        }
        p.memory(0x9000, false, 0x204);
        p.memory(0x9004, true, 0x208);
        p.memory(MARKS + 4 * MARK_LEAVE, true, 0x20c);
        p.instruction(0x300);
        p.memory(MARKS + 4 * MARK_SEGMENT, true, 0x304);
        p.memory(MARKS + 4 * MARK_ENTER, true, 0x308);
        p.instruction(0x200);
        p.memory(0x9000, false, 0x200); // still cached
        p.memory(MARKS + 4 * MARK_LEAVE, true, 0x30c);
        p.memory(0x9000, true, 0x310); // the harness (DMA) overwrites it
        p.memory(MARKS + 4 * MARK_ENTER, true, 0x314);
        p.instruction(0x220);
        p.memory(0x9000, false, 0x220); // misses again
        p.memory(MARKS + 4 * MARK_LEAVE, true, 0x318);
        p.memory(MARKS + 4 * MARK_SEGMENT, true, 0x31c);
        assert_eq!(p.segments.len(), 2);
        let (a, b) = (p.segments[0], p.segments[1]);
        assert_eq!(a.instructions, 10);
        assert_eq!(a.misses.fetches, 2);
        assert_eq!(a.misses.data_accesses, 2);
        assert_eq!(a.misses.l1d_misses, 1);
        assert_eq!(b.instructions, 2);
        assert_eq!(b.misses.data_accesses, 2);
        assert_eq!(
            b.misses.l1d_misses, 1,
            "the harness's store invalidated the line"
        );
        assert_eq!(b.misses.l2_data_misses, 1);
        let report = p.report();
        assert!(report.starts_with("segment 0 instructions 10 data_accesses 2 "));
        // Segment 1 alone is attributed: its two instructions, each with its access, add up to
        // the segment.
        let lines: Vec<PcLine> = report.lines().filter_map(PcLine::parse).collect();
        assert_eq!(lines.len(), 2, "{report}");
        assert!(lines.iter().all(|l| l.segment == 1));
        assert_eq!((lines[0].address, lines[1].address), (0x200, 0x220));
        assert_eq!(lines[0].counts.misses.l1d_misses, 0);
        assert_eq!(lines[1].counts.misses.l2_data_misses, 1);
        let mut sum = Segment::default();
        lines.iter().for_each(|l| sum.add(&l.counts));
        assert_eq!(sum, b);
        for l in &lines {
            assert_eq!(PcLine::parse(&l.line()), Some(*l));
        }
        assert_eq!(PcLine::parse("pc 1 200 instructions 1"), None);
        assert_eq!(Segment::parse(&b.line(1)), Some((1, b)));
    }
}
