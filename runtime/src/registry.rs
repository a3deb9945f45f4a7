//! The one registry of samplers and feature caches: every command and the pipeline name them
//! through these enums (`clap::ValueEnum`s with feature `clap`), and open them here.

use crate::dataset::Dataset;
use crate::graph::CsrGraph;
use crate::ooc::features::{FeatureFile, FifoCache, GatherStats, ThresholdCache};
use crate::ooc::{AgnesLayout, AgnesSampler, DirectSampler, IoStats, MmapSampler};
use crate::sampler::{FNV_OFFSET, ReferenceSampler, SampledSubgraph, Sampler, SamplerError, fnv1a};

/// In-storage sampling jobs a host keeps in flight (one NS_SUBMIT each, collected in order).
pub const ISP_JOBS_IN_FLIGHT: usize = 4;

/// A neighbour sampler, by name: the one list of access methods. The CLI (`--sampler`,
/// `--mode`), the Python package (`sagessd.samplers()`), the loader, the modelled host
/// ([`crate::host_io`]) and every report and record name a method by [`Self::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum SamplerKind {
    /// The CSR in memory (the DRAM-only upper bound, and the reference). Old name `dram`
    /// (deprecated).
    #[cfg_attr(feature = "clap", value(alias = "dram"))]
    Memory,
    /// The CSR files mapped: page cache and readahead; I/O = major page faults.
    Mmap,
    /// `O_DIRECT` reads of exactly the CSR sectors needed, one at a time.
    Direct,
    /// The same reads through io_uring, a hop's reads in flight together. Old name `async`
    /// (deprecated).
    #[cfg_attr(feature = "clap", value(alias = "async"))]
    Uring,
    /// AGNES: the block layout, each block a minibatch needs read through a graph buffer.
    Agnes,
    /// AGNES hyperbatches: per hop, each block read once for all minibatches of a hyperbatch.
    Hyperbatch,
    /// In-storage sampling: the device samples (needs a device).
    Isp,
    /// In-storage sampling returning sampled ids (`sagessd_abi::sampled_ids`): the device
    /// skips the last layer's deduplication and the relabelling, the host builds the subgraph
    /// (needs a device).
    IspIds,
    /// In-storage hyperbatches: one NS_config per hyperbatch, each flash page read once per
    /// hop for all its minibatches inside the device (needs a device).
    IspHyperbatch,
}

impl SamplerKind {
    /// Every sampler, in the order the help and the reports list them.
    pub const ALL: [Self; 9] = [
        Self::Memory,
        Self::Mmap,
        Self::Direct,
        Self::Uring,
        Self::Agnes,
        Self::Hyperbatch,
        Self::Isp,
        Self::IspIds,
        Self::IspHyperbatch,
    ];

