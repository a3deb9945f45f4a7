//! One set of sampler names: the registry's (`SamplerKind::ALL`) is what `sagessd sample
//! --sampler` and `sagessd train --sampler` list in `--help`, what `sagessd compare --mode`
//! names and accepts, and (tests/test_loader.py) what Python's `sagessd.samplers()` returns. The
//! old names are accepted as deprecated aliases, and named as such in `--help`.

use std::process::{Command, Output};

use sagessd_runtime::registry::SamplerKind;

fn sagessd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(args)
        .output()
        .expect("running sagessd")
}

fn help(command: &str) -> String {
    let out = sagessd(&[command, "--help"]);
    assert!(out.status.success(), "sagessd {command} --help failed");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The possible values clap lists for `flag` in `help` (the long form: `- name: text` lines).
fn possible_values(help: &str, flag: &str) -> Vec<String> {
    let from = help
        .find(&format!("{flag} <"))
        .unwrap_or_else(|| panic!("no {flag} in:\n{help}"));
    let section = &help[from..];
    let start = section
        .find("Possible values:")
        .unwrap_or_else(|| panic!("{flag} lists no possible values:\n{section}"));
    section[start..]
        .lines()
        .skip(1)
        .map_while(|l| l.trim_start().strip_prefix("- "))
        .map(|l| l.split(':').next().unwrap_or(l).trim().to_string())
        .collect()
}

fn registry() -> Vec<String> {
    SamplerKind::ALL.map(|k| k.name().to_string()).to_vec()
}

#[test]
fn sample_and_train_list_the_registrys_samplers() {
    for command in ["sample", "train"] {
        let text = help(command);
        assert_eq!(
            possible_values(&text, "--sampler"),
            registry(),
            "sagessd {command} --help"
        );
        for (alias, kind) in SamplerKind::ALIASES {
            assert!(
                text.contains(&format!("Old name `{alias}`"))
                    || text.contains(&format!("{alias} ({kind})")),
                "sagessd {command} --help names the deprecated alias {alias}"
            );
        }
    }
}

#[test]
fn compare_names_every_modelled_sampler_and_refuses_the_others() {
    let text = help("compare");
    let mode = &text[text.find("--mode <").expect("--mode")..];
    let mode = &mode[..mode.find("\n\n").unwrap_or(mode.len())];
    for kind in SamplerKind::modelled() {
        assert!(mode.contains(kind.name()), "--mode names {kind}:\n{mode}");
    }
    for (alias, kind) in SamplerKind::ALIASES {
        assert!(
            mode.contains(&format!("{alias} ({kind})")),
            "--mode names the alias {alias}:\n{mode}"
        );
    }
    for kind in SamplerKind::ALL.into_iter().filter(|k| !k.modelled_host()) {
        let out = sagessd(&["compare", "--mode", kind.name(), "--batches", "1"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "compare --mode {kind} runs");
        assert!(
            err.contains(&format!("does not run {kind}")),
            "compare --mode {kind}: {err}"
        );
    }
    let out = sagessd(&["compare", "--mode", "bogus", "--batches", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("unknown mode"),
        "{err}"
    );
    let modes = SamplerKind::modelled()
        .map(SamplerKind::name)
        .collect::<Vec<_>>()
        .join(", ");
    assert!(err.contains(&modes), "the error lists the modes: {err}");
}

#[test]
fn the_old_names_still_select_their_sampler() {
    for (alias, kind) in SamplerKind::ALIASES {
        assert_eq!(SamplerKind::from_name(alias), Some(kind));
    }
    assert_eq!(SamplerKind::from_name("isp-ids"), Some(SamplerKind::IspIds));
    assert_eq!(SamplerKind::from_name("Memory"), None);
    // clap accepts them too: a compare of memory under its old name, one minibatch.
    let out = sagessd(&[
        "compare",
        "--mode",
        "dram",
        "--batches",
        "1",
        "--batch-size",
        "16",
        "--scale",
        "8",
        "--workers",
        "1",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("memory ")),
        "the report names it memory:\n{stdout}"
    );
}
