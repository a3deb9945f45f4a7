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
//! The first error (a worker's, a panic, or the consumer's) ends the run with that error: the
//! consumer stops, its channels close, and every worker sees a closed channel and exits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// With [`Workers::Auto`]: producer workers (sampling + gather) at most.
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
    /// Modelled time its group was ready (see [`SampledGroup::modelled_ready_ns`]).
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
    /// The consumer: time inside its calls.
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

/// Makes one stage object per worker (called on the caller's thread, as workers are added).
pub type StageFactory<'f, T> = &'f mut dyn FnMut(usize) -> Result<T, PipelineError>;

/// A group moving through the pipeline.
struct Group {
    index: usize,
    first: usize,
    sampled: SampledGroup,
    gathered: Option<Vec<Vec<u8>>>,
}

/// Runs `requests` through the pipeline: `new_sampler(w)` and `new_gatherer(w)` make worker
/// `w`'s stages (`new_gatherer` is `None` when nothing is gathered on the host), `consume`
/// takes every minibatch in index order. Returns the stages' totals, or the first error.
pub fn run<'a>(
    requests: &[Request],
    config: &PipelineConfig,
    new_sampler: StageFactory<'_, Box<dyn SampleStage + 'a>>,
    mut new_gatherer: Option<StageFactory<'_, Box<dyn GatherStage + 'a>>>,
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
) -> Result<RunReport, PipelineError> {
    let started = Instant::now();
    let group_size = config.group_size.max(1);
    if config.queue_depth == 0 {
        return Err(PipelineError::Config(
            "the queue depth must be at least 1".into(),
        ));
    }
    let groups: Vec<&[Request]> = requests.chunks(group_size).collect();
    let mut report = RunReport::default();
    let mut samplers = vec![new_sampler(0)?];
    let mut gatherers = match new_gatherer.as_mut() {
        Some(f) => vec![f(0)?],
        None => Vec::new(),
    };
    // Profiling: the first groups run one after the other on the caller's thread.
    let (sample_workers, gather_workers, first_parallel) = match config.workers {
        Workers::Fixed { sample, gather } => {
            if sample == 0 || (gather == 0 && !gatherers.is_empty()) {
                return Err(PipelineError::Config(
                    "every stage needs at least one worker".into(),
                ));
            }
            (sample, if gatherers.is_empty() { 0 } else { gather }, 0)
        }
        Workers::Auto => {
            let k = config.profile_groups.max(1).min(groups.len());
            let mut profile = Profile::default();
            for (g, group) in groups.iter().enumerate().take(k) {
                let first = g * group_size;
                let t = Instant::now();
                let sampled = sample_group(samplers[0].as_mut(), group, first)?;
                profile.sample.add(t.elapsed(), group.len());
                let t = Instant::now();
                let gathered = match gatherers.first_mut() {
                    Some(ga) => Some(gather_group(ga.as_mut(), &sampled, first)?),
                    None => None,
                };
                profile.gather.add(t.elapsed(), group.len());
                let group = Group {
                    index: g,
                    first,
                    sampled,
                    gathered,
                };
                profile
                    .consume
                    .add(consume_group(group, consume, &mut report)?, 1);
            }
            report.sample.merge(&profile.sample);
            report.gather.merge(&profile.gather);
            let (s, ga) = profile.choose(config.max_workers.max(1), !gatherers.is_empty());
            report.profile = Some(profile);
            (s, ga, k)
        }
    };
    while samplers.len() < sample_workers {
        samplers.push(new_sampler(samplers.len())?);
    }
    if let Some(f) = new_gatherer.as_mut() {
        while gatherers.len() < gather_workers {
            gatherers.push(f(gatherers.len())?);
        }
    }
    report.sample_workers = sample_workers;
    report.gather_workers = gather_workers;
    if first_parallel > 0 {
        // Profiling ran one group at a time.
        report.peak_groups_alive = 1;
    }
    run_parallel(
        &groups[first_parallel..],
        first_parallel,
        group_size,
        config.queue_depth,
        samplers,
        gatherers,
        consume,
        &mut report,
    )?;
    report.wall_ns = started.elapsed().as_nanos() as u64;
    Ok(report)
}

