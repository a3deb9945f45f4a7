//! The agreement check between samplers: every sampler's minibatches must have the first
//! sampler's checksums, minibatch by minibatch (subgraphs, and their features when gathered).

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
