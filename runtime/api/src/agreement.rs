//! The agreement check between samplers: every sampler's minibatches must have the first
//! sampler's checksums, minibatch by minibatch (subgraphs, and their features when gathered).
//! [`run_loader`] takes one sampler's minibatches from its [`Loader`] as they come, keeping only
//! their checksums (so memory is bounded by the loader's buffers, not by the run's length), and
//! [`Agreement`] compares the samplers' checksums.

use sagessd_runtime::registry::minibatch_checksum;

use crate::{Error, Loader, LoaderStats, Request};

/// One sampler's run over the requests: what it sampled, what the storage did, and how much of
/// its output was alive at once.
#[derive(Clone, Debug)]
pub struct SamplerRun {
    /// Each minibatch's checksum, in request order ([`minibatch_checksum`]: the subgraph's,
    /// folded with its features' when the run compares them).
    pub sums: Vec<u64>,
    /// What the loader and its storage did.
    pub stats: LoaderStats,
    /// The largest group of minibatches (a minibatch, or a hyperbatch) alive at once: its
    /// subgraph and feature bytes, and its minibatches.
    pub largest_group: (u64, usize),
}

/// Submits `requests` to `loader` and takes every minibatch, `group` at a time alive together
/// (a hyperbatch's, or one), keeping each one's checksum: its subgraph's, folded with its
/// features' when `with_features` (samplers that gather the same rows compare equal; with it
/// off, a sampler that gathers compares with one that does not).
pub fn run_loader(
    mut loader: Loader,
    requests: Vec<Request>,
    group: usize,
    with_features: bool,
) -> Result<SamplerRun, Error> {
    let count = requests.len();
    loader.submit(requests)?;
    let mut sums = Vec::with_capacity(count);
    let mut largest_group = (0u64, 0usize);
    let mut current = (0u64, 0usize);
    for batch in loader.by_ref() {
        let batch = batch?;
        current.0 += batch.subgraph.as_bytes().len() as u64
            + batch.features.as_ref().map_or(0, |f| f.len() as u64);
        current.1 += 1;
        let features = batch.features.as_deref().filter(|_| with_features);
        sums.push(minibatch_checksum(&batch.subgraph, features));
        if current.1 == group.max(1) || sums.len() == count {
            if current.0 > largest_group.0 {
                largest_group = current;
            }
            current = (0, 0);
        }
    }
    Ok(SamplerRun {
        sums,
        stats: loader.stats(),
        largest_group,
    })
}

/// The first difference between a sampler and the reference one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The sampler that differs.
    pub sampler: String,
    /// The sampler it was compared with (the first one).
    pub reference: String,
    /// The first minibatch (index) that differs, or that one of them lacks.
    pub minibatch: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} differs from {} on minibatch {}",
            self.sampler, self.reference, self.minibatch
        )
    }
}

/// What the samplers compared so far came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing was checked.
    Nothing,
    /// One sampler ran: nothing to compare with.
    Alone(String),
    /// Every sampler agreed with this one.
    Agreed(String),
    /// Some did not.
    Differed(Vec<Mismatch>),
}

/// Collects each sampler's per-minibatch checksums and compares them with the first's.
#[derive(Debug, Default)]
pub struct Agreement {
    first: Option<(String, Vec<u64>)>,
    compared: bool,
    mismatches: Vec<Mismatch>,
}

impl Agreement {
    /// Compares `name`'s checksums with the first sampler's (or keeps them, if it is first);
    /// returns the mismatch, if any.
    pub fn check(&mut self, name: &str, sums: Vec<u64>) -> Option<Mismatch> {
        let Some((reference, expected)) = &self.first else {
            self.first = Some((name.to_owned(), sums));
            return None;
        };
        self.compared = true;
        let longest = expected.len().max(sums.len());
        let b = (0..longest).find(|&b| expected.get(b) != sums.get(b))?;
        let m = Mismatch {
            sampler: name.to_owned(),
            reference: reference.clone(),
            minibatch: b,
        };
        self.mismatches.push(m.clone());
        Some(m)
    }

    /// The verdict so far.
    pub fn verdict(&self) -> Verdict {
        match &self.first {
            None => Verdict::Nothing,
            Some(_) if !self.mismatches.is_empty() => Verdict::Differed(self.mismatches.clone()),
            Some((name, _)) if self.compared => Verdict::Agreed(name.clone()),
            Some((name, _)) => Verdict::Alone(name.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_different_missing_or_extra_minibatch_is_a_mismatch() {
        let mut a = Agreement::default();
        assert_eq!(a.verdict(), Verdict::Nothing);
        assert_eq!(a.check("ref", vec![1, 2, 3]), None);
        assert_eq!(a.verdict(), Verdict::Alone("ref".into()));
        assert_eq!(a.check("same", vec![1, 2, 3]), None);
        assert_eq!(a.verdict(), Verdict::Agreed("ref".into()));
        assert_eq!(
            a.check("wrong", vec![1, 9, 3]).map(|m| m.minibatch),
            Some(1)
        );
        assert_eq!(a.check("short", vec![1, 2]).map(|m| m.minibatch), Some(2));
        assert_eq!(
            a.check("long", vec![1, 2, 3, 4]).map(|m| m.minibatch),
            Some(3)
        );
        match a.verdict() {
            Verdict::Differed(m) => assert_eq!(m.len(), 3),
            v => panic!("{v:?}"),
        }
    }
}
