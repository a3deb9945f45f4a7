//! `sagessd sample`: out-of-core samplers on this machine's files, or on an NVMe device, with
//! their I/O, time and memory.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use sagessd::agreement::{Agreement, Verdict};
use sagessd_runtime::minibatch::Order;
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::registry::{FeatureCache, SamplerKind};

use crate::records::{FormatArgs, Output, Record};
use crate::{hw_source, load_hw};

/// Flags of `sample`.
#[derive(Debug, Args)]
pub(crate) struct SampleArgs {
    /// The dataset folder.
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// Samplers, comma-separated: memory (in-memory CSR), mmap (the CSR files mapped, page
    /// cache and readahead; I/O = major page faults), direct (O_DIRECT reads of the CSR
    /// sectors needed, one at a time), uring (the same reads through io_uring, a hop's reads in
    /// flight together), agnes (AGNES blocks per minibatch), hyperbatch (AGNES hyperbatches);
    /// with --on-device: agnes, hyperbatch, isp (in-storage sampling), isp-ids (in-storage
    /// sampling returning sampled ids, the host building each subgraph) and isp-hyperbatch
    /// (in-storage hyperbatches: one NS_config per hyperbatch). Old names: dram (memory) and
    /// async (uring), deprecated. Default:
    /// hyperbatch,agnes,direct, or with --on-device hyperbatch,agnes,isp.
    #[arg(long, value_delimiter = ',', value_enum)]
    sampler: Option<Vec<SamplerKind>>,
    /// Minibatches per hyperbatch (hyperbatch; isp-hyperbatch, in as many NS_configs as the
    /// device's limits need).
    #[arg(long, default_value_t = 64)]
    hyperbatch: usize,
    /// Hyperbatch: read each block when it is needed instead of ahead through io_uring.
    #[arg(long)]
    no_prefetch: bool,
    /// Minibatches.
    #[arg(long, default_value_t = 128)]
    batches: u32,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: u32,
    /// Fanouts in hop order.
    #[arg(long, value_delimiter = ',', default_value = "10,10,10")]
    fanouts: Vec<u16>,
    /// Seed of targets and sampling.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Minibatch targets: random (seeded, from all nodes) or bgl (BGL's proximity-aware order
    /// of the training nodes).
    #[arg(long, value_enum, default_value_t = Order::Random)]
    order: Order,
    /// Sample only the minibatches whose index is OFFSET modulo STRIDE: one of STRIDE worker
    /// processes sharing the run's minibatches as modelled workers do (worker w takes w,
    /// w + STRIDE, …).
    #[arg(long, default_value_t = 1, value_name = "STRIDE")]
    batch_stride: u32,
    /// This process's share of the minibatches (see --batch-stride).
    #[arg(long, default_value_t = 0, value_name = "OFFSET")]
    batch_offset: u32,
    #[command(flatten)]
    target: crate::storage::TargetArgs,
    #[command(flatten)]
    cache: crate::storage::CacheArgs,
    #[command(flatten)]
    output: FormatArgs,
}

