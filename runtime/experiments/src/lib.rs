//! The seeds' comparisons rerun on sagessd's emulated devices (what `sagessd experiment` and
//! `sagessd demo` run), written as one tidy CSV per figure, plots, and a `report.md` that sets
//! each figure beside the paper's value (`paper.rs`). SmartSAGE: neighbour sampling (Figs. 14,
//! 16, 17) and end-to-end training (Figs. 6, 7, 18); AGNES: block and hyperbatch sizes (Figs.
//! 8, 9); BGL: the feature cache against its size and the minibatch order (§3.2), and the
//! stage profile (§3.4). The training figures need feature `train` (libtorch); without it
//! their sections say they were not run.

mod agnes;
pub mod bench_sampler;
#[cfg(feature = "train")]
pub mod bench_step;
#[cfg(feature = "train")]
pub mod bench_train;
mod bgl;
pub mod calibrate;
pub mod calibrate_fit;
pub mod calibrate_floor;
pub mod cgroup;
pub mod compare_rows;
pub mod demo;
pub mod device_bench;
pub mod end_to_end;
pub mod end_to_end_at_scale;
pub mod firmware_profile;
pub mod host_check;
pub mod host_compute;
pub mod kill_campaign;
mod paper;
pub mod plot;
pub mod record;
pub mod smartsage;
pub mod validate_host;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sagessd_emulator::HwConfig;

use crate::record::{Record, write_csv};

/// Which seed's comparisons to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// SmartSAGE: neighbour sampling with mmap, direct I/O and in storage, 1…N workers, and
    /// end-to-end training of every design point, at several graph-to-memory ratios (Figs. 6,
    /// 7, 14, 16, 17, 18).
    Smartsage,
    /// AGNES: block-size and hyperbatch sweeps of the AGNES sampler on the device, with storage
    /// reads, bytes read and used, and the modelled epoch (Figs. 8, 9).
    Agnes,
    /// BGL: feature-cache hit ratio and gather I/O against the cache size, random against
    /// proximity-aware order, FIFO against AGNES's threshold cache; the stage profile and the
    /// workers it chooses (§3.2, §3.4).
    Bgl,
    /// Every experiment above, one after the other, each into its own subfolder.
    All,
}

/// How to run an experiment.
#[derive(Clone, Debug)]
pub struct Options {
    /// A reduced sweep (small graph, one memory ratio, 1 and 2 workers): every output, in
    /// seconds.
    pub quick: bool,
    /// Output folder (each experiment writes into its own subfolder).
    pub out: PathBuf,
    /// The devices to run on, each with where its description came from (a path, or "built-in
    /// …"); none: the built-in Cosmos+ OpenSSD.
    pub hardware: Vec<(String, HwConfig)>,
}

/// One experiment: it runs as the options say, and returns what it wrote where.
type OneExperiment = fn(&Options, &mut dyn FnMut(&str)) -> anyhow::Result<String>;

