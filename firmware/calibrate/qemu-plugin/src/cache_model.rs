//! A modelled cache hierarchy: set-associative caches with LRU replacement, a split L1 (I and
//! D) in front of a unified L2, as a Cortex-A9 with a PL310 has them.
//!
//! Modelled, not the silicon: the A9's L1 D-cache replaces pseudo-randomly and the PL310 round
//! robin; LRU is used for both so that a replay is repeatable. Loads and stores both allocate
//! (write-back, write-allocate: how the Zynq's first-stage boot loader configures both levels);
//! write-back traffic, prefetch and the store buffer are not modelled. An access is one line: the
//! firmware is built without unaligned accesses, so none crosses a line.

/// The shape of one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    /// Capacity in bytes.
    pub size_bytes: u32,
    /// Ways per set.
    pub ways: u32,
    /// Line size in bytes (a power of two).
    pub line_bytes: u32,
}

impl CacheGeometry {
    /// Parses `SIZE:WAYS:LINE` (bytes, ways, bytes), as the plugin's arguments give it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let [size, ways, line] = parts[..] else {
            return Err(format!("{text:?}: want SIZE:WAYS:LINE"));
        };
        let number = |s: &str, what: &str| {
            s.parse::<u32>()
                .map_err(|e| format!("{text:?}: the {what} {s:?} is not a number ({e})"))
        };
        let geometry = Self {
            size_bytes: number(size, "size")?,
            ways: number(ways, "way count")?,
            line_bytes: number(line, "line size")?,
        };
        geometry.sets().map(|_| geometry)
    }

    /// Sets of the cache, if the shape is one (powers of two, at least one set).
    pub fn sets(&self) -> Result<u32, String> {
        let way_bytes = u64::from(self.ways) * u64::from(self.line_bytes);
        if !self.line_bytes.is_power_of_two()
            || self.ways == 0
            || way_bytes == 0
            || u64::from(self.size_bytes) % way_bytes != 0
            || !(u64::from(self.size_bytes) / way_bytes).is_power_of_two()
        {
            return Err(format!(
                "{} bytes, {} ways of {}-byte lines is not a cache with a power-of-two set count",
                self.size_bytes, self.ways, self.line_bytes
            ));
        }
        Ok((u64::from(self.size_bytes) / way_bytes) as u32)
    }
}

/// One set-associative LRU cache of line addresses.
#[derive(Clone, Debug)]
pub struct Cache {
    line_shift: u32,
    set_mask: u64,
    ways: usize,
    /// `sets × ways` line tags (the line address), most recently used first within a set;
    /// `u64::MAX` is an empty way.
    tags: Vec<u64>,
}

/// What an access did at one level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The line was present.
    Hit,
    /// The line was absent and is now present.
    Miss,
}

impl Cache {
    /// An empty cache of `geometry` (which [`CacheGeometry::sets`] accepted).
    pub fn new(geometry: CacheGeometry) -> Self {
        let sets = geometry.sets().unwrap_or(1);
        Self {
            line_shift: geometry.line_bytes.trailing_zeros(),
            set_mask: u64::from(sets) - 1,
            ways: geometry.ways as usize,
            tags: vec![u64::MAX; sets as usize * geometry.ways as usize],
        }
    }

    fn set_of(&mut self, address: u64) -> (u64, &mut [u64]) {
        let line = address >> self.line_shift;
        let set = (line & self.set_mask) as usize;
        (line, &mut self.tags[set * self.ways..(set + 1) * self.ways])
    }

    /// Looks `address` up, allocating its line on a miss (evicting the least recently used).
    pub fn access(&mut self, address: u64) -> Outcome {
        let (line, set) = self.set_of(address);
        match set.iter().position(|t| *t == line) {
            Some(way) => {
                set[..=way].rotate_right(1);
                Outcome::Hit
            }
            None => {
                set.rotate_right(1);
                set[0] = line;
                Outcome::Miss
            }
        }
    }

    /// Drops `address`'s line if present (a DMA wrote memory behind the cache, and the
    /// firmware invalidates before it reads).
    pub fn invalidate(&mut self, address: u64) {
        let (line, set) = self.set_of(address);
        if let Some(way) = set.iter().position(|t| *t == line) {
            set[way..].rotate_left(1);
            if let Some(last) = set.last_mut() {
                *last = u64::MAX;
            }
        }
    }
}