/// `sample`: out-of-core samplers on real files, with their I/O.
pub(crate) fn run_sample(a: SampleArgs) -> anyhow::Result<ExitCode> {
    use sagessd::compare::human_bytes;
    use sagessd_runtime::dataset::Dataset;
    use sagessd_runtime::ooc::AgnesLayout;

    anyhow::ensure!(
        a.batch_size > 0 && a.batches > 0,
        "--batches and --batch-size must be ≥ 1"
    );
    // Bad flags are refused before any work.
    sagessd_runtime::sampler::validate_request(&a.fanouts, &[0], 1)?;
    use SamplerKind::*;
    let samplers: Vec<SamplerKind> = a.sampler.clone().unwrap_or_else(|| {
        if a.target.on_device {
            vec![Hyperbatch, Agnes, Isp]
        } else {
            vec![Hyperbatch, Agnes, Direct]
        }
    });
    let allowed = |k: &SamplerKind| {
        if a.target.on_device {
            k.on_device()
        } else {
            k.on_files()
        }
    };
    if let Some(bad) = samplers.iter().find(|k| !allowed(k)) {
        anyhow::bail!(
            "sampler {bad} {}",
            if a.target.on_device {
                "does not run on a device (agnes, hyperbatch, isp, isp-ids, isp-hyperbatch do)"
            } else {
                "needs a device: add --on-device"
            }
        );
    }
    let dataset = Dataset::open(&a.dataset)?;
    let n = dataset.manifest.node_count;
    let requests = sagessd::requests::in_order(&dataset, a.order, a.batches, a.batch_size, a.seed)?;
    let requests = sagessd::requests::share(requests, a.batch_stride, a.batch_offset)?;
    let block_bytes = a.cache.block_bytes();
    let buffer_bytes = a.cache.buffer_bytes();
    if a.target.on_device {
        return run_sample_on_device(
            &a,
            &samplers,
            &dataset,
            &requests,
            block_bytes,
            buffer_bytes,
        );
    }
    let mut out = Output::new(a.output.format());
    let needs_layout = samplers.iter().any(|k| k.needs_layout());
    if needs_layout {
        // Written here, once, so that the note can say so; the loaders find it.
        let (layout, written) = AgnesLayout::for_dataset(&dataset, block_bytes)?;
        let bytes = layout.manifest.block_count * layout.manifest.block_bytes;
        out.note(format!(
            "AGNES layout {} ({}): {} blocks of {} = {}, {} split nodes; graph buffer {} ({:.1}x smaller)",
            sagessd_runtime::ooc::agnes::format::layout_dir(&dataset, block_bytes).display(),
            if written { "written now" } else { "existing" },
            layout.manifest.block_count,
            human_bytes(layout.manifest.block_bytes),
            human_bytes(bytes),
            layout.manifest.split_nodes,
            human_bytes(buffer_bytes as u64),
            bytes as f64 / buffer_bytes as f64
        ));
    }
    out.note(format!(
        "dataset {}: {} nodes, {} CSR entries; {} minibatches of {} targets, fanouts {:?}",
        dataset.manifest.name,
        n,
        dataset.manifest.edge_count,
        requests.len(),
        a.batch_size,
        a.fanouts
    ));
    if a.cache.features != FeatureCache::None && dataset.manifest.features.is_none() {
        out.note("features: the dataset has none");
    }
    // Subgraphs are checked by checksum and dropped as they come, so memory stays bounded by
    // the buffers and caches, not by the number of minibatches.
    let mut agreement = Agreement::default();
    let mut gathered: Option<(sagessd_runtime::ooc::features::GatherStats, f64)> = None;
    out.text(format!(
        "{:<12} {:>10} {:>12} {:>12} {:>8} {:>9} {:>24} {:>10} {:>10} {:>10} {:>10}\n",
        "sampler",
        "reads",
        "bytes read",
        "bytes used",
        "used %",
        "buf hits",
        "reads ≤4K/≤64K/≤1M/>1M",
        "syscalls",
        "sample s",
        "I/O wait s",
        "compute s"
    ));
    // The largest set of subgraphs (and their features) alive at once: a minibatch's, or a
    // hyperbatch's; and what it was.
    let mut peak_output: (u64, String) = (0, "nothing".into());
    for (k, &kind) in samplers.iter().enumerate() {
        let name = kind.name();
        let group = kind.group_size(a.hyperbatch);
        let mut spec = loader_spec(&a, kind);
        // The first sampler also gathers the features.
        if k > 0 || dataset.manifest.features.is_none() {
            spec.features = FeatureCache::None;
        }
        let with = if spec.features == FeatureCache::None {
            ""
        } else {
            " and their features"
        };
        let loader = sagessd::Loader::open(&a.dataset, spec)?;
        let run = sagessd::agreement::run_loader(loader, requests.clone(), group, false)?;
        if run.largest_group.0 > peak_output.0 {
            peak_output = (
                run.largest_group.0,
                format!("{name}: {} subgraph(s){with}", run.largest_group.1),
            );
        }
        let (sums, stats) = (run.sums, run.stats);
        let gather_s = stats.gather_wall_ns as f64 / 1e9;
        if !with.is_empty() {
            gathered = Some((stats.gather.clone(), gather_s));
        }
        report_files_run(
            &mut out,
            &a,
            &dataset.manifest.name,
            kind,
            &requests,
            &stats,
        )?;
        if let Some((g, gather_s)) = gathered.as_ref().filter(|_| k == 0) {
            report_gather(&mut out, g, &a, *gather_s)?;
        }
        agreement.check(name, sums);
    }
    let exit = report_agreement(&mut out, &agreement)?;
    let feature_cache = if gathered.is_some() {
        (a.cache.feature_cache as u64) << 20
    } else {
        0
    };
    let peak_rss = peak_rss_bytes();
    let graph_buffer = if needs_layout { buffer_bytes as u64 } else { 0 };
    out.text(format!(
        "memory: peak RSS {}; bounded by flags: graph buffer {} + feature cache {}; largest output alive at once {} ({})\n",
        peak_rss.map_or("unknown".into(), human_bytes),
        human_bytes(graph_buffer),
        human_bytes(feature_cache),
        human_bytes(peak_output.0),
        peak_output.1,
    ));
    out.record(
        Record::new("sample.memory")
            .with("peak_rss_bytes", peak_rss)
            .with("rss_anon_bytes", rss_anon_bytes())
            .with("graph_buffer_bytes", graph_buffer)
            .with("feature_cache_bytes", feature_cache)
            .with("largest_output_bytes", peak_output.0)
            .with("largest_output", peak_output.1),
    )?;
    out.finish()?;
    Ok(exit)
}

