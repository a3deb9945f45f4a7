//! The in-memory sampler benchmark: minibatches and sampled edges per wall-clock second with one
//! or more threads, in the protocol of the sampler-comparison harness (`bench_samplers.py
//! --extern`), so DGL, PyG and this sampler are timed on the same graph with the same seeds.
//!
//! Each run samples the warm-up minibatches (untimed), then times the others; threads take
//! minibatches from a shared counter. A minibatch's sampling seed is a function of the run and
//! its index, so runs differ and every thread count samples the same subgraphs.
//!
//! Its inputs are read as the harness writes them: a graph folder of `indptr.npy` and
//! `indices.npy`, and a seeds file of one minibatch's targets a row.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context;
use sagessd_abi::sample::mix;
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::npy::{self, Dtype};
use sagessd_runtime::rng::SplitMix64;
use sagessd_runtime::sampler::{ReferenceSampler, Sampler, SamplerError};

/// A CSR graph from `indptr.npy` (int64) and `indices.npy` (int32 or int64) in `dir`.
pub fn load_graph(dir: &Path) -> anyhow::Result<CsrGraph> {
    let indptr: Vec<u64> = npy::read_i64(&dir.join("indptr.npy"))?
        .into_iter()
        .map(|v| v as u64)
        .collect();
    let file = dir.join("indices.npy");
    let indices: Vec<u32> = match npy::read_header(&file)?.dtype {
        Dtype::I32 => npy::read_raw(&file, Dtype::I32, 1)?
            .1
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
        _ => npy::read_i64(&file)?
            .into_iter()
            .map(|v| u32::try_from(v).with_context(|| format!("{}: id {v}", file.display())))
            .collect::<anyhow::Result<_>>()?,
    };
    CsrGraph::new(indptr, indices)
        .with_context(|| format!("{}: not a valid CSR graph", dir.display()))
}

/// The minibatches' targets from an int64 `.npy` of one minibatch a row.
pub fn read_seeds(path: &Path) -> anyhow::Result<Vec<Vec<u64>>> {
    let (shape, raw) = npy::read_raw(path, Dtype::I64, 2)?;
    let width = shape[1] as usize;
    Ok(raw
        .chunks_exact(8 * width.max(1))
        .map(|row| {
            row.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        })
        .collect())
}

/// What to time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchConfig {
    /// Fanouts in hop order (first the seeds' neighbours).
    pub fanouts: Vec<u16>,
    /// Sampling threads.
    pub threads: usize,
    /// Minibatches sampled before timing, per run.
    pub warmup: usize,
    /// Timed minibatches per run.
    pub batches: usize,
    /// Runs.
    pub runs: usize,
}

/// One run's totals over its timed minibatches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunResult {
    /// Wall-clock seconds.
    pub time_s: f64,
    /// Sampled edges, all layers.
    pub edges: u64,
    /// Distinct nodes per minibatch, summed.
    pub unique_nodes: u64,
}

/// Runs the benchmark: `seeds` holds the warm-up minibatches' targets, then the timed ones'.
pub fn run(
    graph: &CsrGraph,
    seeds: &[Vec<u64>],
    config: &BenchConfig,
) -> Result<Vec<RunResult>, SamplerError> {
    if seeds.len() < config.warmup + config.batches || config.threads == 0 {
        return Err(SamplerError::InvalidRequest(format!(
            "{} seed rows for {} warm-up + {} timed minibatches, {} threads",
            seeds.len(),
            config.warmup,
            config.batches,
            config.threads
        )));
    }
    (0..config.runs)
        .map(|r| {
            let seed_of = |i: usize| mix(mix(r as u64) ^ i as u64);
            sample_all(graph, &seeds[..config.warmup], &config.fanouts, 1, &seed_of)?;
            let timed = &seeds[config.warmup..config.warmup + config.batches];
            let started = Instant::now();
            let (edges, unique_nodes) =
                sample_all(graph, timed, &config.fanouts, config.threads, &|i| {
                    seed_of(config.warmup + i)
                })?;
            Ok(RunResult {
                time_s: started.elapsed().as_secs_f64(),
                edges,
                unique_nodes,
            })
        })
        .collect()
}

