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

/// A child process killed (and reaped) however the test ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sagessd args`, killed if it runs longer than `limit`.
fn run_within(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Server(
        Command::new(env!("CARGO_BIN_EXE_sagessd"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running sagessd"),
    );
    // Pipes drained as it runs, so a full pipe cannot stall it.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.0.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.0.stderr.take().map(|p| Box::new(p) as _));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("waiting") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sagessd {args:?} ran past {limit:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("its stdout"),
        stderr: stderr.join().expect("its stderr"),
    }
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
    assert!(files.contains("  per hop: reads"), "{files}");
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

    // One of three worker processes' share: minibatches 1 and 4; an offset past the stride is
    // refused, saying why.
    let share = sagessd(
        &[
            &common[..],
            &[
                "--sampler",
                "direct",
                "--batch-stride",
                "3",
                "--batch-offset",
                "1",
            ],
            &["--format", "json"],
        ]
        .concat(),
    );
    let share = stdout_of(&share);
    assert!(share.contains("\"minibatches\":2"), "{share}");
    let bad = sagessd(&[&common[..], &["--batch-stride", "3", "--batch-offset", "3"]].concat());
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("--batch-offset 3 must be below --batch-stride 3"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let device = stdout_of(&sagessd(
        &[
            &common[..],
            &[
                "--on-device",
                "--sampler",
                "hyperbatch,agnes,isp,isp-hyperbatch",
            ],
        ]
        .concat(),
    ));
    assert!(device.contains("samples identical: yes"), "{device}");
    for sampler in ["hyperbatch", "agnes", "isp", "isp-hyperbatch"] {
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
    // reads, bytes read, NAND pages: in-storage hyperbatches read no more flash pages.
    assert!(
        row(&device, "isp-hyperbatch")[2] <= row(&device, "isp")[2],
        "in-storage hyperbatches read no more NAND pages: {device}"
    );

    // Beyond loopback, the emulator serves only with a host policy, and says how to give one.
    let wide = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["emulator", "serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("running the emulator");
    let said = String::from_utf8_lossy(&wide.stderr);
    assert!(
        !wide.status.success() && said.contains("--allow-host") && said.contains("beyond loopback"),
        "{said}"
    );

    // The same through NVMe/TCP to an emulator in another process: wall-clock time.
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_sagessd"))
            .args(["emulator", "serve", "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("starting the emulator"),
    );
    let stdout = server.0.stdout.take().expect("its stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut banner = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut banner);
        let _ = tx.send(banner);
    });
    let banner = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the emulator's banner within 30 s");
    // "serving NAME (SOURCE) as NVMe/TCP subsystem NQN on ADDR, virtual time"
    let (head, tail) = banner.rsplit_once(" on ").expect("an address");
    let nqn = head.rsplit(' ').next().expect("a subsystem NQN");
    let addr = tail.split(',').next().expect("an address");
    let uri = format!("tcp://{addr}/{nqn}");
    let remote = run_within(
        &[
            &common[..],
            &[
                "--on-device",
                "--device",
                &uri,
                "--sampler",
                "hyperbatch,isp",
                // The served emulator's firmware has no feature buffer.
                "--features",
                "none",
            ],
        ]
        .concat(),
        std::time::Duration::from_secs(120),
    );
    drop(server);
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
    // In process, the features came along: the host's gathers and the device's agree.
    assert!(device.contains("feature bytes:"), "{device}");

    let bad = sagessd(&[&common[..], &["--sampler", "psychic"]].concat());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid value 'psychic'"));
    let bad = sagessd(&[&common[..], &["--sampler", "isp"]].concat());
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("sampler isp needs a device"));
    let _ = std::fs::remove_dir_all(Path::new(d));
}
