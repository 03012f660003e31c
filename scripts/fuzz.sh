#!/usr/bin/env bash
# Runs every cargo-fuzz target (fuzz/, docs/fuzzing.md) for a while and
# fails if any finds something (a panic, an overflow, a leak or OOM, a
# timeout). Needs the nightly toolchain; installs cargo-fuzz if missing.
#
#   scripts/fuzz.sh                     every target, 20 s each (CI)
#   scripts/fuzz.sh --seconds 60        60 s each
#   scripts/fuzz.sh ilp_lines ipc_frames    only these targets
#
# Each target starts from its checked-in seed corpus (fuzz/corpus/<target>/,
# read only) plus what earlier runs on this machine found
# (fuzz/target/corpus/<target>/, where new inputs go). A crashing input is
# saved in fuzz/artifacts/<target>/ and the run fails; reproduce it with
#   cd fuzz && cargo +nightly fuzz run <target> artifacts/<target>/<file>
# A per-target summary (execs, corpus, cov/ft: libFuzzer's last status line)
# is printed at the end; full logs are in fuzz/target/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
targets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --seconds)
            seconds="$2"
            shift 2
            ;;
        --seconds=*)
            seconds="${1#*=}"
            shift
            ;;
        -h | --help)
            sed -n '2,17p' "$0"
            exit 0
            ;;
        *)
            targets+=("$1")
            shift
            ;;
    esac
done

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly --profile minimal)" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cd fuzz
# The fuzz workspace's lock file is not checked in: start it from the main
# workspace's, so the crates build against the same dependency versions.
if [[ ! -f Cargo.lock ]]; then
    cp ../Cargo.lock Cargo.lock
fi
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cargo fuzz list)
fi

echo "fuzz: building ${#targets[@]} targets (nightly, ASan, debug assertions and overflow checks)"
cargo +nightly fuzz build

mkdir -p target/logs
failed=()
summary=()
for t in "${targets[@]}"; do
    mkdir -p "target/corpus/$t" "corpus/$t" "artifacts/$t"
    log="target/logs/$t.log"
    echo "fuzz: $t: running ${seconds}s (corpus: $(find "corpus/$t" -type f | wc -l) seeds)"
    # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: one
    # over 2 GiB a leak or an allocation a small input should not cause.
    set +e
    cargo +nightly fuzz run "$t" "target/corpus/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
    line=$(printf '%-20s execs=%-9s %s' "$t" "${execs:-?}" "$last")
    summary+=("$line")
    if [[ $rc -ne 0 ]]; then
        failed+=("$t")
        echo "fuzz: $t: FAILED (exit $rc); the end of $log:" >&2
        tail -n 40 "$log" >&2
        ls -1 "artifacts/$t" >&2 || true
    else
        echo "fuzz: $t: ok: $last"
    fi
done

echo
echo "fuzz: summary (${seconds}s per target)"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each and found nothing"