/// One file sampler's row: the table line, its `sample.sampler` record and, but for the
/// in-memory sampler, its reads per hop.
fn report_files_run(
    out: &mut Output,
    a: &SampleArgs,
    dataset: &str,
    kind: SamplerKind,
    requests: &[Request],
    stats: &sagessd::LoaderStats,
) -> anyhow::Result<()> {
    use SamplerKind::Memory;
    use sagessd::compare::human_bytes;
    let name = kind.name();

    let io = &stats.graph_io;
    let wall = (stats.wall_ns - stats.gather_wall_ns) as f64 / 1e9;
    let io_wait_s = io.io_wait_ns as f64 / 1e9;
    let h = io.size_histogram;
    out.text(format!(
        "{:<12} {:>10} {:>12} {:>12} {:>8} {:>9} {:>24} {:>10} {:>10.2} {:>10} {:>10}\n",
        name,
        io.reads,
        human_bytes(io.bytes_read),
        human_bytes(io.bytes_used),
        // mmap reads through the page cache: what it used may not have been read now.
        if io.bytes_read >= io.bytes_used && io.bytes_read > 0 {
            format!(
                "{:.2}%",
                100.0 * io.bytes_used as f64 / io.bytes_read as f64
            )
        } else {
            "-".into()
        },
        io.hit_ratio()
            .map_or("-".into(), |r| format!("{:.1}%", 100.0 * r)),
        format!("{}/{}/{}/{}", h[0], h[1], h[2], h[3]),
        // An mmap sampler reads in page faults, the in-memory one not at all.
        if kind.faults_in() || kind == Memory {
            "-".into()
        } else {
            io.syscalls.to_string()
        },
        wall,
        // An mmap sampler's reads happen inside page faults: its wait cannot be told apart.
        if kind.faults_in() {
            "-".into()
        } else {
            format!("{:.2}", io_wait_s)
        },
        if kind.faults_in() {
            "-".into()
        } else {
            format!("{:.2}", (wall - io_wait_s).max(0.0))
        },
    ));
    // An mmap sampler's reads happen in page faults: no syscalls, and its I/O wait cannot
    // be told from its compute.
    let faults = kind.faults_in();
    let hops = &io.hops[..a.fanouts.len()];
    let per_hop = |f: &dyn Fn(&sagessd_runtime::ooc::HopIo) -> String, sep: &str| {
        hops.iter().map(f).collect::<Vec<_>>().join(sep)
    };
    out.record(
        run_fields(Record::new("sample.sampler"), a, dataset, name, requests)
            .with("reads", io.reads)
            .with("bytes_read", io.bytes_read)
            .with("bytes_used", io.bytes_used)
            .with("buffer_hit_ratio", io.hit_ratio())
            .with("reads_le_4k", h[0])
            .with("reads_le_64k", h[1])
            .with("reads_le_1m", h[2])
            .with("reads_gt_1m", h[3])
            .with(
                "syscalls",
                (!faults && kind != Memory).then_some(io.syscalls),
            )
            .with("major_faults", faults.then_some(io.major_faults))
            .with("minor_faults", faults.then_some(io.minor_faults))
            .with("sample_wall_s", wall)
            .with("io_wait_s", (!faults).then_some(io_wait_s))
            .with(
                "compute_wall_s",
                (!faults).then_some((wall - io_wait_s).max(0.0)),
            )
            .with("hop_reads", per_hop(&|h| h.reads.to_string(), "/"))
            .with(
                "hop_bytes_read",
                per_hop(&|h| h.bytes_read.to_string(), "/"),
            )
            .with("timing", "wall clock"),
    )?;
    if kind != Memory {
        out.text(format!(
            "  per hop: reads {}, read {}{}\n",
            per_hop(&|h| h.reads.to_string(), " / "),
            per_hop(&|h| human_bytes(h.bytes_read), " / "),
            if faults {
                String::new()
            } else {
                format!(
                    ", I/O wait s {}",
                    per_hop(&|h| format!("{:.2}", h.io_wait_ns as f64 / 1e9), " / ")
                )
            }
        ));
    }
    Ok(())
}

