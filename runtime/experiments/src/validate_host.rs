//! The modelled host I/O stack against the Linux kernel (what `sagessd validate host` prints).
//! Each real-file sampler runs as a child process (`sagessd sample`) in a memory cgroup whose
//! limit leaves the page cache at the graph's size over *r*, caches dropped first; the kernel's
//! counts (pages read from `/proc/PID/io`, faults from `getrusage`) are set beside the model's
//! for the same graph, minibatches, page cache (its mean while the cgroup was at its limit,
//! sampled as the child runs) and `read_ahead_kb`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cgroup::{self, MemoryCgroup, ReadAheadGuard};
use crate::host_check::{self, IoCounts};
use sagessd_emulator::host_stack::MmapWorkers;
use sagessd_runtime::graph_spec::{GraphSpec, WorkloadGraph};
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::minibatch::minibatch_requests;
use sagessd_runtime::registry::SamplerKind;

/// Minibatches, their size, fanouts and seed: "16 minibatches of 1,024 targets, fanouts
/// 25,10", the yardstick `dataset footprint` and `validate host` share, so that they measure
/// the same minibatches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Minibatches.
    pub batches: u32,
    /// Targets per minibatch.
    pub batch_size: u32,
    /// Fanout per layer, hop order.
    pub fanouts: Vec<u16>,
    /// Seed of target selection and of the sampling function.
    pub seed: u64,
}

impl Workload {
    /// The run's minibatches over a graph of `node_count` nodes (as `compare` draws them).
    pub fn requests(&self, node_count: u64) -> Vec<Request> {
        minibatch_requests(self.seed, self.batches, self.batch_size, node_count)
    }

    /// "16 minibatches of 1024 targets, fanouts [25, 10], seed 1".
    pub fn describe(&self) -> String {
        format!(
            "{} minibatches of {} targets, fanouts {:?}, seed {}",
            self.batches, self.batch_size, self.fanouts, self.seed
        )
    }
}

/// What to validate.
#[derive(Clone, Debug)]
pub struct HostValidation {
    /// A synthetic graph, written once as a dataset under `data` for the real samplers; the
    /// model's device computes it.
    pub graph: GraphSpec,
    /// Where the dataset is written (once; reused when it is there).
    pub data: PathBuf,
    /// Graph-to-page-cache ratios, in the order run.
    pub ratios: Vec<u32>,
    /// The samplers, each with its name as the child takes it (`mmap`, `direct`, `uring`).
    pub samplers: Vec<(String, SamplerKind)>,
    /// The minibatches.
    pub workload: Workload,
    /// Worker processes sharing the minibatches (worker w takes w, w + N, …), run at once in
    /// the one cgroup; the model's workers are then processes too.
    pub processes: usize,
    /// The disk's read_ahead_kb for the runs (set, then restored); `None`: as it is.
    pub read_ahead_kb: Option<u32>,
}

/// The graph and disk a validation runs on.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The dataset folder the children read.
    pub dataset: PathBuf,
    /// Bytes of the graph's CSR.
    pub csr_bytes: u64,
    /// The disk's read_ahead_kb during the runs.
    pub read_ahead_kb: u32,
    /// The sysfs file it was read from.
    pub read_ahead_path: PathBuf,
}

/// One sampler at one ratio: the kernel's counts and the model's.
#[derive(Clone, Debug)]
pub struct Row {
    /// The sampler's name.
    pub sampler: String,
    /// Its host I/O mode.
    pub mode: SamplerKind,
    /// Graph over page cache.
    pub ratio: u32,
    /// The page cache the children had (and the model was given), bytes.
    pub page_cache_bytes: u64,
    /// The kernel's counts, summed over the children.
    pub real: IoCounts,
    /// The model's.
    pub model: IoCounts,
}

impl Row {
    /// Real over modelled pages read and major faults, where both are known.
    pub fn ratios(&self) -> [Option<f64>; 2] {
        [
            host_check::ratio(self.real.pages_read, self.model.pages_read),
            self.real
                .major_faults
                .zip(self.model.major_faults)
                .and_then(|(r, m)| host_check::ratio(r, m)),
        ]
    }
}

