//! Which graph a run uses, as one command-line word (`--graph`): an R-MAT, a synthetic graph
//! that follows a real one's profile at any size, or a dataset folder.
//!
//! ```plain
//!   rmat:SCALE[:EDGE_FACTOR[:SEED]]        Graph500 R-MAT (edge factor 8, seed 1 by default)
//!   synthetic:NODES[,seed=S][,local-bins=B][,profile=FILE]
//!                                          a synthetic graph of NODES nodes (K, M, G suffixes:
//!                                          10^3, 10^6, 10^9) following cnr-2000 or FILE
//!   papers100m[,seed=S][,...]              synthetic:111059956: ogbn-papers100M's node count
//!   DIR                                    a dataset folder (`sagessd dataset`)
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use sagessd_emulator::synthetic_graph::{
    GraphProfile, PAPERS100M_NODES, SyntheticGraph, SyntheticSpec,
};

use crate::dataset::Dataset;
use crate::graph::HostGraph;
use crate::graph::{CsrGraph, DegreeStats};
use crate::rmat::{self, RmatParams};

/// A graph named on the command line.
#[derive(Clone, Debug, PartialEq)]
pub enum GraphSpec {
    /// A Graph500 R-MAT.
    Rmat(RmatParams),
    /// A synthetic graph following a profile (read from the file, if one was named).
    Synthetic(SyntheticSpec, Option<PathBuf>),
    /// A dataset folder.
    Dataset(PathBuf),
}

/// A graph built from its [`GraphSpec`]: a CSR in memory, or a synthetic graph's tables.
#[derive(Clone, Debug)]
pub enum WorkloadGraph {
    /// An in-memory CSR.
    Csr(Arc<CsrGraph>),
    /// A synthetic graph.
    Synthetic(Arc<SyntheticGraph>),
}

impl WorkloadGraph {
    /// The graph as the host reads it.
    pub fn host(&self) -> HostGraph<'_> {
        match self {
            Self::Csr(g) => HostGraph::Csr(g),
            Self::Synthetic(g) => HostGraph::Synthetic(g),
        }
    }

    /// Its degree statistics.
    pub fn degree_stats(&self) -> DegreeStats {
        match self {
            Self::Csr(g) => g.degree_stats(),
            Self::Synthetic(g) => {
                DegreeStats::from_histogram(&g.degree_histogram(), g.edge_count())
                    .expect("a synthetic graph has nodes")
            }
        }
    }

    /// Bytes of its CSR as laid out on a device (8-byte `indptr`, 4-byte `indices`).
    pub fn csr_bytes(&self) -> u64 {
        let h = self.host();
        (h.node_count() + 1) * 8 + h.edge_count() * 4
    }
}

