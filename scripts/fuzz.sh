#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (cargo fuzz on the nightly toolchain; scripts/setup.sh
# installs both, cargo-fuzz into target/tools/).
#
#   scripts/fuzz.sh --smoke [SECONDS]        every target for SECONDS (default 5) each, from its
#                                            corpus; new inputs go to a scratch folder, so the
#                                            repository's corpora stay as they are (the suite)
#   scripts/fuzz.sh TARGET [libFuzzer flags] one target on its corpus in fuzz/corpus/TARGET, which
#                                            keeps the inputs it finds, e.g.
#                                            scripts/fuzz.sh hw_config -runs=10000000
#
# The targets are built without a sanitizer: their code is safe Rust, whose bounds and overflow
# checks (debug assertions are on) turn memory errors into panics, which libFuzzer reports as
# crashes; coverage instrumentation is what guides it. A crash leaves its input in
# fuzz/artifacts/TARGET/ and fails this script; it then belongs in a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_fuzz=target/tools/bin/cargo-fuzz
[ -x "$cargo_fuzz" ] || { echo "fuzz.sh: $cargo_fuzz missing (run scripts/setup.sh)" >&2; exit 1; }
export RUSTUP_TOOLCHAIN=nightly
fuzz() { (cd fuzz && "../$cargo_fuzz" "$@"); }

if [ "${1:-}" = --smoke ]; then
    seconds=${2:-5}
    fuzz build --sanitizer none
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    for target in $(fuzz list); do
        mkdir -p "$scratch/$target"
        # The last line libFuzzer prints: "Done N runs in S second(s)".
        log="$scratch/$target.log"
        if ! fuzz run --sanitizer none "$target" "$scratch/$target" "corpus/$target" -- \
            -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
            tail -n 40 "$log" >&2
            echo "fuzz.sh: $target failed (input in fuzz/artifacts/$target/)" >&2
            exit 1
        fi
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz $target: ${runs:-?} executions in ${seconds} s, no crash"
    done
    exit 0
fi

[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
target=$1
shift
fuzz run --sanitizer none "$target" "corpus/$target" -- -print_final_stats=1 "$@"
