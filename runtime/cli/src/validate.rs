//! `sagessd validate host`: the modelled host I/O stack against the Linux kernel. Each real-file
//! sampler runs as a child `sagessd sample` in a memory cgroup whose limit leaves the page
//! cache at the graph's size over *r*, caches dropped first; the kernel's counts (pages read
//! from `/proc/PID/io`, faults from `getrusage`) are set beside the model's for the same graph,
//! minibatches, page cache (its mean while the cgroup was at its limit, sampled as the child
//! runs) and `read_ahead_kb`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Subcommand};
use sagessd_emulator::host_stack::MmapWorkers;
use sagessd_runtime::cgroup::{self, MemoryCgroup, ReadAheadGuard};
use sagessd_runtime::compare::human_bytes;
use sagessd_runtime::graph_spec::{GraphSpec, WorkloadGraph};
use sagessd_runtime::host_check::{self, IoCounts};
use sagessd_runtime::host_io::HostIoMode;

use crate::records::{FormatArgs, Output, Record};
use crate::workload_args::WorkloadArgs;

/// The `validate` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ValidateCommand {
    /// The host model (page cache, faults, readahead; direct and io_uring reads) against the
    /// Linux kernel on this machine: real · modelled · ratio per sampler and graph-to-memory
    /// ratio (needs root: memory cgroups, drop_caches).
    Host(HostArgs),
    /// The modelled host sampling compute (`[host] node_ns`, `edge_sampled_ns`) measured from
    /// this machine's host sampler: instructions counted under valgrind's callgrind with its
    /// cache simulation, turned into time by this machine's CPI and miss penalties, fitted per
    /// destination node and sampled edge; the wall clock beside (needs the release build and
    /// valgrind).
    HostCompute(crate::host_compute::HostComputeArgs),
}

/// Flags of `validate host`.
#[derive(Debug, Args)]
pub(crate) struct HostArgs {
    /// A synthetic graph (synthetic:NODES[,...] or papers100m): written once as a dataset under
    /// --data for the real samplers; the model's device computes it.
    #[arg(long, default_value = "synthetic:16M")]
    graph: String,
    /// Where the dataset is written (once; reused when it is there).
    #[arg(long, value_name = "DIR", default_value = "target/validate")]
    data: PathBuf,
    /// Graph-to-page-cache ratios.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    ratios: Vec<u32>,
    /// Samplers: mmap, direct, uring.
    #[arg(long, value_delimiter = ',', default_value = "mmap,direct,uring")]
    samplers: Vec<String>,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Worker processes sharing the minibatches (worker w takes w, w + N, …), run at once in
    /// the one cgroup; the model's workers are then processes too (`[host] mmap_workers`).
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// The disk's read_ahead_kb for the runs (set, then restored); default: as it is.
    #[arg(long)]
    read_ahead_kb: Option<u32>,
    #[command(flatten)]
    output: FormatArgs,
}

/// Runs a `validate` subcommand.
pub(crate) fn run(command: ValidateCommand) -> anyhow::Result<ExitCode> {
    match command {
        ValidateCommand::Host(a) => host(a),
        ValidateCommand::HostCompute(a) => crate::host_compute::run(a),
    }
}

