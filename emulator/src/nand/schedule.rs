//! The timing model's scheduling (the [parent module](super)'s "Timing"): an operation issued
//! to its die's queue, multi-plane groups formed and started, a group's sense finished, and
//! each bus phase granted on its channel (command phases ahead of data phases). An operation's
//! end, which changes the pages, is the parent's `on_done`.

use super::{BusPhase, EventKind, Group, NandArray, OpKind};

impl NandArray {
    /// Books event `kind` of `op_id` (or of a die or channel, by kind) at `time_ns`.
    pub(super) fn schedule(&mut self, time_ns: u64, kind: EventKind, op_id: u64) {
        self.events.push(time_ns, (kind, op_id));
    }

    /// The firmware issued `op_id` at `t_ns`: it joins the die's running group if it can (same
    /// kind, another plane, nothing queued ahead of it), else waits in the die's queue (starting
    /// the die if it was idle).
    pub(super) fn on_issue(&mut self, t_ns: u64, op_id: u64) {
        let die = self.ops[&op_id].die as usize;
        if self.die_group[die].is_none() {
            if self.die_queue[die].is_empty() {
                self.schedule(t_ns, EventKind::Start, die as u64);
            }
            self.die_queue[die].push_back(op_id);
        } else if self.die_queue[die].is_empty() && self.can_join(die, op_id) {
            self.join(die, op_id);
            if !self.group_is_read(die) {
                self.request_channel(t_ns, op_id, BusPhase::Program);
            }
        } else {
            self.die_queue[die].push_back(op_id);
        }
    }

    /// Whether the die's running group is a multi-plane read.
    fn group_is_read(&self, die: usize) -> bool {
        self.die_group[die].as_ref().is_some_and(|g| g.read)
    }

    /// Whether `op_id` may join the die's group: same kind (read or program), a plane the group
    /// does not use yet, and the group's array phase not started.
    fn can_join(&self, die: usize, op_id: u64) -> bool {
        let Some(g) = &self.die_group[die] else {
            return false;
        };
        let op = &self.ops[&op_id];
        let same_kind = match op.kind {
            OpKind::Read { .. } => g.read,
            OpKind::Program { .. } => {
                !g.read && matches!(self.ops[&g.members[0]].kind, OpKind::Program { .. })
            }
            OpKind::Erase { .. } => false,
        };
        same_kind
            && g.ungranted > 0
            && g.plane_mask & (1 << op.plane) == 0
            && (g.members.len() as u32) < self.planes
    }

    /// Adds `op_id` to the die's group ([`Self::can_join`] said it may).
    fn join(&mut self, die: usize, op_id: u64) {
        let plane = self.ops[&op_id].plane;
        let g = self.die_group[die].as_mut().expect("a group to join");
        g.members.push(op_id);
        g.plane_mask |= 1 << plane;
        g.remaining += 1;
        if !g.read {
            g.ungranted += 1;
        }
    }

    /// The die is free: the operation starts a group, which the operations queued behind it
    /// join while they can (same kind, other planes, in order); then the group asks the
    /// channel for its first bus phases.
    pub(super) fn start(&mut self, t_ns: u64, op_id: u64) {
        let op = &self.ops[&op_id];
        let die = op.die as usize;
        let (phase, read) = match op.kind {
            OpKind::Read { .. } => (BusPhase::ReadCommand, true),
            OpKind::Program { .. } => (BusPhase::Program, false),
            OpKind::Erase { .. } => (BusPhase::Erase, false),
        };
        self.die_group[die] = Some(Group {
            members: vec![op_id],
            plane_mask: 1 << op.plane,
            read,
            ungranted: 1,
            remaining: 1,
            started_ns: None,
            data_end_ns: 0,
        });
        while let Some(&next) = self.die_queue[die].front()
            && self.can_join(die, next)
        {
            self.die_queue[die].pop_front();
            self.join(die, next);
        }
        self.request_channel(t_ns, op_id, phase);
        if phase == BusPhase::Program {
            let members = self.die_group[die].as_ref().map(|g| g.members.clone());
            for &m in members.iter().flatten().skip(1) {
                self.request_channel(t_ns, m, BusPhase::Program);
            }
        }
    }

