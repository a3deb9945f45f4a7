//! The simulation proper: firmware calls on the firmware core and the sampling lanes' cores,
//! each dated in virtual time, and the DMAs, flash operations and completions each call posts
//! (the time model in the [parent module](super)).

use sagessd_abi::nvme::{CompletionEntry, Status};
use sagessd_firmware::Busy;
use sagessd_firmware::work::WorkCounters;

use super::host_side::{EffectKind, Incoming};
use super::{CQE_BYTES, Completed, LIVELOCK_CALLS, Ssd, Step};
use crate::dram::Dram;
use crate::error::EmulatorError;
use crate::nand::DmaBytes;
use crate::pcie::{Direction, PcieLink};

impl Ssd {
    /// Whether the firmware has something to do right now (at `fw_time_ns`).
    fn has_immediate_work(&self) -> bool {
        if !self.blocked.is_empty() {
            return self.retry_blocked;
        }
        self.arrivals
            .peek_time()
            .is_some_and(|t| t <= self.fw_time_ns)
    }

    /// Advances the simulation by one firmware call, unless that call would start at or after
    /// `horizon` (the earliest posted completion, which must be handed out first).
    pub(super) fn step(&mut self, horizon: Option<u64>) -> Result<Step, EmulatorError> {
        loop {
            // The earliest lane core with a call to make (the lowest lane on a tie).
            let lane_call = self
                .lane_cores
                .iter()
                .enumerate()
                .filter(|(_, l)| l.hot)
                .map(|(i, l)| (i, l.time_ns))
                .min_by_key(|&(_, t)| t);
            if self.hot && lane_call.is_none_or(|(_, t)| t >= self.fw_time_ns) {
                if horizon.is_some_and(|h| h <= self.fw_time_ns) {
                    return Ok(Step::Horizon);
                }
                self.call(self.fw_time_ns)?;
                return Ok(Step::Ran);
            }
            // A lane core's call comes first unless the (idle) firmware core is woken earlier.
            // The firmware is idle: find what wakes it next. Arrivals wait while the firmware
            // is full (they would only be answered busy).
            let next_arrival = if self.blocked.is_empty() {
                self.arrivals.peek_time()
            } else {
                None
            };
            let next_flash = self.firmware.flash().next_event_ns();
            let next = match (next_arrival, next_flash) {
                (Some(a), Some(f)) => Some(a.min(f)),
                (Some(t), None) | (None, Some(t)) => Some(t),
                (None, None) => None,
            };
            if let Some((i, t)) = lane_call
                && (self.hot || next.is_none_or(|n| t < n))
            {
                if horizon.is_some_and(|h| h <= t) {
                    return Ok(Step::Horizon);
                }
                self.call_lane(i, t)?;
                return Ok(Step::Ran);
            }
            let Some(next) = next else {
                return Ok(Step::Quiet);
            };
            if horizon.is_some_and(|h| h <= next) {
                return Ok(Step::Horizon);
            }
            if next_flash == Some(next) {
                let nand = self.firmware.flash_mut();
                nand.process_next_event();
                if nand.has_finished() {
                    self.wake(next);
                }
            } else {
                self.wake(next);
            }
        }
    }

    fn wake(&mut self, t_ns: u64) {
        self.fw_time_ns = self.fw_time_ns.max(t_ns);
        self.hot = true;
    }

