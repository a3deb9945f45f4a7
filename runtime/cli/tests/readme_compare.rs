//! The README shows what `sagessd compare --workers 1` prints; the comparison is deterministic
//! (modelled time and counts only), so the README's copy must be exactly today's output.

use std::process::Command;

#[test]
fn the_readme_shows_the_comparison_as_it_prints() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("reading README.md");
    let after = readme
        .split_once("`sagessd compare --workers 1` prints:\n\n```\n")
        .expect("the README's comparison block")
        .1;
    let shown = &after[..after.find("```").expect("the block's end")];
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["compare", "--workers", "1", "--quiet"])
        .output()
        .expect("running sagessd compare");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        shown, printed,
        "README.md's comparison output is stale: replace it with what `sagessd compare --workers 1 --quiet` prints"
    );
}
