//! The arithmetic of the firmware's calibration (`sagessd firmware calibrate`) and of the host
//! sampling compute's (`sagessd validate host-compute`): a workload's cycles from its instruction
//! count and modelled cache misses, and the cycle cost per unit of counted work fitted over the
//! workloads.

use sagessd_emulator::config::{CoreTimingConfig, CoresConfig};
use sagessd_firmware::work::WorkCounters;
use sagessd_qemu_a9_profile::profile::Segment;

/// Cycles of a profiled segment on a core of `model` at `clock_mhz`: base CPI × instructions, plus each L1 miss
/// that hit L2 and each L2 miss at its penalty (an upper bound: an out-of-order core like
/// the A9 overlaps some misses).
pub fn cycles(segment: &Segment, model: &CoreTimingConfig, clock_mhz: u32) -> f64 {
    let m = &segment.misses;
    let l2_hits = (m.l1d_misses - m.l2_data_misses) + (m.l1i_misses - m.l2_instruction_misses);
    let l2_misses = m.l2_data_misses + m.l2_instruction_misses;
    instruction_cycles(segment.instructions as f64, model)
        + l2_hits as f64 * f64::from(model.l2_hit_penalty_cycles)
        + l2_misses as f64 * dram_access_cycles(model, clock_mhz)
}

/// Cycles `instructions` take at the core's base CPI (every access an L1 hit).
pub fn instruction_cycles(instructions: f64, model: &CoreTimingConfig) -> f64 {
    instructions * f64::from(model.base_cycles_per_1000_instructions) / 1000.0
}

/// What an access that misses both caches adds, in cycles at `clock_mhz`: the penalty's
/// cycles and its nanoseconds.
pub fn dram_access_cycles(model: &CoreTimingConfig, clock_mhz: u32) -> f64 {
    f64::from(model.dram_penalty_cycles)
        + f64::from(model.dram_penalty_ns) * f64::from(clock_mhz) / 1000.0
}

/// One counted unit: its name in [`WorkCounters::NAMES`], its cost field in `[cores]`, and
/// how many of the counter make one priced unit (1024 for bytes, priced per KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The counter.
    pub counter: &'static str,
    /// The `[cores]` field that prices it.
    pub field: &'static str,
    /// Counts per priced unit.
    pub per: u64,
}

/// Every unit, in [`WorkCounters::NAMES`] order.
pub const UNITS: [Unit; WorkCounters::COUNT] = [
    Unit {
        counter: "commands",
        field: "cycles_per_command",
        per: 1,
    },
    Unit {
        counter: "flash_ops",
        field: "cycles_per_flash_op",
        per: 1,
    },
    Unit {
        counter: "page_lookups",
        field: "cycles_per_page_lookup",
        per: 1,
    },
    Unit {
        counter: "pages_scanned",
        field: "cycles_per_page_scanned",
        per: 1,
    },
    Unit {
        counter: "rows_gathered",
        field: "cycles_per_row_gathered",
        per: 1,
    },
    Unit {
        counter: "edges_sampled",
        field: "cycles_per_edge_sampled",
        per: 1,
    },
    Unit {
        counter: "edges_emitted",
        field: "cycles_per_edge_emitted",
        per: 1,
    },
    Unit {
        counter: "stale_repeats",
        field: "cycles_per_stale_repeat",
        per: 1,
    },
    Unit {
        counter: "edges_drawn",
        field: "cycles_per_edge_drawn",
        per: 1,
    },
    Unit {
        counter: "targets_deduplicated",
        field: "cycles_per_target",
        per: 1,
    },
    Unit {
        counter: "nodes_added",
        field: "cycles_per_node_added",
        per: 1,
    },
    Unit {
        counter: "destinations",
        field: "cycles_per_destination",
        per: 1,
    },
    Unit {
        counter: "bytes_copied",
        field: "cycles_per_kib_copied",
        per: 1024,
    },
    Unit {
        counter: "sort_key_moves",
        field: "cycles_per_sort_key_move",
        per: 1,
    },
    Unit {
        counter: "radix_passes",
        field: "cycles_per_radix_pass",
        per: 1,
    },
    Unit {
        counter: "blocks_scanned",
        field: "cycles_per_block_scanned",
        per: 1,
    },
    Unit {
        counter: "polls",
        field: "cycles_per_poll",
        per: 1,
    },
    Unit {
        counter: "parked_checked",
        field: "cycles_per_parked_command",
        per: 1,
    },
];

