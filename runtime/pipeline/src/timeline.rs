//! The modelled epoch: one virtual timeline joining the producers' modelled times (when each
//! minibatch is ready, on the device model) and the trainer's step times (measured, or priced on
//! a modelled accelerator). Step `i`
//! starts at `max(ready_i, end of step i-1)`; the trainer idles in between (SmartSAGE Fig. 7
//! and Fig. 18's end-to-end time and idle fraction, for any hardware description).
//!
//! The producers ran ahead of the trainer in virtual time, but a bounded queue would have held
//! them back: minibatch `i` cannot start before step `i - depth` has freed its place. So each
//! minibatch's production time (the growth of the producers' clock since the one before) is
//! replayed on a producer that waits for that place.

use std::collections::VecDeque;

/// The trainer's virtual timeline over an epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// When the last step ended, ns.
    pub end_ns: u64,
    /// Time the trainer waited for input, ns.
    pub idle_ns: u64,
    /// Time it trained, ns.
    pub busy_ns: u64,
    /// Steps placed.
    pub steps: u64,
    /// Minibatches the queue holds (0: unbounded).
    depth: usize,
    /// The producers' own clock at the previous minibatch.
    last_ready_ns: u64,
    /// The replayed producer's clock.
    produced_ns: u64,
    /// When the last `depth` steps ended.
    recent_ends_ns: VecDeque<u64>,
}

impl Timeline {
    /// A timeline starting at `start_ns` (the producers' clock when the epoch began), with
    /// `depth` minibatches of queue between the producers and the trainer (0: unbounded).
    pub fn starting_at(start_ns: u64, depth: usize) -> Self {
        Self {
            end_ns: start_ns,
            depth,
            last_ready_ns: start_ns,
            produced_ns: start_ns,
            ..Self::default()
        }
    }

    /// Places a step whose input the producers' clock had ready at `ready_ns` and that took
    /// `step_ns`.
    pub fn step(&mut self, ready_ns: u64, step_ns: u64) {
        let cost = ready_ns.saturating_sub(self.last_ready_ns);
        self.last_ready_ns = self.last_ready_ns.max(ready_ns);
        let place_free = match self.depth {
            0 => 0,
            d if self.recent_ends_ns.len() == d => self.recent_ends_ns[0],
            _ => 0,
        };
        self.produced_ns = self.produced_ns.max(place_free) + cost;
        let start = self.produced_ns.max(self.end_ns);
        self.idle_ns += start - self.end_ns;
        self.busy_ns += step_ns;
        self.end_ns = start + step_ns;
        self.steps += 1;
        if self.depth > 0 {
            if self.recent_ends_ns.len() == self.depth {
                self.recent_ends_ns.pop_front();
            }
            self.recent_ends_ns.push_back(self.end_ns);
        }
    }

    /// The share of the timeline the trainer spent waiting for input.
    pub fn idle_fraction(&self) -> f64 {
        let total = self.idle_ns + self.busy_ns;
        if total == 0 {
            0.0
        } else {
            self.idle_ns as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Timeline;

    #[test]
    fn a_bounded_queue_holds_the_producer_back() {
        // Producer 10 ns a minibatch, trainer 100 ns a step, queue of 2.
        let mut t = Timeline::starting_at(0, 2);
        for i in 1..=4 {
            t.step(10 * i, 100);
        }
        // Minibatches 1 and 2 ready at 10 and 20; 3 waits for step 1's end (110) and is
        // ready at 120, 4 at 220: no idle after the first wait either way.
        assert_eq!((t.end_ns, t.idle_ns), (410, 10));
        // Trainer 1 ns a step, producer 50 ns: the queue never fills, the trainer waits.
        let mut t = Timeline::starting_at(0, 2);
        for i in 1..=3 {
            t.step(50 * i, 1);
        }
        assert_eq!((t.end_ns, t.idle_ns), (151, 148));
        // A producer burst: without the bound, step 3 would start at 160; with it, minibatch 3
        // starts once step 1 is done (t = 200) and is ready at 210.
        let mut bounded = Timeline::starting_at(0, 1);
        let mut free = Timeline::starting_at(0, 0);
        for ready in [100, 110, 120] {
            bounded.step(ready, 100);
            free.step(ready, 100);
        }
        assert_eq!(free.end_ns, 400);
        assert_eq!(bounded.end_ns, 420);
    }

    #[test]
    fn a_step_waits_for_its_input_and_for_the_previous_step() {
        let mut t = Timeline::starting_at(100, 0);
        t.step(150, 10); // waits 50
        t.step(155, 10); // ready before step 0 ends: no wait, starts at 160
        t.step(400, 20); // waits 230
        assert_eq!(t.end_ns, 420);
        assert_eq!(t.idle_ns, 280);
        assert_eq!(t.busy_ns, 40);
        assert!((t.idle_fraction() - 280.0 / 320.0).abs() < 1e-12);
    }
}