    /// Old names still accepted, and the sampler each names (deprecated: reports print
    /// [`Self::name`]).
    pub const ALIASES: [(&'static str, Self); 2] = [("dram", Self::Memory), ("async", Self::Uring)];

    /// The sampler named `name` (as [`Self::name`] spells it, or an old name of
    /// [`Self::ALIASES`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .or_else(|| {
                Self::ALIASES
                    .into_iter()
                    .find(|(alias, _)| *alias == name)
                    .map(|(_, k)| k)
            })
    }

    /// Every name, comma-separated, for error messages.
    pub fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// The name on the command line, in Python and in reports and records.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Mmap => "mmap",
            Self::Direct => "direct",
            Self::Uring => "uring",
            Self::Agnes => "agnes",
            Self::Hyperbatch => "hyperbatch",
            Self::Isp => "isp",
            Self::IspIds => "isp-ids",
            Self::IspHyperbatch => "isp-hyperbatch",
        }
    }

    /// A longer description, for reports that name the sampler in words.
    pub fn description(self) -> &'static str {
        match self {
            Self::Memory => "host DRAM",
            Self::Mmap => "host mmap",
            Self::Direct => "host direct I/O",
            Self::Uring => "host io_uring",
            Self::Agnes => "AGNES blocks",
            Self::Hyperbatch => "AGNES hyperbatch",
            Self::Isp => "ISP",
            Self::IspIds => "ISP, host-built",
            Self::IspHyperbatch => "ISP hyperbatch",
        }
    }

    /// Whether it samples from this machine's files.
    pub fn on_files(self) -> bool {
        !self.in_storage()
    }

    /// Whether the device samples (one NS_config per minibatch, or per hyperbatch).
    pub fn in_storage(self) -> bool {
        matches!(self, Self::Isp | Self::IspIds | Self::IspHyperbatch)
    }

    /// Whether the device also gathers its subgraphs' feature rows (the in-storage samplers
    /// that return subgraphs; isp-ids's host gathers them, as every host sampler does).
    pub fn gathers_in_storage(self) -> bool {
        matches!(self, Self::Isp | Self::IspHyperbatch)
    }

    /// Whether it samples from an NVMe device (block reads, or in storage).
    pub fn on_device(self) -> bool {
        matches!(self, Self::Agnes | Self::Hyperbatch) || self.in_storage()
    }

    /// Whether the modelled host ([`crate::host_io::HostIoSampler`], over the emulated SSD in
    /// virtual time) runs it; AGNES is priced by its own experiment (`sagessd experiment
    /// agnes`).
    pub fn modelled_host(self) -> bool {
        !self.needs_layout()
    }

    /// The samplers the modelled host runs ([`Self::modelled_host`]), in [`Self::ALL`]'s order.
    pub fn modelled() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(|k| k.modelled_host())
    }

    /// Whether it reads the AGNES block layout.
    pub fn needs_layout(self) -> bool {
        matches!(self, Self::Agnes | Self::Hyperbatch)
    }

    /// Minibatches it samples together: a hyperbatch's, ISP's jobs in flight, or one.
    pub fn group_size(self, hyperbatch: usize) -> usize {
        match self {
            Self::Hyperbatch | Self::IspHyperbatch => hyperbatch.max(1),
            Self::Isp | Self::IspIds => ISP_JOBS_IN_FLIGHT,
            _ => 1,
        }
    }

    /// Whether its I/O counters come from page faults (reads cannot be timed or counted as
    /// system calls).
    pub fn faults_in(self) -> bool {
        self == Self::Mmap
    }
}

impl std::fmt::Display for SamplerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a file-backed sampler reads: the dataset, and the in-memory graph and AGNES layout for
/// the samplers that use them.
#[derive(Clone, Copy, Debug)]
pub struct FileSource<'a> {
    /// The dataset.
    pub dataset: &'a Dataset,
    /// The CSR in memory (for `memory`).
    pub graph: Option<&'a CsrGraph>,
    /// The AGNES layout (for `agnes` and `hyperbatch`).
    pub layout: Option<&'a AgnesLayout>,
    /// The AGNES graph buffer, bytes.
    pub buffer_bytes: usize,
    /// Hyperbatch: read each hop's blocks ahead through io_uring.
    pub prefetch: bool,
}

/// A sampler and the storage I/O counters it keeps.
pub trait CountedSampler: Sampler {
    /// Its storage I/O so far.
    fn io(&self) -> IoStats;
}

impl CountedSampler for ReferenceSampler<'_> {
    fn io(&self) -> IoStats {
        IoStats::default()
    }
}

macro_rules! counted {
    ($($t:ty),*) => {$(
        impl CountedSampler for $t {
            fn io(&self) -> IoStats {
                self.io_stats().clone()
            }
        }
    )*};
}
counted!(MmapSampler, DirectSampler, AgnesSampler<'_>);

impl<'a> FileSource<'a> {
    /// Opens a sampler of `kind` on the files (`isp` needs a device: an error here).
    pub fn open(&self, kind: SamplerKind) -> Result<Box<dyn CountedSampler + 'a>, SamplerError> {
        let missing =
            |what: &str| SamplerError::InvalidRequest(format!("the {kind} sampler needs {what}"));
        Ok(match kind {
            SamplerKind::Memory => Box::new(ReferenceSampler::new(
                self.graph.ok_or_else(|| missing("the graph in memory"))?,
            )),
            SamplerKind::Mmap => Box::new(MmapSampler::open(self.dataset)?),
            SamplerKind::Direct | SamplerKind::Uring => Box::new(DirectSampler::open(
                self.dataset,
                kind == SamplerKind::Uring,
            )?),
            SamplerKind::Agnes | SamplerKind::Hyperbatch => Box::new(AgnesSampler::new(
                self.layout.ok_or_else(|| missing("the AGNES layout"))?,
                self.buffer_bytes,
                kind == SamplerKind::Hyperbatch && self.prefetch,
            )?),
            SamplerKind::Isp | SamplerKind::IspIds | SamplerKind::IspHyperbatch => {
                return Err(missing("a device (--on-device)"));
            }
        })
    }
}

