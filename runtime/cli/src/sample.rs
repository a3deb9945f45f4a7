//! `sagessd sample`: out-of-core samplers on this machine's files, or on an NVMe device, with
//! their I/O, time and memory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use sagessd_runtime::agreement::{Agreement, Verdict};
use sagessd_runtime::minibatch::Order;
use sagessd_runtime::registry::{FeatureCache, FeatureGatherer, SamplerKind};

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
    /// with --on-device: agnes, hyperbatch, isp (in-storage sampling) and isp-hyperbatch
    /// (in-storage hyperbatches: one NS_config per hyperbatch). Default:
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
    use sagessd_runtime::compare::{human_bytes, minibatch_seed, minibatch_targets};
    use sagessd_runtime::dataset::{Dataset, Split};
    use sagessd_runtime::ooc::AgnesLayout;
    use sagessd_runtime::registry::FileSource;
    use sagessd_runtime::sampler::SampledSubgraph;

    anyhow::ensure!(
        a.batch_size > 0 && a.batches > 0,
        "--batches and --batch-size must be ≥ 1"
    );
    anyhow::ensure!(
        a.batch_stride > 0 && a.batch_offset < a.batch_stride,
        "--batch-offset {} must be below --batch-stride {} (≥ 1)",
        a.batch_offset,
        a.batch_stride
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
                "does not run on a device (agnes, hyperbatch, isp, isp-hyperbatch do)"
            } else {
                "needs a device: add --on-device"
            }
        );
    }
    let dataset = Dataset::open(&a.dataset)?;
    let n = dataset.manifest.node_count;
    let requests: Vec<(u64, Vec<u64>)> = match a.order {
        Order::Random => (0..a.batches)
            .map(|b| {
                (
                    minibatch_seed(a.seed, b),
                    minibatch_targets(a.seed, b, a.batch_size, n),
                )
            })
            .collect(),
        Order::Bgl => {
            let graph = dataset.graph()?;
            let train = match dataset.split(Split::Train)? {
                Some(ids) => ids,
                None => (0..n).collect(),
            };
            let mut requests = sagessd_runtime::minibatch::epoch_requests(
                Order::Bgl,
                &train,
                a.batch_size as usize,
                a.seed,
                0,
                0,
                Some(sagessd_runtime::sampler::HostGraph::Csr(&graph)),
            )
            .map_err(anyhow::Error::msg)?;
            requests.truncate(a.batches as usize);
            requests
        }
    };
    let requests: Vec<(u64, Vec<u64>)> = requests
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 % u64::from(a.batch_stride) == u64::from(a.batch_offset))
        .map(|(_, r)| r)
        .collect();
    anyhow::ensure!(
        !requests.is_empty(),
        "--batch-offset {} of --batch-stride {} selects none of the {} minibatches",
        a.batch_offset,
        a.batch_stride,
        a.batches
    );
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
    let layout = if needs_layout {
        let (layout, written) = AgnesLayout::for_dataset(&dataset, block_bytes)?;
        let bytes = layout.manifest.block_count * layout.manifest.block_bytes;
        out.note(format!(
            "AGNES layout {} ({}): {} blocks of {} = {}, {} split nodes; graph buffer {} ({:.1}x smaller)",
            sagessd_runtime::ooc::agnes::layout_dir(&dataset, block_bytes).display(),
            if written { "written now" } else { "existing" },
            layout.manifest.block_count,
            human_bytes(layout.manifest.block_bytes),
            human_bytes(bytes),
            layout.manifest.split_nodes,
            human_bytes(buffer_bytes as u64),
            bytes as f64 / buffer_bytes as f64
        ));
        Some(layout)
    } else {
        None
    };
    out.note(format!(
        "dataset {}: {} nodes, {} CSR entries; {} minibatches of {} targets, fanouts {:?}",
        dataset.manifest.name,
        n,
        dataset.manifest.edge_count,
        requests.len(),
        a.batch_size,
        a.fanouts
    ));
    let graph = samplers
        .contains(&Memory)
        .then(|| dataset.graph())
        .transpose()?;
    // Subgraphs are checked by checksum and dropped as they come, so memory stays bounded by
    // the buffers and caches, not by the number of minibatches.
    let mut agreement = Agreement::default();
    let mut gatherer = match a.cache.features {
        FeatureCache::None => None,
        _ if dataset.manifest.features.is_none() => {
            out.note("features: the dataset has none");
            None
        }
        kind => FeatureGatherer::new(
            kind,
            sagessd_runtime::ooc::features::FeatureFile::open(&dataset)?,
            a.cache.settings(),
        ),
    };
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
    let source = FileSource {
        dataset: &dataset,
        graph: graph.as_ref(),
        layout: layout.as_ref(),
        buffer_bytes,
        prefetch: !a.no_prefetch,
    };
    for (k, &kind) in samplers.iter().enumerate() {
        let name = kind.name();
        let started = std::time::Instant::now();
        let mut sums: Vec<u64> = Vec::with_capacity(requests.len());
        let mut gather_s = 0.0;
        let mut sampler = source.open(kind)?;
        // Each group is one minibatch, or one hyperbatch; its subgraphs are alive together
        // (with their features, for the first sampler, which also gathers them) until the
        // next group, and are checked by checksum and dropped.
        for group in requests.chunks(kind.group_size(a.hyperbatch)) {
            let subs: Vec<SampledSubgraph> = sampler.sample_many(&a.fanouts, group)?;
            let mut bytes: u64 = subs.iter().map(|s| s.as_bytes().len() as u64).sum();
            let mut with = "";
            if let Some(g) = gatherer.as_mut().filter(|_| k == 0) {
                let t = std::time::Instant::now();
                bytes += g.gather(&subs)?.iter().map(|r| r.len() as u64).sum::<u64>();
                gather_s += t.elapsed().as_secs_f64();
                with = " and their features";
            }
            if bytes > peak_output.0 {
                peak_output = (bytes, format!("{name}: {} subgraph(s){with}", subs.len()));
            }
            sums.extend(subs.iter().map(SampledSubgraph::checksum));
        }
        let io = sampler.io();
        drop(sampler);
        let wall = started.elapsed().as_secs_f64() - gather_s;
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
            run_fields(
                Record::new("sample.sampler"),
                &a,
                &dataset.manifest.name,
                name,
                &requests,
            )
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
        if k == 0
            && let Some(g) = &gatherer
        {
            report_gather(&mut out, g, &a, gather_s)?;
        }
        agreement.check(name, sums);
    }
    let exit = report_agreement(&mut out, &agreement)?;
    let feature_cache = if gatherer.is_some() {
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

/// `head` with what a sampler's row ran: the dataset, the sampler and the workload.
fn run_fields(
    head: Record,
    a: &SampleArgs,
    dataset: &str,
    sampler: &str,
    requests: &[(u64, Vec<u64>)],
) -> Record {
    head.with("dataset", dataset)
        .with("sampler", sampler)
        .with("minibatches", requests.len())
        .with("batch_size", a.batch_size)
        .with("fanouts", crate::join_fanouts(&a.fanouts))
}

/// The host's modelled compute for building `sub` (the `[host]` costs per node and edge).
pub(crate) fn host_sampling_ns(
    hw: &sagessd_emulator::HwConfig,
    sub: &sagessd_runtime::sampler::SampledSubgraph,
) -> u64 {
    hw.host.sampling_ns(sub.dst_node_count(), sub.edge_count())
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
    requests: &[(u64, Vec<u64>)],
    block_bytes: usize,
    buffer_bytes: usize,
) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::compare::human_bytes;
    use sagessd_runtime::ooc::features::FeatureFile;
    use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, IoStats, SharedDevice};
    use sagessd_runtime::registry::minibatch_checksum;
    use sagessd_runtime::sampler::{SampledSubgraph, Sampler};
    let mut out = Output::new(a.output.format());
    let mut hw = load_hw(a.target.config.as_ref())?;
    let features = match a.cache.features {
        FeatureCache::None => None,
        _ => {
            let rows = dataset.feature_rows()?;
            if rows.is_none() {
                out.note("features: the dataset has none");
            }
            rows
        }
    };
    let n = dataset.manifest.node_count;
    if let Some(rows) = &features
        && hw.firmware.max_feature_bytes == 0
    {
        // In-storage hyperbatches gather their minibatches' rows into one job's buffer.
        let minibatches = if samplers.contains(&SamplerKind::IspHyperbatch) {
            a.hyperbatch.min(usize::from(hw.firmware.max_minibatches))
        } else {
            1
        };
        hw.firmware.max_feature_bytes = sagessd_runtime::placement::feature_buffer_bytes(
            n,
            hw.firmware.max_subgraph_nodes,
            minibatches as u64,
            u64::from(a.batch_size),
            &a.fanouts,
            rows.row_bytes() as u64,
        );
    }
    let graph = dataset.graph()?;
    let (layout, _) = AgnesLayout::for_dataset(dataset, block_bytes)?;
    let mut device = sagessd_host_driver::open_device(&a.target.device, &hw)?;
    let placed = sagessd_runtime::placement::place(&mut device, &graph, features.as_ref(), &layout)
        .map_err(|e| anyhow::anyhow!(e))?;
    drop(graph);
    drop(features);
    let (desc, slba) = (placed.graph, placed.layout_slba);
    // Each sampler starts with the device's caches dropped, where the transport can.
    let cold = device.transport_mut().drop_caches();
    // An emulator models time; a real device (or a remote target) is timed by the wall clock,
    // host and device work together.
    let modelled = device.now_ns().is_some();
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
            _ => format!("{} (model {:?})", a.target.device, device.info().model),
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
    let device = std::sync::Mutex::new(device);
    let held = || {
        device
            .lock()
            .map_err(|_| anyhow::anyhow!("a reader of the device panicked"))
    };
    let region = desc.features;
    let mut agreement = Agreement::default();
    for &kind in samplers {
        let name = kind.name();
        held()?.transport_mut().drop_caches();
        let t0 = held()?.now_ns().unwrap_or(0);
        let wall = std::time::Instant::now();
        let pages0 = held()?.device_counters().map(|c| c.nand_pages_read);
        let commands0 = held()?.stats().commands;
        // The host's own work, modelled with the [host] costs: each NVMe command a synchronous
        // I/O (a block larger than MDTS takes several), and the sampling compute of each
        // subgraph a host sampler built.
        let mut host_ns = 0u64;
        let mut feature_bytes = 0u64;
        // Each minibatch's checksum: its subgraph's, folded with its features' when gathered.
        let mut sums: Vec<u64> = Vec::with_capacity(requests.len());
        let mut host_built = |subs: &[SampledSubgraph],
                              gatherer: &mut Option<FeatureGatherer<'_>>|
         -> anyhow::Result<()> {
            let rows = match gatherer {
                Some(g) => g.gather(subs)?.into_iter().map(Some).collect(),
                None => vec![None; subs.len()],
            };
            for (sub, r) in subs.iter().zip(rows) {
                host_ns += host_sampling_ns(&hw, sub);
                feature_bytes += r.as_ref().map_or(0, |r| r.len() as u64);
                sums.push(minibatch_checksum(sub, r.as_deref()));
            }
            Ok(())
        };
        let mut block_device = SharedDevice::new(&device)?;
        let mut feature_device = SharedDevice::new(&device)?;
        let mut gatherer = match region {
            Some(r) => FeatureGatherer::new(
                a.cache.features,
                FeatureFile::on_device(&mut feature_device, &r, n)?,
                a.cache.settings(),
            ),
            None => None,
        };
        let io: IoStats = match kind {
            SamplerKind::Agnes | SamplerKind::Hyperbatch => {
                let mut s =
                    AgnesSampler::on_device(&layout, buffer_bytes, &mut block_device, slba)?;
                for group in requests.chunks(kind.group_size(a.hyperbatch)) {
                    host_built(&s.sample_many(&a.fanouts, group)?, &mut gatherer)?;
                }
                s.io_stats().clone()
            }
            SamplerKind::Isp | SamplerKind::IspHyperbatch => {
                let mut d = held()?;
                let before = d.stats();
                let out = if kind == SamplerKind::IspHyperbatch {
                    let mut all = Vec::with_capacity(requests.len());
                    for group in requests.chunks(a.hyperbatch.max(1)) {
                        all.extend(d.sample_hyperbatch(&a.fanouts, group, region.is_some())?);
                    }
                    all
                } else if region.is_some() {
                    d.sample_many_with_features(&a.fanouts, requests, 4)
                        .context(
                            "in-storage feature gather: has the device's firmware a feature buffer ([firmware] max_feature_bytes in its hardware description, sagessd_config.max_feature_bytes on a board)? --features none samples without features",
                        )?
                } else {
                    d.sample_many(&a.fanouts, requests, 4)?
                };
                let delta = d.stats().since(&before);
                drop(d);
                for bytes in out {
                    if region.is_some() {
                        let (sub, rows) = SampledSubgraph::split_features(bytes)?;
                        feature_bytes += rows.len() as u64;
                        sums.push(minibatch_checksum(&sub, Some(&rows)));
                    } else {
                        sums.push(SampledSubgraph::from_bytes(bytes)?.checksum());
                    }
                }
                // Its NVMe commands (NS_SUBMIT/NS_COLLECT, or Writes and Reads through the tunnel).
                IoStats {
                    reads: delta.commands,
                    bytes_read: delta.c2h_bytes,
                    ..IoStats::default()
                }
            }
            other => anyhow::bail!("sampler {other} does not run on a device"),
        };
        let d = held()?;
        host_ns += (d.stats().commands - commands0) * hw.host.sync_io_ns();
        let per_mb_ms = |ns: u64| ns as f64 / 1e6 / requests.len() as f64;
        let pages = pages0
            .zip(d.device_counters())
            .map(|(p0, c)| c.nand_pages_read - p0);
        // Modelled: the device's virtual time and the host's modelled work; otherwise only
        // the wall clock of both together.
        let (device_ms, host_ms, total_ms) = if modelled {
            let device_ns = d.now_ns().unwrap_or(0) - t0;
            (
                Some(per_mb_ms(device_ns)),
                Some(per_mb_ms(host_ns)),
                per_mb_ms(device_ns + host_ns),
            )
        } else {
            (None, None, per_mb_ms(wall.elapsed().as_nanos() as u64))
        };
        // The host's feature reads (ISP's come within its own commands).
        let feature_reads = gatherer
            .as_ref()
            .filter(|_| !kind.in_storage())
            .map(|g| g.stats().io.reads);
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
    g: &FeatureGatherer<'_>,
    a: &SampleArgs,
    wall_s: f64,
) -> anyhow::Result<()> {
    use sagessd_runtime::compare::human_bytes;
    let stats = g.stats();
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
