//! The pipeline's promises, with real samplers over a generated graph: minibatches reach the
//! consumer in index order whatever the worker counts and however the workers' times vary;
//! memory is bounded by the queue depth when the consumer is slow; a failing or panicking
//! worker, or a failing consumer, ends the run with that error and never hangs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sagessd_pipeline::{
    GatherStage, HostSampling, Minibatch, PipelineConfig, PipelineError, SampleStage, SampledGroup,
    Workers, run,
};
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::minibatch::minibatch_requests;
use sagessd_runtime::rmat::{RmatParams, generate};
use sagessd_runtime::sampler::{ReferenceSampler, SampledSubgraph, SamplerError};

const FANOUTS: [u16; 2] = [5, 3];

fn graph() -> CsrGraph {
    generate(&RmatParams::graph500(10, 8, 3)).unwrap()
}

fn requests(n: u64, count: u32) -> Vec<Request> {
    minibatch_requests(9, count, 16, n)
}

/// A reference sampler with a varying delay per group, failure or panic injection, and a count
/// of the minibatches it has made that are still alive.
struct Injected<'g, 'c> {
    inner: HostSampling<ReferenceSampler<'g>>,
    index_of: &'c HashMap<u64, usize>,
    fail_at: Option<usize>,
    panic_at: Option<usize>,
    alive: &'c AtomicUsize,
    made: &'c AtomicUsize,
}

impl SampleStage for Injected<'_, '_> {
    fn sample(&mut self, group: &[Request]) -> Result<SampledGroup, SamplerError> {
        let first = self.index_of[&group[0].seed];
        // Deterministic, uneven delays so that later groups often finish first.
        std::thread::sleep(Duration::from_micros((first as u64 * 7919 % 5) * 300));
        if self
            .fail_at
            .is_some_and(|f| (first..first + group.len()).contains(&f))
        {
            return Err(SamplerError::GraphCorrupt("injected failure".into()));
        }
        if self
            .panic_at
            .is_some_and(|f| (first..first + group.len()).contains(&f))
        {
            panic!("injected panic");
        }
        let out = self.inner.sample(group)?;
        self.alive
            .fetch_add(out.minibatches.len(), Ordering::SeqCst);
        self.made.fetch_add(out.minibatches.len(), Ordering::SeqCst);
        Ok(out)
    }
}

/// Feature rows made of the node ids (so the consumer can check them against its subgraph),
/// failing on the subgraph of one minibatch if asked to.
struct IdRows<'c> {
    fail_on: Option<u64>,
    index_of: &'c HashMap<u64, usize>,
}

impl GatherStage for IdRows<'_> {
    fn gather(&mut self, subs: &[&SampledSubgraph]) -> Result<Vec<Vec<u8>>, SamplerError> {
        std::thread::sleep(Duration::from_micros(200));
        if let Some(f) = self.fail_on
            && subs
                .iter()
                .any(|s| self.index_of[&s.view().seed()] as u64 == f)
        {
            return Err(SamplerError::GraphCorrupt("injected gather failure".into()));
        }
        Ok(subs
            .iter()
            .map(|s| {
                s.view()
                    .nodes()
                    .iter()
                    .flat_map(|v| v.get().to_le_bytes())
                    .collect()
            })
            .collect())
    }
}

struct Run {
    config: PipelineConfig,
    fail_at: Option<usize>,
    panic_at: Option<usize>,
    gather_fails_at: Option<u64>,
    consumer_fails_at: Option<usize>,
    consumer_delay: Duration,
    gather: bool,
}

impl Run {
    fn new(workers: Workers, group_size: usize) -> Self {
        Self {
            config: PipelineConfig {
                workers,
                queue_depth: 3,
                group_size,
                profile_groups: 2,
                max_workers: 4,
            },
            fail_at: None,
            panic_at: None,
            gather_fails_at: None,
            consumer_fails_at: None,
            consumer_delay: Duration::ZERO,
            gather: true,
        }
    }

    /// Runs 40 minibatches; the checksums the consumer saw in order, the peak of alive
    /// minibatches, and the outcome.
    fn go(
        &self,
    ) -> (
        Vec<u64>,
        usize,
        Result<sagessd_pipeline::RunReport, PipelineError>,
    ) {
        let (seen, peak, _, out) = self.go_counting();
        (seen, peak, out)
    }

    /// [`Self::go`], and the minibatches the samplers made in all.
    fn go_counting(
        &self,
    ) -> (
        Vec<u64>,
        usize,
        usize,
        Result<sagessd_pipeline::RunReport, PipelineError>,
    ) {
        let g = graph();
        let reqs = requests(g.node_count(), 40);
        let index_of: HashMap<u64, usize> =
            reqs.iter().enumerate().map(|(i, r)| (r.seed, i)).collect();
        let alive = AtomicUsize::new(0);
        let made = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let mut seen = Vec::new();
        let (g, index_of, made_ref, alive_ref) = (&g, &index_of, &made, &alive);
        let new_sampler: sagessd_pipeline::StageFactory<'_, Box<dyn SampleStage + '_>> =
            Box::new(move |_w| {
                Ok(Box::new(Injected {
                    inner: HostSampling::new(ReferenceSampler::new(g), &FANOUTS),
                    index_of,
                    fail_at: self.fail_at,
                    panic_at: self.panic_at,
                    alive: alive_ref,
                    made: made_ref,
                }) as Box<dyn SampleStage>)
            });
        let new_gatherer: sagessd_pipeline::StageFactory<'_, Box<dyn GatherStage + '_>> =
            Box::new(move |_w| {
                Ok(Box::new(IdRows {
                    fail_on: self.gather_fails_at,
                    index_of,
                }) as Box<dyn GatherStage>)
            });
        let mut consume = |m: Minibatch| -> Result<(), PipelineError> {
            peak.fetch_max(alive.load(Ordering::SeqCst), Ordering::SeqCst);
            assert_eq!(m.index, seen.len(), "out of order");
            if let Some(rows) = &m.features {
                let ids: Vec<u8> = m
                    .subgraph
                    .view()
                    .nodes()
                    .iter()
                    .flat_map(|v| v.get().to_le_bytes())
                    .collect();
                assert_eq!(rows, &ids, "minibatch {} got another's features", m.index);
            }
            if self.consumer_fails_at == Some(m.index) {
                return Err(PipelineError::Consumer {
                    index: m.index,
                    message: "injected".into(),
                });
            }
            std::thread::sleep(self.consumer_delay);
            seen.push(m.subgraph.checksum());
            drop(m);
            alive.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        };
        let out = run(
            &reqs,
            &self.config,
            new_sampler,
            self.gather.then_some(new_gatherer),
            &mut consume,
        );
        (seen, peak.into_inner(), made.into_inner(), out)
    }
}