/// The loader of `kind` with the run's fanouts, AGNES layout, buffers and feature cache.
fn loader_spec(a: &SampleArgs, kind: SamplerKind) -> sagessd::LoaderSpec {
    let mut spec = sagessd::LoaderSpec::new(kind, &a.fanouts);
    spec.features = a.cache.features;
    spec.cache = a.cache.settings();
    spec.graph_buffer_bytes = a.cache.buffer_bytes();
    spec.hyperbatch = a.hyperbatch;
    spec.read_ahead = !a.no_prefetch;
    // Little sampled ahead: the largest output alive stays about a group (a hyperbatch, or
    // in-storage jobs kept in flight together) and a minibatch.
    spec.prefetch = 1;
    spec.max_batch_size = u64::from(a.batch_size);
    spec
}

/// `head` with what a sampler's row ran: the dataset, the sampler and the workload.
fn run_fields(
    head: Record,
    a: &SampleArgs,
    dataset: &str,
    sampler: &str,
    requests: &[Request],
) -> Record {
    head.with("dataset", dataset)
        .with("sampler", sampler)
        .with("minibatches", requests.len())
        .with("batch_size", a.batch_size)
        .with(
            "fanouts",
            sagessd_experiments::compare_rows::join_fanouts(&a.fanouts),
        )
}

/// This process's anonymous resident memory now (`RssAnon`: what a memory cgroup charges it
/// besides the page cache).
fn rss_anon_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// This process's peak resident set size so far.
fn peak_rss_bytes() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the pointer it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: filled by the successful call (and zeroed before it).
    (rc == 0).then(|| unsafe { usage.assume_init() }.ru_maxrss as u64 * 1024)
}