/// `validate host`.
fn host(a: HostArgs) -> anyhow::Result<ExitCode> {
    cgroup::available().map_err(|why| anyhow::anyhow!("validate host needs cgroups: {why}"))?;
    let spec = GraphSpec::parse(&a.graph).map_err(anyhow::Error::msg)?;
    let WorkloadGraph::Synthetic(graph) = spec.build().map_err(anyhow::Error::msg)? else {
        anyhow::bail!("--graph {}: give a synthetic graph", a.graph);
    };
    let modes: Vec<(String, HostIoMode)> = a
        .samplers
        .iter()
        .map(|s| match s.as_str() {
            "mmap" => Ok((s.clone(), HostIoMode::Mmap)),
            "direct" => Ok((s.clone(), HostIoMode::Direct)),
            "uring" => Ok((s.clone(), HostIoMode::Async)),
            other => anyhow::bail!("--samplers {other}: mmap, direct or uring"),
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(a.ratios.iter().all(|r| *r > 0), "--ratios must be ≥ 1");
    anyhow::ensure!(
        (1..=64).contains(&a.processes),
        "--processes must be 1 to 64"
    );
    // The dataset the real samplers read: the same bytes, written once.
    let dir = a.data.join(spec.word().replace([':', ',', '=', '/'], "_"));
    let dataset = match sagessd_runtime::dataset::Dataset::open(&dir) {
        Ok(d) if d.manifest.source.contains(&spec.word()) => d,
        _ => {
            eprintln!("writing {} to {} (once)", spec.describe(), dir.display());
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
    let _guard = a
        .read_ahead_kb
        .map(|kb| ReadAheadGuard::set(ra_path.clone(), kb))
        .transpose()?;
    let read_ahead_kb = cgroup::read_ahead_kb(&ra_path)?;
    let csr_bytes = graph.indptr_bytes() + graph.indices_bytes();
    let w = &a.workload;
    let requests = w.requests(graph.node_count());
    let hw = sagessd_emulator::HwConfig::cosmos_plus();
    let mut out = Output::new(a.output.format());
    out.text(format!(
        "host model vs the Linux kernel: {} ({} of CSR); {}; read_ahead_kb {read_ahead_kb} ({})\n",
        spec.describe(),
        human_bytes(csr_bytes),
        w.describe(),
        ra_path.display(),
    ));
    out.text(format!(
        "{:<7} {:>3} {:>11}   {:>29}   {:>27}   {:>23}\n",
        "sampler",
        "r",
        "page cache",
        "pages read: real · model · ×",
        "major faults: real · model · ×",
        "minor faults: real · model"
    ));
    let mut worst: f64 = 1.0;
    let exe = std::env::current_exe()?;
    for (name, mode) in &modes {
        // The children's anonymous memory, learnt from each run for the next (the ratios run in
        // the order given; the first one gets 256 MiB a child).
        let mut anon_bytes = (256u64 << 20) * a.processes as u64;
        for &r in &a.ratios {
            let cache_target = csr_bytes / u64::from(r);
            let cg = MemoryCgroup::create(
                &format!("sagessd-validate-{}", std::process::id()),
                cache_target + anon_bytes,
            )?;
            cgroup::drop_caches()?;
            let mut children = Vec::with_capacity(a.processes);
            for k in 0..a.processes {
                let child = Command::new("/bin/sh")
                    .arg("-c")
                    .arg(format!(
                        "echo $$ > '{}' && exec \"$0\" \"$@\"",
                        cg.procs().display()
                    ))
                    .arg(&exe)
                    .args(["sample", "--dataset"])
                    .arg(&dir)
                    .args(["--sampler", name, "--batches"])
                    .arg(w.batches.to_string())
                    .args(["--batch-size", &w.batch_size.to_string(), "--fanouts"])
                    .arg(sagessd_experiments::compare_rows::join_fanouts(&w.fanouts))
                    .args(["--seed", &w.seed.to_string(), "--format", "json"])
                    .args(["--batch-stride", &a.processes.to_string()])
                    .args(["--batch-offset", &k.to_string()])
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
                    "sagessd sample --sampler {name} failed: {}",
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
                mmap_workers: if a.processes > 1 {
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
                &w.fanouts,
                &requests,
                a.processes,
            )?;
            let x = |real: u64, model: u64| host_check::ratio(real, model);
            for q in [
                x(real.pages_read, model.pages_read),
                real.major_faults
                    .zip(model.major_faults)
                    .and_then(|(r, m)| x(r, m)),
            ]
            .into_iter()
            .flatten()
            {
                worst = if (q - 1.0).abs() > (worst - 1.0).abs() {
                    q
                } else {
                    worst
                };
            }
            let show = |q: Option<f64>| q.map_or("-".into(), |q| format!("{q:.3}"));
            let faults = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            out.text(format!(
                "{:<7} {:>3} {:>11}   {:>11} · {:>9} · {:>5}   {:>9} · {:>9} · {:>5}   {:>9} · {:>9}\n",
                name,
                r,
                if *mode == HostIoMode::Mmap {
                    human_bytes(cache_bytes)
                } else {
                    "-".into()
                },
                real.pages_read,
                model.pages_read,
                show(x(real.pages_read, model.pages_read)),
                faults(real.major_faults),
                faults(model.major_faults),
                show(real.major_faults.zip(model.major_faults).and_then(|(r, m)| x(r, m))),
                faults(real.minor_faults),
                faults(model.minor_faults),
            ));
            out.record(
                Record::new("validate.host")
                    .with("sampler", name.as_str())
                    .with("ratio", r)
                    .with("processes", a.processes)
                    .with("graph_bytes", csr_bytes)
                    .with("page_cache_bytes", cache_bytes)
                    .with("read_ahead_kb", read_ahead_kb)
                    .with("real_pages_read", real.pages_read)
                    .with("model_pages_read", model.pages_read)
                    .with("real_reads", real.reads)
                    .with("model_reads", model.reads)
                    .with("real_major_faults", real.major_faults)
                    .with("model_major_faults", model.major_faults)
                    .with("real_minor_faults", real.minor_faults)
                    .with("model_minor_faults", model.minor_faults)
                    .with("timing", "counts"),
            )?;
        }
    }
    out.text(format!(
        "real: the kernel's counts for `sagessd sample` in a memory cgroup (pages = /proc/PID/io read_bytes / 4 KiB for mmap, the sampler's O_DIRECT bytes otherwise); model: the host model on the emulated device, same minibatches, page cache and read_ahead_kb; largest deviation ×{worst:.3}\n"
    ));
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// Sets its flag when dropped: stops a sampling thread however its scope ends.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The real run's counts from `sagessd sample --format json`, and its anonymous memory.
fn parse_sample(stdout: &[u8], mode: HostIoMode) -> anyhow::Result<(IoCounts, Option<u64>)> {
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
                    major_faults: (mode == HostIoMode::Mmap)
                        .then(|| n("major_faults"))
                        .flatten(),
                    minor_faults: (mode == HostIoMode::Mmap)
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
