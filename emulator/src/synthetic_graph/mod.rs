//! A graph of any size that the emulated flash computes instead of storing: its CSR bytes are a
//! pure function of a [`SyntheticSpec`], so a papers100M-sized graph (111 M nodes, ~1.9 G CSR
//! entries, ~8 GiB) needs no disk and no memory beyond a few tables, and every reader (the
//! flash, the host samplers, the in-memory reference) sees the same bytes.
//!
//! # The model
//!
//! The graph follows a real graph's [`GraphProfile`]: its degree distribution and its
//! neighbour-gap distribution (how far apart in id order a node and its neighbours are).
//!
//! * **Degrees.** A keyed permutation ([`permutation`]) gives each node `v` a rank
//!   `π(v) ∈ 0..n`; the ranks are cut into one class per degree of the profile, class sizes in the
//!   profile's proportions (class `k` holds ranks `⌊n·C_k/n₀⌋ .. ⌊n·C_{k+1}/n₀⌋`, `C_k` the
//!   profile's nodes of smaller degree, `n₀` its node count). So the degree histogram is the real
//!   graph's scaled to `n` nodes (to rounding), and degrees are scattered over ids at random.
//! * **Neighbours.** Entry `i` of node `v`'s list is drawn from two 64-bit words of a
//!   counter-based hash of `(seed, v, i)`. The first picks, through one alias table
//!   ([`alias`]), either a *local* gap bin `b` (gaps `[2^b, 2^(b+1))`, for the profile's bins
//!   below [`SyntheticSpec::local_bins`], with the profile's weights) or a degree class `k`
//!   (the profile's longer gaps, shared among classes by their edge mass `degree × size`). A local
//!   neighbour is `v ± gap`, the gap uniform in its bin (the other side if one side leaves the
//!   graph); a global neighbour is the node of a uniform rank in its class, `π⁻¹(rank)`. So long
//!   links go to nodes in proportion to their degree (as the endpoints of a real graph's edges
//!   do), and short links copy the real graph's id locality.
//! * **CSR.** Each node's degree class is tabled (2 bytes a node), `indptr[v] = Σ_{u<v} deg(u)`
//!   every [`CHUNK_NODES`] nodes (summed on from there); entries are computed where they are
//!   read.
//!
//! Lists are neither sorted nor deduplicated (the samplers need neither; a repeated neighbour
//! is as rare as two draws agreeing), the graph is directed (a list does not imply the reverse
//! entries), and there are no self loops. How the result compares with the real graph it
//! follows is measured in `docs/model.md` (`sagessd dataset profile` and `sagessd compare
//! --graph`).

pub mod alias;
pub mod permutation;
pub mod profile;

use std::sync::Arc;

use sagessd_abi::sample::{GOLDEN, mix};

use crate::synthetic_graph::alias::AliasTable;
use crate::synthetic_graph::permutation::Permutation;
pub use crate::synthetic_graph::profile::{GraphProfile, ProfileError};

/// Nodes between two tabled `indptr` values.
pub const CHUNK_NODES: u64 = 64;
/// Most nodes (32-bit neighbour ids).
pub const MAX_NODES: u64 = 1 << 32;
/// ogbn-papers100M's node count (Hu et al., "Open Graph Benchmark", NeurIPS 2020, Table 1:
/// 111,059,956 nodes, 1,615,685,872 edges): the size of [`SyntheticSpec::papers100m_size`].
pub const PAPERS100M_NODES: u64 = 111_059_956;
/// Default local gap bins: gaps below 2^13 = 8,192 ids keep the profile's distribution.
pub const DEFAULT_LOCAL_BINS: u32 = 13;

/// What a synthetic graph is: its size, its seed and the real graph it follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticSpec {
    /// Nodes (1..=2^32).
    pub node_count: u64,
    /// Seed of the permutation and of every neighbour draw.
    pub seed: u64,
    /// Gap bins of the profile kept as local links (bin `b`: gaps `[2^b, 2^(b+1))`); longer
    /// gaps become degree-proportional links anywhere in the graph.
    pub local_bins: u32,
    /// The real graph followed.
    pub profile: Arc<GraphProfile>,
}

