//! sagessd as a library: the one way in for the CLI, the Python package and anyone else.
//!
//! Open a [`Dataset`], say where it is read ([`Storage`]: this machine's files, the in-process
//! emulated SSD with a hardware description, an NVMe/TCP target or a Linux passthrough device),
//! choose a sampler ([`SamplerKind`]: mmap, direct, io_uring, AGNES, AGNES hyperbatches, ISP,
//! ISP hyperbatches) and a feature path ([`FeatureCache`]: the AGNES cache, the BGL FIFO, or
//! none; in-storage sampling gathers in storage), and a [`Loader`] samples minibatches on a
//! worker thread, ahead of whoever consumes them, and hands back [`Batch`]es (the node ids per
//! layer, per-layer CSC blocks, feature rows and labels) with what the storage did
//! ([`LoaderStats`]). [`pyg`] turns a batch into the arrays of PyG's `SamplerOutput`.
//!
//! ```no_run
//! use sagessd::{FeatureCache, Loader, LoaderSpec, SamplerKind, Storage};
//!
//! # fn main() -> Result<(), sagessd::Error> {
//! let mut spec = LoaderSpec::new(SamplerKind::Isp, &[25, 10]);
//! spec.storage = Storage::parse("emulator")?; // or files, emulator:HW.toml, tcp://…, passthru:…
//! spec.features = FeatureCache::Agnes;
//! let dir = std::path::Path::new("target/examples/cora");
//! let mut loader = Loader::open(dir, spec)?;
//! let node_count = loader.info().node_count;
//! loader.submit(sagessd::requests::random(1, 8, 32, node_count))?;
//! for batch in loader.by_ref() {
//!     let batch = batch?;
//!     let _ = (batch.nodes(), batch.subgraph.view(), batch.features);
//! }
//! let _ = loader.stats(); // reads, flash pages, modelled device and host time
//! # Ok(())
//! # }
//! ```
//!
//! With feature `train`, [`training`] trains GraphSAGE, GCN or GAT (libtorch) on the same
//! samplers and storage through the producer/consumer pipeline; nothing else here links
//! libtorch, so the data plane builds without it.

pub mod agreement;
pub mod compare;
mod error;
pub mod footprint;
mod loader;
mod placed;
pub mod pyg;
pub mod requests;
mod storage;
#[cfg(feature = "train")]
pub mod training;

pub use error::Error;
pub use loader::{Batch, Loader, LoaderInfo, LoaderSpec, LoaderStats, MAX_AHEAD, Request};
pub use placed::{AnyDevice, FeatureSizing, PlacedDevice};
pub use sagessd_emulator::HwConfig;
pub use sagessd_runtime::dataset::{Dataset, Split};
pub use sagessd_runtime::registry::{CacheSettings, FeatureCache, SamplerKind};
pub use sagessd_runtime::sampler::SampledSubgraph;
pub use storage::Storage;
