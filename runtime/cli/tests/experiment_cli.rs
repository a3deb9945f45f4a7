//! `sagessd experiment smartsage|agnes|bgl|all --quick`: every CSV with its columns, every plot (SVG and
//! PNG, the paper's values drawn where it reports one), the report with every section, its
//! "ours" column recomputed from the CSVs, and two runs byte-identical (every figure is
//! modelled; the end-to-end figures train for real, and their modelled epochs price each step
//! on the `[trainer]` accelerator).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(out: &Path) {
    run_one("smartsage", out);
}

#[test]
fn all_quick_runs_every_experiment_into_its_folder() {
    let out = scratch("all");
    run_one("all", &out);
    for (dir, file) in [
        ("smartsage", "report.md"),
        ("smartsage", "fig18_end_to_end_cosmos-plus.csv"),
        ("agnes", "report.md"),
        ("agnes", "fig9_blocks_and_hyperbatches.csv"),
        ("bgl", "report.md"),
        ("bgl", "bgl_feature_cache.csv"),
    ] {
        let bytes =
            std::fs::read(out.join(dir).join(file)).unwrap_or_else(|e| panic!("{dir}/{file}: {e}"));
        assert!(!bytes.is_empty(), "{dir}/{file} is empty");
    }
    let _ = std::fs::remove_dir_all(&out);
}

fn run_one(which: &str, out: &Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["experiment", which, "--quick", "--out"])
        .arg(out)
        .output()
        .expect("running sagessd");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sagessd-experiment-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The rows of a CSV without quoted commas (the experiment's CSVs have none).
fn rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), header.len(), "{l}");
            header
                .iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

/// Paper quantities, each with ours at an r (recomputed from the CSVs).
type PerRatio<'a> = Vec<(&'a str, Box<dyn Fn(&str) -> f64 + 'a>)>;

