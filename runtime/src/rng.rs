//! The seeded generator the runtime uses for R-MAT edges, vertex permutations and minibatch
//! targets: the ABI's [`SplitMix64`], the one the host driver's load uses too.

pub use sagessd_abi::rng::SplitMix64;