/// `sample --on-device`: the samplers against an NVMe device, in modelled time on an emulated
/// one. With features, the device holds them too: the host samplers gather them from there with
/// the `--features` cache, and ISP gathers them in storage.
fn run_sample_on_device(
    a: &SampleArgs,
    samplers: &[SamplerKind],
    dataset: &sagessd_runtime::dataset::Dataset,
    requests: &[Request],
    block_bytes: usize,
    buffer_bytes: usize,
) -> anyhow::Result<ExitCode> {
    use sagessd::compare::human_bytes;
    let mut out = Output::new(a.output.format());
    let storage = sagessd::Storage::Device {
        uri: a.target.device.clone(),
        hardware: Box::new(load_hw(a.target.config.as_ref())?),
    };
    let features = match a.cache.features {
        FeatureCache::None => false,
        _ if dataset.manifest.features.is_none() => {
            out.note("features: the dataset has none");
            false
        }
        _ => true,
    };
    let sizing = features.then(|| sagessd::FeatureSizing {
        samplers: samplers.to_vec(),
        hyperbatch: a.hyperbatch,
        max_batch_size: u64::from(a.batch_size),
        fanouts: a.fanouts.clone(),
    });
    let placed = sagessd::PlacedDevice::place(dataset, &storage, sizing.as_ref(), block_bytes)?;
    let hw = placed.hardware();
    let (desc, slba) = (placed.placement().graph, placed.placement().layout_slba);
    let layout = placed.layout();
    // Each sampler starts with the device's caches dropped, where the transport can.
    let cold = placed.drop_caches()?;
    // An emulator models time; a real device (or a remote target) is timed by the wall clock,
    // host and device work together.
    let modelled = placed.lock()?.now_ns().is_some();
    let device_name = match a.target.device.endpoint {
        sagessd_host_driver::Endpoint::Local => hw.device.name.clone(),
        _ => a.target.device.to_string(),
    };
    out.note(format!(
        "on {}: CSR at LBA 0{}, AGNES layout ({} blocks of {}) at LBA {slba}; graph buffer {}{}",
        match a.target.device.endpoint {
            sagessd_host_driver::Endpoint::Local => {
                format!(
                    "{} ({})",
                    hw.device.name,
                    hw_source(a.target.config.as_ref())
                )
            }
            _ => format!(
                "{} (model {:?})",
                a.target.device,
                placed.lock()?.info().model
            ),
        },
        desc.features.map_or(String::new(), |f| format!(
            ", features at LBA {} ({} bytes a row; {} cache {}{})",
            f.range.slba,
            f.row_bytes,
            a.cache.features,
            human_bytes((a.cache.feature_cache as u64) << 20),
            match a.target.device.endpoint {
                sagessd_host_driver::Endpoint::Local => format!(
                    "; in storage, a {} buffer per job",
                    human_bytes(u64::from(hw.firmware.max_feature_bytes))
                ),
                _ => String::new(),
            },
        )),
        layout.manifest.block_count,
        human_bytes(layout.manifest.block_bytes),
        human_bytes(buffer_bytes as u64),
        if cold {
            ""
        } else {
            "; the device's caches cannot be dropped from here (each sampler may start warm)"
        }
    ));
    out.text(format!(
        "{:<15} {:>10} {:>12} {:>12} {:>14} {:>10} {:>14} {:>12} {:>13}\n",
        "sampler",
        "reads",
        "bytes read",
        "NAND pages",
        "feature bytes",
        "feat reads",
        "device ms/mb",
        "host ms/mb",
        "total ms/mb"
    ));
    let region = desc.features.filter(|_| features);
    let mut agreement = Agreement::default();
    for &kind in samplers {
        let name = kind.name();
        placed.drop_caches()?;
        let wall = std::time::Instant::now();
        let mut spec = loader_spec(a, kind);
        if !features {
            spec.features = FeatureCache::None;
        }
        if kind == SamplerKind::Isp {
            // Every minibatch's job in one pipeline, ISP_JOBS_IN_FLIGHT deep.
            spec.prefetch = requests.len().min(sagessd::MAX_AHEAD);
        }
        let loader = sagessd::Loader::on_device(&a.dataset, &placed, spec)?;
        // Each minibatch's checksum: its subgraph's, folded with its features' when gathered.
        let run = sagessd::agreement::run_loader(loader, requests.to_vec(), 1, true).map_err(
            |e| match (kind, &e) {
                (SamplerKind::Isp, sagessd::Error::Sampling(_)) if region.is_some() => {
                    anyhow::Error::new(e).context(
                        "in-storage feature gather: has the device's firmware a feature buffer ([firmware] max_feature_bytes in its hardware description, sagessd_config.max_feature_bytes on a board)? --features none samples without features",
                    )
                }
                _ => anyhow::Error::new(e),
            },
        )?;
        let (sums, stats) = (run.sums, run.stats);
        let per_mb_ms = |ns: u64| ns as f64 / 1e6 / requests.len() as f64;
        let pages = stats.nand_pages_read;
        let feature_bytes = stats.feature_bytes;
        // Modelled: the device's virtual time and the host's modelled work; otherwise only
        // the wall clock of both together.
        let (device_ms, host_ms, total_ms) = match (stats.device_ns, stats.host_ns) {
            (Some(device_ns), Some(host_ns)) if modelled => (
                Some(per_mb_ms(device_ns)),
                Some(per_mb_ms(host_ns)),
                per_mb_ms(device_ns + host_ns),
            ),
            _ => (None, None, per_mb_ms(wall.elapsed().as_nanos() as u64)),
        };
        // The host's feature reads (ISP's come within its own commands).
        let feature_reads =
            (region.is_some() && !kind.gathers_in_storage()).then_some(stats.feature_reads);
        let io = stats;
        let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        out.text(format!(
            "{:<15} {:>10} {:>12} {:>12} {:>14} {:>10} {:>14} {:>12} {:>13}\n",
            name,
            io.reads,
            human_bytes(io.bytes_read),
            dash(pages.map(|p| p.to_string())),
            dash(region.is_some().then(|| human_bytes(feature_bytes))),
            dash(feature_reads.map(|r| r.to_string())),
            dash(device_ms.map(|v| format!("{v:.3}"))),
            dash(host_ms.map(|v| format!("{v:.3}"))),
            format!("{total_ms:.3}")
        ));
        let head = Record::new("sample.device_sampler").with("device", device_name.as_str());
        out.record(
            run_fields(head, a, &dataset.manifest.name, name, requests)
                .with("reads", io.reads)
                .with("bytes_read", io.bytes_read)
                .with("nand_pages_read", pages)
                .with("feature_bytes", region.is_some().then_some(feature_bytes))
                .with("feature_reads", feature_reads)
                .with("device_ms_per_minibatch", device_ms)
                .with("host_ms_per_minibatch", host_ms)
                .with("total_ms_per_minibatch", total_ms)
                .with("timing", if modelled { "modelled" } else { "wall clock" }),
        )?;
        agreement.check(name, sums);
    }
    if modelled {
        out.note(
            "modelled per minibatch: device = the device's virtual time (NVMe, PCIe, NAND, firmware cores); host = the host's work with the [host] costs (each NVMe command a synchronous I/O, plus the sampling compute of the subgraphs the host builds; copying feature rows is not charged); total = device + host (the host samplers' reads are synchronous; ISP's few host µs overlap in truth)",
        );
    } else {
        out.note(
            "total ms/mb: this machine's wall clock per minibatch, host and device work together (an emulator behind the URI times nothing real unless served with --pace)",
        );
    }
    if region.is_some() {
        out.note(
            "feature bytes: the rows gathered for the subgraphs' nodes (host samplers read them through their cache; ISP's come back with the subgraph); samples are compared with their features",
        );
    }
    let exit = report_agreement(&mut out, &agreement)?;
    out.finish()?;
    Ok(exit)
}

