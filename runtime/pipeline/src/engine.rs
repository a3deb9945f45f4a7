//! The pipeline's engine (SmartSAGE Fig. 4, BGL §4): sampling workers claim groups of
//! consecutive minibatches in index order and sample them; gather workers add the features;
//! one consumer (the trainer) takes the minibatches in index order, whatever the worker counts.
//!
//! ```plain
//!  credits (depth) ─► sampling workers ─► bounded queue ─► gather workers ─► bounded queue ─► reorder ─► consumer
//!        ▲                                                                                       │
//!        └──────────────────────────────── a credit back per group consumed ─────────────────────┘
//! ```
//!
//! A worker needs a credit to start a group, and the consumer returns it once it has consumed
//! the group, so at most `queue_depth` groups are alive at once (being sampled, queued,
//! gathered or waiting for their turn), however slow the consumer is. Groups are claimed in
//! index order, so the next group the consumer needs is always claimed by then: no deadlock.
//! An error (a worker's, a panic, or the consumer's) ends the run in its place in minibatch
//! order: everything before it is consumed, then the run returns it; a stop flag and the closed
//! channels make every worker stop at its next step.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, bounded};
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::sampler::SampledSubgraph;

use crate::error::PipelineError;
use crate::profile::{Profile, StageClock};
use crate::stage::{GatherStage, SampleStage, SampledGroup};

/// How many workers each producer stage gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workers {
    /// Profile each stage for a few groups on one worker each, then give the stages workers in
    /// proportion to their time per minibatch against the consumer's (BGL's resource
    /// isolation), within [`PipelineConfig::max_workers`].
    Auto,
    /// This many sampling and this many gather workers.
    Fixed {
        /// Sampling workers (at least 1).
        sample: usize,
        /// Gather workers (at least 1 when the run gathers features).
        gather: usize,
    },
}

/// How a pipeline runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Worker counts.
    pub workers: Workers,
    /// Groups alive at once, at most (≥ 1): the memory bound.
    pub queue_depth: usize,
    /// Minibatches a sampling worker takes at once (a hyperbatch's, or 1).
    pub group_size: usize,
    /// With [`Workers::Auto`]: groups run one after the other to profile the stages.
    pub profile_groups: usize,
    /// With [`Workers::Auto`]: producer workers (sampling + gather) at most, each stage keeping
    /// at least one.
    pub max_workers: usize,
}

/// A minibatch ready for the consumer.
#[derive(Debug)]
pub struct Minibatch {
    /// Its index in the run.
    pub index: usize,
    /// Its message-flow graph.
    pub subgraph: SampledSubgraph,
    /// Its nodes' feature rows in node-list order, when the run has features.
    pub features: Option<Vec<u8>>,
    /// Modelled time it was ready ([`crate::stage::Sampled::ready_ns`], else its group's
    /// [`SampledGroup::modelled_ready_ns`]).
    pub modelled_ready_ns: Option<u64>,
}

/// The stages' totals over a run (wall clock).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunReport {
    /// Minibatches consumed.
    pub minibatches: usize,
    /// Wall time of the run.
    pub wall_ns: u64,
    /// Sampling: busy time summed over its workers.
    pub sample: StageClock,
    /// Feature gather: busy time summed over its workers.
    pub gather: StageClock,
    /// The consumer: time inside its calls, per minibatch.
    pub consume: StageClock,
    /// The consumer's time waiting for its next minibatch.
    pub wait_ns: u64,
    /// Sampling workers used.
    pub sample_workers: usize,
    /// Gather workers used (0: no gather stage).
    pub gather_workers: usize,
    /// The profile `Workers::Auto` chose them from.
    pub profile: Option<Profile>,
    /// Groups alive at once, at most (sampled or being sampled, not yet consumed).
    pub peak_groups_alive: usize,
}

/// Makes worker `w`'s stage (called on the caller's thread, as workers are added).
pub type StageFactory<'a, T> = Box<dyn FnMut(usize) -> Result<T, PipelineError> + 'a>;

/// A group moving through the pipeline.
struct Group {
    index: usize,
    first: usize,
    sampled: SampledGroup,
    gathered: Option<Vec<Vec<u8>>>,
}

/// The pipeline: its workers' stages, made on the first run and kept for the next ones (their
/// caches and file handles stay warm across epochs), and the profile `Workers::Auto` chose
/// them from.
pub struct Pipeline<'a> {
    config: PipelineConfig,
    new_sampler: StageFactory<'a, Box<dyn SampleStage + 'a>>,
    new_gatherer: Option<StageFactory<'a, Box<dyn GatherStage + 'a>>>,
    samplers: Vec<Box<dyn SampleStage + 'a>>,
    gatherers: Vec<Box<dyn GatherStage + 'a>>,
    /// Set once the worker counts are decided.
    workers: Option<(usize, usize)>,
    profile: Option<Profile>,
}

