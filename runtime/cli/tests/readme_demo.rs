//! The README shows what `sagessd demo` prints; the demo is deterministic (modelled time and
//! counts only), so the README's copy must be exactly today's output.

use std::process::Command;

#[test]
fn the_readme_shows_the_demo_as_it_prints() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("reading README.md");
    let after = readme
        .split_once("`sagessd demo` prints:\n\n```\n")
        .expect("the README's demo block")
        .1;
    let shown = &after[..after.find("```").expect("the block's end")];
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["demo", "--quiet"])
        .output()
        .expect("running sagessd demo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        shown, printed,
        "README.md's demo output is stale: replace it with what `sagessd demo --quiet` prints"
    );
}
