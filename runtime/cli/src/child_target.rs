//! A child `sagessd emulator serve` of this binary: started on a free loopback port, its
//! address read from its banner; stopped cleanly (SIGTERM) when dropped, or killed.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A child `emulator serve` on a free loopback port; stopped (SIGTERM) when dropped.
pub(crate) struct ChildTarget {
    child: Child,
    /// Where it serves.
    pub addr: String,
}

impl ChildTarget {
    /// Starts `emulator serve` with `config` and `image`, and waits for its banner.
    pub(crate) fn start(config: Option<&PathBuf>, image: Option<&PathBuf>) -> anyhow::Result<Self> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["emulator", "serve", "--listen", "127.0.0.1:0"]);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        if let Some(i) = image {
            cmd.arg("--image").arg(i);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn()?;
        let Some(stdout) = child.stdout.take() else {
            anyhow::bail!("no stdout from the child target");
        };
        // With an image, a boot report comes first.
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        while !line.starts_with("serving") {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
        }
        // "serving NAME (SOURCE) as NVMe/TCP subsystem NQN on ADDR, virtual time; hosts: …"
        let addr = line
            .rsplit_once(" on ")
            .and_then(|(_, rest)| rest.split(',').next())
            .map(|a| a.trim().to_owned());
        // The rest of what it says (its stop report) is passed on, so its stdout never closes
        // under it.
        std::thread::spawn(move || {
            for l in reader.lines().map_while(Result::ok) {
                println!("target: {l}");
            }
        });
        match addr {
            Some(addr) if !addr.is_empty() => Ok(Self { child, addr }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("the child target did not say where it listens: {line:?}")
            }
        }
    }

    /// A field of /proc/PID/status, in bytes (VmHWM: peak RSS, VmRSS: RSS now).
    pub(crate) fn status_bytes(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// Kills it with SIGKILL (no clean stop) and waits for it to exit.
    pub(crate) fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ChildTarget {
    fn drop(&mut self) {
        // Only a child still running gets the signal (its pid is not reused before the wait).
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill only sends a signal to the child's pid.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}