impl std::fmt::Debug for Pipeline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("config", &self.config)
            .field("workers", &self.workers)
            .field("profile", &self.profile)
            .finish()
    }
}

impl<'a> Pipeline<'a> {
    /// A pipeline whose workers' stages `new_sampler(w)` and `new_gatherer(w)` make
    /// (`new_gatherer` is `None` when nothing is gathered on the host).
    pub fn new(
        config: PipelineConfig,
        new_sampler: StageFactory<'a, Box<dyn SampleStage + 'a>>,
        new_gatherer: Option<StageFactory<'a, Box<dyn GatherStage + 'a>>>,
    ) -> Result<Self, PipelineError> {
        if config.queue_depth == 0 {
            return Err(PipelineError::Config(
                "the queue depth must be at least 1".into(),
            ));
        }
        if let Workers::Fixed { sample, gather } = config.workers
            && (sample == 0 || (gather == 0 && new_gatherer.is_some()))
        {
            return Err(PipelineError::Config(
                "every stage needs at least one worker".into(),
            ));
        }
        Ok(Self {
            config,
            new_sampler,
            new_gatherer,
            samplers: Vec::new(),
            gatherers: Vec::new(),
            workers: None,
            profile: None,
        })
    }

    /// The profile the worker counts were chosen from (`Workers::Auto`, after the first run).
    pub fn profile(&self) -> Option<&Profile> {
        self.profile.as_ref()
    }

    /// Runs `requests` through the pipeline: `consume` takes every minibatch in index order.
    /// Returns the stages' totals, or the first error in minibatch order.
    pub fn run(
        &mut self,
        requests: &[Request],
        consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    ) -> Result<RunReport, PipelineError> {
        let started = Instant::now();
        let group_size = self.config.group_size.max(1);
        let groups: Vec<&[Request]> = requests.chunks(group_size).collect();
        let mut report = RunReport::default();
        self.add_workers(1, usize::from(self.new_gatherer.is_some()))?;
        let profiled = match self.workers {
            Some(_) => 0,
            None => self.decide_workers(&groups, group_size, consume, &mut report)?,
        };
        let (sample_workers, gather_workers) = self.workers.unwrap_or((1, 0));
        self.add_workers(sample_workers, gather_workers)?;
        report.sample_workers = sample_workers;
        report.gather_workers = gather_workers;
        report.profile = self.profile;
        run_parallel(
            &groups[profiled..],
            profiled,
            group_size,
            self.config.queue_depth,
            &mut self.samplers[..sample_workers],
            &mut self.gatherers[..gather_workers],
            consume,
            &mut report,
        )?;
        report.wall_ns = started.elapsed().as_nanos() as u64;
        Ok(report)
    }

    /// Makes stages until there are `sample` samplers and `gather` gatherers.
    fn add_workers(&mut self, sample: usize, gather: usize) -> Result<(), PipelineError> {
        while self.samplers.len() < sample {
            let w = self.samplers.len();
            self.samplers.push((self.new_sampler)(w)?);
        }
        if let Some(f) = self.new_gatherer.as_mut() {
            while self.gatherers.len() < gather {
                let w = self.gatherers.len();
                self.gatherers.push(f(w)?);
            }
        }
        Ok(())
    }

    /// Fixed counts, or (`Workers::Auto`) the first groups run one after the other on the
    /// caller's thread, each stage timed, and counts chosen from that; returns the groups run.
    fn decide_workers(
        &mut self,
        groups: &[&[Request]],
        group_size: usize,
        consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
        report: &mut RunReport,
    ) -> Result<usize, PipelineError> {
        let has_gather = !self.gatherers.is_empty();
        if let Workers::Fixed { sample, gather } = self.config.workers {
            self.workers = Some((sample, if has_gather { gather } else { 0 }));
            return Ok(0);
        }
        let k = self.config.profile_groups.max(1).min(groups.len());
        let mut profile = Profile::default();
        for (g, group) in groups.iter().enumerate().take(k) {
            let first = g * group_size;
            let t = Instant::now();
            let sampled = sample_group(self.samplers[0].as_mut(), group, first)?;
            profile.sample.add(t.elapsed(), group.len());
            let t = Instant::now();
            let gathered = match self.gatherers.first_mut() {
                Some(ga) => Some(gather_group(ga.as_mut(), &sampled, first)?),
                None => None,
            };
            profile.gather.add(t.elapsed(), group.len());
            // One group at a time: the consumer waited for all of it.
            report.wait_ns += profile.sample.busy_ns + profile.gather.busy_ns
                - report.sample.busy_ns
                - report.gather.busy_ns;
            report.sample = profile.sample;
            report.gather = profile.gather;
            let group = Group {
                index: g,
                first,
                sampled,
                gathered,
            };
            let items = group.sampled.minibatches.len();
            profile
                .consume
                .add(consume_group(group, consume, report)?, items);
        }
        report.consume = profile.consume;
        report.peak_groups_alive = 1;
        self.workers = Some(profile.choose(self.config.max_workers.max(1), has_gather));
        self.profile = Some(profile);
        Ok(k)
    }
}