/// Runs the validation: each sampler at each ratio in `sampler_command(dataset, sampler,
/// worker)` children (which must run `sagessd sample` on the dataset with the workload, worker
/// `worker` of [`HostValidation::processes`], printing its records as JSON), beside the model.
/// `setup` hears the graph and disk once written, `row` each result; returns the largest
/// deviation of real over modelled (the ratio farthest from 1). Needs root (memory cgroups,
/// drop_caches).
pub fn run(
    v: &HostValidation,
    sampler_command: &dyn Fn(&Path, &str, usize) -> Command,
    progress: &mut dyn FnMut(&str),
    setup: &mut dyn FnMut(&Setup),
    row: &mut dyn FnMut(&Row) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    cgroup::available().map_err(|why| anyhow::anyhow!("validate host needs cgroups: {why}"))?;
    let spec = &v.graph;
    let WorkloadGraph::Synthetic(graph) = spec.build().map_err(anyhow::Error::msg)? else {
        anyhow::bail!("graph {}: give a synthetic graph", spec.word());
    };
    anyhow::ensure!(v.ratios.iter().all(|r| *r > 0), "ratios must be ≥ 1");
    anyhow::ensure!((1..=64).contains(&v.processes), "processes must be 1 to 64");
    // The dataset the real samplers read: the same bytes, written once.
    let dir = v.data.join(spec.word().replace([':', ',', '=', '/'], "_"));
    let dataset = match sagessd_runtime::dataset::Dataset::open(&dir) {
        Ok(d) if d.manifest.source.contains(&spec.word()) => d,
        _ => {
            progress(&format!(
                "writing {} to {} (once)",
                spec.describe(),
                dir.display()
            ));
            sagessd_runtime::synthetic::write_dataset(
                &graph,
                &dir,
                &spec.word(),
                &format!("sagessd {} (--graph {})", spec.describe(), spec.word()),
                &mut |_, _| {},
            )?
        }
    };
    let indices_file = dir.join(&dataset.manifest.indices.file);
    let ra_path = cgroup::read_ahead_file(&indices_file)?;
    let _guard = v
        .read_ahead_kb
        .map(|kb| ReadAheadGuard::set(ra_path.clone(), kb))
        .transpose()?;
    let read_ahead_kb = cgroup::read_ahead_kb(&ra_path)?;
    let csr_bytes = graph.indptr_bytes() + graph.indices_bytes();
    setup(&Setup {
        dataset: dir.clone(),
        csr_bytes,
        read_ahead_kb,
        read_ahead_path: ra_path.clone(),
    });
    let requests = v.workload.requests(graph.node_count());
    let hw = sagessd_emulator::HwConfig::cosmos_plus();
    let mut worst: f64 = 1.0;
    for (name, mode) in &v.samplers {
        // The children's anonymous memory, learnt from each run for the next (the ratios run in
        // the order given; the first one gets 256 MiB a child).
        let mut anon_bytes = (256u64 << 20) * v.processes as u64;
        for &r in &v.ratios {
            let cache_target = csr_bytes / u64::from(r);
            let cg = MemoryCgroup::create(
                &format!("sagessd-validate-{}", std::process::id()),
                cache_target + anon_bytes,
            )?;
            cgroup::drop_caches()?;
            let mut children = Vec::with_capacity(v.processes);
            for k in 0..v.processes {
                // The child joins the cgroup before it becomes the sampler.
                let sampler = sampler_command(&dir, name, k);
                let child = Command::new("/bin/sh")
                    .arg("-c")
                    .arg(format!(
                        "echo $$ > '{}' && exec \"$0\" \"$@\"",
                        cg.procs().display()
                    ))
                    .arg(sampler.get_program())
                    .args(sampler.get_args())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn();
                match child {
                    Ok(c) => children.push(c),
                    Err(e) => {
                        // Leave no child behind in the cgroup.
                        for mut c in children {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        return Err(e.into());
                    }
                }
            }
            // Every child is waited for before any failure is reported; meanwhile the page
            // cache the group holds at its limit is sampled.
            let done = AtomicBool::new(false);
            let (outputs, cache_at_limit) = std::thread::scope(|s| {
                let watcher = s.spawn(|| cg.mean_cache_at_limit(Duration::from_millis(5), &done));
                // The sampler stops however this closure ends (a panic included), or the
                // scope would wait for it forever.
                let _stop = StopOnDrop(&done);
                let outputs: Vec<std::io::Result<std::process::Output>> = children
                    .into_iter()
                    .map(std::process::Child::wait_with_output)
                    .collect();
                done.store(true, Ordering::Release);
                (outputs, watcher.join().ok().flatten())
            });
            let mut real = IoCounts::default();
            let mut anon: Option<u64> = None;
            for child in outputs {
                let child = child?;
                anyhow::ensure!(
                    child.status.success(),
                    "the {name} sampler failed: {}",
                    String::from_utf8_lossy(&child.stderr)
                );
                let (counts, child_anon) = parse_sample(&child.stdout, *mode)?;
                real = real.plus(counts);
                anon = host_check::sum_present(anon, child_anon);
            }
            let limit = cache_target + anon_bytes;
            if let Some(anon) = anon {
                // The next run's allowance: this run's, with 16 MiB to spare.
                anon_bytes = anon + (16 << 20);
            }
            // The page cache the children had: its mean while the group was at its limit (the
            // kernel reclaiming); if it never was, what the group still holds after the
            // children are gone (all they read), or else the limit less their anonymous memory.
            let cache_bytes = cache_at_limit
                .or_else(|| cg.stat("cache").filter(|&c| c > 0))
                .unwrap_or_else(|| limit.saturating_sub(anon.unwrap_or(0)))
                .max(4096)
                / 4096
                * 4096;
            drop(cg);
            let host = sagessd_emulator::host_stack::HostStackConfig {
                page_cache_bytes: cache_bytes,
                read_ahead_kb,
                mmap_workers: if v.processes > 1 {
                    MmapWorkers::Processes
                } else {
                    MmapWorkers::Threads
                },
                ..hw.host.clone()
            };
            let model = host_check::modelled(
                &hw,
                Arc::clone(&graph),
                *mode,
                host,
                &v.workload.fanouts,
                &requests,
                v.processes,
            )?;
            let result = Row {
                sampler: name.clone(),
                mode: *mode,
                ratio: r,
                page_cache_bytes: cache_bytes,
                real,
                model,
            };
            for q in result.ratios().into_iter().flatten() {
                if (q - 1.0).abs() > (worst - 1.0).abs() {
                    worst = q;
                }
            }
            row(&result)?;
        }
    }
    Ok(worst)
}

/// Sets its flag when dropped: stops a sampling thread however its scope ends.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The real run's counts from `sagessd sample --format json`, and its anonymous memory.
fn parse_sample(stdout: &[u8], mode: SamplerKind) -> anyhow::Result<(IoCounts, Option<u64>)> {
    let text = String::from_utf8_lossy(stdout);
    let mut counts = None;
    let mut anon = None;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match v["record"].as_str() {
            Some("sample.sampler") => {
                let n = |k: &str| v[k].as_u64();
                counts = Some(IoCounts {
                    pages_read: n("bytes_read").unwrap_or(0) / 4096,
                    reads: n("reads").unwrap_or(0),
                    major_faults: (mode == SamplerKind::Mmap)
                        .then(|| n("major_faults"))
                        .flatten(),
                    minor_faults: (mode == SamplerKind::Mmap)
                        .then(|| n("minor_faults"))
                        .flatten(),
                });
            }
            Some("sample.memory") => anon = v["rss_anon_bytes"].as_u64(),
            _ => {}
        }
    }
    Ok((
        counts.ok_or_else(|| anyhow::anyhow!("sagessd sample printed no sample.sampler record"))?,
        anon,
    ))
}
