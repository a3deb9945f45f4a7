//! `--format json|csv` (and `--json`): every measuring command prints one self-describing record
//! per row on stdout and nothing else there, JSON and CSV carry the same numbers, and the
//! records agree with each other and with the human table.

use std::process::{Command, Output};

fn sagessd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(args)
        .output()
        .expect("running sagessd")
}

fn stdout_of(args: &[&str]) -> String {
    let out = sagessd(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sagessd {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every stdout line parsed as a JSON object (a line that is not one fails the test).
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not a JSON record: {l}")))
        .collect()
}

/// CSV rows as field maps (RFC 4180 quoting), checking every row has the header's width.
fn csv_rows(stdout: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    fn cells(line: &str) -> Vec<String> {
        let (mut out, mut cur, mut quoted, mut chars) =
            (Vec::new(), String::new(), false, line.chars().peekable());
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(std::mem::take(&mut cur)),
                (c, _) => cur.push(c),
            }
        }
        out.push(cur);
        out
    }
    let mut lines = stdout.lines();
    let header = cells(lines.next().expect("a header"));
    assert_eq!(header[0], "record");
    lines
        .map(|l| {
            let row = cells(l);
            assert_eq!(row.len(), header.len(), "row width: {l}");
            header.iter().cloned().zip(row).collect()
        })
        .collect()
}

fn of_kind<'a>(records: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["record"] == kind).collect()
}

const COMPARE: [&str; 11] = [
    "compare",
    "--scale",
    "10",
    "--batches",
    "2",
    "--workers",
    "1,2",
    "--mode",
    "mmap,direct,isp",
    "--quiet",
    "--seed",
];

#[test]
fn compare_records_are_consistent_and_json_and_csv_agree() {
    let args = [&COMPARE[..], &["3"]].concat();
    let json = json_lines(&stdout_of(&[&args[..], &["--json"]].concat()));
    let modes = of_kind(&json, "compare.mode");
    assert_eq!(modes.len(), 6, "3 modes × 2 worker counts");
    for r in &modes {
        let workers = r["workers"].as_u64().unwrap();
        let mmap = modes
            .iter()
            .find(|m| m["mode"] == "mmap" && m["workers"] == workers)
            .unwrap();
        let per_mb = r["makespan_ns"].as_f64().unwrap() / r["minibatches"].as_f64().unwrap();
        assert!((r["time_per_minibatch_ns"].as_f64().unwrap() - per_mb).abs() < 1e-6);
        let speedup = mmap["time_per_minibatch_ns"].as_f64().unwrap() / per_mb;
        assert!((r["speedup_vs_mmap"].as_f64().unwrap() - speedup).abs() < 1e-9);
        assert_eq!(r["timing"], "modelled");
        assert_eq!(r["page_cache_hit_ratio"].is_null(), r["mode"] != "mmap");
    }
    let summary = of_kind(&json, "compare.summary");
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["samples_identical"], true);
    // The table prints the same checksum; the CSV the same numbers.
    let table = stdout_of(&args);
    let checksum = summary[0]["checksum"].as_str().unwrap();
    assert!(
        table.contains(checksum),
        "{checksum} not in the table:\n{table}"
    );
    let csv = csv_rows(&stdout_of(&[&args[..], &["--format", "csv"]].concat()));
    assert_eq!(csv.len(), json.len());
    // Every field of every record the same in both: numbers, text, yes/no, and null as empty.
    for (c, j) in csv.iter().zip(&json) {
        for (name, v) in j.as_object().unwrap() {
            let cell = &c[name];
            match v {
                serde_json::Value::Null => assert_eq!(cell, "", "{name}"),
                serde_json::Value::String(s) => assert_eq!(cell, s, "{name}"),
                serde_json::Value::Bool(b) => assert_eq!(cell, &b.to_string(), "{name}"),
                serde_json::Value::Number(n) => {
                    let x: f64 = cell.parse().unwrap_or_else(|_| panic!("{name}: {cell:?}"));
                    assert_eq!(x, n.as_f64().unwrap(), "{name}");
                }
                other => panic!("{name}: unexpected {other}"),
            }
        }
    }
}

#[test]
fn device_check_records_one_row_per_workload_with_its_ratio() {
    let table = stdout_of(&["device", "check"]);
    let csv = csv_rows(&stdout_of(&["device", "check", "--format", "csv"]));
    let workloads = table.lines().filter(|l| l.contains(" QD")).count();
    assert!(workloads >= 4, "{table}");
    assert_eq!(csv.len(), workloads);
    for r in &csv {
        assert_eq!(r["record"], "device.check");
        let (m, b): (f64, f64) = (r["measured"].parse().unwrap(), r["bound"].parse().unwrap());
        let ratio: f64 = r["ratio"].parse().unwrap();
        let want = if r["unit"] == "ns" { b / m } else { m / b };
        assert!((ratio - want).abs() < 1e-9, "{r:?}");
        assert_eq!(r["within_tolerance"], "true");
        assert!(
            table.contains(&r["workload"]),
            "{} not in the table",
            r["workload"]
        );
    }
}

#[test]
fn sample_records_every_sampler_and_the_verdict() {
    let dir = std::env::temp_dir().join(format!("sagessd-records-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    stdout_of(&["dataset", "generate", "--out", d, "--scale", "10"]);
    let common = [
        "sample",
        "--dataset",
        d,
        "--batches",
        "3",
        "--batch-size",
        "32",
        "--fanouts",
        "4,4",
        "--block-size",
        "16",
        "--graph-buffer",
        "1",
        "--json",
    ];
    let files = json_lines(&stdout_of(
        &[&common[..], &["--sampler", "memory,direct,agnes"]].concat(),
    ));
    let rows = of_kind(&files, "sample.sampler");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["sampler"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["memory", "direct", "agnes"]);
    assert_eq!(rows[0]["reads"], 0, "the in-memory sampler reads nothing");
    assert!(rows[1]["bytes_read"].as_u64().unwrap() >= rows[1]["bytes_used"].as_u64().unwrap());
    assert_eq!(
        of_kind(&files, "sample.agreement")[0]["samples_identical"],
        true
    );
    assert_eq!(of_kind(&files, "sample.memory").len(), 1);
    let device = json_lines(&stdout_of(
        &[&common[..], &["--on-device", "--sampler", "isp,agnes"]].concat(),
    ));
    let rows = of_kind(&device, "sample.device_sampler");
    assert_eq!(rows.len(), 2);
    for r in rows {
        let total = r["total_ms_per_minibatch"].as_f64().unwrap();
        let parts = r["device_ms_per_minibatch"].as_f64().unwrap()
            + r["host_ms_per_minibatch"].as_f64().unwrap();
        assert!((total - parts).abs() < 1e-9, "{r}");
        assert_eq!(r["timing"], "modelled");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_and_format_together_are_refused() {
    let out = sagessd(&["device", "check", "--json", "--format", "csv"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--json") && err.contains("--format"), "{err}");
}
