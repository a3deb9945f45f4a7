//! `sagessd device kill-test`: the real target process (`emulator serve --image`) SIGKILLed
//! under writes and restarted on its image loses no acknowledged write (a few kills here; the
//! campaign of a thousand is a benchmark run), and says so in its record.

use std::process::Command;

#[test]
fn sigkilled_targets_keep_every_acknowledged_write() {
    let dir = std::env::temp_dir().join(format!("sagessd-kill-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args([
            "device",
            "kill-test",
            "--kills",
            "3",
            "--lbas",
            "512",
            "--seed",
            "5",
        ])
        .args([
            "--min-run-ms",
            "50",
            "--max-run-ms",
            "150",
            "--format",
            "json",
            "--dir",
        ])
        .arg(&dir)
        .output()
        .expect("running sagessd");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record: serde_json::Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("a record");
    assert_eq!(record["record"], "device.kill_test");
    assert_eq!(record["kills"], 3);
    assert_eq!(record["lost"], 0);
    assert!(
        record["writes_acknowledged"].as_u64().unwrap() > 0,
        "{record}"
    );
    assert!(record["lbas_checked"].as_u64().unwrap() > 0, "{record}");
    assert!(
        dir.join("flash.img").exists(),
        "the image stays where it was asked for"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