    /// One firmware call starting at `start_ns`: a submit (a retried or newly arrived command)
    /// or a poll; then its work is charged and its effects are timed.
    fn call(&mut self, start_ns: u64) -> Result<(), EmulatorError> {
        self.firmware.flash_mut().advance_to(start_ns);
        self.forget_dram();
        let before = self.firmware.work();
        let dma_before = self.firmware.flash_mut().dma_bytes();
        let mut extra_cycles = 0;
        // A submit always makes progress in the sense that a poll must follow it (to run the
        // command, or to free a slot after "busy"); only a fruitless poll idles the firmware.
        let progress = if !self.blocked.is_empty() && self.retry_blocked {
            let incoming = self.blocked.pop_front().expect("checked non-empty");
            self.submit_to_firmware(incoming, true);
            true
        } else if self.blocked.is_empty()
            && self.arrivals.peek_time().is_some_and(|t| t <= start_ns)
        {
            let (_, incoming) = self.arrivals.pop().expect("checked non-empty");
            if !self.isp && incoming.cmd.sq_id != 0 && incoming.sqe.opcode >= 0x80 {
                // No ISP on this device: the vendor opcode is refused before the firmware.
                extra_cycles = self.cycles_per_command;
                let Incoming { cmd, host, .. } = incoming;
                let cqe = CompletionEntry::new(cmd.sq_id, cmd.cid, Status::INVALID_OPCODE, 0);
                self.host.push(EffectKind::Complete { cqe, host });
            } else {
                self.submit_to_firmware(incoming, false);
            }
            true
        } else {
            let progress = match self.shared_lane {
                Some(lane) => self.firmware.poll_with_lane(&mut self.host, lane),
                // No ISP: nothing queues a job.
                None if self.lane_cores.is_empty() => self.firmware.poll(&mut self.host),
                None => self.firmware.poll_io(&mut self.host),
            };
            if progress {
                self.retry_blocked = true;
            } else {
                self.stats.idle_polls += 1;
                self.stats.idle_poll_parked_checked +=
                    self.firmware.work().parked_checked - before.parked_checked;
            }
            progress
        };
        let work = self.firmware.work().since(&before);
        let dma_cycles = self.flash_dma_cycles_since(dma_before);
        let core_ns = self.cores.cycles_to_ns(
            self.cores
                .cycles(&work)
                .saturating_add(extra_cycles)
                .saturating_add(dma_cycles),
        );
        self.stats.flash_dma_core_ns += self.cores.cycles_to_ns(dma_cycles);
        let start_ns = self.wait_for_p2p(start_ns, &work);
        let end_ns = start_ns + core_ns;
        self.stats.firmware_calls += 1;
        self.stats.core_busy_ns += core_ns;
        self.stamp_effects(start_ns, (&before, dma_before), end_ns);
        self.fw_time_ns = end_ns;
        self.hot = progress || self.has_immediate_work();
        // What the call did (a job accepted, its pages read) may give the lane cores work.
        if progress {
            self.wake_lanes(end_ns, None);
        }
        self.count_livelock(core_ns, progress, end_ns)
    }

    /// Wakes at `t_ns` every idle lane core (but `except`) whose lane has work.
    fn wake_lanes(&mut self, t_ns: u64, except: Option<usize>) {
        for (i, l) in self.lane_cores.iter_mut().enumerate() {
            if !l.hot && except != Some(i) && self.firmware.isp_lane_busy(l.lane) {
                l.hot = true;
                l.time_ns = l.time_ns.max(t_ns);
            }
        }
    }

    /// Lets the DRAM forget its past: no request will name a time before the earliest core's
    /// next call or the NAND's next event. An idle lane core does not hold it back: when it is
    /// woken, its next call is no earlier than the waking core's time then.
    fn forget_dram(&mut self) {
        let lanes = self
            .lane_cores
            .iter()
            .filter(|l| l.hot)
            .map(|l| l.time_ns)
            .fold(u64::MAX, u64::min);
        let nand = self.firmware.flash_mut();
        let floor = self.fw_time_ns.min(lanes).min(nand.now_ns());
        if let Some(d) = nand.dram_mut() {
            d.forget_before(floor);
        }
    }

    /// An FPGA CSD: the call's scanned pages are copied SSD→FPGA before its work can start;
    /// returns when it can start.
    fn wait_for_p2p(&mut self, start_ns: u64, work: &WorkCounters) -> u64 {
        match self.p2p.as_mut() {
            Some(link) if work.pages_scanned > 0 => {
                let mut done = start_ns;
                let mut dram = self.firmware.flash_mut().dram_mut();
                for _ in 0..work.pages_scanned {
                    done = dma(
                        link,
                        dram.as_deref_mut(),
                        Direction::DeviceToHost,
                        start_ns,
                        self.page_size_bytes,
                    );
                }
                self.stats.p2p_wait_ns += done.saturating_sub(start_ns);
                start_ns.max(done)
            }
            _ => start_ns,
        }
    }