impl SyntheticSpec {
    /// A graph of `node_count` nodes following the built-in cnr-2000 profile.
    pub fn cnr_2000_like(node_count: u64, seed: u64) -> Self {
        Self {
            node_count,
            seed,
            local_bins: DEFAULT_LOCAL_BINS,
            profile: Arc::new(GraphProfile::cnr_2000()),
        }
    }

    /// The seeds' size: ogbn-papers100M's node count ([`PAPERS100M_NODES`]) with cnr-2000's
    /// degree and locality profile.
    pub fn papers100m_size(seed: u64) -> Self {
        Self::cnr_2000_like(PAPERS100M_NODES, seed)
    }
}

/// Why a synthetic graph cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SyntheticError {
    /// The node count is 0 or above 2^32.
    #[error("synthetic graph node count {0} is outside 1..=2^32")]
    NodeCount(u64),
    /// More local bins than the profile's gap histogram can hold.
    #[error("local_bins {0} exceeds {max}", max = profile::MAX_GAP_BINS)]
    LocalBins(u32),
    /// The profile is unusable.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The profile has more distinct degrees than a node's 16-bit class can name.
    #[error("the profile has {0} distinct degrees; at most {MAX_CLASSES} are supported")]
    DegreeClasses(usize),
    /// The graph's entries overflow 64-bit positions.
    #[error("synthetic graph of {0} nodes has more CSR entries than 64-bit positions allow")]
    TooManyEntries(u64),
}

/// A synthetic CSR graph: degrees, `indptr`, neighbours and the on-device bytes, computed.
#[derive(Debug)]
pub struct SyntheticGraph {
    spec: SyntheticSpec,
    perm: Permutation,
    key: u64,
    /// Rank boundaries of the non-empty degree classes (`len = classes + 1`, last = n).
    class_start: Vec<u64>,
    /// Degree of each class.
    class_degree: Vec<u64>,
    /// Each node's class: a table of `class_of_rank(π(v))`, 2 bytes a node (222 MB at
    /// papers100M's size), so that a degree is one load.
    node_class: Vec<u16>,
    /// For rank bucket `j` (ranks `j << rank_shift ..`), the class of its first rank.
    bucket_class: Vec<u32>,
    rank_shift: u32,
    /// Outcomes `0..local_bins` are local gap bins, the rest degree classes.
    pick: Option<AliasTable>,
    local_bins: usize,
    /// `indptr` at every [`CHUNK_NODES`]-th node, and at `n`.
    chunk_start: Vec<u64>,
    /// For every [`POSITION_BLOCK`] entries, the chunk holding the first one.
    position_chunk: Vec<u32>,
    edge_count: u64,
}

/// Most distinct degrees (each node's class is a `u16`).
pub const MAX_CLASSES: usize = 1 << 16;
/// Most rank buckets of the class lookup.
const BUCKETS: u64 = 1 << 16;
/// Entries per step of the position → chunk index.
const POSITION_BLOCK: u64 = 1 << 12;