/// The cost `cores` gives each unit, in [`UNITS`] order.
pub fn configured(cores: &CoresConfig) -> [u64; WorkCounters::COUNT] {
    [
        cores.cycles_per_command,
        cores.cycles_per_flash_op,
        cores.cycles_per_page_lookup,
        cores.cycles_per_page_scanned,
        cores.cycles_per_row_gathered,
        cores.cycles_per_edge_sampled,
        cores.edge_emitted_cycles(),
        cores.stale_repeat_cycles(),
        cores.edge_drawn_cycles(),
        cores.target_cycles(),
        cores.node_added_cycles(),
        cores.destination_cycles(),
        cores.cycles_per_kib_copied,
        cores.cycles_per_sort_key_move,
        cores.radix_pass_cycles(),
        cores.cycles_per_block_scanned,
        cores.cycles_per_poll,
        cores.cycles_per_parked_command,
    ]
}

/// `work` priced at `costs` (in [`UNITS`] order), as the emulator's core model prices it
/// (without its rounding).
pub fn priced(work: &WorkCounters, costs: &[f64; WorkCounters::COUNT]) -> f64 {
    work.values()
        .iter()
        .zip(UNITS.iter().zip(costs))
        .map(|(n, (u, c))| *n as f64 / u.per as f64 * c)
        .sum()
}

/// Fits the costs of the units named in `fitted` (indices into [`UNITS`]) to `rows` of
/// (work counted, cycles measured), the other units priced at `fixed`: least squares on the
/// relative error of each row (every workload weighs the same, whatever its size). Returns
/// the costs in [`UNITS`] order (the fixed ones as given).
pub fn fit(
    rows: &[(WorkCounters, f64)],
    fitted: &[usize],
    fixed: &[f64; WorkCounters::COUNT],
) -> anyhow::Result<[f64; WorkCounters::COUNT]> {
    let mut equations = Vec::with_capacity(rows.len());
    for (work, cycles) in rows {
        let values = work.values();
        let mut rest = *cycles;
        for (u, unit) in UNITS.iter().enumerate() {
            if !fitted.contains(&u) {
                rest -= values[u] as f64 / unit.per as f64 * fixed[u];
            }
        }
        equations.push(Equation {
            counts: fitted
                .iter()
                .map(|u| values[*u] as f64 / UNITS[*u].per as f64)
                .collect(),
            value: rest,
            scale: *cycles,
        });
    }
    let solution = relative_least_squares(&equations)?;
    let mut costs = *fixed;
    for (u, c) in fitted.iter().zip(solution) {
        costs[*u] = c;
    }
    Ok(costs)
}

/// One measured workload for [`relative_least_squares`]: `counts · costs ≈ value`, its error
/// weighed relative to `scale` (the workload's measured total).
#[derive(Clone, Debug, PartialEq)]
pub struct Equation {
    /// How many of each unknown's unit the workload did.
    pub counts: Vec<f64>,
    /// What those units cost in all (the measurement, less any part priced already).
    pub value: f64,
    /// The measurement the error is relative to.
    pub scale: f64,
}

/// The costs that minimise the sum of `((counts · costs − value) / scale)²` over `rows`: a
/// least-squares fit in which every workload weighs the same, whatever its size. Fails when
/// the rows cannot determine every cost (fewer rows than costs, or dependent counts).
pub fn relative_least_squares(rows: &[Equation]) -> anyhow::Result<Vec<f64>> {
    let k = rows.first().map_or(0, |r| r.counts.len());
    anyhow::ensure!(
        rows.len() >= k,
        "{} workloads cannot determine {k} costs",
        rows.len()
    );
    // Normal equations of A c = b, with A's row i = counts_i / scale_i and b_i = value_i /
    // scale_i.
    let mut ata = vec![vec![0.0f64; k]; k];
    let mut atb = vec![0.0f64; k];
    for row in rows {
        anyhow::ensure!(
            row.scale > 0.0 && row.counts.len() == k,
            "a workload measured nothing"
        );
        let a: Vec<f64> = row.counts.iter().map(|c| c / row.scale).collect();
        let b = row.value / row.scale;
        for i in 0..k {
            atb[i] += a[i] * b;
            for j in 0..k {
                ata[i][j] += a[i] * a[j];
            }
        }
    }
    solve(ata, atb).ok_or_else(|| {
        anyhow::anyhow!("the workloads do not determine every cost (their counts are dependent)")
    })
}