    /// One call of lane core `i`'s sampling lane starting at `start_ns`: its work is charged
    /// to that core and the flash reads it issued are dated on it.
    fn call_lane(&mut self, i: usize, start_ns: u64) -> Result<(), EmulatorError> {
        self.firmware.flash_mut().advance_to(start_ns);
        let before = self.firmware.work();
        let dma_before = self.firmware.flash_mut().dma_bytes();
        let progress = self.firmware.poll_isp_lane(self.lane_cores[i].lane);
        let work = self.firmware.work().since(&before);
        let dma_cycles = self.flash_dma_cycles_since(dma_before);
        let core_ns = self
            .cores
            .cycles_to_ns(self.cores.cycles(&work).saturating_add(dma_cycles));
        self.stats.flash_dma_core_ns += self.cores.cycles_to_ns(dma_cycles);
        let start_ns = self.wait_for_p2p(start_ns, &work);
        let end_ns = start_ns + core_ns;
        self.stats.isp_calls += 1;
        self.stats.isp_core_busy_ns += core_ns;
        self.stamp_effects(start_ns, (&before, dma_before), end_ns);
        self.lane_cores[i].time_ns = end_ns;
        self.lane_cores[i].hot = progress;
        // The firmware core and the other lanes see what the lane did (a finished job to
        // collect, freed page-buffer slots) when the call ends.
        if progress {
            if !self.hot {
                self.wake(end_ns);
            }
            self.wake_lanes(end_ns, Some(i));
        }
        self.count_livelock(core_ns, progress, end_ns)
    }

    /// What keeping the flash DMA issued since `before` coherent costs the issuing core: the
    /// board's glue does it around each operation it starts and reports, which the firmware
    /// does not count. All of it is charged before the operation is issued (a read's second
    /// pass, after its transfer and before the firmware hears of it, is on the read's critical
    /// path all the same).
    fn flash_dma_cycles_since(&mut self, before: DmaBytes) -> u64 {
        let d = self.firmware.flash_mut().dma_bytes().since(before);
        self.cores.flash_dma_cycles(d)
    }

    fn count_livelock(
        &mut self,
        core_ns: u64,
        progress: bool,
        end_ns: u64,
    ) -> Result<(), EmulatorError> {
        if core_ns == 0 && progress {
            self.calls_at_instant += 1;
            if self.calls_at_instant >= LIVELOCK_CALLS {
                return Err(EmulatorError::Livelock {
                    now_ns: end_ns,
                    calls: self.calls_at_instant,
                });
            }
        } else {
            self.calls_at_instant = 0;
        }
        Ok(())
    }

    /// Hands a command to the firmware; on "busy" it waits in `blocked` for a retry.
    fn submit_to_firmware(&mut self, incoming: Incoming, retried: bool) {
        let Incoming { cmd, sqe, host } = incoming;
        self.host.incoming = Some((cmd, host));
        match self.firmware.submit(&mut self.host, cmd, &sqe) {
            Ok(()) => {
                if let Some((id, host)) = self.host.incoming.take() {
                    self.host.buffers.entry(id).or_default().push_back(host);
                }
            }
            Err(Busy) => {
                self.stats.busy_retries += 1;
                self.retry_blocked = false;
                // A firmware that answers busy must not have touched the command; if it
                // completed it anyway, the completion stands and there is nothing to retry.
                if let Some((_, host)) = self.host.incoming.take() {
                    let back = Incoming { cmd, sqe, host };
                    if retried {
                        self.blocked.push_front(back);
                    } else {
                        self.blocked.push_back(back);
                    }
                }
            }
        }
    }

