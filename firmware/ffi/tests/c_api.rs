//! The C API exercised from C: builds the host static library, compiles
//! `tests/c/host_test.c` with the host C compiler against it, and runs the program.
//!
//! A test cannot link a `staticlib` crate the way it links an `rlib`, so this test builds
//! `libsagessd_fw.a` itself with a nested `cargo build` into its own target directory
//! (`target/tmp/ffi-host`): the outer `cargo test` holds the lock of the main target directory
//! while tests run, and a nested build there would wait on it forever. The first run compiles the
//! firmware once more (about a minute on two cores); later runs are incremental.
//!
//! Skipped, saying so, only when there is no C compiler (`$CC`, else `cc`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn workspace_root() -> PathBuf {
    manifest_dir().join("../..")
}

/// The host C compiler, if there is one.
fn cc() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(cc)
}

/// Runs `cmd`, failing the test with its output if it fails; returns stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

/// Builds the host `libsagessd_fw.a` into `target/tmp/ffi-host` and returns its path.
fn host_staticlib() -> PathBuf {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ffi-host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "--quiet",
            "-p",
            "sagessd-firmware-ffi",
            "--target-dir",
        ])
        .arg(&target_dir)
        // Settings of the outer build meant for it alone.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET"));
    let lib = target_dir.join("debug/libsagessd_fw.a");
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

#[test]
fn host_c_program_drives_the_firmware_through_the_c_api() {
    let Some(cc) = cc() else {
        eprintln!(
            "SKIPPED host_c_program_drives_the_firmware_through_the_c_api: no C compiler \
             (set CC or install cc)"
        );
        return;
    };
    let lib = host_staticlib();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sagessd_host_test");
    run(Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O1",
            "-I",
        ])
        .arg(manifest_dir().join("../include"))
        .arg(manifest_dir().join("tests/c/host_test.c"))
        .arg(&lib)
        // What a std static library needs from the system (`--print native-static-libs`).
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"])
        .arg("-o")
        .arg(&exe));
    let stdout = run(&mut Command::new(&exe));
    print!("{stdout}");
    assert!(stdout.contains("host_test: OK"), "{stdout}");
}
