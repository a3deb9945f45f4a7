//! sagessd host runtime: graphs, their on-device layout, and the neighbour samplers.
//!
//! * [`graph`]: an in-memory CSR graph with validation and degree statistics;
//! * [`rmat`]: a seeded R-MAT generator (Graph500 parameters) producing symmetric simple graphs;
//! * [`host_io`]: host sampling over the modelled host I/O stack (mmap, direct I/O, io_uring);
//! * [`load`]: writing a CSR graph onto a device through NVMe WRITEs and `GRAPH_ATTACH`;
//! * [`sampler`]: the [`sampler::Sampler`] trait with its one output type and three
//!   implementations (in-memory reference, host-over-device, in-storage);
//! * [`compare`]: the `sagessd compare` experiment (every host mode and ISP, several workers);
//! * [`demo`]: the `sagessd demo` experiment (host-over-device vs ISP on an emulated device);
//! * [`rng`]: the deterministic generator behind every seeded choice.

pub mod compare;
pub mod demo;
pub mod graph;
pub mod host_io;
pub mod load;
pub mod rmat;
pub mod rng;
pub mod sampler;
