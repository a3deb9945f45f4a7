//! `sagessd validate`: its flags and tables. `validate host` sets the modelled host I/O stack
//! beside the Linux kernel (`sagessd_experiments::validate_host`, with this binary's `sample` as
//! the child it runs in a memory cgroup); `validate host-compute` is `host_compute.rs`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::{Args, Subcommand};
use sagessd::compare::human_bytes;
use sagessd_experiments::validate_host::{self, HostValidation};
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_runtime::registry::SamplerKind;

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
    let graph = GraphSpec::parse(&a.graph).map_err(anyhow::Error::msg)?;
    let samplers: Vec<(String, SamplerKind)> = a
        .samplers
        .iter()
        .map(|s| match s.as_str() {
            "mmap" => Ok((s.clone(), SamplerKind::Mmap)),
            "direct" => Ok((s.clone(), SamplerKind::Direct)),
            "uring" => Ok((s.clone(), SamplerKind::Uring)),
            other => anyhow::bail!("--samplers {other}: mmap, direct or uring"),
        })
        .collect::<anyhow::Result<_>>()?;
    let workload = a.workload.workload();
    let v = HostValidation {
        graph: graph.clone(),
        data: a.data.clone(),
        ratios: a.ratios.clone(),
        samplers,
        workload: workload.clone(),
        processes: a.processes,
        read_ahead_kb: a.read_ahead_kb,
    };
    // Each worker is this binary's `sample`, its records as JSON lines.
    let exe = std::env::current_exe()?;
    let sampler_command = |dataset: &std::path::Path, sampler: &str, k: usize| {
        let mut c = Command::new(&exe);
        c.args(["sample", "--dataset"])
            .arg(dataset)
            .args(["--sampler", sampler, "--batches"])
            .arg(workload.batches.to_string())
            .args([
                "--batch-size",
                &workload.batch_size.to_string(),
                "--fanouts",
            ])
            .arg(sagessd_experiments::compare_rows::join_fanouts(
                &workload.fanouts,
            ))
            .args(["--seed", &workload.seed.to_string(), "--format", "json"])
            .args(["--batch-stride", &a.processes.to_string()])
            .args(["--batch-offset", &k.to_string()]);
        c
    };
    let out = std::cell::RefCell::new(Output::new(a.output.format()));
    // The CSR's bytes and the disk's read_ahead_kb, for every row's record.
    let disk = std::cell::Cell::new((0u64, 0u32));
    let worst = validate_host::run(
        &v,
        &sampler_command,
        &mut |line| eprintln!("{line}"),
        &mut |s| {
            disk.set((s.csr_bytes, s.read_ahead_kb));
            let out = out.borrow();
            out.text(format!(
                "host model vs the Linux kernel: {} ({} of CSR); {}; read_ahead_kb {} ({})\n",
                graph.describe(),
                human_bytes(s.csr_bytes),
                workload.describe(),
                s.read_ahead_kb,
                s.read_ahead_path.display(),
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
        },
        &mut |row| {
            let [pages, major] = row.ratios();
            let (real, model) = (&row.real, &row.model);
            let show = |q: Option<f64>| q.map_or("-".into(), |q| format!("{q:.3}"));
            let faults = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            let mut out = out.borrow_mut();
            out.text(format!(
                "{:<7} {:>3} {:>11}   {:>11} · {:>9} · {:>5}   {:>9} · {:>9} · {:>5}   {:>9} · {:>9}\n",
                row.sampler,
                row.ratio,
                if row.mode == SamplerKind::Mmap {
                    human_bytes(row.page_cache_bytes)
                } else {
                    "-".into()
                },
                real.pages_read,
                model.pages_read,
                show(pages),
                faults(real.major_faults),
                faults(model.major_faults),
                show(major),
                faults(real.minor_faults),
                faults(model.minor_faults),
            ));
            out.record(
                Record::new("validate.host")
                    .with("sampler", row.sampler.as_str())
                    .with("ratio", row.ratio)
                    .with("processes", a.processes)
                    .with("graph_bytes", disk.get().0)
                    .with("page_cache_bytes", row.page_cache_bytes)
                    .with("read_ahead_kb", disk.get().1)
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
            Ok(())
        },
    )?;
    let out = out.into_inner();
    out.text(format!(
        "real: the kernel's counts for `sagessd sample` in a memory cgroup (pages = /proc/PID/io read_bytes / 4 KiB for mmap, the sampler's O_DIRECT bytes otherwise); model: the host model on the emulated device, same minibatches, page cache and read_ahead_kb; largest deviation ×{worst:.3}\n"
    ));
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