fn parse_count(text: &str) -> Result<u64, String> {
    let (digits, scale) = match text.as_bytes().last() {
        Some(b'K' | b'k') => (&text[..text.len() - 1], 1_000),
        Some(b'M' | b'm') => (&text[..text.len() - 1], 1_000_000),
        Some(b'G' | b'g') => (&text[..text.len() - 1], 1_000_000_000),
        _ => (text, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|d| d.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a count (digits, optionally K, M or G)"))
}

impl GraphSpec {
    /// Parses a `--graph` word (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: String| format!("--graph {text:?}: {why}");
        if let Some(rest) = text.strip_prefix("rmat:") {
            let parts: Vec<&str> = rest.split(':').collect();
            if parts.len() > 3 {
                return Err(bad("rmat:SCALE[:EDGE_FACTOR[:SEED]]".into()));
            }
            let num = |i: usize, default: u64| -> Result<u64, String> {
                parts.get(i).map_or(Ok(default), |p| {
                    p.parse().map_err(|_| bad(format!("{p:?} is not a number")))
                })
            };
            let scale = u32::try_from(num(0, 0)?).map_err(|_| bad("scale too large".into()))?;
            let ef = u32::try_from(num(1, 8)?).map_err(|_| bad("edge factor too large".into()))?;
            return Ok(Self::Rmat(RmatParams::graph500(scale, ef, num(2, 1)?)));
        }
        let synthetic = text
            .strip_prefix("synthetic:")
            .map(|rest| rest.split_once(',').unwrap_or((rest, "")))
            .map(|(nodes, opts)| (parse_count(nodes), opts))
            .or_else(|| {
                let rest = text.strip_prefix("papers100m")?;
                (rest.is_empty() || rest.starts_with(','))
                    .then(|| (Ok(PAPERS100M_NODES), rest.trim_start_matches(',')))
            });
        if let Some((nodes, options)) = synthetic {
            let mut spec = SyntheticSpec::cnr_2000_like(nodes.map_err(bad)?, 1);
            let mut profile_path = None;
            for option in options.split(',').filter(|o| !o.is_empty()) {
                let (key, value) = option
                    .split_once('=')
                    .ok_or_else(|| bad(format!("option {option:?} is not KEY=VALUE")))?;
                let number = || {
                    value
                        .parse::<u64>()
                        .map_err(|_| bad(format!("{key}={value:?}")))
                };
                match key {
                    "seed" => spec.seed = number()?,
                    "local-bins" => {
                        spec.local_bins = u32::try_from(number()?)
                            .map_err(|_| bad(format!("local-bins={value}")))?;
                    }
                    "profile" => {
                        spec.profile = Arc::new(
                            GraphProfile::load(value.as_ref()).map_err(|e| bad(e.to_string()))?,
                        );
                        profile_path = Some(PathBuf::from(value));
                    }
                    other => {
                        return Err(bad(format!(
                            "unknown option {other:?} (seed, local-bins, profile)"
                        )));
                    }
                }
            }
            return Ok(Self::Synthetic(spec, profile_path));
        }
        Ok(Self::Dataset(PathBuf::from(text)))
    }

    /// Builds the graph (generates an R-MAT, tabulates a synthetic graph, or reads a dataset).
    pub fn build(&self) -> Result<WorkloadGraph, String> {
        match self {
            Self::Rmat(p) => rmat::generate(p)
                .map(|g| WorkloadGraph::Csr(Arc::new(g)))
                .map_err(|e| e.to_string()),
            Self::Synthetic(spec, _) => SyntheticGraph::new(spec.clone())
                .map(|g| WorkloadGraph::Synthetic(Arc::new(g)))
                .map_err(|e| e.to_string()),
            Self::Dataset(dir) => Dataset::open(dir)
                .and_then(|d| d.graph())
                .map(|g| WorkloadGraph::Csr(Arc::new(g)))
                .map_err(|e| e.to_string()),
        }
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        match self {
            Self::Rmat(p) => format!(
                "R-MAT scale {} edge factor {} seed {}",
                p.scale, p.edge_factor, p.seed
            ),
            Self::Synthetic(s, _) => format!(
                "synthetic, {} nodes, following {} (degrees; gaps below 2^{} ids), seed {}",
                s.node_count, s.profile.name, s.local_bins, s.seed
            ),
            Self::Dataset(dir) => format!("dataset {}", dir.display()),
        }
    }

    /// The `--graph` word that names this graph ([`Self::parse`] reads it back).
    pub fn word(&self) -> String {
        match self {
            Self::Rmat(p) => format!("rmat:{}:{}:{}", p.scale, p.edge_factor, p.seed),
            Self::Synthetic(s, profile) => {
                let mut w = format!(
                    "synthetic:{},seed={},local-bins={}",
                    s.node_count, s.seed, s.local_bins
                );
                if let Some(path) = profile {
                    w.push_str(&format!(",profile={}", path.display()));
                }
                w
            }
            Self::Dataset(dir) => dir.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            GraphSpec::parse("rmat:16").unwrap(),
            GraphSpec::Rmat(RmatParams::graph500(16, 8, 1))
        );
        assert_eq!(
            GraphSpec::parse("rmat:20:16:3").unwrap(),
            GraphSpec::Rmat(RmatParams::graph500(20, 16, 3))
        );
        let GraphSpec::Synthetic(s, None) =
            GraphSpec::parse("synthetic:2M,seed=4,local-bins=0").unwrap()
        else {
            panic!("not synthetic");
        };
        assert_eq!((s.node_count, s.seed, s.local_bins), (2_000_000, 4, 0));
        let GraphSpec::Synthetic(s, None) = GraphSpec::parse("papers100m,seed=2").unwrap() else {
            panic!("not synthetic");
        };
        assert_eq!((s.node_count, s.seed), (PAPERS100M_NODES, 2));
        assert_eq!(
            GraphSpec::parse("data/x").unwrap(),
            GraphSpec::Dataset("data/x".into())
        );
        for word in [
            "rmat:12:4:9",
            "synthetic:1000,seed=3,local-bins=5",
            "papers100m",
            "d/x",
        ] {
            let spec = GraphSpec::parse(word).unwrap();
            assert_eq!(GraphSpec::parse(&spec.word()).unwrap(), spec, "{word}");
        }
    }

    #[test]
    fn bad_words_say_what_is_wrong() {
        for (word, says) in [
            ("rmat:x", "not a number"),
            ("rmat:1:2:3:4", "SCALE"),
            ("synthetic:12Q", "not a count"),
            ("synthetic:99999999999999999999", "not a count"),
            ("synthetic:10,seed", "KEY=VALUE"),
            ("synthetic:10,colour=red", "unknown option"),
            ("synthetic:10,profile=/nonexistent.toml", "cannot read"),
        ] {
            let e = GraphSpec::parse(word).unwrap_err();
            assert!(e.contains(says) && e.contains(word), "{word}: {e}");
        }
        assert!(GraphSpec::parse("synthetic:0").unwrap().build().is_err());
    }
}
