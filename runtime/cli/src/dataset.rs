//! `sagessd dataset`: generate, import, reorder and describe dataset folders.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

/// The `dataset` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DatasetCommand {
    /// Generate an R-MAT graph with community-correlated labels and features (and splits) into
    /// a dataset folder.
    Generate(DatasetGenerateArgs),
    /// Import a graph into a dataset folder.
    #[command(subcommand)]
    Import(DatasetImportCommand),
    /// Write a dataset renumbered for locality (degree or BFS order), original ids kept.
    Reorder(DatasetReorderArgs),
    /// Print a dataset's manifest summary and degree statistics; `--verify` also checks every
    /// array against its checksum.
    Info(DatasetInfoArgs),
    /// Print a dataset's degree and neighbour-gap profile as TOML: what a synthetic graph
    /// (`--graph synthetic:N:PROFILE`) copies from it.
    Profile(DatasetProfileArgs),
    /// Print what sampling minibatches reads from each graph's on-device CSR: distinct 4 KiB
    /// pages per minibatch and per destination node, and the pages a node's list spans.
    Footprint(DatasetFootprintArgs),
}

/// Flags of `dataset footprint`.
#[derive(Debug, Args)]
pub(crate) struct DatasetFootprintArgs {
    /// Graphs to measure (repeat the flag): rmat:SCALE[:EDGE_FACTOR[:SEED]],
    /// synthetic:NODES[,seed=S][,local-bins=B][,profile=FILE], papers100m, or a dataset folder.
    // clap's help text, not intra-doc links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long = "graph", required = true)]
    graphs: Vec<String>,
    #[command(flatten)]
    workload: crate::workload_args::WorkloadArgs,
}

/// Flags of `dataset profile`.
#[derive(Debug, Args)]
pub(crate) struct DatasetProfileArgs {
    /// The dataset folder.
    dir: PathBuf,
    /// Name the profile gives the graph (default: the dataset's name).
    #[arg(long)]
    name: Option<String>,
    /// Where the graph comes from, for the profile's `source` field (default: the dataset's
    /// source).
    #[arg(long)]
    source: Option<String>,
}

/// The formats `dataset import` reads.
#[derive(Debug, Subcommand)]
pub(crate) enum DatasetImportCommand {
    /// A SNAP edge list (text, `#` comments, optionally `.gz`).
    Snap(SnapImportArgs),
    /// OGB-style arrays: a folder of .npy files or one .npz (edge_index or indptr/indices,
    /// node_feat, node_label, train_idx/valid_idx/test_idx).
    Ogb(SnapImportArgs),
    /// Cora from the graphdatascience==2.2 wheel (scripts/setup.sh downloads it into
    /// target/downloads/, found from any folder), or a folder with its two Parquet files.
    Cora(CoraImportArgs),
}

