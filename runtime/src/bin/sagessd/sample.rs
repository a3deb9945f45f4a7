//! `sagessd sample`: out-of-core samplers on this machine's files, or on an NVMe device, with
//! their I/O, time and memory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use sagessd_host_driver::DeviceUri;

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
    /// with --on-device: agnes, hyperbatch and isp (in-storage sampling). Default:
    /// hyperbatch,agnes,direct, or with --on-device hyperbatch,agnes,isp.
    #[arg(long, value_delimiter = ',')]
    sampler: Option<Vec<String>>,
    /// Minibatches per hyperbatch.
    #[arg(long, default_value_t = 64)]
    hyperbatch: usize,
    /// Hyperbatch: read each block when it is needed instead of ahead through io_uring.
    #[arg(long)]
    no_prefetch: bool,
    /// AGNES block size in KiB (a multiple of 4).
    #[arg(long, default_value_t = 1024)]
    block_size: usize,
    /// Graph buffer of the AGNES samplers, MiB.
    #[arg(long, default_value_t = 64)]
    graph_buffer: usize,
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
    #[arg(long, default_value = "random")]
    order: String,
    /// Gather the subgraphs' features after sampling: agnes (access-count-threshold cache,
    /// block reads), bgl (FIFO cache, row reads), or none.
    #[arg(long, default_value = "agnes")]
    features: String,
    /// Feature cache, MiB.
    #[arg(long, default_value_t = 64)]
    feature_cache: usize,
    /// Accesses after which the AGNES cache keeps a node's features.
    #[arg(long, default_value_t = 2)]
    feature_threshold: u32,
    /// Run on an NVMe device instead of this machine's files (an emulated SSD unless --device
    /// says otherwise): the CSR and the AGNES layout are written to it, and agnes, hyperbatch
    /// and isp (in-storage sampling) read it there.
    #[arg(long)]
    on_device: bool,
    /// With --on-device: the hardware description (default: the built-in Cosmos+).
    #[arg(long, value_name = "PATH", requires = "on_device")]
    config: Option<PathBuf>,
    /// With --on-device: the device, `local:` (an in-process emulated SSD, modelled time), or
    /// tcp://HOST:PORT/NQN or passthru:/dev/ngXnY (a real or remote device, wall-clock time);
    /// it is overwritten from LBA 0.
    #[arg(
        long,
        value_name = "URI",
        default_value = "local:",
        requires = "on_device"
    )]
    device: DeviceUri,
}