/// What a worker sends towards the consumer.
type Delivery = Result<Group, PipelineError>;

/// The groups after profiling, on the workers.
#[allow(clippy::too_many_arguments)]
fn run_parallel<'a>(
    groups: &[&[Request]],
    base: usize,
    group_size: usize,
    depth: usize,
    samplers: Vec<Box<dyn SampleStage + 'a>>,
    gatherers: Vec<Box<dyn GatherStage + 'a>>,
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    report: &mut RunReport,
) -> Result<(), PipelineError> {
    if groups.is_empty() {
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let alive = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let clocks = std::sync::Mutex::new((StageClock::default(), StageClock::default()));
    let result = std::thread::scope(|scope| {
        let (credit_tx, credit_rx) = bounded::<()>(depth);
        for _ in 0..depth {
            let _ = credit_tx.send(());
        }
        let (done_tx, done_rx) = bounded::<Delivery>(depth);
        let (sampled_tx, sampled_rx) = bounded::<Group>(depth);
        let has_gather = !gatherers.is_empty();
        for mut sampler in samplers {
            let (credit_rx, done_tx) = (credit_rx.clone(), done_tx.clone());
            let sampled_tx = sampled_tx.clone();
            let (next, alive, peak, clocks) = (&next, &alive, &peak, &clocks);
            scope.spawn(move || {
                let mut clock = StageClock::default();
                while credit_rx.recv().is_ok() {
                    let g = next.fetch_add(1, Ordering::SeqCst);
                    let Some(group) = groups.get(g) else { break };
                    let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    let first = (base + g) * group_size;
                    let t = Instant::now();
                    let sampled = sample_group(sampler.as_mut(), group, first);
                    clock.add(t.elapsed(), group.len());
                    let out = sampled.map(|sampled| Group {
                        index: base + g,
                        first,
                        sampled,
                        gathered: None,
                    });
                    let sent = match out {
                        Ok(group) if has_gather => sampled_tx.send(group).is_ok(),
                        other => done_tx.send(other).is_ok(),
                    };
                    if !sent {
                        break;
                    }
                }
                if let Ok(mut c) = clocks.lock() {
                    c.0.merge(&clock);
                }
            });
        }
        drop(sampled_tx);
        for mut gatherer in gatherers {
            let (sampled_rx, done_tx) = (sampled_rx.clone(), done_tx.clone());
            let clocks = &clocks;
            scope.spawn(move || {
                let mut clock = StageClock::default();
                for mut group in sampled_rx.iter() {
                    let t = Instant::now();
                    let gathered = gather_group(gatherer.as_mut(), &group.sampled, group.first);
                    clock.add(t.elapsed(), group.sampled.minibatches.len());
                    let out = gathered.map(|rows| {
                        group.gathered = Some(rows);
                        group
                    });
                    if done_tx.send(out).is_err() {
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
        // Returning drops the credit sender and the consumer's receiver: every worker still
        // running finds its channel closed and exits before the scope joins it.
    });
    let (sample, gather) = clocks.into_inner().unwrap_or_default();
    report.sample.merge(&sample);
    report.gather.merge(&gather);
    report.peak_groups_alive = report.peak_groups_alive.max(peak.into_inner());
    result
}

/// The consumer's side: groups in index order, a credit back after each.
fn consume_in_order(
    count: usize,
    base: usize,
    done_rx: &Receiver<Delivery>,
    credit_tx: &Sender<()>,
    alive: &AtomicUsize,
    consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    report: &mut RunReport,
) -> Result<(), PipelineError> {
    let mut waiting: BTreeMap<usize, Group> = BTreeMap::new();
    for want in base..base + count {
        let group = loop {
            if let Some(g) = waiting.remove(&want) {
                break g;
            }
            let t = Instant::now();
            let got = done_rx.recv();
            report.wait_ns += t.elapsed().as_nanos() as u64;
            match got {
                Ok(Ok(g)) => {
                    waiting.insert(g.index, g);
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(PipelineError::Config(format!(
                        "every worker stopped before group {want}"
                    )));
                }
            }
        };
        let took = consume_group(group, consume, report)?;
        report.consume.add(took, 1);
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
            modelled_ready_ns: ready,
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