/// Flags of `dataset import cora`.
#[derive(Debug, Args)]
pub(crate) struct CoraImportArgs {
    /// The wheel or folder. Without it, the wheel in `target/downloads/` of the working folder,
    /// of the repository this sagessd was built in, or of a folder above the working folder.
    input: Option<PathBuf>,
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Flags of `dataset generate`.
#[derive(Debug, Args)]
pub(crate) struct DatasetGenerateArgs {
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Write a synthetic graph instead (synthetic:NODES[,seed=S][,local-bins=B][,profile=FILE]
    /// or papers100m): its CSR only, the bytes the emulator's flash computes, for the real-file
    /// samplers. The R-MAT flags below are then unused.
    // clap's help text, not intra-doc links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "GRAPH")]
    graph: Option<String>,
    /// R-MAT scale: 2^SCALE nodes.
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// Edges drawn per node.
    #[arg(long, default_value_t = 8)]
    edge_factor: u32,
    /// Seed of graph, labels, features and splits.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Feature dimension (0: none).
    #[arg(long, default_value_t = 64)]
    features: u32,
    /// Feature element type: f32 or f16.
    #[arg(long, default_value = "f32")]
    feature_dtype: String,
    /// Label classes.
    #[arg(long, default_value_t = 8)]
    classes: u32,
    /// Dataset name (default: rmat-SCALE-EDGE_FACTOR).
    #[arg(long)]
    name: Option<String>,
}

/// Flags of `dataset import snap`.
#[derive(Debug, Args)]
pub(crate) struct SnapImportArgs {
    /// The edge-list file to import (plain, or gzip-compressed as `.gz`).
    input: PathBuf,
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Add the reverse of every edge.
    #[arg(long)]
    symmetric: bool,
}

/// Flags of `dataset reorder`.
#[derive(Debug, Args)]
pub(crate) struct DatasetReorderArgs {
    /// The dataset folder.
    dir: PathBuf,
    /// Order: degree (decreasing) or bfs (breadth-first from the highest-degree node).
    #[arg(long, default_value = "bfs")]
    by: String,
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Flags of `dataset info`.
#[derive(Debug, Args)]
pub(crate) struct DatasetInfoArgs {
    /// The dataset folder.
    dir: PathBuf,
    /// Check every array against its CRC32C (reads everything).
    #[arg(long)]
    verify: bool,
}

/// `dataset generate|import|info`.
pub(crate) fn run(command: DatasetCommand) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::dataset::{Dataset, generate, snap};
    use sagessd_runtime::npy::Dtype;
    let wall = std::time::Instant::now();
    let dataset = match command {
        DatasetCommand::Footprint(a) => return footprint(&a),
        DatasetCommand::Profile(a) => {
            let d = Dataset::open(&a.dir)?;
            let name = a.name.unwrap_or_else(|| d.manifest.name.clone());
            let source = a.source.unwrap_or_else(|| d.manifest.source.clone());
            let profile = sagessd_runtime::dataset::profile::profile(&d.graph()?, &name, &source);
            print!("{}", profile.to_toml());
            return Ok(ExitCode::SUCCESS);
        }
        DatasetCommand::Generate(DatasetGenerateArgs {
            out,
            graph: Some(word),
            name,
            ..
        }) => {
            use sagessd_runtime::graph_spec::{GraphSpec, WorkloadGraph};
            let spec = GraphSpec::parse(&word).map_err(anyhow::Error::msg)?;
            let WorkloadGraph::Synthetic(graph) = spec.build().map_err(anyhow::Error::msg)? else {
                anyhow::bail!(
                    "--graph {word}: give a synthetic graph (R-MAT: --scale, --edge-factor)"
                );
            };
            let bar = indicatif::ProgressBar::new(graph.indptr_bytes() + graph.indices_bytes());
            let d = sagessd_runtime::synthetic::write_dataset(
                &graph,
                &out,
                &name.unwrap_or_else(|| word.clone()),
                &format!("sagessd {} (--graph {})", spec.describe(), spec.word()),
                &mut |done, _| bar.set_position(done),
            )?;
            bar.finish_and_clear();
            d
        }
        DatasetCommand::Generate(a) => {
            let feature_dtype = match a.feature_dtype.as_str() {
                "f32" => Dtype::F32,
                "f16" => Dtype::F16,
                other => anyhow::bail!("--feature-dtype {other:?}: f32 or f16"),
            };
            let params = generate::GenerateParams {
                name: a
                    .name
                    .unwrap_or_else(|| format!("rmat-{}-{}", a.scale, a.edge_factor)),
                scale: a.scale,
                edge_factor: a.edge_factor,
                seed: a.seed,
                feature_dim: a.features,
                feature_dtype,
                classes: a.classes,
            };
            generate::generate(&a.out, &params)?
        }
        DatasetCommand::Import(DatasetImportCommand::Snap(a)) => {
            snap::import(&a.input, &a.out, a.symmetric)?
        }
        DatasetCommand::Import(DatasetImportCommand::Cora(a)) => {
            let input = match a.input {
                Some(input) => input,
                None => sagessd_runtime::dataset::cora::find_wheel(&[])?,
            };
            sagessd_runtime::dataset::cora::import(&input, &a.out)?
        }
        DatasetCommand::Import(DatasetImportCommand::Ogb(a)) => {
            sagessd_runtime::dataset::ogb::import(&a.input, &a.out, a.symmetric)?
        }
        DatasetCommand::Reorder(a) => {
            use sagessd_runtime::dataset::reorder::{Order, reorder};
            let by = match a.by.as_str() {
                "degree" => Order::Degree,
                "bfs" => Order::Bfs,
                other => anyhow::bail!("--by {other:?}: degree or bfs"),
            };
            reorder(&Dataset::open(&a.dir)?, by, &a.out)?
        }
        DatasetCommand::Info(a) => {
            let d = Dataset::open(&a.dir)?;
            if a.verify {
                d.verify()?;
                println!("checksums: all arrays match their manifest CRC32C");
            }
            d
        }
    };
    let m = &dataset.manifest;
    println!("dataset {} ({})", m.name, dataset.dir().display());
    println!("  source        {}", m.source);
    println!(
        "  nodes         {:>14}\n  CSR entries   {:>14}   ({})",
        m.node_count,
        m.edge_count,
        if m.symmetric { "symmetric" } else { "directed" }
    );
    if let Some(c) = m.class_count {
        println!("  classes       {c:>14}");
    }
    for (name, entry) in dataset.arrays() {
        println!(
            "  {name:<13} {:<14} {:>6} {:?}  crc32c {}",
            entry.file, entry.dtype, entry.shape, entry.crc32c
        );
    }
    let stats = dataset.graph()?.degree_stats();
    println!(
        "  degrees       mean {:.2}, median {}, max {}, isolated {}",
        stats.mean, stats.median, stats.max, stats.isolated
    );
    eprintln!("(wall-clock time: {:.1} s)", wall.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

/// `dataset footprint`: one row per graph.
fn footprint(a: &DatasetFootprintArgs) -> anyhow::Result<ExitCode> {
    use sagessd::compare::human_bytes;
    use sagessd::footprint;
    use sagessd_runtime::graph_spec::GraphSpec;
    println!(
        "{}; pages of 4 KiB of the on-device CSR (8-byte indptr, 4-byte indices)",
        a.workload.workload().describe()
    );
    println!(
        "{:<60} {:>11} {:>13} {:>10} {:>10} {:>12} {:>11} {:>10} {:>10}",
        "graph",
        "nodes",
        "CSR entries",
        "CSR",
        "dst/mb",
        "pages/mb",
        "MiB/mb",
        "pages/dst",
        "list pg"
    );
    for word in &a.graphs {
        let spec = GraphSpec::parse(word).map_err(anyhow::Error::msg)?;
        let graph = spec.build().map_err(|e| anyhow::anyhow!("{word}: {e}"))?;
        let host = graph.host();
        let requests = a.workload.workload().requests(host.node_count());
        let f = footprint::measure(host, &requests, &a.workload.fanouts)?;
        println!(
            "{:>11} {:>13} {:>10} {:>8.0} {:>9.0} {:>7.2} {:>9.3} {:>7.3}  {}",
            host.node_count(),
            host.edge_count(),
            human_bytes(graph.csr_bytes()),
            f.dst_nodes as f64 / f64::from(a.workload.batches.max(1)),
            f.pages_per_minibatch(),
            f.bytes_per_minibatch() / f64::from(1 << 20),
            f.pages_per_node(),
            f.list_pages_per_node(),
            spec.describe(),
        );
    }
    println!(
        "dst/mb: destination nodes of every layer per minibatch; pages/mb: distinct indptr + indices pages a minibatch reads"
    );
    println!(
        "pages/dst: those pages per destination node; list pg: pages a destination's whole list spans, on average"
    );
    Ok(ExitCode::SUCCESS)
}