/// `sample`: out-of-core samplers on real files, with their I/O.
pub(crate) fn run_sample(a: SampleArgs) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::compare::{human_bytes, minibatch_seed, minibatch_targets};
    use sagessd_runtime::dataset::Dataset;
    use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, DirectSampler, IoStats};
    use sagessd_runtime::sampler::{ReferenceSampler, SampledSubgraph, Sampler};

    anyhow::ensure!(
        a.batch_size > 0 && a.batches > 0,
        "--batches and --batch-size must be ≥ 1"
    );
    // Bad flags are refused before any work.
    sagessd_runtime::sampler::validate_request(&a.fanouts, &[0], 1)?;
    let (known, default): (&[&str], &str) = if a.on_device {
        (&["agnes", "hyperbatch", "isp"], "hyperbatch,agnes,isp")
    } else {
        (
            &["memory", "mmap", "direct", "uring", "agnes", "hyperbatch"],
            "hyperbatch,agnes,direct",
        )
    };
    let samplers: Vec<String> = a
        .sampler
        .clone()
        .unwrap_or_else(|| default.split(',').map(str::to_owned).collect());
    if let Some(bad) = samplers.iter().find(|s| !known.contains(&s.as_str())) {
        anyhow::bail!(
            "unknown sampler {bad:?}{} ({})",
            if a.on_device { " with --on-device" } else { "" },
            known.join(", ")
        );
    }
    let dataset = Dataset::open(&a.dataset)?;
    let n = dataset.manifest.node_count;
    let requests: Vec<(u64, Vec<u64>)> = match a.order.as_str() {
        "random" => (0..a.batches)
            .map(|b| {
                (
                    minibatch_seed(a.seed, b),
                    minibatch_targets(a.seed, b, a.batch_size, n),
                )
            })
            .collect(),
        "bgl" => {
            let graph = dataset.graph()?;
            let train = match &dataset.manifest.train {
                Some(entry) => {
                    let path = dataset.dir().join(&entry.file);
                    let ids = sagessd_runtime::npy::read_i64(&path)?;
                    if let Some(i) = ids.iter().position(|v| !(0..n as i64).contains(v)) {
                        anyhow::bail!(
                            "{}: entry {i} ({}) is not a node id",
                            path.display(),
                            ids[i]
                        );
                    }
                    ids.into_iter().map(|v| v as u64).collect()
                }
                None => (0..n).collect::<Vec<u64>>(),
            };
            let order = sagessd_runtime::ooc::features::bgl_order(&graph, &train, 8, a.seed);
            order
                .chunks(a.batch_size.max(1) as usize)
                .take(a.batches as usize)
                .enumerate()
                .map(|(b, t)| (minibatch_seed(a.seed, b as u32), t.to_vec()))
                .collect()
        }
        other => anyhow::bail!("--order {other:?}: random or bgl"),
    };
    let block_bytes = a.block_size * 1024;
    let buffer_bytes = a.graph_buffer << 20;
    if a.on_device {
        return run_sample_on_device(
            &a,
            &samplers,
            &dataset,
            &requests,
            block_bytes,
            buffer_bytes,
        );
    }
    let needs_layout = samplers.iter().any(|s| s == "agnes" || s == "hyperbatch");
    let layout = if needs_layout {
        let (layout, written) = AgnesLayout::for_dataset(&dataset, block_bytes)?;
        let bytes = layout.manifest.block_count * layout.manifest.block_bytes;
        println!(
            "AGNES layout {} ({}): {} blocks of {} = {}, {} split nodes; graph buffer {} ({:.1}x smaller)",
            layout.dir().display(),
            if written { "written now" } else { "existing" },
            layout.manifest.block_count,
            human_bytes(layout.manifest.block_bytes),
            human_bytes(bytes),
            layout.manifest.split_nodes,
            human_bytes(buffer_bytes as u64),
            bytes as f64 / buffer_bytes as f64
        );
        Some(layout)
    } else {
        None
    };
    println!(
        "dataset {}: {} nodes, {} CSR entries; {} minibatches of {} targets, fanouts {:?}",
        dataset.manifest.name, n, dataset.manifest.edge_count, a.batches, a.batch_size, a.fanouts
    );
    let graph = samplers
        .iter()
        .any(|s| s == "memory")
        .then(|| dataset.graph())
        .transpose()?;
    // Subgraphs are checked by checksum and dropped as they come, so memory stays bounded by
    // the buffers and caches, not by the number of minibatches.
    let mut agreement = Agreement::default();
    let mut gatherer = match a.features.as_str() {
        "none" => None,
        _ if dataset.manifest.features.is_none() => {
            println!("features: the dataset has none");
            None
        }
        _ => Some(Gatherer::new(
            sagessd_runtime::ooc::features::FeatureFile::open(&dataset)?,
            &a,
            block_bytes,
        )?),
    };
    println!(
        "{:<12} {:>10} {:>12} {:>12} {:>8} {:>9} {:>24} {:>10} {:>10} {:>10} {:>10}",
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
    );
    // The largest set of subgraphs (and their features) alive at once: a minibatch's, or a
    // hyperbatch's; and what it was.
    let mut peak_output: (u64, String) = (0, "nothing".into());
    for (k, name) in samplers.iter().enumerate() {
        let started = std::time::Instant::now();
        let mut sums: Vec<u64> = Vec::with_capacity(requests.len());
        let mut gather_s = 0.0;
        // The first sampler's subgraphs also get their features gathered. Each call takes one
        // minibatch's or one hyperbatch's subgraphs, which are alive together with their
        // features until it returns.
        let mut sink = |subs: Vec<SampledSubgraph>| -> anyhow::Result<()> {
            let mut bytes: u64 = subs.iter().map(|s| s.as_bytes().len() as u64).sum();
            let mut with = "";
            if let Some(g) = gatherer.as_mut().filter(|_| k == 0) {
                let t = std::time::Instant::now();
                bytes += g.gather(&subs)?.0;
                gather_s += t.elapsed().as_secs_f64();
                with = " and their features";
            }
            if bytes > peak_output.0 {
                peak_output = (bytes, format!("{name}: {} subgraph(s){with}", subs.len()));
            }
            sums.extend(subs.iter().map(SampledSubgraph::checksum));
            Ok(())
        };
        // A per-minibatch sampler over every request.
        let mut each_minibatch = |s: &mut dyn Sampler| -> anyhow::Result<()> {
            for (seed, t) in &requests {
                sink(vec![s.sample(*seed, &a.fanouts, t)?])?;
            }
            Ok(())
        };
        let the_layout = || layout.as_ref().ok_or_else(|| anyhow::anyhow!("no layout"));
        let io: IoStats = match name.as_str() {
            "memory" => {
                let g = graph.as_ref().ok_or_else(|| anyhow::anyhow!("no graph"))?;
                let mut s = ReferenceSampler::new(g);
                each_minibatch(&mut s)?;
                IoStats::default()
            }
            "mmap" => {
                let mut s = sagessd_runtime::ooc::MmapSampler::open(&dataset)?;
                each_minibatch(&mut s)?;
                s.io_stats().clone()
            }
            "direct" | "uring" => {
                let mut s = DirectSampler::open(&dataset, name == "uring")?;
                each_minibatch(&mut s)?;
                s.io_stats().clone()
            }
            "agnes" => {
                let mut s = AgnesSampler::new(the_layout()?, buffer_bytes, false)?;
                each_minibatch(&mut s)?;
                s.io_stats().clone()
            }
            "hyperbatch" => {
                let mut s = AgnesSampler::new(the_layout()?, buffer_bytes, !a.no_prefetch)?;
                for chunk in requests.chunks(a.hyperbatch.max(1)) {
                    sink(s.sample_hyperbatch(&a.fanouts, chunk)?)?;
                }
                s.io_stats().clone()
            }
            other => anyhow::bail!("unknown sampler {other:?}"),
        };
        let wall = started.elapsed().as_secs_f64() - gather_s;
        let io_wait_s = io.io_wait_ns as f64 / 1e9;
        let h = io.size_histogram;
        println!(
            "{:<12} {:>10} {:>12} {:>12} {:>8} {:>9} {:>24} {:>10} {:>10.2} {:>10} {:>10}",
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
            if matches!(name.as_str(), "mmap" | "memory") {
                "-".into()
            } else {
                io.syscalls.to_string()
            },
            wall,
            // An mmap sampler's reads happen inside page faults: its wait cannot be told apart.
            if name == "mmap" {
                "-".into()
            } else {
                format!("{:.2}", io_wait_s)
            },
            if name == "mmap" {
                "-".into()
            } else {
                format!("{:.2}", (wall - io_wait_s).max(0.0))
            },
        );
        if name != "memory" {
            let hops = &io.hops[..a.fanouts.len()];
            let each = |f: &dyn Fn(&sagessd_runtime::ooc::HopIo) -> String| {
                hops.iter().map(f).collect::<Vec<_>>().join(" / ")
            };
            println!(
                "  per hop: reads {}, read {}{}",
                each(&|h| h.reads.to_string()),
                each(&|h| human_bytes(h.bytes_read)),
                if name == "mmap" {
                    String::new()
                } else {
                    format!(
                        ", I/O wait s {}",
                        each(&|h| format!("{:.2}", h.io_wait_ns as f64 / 1e9))
                    )
                }
            );
        }
        if k == 0
            && let Some(g) = &gatherer
        {
            g.report(&a, gather_s);
        }
        agreement.check(name, sums);
    }
    let exit = agreement.report();
    let feature_cache = if gatherer.is_some() {
        (a.feature_cache as u64) << 20
    } else {
        0
    };
    println!(
        "memory: peak RSS {}; bounded by flags: graph buffer {} + feature cache {}; largest output alive at once {} ({})",
        peak_rss_bytes().map_or("unknown".into(), human_bytes),
        human_bytes(if needs_layout { buffer_bytes as u64 } else { 0 }),
        human_bytes(feature_cache),
        human_bytes(peak_output.0),
        peak_output.1,
    );
    Ok(exit)
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
    samplers: &[String],
    dataset: &sagessd_runtime::dataset::Dataset,
    requests: &[(u64, Vec<u64>)],
    block_bytes: usize,
    buffer_bytes: usize,
) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::compare::human_bytes;
    use sagessd_runtime::ooc::features::FeatureFile;
    use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, IoStats, SharedDevice};
    use sagessd_runtime::sampler::{FNV_OFFSET, SampledSubgraph, Sampler, fnv1a};
    let mut hw = load_hw(a.config.as_ref())?;
    let features = match a.features.as_str() {
        "none" => None,
        _ if dataset.manifest.features.is_none() => {
            println!("features: the dataset has none");
            None
        }
        _ => Some(feature_rows(dataset)?),
    };
    let n = dataset.manifest.node_count;
    if let Some((_, row_bytes)) = &features
        && hw.firmware.max_feature_bytes == 0
    {
        // The emulated firmware's per-slot feature buffer: room for the largest subgraph this
        // run can sample (its targets and every sampled neighbour, at most).
        let most_nodes = a.fanouts.iter().fold(u64::from(a.batch_size), |k, &f| {
            k.saturating_mul(1 + u64::from(f))
        });
        let rows = n
            .min(u64::from(hw.firmware.max_subgraph_nodes))
            .min(most_nodes);
        hw.firmware.max_feature_bytes =
            u32::try_from(rows * u64::from(*row_bytes)).unwrap_or(u32::MAX);
    }
    let graph = dataset.graph()?;
    let (layout, _) = AgnesLayout::for_dataset(dataset, block_bytes)?;
    let mut device = sagessd_host_driver::open_device(&a.device, &hw)?;
    let desc = match &features {
        Some((rows, row_bytes)) => sagessd_runtime::load::load_graph_with_features(
            &mut device,
            &graph,
            rows,
            *row_bytes,
            0,
        )?,
        None => sagessd_runtime::load::load_graph(&mut device, &graph, 0)?,
    };
    drop(graph);
    drop(features);
    let lba = u64::from(device.info().block_size_bytes);
    let align = (block_bytes as u64 / lba).max(1);
    let end = desc
        .features
        .map_or(desc.indices.slba + desc.indices.block_count, |f| {
            f.range.slba + f.range.block_count
        });
    let slba = end.next_multiple_of(align);
    layout.write_to_device(&mut device, slba)?;
    // Each sampler starts with the device's caches dropped, where the transport can.
    let cold = device.transport_mut().drop_caches();
    // An emulator models time; a real device (or a remote target) is timed by the wall clock,
    // host and device work together.
    let modelled = device.now_ns().is_some();
    println!(
        "on {}: CSR at LBA 0{}, AGNES layout ({} blocks of {}) at LBA {slba}; graph buffer {}{}",
        match a.device.endpoint {
            sagessd_host_driver::Endpoint::Local => {
                format!("{} ({})", hw.device.name, hw_source(a.config.as_ref()))
            }
            _ => format!("{} (model {:?})", a.device, device.info().model),
        },
        desc.features.map_or(String::new(), |f| format!(
            ", features at LBA {} ({} bytes a row; {} cache {}{})",
            f.range.slba,
            f.row_bytes,
            a.features,
            human_bytes((a.feature_cache as u64) << 20),
            match a.device.endpoint {
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
    );
    println!(
        "{:<12} {:>10} {:>12} {:>12} {:>14} {:>10} {:>14} {:>12} {:>13}",
        "sampler",
        "reads",
        "bytes read",
        "NAND pages",
        "feature bytes",
        "feat reads",
        "device ms/mb",
        "host ms/mb",
        "total ms/mb"
    );
    let device = std::cell::RefCell::new(device);
    let region = desc.features;
    let mut agreement = Agreement::default();
    for name in samplers {
        device.borrow_mut().transport_mut().drop_caches();
        let t0 = device.borrow().now_ns().unwrap_or(0);
        let wall = std::time::Instant::now();
        let pages0 = device.borrow().device_counters().map(|c| c.nand_pages_read);
        let commands0 = device.borrow().stats().commands;
        // The host's own work, modelled with the [host] costs: each NVMe command a synchronous
        // I/O (a block larger than MDTS takes several), and the sampling compute of each
        // subgraph a host sampler built.
        let mut host_ns = 0u64;
        let mut feature_bytes = 0u64;
        // Each minibatch's checksum: its subgraph's, folded with its features' when gathered.
        let mut sums: Vec<u64> = Vec::with_capacity(requests.len());
        let mut fold = |sub: &SampledSubgraph, rows: Option<u64>| {
            sums.push(rows.map_or(sub.checksum(), |r| fnv1a(sub.checksum(), &r.to_le_bytes())));
        };
        let mut host_built =
            |subs: &[SampledSubgraph], gatherer: &mut Option<Gatherer<'_>>| -> anyhow::Result<()> {
                let rows = match gatherer {
                    Some(g) => {
                        let (bytes, sums) = g.gather(subs)?;
                        feature_bytes += bytes;
                        sums.into_iter().map(Some).collect()
                    }
                    None => vec![None; subs.len()],
                };
                for (sub, r) in subs.iter().zip(rows) {
                    let v = sub.view();
                    let dst: u64 = (0..v.layer_count())
                        .map(|l| u64::from(v.layer(l).counts.dst_count))
                        .sum();
                    host_ns += hw.host.sampling_ns(dst, sub.edge_count());
                    fold(sub, r);
                }
                Ok(())
            };
        let mut block_device = SharedDevice(&device);
        let mut feature_device = SharedDevice(&device);
        let mut gatherer = region
            .map(|r| -> anyhow::Result<Gatherer<'_>> {
                Gatherer::new(
                    FeatureFile::on_device(&mut feature_device, &r, n)?,
                    a,
                    block_bytes,
                )
            })
            .transpose()?;
        let io: IoStats = match name.as_str() {
            "agnes" => {
                let mut s =
                    AgnesSampler::on_device(&layout, buffer_bytes, &mut block_device, slba)?;
                for (seed, t) in requests {
                    host_built(&[s.sample(*seed, &a.fanouts, t)?], &mut gatherer)?;
                }
                s.io_stats().clone()
            }
            "hyperbatch" => {
                let mut s =
                    AgnesSampler::on_device(&layout, buffer_bytes, &mut block_device, slba)?;
                for chunk in requests.chunks(a.hyperbatch.max(1)) {
                    host_built(&s.sample_hyperbatch(&a.fanouts, chunk)?, &mut gatherer)?;
                }
                s.io_stats().clone()
            }
            "isp" => {
                let mut d = device.borrow_mut();
                let before = d.stats();
                let out = if region.is_some() {
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
                        fold(&sub, Some(fnv1a(FNV_OFFSET, &rows)));
                    } else {
                        fold(&SampledSubgraph::from_bytes(bytes)?, None);
                    }
                }
                // Its NVMe commands (NS_SUBMIT/NS_COLLECT, or Writes and Reads through the tunnel).
                IoStats {
                    reads: delta.commands,
                    bytes_read: delta.c2h_bytes,
                    ..IoStats::default()
                }
            }
            other => anyhow::bail!("unknown sampler {other:?}"),
        };
        let d = device.borrow();
        host_ns += (d.stats().commands - commands0) * hw.host.sync_io_ns();
        let per_mb_ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6 / requests.len() as f64);
        let pages = pages0
            .zip(d.device_counters())
            .map_or("-".into(), |(p0, c)| (c.nand_pages_read - p0).to_string());
        let (device_ms, host_ms, total_ms) = if modelled {
            let device_ns = d.now_ns().unwrap_or(0) - t0;
            (
                per_mb_ms(device_ns),
                per_mb_ms(host_ns),
                per_mb_ms(device_ns + host_ns),
            )
        } else {
            let wall_ns = wall.elapsed().as_nanos() as u64;
            ("-".into(), "-".into(), per_mb_ms(wall_ns))
        };
        // The host's feature reads (ISP's come within its own commands).
        let feature_reads = gatherer
            .as_ref()
            .filter(|_| name != "isp")
            .map_or("-".into(), |g| g.stats().io.reads.to_string());
        println!(
            "{:<12} {:>10} {:>12} {:>12} {:>14} {:>10} {:>14} {:>12} {:>13}",
            name,
            io.reads,
            human_bytes(io.bytes_read),
            pages,
            if region.is_some() {
                human_bytes(feature_bytes)
            } else {
                "-".into()
            },
            feature_reads,
            device_ms,
            host_ms,
            total_ms
        );
        agreement.check(name, sums);
    }
    if modelled {
        println!(
            "modelled per minibatch: device = the device's virtual time (NVMe, PCIe, NAND, firmware cores); host = the host's work with the [host] costs (each NVMe command a synchronous I/O, plus the sampling compute of the subgraphs the host builds; copying feature rows is not charged); total = device + host (the host samplers' reads are synchronous; ISP's few host µs overlap in truth)"
        );
    } else {
        println!(
            "total ms/mb: this machine's wall clock per minibatch, host and device work together (an emulator behind the URI times nothing real unless served with --pace)"
        );
    }
    if region.is_some() {
        println!(
            "feature bytes: the rows gathered for the subgraphs' nodes (host samplers read them through their cache; ISP's come back with the subgraph); samples are compared with their features"
        );
    }
    Ok(agreement.report())
}