impl SyntheticGraph {
    /// Builds the tables of `spec` (one pass over the nodes' degrees: about a second for 10^8
    /// nodes, on every core).
    pub fn new(spec: SyntheticSpec) -> Result<Self, SyntheticError> {
        let n = spec.node_count;
        if !(1..=MAX_NODES).contains(&n) {
            return Err(SyntheticError::NodeCount(n));
        }
        if spec.local_bins as usize > profile::MAX_GAP_BINS {
            return Err(SyntheticError::LocalBins(spec.local_bins));
        }
        let profile = &spec.profile;
        profile.validate("of the synthetic graph")?;
        // Degree classes: the profile's cumulative node shares, scaled to n.
        let mut class_start = Vec::new();
        let mut class_degree = Vec::new();
        let mut below = 0u128;
        for &[degree, count] in &profile.degrees {
            let start = (u128::from(n) * below / u128::from(profile.node_count)) as u64;
            below += u128::from(count);
            let end = (u128::from(n) * below / u128::from(profile.node_count)) as u64;
            if end > start {
                class_start.push(start);
                class_degree.push(degree);
            }
        }
        class_start.push(n);
        if class_degree.len() > MAX_CLASSES {
            return Err(SyntheticError::DegreeClasses(class_degree.len()));
        }
        let mut rank_shift = 0;
        while (n - 1) >> rank_shift >= BUCKETS {
            rank_shift += 1;
        }
        let buckets = ((n - 1) >> rank_shift) + 1;
        let mut bucket_class = Vec::with_capacity(buckets as usize);
        let mut k = 0usize;
        for j in 0..buckets {
            let first_rank = j << rank_shift;
            while class_start[k + 1] <= first_rank {
                k += 1;
            }
            bucket_class.push(k as u32);
        }
        // The pick table: local gap bins with the profile's weights, scaled by the global mass;
        // degree classes sharing the profile's longer gaps by edge mass.
        let local_bins = (spec.local_bins as usize).min(profile.gap_log2_edges.len());
        let global_edges: u128 = profile.gap_log2_edges[local_bins..]
            .iter()
            .map(|&g| u128::from(g))
            .sum();
        let masses: Vec<u128> = class_degree
            .iter()
            .zip(class_start.windows(2))
            .map(|(&d, w)| u128::from(d) * u128::from(w[1] - w[0]))
            .collect();
        let mass_total: u128 = masses.iter().sum();
        let edge_count =
            u64::try_from(mass_total).map_err(|_| SyntheticError::TooManyEntries(n))?;
        let mut weights: Vec<u128> = profile.gap_log2_edges[..local_bins]
            .iter()
            .map(|&g| u128::from(g) * mass_total)
            .collect();
        weights.extend(masses.iter().map(|&m| global_edges * m));
        let pick = AliasTable::new(&weights);
        let mut graph = Self {
            perm: Permutation::new(n, mix(spec.seed ^ mix(1))),
            key: mix(spec.seed ^ mix(2)),
            spec,
            class_start,
            class_degree,
            bucket_class,
            rank_shift,
            pick,
            local_bins,
            node_class: Vec::new(),
            chunk_start: Vec::new(),
            position_chunk: Vec::new(),
            edge_count,
        };
        graph.node_class = graph.tabulate_classes();
        graph.chunk_start = graph.tabulate_indptr();
        debug_assert_eq!(graph.chunk_start.last(), Some(&edge_count));
        let mut chunk = 0usize;
        graph.position_chunk = (0..edge_count.div_ceil(POSITION_BLOCK))
            .map(|b| {
                while graph.chunk_start[chunk + 1] <= b * POSITION_BLOCK {
                    chunk += 1;
                }
                chunk as u32
            })
            .collect();
        Ok(graph)
    }

    /// Every node's degree class (`class_of_rank(π(v))`), computed on every core.
    fn tabulate_classes(&self) -> Vec<u16> {
        let n = self.spec.node_count as usize;
        let mut classes = vec![0u16; n];
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let per_thread = n.div_ceil(threads).max(1);
        std::thread::scope(|s| {
            for (t, part) in classes.chunks_mut(per_thread).enumerate() {
                s.spawn(move || {
                    let first = (t * per_thread) as u64;
                    for (i, c) in part.iter_mut().enumerate() {
                        *c = self.class_of_rank(self.perm.apply(first + i as u64)) as u16;
                    }
                });
            }
        });
        classes
    }

    /// `indptr` at every [`CHUNK_NODES`]-th node and at `n`.
    fn tabulate_indptr(&self) -> Vec<u64> {
        let mut table = Vec::with_capacity(self.node_class.len() / CHUNK_NODES as usize + 2);
        let mut acc = 0u64;
        table.push(0);
        for chunk in self.node_class.chunks(CHUNK_NODES as usize) {
            acc += chunk
                .iter()
                .map(|&c| self.class_degree[c as usize])
                .sum::<u64>();
            table.push(acc);
        }
        table
    }

