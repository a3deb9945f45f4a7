//! The sagessd wire format: every byte that crosses the host/device boundary.
//!
//! This crate is the single definition shared by the firmware, the emulator, the host driver and
//! the runtime (the way SPDK's `nvme_spec.h` serves both its host driver and its target):
//!
//! * [`nvme`]: the 64-byte submission and 16-byte completion entries, status codes, opcodes and the
//!   parsed form of every command the device understands;
//! * [`identify`]: the Identify Controller / Namespace data structures (the subset we fill in);
//! * [`graph`]: the graph descriptor registered with `GRAPH_ATTACH`;
//! * [`ns_config`]: the neighbour-sampling configuration carried by `NS_SUBMIT`;
//! * [`subgraph`]: the sampled-subgraph (message-flow graph) format returned by `NS_COLLECT`;
//!   [`sampled_ids`]: the per-layer sampled ids a device returns instead when the host builds it;
//! * [`fabrics`]: NVMe-oF Connect / Property commands, controller properties, SGL data pointers;
//! * [`auth`]: DH-HMAC-CHAP in-band authentication (its messages; with feature `auth`, its
//!   secrets, responses and DH groups);
//! * [`tcp`]: NVMe/TCP PDUs and their framing checks; [`crc32c`]: their digest;
//! * [`tunnel`]: the window of LBAs that carries NS_SUBMIT/NS_COLLECT in Writes and Reads;
//! * [`sample`]: the one neighbour-sampling function that device and host both call, so that an
//!   in-storage sample and a host sample are byte-identical; [`rng`]: the seeded SplitMix64
//!   generator host code builds on its mix.
//!
//! Everything is little-endian, fixed-size headers carry a magic and a version, and every struct
//! has compile-time size and offset asserts. Parsing never panics: an invalid field becomes an
//! error value that maps to exactly one NVMe [`nvme::Status`].
#![no_std]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod auth;
pub mod crc32c;
pub mod fabrics;
pub mod graph;
pub mod identify;
pub mod ns_config;
pub mod nvme;
pub mod rng;
pub mod sample;
pub mod sampled_ids;
pub mod subgraph;
pub mod tcp;
pub mod tunnel;