/// What the in-memory reference gives, minibatch by minibatch.
fn expected() -> Vec<u64> {
    let g = graph();
    let mut s = ReferenceSampler::new(&g);
    requests(g.node_count(), 40)
        .iter()
        .map(|r| {
            sagessd_runtime::sampler::Sampler::sample(&mut s, r.seed, &FANOUTS, &r.targets)
                .unwrap()
                .checksum()
        })
        .collect()
}

#[test]
fn minibatches_arrive_in_order_whatever_the_worker_counts() {
    let want = expected();
    for (workers, group) in [
        (
            Workers::Fixed {
                sample: 1,
                gather: 1,
            },
            1,
        ),
        (
            Workers::Fixed {
                sample: 3,
                gather: 2,
            },
            1,
        ),
        (
            Workers::Fixed {
                sample: 4,
                gather: 1,
            },
            3,
        ),
        (Workers::Auto, 2),
    ] {
        let (seen, _, out) = Run::new(workers, group).go();
        let report = out.unwrap();
        assert_eq!(seen, want, "{workers:?}, groups of {group}");
        assert_eq!(report.minibatches, 40);
        assert!(
            report.sample.items == 40 && report.gather.items == 40,
            "{report:?}"
        );
    }
    let mut no_gather = Run::new(
        Workers::Fixed {
            sample: 2,
            gather: 0,
        },
        1,
    );
    no_gather.gather = false;
    let (seen, _, out) = no_gather.go();
    assert_eq!(seen, want);
    assert_eq!(out.unwrap().gather_workers, 0);
}

#[test]
fn a_slow_consumer_holds_at_most_the_queue_depth() {
    let mut r = Run::new(
        Workers::Fixed {
            sample: 4,
            gather: 2,
        },
        2,
    );
    r.consumer_delay = Duration::from_millis(2);
    let (seen, peak, out) = r.go();
    assert_eq!(seen.len(), 40);
    let report = out.unwrap();
    // 3 groups of 2 alive at most, the one being consumed included.
    assert!(peak <= 6, "{peak} minibatches alive at once");
    assert!(report.peak_groups_alive <= 3, "{report:?}");
    assert!(report.wait_ns < report.wall_ns);
}

#[test]
fn a_failing_producer_ends_the_run_with_its_error() {
    for workers in [
        Workers::Fixed {
            sample: 1,
            gather: 1,
        },
        Workers::Fixed {
            sample: 3,
            gather: 2,
        },
    ] {
        let mut r = Run::new(workers, 1);
        r.fail_at = Some(17);
        let (seen, _, out) = r.go();
        match out {
            Err(PipelineError::Producer { stage, first, .. }) => {
                assert_eq!((stage, first), ("sample", 17));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            seen,
            expected()[..17],
            "everything before the failure, nothing after"
        );
        let mut r = Run::new(workers, 1);
        r.panic_at = Some(5);
        match r.go().2 {
            Err(PipelineError::Panicked { message, first, .. }) => {
                assert_eq!((message.as_str(), first), ("injected panic", 5));
            }
            other => panic!("{other:?}"),
        }
    }
    // A gather worker's failure, in its place in minibatch order.
    let mut r = Run::new(
        Workers::Fixed {
            sample: 3,
            gather: 2,
        },
        1,
    );
    r.gather_fails_at = Some(23);
    let (seen, _, out) = r.go();
    assert!(
        matches!(
            out,
            Err(PipelineError::Producer {
                stage: "gather",
                first: 23,
                ..
            })
        ),
        "{out:?}"
    );
    assert_eq!(seen, expected()[..23]);
    // During profiling too.
    let mut r = Run::new(Workers::Auto, 1);
    r.fail_at = Some(0);
    assert!(matches!(
        r.go().2,
        Err(PipelineError::Producer { first: 0, .. })
    ));
}

#[test]
fn a_failing_consumer_stops_the_workers() {
    let mut r = Run::new(
        Workers::Fixed {
            sample: 3,
            gather: 2,
        },
        1,
    );
    r.consumer_fails_at = Some(9);
    let (seen, _, out) = r.go();
    assert!(matches!(out, Err(PipelineError::Consumer { index: 9, .. })));
    assert_eq!(seen.len(), 9);
    let bad = Run {
        config: PipelineConfig {
            queue_depth: 0,
            ..Run::new(Workers::Auto, 1).config
        },
        ..Run::new(Workers::Auto, 1)
    };
    assert!(matches!(bad.go().2, Err(PipelineError::Config(_))));
}
