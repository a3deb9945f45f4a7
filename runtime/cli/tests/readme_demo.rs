//! The README shows what the main job, `sagessd demo`, prints: its modelled times price each
//! step on the `[trainer]` accelerator and the accuracies come from single-threaded CPU
//! training, so the README's copy must be exactly today's output.

use std::process::Command;

#[test]
fn the_readme_shows_the_main_job_as_it_prints() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("reading README.md");
    let after = readme
        .split_once("What the main job prints (every number modelled but the accuracy, which is the real model's):\n\n```\n")
        .expect("the README's main-job block")
        .1;
    let shown = &after[..after.find("```").expect("the block's end")];
    let out_dir = std::env::temp_dir().join(format!("sagessd-readme-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .arg("demo")
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("running sagessd demo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    // The table, the memory regime and the samples' agreement; the note after them names the
    // output folder and the wall-clock time.
    let table: String = printed.lines().take(8).map(|l| format!("{l}\n")).collect();
    assert_eq!(
        shown, table,
        "README.md's main-job output is stale: replace it with the table `sagessd demo` prints"
    );
    for f in ["report.md", "fig18_end_to_end_at_scale_cosmos-plus.svg"] {
        assert!(out_dir.join(f).is_file(), "demo wrote no {f}");
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}