/// The dataset's feature rows as stored (f32 or f16, row after row) and the bytes of one row.
fn feature_rows(dataset: &sagessd_runtime::dataset::Dataset) -> anyhow::Result<(Vec<u8>, u32)> {
    use sagessd_runtime::npy;
    let entry = dataset
        .manifest
        .features
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("the dataset has no features"))?;
    let path = dataset.dir().join(&entry.file);
    let header = npy::read_header(&path)?;
    let (shape, rows) = npy::read_raw(&path, header.dtype, 2)?;
    let row_bytes = rows.len() as u64 / shape[0].max(1);
    anyhow::ensure!(
        shape[0] == dataset.manifest.node_count && row_bytes > 0,
        "{}: {} rows for {} nodes",
        path.display(),
        shape[0],
        dataset.manifest.node_count
    );
    let row_bytes = u32::try_from(row_bytes)
        .map_err(|_| anyhow::anyhow!("{}: rows of {row_bytes} bytes", path.display()))?;
    Ok((rows, row_bytes))
}

/// Whether every sampler produced the first one's subgraphs (by checksum, minibatch by
/// minibatch).
#[derive(Default)]
struct Agreement {
    first: Option<(String, Vec<u64>)>,
    compared: bool,
    mismatch: bool,
}

impl Agreement {
    /// Compares `name`'s checksums with the first sampler's (or keeps them, if it is first).
    fn check(&mut self, name: &str, sums: Vec<u64>) {
        match &self.first {
            None => self.first = Some((name.to_owned(), sums)),
            Some((reference, expected)) => {
                let longest = expected.len().max(sums.len());
                if let Some(b) = (0..longest).find(|&b| expected.get(b) != sums.get(b)) {
                    eprintln!("error: {name} differs from {reference} on minibatch {b}");
                    self.mismatch = true;
                }
                self.compared = true;
            }
        }
    }

