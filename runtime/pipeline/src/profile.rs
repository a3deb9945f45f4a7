//! Stage clocks, and the worker allocation `Workers::Auto` derives from them: each producer
//! stage gets workers in proportion to its time per minibatch over the consumer's, so that the
//! stages keep up with the trainer without taking more cores than there are (BGL §4.3's
//! resource isolation, by profiling instead of by its cost model).

use std::time::Duration;

/// A stage's busy time and the minibatches it handled (wall clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageClock {
    /// Busy time, summed over the stage's workers.
    pub busy_ns: u64,
    /// Minibatches (or, for the consumer, calls) handled.
    pub items: u64,
}

impl StageClock {
    /// Counts `took` spent on `items` minibatches.
    pub fn add(&mut self, took: Duration, items: usize) {
        self.busy_ns += took.as_nanos() as u64;
        self.items += items as u64;
    }

    /// Adds another clock's totals.
    pub fn merge(&mut self, other: &StageClock) {
        self.busy_ns += other.busy_ns;
        self.items += other.items;
    }

    /// Busy time per item, nanoseconds; 0 before any.
    pub fn per_item_ns(&self) -> f64 {
        if self.items == 0 {
            0.0
        } else {
            self.busy_ns as f64 / self.items as f64
        }
    }

    /// Items per second of busy time on one worker; `None` before any.
    pub fn per_worker_items_per_s(&self) -> Option<f64> {
        (self.busy_ns > 0).then(|| self.items as f64 * 1e9 / self.busy_ns as f64)
    }
}

/// Per-minibatch stage times measured on one worker each, and what they imply.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Profile {
    /// Sampling, per minibatch.
    pub sample: StageClock,
    /// Feature gather, per minibatch.
    pub gather: StageClock,
    /// The consumer, per group consumed.
    pub consume: StageClock,
}

impl Profile {
    /// Sampling and gather workers: each stage `ceil(stage time / consumer time)` workers (at
    /// least one; none for gather without a gather stage), scaled down in proportion to fit
    /// `max_workers` (each stage keeps one).
    pub fn choose(&self, max_workers: usize, has_gather: bool) -> (usize, usize) {
        let consume = self.consume.per_item_ns().max(1.0);
        let want = |c: &StageClock| ((c.per_item_ns() / consume).ceil() as usize).max(1);
        let s = want(&self.sample);
        let g = if has_gather { want(&self.gather) } else { 0 };
        if s + g <= max_workers {
            return (s, g);
        }
        if !has_gather {
            return (max_workers.max(1), 0);
        }
        let share = self.sample.per_item_ns()
            / (self.sample.per_item_ns() + self.gather.per_item_ns()).max(1.0);
        let s = ((max_workers as f64 * share).round() as usize).clamp(1, max_workers.max(2) - 1);
        (s, max_workers.saturating_sub(s).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(per_item_ms: u64) -> StageClock {
        StageClock {
            busy_ns: per_item_ms * 4_000_000,
            items: 4,
        }
    }

    #[test]
    fn stages_get_workers_in_proportion_to_their_time() {
        let p = Profile {
            sample: clock(30),
            gather: clock(10),
            consume: clock(10),
        };
        assert_eq!(p.choose(8, true), (3, 1));
        assert_eq!(p.choose(8, false), (3, 0));
        // Too few cores: proportional, each stage keeps one.
        assert_eq!(p.choose(2, true), (1, 1));
        assert_eq!(p.choose(1, true), (1, 1));
        let p = Profile {
            sample: clock(90),
            gather: clock(30),
            consume: clock(10),
        };
        assert_eq!(p.choose(4, true), (3, 1));
        assert_eq!(p.choose(4, false), (4, 0));
        // A consumer slower than every stage needs one of each.
        let p = Profile {
            sample: clock(1),
            gather: clock(1),
            consume: clock(50),
        };
        assert_eq!(p.choose(8, true), (1, 1));
    }
}
