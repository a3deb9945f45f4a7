//! What a synthetic graph copies from a real one: its degree distribution and how far apart in
//! node-id order its neighbours are.
//!
//! A profile is a small TOML file (see `cnr-2000.toml` beside this module, the built-in one):
//!
//! ```toml
//! name = "cnr-2000"
//! source = "where the graph comes from, and the command that measured it"
//! node_count = 325557
//! degrees = [[0, 3], [1, 27436], ...]   # [degree, nodes of that degree], ascending degree
//! gap_log2_edges = [1183, 650, ...]     # entries u → v by ⌊log2 |u − v|⌋: entry b counts
//!                                       # the gaps in [2^b, 2^(b+1))
//! ```
//!
//! `sagessd dataset profile DIR` writes one for any dataset (`runtime`), so a user can grow a
//! graph of any size that follows their own. Every field is mandatory, unknown fields are
//! refused, and [`GraphProfile::validate`] names the field at fault.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The built-in profile: cnr-2000, a real web graph (see the file's header for its source).
pub const CNR_2000_TOML: &str = include_str!("cnr-2000.toml");

/// Longest gap histogram: gaps of 32-bit node ids have at most 32 bins.
pub const MAX_GAP_BINS: usize = 32;

/// A real graph's degree distribution and neighbour-gap distribution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphProfile {
    /// The real graph's name.
    pub name: String,
    /// Where the graph comes from and how the profile was measured.
    pub source: String,
    /// Nodes of the real graph (the sum of the degree histogram's counts).
    pub node_count: u64,
    /// `[degree, nodes]` pairs in strictly ascending degree, counts above 0.
    pub degrees: Vec<[u64; 2]>,
    /// CSR entries `u → v` counted by `⌊log2 |u − v|⌋` (entry `b`: gaps in `[2^b, 2^(b+1))`);
    /// the sum is the number of entries with `u ≠ v` (self loops are not counted).
    pub gap_log2_edges: Vec<u64>,
}

/// Why a profile is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read graph profile {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not a profile (syntax, a missing or unknown field, a wrong type).
    #[error("cannot parse graph profile {origin}: {message}")]
    Parse {
        /// The file, or "built-in".
        origin: String,
        /// What the parser said (it names the field).
        message: String,
    },
    /// A field has a value no graph has.
    #[error("graph profile {origin}, field {field}: {reason}")]
    Invalid {
        /// The file, or "built-in".
        origin: String,
        /// The field.
        field: &'static str,
        /// What is wrong, with the value.
        reason: String,
    },
}

impl GraphProfile {
    /// The built-in cnr-2000 profile.
    pub fn cnr_2000() -> Self {
        Self::parse(CNR_2000_TOML, "built-in cnr-2000").expect("the built-in profile is valid")
    }