/// Samples every minibatch of `rows` with `threads` threads; returns (edges, unique nodes).
fn sample_all(
    graph: &CsrGraph,
    rows: &[Vec<u64>],
    fanouts: &[u16],
    threads: usize,
    seed_of: &(dyn Fn(usize) -> u64 + Sync),
) -> Result<(u64, u64), SamplerError> {
    let next = AtomicUsize::new(0);
    let totals = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<(u64, u64), SamplerError> {
                    let mut sampler = ReferenceSampler::new(graph);
                    let (mut edges, mut nodes) = (0, 0);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(targets) = rows.get(i) else {
                            return Ok((edges, nodes));
                        };
                        let s = sampler.sample(seed_of(i), fanouts, targets)?;
                        edges += s.edge_count();
                        nodes += s.node_count() as u64;
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(SamplerError::InvalidRequest("a worker panicked".into()))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(totals
        .into_iter()
        .fold((0, 0), |(e, n), (de, dn)| (e + de, n + dn)))
}

/// The host's build of subgraphs from sampled ids ([`sagessd_runtime::sampler::host_build`]), timed: what the
/// host pays per minibatch when the device returns sampled ids instead of the subgraph.
#[derive(Clone, Debug, PartialEq)]
pub struct HostBuildResult {
    /// Minibatches built per run.
    pub minibatches: usize,
    /// Sampled edges over those minibatches.
    pub edges: u64,
    /// Bytes of their sampled ids (what the device returns).
    pub ids_bytes: u64,
    /// Bytes of their subgraphs (what the device returns when it builds them).
    pub subgraph_bytes: u64,
    /// Wall-clock seconds of each run's builds.
    pub runs_s: Vec<f64>,
}

/// Samples each of `rows` with the reference sampler (a seed per row), turns each subgraph into
/// the sampled ids a device returns for it, checks that the host's build gives the subgraph
/// back, then times `runs` runs of building every minibatch, one builder reused throughout as a
/// sampler reuses it.
pub fn host_build(
    graph: &CsrGraph,
    rows: &[Vec<u64>],
    fanouts: &[u16],
    runs: usize,
) -> Result<HostBuildResult, SamplerError> {
    let mut reference = ReferenceSampler::new(graph);
    let mut inputs = Vec::with_capacity(rows.len());
    let (mut edges, mut ids_bytes, mut subgraph_bytes) = (0, 0, 0);
    let mut builder = sagessd_runtime::sampler::host_build::HostBuilder::new(graph.node_count());
    for (i, targets) in rows.iter().enumerate() {
        let seed = mix(i as u64);
        let sub = reference.sample(seed, fanouts, targets)?;
        let ids = sagessd_runtime::sampler::host_build::sampled_ids_of(&sub)?;
        let built = builder.build(&ids, graph.node_count(), seed, fanouts, targets)?;
        if built != sub {
            return Err(SamplerError::InvalidRequest(format!(
                "minibatch {i}: the host's build differs from the reference"
            )));
        }
        edges += sub.edge_count();
        ids_bytes += ids.len() as u64;
        subgraph_bytes += sub.as_bytes().len() as u64;
        inputs.push((seed, targets, ids));
    }
    let mut runs_s = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        for (seed, targets, ids) in &inputs {
            let built = builder.build(ids, graph.node_count(), *seed, fanouts, targets)?;
            std::hint::black_box(built);
        }
        runs_s.push(started.elapsed().as_secs_f64());
    }
    Ok(HostBuildResult {
        minibatches: rows.len(),
        edges,
        ids_bytes,
        subgraph_bytes,
        runs_s,
    })
}

/// Minibatch targets the harness's way: consecutive chunks of `batch_size` of one seeded
/// permutation of the nodes that have neighbours.
pub fn harness_seeds(graph: &CsrGraph, rows: usize, batch_size: usize, seed: u64) -> Vec<Vec<u64>> {
    let mut nodes: Vec<u64> = (0..graph.node_count())
        .filter(|v| graph.degree(*v) > 0)
        .collect();
    SplitMix64::new(seed).shuffle(&mut nodes);
    nodes
        .chunks(batch_size.max(1))
        .take(rows)
        .map(<[u64]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_runtime::rmat::{RmatParams, generate};

    #[test]
    fn the_host_build_benchmark_checks_and_counts_what_it_times() {
        let g = generate(&RmatParams::graph500(10, 8, 5)).unwrap();
        let rows = harness_seeds(&g, 3, 64, 1);
        let r = host_build(&g, &rows, &[5, 3], 2).unwrap();
        assert_eq!((r.minibatches, r.runs_s.len()), (3, 2));
        assert!(r.edges > 0 && r.ids_bytes > 0);
        // Sampled ids carry no node list: fewer bytes than the subgraphs.
        assert!(r.ids_bytes < r.subgraph_bytes, "{r:?}");
    }

    #[test]
    fn thread_counts_sample_the_same_subgraphs() {
        let g = generate(&RmatParams::graph500(10, 8, 5)).unwrap();
        let seeds = harness_seeds(&g, 12, 50, 1);
        let config = |threads| BenchConfig {
            fanouts: vec![5, 3],
            threads,
            warmup: 2,
            batches: 10,
            runs: 2,
        };
        let one = run(&g, &seeds, &config(1)).unwrap();
        let three = run(&g, &seeds, &config(3)).unwrap();
        for (a, b) in one.iter().zip(&three) {
            assert_eq!((a.edges, a.unique_nodes), (b.edges, b.unique_nodes));
        }
        assert!(one[0].edges > 0);
        assert!(run(&g, &seeds[..5], &config(1)).is_err());
    }
}