/// Solves `m x = v` by Gaussian elimination with partial pivoting; `None` if `m` is singular.
fn solve(mut m: Vec<Vec<f64>>, mut v: Vec<f64>) -> Option<Vec<f64>> {
    let n = v.len();
    let scale = m
        .iter()
        .flatten()
        .fold(0.0f64, |a, x| a.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    for col in 0..n {
        let pivot = (col..n).max_by(|a, b| m[*a][col].abs().total_cmp(&m[*b][col].abs()))?;
        if m[pivot][col].abs() <= scale * 1e-13 {
            return None;
        }
        m.swap(col, pivot);
        v.swap(col, pivot);
        let (upper, lower) = m.split_at_mut(col + 1);
        let pivot_row = &upper[col];
        for (offset, row) in lower.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (a, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *a -= f * p;
            }
            v[col + 1 + offset] -= f * v[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|j| m[row][j] * x[j]).sum();
        x[row] = (v[row] - s) / m[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_qemu_a9_profile::cache_model::MissCounts;

    fn work(pairs: &[(&str, u64)]) -> WorkCounters {
        let mut v = [0u64; WorkCounters::COUNT];
        for (name, n) in pairs {
            let i = WorkCounters::NAMES.iter().position(|x| x == name).unwrap();
            v[i] = *n;
        }
        WorkCounters::from_values(v)
    }

    fn unit(name: &str) -> usize {
        UNITS.iter().position(|u| u.counter == name).unwrap()
    }

    #[test]
    fn units_follow_the_counters() {
        for (u, name) in UNITS.iter().zip(WorkCounters::NAMES) {
            assert_eq!(u.counter, name);
        }
    }

    #[test]
    fn a_fit_recovers_the_costs_that_made_the_cycles() {
        // Costs the "hardware" has; the fit sees only counts and totals.
        let (commands, sampled, bytes, parked) = (
            unit("commands"),
            unit("edges_sampled"),
            unit("bytes_copied"),
            unit("parked_checked"),
        );
        let mut truth = [0.0; WorkCounters::COUNT];
        truth[commands] = 4000.0;
        truth[sampled] = 700.0;
        truth[bytes] = 300.0; // per KiB
        truth[parked] = 60.0; // fixed, known
        let rows: Vec<(WorkCounters, f64)> = [
            work(&[
                ("commands", 100),
                ("bytes_copied", 4096),
                ("parked_checked", 7),
            ]),
            work(&[("commands", 3), ("edges_sampled", 5000)]),
            work(&[
                ("commands", 10),
                ("bytes_copied", 1 << 20),
                ("edges_sampled", 9),
            ]),
            work(&[
                ("commands", 50),
                ("edges_sampled", 50),
                ("bytes_copied", 8192),
            ]),
        ]
        .into_iter()
        .map(|w| (w, priced(&w, &truth)))
        .collect();
        let costs = fit(
            &rows,
            &[commands, sampled, bytes],
            &truth.map(|c| if c == 60.0 { c } else { 0.0 }),
        )
        .unwrap();
        for u in [commands, sampled, bytes, parked] {
            assert!(
                (costs[u] - truth[u]).abs() < 1e-6,
                "{}: {} vs {}",
                UNITS[u].field,
                costs[u],
                truth[u]
            );
        }
        // Counts that cannot tell two units apart are refused.
        let same = [
            work(&[("commands", 1), ("flash_ops", 1)]),
            work(&[("commands", 2), ("flash_ops", 2)]),
        ];
        let rows: Vec<_> = same.iter().map(|w| (*w, 10.0)).collect();
        let both = [commands, unit("flash_ops")];
        assert!(fit(&rows, &both, &[0.0; WorkCounters::COUNT]).is_err());
    }

    #[test]
    fn cycles_add_the_miss_penalties() {
        let model = CoreTimingConfig {
            cpu: "test".into(),
            l1i_bytes: 32768,
            l1d_bytes: 32768,
            l1_ways: 4,
            l2_bytes: 524288,
            l2_ways: 8,
            line_bytes: 32,
            base_cycles_per_1000_instructions: 1500,
            l2_hit_penalty_cycles: 20,
            dram_penalty_cycles: 0,
            dram_penalty_ns: 100,
            board_cycles_per_command: 0,
            board_cycles_per_flash_op: 0,
            board_cycles_per_poll: 0,
        };
        let p = Segment {
            instructions: 1000,
            misses: MissCounts {
                data_accesses: 400,
                l1d_misses: 30,
                l2_data_misses: 10,
                fetches: 100,
                l1i_misses: 5,
                l2_instruction_misses: 1,
            },
        };
        // 1500 + (20 + 4) × 20 + 11 × 100 ns × 1 GHz.
        assert_eq!(
            cycles(&p, &model, 1000),
            1500.0 + 24.0 * 20.0 + 11.0 * 100.0
        );
    }
}