    /// Reads and validates a profile file.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates profile text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let profile: Self = toml::from_str(text).map_err(|e| ProfileError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        profile.validate(origin)?;
        Ok(profile)
    }

    /// Checks every field; `origin` names the profile in the error.
    pub fn validate(&self, origin: &str) -> Result<(), ProfileError> {
        let bad = |field, reason: String| ProfileError::Invalid {
            origin: origin.to_owned(),
            field,
            reason,
        };
        if self.degrees.is_empty() {
            return Err(bad("degrees", "is empty".into()));
        }
        let mut nodes = 0u64;
        let mut entries = 0u128;
        for (i, &[degree, count]) in self.degrees.iter().enumerate() {
            if count == 0 {
                return Err(bad(
                    "degrees",
                    format!("entry {i} (degree {degree}) has 0 nodes"),
                ));
            }
            if i > 0 && degree <= self.degrees[i - 1][0] {
                return Err(bad(
                    "degrees",
                    format!("entry {i}: degree {degree} does not ascend"),
                ));
            }
            if degree > u64::from(u32::MAX) {
                return Err(bad("degrees", format!("degree {degree} exceeds 2^32 - 1")));
            }
            nodes = nodes
                .checked_add(count)
                .ok_or_else(|| bad("degrees", "node counts overflow 64 bits".into()))?;
            entries += u128::from(degree) * u128::from(count);
        }
        if nodes != self.node_count {
            return Err(bad(
                "node_count",
                format!(
                    "is {} but the degree histogram counts {nodes} nodes",
                    self.node_count
                ),
            ));
        }
        if self.gap_log2_edges.len() > MAX_GAP_BINS {
            return Err(bad(
                "gap_log2_edges",
                format!(
                    "has {} bins, at most {MAX_GAP_BINS}",
                    self.gap_log2_edges.len()
                ),
            ));
        }
        let gaps: u128 = self.gap_log2_edges.iter().map(|&g| u128::from(g)).sum();
        if gaps > entries {
            return Err(bad(
                "gap_log2_edges",
                format!("counts {gaps} entries but the degrees give only {entries}"),
            ));
        }
        if entries > 0 && gaps == 0 {
            return Err(bad("gap_log2_edges", "counts no entry".into()));
        }
        Ok(())
    }

    /// CSR entries of the real graph: Σ degree × nodes.
    pub fn entry_count(&self) -> u64 {
        self.degrees.iter().map(|&[d, c]| d * c).sum()
    }

    /// The profile as TOML text (what [`Self::parse`] reads back).
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("name = {}\n", toml_string(&self.name)));
        out.push_str(&format!("source = {}\n", toml_string(&self.source)));
        out.push_str(&format!("node_count = {}\n", self.node_count));
        out.push_str("# [degree, nodes of that degree], ascending degree\ndegrees = [\n");
        for chunk in self.degrees.chunks(8) {
            let line: Vec<String> = chunk.iter().map(|[d, c]| format!("[{d}, {c}]")).collect();
            out.push_str(&format!("    {},\n", line.join(", ")));
        }
        out.push_str("]\n# CSR entries u -> v by floor(log2 |u - v|)\ngap_log2_edges = [");
        let gaps: Vec<String> = self.gap_log2_edges.iter().map(u64::to_string).collect();
        out.push_str(&gaps.join(", "));
        out.push_str("]\n");
        out
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> GraphProfile {
        GraphProfile {
            name: "small".into(),
            source: "a test".into(),
            node_count: 6,
            degrees: vec![[0, 1], [1, 2], [3, 3]],
            gap_log2_edges: vec![4, 3, 2],
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let p = small();
        assert_eq!(GraphProfile::parse(&p.to_toml(), "t").unwrap(), p);
        assert_eq!(p.entry_count(), 11);
        let cnr = GraphProfile::cnr_2000();
        assert_eq!(GraphProfile::parse(&cnr.to_toml(), "t").unwrap(), cnr);
    }

    #[test]
    fn every_field_is_checked() {
        type Break = fn(&mut GraphProfile);
        let cases: [(Break, &str); 7] = [
            (|p| p.degrees.clear(), "degrees"),
            (|p| p.degrees[1][1] = 0, "degrees"),
            (|p| p.degrees[2][0] = 1, "degrees"),
            (|p| p.node_count = 7, "node_count"),
            (|p| p.gap_log2_edges = vec![1; 33], "gap_log2_edges"),
            (|p| p.gap_log2_edges = vec![12], "gap_log2_edges"),
            (|p| p.gap_log2_edges = vec![0, 0], "gap_log2_edges"),
        ];
        for (break_it, field) in cases {
            let mut p = small();
            break_it(&mut p);
            match p.validate("t") {
                Err(ProfileError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("expected an error on {field}, got {other:?}"),
            }
        }
        let err = GraphProfile::parse("name = 1", "f.toml").unwrap_err();
        assert!(err.to_string().contains("f.toml"), "{err}");
        let err =
            GraphProfile::parse(&format!("{}\nextra = 1\n", small().to_toml()), "f").unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }
}