    /// Prints the verdict when all agreed; the exit status either way.
    fn report(&self) -> ExitCode {
        match &self.first {
            Some((name, _)) if !self.mismatch && self.compared => {
                println!(
                    "samples identical: yes (every sampler's subgraphs have the checksums of {name}'s)"
                );
                ExitCode::SUCCESS
            }
            Some(_) if !self.mismatch => {
                println!("samples identical: one sampler, nothing compared");
                ExitCode::SUCCESS
            }
            Some(_) => ExitCode::FAILURE,
            None => ExitCode::SUCCESS,
        }
    }
}

/// The feature half of `sample`: each subgraph's node features gathered from storage into one
/// buffer per minibatch, with AGNES's or BGL's cache.
enum Gatherer<'d> {
    /// AGNES: access-count-threshold cache, block reads, a hyperbatch's misses read together.
    Agnes(sagessd_runtime::ooc::features::ThresholdCache<'d>),
    /// BGL: FIFO cache, row reads.
    Bgl(sagessd_runtime::ooc::features::FifoCache<'d>),
}

impl<'d> Gatherer<'d> {
    /// The gatherer `--features` names over `rows`, with the cache and block size the flags
    /// give.
    fn new(
        rows: sagessd_runtime::ooc::features::FeatureFile<'d>,
        a: &SampleArgs,
        block_bytes: usize,
    ) -> anyhow::Result<Self> {
        use sagessd_runtime::ooc::features::{FifoCache, ThresholdCache};
        let cache_bytes = a.feature_cache << 20;
        Ok(match a.features.as_str() {
            "agnes" => Self::Agnes(ThresholdCache::new(
                rows,
                cache_bytes,
                a.feature_threshold,
                block_bytes,
            )),
            "bgl" => Self::Bgl(FifoCache::new(rows, cache_bytes)),
            other => anyhow::bail!("--features {other:?}: agnes, bgl or none"),
        })
    }

    /// Gathers the features of `subs` (a minibatch, or a hyperbatch's minibatches): AGNES
    /// reads a hyperbatch's misses together, each feature block once; BGL gathers minibatch by
    /// minibatch. Returns the bytes gathered and each minibatch's rows' FNV-1a checksum.
    fn gather(
        &mut self,
        subs: &[sagessd_runtime::sampler::SampledSubgraph],
    ) -> anyhow::Result<(u64, Vec<u64>)> {
        use sagessd_runtime::sampler::{FNV_OFFSET, fnv1a};
        let nodes: Vec<Vec<u64>> = subs
            .iter()
            .map(|s| s.view().nodes().iter().map(|v| v.get()).collect())
            .collect();
        let mut bytes = 0;
        let mut sums = Vec::with_capacity(subs.len());
        let mut take = |rows: &[u8]| {
            bytes += rows.len() as u64;
            sums.push(fnv1a(FNV_OFFSET, rows));
        };
        match self {
            Self::Agnes(g) => {
                let lists: Vec<&[u64]> = nodes.iter().map(Vec::as_slice).collect();
                g.gather_many(&lists)?.iter().for_each(|o| take(o));
            }
            // One minibatch's buffer at a time.
            Self::Bgl(g) => {
                for n in &nodes {
                    take(&g.gather(n)?);
                }
            }
        }
        Ok((bytes, sums))
    }

    /// What the gathering did.
    fn stats(&self) -> &sagessd_runtime::ooc::features::GatherStats {
        match self {
            Self::Agnes(g) => &g.stats,
            Self::Bgl(g) => &g.stats,
        }
    }

    /// Prints what the gathering did (rows, cache hits, I/O) and its time.
    fn report(&self, a: &SampleArgs, wall_s: f64) {
        use sagessd_runtime::compare::human_bytes;
        let stats = self.stats();
        println!(
            "features ({}, cache {}): {} rows gathered, cache hits {:.1}%, {} reads, {} read, {} used, {:.2} s wall ({:.2} s I/O wait)",
            a.features,
            human_bytes((a.feature_cache as u64) << 20),
            stats.rows,
            100.0 * stats.hit_ratio(),
            stats.io.reads,
            human_bytes(stats.io.bytes_read),
            human_bytes(stats.io.bytes_used),
            wall_s,
            stats.io.io_wait_ns as f64 / 1e9
        );
    }
}