    /// Times what the last call (`start_ns` to `end_ns`, firmware work counted from `before`)
    /// did; see the module documentation for the rules.
    fn stamp_effects(
        &mut self,
        start_ns: u64,
        (before, dma_before): (&WorkCounters, DmaBytes),
        end_ns: u64,
    ) {
        let cores = &self.cores;
        let base_cycles = cores.cycles(before);
        // When the core had done the work counted up to `at`: the call's start plus the core
        // time of the work since `before` (never past the call's end).
        let dated = |at: Option<&WorkCounters>| match at {
            Some(w) => {
                let cycles = cores.cycles(w).saturating_sub(base_cycles);
                (start_ns + cores.cycles_to_ns(cycles)).min(end_ns)
            }
            None => end_ns,
        };
        let effects = std::mem::take(&mut self.host.effects);
        self.host.noted = None;
        // Host→device DMAs first, each requested when the core posted it: what the call issued
        // afterwards may depend on their data. `h2c` holds (requested at, done at), in call
        // order, so both columns are nondecreasing.
        let mut h2c: Vec<(u64, u64)> = Vec::new();
        for e in &effects {
            if let EffectKind::Dma {
                direction: Direction::HostToDevice,
                bytes,
            } = e.kind
            {
                let at = dated(e.at.as_ref());
                let done = dma(
                    &mut self.pcie,
                    self.firmware.flash_mut().dram_mut(),
                    Direction::HostToDevice,
                    at,
                    bytes,
                );
                let done = h2c.last().map_or(done, |&(_, d)| d.max(done));
                h2c.push((at, done));
            }
        }
        // The host→device data a thing dated `t` may depend on: every such DMA posted by then.
        let h2c_by = |t: u64| -> u64 {
            let n = h2c.partition_point(|&(at, _)| at <= t);
            if n == 0 { t } else { t.max(h2c[n - 1].1) }
        };
        // A flash operation also waits for the glue's cache maintenance of the operations
        // staged up to it, its own included.
        self.firmware.flash_mut().issue_staged_by(|w, dma| {
            let glue_ns = cores.cycles_to_ns(cores.flash_dma_cycles(dma.since(dma_before)));
            h2c_by((dated(w) + glue_ns).min(end_ns))
        });
        // Device→host DMAs and completions in call order (a command's data before its CQE),
        // each requested when the core posted it; a completion also waits for the host→device
        // DMAs posted before it.
        for effect in effects {
            let at = dated(effect.at.as_ref());
            match effect.kind {
                EffectKind::Dma {
                    direction: Direction::HostToDevice,
                    ..
                } => {}
                EffectKind::Dma {
                    direction: Direction::DeviceToHost,
                    bytes,
                } => {
                    dma(
                        &mut self.pcie,
                        self.firmware.flash_mut().dram_mut(),
                        Direction::DeviceToHost,
                        at,
                        bytes,
                    );
                }
                EffectKind::Complete { cqe, host } => {
                    let cqe_done =
                        self.pcie
                            .transfer(Direction::DeviceToHost, h2c_by(at), CQE_BYTES);
                    let completed_at_ns = cqe_done + self.controller.interrupt_ns;
                    self.posted.push(
                        completed_at_ns,
                        Completed {
                            cqe,
                            data: host.data,
                            submitted_at_ns: host.submitted_at_ns,
                            completed_at_ns,
                        },
                    );
                }
            }
        }
    }
}

/// A DMA of `bytes` on `link` requested at `at_ns`, its data streaming through `dram` while
/// it crosses the link: done at `max(link_done, dram_done)`, the DRAM share requested when
/// the link's data phase starts; the link is held until then.
fn dma(
    link: &mut PcieLink,
    dram: Option<&mut Dram>,
    direction: Direction,
    at_ns: u64,
    bytes: u64,
) -> u64 {
    let done = link.transfer(direction, at_ns, bytes);
    let Some(dram) = dram else {
        return done;
    };
    let start = done - link.transfer_ns(bytes);
    let dram_done = dram.transfer(start, bytes);
    if dram_done > done {
        link.hold_until(direction, dram_done);
    }
    done.max(dram_done)
}