/// Reports the agreement's verdict (a note, and a `sample.agreement` record); the exit status
/// (failure on any mismatch).
fn report_agreement(out: &mut Output, agreement: &Agreement) -> anyhow::Result<ExitCode> {
    let (identical, exit) = match agreement.verdict() {
        Verdict::Agreed(name) => {
            out.note(format!(
                "samples identical: yes (every sampler's subgraphs have the checksums of {name}'s)"
            ));
            (Some(true), ExitCode::SUCCESS)
        }
        Verdict::Alone(_) => {
            out.note("samples identical: one sampler, nothing compared");
            (None, ExitCode::SUCCESS)
        }
        Verdict::Nothing => (None, ExitCode::SUCCESS),
        Verdict::Differed(mismatches) => {
            for m in mismatches {
                eprintln!("error: {m}");
            }
            (Some(false), ExitCode::FAILURE)
        }
    };
    out.record(Record::new("sample.agreement").with("samples_identical", identical))?;
    Ok(exit)
}

/// Reports what the gathering did (rows, cache hits, I/O) and its time: a line and a
/// `sample.features` record.
fn report_gather(
    out: &mut Output,
    stats: &sagessd_runtime::ooc::features::GatherStats,
    a: &SampleArgs,
    wall_s: f64,
) -> anyhow::Result<()> {
    use sagessd::compare::human_bytes;
    let cache_bytes = (a.cache.feature_cache as u64) << 20;
    out.text(format!(
        "features ({}, cache {}): {} rows gathered, cache hits {:.1}%, {} reads, {} read, {} used, {:.2} s wall ({:.2} s I/O wait)\n",
        a.cache.features,
        human_bytes(cache_bytes),
        stats.rows,
        100.0 * stats.hit_ratio(),
        stats.io.reads,
        human_bytes(stats.io.bytes_read),
        human_bytes(stats.io.bytes_used),
        wall_s,
        stats.io.io_wait_ns as f64 / 1e9
    ));
    out.record(
        Record::new("sample.features")
            .with("cache", a.cache.features.to_string())
            .with("cache_bytes", cache_bytes)
            .with("rows", stats.rows)
            .with("hit_ratio", stats.hit_ratio())
            .with("reads", stats.io.reads)
            .with("bytes_read", stats.io.bytes_read)
            .with("bytes_used", stats.io.bytes_used)
            .with("gather_wall_s", wall_s)
            .with("io_wait_s", stats.io.io_wait_ns as f64 / 1e9)
            .with("timing", "wall clock"),
    )?;
    Ok(())
}
