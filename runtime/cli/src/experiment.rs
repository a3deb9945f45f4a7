//! `sagessd experiment`: its flags; the experiments themselves are `sagessd-experiments`'.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use sagessd_experiments::{Options, Which};

use crate::{hw_source, load_hw};

/// Which seed's comparisons to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Experiment {
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

/// Flags of `experiment`.
#[derive(Debug, Args)]
pub(crate) struct ExperimentArgs {
    /// The experiment.
    #[arg(value_enum)]
    which: Experiment,
    /// A reduced sweep (small graph, one memory ratio, 1 and 2 workers): every output, in
    /// seconds.
    #[arg(long)]
    quick: bool,
    /// Output folder (the experiment writes into its own subfolder).
    #[arg(long, value_name = "DIR", default_value = "target/experiments")]
    out: PathBuf,
    /// Hardware descriptions to run on, repeatable; default: the built-in Cosmos+ OpenSSD.
    #[arg(long, value_name = "PATH")]
    config: Vec<PathBuf>,
}

/// Runs `experiment`: its progress on stderr, what it wrote on stdout.
pub(crate) fn run(args: ExperimentArgs) -> anyhow::Result<ExitCode> {
    let hardware = args
        .config
        .iter()
        .map(|path| Ok((hw_source(Some(path)), load_hw(Some(path))?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let which = match args.which {
        Experiment::Smartsage => Which::Smartsage,
        Experiment::Agnes => Which::Agnes,
        Experiment::Bgl => Which::Bgl,
        Experiment::All => Which::All,
    };
    let options = Options {
        quick: args.quick,
        out: args.out,
        hardware,
    };
    for line in sagessd_experiments::run(which, &options, &mut |line| eprintln!("{line}"))? {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