#[test]
fn smartsage_quick_writes_every_figure_reproducibly() {
    let (a, b) = (scratch("a"), scratch("b"));
    run(&a);
    run(&b);
    let files = [
        "fig14_one_worker.csv",
        "fig16_workers.csv",
        "fig17_hwsw_over_sw.csv",
        "fig15_coalescing.csv",
        "end_to_end_at_scale.csv",
        "fig6_mmap_slowdown_at_scale_cosmos-plus.svg",
        "fig7_trainer_idle_at_scale_cosmos-plus.svg",
        "fig18_end_to_end_at_scale_cosmos-plus.svg",
        "fig15_cosmos-plus.svg",
        "fig15_cosmos-plus.png",
        "report.md",
        "fig14_cosmos-plus.svg",
        "fig16_cosmos-plus.svg",
        "fig17_cosmos-plus.svg",
        "fig14_cosmos-plus.png",
        "fig16_cosmos-plus.png",
        "fig17_cosmos-plus.png",
        "fig6_end_to_end_breakdown_cosmos-plus.csv",
        "fig7_trainer_idle_cosmos-plus.csv",
        "fig18_end_to_end_cosmos-plus.csv",
        "fig6_mmap_slowdown_cosmos-plus.svg",
        "fig7_trainer_idle_cosmos-plus.svg",
        "fig18_end_to_end_cosmos-plus.svg",
        "fig6_mmap_slowdown_cosmos-plus.png",
        "fig7_trainer_idle_cosmos-plus.png",
        "fig18_end_to_end_cosmos-plus.png",
    ];
    for f in files {
        let (x, y) = (
            std::fs::read(a.join("smartsage").join(f)).unwrap(),
            std::fs::read(b.join("smartsage").join(f)).unwrap(),
        );
        assert!(!x.is_empty(), "{f} is empty");
        if f == "report.md" {
            // The report names its output folder (in each point's command line) and the
            // training runs' wall-clock time; everything else in it is modelled.
            let same = |bytes: Vec<u8>, out: &Path| -> String {
                String::from_utf8(bytes)
                    .unwrap()
                    .replace(&out.display().to_string(), "OUT")
                    .lines()
                    .map(
                        |l| match (l.find("These runs took"), l.find("of wall clock")) {
                            (Some(i), Some(j)) if i < j => format!("{}{}", &l[..i], &l[j..]),
                            _ => l.to_string(),
                        },
                    )
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            assert_eq!(
                same(x, &a),
                same(y, &b),
                "report.md differs between two runs"
            );
            continue;
        }
        assert_eq!(x, y, "{f} differs between two runs");
    }
    let dir = a.join("smartsage");
    for fig in ["fig14", "fig15", "fig16", "fig17"] {
        let svg = std::fs::read_to_string(dir.join(format!("{fig}_cosmos-plus.svg"))).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("(modelled)"),
            "{fig}.svg"
        );
        assert!(svg.contains("(×)"), "{fig}.svg: the y axis names its unit");
        let png = std::fs::read(dir.join(format!("{fig}_cosmos-plus.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{fig}.png is a PNG");
    }
    let svg14 = std::fs::read_to_string(dir.join("fig14_cosmos-plus.svg")).unwrap();
    assert!(svg14.contains("paper"), "Fig. 14 draws the paper's values");
    let fig14 = rows(&dir.join("fig14_one_worker.csv"));
    let designs: Vec<(&str, &str)> = fig14
        .iter()
        .map(|r| (r["r"].as_str(), r["design"].as_str()))
        .collect();
    assert_eq!(
        designs,
        [
            ("1", "SSD(mmap)"),
            ("1", "SmartSAGE(SW)"),
            ("1", "SmartSAGE(HW/SW)"),
            ("8", "SSD(mmap)"),
            ("8", "SmartSAGE(SW)"),
            ("8", "SmartSAGE(HW/SW)"),
        ]
    );
    for col in [
        "r",
        "graph_bytes",
        "host_page_cache_bytes",
        "controller_buffer_bytes",
        "graph_to_page_cache_ratio",
        "footprint_share_of_page_cache",
        "time_per_minibatch_ns",
        "speedup_vs_mmap",
        "nand_pages_read",
    ] {
        assert!(fig14[0].contains_key(col), "fig14 lacks {col}");
    }
    // Fixed hardware: the controller's page buffer is the description's 16 MiB at every r;
    // only the host page cache is graph / r, and the footprint's share follows it.
    let num = |r: &BTreeMap<String, String>, c: &str| -> f64 { r[c].parse().unwrap() };
    for row in &fig14 {
        assert_eq!(row["controller_buffer_bytes"], (16u64 << 20).to_string());
        let (graph, cache, r) = (
            num(row, "graph_bytes"),
            num(row, "host_page_cache_bytes"),
            num(row, "r"),
        );
        assert!(graph > 16.0 * 1024.0 * 1024.0, "larger than the buffer");
        assert!((graph / r - cache).abs() < 4096.0, "{row:?}");
        let footprint = num(row, "footprint_bytes_per_minibatch");
        assert!((num(row, "footprint_share_of_page_cache") - footprint / cache).abs() < 1e-9);
        // Every design point first sampled the quick sweep's two warm-up minibatches.
        assert_eq!(row["warmup_minibatches"], "2", "{row:?}");
    }
    // Direct I/O and ISP do not read through the page cache: their rows repeat at every r;
    // mmap's do not.
    let at = |r: &str, d: &str| {
        fig14
            .iter()
            .find(|x| x["r"] == r && x["design"] == d)
            .unwrap()["time_per_minibatch_ns"]
            .clone()
    };
    assert_eq!(at("1", "SmartSAGE(SW)"), at("8", "SmartSAGE(SW)"));
    assert_eq!(at("1", "SmartSAGE(HW/SW)"), at("8", "SmartSAGE(HW/SW)"));
    assert_ne!(at("1", "SSD(mmap)"), at("8", "SSD(mmap)"));
    let fig16 = rows(&dir.join("fig16_workers.csv"));
    assert_eq!(fig16.len(), 12, "2 ratios × 3 designs × 2 worker counts");
    // Fig. 15: the whole minibatch in one NS_config is Fig. 14's in-storage run; a finer
    // granularity pays more commands (and resamples nodes shared between its NS_configs).
    let fig15 = rows(&dir.join("fig15_coalescing.csv"));
    let per_config: Vec<&str> = fig15
        .iter()
        .map(|r| r["targets_per_ns_config"].as_str())
        .collect();
    assert_eq!(per_config, ["256", "16"]);
    assert_eq!(fig15[1]["ns_configs_per_minibatch"], "16");
    let isp_one = fig14
        .iter()
        .find(|r| r["design"] == "SmartSAGE(HW/SW)")
        .unwrap()["time_per_minibatch_ns"]
        .parse::<f64>()
        .unwrap();
    let t15: Vec<f64> = fig15
        .iter()
        .map(|r| r["time_per_minibatch_ns"].parse().unwrap())
        .collect();
    assert_eq!(
        t15[0], isp_one,
        "one NS_config per minibatch is Fig. 14's run"
    );
    assert!(
        t15[1] > t15[0],
        "16 NS_configs per minibatch cost more: {t15:?}"
    );
    let fig18 = rows(&dir.join("fig18_end_to_end_cosmos-plus.csv"));
    let designs: Vec<&str> = fig18.iter().map(|r| r["design"].as_str()).collect();
    assert_eq!(
        designs,
        [
            "DRAM-only",
            "SSD(mmap)",
            "SmartSAGE(SW)",
            "SmartSAGE(HW/SW)",
            "SmartSAGE(oracle)"
        ]
    );
    for col in [
        "graph_to_memory_ratio",
        "modelled_epoch_s",
        "modelled_train_s",
        "modelled_input_wait_s",
        "trainer_idle_fraction",
        "speedup_vs_mmap",
        "performance_vs_dram_only",
        "test_accuracy",
    ] {
        assert!(fig18[0].contains_key(col), "fig18 lacks {col}");
    }
    assert_eq!(
        fig18[4]["device"], "newport",
        "the oracle has dedicated ISP cores"
    );
    let accuracy: f64 = fig18[0]["test_accuracy"].parse().unwrap();
    assert!(accuracy > 0.25, "4 classes: the model learns ({accuracy})");
    assert!(
        fig18
            .iter()
            .all(|r| r["test_accuracy"] == fig18[0]["test_accuracy"]),
        "every design trains on the same minibatches"
    );
    let fig6 = rows(&dir.join("fig6_end_to_end_breakdown_cosmos-plus.csv"));
    assert_eq!(fig6.len(), 2, "DRAM-only and SSD(mmap)");
    assert!(fig6[0].contains_key("slowdown_vs_dram_only"));
    assert_eq!(
        rows(&dir.join("fig7_trainer_idle_cosmos-plus.csv")).len(),
        5
    );
    let epoch = |design: &str| -> f64 {
        fig18.iter().find(|r| r["design"] == design).unwrap()["modelled_epoch_s"]
            .parse()
            .unwrap()
    };
    for r in &fig18 {
        let e: f64 = r["modelled_epoch_s"].parse().unwrap();
        let train: f64 = r["modelled_train_s"].parse().unwrap();
        let idle: f64 = r["trainer_idle_fraction"].parse().unwrap();
        // The trainer is busy (training) or idle (waiting): idle share × epoch is the wait,
        // from the timeline's own idle count.
        assert!(e > 0.0 && train > 0.0 && train <= e, "{r:?}");
        assert!((idle * e - (e - train)).abs() < 1e-6 * e, "{r:?}");
        let vs: f64 = r["speedup_vs_mmap"].parse().unwrap();
        assert!((vs - epoch("SSD(mmap)") / e).abs() < 1e-9, "{r:?}");
    }
    assert_eq!(rows(&dir.join("fig17_hwsw_over_sw.csv")).len(), 4);

    // The report's "ours" columns are what the CSVs say: sampling at each r (a mean or maximum
    // at one r is that r's value), end to end at the training runs' one ratio.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for section in [
        "### Paper · ours · ratio: sampling (Figs. 14, 16)",
        "#### Paper · ours · ratio: end to end (Figs. 6, 18)",
        "### Figs. 6, 7, 18 at scale: end-to-end training, modelled",
        "The step model against a measurement: SALIENT's GraphSAGE step on an NVIDIA V100",
        "### Fig. 14 and Fig. 16: time per minibatch",
        "### Fig. 17: SmartSAGE(HW/SW) over SmartSAGE(SW)",
        "### Fig. 15: coalescing granularity",
        "### Real training on a small graph: accuracy (Figs. 6, 7, 18 in the scaled-down regime)",
        "sagessd train --dataset",
        "| r | graph on the device | host page cache | a minibatch's distinct CSR pages | share of the page cache |",
        "**Every number is modelled**",
    ] {
        assert!(report.contains(section), "report lacks {section:?}");
    }
    let time = |rows: &[BTreeMap<String, String>], r: &str, design: &str, workers: &str| -> f64 {
        rows.iter()
            .find(|x| x["r"] == r && x["design"] == design && x["workers"] == workers)
            .unwrap_or_else(|| panic!("no row {design} × {workers} at r = {r}"))
            ["time_per_minibatch_ns"]
            .parse()
            .unwrap()
    };
    let (mmap, sw, hwsw) = ("SSD(mmap)", "SmartSAGE(SW)", "SmartSAGE(HW/SW)");
    let sampling: PerRatio = {
        let one = |r: &str, d| time(&fig14, r, d, "1");
        let two = |r: &str, d| time(&fig16, r, d, "2");
        vec![
            (
                "SmartSAGE(SW) (direct I/O) over mmap, one worker, average",
                Box::new(move |r| one(r, mmap) / one(r, sw)),
            ),
            (
                "SmartSAGE(HW/SW) (ISP) over mmap, one worker, average",
                Box::new(move |r| one(r, mmap) / one(r, hwsw)),
            ),
            (
                "SmartSAGE(HW/SW) over mmap, one worker, maximum",
                Box::new(move |r| one(r, mmap) / one(r, hwsw)),
            ),
            (
                "SmartSAGE(HW/SW) over SmartSAGE(SW), one worker, average",
                Box::new(move |r| one(r, sw) / one(r, hwsw)),
            ),
            (
                "SmartSAGE(HW/SW) over SmartSAGE(SW), one worker, maximum",
                Box::new(move |r| one(r, sw) / one(r, hwsw)),
            ),
            (
                "SmartSAGE(HW/SW) over mmap, several workers, average",
                Box::new(move |r| two(r, mmap) / two(r, hwsw)),
            ),
            (
                "SmartSAGE(HW/SW) over mmap, several workers, maximum",
                Box::new(move |r| two(r, mmap) / two(r, hwsw)),
            ),
        ]
    };
    // End to end at scale: the figures' worker count, per r, from the CSV's modelled times.
    let at_scale = rows(&dir.join("end_to_end_at_scale.csv"));
    assert!(
        at_scale.iter().any(|r| r["figures_workers"] == "true"),
        "the figures name their worker count"
    );
    let e2e = |r: &str, design: &str| -> f64 {
        at_scale
            .iter()
            .find(|x| x["r"] == r && x["design"] == design && x["figures_workers"] == "true")
            .unwrap_or_else(|| panic!("no end-to-end row {design} at r = {r}"))["modelled_time_ns"]
            .parse()
            .unwrap()
    };
    let end_to_end: PerRatio = vec![
        (
            "slowdown of SSD(mmap) against in-memory processing, average",
            Box::new(move |r| e2e(r, mmap) / e2e(r, "DRAM-only")),
        ),
        (
            "slowdown of SSD(mmap) against in-memory processing, maximum",
            Box::new(move |r| e2e(r, mmap) / e2e(r, "DRAM-only")),
        ),
        (
            "training throughput of SmartSAGE(HW/SW) over SSD(mmap), average",
            Box::new(move |r| e2e(r, mmap) / e2e(r, hwsw)),
        ),
        (
            "training throughput of SmartSAGE(HW/SW) over SSD(mmap), maximum",
            Box::new(move |r| e2e(r, mmap) / e2e(r, hwsw)),
        ),
        (
            "performance of SmartSAGE(HW/SW) as a share of DRAM-only",
            Box::new(move |r| e2e(r, "DRAM-only") / e2e(r, hwsw)),
        ),
        (
            "performance of SmartSAGE(oracle) as a share of DRAM-only",
            Box::new(move |r| e2e(r, "DRAM-only") / e2e(r, "SmartSAGE(oracle)")),
        ),
    ];
    for row in &at_scale {
        // Every row states its regime, and the trainer is busy or idle.
        assert_eq!(row["controller_buffer_bytes"], (16u64 << 20).to_string());
        let idle: f64 = row["trainer_idle_fraction"].parse().unwrap();
        let (time, train) = (num(row, "modelled_time_ns"), num(row, "modelled_train_ns"));
        assert!((0.0..1.0).contains(&idle) && train <= time, "{row:?}");
        assert!((idle * time - (time - train)).abs() <= 2.0, "{row:?}");
    }
    let table: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("| SmartSAGE Fig."))
        .collect();
    assert_eq!(
        table.len(),
        sampling.len() + end_to_end.len(),
        "one row per paper value"
    );
    let row = |quantity: &str| -> Vec<String> {
        let line = table
            .iter()
            .find(|l| l.contains(quantity))
            .unwrap_or_else(|| panic!("no row {quantity:?}"));
        line.split('|').map(|c| c.trim().to_string()).collect()
    };
    let cell = |v: f64, paper: &str| -> String {
        let paper: f64 = paper.trim_end_matches('×').parse().unwrap();
        format!("{v:.2}× ({:.2})", v / paper)
    };
    for (quantity, value) in sampling.iter().chain(&end_to_end) {
        let cells = row(quantity);
        // | figure | quantity | paper | r = 1 | r = 8 | within |
        assert_eq!(cells[4], cell(value("1"), &cells[3]), "{quantity} at r = 1");
        assert_eq!(cells[5], cell(value("8"), &cells[3]), "{quantity} at r = 8");
    }
    // Fig. 17 is ISP over direct I/O, per worker count, as Fig. 16's times give it.
    for r in rows(&dir.join("fig17_hwsw_over_sw.csv")) {
        let w = r["workers"].as_str();
        let got: f64 = r["hwsw_speedup_vs_sw"].parse().unwrap();
        let t = |d| time(&fig16, &r["r"], d, w);
        assert!((got - t(sw) / t(hwsw)).abs() < 1e-9, "{r:?}");
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn agnes_quick_writes_both_sweeps_reproducibly() {
    let (a, b) = (scratch("agnes-a"), scratch("agnes-b"));
    run_one("agnes", &a);
    run_one("agnes", &b);
    for f in [
        "fig9_blocks_and_hyperbatches.csv",
        "report.md",
        "fig9a_cosmos-plus.svg",
        "fig9b_cosmos-plus.svg",
        "fig9a_cosmos-plus.png",
        "fig9b_cosmos-plus.png",
        "small_reads.csv",
        "small_reads_cosmos-plus.svg",
        "small_reads_cosmos-plus.png",
        "feature_threshold.csv",
        "feature_threshold.svg",
        "feature_threshold.png",
        "fig8_ratios.csv",
        "fig8_ratios_cosmos-plus.svg",
        "fig8_ratios_cosmos-plus.png",
    ] {
        let (x, y) = (
            std::fs::read(a.join("agnes").join(f)).unwrap(),
            std::fs::read(b.join("agnes").join(f)).unwrap(),
        );
        assert!(!x.is_empty(), "{f} is empty");
        assert_eq!(x, y, "{f} differs between two runs");
    }
    let dir = a.join("agnes");
    let points = rows(&dir.join("fig9_blocks_and_hyperbatches.csv"));
    assert_eq!(points.len(), 4, "2 block sizes and 2 hyperbatches");
    let epoch = |r: &BTreeMap<String, String>| -> u64 { r["epoch_ns"].parse().unwrap() };
    for r in &points {
        let parts: u64 =
            r["device_ns"].parse::<u64>().unwrap() + r["host_ns"].parse::<u64>().unwrap();
        assert_eq!(epoch(r), parts, "the epoch is device plus host time");
        // A point that sampled part of its epoch says so.
        let whole = r["sampled_minibatches"] == r["epoch_minibatches"];
        let timing = if whole {
            "modelled"
        } else {
            "modelled (extrapolated)"
        };
        assert_eq!(r["timing"], timing, "{r:?}");
        assert!(r["storage_reads"].parse::<u64>().unwrap() > 0);
    }
    // Per-minibatch AGNES samples two of the epoch's eight minibatches; hyperbatches of 8 the
    // whole epoch.
    let sampled: Vec<(&str, &str)> = points
        .iter()
        .filter(|r| r["sweep"] == "hyperbatch")
        .map(|r| {
            (
                r["hyperbatch_minibatches"].as_str(),
                r["sampled_minibatches"].as_str(),
            )
        })
        .collect();
    assert_eq!(sampled, [("1", "2"), ("8", "8")]);
    // AGNES without and with hyperbatches against the host's small reads of the same epoch
    // and in-storage sampling: direct I/O and io_uring read the same blocks, io_uring in fewer
    // system calls; in-storage hyperbatches read fewer flash pages than an NS_config per
    // minibatch.
    let small = rows(&dir.join("small_reads.csv"));
    let designs: Vec<(&str, &str)> = small
        .iter()
        .map(|r| (r["sampler"].as_str(), r["hyperbatch_minibatches"].as_str()))
        .collect();
    assert_eq!(
        designs,
        [
            ("AGNES", "1"),
            ("AGNES", "8"),
            ("direct I/O", "1"),
            ("io_uring", "1"),
            ("ISP", "1"),
            ("ISP hyperbatch", "4"),
        ]
    );
    let (direct, uring) = (&small[2], &small[3]);
    assert_eq!(direct["storage_reads"], uring["storage_reads"]);
    assert_eq!(direct["bytes_read"], uring["bytes_read"]);
    assert!(epoch(uring) < epoch(direct), "io_uring batches its reads");
    let (isp, isp_hb) = (&small[4], &small[5]);
    let pages = |r: &BTreeMap<String, String>| r["storage_reads"].parse::<u64>().unwrap();
    assert!(pages(isp_hb) < pages(isp), "{isp_hb:?} against {isp:?}");
    for r in &small {
        let parts: u64 =
            r["device_ns"].parse::<u64>().unwrap() + r["host_ns"].parse::<u64>().unwrap();
        assert_eq!(epoch(r), parts, "{r:?}");
    }
    // Fig. 8 at each graph-to-memory ratio: with and without hyperbatches, the buffer 1/ratio.
    let ratios = rows(&dir.join("fig8_ratios.csv"));
    let shape: Vec<(&str, &str)> = ratios
        .iter()
        .map(|r| {
            (
                r["graph_to_memory_ratio"].as_str(),
                r["hyperbatch_minibatches"].as_str(),
            )
        })
        .collect();
    assert_eq!(shape, [("1", "1"), ("1", "8"), ("32", "1"), ("32", "8")]);
    assert!(ratios.iter().all(|r| r["sweep"] == "ratio"));
    // The threshold sweep: counts, the same rows gathered at every threshold.
    let thresholds = rows(&dir.join("feature_threshold.csv"));
    assert_eq!(thresholds.len(), 2);
    assert_eq!(
        thresholds[0]["rows_gathered"],
        thresholds[1]["rows_gathered"]
    );
    for r in &thresholds {
        assert_eq!(r["timing"], "counts");
        // On the sweep's own graph: 400,000 nodes of 16 f32, the cache 10 % of that table.
        assert_eq!(r["cache_bytes"], (400_000 * 16 * 4 / 100 * 10).to_string());
        assert_eq!(r["minibatches"], "32");
        let h: f64 = r["cache_hit_ratio"].parse().unwrap();
        assert!((0.0..=1.0).contains(&h), "{r:?}");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for section in [
        "### AGNES against small reads",
        "## The feature cache's threshold",
    ] {
        assert!(report.contains(section), "report lacks {section:?}");
    }
    // The report's optima and Fig. 8's ratio, recomputed from the CSV.
    let hyper: Vec<_> = points
        .iter()
        .filter(|r| r["sweep"] == "hyperbatch")
        .collect();
    let best = hyper.iter().min_by_key(|r| epoch(r)).unwrap();
    let none = hyper
        .iter()
        .find(|r| r["hyperbatch_minibatches"] == "1")
        .unwrap();
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let ours = |figure: &str| -> String {
        let line = report
            .lines()
            .find(|l| l.starts_with(&format!("| {figure} |")))
            .unwrap_or_else(|| panic!("no row {figure}"));
        // "ours (ours / paper)"
        let cell = line.split('|').nth(4).unwrap().trim();
        cell.split(" (").next().unwrap().to_string()
    };
    assert_eq!(
        ours("AGNES Fig. 9(b)"),
        format!(
            "{:.1}",
            best["hyperbatch_minibatches"].parse::<f64>().unwrap()
        )
    );
    // Fig. 8's maximum: over the hyperbatch sweep's best and each ratio's largest hyperbatch.
    let speedup = |without: &BTreeMap<String, String>, with: &BTreeMap<String, String>| {
        epoch(without) as f64 / epoch(with) as f64
    };
    let per_ratio = ratios.chunks(2).map(|pair| speedup(&pair[0], &pair[1]));
    let max = per_ratio.fold(speedup(none, best), f64::max);
    assert_eq!(ours("AGNES Fig. 8"), format!("{max:.1}"));
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn bgl_quick_counts_every_cache_order_and_size_reproducibly() {
    let (a, b) = (scratch("bgl-a"), scratch("bgl-b"));
    run_one("bgl", &a);
    run_one("bgl", &b);
    for f in [
        "bgl_feature_cache.csv",
        "bgl_hit_ratio.svg",
        "bgl_hit_ratio.png",
        "bgl_bytes_read.svg",
        "bgl_bytes_read.png",
    ] {
        let (x, y) = (
            std::fs::read(a.join("bgl").join(f)).unwrap(),
            std::fs::read(b.join("bgl").join(f)).unwrap(),
        );
        assert!(!x.is_empty(), "{f} is empty");
        assert_eq!(x, y, "{f} differs between two runs");
    }
    let dir = a.join("bgl");
    let points = rows(&dir.join("bgl_feature_cache.csv"));
    assert_eq!(points.len(), 8, "2 caches × 2 orders × 2 sizes");
    let num = |r: &BTreeMap<String, String>, k: &str| -> f64 { r[k].parse().unwrap() };
    for r in &points {
        assert_eq!(r["timing"], "counts");
        // A warm-up epoch (1,928 training nodes of 16 targets: 121 minibatches) before the
        // 32 counted ones.
        assert_eq!(num(r, "warmup_minibatches"), 121.0, "{r:?}");
        assert_eq!(num(r, "minibatches"), 32.0, "{r:?}");
        // The quick graph's computed table (16 f32 values a node).
        assert_eq!(num(r, "feature_table_bytes"), num(r, "graph_nodes") * 64.0);
        assert!(num(r, "training_nodes") > 0.0 && num(r, "training_nodes") < num(r, "graph_nodes"));
        assert_eq!(
            num(r, "cache_bytes"),
            (num(r, "feature_table_bytes") / 100.0).floor() * num(r, "cache_percent_of_features"),
            "{r:?}"
        );
        let ratio = num(r, "cache_hit_ratio");
        assert!((0.0..=1.0).contains(&ratio), "{r:?}");
        // Every row the cache missed was read: at least the missed rows' bytes.
        let rows_gathered = num(r, "rows_gathered");
        let row_bytes = 16.0 * 4.0;
        assert!(
            num(r, "bytes_read") >= (1.0 - ratio) * rows_gathered * row_bytes - 1e-6,
            "{r:?}"
        );
    }
    // Every policy and size gathered the same minibatches of an order.
    for order in ["random", "bgl"] {
        let gathered: Vec<&str> = points
            .iter()
            .filter(|r| r["order"] == order)
            .map(|r| r["rows_gathered"].as_str())
            .collect();
        assert!(
            gathered.len() == 4 && gathered.iter().all(|g| *g == gathered[0]),
            "{order}: {gathered:?}"
        );
    }
    // A larger cache never lowers FIFO's hit ratio for the same order.
    for order in ["random", "bgl"] {
        let fifo: Vec<f64> = points
            .iter()
            .filter(|r| r["cache"] == "BGL FIFO" && r["order"] == order)
            .map(|r| num(r, "cache_hit_ratio"))
            .collect();
        assert!(fifo.len() == 2 && fifo[1] >= fifo[0], "{order}: {fifo:?}");
    }
    // The profile is wall clock (never compared between runs) and chose workers.
    let profile = rows(&dir.join("bgl_profile.csv"));
    assert_eq!(profile.len(), 1);
    assert_eq!(profile[0]["timing"], "wall clock");
    assert!(num(&profile[0], "sample_workers") >= 1.0);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for section in [
        "## BGL's claims (§3.2.2), checked at every cache size",
        "## Hit ratio and gather I/O",
        "## Stage profile (§3.4), wall clock",
        "**Counts**",
    ] {
        assert!(report.contains(section), "report lacks {section:?}");
    }
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}