/// A feature cache, by name: how host samplers gather their subgraphs' node features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FeatureCache {
    /// AGNES: an access-count-threshold cache over feature blocks; a hyperbatch's misses are
    /// read together, each block once.
    Agnes,
    /// BGL: a FIFO cache of rows, misses read row by row.
    Bgl,
    /// No features gathered.
    None,
}

impl FeatureCache {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Agnes => "agnes",
            Self::Bgl => "bgl",
            Self::None => "none",
        }
    }
}

impl std::fmt::Display for FeatureCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The settings of a feature gatherer's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// The cache's size, bytes.
    pub cache_bytes: usize,
    /// AGNES: accesses after which a node's row is kept.
    pub threshold: u32,
    /// AGNES: bytes per feature block read.
    pub block_bytes: usize,
}

/// Gathers each subgraph's node features from storage with AGNES's or BGL's cache.
#[derive(Debug)]
pub enum FeatureGatherer<'d> {
    /// AGNES: access-count-threshold cache, block reads, a hyperbatch's misses read together.
    Agnes(ThresholdCache<'d>),
    /// BGL: FIFO cache, row reads.
    Bgl(FifoCache<'d>),
}

impl<'d> FeatureGatherer<'d> {
    /// The gatherer `kind` names over `rows`; `None` for [`FeatureCache::None`].
    pub fn new(kind: FeatureCache, rows: FeatureFile<'d>, s: CacheSettings) -> Option<Self> {
        match kind {
            FeatureCache::Agnes => Some(Self::Agnes(ThresholdCache::new(
                rows,
                s.cache_bytes,
                s.threshold,
                s.block_bytes,
            ))),
            FeatureCache::Bgl => Some(Self::Bgl(FifoCache::new(rows, s.cache_bytes))),
            FeatureCache::None => None,
        }
    }

    /// The feature rows of each of `subs` (a minibatch, or a hyperbatch's minibatches), in
    /// node-list order: AGNES reads a hyperbatch's misses together, each feature block once;
    /// BGL gathers minibatch by minibatch.
    pub fn gather<S: std::borrow::Borrow<SampledSubgraph>>(
        &mut self,
        subs: &[S],
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let nodes: Vec<Vec<u64>> = subs
            .iter()
            .map(|s| s.borrow().view().nodes().iter().map(|v| v.get()).collect())
            .collect();
        match self {
            Self::Agnes(g) => {
                let lists: Vec<&[u64]> = nodes.iter().map(Vec::as_slice).collect();
                g.gather_many(&lists)
            }
            Self::Bgl(g) => nodes.iter().map(|n| g.gather(n)).collect(),
        }
    }

    /// What the gathering did so far, its counts starting afresh (a warm-up's set apart).
    pub fn take_stats(&mut self) -> GatherStats {
        match self {
            Self::Agnes(g) => std::mem::take(&mut g.stats),
            Self::Bgl(g) => std::mem::take(&mut g.stats),
        }
    }

    /// What the gathering did.
    pub fn stats(&self) -> &GatherStats {
        match self {
            Self::Agnes(g) => &g.stats,
            Self::Bgl(g) => &g.stats,
        }
    }
}

/// A minibatch's checksum: its subgraph's, folded with its feature rows' when gathered (so
/// samplers that gather differently still compare equal when their results are).
pub fn minibatch_checksum(sub: &SampledSubgraph, rows: Option<&[u8]>) -> u64 {
    rows.map_or(sub.checksum(), |r| {
        fnv1a(sub.checksum(), &fnv1a(FNV_OFFSET, r).to_le_bytes())
    })
}