    /// The group's sense finished: every member's data-out asks the channel, in order.
    pub(super) fn on_sense_done(&mut self, t_ns: u64, op_id: u64) {
        let die = self.ops[&op_id].die as usize;
        let members = self.die_group[die]
            .as_ref()
            .map(|g| g.members.clone())
            .unwrap_or_default();
        for m in members {
            self.request_channel(t_ns, m, BusPhase::ReadData);
        }
    }

    /// Asks `op_id`'s channel for `phase` at `t_ns`: granted at once if the channel is free and
    /// nobody waits, otherwise queued (command phases ahead of data phases).
    fn request_channel(&mut self, t_ns: u64, op_id: u64, phase: BusPhase) {
        let ch = self.geometry.channel_of(self.ops[&op_id].die) as usize;
        let c = &mut self.channels[ch];
        if c.busy_until_ns <= t_ns && c.commands.is_empty() && c.data.is_empty() {
            self.grant(ch, t_ns, op_id, phase);
            return;
        }
        if phase.is_command() {
            c.commands.push_back((op_id, phase));
        } else {
            c.data.push_back((op_id, phase));
        }
        if !c.wake_pending {
            c.wake_pending = true;
            let at = c.busy_until_ns.max(t_ns);
            self.schedule(at, EventKind::ChannelFree, ch as u64);
        }
    }

    /// The channel `ch` came free at `t_ns`: the next waiting phase gets it.
    pub(super) fn on_channel_free(&mut self, t_ns: u64, ch: usize) {
        let c = &mut self.channels[ch];
        c.wake_pending = false;
        let next = c.commands.pop_front().or_else(|| c.data.pop_front());
        if let Some((op_id, phase)) = next {
            self.grant(ch, t_ns, op_id, phase);
        }
        let c = &mut self.channels[ch];
        if !c.commands.is_empty() || !c.data.is_empty() {
            c.wake_pending = true;
            let at = c.busy_until_ns;
            self.schedule(at, EventKind::ChannelFree, ch as u64);
        }
    }

    /// Gives channel `ch` to `phase` of `op_id` from `s` on, and schedules what follows.
    fn grant(&mut self, ch: usize, s: u64, op_id: u64, phase: BusPhase) {
        let t = self.timing;
        let cmd = t.command_overhead_ns;
        let bytes = self.channel_bytes(op_id);
        let xfer = t.transfer_ns(bytes, self.page_size_bytes as u64);
        let die = self.ops[&op_id].die as usize;
        let g = self.die_group[die]
            .as_mut()
            .expect("a granted phase has a group");
        if phase != BusPhase::ReadData {
            g.started_ns.get_or_insert(s);
            g.ungranted = g.ungranted.saturating_sub(1);
        }
        let n = g.members.len() as u64;
        let busy_ns = match phase {
            BusPhase::ReadCommand => {
                let sense_done = s + n * cmd + t.t_read_ns + self.spike_ns(op_id);
                self.schedule(sense_done, EventKind::SenseDone, op_id);
                n * cmd
            }
            BusPhase::ReadData => {
                let end = (s + xfer).max(self.dram_share(s, bytes));
                self.schedule(end, EventKind::Done, op_id);
                end - s
            }
            BusPhase::Program => {
                let end = (s + cmd + xfer).max(self.dram_share(s + cmd, bytes));
                let g = self.die_group[die]
                    .as_mut()
                    .expect("a granted phase has a group");
                g.data_end_ns = g.data_end_ns.max(end);
                if g.ungranted == 0 {
                    let done = g.data_end_ns + t.t_program_ns;
                    let members = g.members.clone();
                    let done = done + self.spike_ns(members[0]);
                    for m in members {
                        self.schedule(done, EventKind::Done, m);
                    }
                }
                end - s
            }
            BusPhase::Erase => {
                let done = s + cmd + t.t_erase_ns + self.spike_ns(op_id);
                self.schedule(done, EventKind::Done, op_id);
                cmd
            }
        };
        self.channels[ch].busy_until_ns = s + busy_ns;
        if matches!(phase, BusPhase::ReadData | BusPhase::Program) {
            self.stats.channel_bytes[ch] += bytes;
        }
    }
}
