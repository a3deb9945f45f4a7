//! `sagessd sample`: every sampler on a generated dataset's files and on the emulated device
//! agrees, and the report has its parts; bad flags are refused with a message.

use std::path::Path;
use std::process::{Command, Output};

fn sagessd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(args)
        .output()
        .expect("running sagessd")
}

fn stdout_of(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The numbers on the row of `sampler` in a report table (units and `-` skipped).
fn row(stdout: &str, sampler: &str) -> Vec<f64> {
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(sampler))
        .unwrap_or_else(|| panic!("no {sampler} row in:\n{stdout}"));
    line.split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect()
}

#[test]
fn samplers_agree_on_files_and_on_the_device() {
    let dir = std::env::temp_dir().join(format!("sagessd-sample-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    stdout_of(&sagessd(&[
        "dataset",
        "generate",
        "--out",
        d,
        "--scale",
        "12",
        "--features",
        "16",
    ]));
    let common = [
        "sample",
        "--dataset",
        d,
        "--batches",
        "6",
        "--batch-size",
        "64",
        "--fanouts",
        "5,5",
        "--block-size",
        "16",
        "--graph-buffer",
        "1",
    ];
    let files = stdout_of(&sagessd(
        &[
            &common[..],
            &[
                "--sampler",
                "hyperbatch,agnes,memory,mmap,direct,uring",
                "--hyperbatch",
                "3",
                "--features",
                "agnes",
            ],
        ]
        .concat(),
    ));
    assert!(files.contains("samples identical: yes"), "{files}");
    assert!(files.contains("features (agnes"), "{files}");
    assert!(files.contains("memory: peak RSS"), "{files}");
    let (hyper, agnes, direct) = (
        row(&files, "hyperbatch"),
        row(&files, "agnes"),
        row(&files, "direct"),
    );
    assert!(hyper[0] > 0.0 && hyper[0] <= agnes[0], "{files}");
    assert!(direct[0] > 0.0, "{files}");
    // reads, bytes read, bytes used, system calls, ...: io_uring batches the same reads.
    let uring = row(&files, "uring");
    assert_eq!(uring[0], direct[0], "{files}");
    assert!(uring[3] < direct[3], "{files}");

    let device = stdout_of(&sagessd(
        &[
            &common[..],
            &["--on-device", "--sampler", "hyperbatch,agnes,isp"],
        ]
        .concat(),
    ));
    assert!(device.contains("samples identical: yes"), "{device}");
    for sampler in ["hyperbatch", "agnes", "isp"] {
        // reads, NAND pages, device, host and total ms per minibatch.
        let r = row(&device, sampler);
        let (dev, host, total) = (r[r.len() - 3], r[r.len() - 2], r[r.len() - 1]);
        assert!(dev > 0.0 && host > 0.0, "{sampler}: {device}");
        assert!((total - dev - host).abs() < 0.002, "{sampler}: {device}");
    }
    assert!(
        row(&device, "hyperbatch")[0] <= row(&device, "agnes")[0],
        "hyperbatches read no more blocks: {device}"
    );

    // The same through NVMe/TCP to an emulator in another process: wall-clock time.
    let mut server = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["emulator", "serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the emulator");
    let mut banner = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().expect("its stdout")),
        &mut banner,
    )
    .expect("its banner");
    // "serving ... as NVMe/TCP subsystem NQN on ADDR, virtual time"
    let words: Vec<&str> = banner.split_whitespace().collect();
    let at = |w: &str| words.iter().position(|x| *x == w).expect(w) + 1;
    let uri = format!(
        "tcp://{}/{}",
        words[at("on")].trim_end_matches(','),
        words[at("subsystem")]
    );
    let remote = sagessd(
        &[
            &common[..],
            &[
                "--on-device",
                "--device",
                &uri,
                "--sampler",
                "hyperbatch,isp",
            ],
        ]
        .concat(),
    );
    let _ = server.kill();
    let _ = server.wait();
    let remote = stdout_of(&remote);
    assert!(remote.contains("samples identical: yes"), "{remote}");
    assert!(remote.contains("wall clock"), "{remote}");
    // Same reads as in process, timed by the wall clock only.
    assert_eq!(row(&remote, "hyperbatch")[0], row(&device, "hyperbatch")[0]);
    assert_eq!(
        row(&remote, "isp").len(),
        3,
        "reads, bytes, total: {remote}"
    );

    let bad = sagessd(&[&common[..], &["--sampler", "psychic"]].concat());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown sampler"));
    let _ = std::fs::remove_dir_all(Path::new(d));
}
