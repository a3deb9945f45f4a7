//! sagessd data plane: datasets, their on-disk and on-device layouts, the neighbour samplers,
//! feature gathering and the modelled host. No libtorch: training (`sagessd-train`) and the
//! pipeline (`sagessd-pipeline`) build on top of it; the experiments that measure it (compare,
//! the agreement and host checks, footprints, the sampler benchmark) are the library API's
//! (`sagessd`) and the experiments crate's.
//!
//! * [`registry`]: the samplers and feature caches by name, and opening them;
//! * [`minibatch`]: minibatch drawing: the one request type, each minibatch's seed and
//!   targets, and the order (random, BGL) of a node pool, epoch by epoch;
//! * [`placement`]: a dataset written onto an NVMe device for on-device runs;
//! * [`graph`]: an in-memory CSR graph with validation and degree statistics;
//! * [`rmat`]: a seeded R-MAT generator (Graph500 parameters) producing symmetric simple graphs;
//! * [`host_io`]: host sampling over the modelled host I/O stack (mmap, direct I/O, io_uring,
//!   and ISP through passthrough ioctls), with one or several host workers;
//! * [`load`]: writing a CSR graph onto a device through NVMe WRITEs and `GRAPH_ATTACH`;
//! * [`sampler`]: the [`sampler::Sampler`] trait with its one output type, the in-memory
//!   reference (the oracle) and the raw in-storage sampler;
//! * [`dataset`]: dataset folders (manifest + `.npy` arrays), generated or imported; [`npy`]:
//!   the NumPy array files they are made of;
//! * [`ooc`]: out-of-core sampling on real files (direct I/O, AGNES blocks and hyperbatches);
//! * [`rng`]: the deterministic generator behind every seeded choice.

pub mod dataset;
pub mod graph;
pub mod graph_spec;
pub mod host_io;
pub mod load;
pub mod minibatch;
pub mod npy;
pub mod ooc;
pub mod placement;
pub mod registry;
pub mod rmat;
pub mod rng;
pub mod sampler;
pub mod synthetic;
