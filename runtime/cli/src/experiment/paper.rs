//! The seeds' reported figures that the experiments are compared with, each with the figure
//! whose text states it (`shared/seeds/smartsage.txt`, the evaluation's paragraphs on
//! Figs. 14 and 16). Values are only ever read from here, never fitted.

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
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_values_positive() {
        for (i, v) in SMARTSAGE.iter().enumerate() {
            assert!(v.value > 0.0, "{}", v.key);
            assert!(
                SMARTSAGE[..i].iter().all(|w| w.key != v.key),
                "{} twice",
                v.key
            );
        }
    }
}