/// Runs `which` as `options` say, telling `progress` what it is doing; returns a line per
/// experiment run saying what it wrote where.
pub fn run(
    which: Which,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<String>> {
    let mut options = options.clone();
    if options.hardware.is_empty() {
        options.hardware.push((
            "built-in hw-configs/cosmos-plus.toml".into(),
            HwConfig::cosmos_plus(),
        ));
    }
    for (i, (_, hw)) in options.hardware.iter().enumerate() {
        anyhow::ensure!(
            options.hardware[..i]
                .iter()
                .all(|(_, h)| h.device.name != hw.device.name),
            "two hardware descriptions name their device {:?}: their rows and plots could not be told apart",
            hw.device.name
        );
    }
    let runs: &[OneExperiment] = match which {
        Which::Smartsage => &[run_smartsage],
        Which::Agnes => &[run_agnes],
        Which::Bgl => &[run_bgl],
        Which::All => &[run_smartsage, run_agnes, run_bgl],
    };
    runs.iter().map(|run| run(&options, progress)).collect()
}

fn write_file(dir: &Path, name: &str, text: &[u8]) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

fn csv(records: &[Record]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    write_csv(records, &mut out)?;
    Ok(out)
}

fn run_smartsage(args: &Options, progress: &mut dyn FnMut(&str)) -> anyhow::Result<String> {
    let sweep = if args.quick {
        smartsage::Sweep::quick()
    } else {
        smartsage::Sweep::full()
    };
    let dir = args.out.join("smartsage");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let wall = std::time::Instant::now();
    let e2e_sweep = if args.quick {
        end_to_end::Sweep::quick()
    } else {
        end_to_end::Sweep::full()
    };
    let mut devices = Vec::new();
    let mut sections = Vec::new();
    let mut at_scale = Vec::new();
    for (source, hw) in args.hardware.iter().cloned() {
        progress(&format!(
            "experiment smartsage: {} ({source})",
            hw.device.name
        ));
        let points = smartsage::run(&hw, &sweep, progress)?;
        progress(&format!(
            "experiment smartsage: end-to-end training at scale (modelled) on {}",
            hw.device.name
        ));
        at_scale.push(end_to_end_at_scale::section(&hw, &points, &dir, progress)?);
        devices.push((source, points));
        progress(&format!(
            "experiment smartsage: end-to-end training on {}",
            hw.device.name
        ));
        sections.push(end_to_end::section(
            &hw, &e2e_sweep, &dir, args.quick, progress,
        )?);
    }
    let all: Vec<&smartsage::Point> = devices.iter().flat_map(|(_, p)| p).collect();
    let owned = |f: fn(&[smartsage::Point]) -> Vec<Record>| -> Vec<Record> {
        devices.iter().flat_map(|(_, p)| f(p)).collect()
    };
    write_file(
        &dir,
        "fig14_one_worker.csv",
        &csv(&owned(smartsage::fig14))?,
    )?;
    write_file(&dir, "fig16_workers.csv", &csv(&owned(smartsage::fig16))?)?;
    write_file(
        &dir,
        "fig17_hwsw_over_sw.csv",
        &csv(&owned(smartsage::fig17))?,
    )?;
    write_file(
        &dir,
        "fig15_coalescing.csv",
        &csv(&owned(smartsage::fig15))?,
    )?;
    let e2e_rows: Vec<Record> = at_scale.iter().flat_map(|s| s.rows.clone()).collect();
    write_file(&dir, "end_to_end_at_scale.csv", &csv(&e2e_rows)?)?;
    let mut plots: Vec<String> = at_scale.iter().flat_map(|s| s.plots.clone()).collect();
    for (_, points) in &devices {
        let Some(device) = points.first().map(|p| p.device.clone()) else {
            continue;
        };
        let figures = [
            ("fig14", smartsage::fig14_plot(points)),
            (
                "fig16",
                smartsage::workers_plot(points, sagessd_runtime::registry::SamplerKind::Mmap),
            ),
            (
                "fig17",
                smartsage::workers_plot(points, sagessd_runtime::registry::SamplerKind::Direct),
            ),
            ("fig15", smartsage::fig15_plot(points)),
        ];
        for (name, figure) in figures {
            let safe = file_safe(&device);
            let stem = format!("{name}_{safe}");
            plot::write(&figure, &dir, &stem)?;
            plots.push(stem);
        }
    }
    let report = smartsage_report(&sweep, &devices, &at_scale, &sections, args.quick, &plots);
    write_file(&dir, "report.md", report.as_bytes())?;
    Ok(format!(
        "experiment smartsage: {} sampling, {} modelled end-to-end and {} training design points on {} device(s) → {} (fig14_one_worker.csv, fig15_coalescing.csv, fig16_workers.csv, fig17_hwsw_over_sw.csv, end_to_end_at_scale.csv, {}report.md); {:.1} s wall clock",
        all.iter().map(|p| p.report.results.len()).sum::<usize>(),
        e2e_rows.len(),
        sections.iter().map(|s| s.points.len()).sum::<usize>(),
        devices.len(),
        dir.display(),
        sections
            .iter()
            .flat_map(|s| s.files.iter().filter(|f| f.ends_with(".csv")))
            .map(|f| format!("{f}, "))
            .collect::<String>(),
        wall.elapsed().as_secs_f64()
    ))
}

/// One training run inside an experiment: `spec` (dataset, sampler, workers, …) with what every
/// such run shares (`epochs`, `batch_size`, `fanouts`, the CPU with one libtorch thread),
/// trained by the library, printing nothing. Returns the `sagessd train` command that reruns
/// it (`hardware`: the description file of its device), for the report, and what it trained.
#[cfg(feature = "train")]
pub(crate) fn train_quietly(
    mut spec: sagessd::training::TrainSpec,
    hardware: Option<&Path>,
    epochs: u32,
    batch_size: u32,
    fanouts: &[u16],
) -> anyhow::Result<(String, sagessd::training::TrainRun)> {
    spec.epochs = Some(epochs);
    spec.batch_size = Some(usize::try_from(batch_size)?);
    spec.fanouts = fanouts.to_vec();
    spec.compute = sagessd::training::DeviceChoice::Cpu;
    spec.threads = 1;
    let command = spec.command_line(hardware);
    let run = sagessd::training::train(&spec, &mut ()).with_context(|| command.clone())?;
    Ok((command, run))
}

/// A generated dataset (R-MAT of `scale`, edge factor 8, seed 1; `feature_dim` f32 features
/// and `classes` community labels) under `dir`, reused when a previous run left it there.
pub(crate) fn generated(
    dir: &Path,
    scale: u32,
    feature_dim: u32,
    classes: u32,
) -> anyhow::Result<(PathBuf, sagessd_runtime::dataset::Dataset)> {
    use sagessd_runtime::dataset::{Dataset, generate};
    let path = dir.join(format!("rmat-{scale}-f{feature_dim}-c{classes}"));
    if let Ok(d) = Dataset::open(&path) {
        return Ok((path, d));
    }
    let params = generate::GenerateParams {
        name: format!("rmat-{scale}-8"),
        scale,
        edge_factor: 8,
        seed: 1,
        feature_dim,
        feature_dtype: sagessd_runtime::npy::Dtype::F32,
        classes,
    };
    let d = generate::generate(&path, &params)?;
    Ok((path, d))
}

fn run_bgl(args: &Options, progress: &mut dyn FnMut(&str)) -> anyhow::Result<String> {
    let sweep = if args.quick {
        bgl::Sweep::quick()
    } else {
        bgl::Sweep::full()
    };
    let dir = args.out.join("bgl");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if args.hardware.len() > 1
        || args
            .hardware
            .iter()
            .any(|(s, _)| !s.starts_with("built-in"))
    {
        progress("experiment bgl: gathers from this machine's files; --config is not used by it");
    }
    let wall = std::time::Instant::now();
    let workload = bgl::Workload::new(&sweep, 1)?;
    progress(&format!(
        "experiment bgl: {}, {} training nodes, {} features a node",
        sweep.graph.describe(),
        workload.train.len(),
        sweep.feature_dim
    ));
    let points = bgl::run(&workload, &sweep, progress)?;
    write_file(
        &dir,
        "bgl_feature_cache.csv",
        &csv(&bgl::records(&points, &workload))?,
    )?;
    for (stem, figure) in bgl::plots(&points, &sweep) {
        plot::write(&figure, &dir, stem)?;
    }
    // The profile trains on a generated dataset, its cache the sweep's 10 % (or middle) size
    // as a share of that dataset's table.
    let (path, dataset) = generated(
        &dir.join("dataset"),
        sweep.profile_scale,
        bgl::PROFILE_FEATURE_DIM,
        8,
    )?;
    let percent = if sweep.cache_percent.contains(&10) {
        10
    } else {
        sweep
            .cache_percent
            .get(sweep.cache_percent.len() / 2)
            .copied()
            .unwrap_or(10)
    };
    let cache_bytes = dataset.manifest.node_count as usize * bgl::PROFILE_FEATURE_DIM as usize * 4
        / 100
        * percent as usize;
    let (section, profile) = bgl::profile(&path, &sweep, cache_bytes, progress)?;
    if let Some(record) = profile {
        write_file(&dir, "bgl_profile.csv", &csv(&[record])?)?;
    }
    write_file(
        &dir,
        "report.md",
        bgl::report(&points, &sweep, &workload, args.quick, &section).as_bytes(),
    )?;
    Ok(format!(
        "experiment bgl: {} points → {} (bgl_feature_cache.csv, bgl_profile.csv, report.md); {:.1} s wall clock",
        points.len(),
        dir.display(),
        wall.elapsed().as_secs_f64()
    ))
}

/// A device's name kept to characters every file system takes.
pub fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn run_agnes(args: &Options, progress: &mut dyn FnMut(&str)) -> anyhow::Result<String> {
    let sweep = if args.quick {
        agnes::Sweep::quick()
    } else {
        agnes::Sweep::full()
    };
    let dir = args.out.join("agnes");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let wall = std::time::Instant::now();
    progress(&format!(
        "experiment agnes: tabulating {}",
        sweep.graph.describe()
    ));
    let graph = sweep.build_graph()?;
    let reference = agnes::reference(&graph, &sweep)?;
    let mut devices = Vec::new();
    for (source, hw) in args.hardware.iter().cloned() {
        progress(&format!("experiment agnes: {} ({source})", hw.device.name));
        let name = hw.device.name.clone();
        let mut step = |what: &str| {
            progress(&format!(
                "experiment agnes: {name} · {what} ({:.0} s)",
                wall.elapsed().as_secs_f64()
            ));
        };
        devices.push((
            source,
            agnes::run(&hw, &graph, &sweep, &reference, &mut step)?,
        ));
    }
    let of = |sweeps: &[&str]| -> Vec<Record> {
        devices
            .iter()
            .flat_map(|(_, p)| p.iter().filter(|p| sweeps.contains(&p.sweep)))
            .map(agnes::record)
            .collect()
    };
    let fig9 = of(&["block", "hyperbatch"]);
    write_file(&dir, "fig8_ratios.csv", &csv(&of(&["ratio"]))?)?;
    let small: Vec<Record> = devices
        .iter()
        .flat_map(|(_, p)| agnes::designs(p))
        .map(agnes::record)
        .collect();
    write_file(&dir, "fig9_blocks_and_hyperbatches.csv", &csv(&fig9)?)?;
    write_file(&dir, "small_reads.csv", &csv(&small)?)?;
    let mut plots = Vec::new();
    for (_, points) in &devices {
        let Some(device) = points.first().map(|p| file_safe(&p.device)) else {
            continue;
        };
        for (stem, figure) in [
            ("fig9a", agnes::plot(points, "block", sweep.ratio)),
            ("fig9b", agnes::plot(points, "hyperbatch", sweep.ratio)),
            ("small_reads", agnes::samplers_plot(points, sweep.ratio)),
            ("fig8_ratios", agnes::ratio_plot(points)),
        ] {
            let stem = format!("{stem}_{device}");
            plot::write(&figure, &dir, &stem)?;
            plots.push(stem);
        }
    }
    // The feature cache's threshold, on the same graph with its training nodes and a computed
    // feature table.
    progress("experiment agnes: the feature cache's threshold");
    let featured = bgl::Workload::over(
        sagessd_runtime::graph_spec::WorkloadGraph::Synthetic(graph),
        sweep.train_share,
        sweep.feature_dim,
        1,
    )?;
    let thresholds = agnes::thresholds(&featured, &sweep)?;
    write_file(
        &dir,
        "feature_threshold.csv",
        &csv(&agnes::threshold_records(&thresholds, &sweep))?,
    )?;
    plot::write(
        &agnes::threshold_plot(&thresholds, &sweep),
        &dir,
        "feature_threshold",
    )?;
    plots.push("feature_threshold".into());
    write_file(
        &dir,
        "report.md",
        agnes_report(&sweep, &devices, &featured, &thresholds, args.quick, &plots).as_bytes(),
    )?;
    Ok(format!(
        "experiment agnes: {} points on {} device(s) → {} (fig9_blocks_and_hyperbatches.csv, fig8_ratios.csv, small_reads.csv, feature_threshold.csv, report.md); {:.1} s wall clock",
        devices.iter().map(|(_, p)| p.len()).sum::<usize>(),
        devices.len(),
        dir.display(),
        wall.elapsed().as_secs_f64()
    ))
}

fn agnes_report(
    sweep: &agnes::Sweep,
    devices: &[(String, Vec<agnes::Point>)],
    featured: &bgl::Workload,
    thresholds: &[agnes::ThresholdPoint],
    quick: bool,
    plots: &[String],
) -> String {
    use sagessd::compare::human_bytes;
    let mut r = String::new();
    let _ = writeln!(
        r,
        "# AGNES: block size and hyperbatch (Figs. 8, 9), small reads, the feature-cache threshold\n\n\
         `sagessd experiment agnes{}`. The graph: {}. Its AGNES layout is computed by the \
         emulated flash; each point boots a fresh device holding it (cold, the controller the \
         hardware description's own) and the AGNES sampler reads it through a graph buffer of \
         1/r of the layout (r = {} unless the row says otherwise). An epoch of {} minibatches \
         of {} targets, fanouts {:?}; the block sweep at hyperbatches of {}, the hyperbatch \
         sweep at 1 MiB blocks (a hyperbatch of 1 is AGNES without hyperbatches).\n\n\
         **Every time is modelled**: the epoch is the device's virtual time plus the host's \
         modelled work (each read a synchronous I/O, the sampling compute at the `[host]` \
         costs), so two runs write identical files. **A point samples part of its epoch**: \
         whole hyperbatches in epoch order until at least {} minibatches and two hyperbatches \
         are sampled, the last begun with the graph buffer steady (evicting, or holding every \
         block the one before needed), or the epoch is; each hyperbatch not sampled is priced \
         at the last sampled one (the targets of every minibatch are drawn alike). The tables \
         say how many were sampled.\n",
        if quick { " --quick" } else { "" },
        sweep.graph.describe(),
        sweep.ratio,
        sweep.epoch_minibatches,
        sweep.batch_size,
        sweep.fanouts,
        sweep.block_sweep_hyperbatch,
        sweep.min_sampled_minibatches,
    );
    for (source, points) in devices {
        let Some(first) = points.first() else {
            continue;
        };
        let _ = writeln!(r, "## {} ({source})\n", first.device);
        let best_block = agnes::best(points, "block");
        let best_hb = agnes::best(points, "hyperbatch");
        let no_hb = points
            .iter()
            .find(|p| p.sweep == "hyperbatch" && p.hyperbatch == 1);
        let ours = |key: &str| -> Option<f64> {
            match key {
                "fig9a.best_block_kib" => best_block.map(|p| p.block_bytes as f64 / 1024.0),
                "fig9b.best_hyperbatch" => best_hb.map(|p| p.hyperbatch as f64),
                "fig8.hyperbatch_speedup.max" => {
                    // Over the hyperbatch sweep's best and every ratio of the ratio sweep.
                    let (n, b) = (no_hb?, best_hb?);
                    let here = n.epoch_ns() as f64 / b.epoch_ns().max(1) as f64;
                    Some(
                        agnes::hyperbatch_speedups(points)
                            .into_iter()
                            .map(|(_, x)| x)
                            .fold(here, f64::max),
                    )
                }
                _ => None,
            }
        };
        let far = paper_table(
            &mut r,
            paper::AGNES,
            &["ours".into()],
            &|key, _| ours(key),
            &|v| v.to_string(),
            &|o| format!("{o:.1}"),
        );
        if far > 0 {
            // Where the modelled epoch goes (storage or the host's sampling), what a
            // hyperbatch reads, and how much of the layout each hop looks up.
            let share = |p: &agnes::Point| {
                100.0 * p.cost.epoch.device_ns as f64 / p.epoch_ns().max(1) as f64
            };
            let hops = sweep.fanouts.len();
            let block_sweep = || points.iter().filter(|p| p.sweep == "block");
            let smallest = block_sweep().min_by_key(|p| p.block_bytes);
            let largest = block_sweep().max_by_key(|p| p.block_bytes);
            let _ = writeln!(
                r,
                "\n{far} of these differ from the paper by more than 30 %. What the model shows: the \
                 layout is {} on the device; storage takes {:.0} % of the epoch without \
                 hyperbatches and {:.0} % with the best. Without hyperbatches a minibatch makes \
                 {:.0} block reads; with hyperbatches of {} a hyperbatch makes {:.0}: each of its \
                 hops reads each block it needs once, for all its minibatches, so its cost hardly \
                 grows with its size while the epoch's hyperbatches fall as 1/size, and the \
                 speedup grows with the largest hyperbatch swept (the paper's 1,024 minibatches of \
                 1,000 targets would hold some 1.1 G sampled positions at once). In the block \
                 sweep each hop looks up {:.0} % of the layout's blocks at the smallest block and \
                 {:.0} % at the largest: larger blocks read more bytes ({} against {}) in fewer \
                 commands ({} against {}), and on this device the commands cost more than the \
                 bytes.",
                human_bytes(no_hb.map_or(first.layout_bytes, |p| p.layout_bytes)),
                no_hb.map_or(f64::NAN, share),
                best_hb.map_or(f64::NAN, share),
                no_hb.map_or(f64::NAN, agnes::Point::reads_per_hyperbatch),
                best_hb.map_or(0, |p| p.hyperbatch),
                best_hb.map_or(f64::NAN, agnes::Point::reads_per_hyperbatch),
                smallest.map_or(f64::NAN, |p| 100.0 * p.hop_coverage(hops)),
                largest.map_or(f64::NAN, |p| 100.0 * p.hop_coverage(hops)),
                human_bytes(largest.map_or(0, |p| p.cost.epoch.bytes_read)),
                human_bytes(smallest.map_or(0, |p| p.cost.epoch.bytes_read)),
                largest.map_or(0, |p| p.cost.epoch.reads),
                smallest.map_or(0, |p| p.cost.epoch.reads),
            );
        }
        let speedups = agnes::hyperbatch_speedups(points);
        if !speedups.is_empty() {
            let _ = writeln!(
                r,
                "\n### Fig. 8 against the graph-to-memory ratio\n\nAGNES without hyperbatches \
                 and with the largest ({}), 1 MiB blocks, the graph buffer at 1/ratio of the \
                 layout. A minibatch's blocks: the blocks AGNES without hyperbatches looked \
                 up per minibatch (each hop's distinct blocks, summed over hops) as a share of \
                 the buffer.\n\n| r | layout | graph buffer | a minibatch's blocks | without (s) | with (s) | speedup | reads without | reads with |\n|---|---|---|---|---|---|---|---|---|",
                sweep.hyperbatches.iter().max().copied().unwrap_or(1)
            );
            for (ratio, x) in &speedups {
                let at = |hb1: bool| {
                    points.iter().find(|p| {
                        p.sweep == "ratio" && p.ratio == *ratio && (p.hyperbatch == 1) == hb1
                    })
                };
                if let (Some(n), Some(w)) = (at(true), at(false)) {
                    let _ = writeln!(
                        r,
                        "| {ratio} | {} | {} | {:.0} % | {:.3} | {:.3} | {x:.2}× | {} | {} |",
                        human_bytes(n.layout_bytes),
                        human_bytes(n.buffer_bytes),
                        100.0 * n.looked_up_share(),
                        n.epoch_ns() as f64 / 1e9,
                        w.epoch_ns() as f64 / 1e9,
                        n.cost.epoch.reads,
                        w.cost.epoch.reads
                    );
                }
            }
        }
        let designs = agnes::designs(points);
        if let Some(agnes) = designs
            .iter()
            .find(|p| p.sweep == "hyperbatch" && p.hyperbatch > 1)
        {
            let _ = writeln!(
                r,
                "\n### AGNES against small reads and in-storage sampling\n\nThe storage-based \
                 trainers AGNES improves on read a few nodes at a time as sampling needs them; here \
                 the host samples the same epoch from the CSR graph on a fresh device with direct \
                 I/O at queue depth 1 and with io_uring batches (`[host] uring_queue_depth`), each \
                 read the LBAs holding the needed entries. In storage, the device samples the same \
                 epoch from the CSR (one host worker): an NS_config per minibatch, or in-storage \
                 hyperbatches, whose every hop reads each flash page once for all their \
                 minibatches; their storage reads are the flash pages the device read (whole \
                 pages), *used* the subgraphs returned, *split*: hyperbatches sampled again as two \
                 halves because their subgraphs together passed the device's result buffers \
                 (its description's `[firmware] max_subgraph_nodes` and `max_subgraph_edges`: \
                 the minibatches of a hyperbatch share one job's). The paper reports \
                 no such number (its Fig. 6 compares whole systems; no system before this one \
                 builds hyperbatches inside the SSD).\n\n| design | storage reads | read | used | split | modelled epoch (s) | AGNES's speedup |\n|---|---|---|---|---|---|---|"
            );
            for p in &designs {
                let _ = writeln!(
                    r,
                    "| {} | {} | {} | {} | {} | {:.3} | {:.2}× |",
                    agnes::sampler_label(p),
                    p.cost.epoch.reads,
                    human_bytes(p.cost.epoch.bytes_read),
                    human_bytes(p.cost.epoch.bytes_used),
                    p.cost.epoch.splits,
                    p.epoch_ns() as f64 / 1e9,
                    p.epoch_ns() as f64 / agnes.epoch_ns().max(1) as f64
                );
            }
        }
        let _ = writeln!(
            r,
            "\nEvery point (the epoch's figures; *sampled*: minibatches sampled of the epoch's; \
             *looked up*: the blocks a hyperbatch looked up, each hop's summed, as a share of \
             the graph buffer).\n\n| sweep | sampler | block | hyperbatch | r | graph buffer | looked up | sampled | storage reads | read | used | modelled epoch (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for p in points {
            let (buffer, looked_up) = if p.sweep == "small reads" {
                ("none".to_string(), "–".to_string())
            } else {
                (
                    human_bytes(p.buffer_bytes),
                    format!("{:.0} %", 100.0 * p.looked_up_share()),
                )
            };
            let _ = writeln!(
                r,
                "| {} | {} | {} | {} | {} | {buffer} | {looked_up} | {}/{} | {} | {} | {} | {:.3} |",
                p.sweep,
                p.sampler,
                human_bytes(p.block_bytes),
                p.hyperbatch,
                p.ratio,
                p.cost.sampled_minibatches,
                p.epoch_minibatches,
                p.cost.epoch.reads,
                human_bytes(p.cost.epoch.bytes_read),
                human_bytes(p.cost.epoch.bytes_used),
                p.epoch_ns() as f64 / 1e9
            );
        }
        let _ = writeln!(r);
    }
    let _ = writeln!(
        r,
        "## The feature cache's threshold\n\nAGNES keeps a feature row in its cache once it has \
         been asked for *threshold* times (§3.4 (2); the paper gives no value for it). The first {} \
         minibatches of an epoch over the graph's {} training nodes ({:.2} % of its nodes, drawn \
         by a keyed hash; random order), {} targets each, fanouts {:?}, sampled in memory from the \
         same graph and gathered a hyperbatch of {} at a time through a cache of {} % of its \
         feature table ({} f32 a node, {}: computed where it is read, its reads counted as a \
         `features.npy`'s), reading missed rows' 64 KiB blocks. The caches start empty. \
         **Counts**; every threshold returned the same rows (checked).\n\n\
         | threshold | hit ratio | storage reads | read | used |\n|---|---|---|---|---|",
        thresholds.first().map_or(0, |t| t.minibatches),
        featured.train.len(),
        100.0 * featured.train.len() as f64 / featured.graph.host().node_count().max(1) as f64,
        sweep.batch_size,
        sweep.fanouts,
        sweep.threshold_hyperbatch,
        sweep.feature_cache_percent,
        sweep.feature_dim,
        human_bytes(featured.table_bytes()),
    );
    for t in thresholds {
        let _ = writeln!(
            r,
            "| {} | {:.1} % | {} | {} | {} |",
            t.threshold,
            100.0 * t.stats.hit_ratio(),
            t.stats.io.reads,
            human_bytes(t.stats.io.bytes_read),
            human_bytes(t.stats.io.bytes_used)
        );
    }
    let _ = writeln!(
        r,
        "\n## Files\n\n`fig9_blocks_and_hyperbatches.csv`, `fig8_ratios.csv`, `small_reads.csv`, \
         `feature_threshold.csv`: one row per point, units in the column names. Plots (SVG and \
         PNG): {}.",
        plots
            .iter()
            .map(|p| format!("`{p}.svg`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    r
}

/// Writes the *paper · ours · ratio* table of `table`, with one "ours" column per entry of
/// `columns` (ours from `ours(key, column)`, each value formatted with `paper_fmt` /
/// `ours_fmt`, its ratio to the paper's beside it); returns how many rows differ by more than
/// 30 % in some column.
fn paper_table(
    r: &mut String,
    table: &[paper::PaperValue],
    columns: &[String],
    ours: &dyn Fn(&str, usize) -> Option<f64>,
    paper_fmt: &dyn Fn(f64) -> String,
    ours_fmt: &dyn Fn(f64) -> String,
) -> usize {
    let _ = writeln!(
        r,
        "| figure | quantity | paper | {} | within ±30 % |\n|---|---|---|{}---|",
        columns
            .iter()
            .map(|c| format!("{c} (ours / paper)"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(columns.len())
    );
    let mut far = 0;
    for v in table {
        let values: Vec<Option<f64>> = (0..columns.len()).map(|i| ours(v.key, i)).collect();
        let cells: Vec<String> = values
            .iter()
            .map(|o| {
                o.map_or("-".into(), |o| {
                    format!("{} ({:.2})", ours_fmt(o), o / v.value)
                })
            })
            .collect();
        let measured: Vec<(usize, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(i, o)| Some((i, (*o)?)))
            .collect();
        let within: Vec<&str> = measured
            .iter()
            .filter(|(_, o)| close(*o, v.value))
            .map(|(i, _)| columns[*i].as_str())
            .collect();
        far += usize::from(within.len() < measured.len());
        let verdict = if measured.is_empty() {
            "not measured".to_string()
        } else if within.len() == measured.len() {
            "yes".into()
        } else if within.is_empty() {
            "**no**".into()
        } else {
            format!("**only** {}", within.join(", "))
        };
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {verdict} |",
            v.figure,
            v.quantity,
            paper_fmt(v.value),
            cells.join(" | ")
        );
    }
    far
}

/// Within ±30 % of the paper's value.
fn close(ours: f64, paper: f64) -> bool {
    (ours / paper - 1.0).abs() <= 0.30
}

fn smartsage_report(
    sweep: &smartsage::Sweep,
    devices: &[(String, Vec<smartsage::Point>)],
    at_scale: &[end_to_end_at_scale::Section],
    sections: &[end_to_end::Section],
    quick: bool,
    plots: &[String],
) -> String {
    use sagessd::compare::human_bytes;
    let mut r = String::new();
    let configs = devices
        .iter()
        .filter(|(source, _)| !source.starts_with("built-in"))
        .map(|(source, _)| format!(" --config {source}"))
        .collect::<String>();
    let _ = writeln!(
        r,
        "# SmartSAGE: neighbour sampling and end-to-end training (Figs. 6, 7, 14–18)\n\n\
         `sagessd experiment smartsage{}{configs}`. Designs: SSD(mmap) = mmap through the page \
         cache, SmartSAGE(SW) = direct I/O at queue depth 1, SmartSAGE(HW/SW) = in-storage \
         sampling, one NS_config per minibatch. The seed's graphs are many times larger than host \
         memory, and so is this one: {}, on the device. The controller (its DRAM, page buffer and \
         ISP window) is the hardware description's own; only the host page cache varies, holding \
         1/r of the graph for r = {:?}. Direct I/O and in-storage sampling do not read through \
         the page cache: they ran once per worker count and their rows repeat at every r. \
         **Every number is modelled** (virtual time of the hardware description, no wall clock), \
         so two runs write identical files. The paper's averages are over its datasets, each at \
         its own ratio; ours are given at each r.\n",
        if quick { " --quick" } else { "" },
        sweep.graph.describe(),
        sweep.ratios
    );
    for (((source, points), section), at_scale) in devices.iter().zip(sections).zip(at_scale) {
        let Some(first) = points.first() else {
            continue;
        };
        let c = &first.report.config;
        let _ = writeln!(r, "## {} ({source})\n", first.device);
        let _ = writeln!(
            r,
            "Workload: {}, {} minibatches of {} targets, fanouts {:?}, sampling seed {}, each \
             design point after {} warm-up minibatches on the same device and page cache (not \
             counted); host workers {:?} (in storage, those beyond the device's {} sampling slots \
             wait for one); controller page buffer {}.\n",
            c.graph.describe(),
            c.batches,
            c.batch_size,
            c.fanouts,
            c.seed,
            c.warmup_batches,
            c.workers,
            c.hw.firmware.isp_slots,
            human_bytes(
                u64::from(c.hw.firmware.page_buffer_pages) * u64::from(c.hw.nand.page_size_bytes)
            )
        );
        let _ = writeln!(
            r,
            "| r | graph on the device | host page cache | a minibatch's distinct CSR pages | share of the page cache |\n|---|---|---|---|---|"
        );
        for p in points {
            let f = &p.report.footprint;
            let cache = p.report.config.hw.host.page_cache_bytes;
            let _ = writeln!(
                r,
                "| {} | {} | {} | {:.0} ({}) | {:.1} % |",
                p.ratio,
                human_bytes(p.report.graph_bytes()),
                human_bytes(cache),
                f.pages_per_minibatch(),
                human_bytes(f.bytes_per_minibatch() as u64),
                100.0 * f.share_of(cache)
            );
        }
        let columns: Vec<String> = points.iter().map(|p| format!("r = {}", p.ratio)).collect();
        let _ = writeln!(r, "\n### Paper · ours · ratio: sampling (Figs. 14, 16)\n");
        let sampling: Vec<paper::PaperValue> = paper::SMARTSAGE
            .iter()
            .filter(|v| smartsage::ours(points, v.key).is_some())
            .cloned()
            .collect();
        let far = paper_table(
            &mut r,
            &sampling,
            &columns,
            &|key, i| smartsage::ours(&points[i..=i], key),
            &|v| format!("{v:.1}×"),
            &|o| format!("{o:.2}×"),
        );
        if far > 0 {
            let _ = writeln!(
                r,
                "\n{} of these differ from the paper by more than 30 % at some r. What the model shows at each \
                 r (the paper measured a Cosmos+ OpenSSD whose firmware's own Cortex-A9 \
                 samples, on its datasets, host and SSD generation, all unlike this model's):\n",
                far
            );
            for p in points {
                let _ = writeln!(r, "* r = {}: {}", p.ratio, smartsage::diagnosis(p));
            }
        }
        let _ = writeln!(r, "\n{}", at_scale.report);
        if at_scale.far > 0 {
            let _ = writeln!(
                r,
                "{} of these differ from the paper by more than 30 % at some r: the end-to-end \
                 ratios follow the sampling times above wherever the trainer waits for its input \
                 (its idle share is in the table).\n",
                at_scale.far
            );
        }
        let _ = writeln!(
            r,
            "\n### Fig. 14 and Fig. 16: time per minibatch\n\n| ratio | workers | design | ms per minibatch | speedup vs mmap |\n|---|---|---|---|---|"
        );
        for p in points {
            for m in &p.report.results {
                let _ = writeln!(
                    r,
                    "| {} | {} | {} | {:.3} | {:.2}× |",
                    p.ratio,
                    m.workers,
                    smartsage::design(m.mode),
                    m.time_per_minibatch_ns() / 1e6,
                    p.report.speedup_vs_mmap(m).unwrap_or(f64::NAN)
                );
            }
        }
        let _ = writeln!(
            r,
            "\n### Fig. 17: SmartSAGE(HW/SW) over SmartSAGE(SW)\n\n| ratio | workers | speedup |\n|---|---|---|"
        );
        for p in points {
            for &w in &p.report.config.workers {
                let s = p
                    .report
                    .isp_speedup(sagessd_runtime::registry::SamplerKind::Direct, w)
                    .unwrap_or(f64::NAN);
                let _ = writeln!(r, "| {} | {w} | {s:.2}× |", p.ratio);
            }
        }
        let _ = writeln!(
            r,
            "\n### Fig. 15: coalescing granularity\n\nA minibatch's {} targets sent as \
             several NS_configs of fewer targets each, one after another (one worker), modelled \
             as that many requests of that many random targets; every subgraph checked against \
             the in-memory reference. The paper reports no number, only that smaller \
             granularities lose ISP's advantage as command overheads take over.\n\n\
             | ratio | targets per NS_config | NS_configs per minibatch | ms per minibatch | speedup vs mmap |\n|---|---|---|---|---|",
            sweep.batch_size
        );
        for p in points {
            for (g, ns, speedup) in p.coalescing_speedups() {
                let _ = writeln!(
                    r,
                    "| {} | {g} | {} | {:.3} | {:.2}× |",
                    p.ratio,
                    sweep.batch_size / g.max(1),
                    ns / 1e6,
                    speedup.unwrap_or(f64::NAN)
                );
            }
        }
        let _ = writeln!(r, "\n{}", section.report);
    }
    let _ = writeln!(
        r,
        "## Files\n\n`fig14_one_worker.csv`, `fig15_coalescing.csv`, `fig16_workers.csv`, \
         `fig17_hwsw_over_sw.csv`{}: one row per measured point, units in the column names. \
         Plots (SVG and PNG; where the paper reports a value it is dashed): {}.",
        sections
            .iter()
            .flat_map(|s| s.files.iter().filter(|f| f.ends_with(".csv")))
            .map(|f| format!(", `{f}`"))
            .collect::<String>(),
        plots
            .iter()
            .map(|p| format!("`{p}.svg`"))
            .chain(
                sections
                    .iter()
                    .flat_map(|s| s.files.iter().filter(|f| f.ends_with(".svg")))
                    .map(|f| format!("`{f}`"))
            )
            .collect::<Vec<_>>()
            .join(", ")
    );
    r
}