/// Misses counted at each level, for data and for instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MissCounts {
    /// Data accesses (loads and stores).
    pub data_accesses: u64,
    /// Data accesses that missed L1D.
    pub l1d_misses: u64,
    /// Data accesses that missed L1D and L2 (went to DRAM).
    pub l2_data_misses: u64,
    /// Instruction-line fetches (one per instruction that starts a new line).
    pub fetches: u64,
    /// Fetches that missed L1I.
    pub l1i_misses: u64,
    /// Fetches that missed L1I and L2.
    pub l2_instruction_misses: u64,
}

/// Which level served an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// The L1 cache held the line.
    L1,
    /// L1 missed, L2 held the line.
    L2,
    /// Both missed: the line came from DRAM.
    Dram,
}

/// L1I + L1D over a unified L2.
#[derive(Clone, Debug)]
pub struct Hierarchy {
    l1i: Cache,
    l1d: Cache,
    l2: Cache,
    /// What the accesses so far did.
    pub counts: MissCounts,
}

impl Hierarchy {
    /// Empty caches of the given shapes.
    pub fn new(l1i: CacheGeometry, l1d: CacheGeometry, l2: CacheGeometry) -> Self {
        Self {
            l1i: Cache::new(l1i),
            l1d: Cache::new(l1d),
            l2: Cache::new(l2),
            counts: MissCounts::default(),
        }
    }

    /// A load or store by the measured program; returns the level that served it.
    pub fn data(&mut self, address: u64) -> Served {
        self.counts.data_accesses += 1;
        if self.l1d.access(address) == Outcome::Hit {
            return Served::L1;
        }
        self.counts.l1d_misses += 1;
        if self.l2.access(address) == Outcome::Hit {
            return Served::L2;
        }
        self.counts.l2_data_misses += 1;
        Served::Dram
    }

    /// An instruction fetch from a new line; returns the level that served it.
    pub fn fetch(&mut self, address: u64) -> Served {
        self.counts.fetches += 1;
        if self.l1i.access(address) == Outcome::Hit {
            return Served::L1;
        }
        self.counts.l1i_misses += 1;
        if self.l2.access(address) == Outcome::Hit {
            return Served::L2;
        }
        self.counts.l2_instruction_misses += 1;
        Served::Dram
    }

    /// Memory written by something other than the measured program (the harness, standing in
    /// for DMA engines): its lines leave every level.
    pub fn invalidate(&mut self, address: u64) {
        self.l1d.invalidate(address);
        self.l1i.invalidate(address);
        self.l2.invalidate(address);
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

    #[test]
    fn geometry_parses_and_rejects() {
        assert_eq!(CacheGeometry::parse("32768:4:32"), Ok(L1));
        assert_eq!(L1.sets(), Ok(256));
        assert!(CacheGeometry::parse("32768:4").is_err());
        assert!(CacheGeometry::parse("32768:3:32").is_err());
        assert!(CacheGeometry::parse("32768:4:24").is_err());
        assert!(CacheGeometry::parse("x:4:32").is_err());
        assert!(CacheGeometry::parse("0:4:32").is_err());
    }

    #[test]
    fn lru_keeps_the_ways_and_evicts_the_oldest() {
        let mut c = Cache::new(L1);
        let stride = 256 * 32; // same set
        for i in 0..4u64 {
            assert_eq!(c.access(i * stride), Outcome::Miss);
        }
        for i in 0..4u64 {
            assert_eq!(c.access(i * stride + 4), Outcome::Hit, "way {i}");
        }
        // A fifth line evicts the least recently used (line 0), not the others.
        assert_eq!(c.access(4 * stride), Outcome::Miss);
        assert_eq!(c.access(stride), Outcome::Hit);
        assert_eq!(c.access(0), Outcome::Miss);
        c.invalidate(stride);
        assert_eq!(c.access(stride), Outcome::Miss);
    }

    #[test]
    fn a_working_set_past_l2_misses_twice() {
        let l2 = CacheGeometry {
            size_bytes: 512 << 10,
            ways: 8,
            line_bytes: 32,
        };
        let mut h = Hierarchy::new(L1, L1, l2);
        // 16 KiB fits L1: one miss per line the first time, none after.
        for round in 0..2 {
            for a in (0..16u64 << 10).step_by(4) {
                h.data(a);
            }
            let want = (16 << 10) / 32;
            assert_eq!(h.counts.l1d_misses, want, "round {round}");
        }
        // 1 MiB streamed twice misses L1 and L2 on every line both times.
        let before = h.counts;
        for _ in 0..2 {
            for a in (1u64 << 20..2 << 20).step_by(32) {
                h.data(a);
            }
        }
        let lines = 2 * ((1u64 << 20) / 32);
        assert_eq!(h.counts.l1d_misses - before.l1d_misses, lines);
        assert_eq!(h.counts.l2_data_misses - before.l2_data_misses, lines);
    }
}
