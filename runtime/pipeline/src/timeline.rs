//! The modelled epoch: one virtual timeline joining the producers' modelled times (when each
//! minibatch is ready, on the device model) and the trainer's measured step times. Step `i`
//! starts at `max(ready_i, end of step i-1)`; the trainer idles in between (SmartSAGE Fig. 7
//! and Fig. 18's end-to-end time and idle fraction, for any hardware description).

/// The trainer's virtual timeline over an epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// When the last step ended, ns.
    pub end_ns: u64,
    /// Time the trainer waited for input, ns.
    pub idle_ns: u64,
    /// Time it trained, ns.
    pub busy_ns: u64,
    /// Steps placed.
    pub steps: u64,
}

impl Timeline {
    /// A timeline starting at `start_ns` (the producers' clock when the epoch began).
    pub fn starting_at(start_ns: u64) -> Self {
        Self {
            end_ns: start_ns,
            ..Self::default()
        }
    }

    /// Places a step whose input was ready at `ready_ns` and that took `step_ns`.
    pub fn step(&mut self, ready_ns: u64, step_ns: u64) {
        let start = ready_ns.max(self.end_ns);
        self.idle_ns += start - self.end_ns;
        self.busy_ns += step_ns;
        self.end_ns = start + step_ns;
        self.steps += 1;
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
    fn a_step_waits_for_its_input_and_for_the_previous_step() {
        let mut t = Timeline::starting_at(100);
        t.step(150, 10); // waits 50
        t.step(155, 10); // ready before step 0 ends: no wait, starts at 160
        t.step(400, 20); // waits 230
        assert_eq!(t.end_ns, 420);
        assert_eq!(t.idle_ns, 280);
        assert_eq!(t.busy_ns, 40);
        assert!((t.idle_fraction() - 280.0 / 320.0).abs() < 1e-12);
    }
}