    /// What the graph is.
    pub fn spec(&self) -> &SyntheticSpec {
        &self.spec
    }

    /// Nodes.
    pub fn node_count(&self) -> u64 {
        self.spec.node_count
    }

    /// CSR entries (stored directed edges).
    pub fn edge_count(&self) -> u64 {
        self.edge_count
    }

    /// Bytes of `indptr` as little-endian `u64`: `(n + 1) × 8`.
    pub fn indptr_bytes(&self) -> u64 {
        (self.spec.node_count + 1) * 8
    }

    /// Bytes of `indices` as little-endian `u32`: `entries × 4`.
    pub fn indices_bytes(&self) -> u64 {
        self.edge_count * 4
    }

    #[inline]
    fn class_of_rank(&self, rank: u64) -> usize {
        let mut k = self.bucket_class[(rank >> self.rank_shift) as usize] as usize;
        while self.class_start[k + 1] <= rank {
            k += 1;
        }
        k
    }

    /// The degree of node `v` (`v < n`).
    #[inline]
    pub fn degree(&self, v: u64) -> u64 {
        self.class_degree[self.node_class[v as usize] as usize]
    }

    /// `(degree, nodes)` for every degree some node has, ascending.
    pub fn degree_histogram(&self) -> Vec<(u64, u64)> {
        let mut counts = vec![0u64; self.class_degree.len()];
        for &c in &self.node_class {
            counts[c as usize] += 1;
        }
        self.class_degree
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(&d, n)| (d, n))
            .collect()
    }

    /// `indptr[v]` (`v ≤ n`): where node `v`'s list starts.
    pub fn indptr(&self, v: u64) -> u64 {
        let chunk = v / CHUNK_NODES;
        let first = chunk * CHUNK_NODES;
        self.chunk_start[chunk as usize] + (first..v).map(|u| self.degree(u)).sum::<u64>()
    }

    /// The node whose list holds entry `position` (`position < entries`), and the entry's
    /// index in that list.
    pub fn owner(&self, position: u64) -> (u64, u64) {
        debug_assert!(position < self.edge_count);
        let mut chunk = self.position_chunk[(position / POSITION_BLOCK) as usize] as usize;
        while self.chunk_start[chunk + 1] <= position {
            chunk += 1;
        }
        let mut v = chunk as u64 * CHUNK_NODES;
        let mut start = self.chunk_start[chunk];
        loop {
            let d = self.degree(v);
            if position < start + d {
                return (v, position - start);
            }
            start += d;
            v += 1;
        }
    }

    #[inline]
    fn node_key(&self, v: u64) -> u64 {
        mix(self.key ^ v.wrapping_mul(GOLDEN))
    }

    /// Entry `i` of node `v`'s list (`i < degree(v)`).
    #[inline]
    pub fn neighbour(&self, v: u64, i: u64) -> u32 {
        self.neighbour_keyed(self.node_key(v), v, i)
    }

    #[inline]
    fn neighbour_keyed(&self, node_key: u64, v: u64, i: u64) -> u32 {
        let n = self.spec.node_count;
        let step = GOLDEN.wrapping_mul(2 * i + 1);
        let w0 = mix(node_key.wrapping_add(step));
        let w1 = mix(node_key.wrapping_add(step).wrapping_add(GOLDEN));
        let pick = self
            .pick
            .as_ref()
            .expect("a graph with entries has a pick table");
        let outcome = pick.draw(w0);
        let u = if outcome < self.local_bins {
            let span = 1u64 << outcome;
            let gap = span + ((u128::from(w1 << 1) * u128::from(span)) >> 64) as u64;
            // Down if drawn so and possible, else up if possible, else down if possible, else
            // wrap (a gap longer than the graph): selects, not branches (the side is a coin).
            let (below, above) = (v.wrapping_sub(gap), v + gap);
            let (down_ok, up_ok) = (gap <= v, above < n);
            let down = (w1 >> 63 == 1 && down_ok) || !up_ok;
            let side = if down { below } else { above };
            if down_ok || up_ok { side } else { above % n }
        } else {
            let k = outcome - self.local_bins;
            let start = self.class_start[k];
            let size = self.class_start[k + 1] - start;
            let rank = start + ((u128::from(w1) * u128::from(size)) >> 64) as u64;
            self.perm.invert(rank)
        };
        let u = if u == v && n > 1 { (v + 1) % n } else { u };
        u as u32
    }

    /// Node `v`'s neighbour list, into `out` (cleared first).
    pub fn neighbours_into(&self, v: u64, out: &mut Vec<u32>) {
        out.clear();
        let key = self.node_key(v);
        out.extend((0..self.degree(v)).map(|i| self.neighbour_keyed(key, v, i)));
    }

    /// The bytes of `indptr` (little-endian `u64`, `n + 1` entries) from `offset_bytes`, into
    /// `out`; bytes past its end read 0.
    pub fn fill_indptr(&self, offset_bytes: u64, out: &mut [u8]) {
        let total = self.indptr_bytes();
        let end = (offset_bytes + out.len() as u64).min(total);
        if offset_bytes >= end {
            out.fill(0);
            return;
        }
        let first = offset_bytes / 8;
        let mut value = self.indptr(first);
        let mut v = first;
        while v * 8 < end {
            put_le(out, offset_bytes, v * 8, &value.to_le_bytes());
            if v < self.spec.node_count {
                value += self.degree(v);
            }
            v += 1;
        }
        let used = (end - offset_bytes) as usize;
        out[used..].fill(0);
    }

    /// The bytes of `indices` (little-endian `u32`) from `offset_bytes`, into `out`; bytes past
    /// its end read 0.
    pub fn fill_indices(&self, offset_bytes: u64, out: &mut [u8]) {
        let total = self.indices_bytes();
        let end = (offset_bytes + out.len() as u64).min(total);
        if offset_bytes >= end {
            out.fill(0);
            return;
        }
        let used = (end - offset_bytes) as usize;
        let first = offset_bytes / 4;
        let last = end.div_ceil(4);
        if offset_bytes.is_multiple_of(4) {
            // Entry-aligned, as every device read is: whole entries, then a partial last one.
            let mut chunks = out[..used].chunks_mut(4);
            self.for_each_entry(first, last, |u| {
                let bytes = u.to_le_bytes();
                match chunks.next() {
                    Some(c) if c.len() == 4 => c.copy_from_slice(&bytes),
                    Some(c) => c.copy_from_slice(&bytes[..c.len()]),
                    None => {}
                }
            });
        } else {
            let mut p = first;
            self.for_each_entry(first, last, |u| {
                put_le(out, offset_bytes, p * 4, &u.to_le_bytes());
                p += 1;
            });
        }
        out[used..].fill(0);
    }

    /// Calls `f` with entries `first..last` of `indices`, in order (`last ≤ entries`).
    fn for_each_entry(&self, first: u64, last: u64, mut f: impl FnMut(u32)) {
        if first >= last {
            return;
        }
        let (mut v, mut i) = self.owner(first);
        let mut degree = self.degree(v);
        let mut key = self.node_key(v);
        for _ in first..last {
            while i == degree {
                v += 1;
                i = 0;
                degree = self.degree(v);
                key = self.node_key(v);
            }
            f(self.neighbour_keyed(key, v, i));
            i += 1;
        }
    }
}

/// Copies the part of `value` (which sits at byte `at` of the array) that falls in `out` (which
/// holds the array's bytes from `offset`).
#[inline]
fn put_le(out: &mut [u8], offset: u64, at: u64, value: &[u8]) {
    let len = out.len() as u64;
    let lo = at.max(offset);
    let hi = (at + value.len() as u64).min(offset + len);
    if lo < hi {
        out[(lo - offset) as usize..(hi - offset) as usize]
            .copy_from_slice(&value[(lo - at) as usize..(hi - at) as usize]);
    }
}

#[cfg(test)]
mod tests;