/// Runs `requests` through a pipeline made for this one run (see [`Pipeline`]).
pub fn run<'a>(
    requests: &[Request],
    config: &PipelineConfig,
    new_sampler: StageFactory<'a, Box<dyn SampleStage + 'a>>,
    new_gatherer: Option<StageFactory<'a, Box<dyn GatherStage + 'a>>>,
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
) -> Result<RunReport, PipelineError> {
    Pipeline::new(*config, new_sampler, new_gatherer)?.run(requests, consume)
}

/// What a worker sends towards the consumer: a group's index and the group, or why it failed.
type Delivery = (usize, Result<Group, PipelineError>);

/// Sets the stop flag when the consumer leaves, however it leaves.
struct StopOnDrop<'s>(&'s AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The groups after profiling, on the workers.
#[allow(clippy::too_many_arguments)]
fn run_parallel<'a>(
    groups: &[&[Request]],
    base: usize,
    group_size: usize,
    depth: usize,
    samplers: &mut [Box<dyn SampleStage + 'a>],
    gatherers: &mut [Box<dyn GatherStage + 'a>],
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    report: &mut RunReport,
) -> Result<(), PipelineError> {
    if groups.is_empty() {
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let alive = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let clocks = std::sync::Mutex::new((StageClock::default(), StageClock::default()));
    let result = std::thread::scope(|scope| {
        let _stop_on_exit = StopOnDrop(&stop);
        let (credit_tx, credit_rx) = bounded::<()>(depth);
        for _ in 0..depth {
            let _ = credit_tx.send(());
        }
        let (done_tx, done_rx) = bounded::<Delivery>(depth);
        let (sampled_tx, sampled_rx) = bounded::<Group>(depth);
        let has_gather = !gatherers.is_empty();
        for sampler in samplers.iter_mut() {
            let (credit_rx, done_tx) = (credit_rx.clone(), done_tx.clone());
            let sampled_tx = sampled_tx.clone();
            let (next, alive, peak, clocks, stop) = (&next, &alive, &peak, &clocks, &stop);
            scope.spawn(move || {
                let mut clock = StageClock::default();
                let mut gathered = StageClock::default();
                // Credits still buffered after the consumer left are not work: the stop flag.
                while credit_rx.recv().is_ok() && !stop.load(Ordering::SeqCst) {
                    let g = next.fetch_add(1, Ordering::SeqCst);
                    let Some(group) = groups.get(g) else { break };
                    let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    let first = (base + g) * group_size;
                    let t = Instant::now();
                    let sampled = sample_group(sampler.as_mut(), group, first);
                    let took = t.elapsed();
                    // A stage that gathers as it samples (on a device) reports that share.
                    let gather_ns = sampled.as_ref().map_or(0, |s| s.gather_ns);
                    let gather = std::time::Duration::from_nanos(gather_ns);
                    clock.add(took.saturating_sub(gather), group.len());
                    if gather_ns > 0 {
                        gathered.add(gather, group.len());
                    }
                    let index = base + g;
                    let sent = match sampled {
                        Ok(sampled) => {
                            let group = Group {
                                index,
                                first,
                                sampled,
                                gathered: None,
                            };
                            if has_gather {
                                sampled_tx.send(group).is_ok()
                            } else {
                                done_tx.send((index, Ok(group))).is_ok()
                            }
                        }
                        Err(e) => done_tx.send((index, Err(e))).is_ok(),
                    };
                    if !sent {
                        break;
                    }
                }
                if let Ok(mut c) = clocks.lock() {
                    c.0.merge(&clock);
                    c.1.merge(&gathered);
                }
            });
        }
        drop(sampled_tx);
        for gatherer in gatherers.iter_mut() {
            let (sampled_rx, done_tx) = (sampled_rx.clone(), done_tx.clone());
            let (clocks, stop) = (&clocks, &stop);
            scope.spawn(move || {
                let mut clock = StageClock::default();
                for mut group in sampled_rx.iter() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let t = Instant::now();
                    let gathered = gather_group(gatherer.as_mut(), &group.sampled, group.first);
                    clock.add(t.elapsed(), group.sampled.minibatches.len());
                    let index = group.index;
                    let out = gathered.map(|rows| {
                        group.gathered = Some(rows);
                        group
                    });
                    if done_tx.send((index, out)).is_err() {
                        break;
                    }
                }
                if let Ok(mut c) = clocks.lock() {
                    c.1.merge(&clock);
                }
            });
        }
        drop(sampled_rx);
        drop(done_tx);
        consume_in_order(
            groups.len(),
            base,
            &done_rx,
            &credit_tx,
            &alive,
            consume,
            report,
        )
        // Returning sets the stop flag and drops the credit sender and the consumer's
        // receiver: every worker still running stops at its next step, before the scope
        // joins it.
    });
    let (sample, gather) = clocks.into_inner().unwrap_or_default();
    report.sample.merge(&sample);
    report.gather.merge(&gather);
    report.peak_groups_alive = report.peak_groups_alive.max(peak.into_inner());
    result
}

/// The consumer's side: groups in index order (an error in its place in that order), a credit
/// back after each.
fn consume_in_order(
    count: usize,
    base: usize,
    done_rx: &Receiver<Delivery>,
    credit_tx: &Sender<()>,
    alive: &AtomicUsize,
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    report: &mut RunReport,
) -> Result<(), PipelineError> {
    let mut waiting: BTreeMap<usize, Result<Group, PipelineError>> = BTreeMap::new();
    for want in base..base + count {
        let group = loop {
            if let Some(g) = waiting.remove(&want) {
                break g?;
            }
            let t = Instant::now();
            let got = done_rx.recv();
            report.wait_ns += t.elapsed().as_nanos() as u64;
            match got {
                Ok((index, delivery)) => {
                    waiting.insert(index, delivery);
                }
                Err(_) => {
                    return Err(PipelineError::Config(format!(
                        "every worker stopped before group {want}"
                    )));
                }
            }
        };
        let items = group.sampled.minibatches.len();
        let took = consume_group(group, consume, report)?;
        report.consume.add(took, items);
        alive.fetch_sub(1, Ordering::SeqCst);
        let _ = credit_tx.send(());
    }
    Ok(())
}

/// Hands a group's minibatches to the consumer; the time it took.
fn consume_group(
    group: Group,
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    report: &mut RunReport,
) -> Result<std::time::Duration, PipelineError> {
    let t = Instant::now();
    let ready = group.sampled.modelled_ready_ns;
    let mut rows = group.gathered.map(Vec::into_iter);
    for (k, s) in group.sampled.minibatches.into_iter().enumerate() {
        let features = match rows.as_mut() {
            Some(r) => r.next(),
            None => s.features,
        };
        consume(Minibatch {
            index: group.first + k,
            subgraph: s.subgraph,
            features,
            modelled_ready_ns: s.ready_ns.or(ready),
        })?;
        report.minibatches += 1;
    }
    Ok(t.elapsed())
}

/// Runs a sampling stage on a group, catching a panic and checking the count.
fn sample_group(
    stage: &mut dyn SampleStage,
    group: &[Request],
    first: usize,
) -> Result<SampledGroup, PipelineError> {
    let end = first + group.len();
    let out = guarded("sample", first, end, || stage.sample(group))?;
    if out.minibatches.len() != group.len() {
        return Err(PipelineError::Count {
            stage: "sample",
            got: out.minibatches.len(),
            want: group.len(),
        });
    }
    Ok(out)
}

/// Runs a gather stage on a sampled group, catching a panic and checking the count.
fn gather_group(
    stage: &mut dyn GatherStage,
    group: &SampledGroup,
    first: usize,
) -> Result<Vec<Vec<u8>>, PipelineError> {
    let subs: Vec<&SampledSubgraph> = group.minibatches.iter().map(|m| &m.subgraph).collect();
    let end = first + subs.len();
    let rows = guarded("gather", first, end, || stage.gather(&subs))?;
    if rows.len() != subs.len() {
        return Err(PipelineError::Count {
            stage: "gather",
            got: rows.len(),
            want: subs.len(),
        });
    }
    Ok(rows)
}

/// `f`, with its error or panic turned into a [`PipelineError`] naming the stage and group.
fn guarded<T>(
    stage: &'static str,
    first: usize,
    end: usize,
    f: impl FnOnce() -> Result<T, sagessd_runtime::sampler::SamplerError>,
) -> Result<T, PipelineError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(PipelineError::Producer {
            stage,
            first,
            end,
            source,
        }),
        Err(panic) => Err(PipelineError::Panicked {
            stage,
            first,
            end,
            message: panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into()),
        }),
    }
}
