//! The seeds' reported figures that the experiments are compared with, each with the figure
//! whose text states it (`shared/seeds/smartsage.txt`, the paragraphs on Fig. 6 and the
//! evaluation's on Figs. 14, 16 and 18; `shared/seeds/agnes.txt`, those on Figs. 8 and 9). Values are only ever read from
//! here, never fitted.

/// One reported value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PaperValue {
    /// A stable key the experiment uses to find its value.
    pub key: &'static str,
    /// The paper and figure.
    pub figure: &'static str,
    /// What the value is.
    pub quantity: &'static str,
    /// The value.
    pub value: f64,
}

/// SmartSAGE (ISCA 2022), its evaluation section.
pub(crate) const SMARTSAGE: &[PaperValue] = &[
    PaperValue {
        key: "fig14.sw_vs_mmap.mean",
        figure: "SmartSAGE Fig. 14",
        quantity: "neighbour sampling speedup of SmartSAGE(SW) (direct I/O) over mmap, one worker, average",
        value: 1.5,
    },
    PaperValue {
        key: "fig14.hwsw_vs_mmap.mean",
        figure: "SmartSAGE Fig. 14",
        quantity: "neighbour sampling speedup of SmartSAGE(HW/SW) (ISP) over mmap, one worker, average",
        value: 10.1,
    },
    PaperValue {
        key: "fig14.hwsw_vs_mmap.max",
        figure: "SmartSAGE Fig. 14",
        quantity: "neighbour sampling speedup of SmartSAGE(HW/SW) over mmap, one worker, maximum",
        value: 12.6,
    },
    PaperValue {
        key: "fig14.hwsw_vs_sw.mean",
        figure: "SmartSAGE Fig. 14",
        quantity: "neighbour sampling speedup of SmartSAGE(HW/SW) over SmartSAGE(SW), one worker, average",
        value: 6.6,
    },
    PaperValue {
        key: "fig14.hwsw_vs_sw.max",
        figure: "SmartSAGE Fig. 14",
        quantity: "neighbour sampling speedup of SmartSAGE(HW/SW) over SmartSAGE(SW), one worker, maximum",
        value: 7.8,
    },
    PaperValue {
        key: "fig16.hwsw_vs_mmap.mean",
        figure: "SmartSAGE Fig. 16",
        quantity: "neighbour sampling speedup of SmartSAGE(HW/SW) over mmap, several workers, average",
        value: 4.4,
    },
    PaperValue {
        key: "fig16.hwsw_vs_mmap.max",
        figure: "SmartSAGE Fig. 16",
        quantity: "neighbour sampling speedup of SmartSAGE(HW/SW) over mmap, several workers, maximum",
        value: 5.5,
    },
    PaperValue {
        key: "fig6.mmap_slowdown_vs_dram.mean",
        figure: "SmartSAGE Fig. 6",
        quantity: "end-to-end training slowdown of SSD(mmap) against in-memory processing, average",
        value: 9.8,
    },
    PaperValue {
        key: "fig6.mmap_slowdown_vs_dram.max",
        figure: "SmartSAGE Fig. 6",
        quantity: "end-to-end training slowdown of SSD(mmap) against in-memory processing, maximum",
        value: 19.6,
    },
    PaperValue {
        key: "fig18.hwsw_vs_mmap.mean",
        figure: "SmartSAGE Fig. 18",
        quantity: "training throughput of SmartSAGE(HW/SW) over SSD(mmap), average",
        value: 3.5,
    },
    PaperValue {
        key: "fig18.hwsw_vs_mmap.max",
        figure: "SmartSAGE Fig. 18",
        quantity: "training throughput of SmartSAGE(HW/SW) over SSD(mmap), maximum",
        value: 5.0,
    },
    PaperValue {
        key: "fig18.hwsw_of_dram.mean",
        figure: "SmartSAGE Fig. 18",
        quantity: "performance of SmartSAGE(HW/SW) as a share of DRAM-only (the paper: an average 60 % loss)",
        value: 0.4,
    },
    PaperValue {
        key: "fig18.oracle_of_dram.mean",
        figure: "SmartSAGE Fig. 18",
        quantity: "performance of SmartSAGE(oracle) as a share of DRAM-only, average",
        value: 0.7,
    },
];

/// AGNES, its evaluation of the hyperbatch and of block and hyperbatch sizes.
pub(crate) const AGNES: &[PaperValue] = &[
    PaperValue {
        key: "fig9a.best_block_kib",
        figure: "AGNES Fig. 9(a)",
        quantity: "block size with the shortest execution time (64 KiB … 4 MiB), KiB",
        value: 1024.0,
    },
    PaperValue {
        key: "fig9b.best_hyperbatch",
        figure: "AGNES Fig. 9(b)",
        quantity: "hyperbatch with the shortest execution time, minibatches (the paper: larger than 1,024)",
        value: 1024.0,
    },
    PaperValue {
        key: "fig8.hyperbatch_speedup.max",
        figure: "AGNES Fig. 8",
        quantity: "execution time without hyperbatches over with them, maximum",
        value: 622.0,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_values_positive() {
        for table in [SMARTSAGE, AGNES] {
            for (i, v) in table.iter().enumerate() {
                assert!(v.value > 0.0, "{}", v.key);
                assert!(table[..i].iter().all(|w| w.key != v.key), "{} twice", v.key);
            }
        }
    }
}
