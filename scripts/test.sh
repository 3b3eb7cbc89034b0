#!/usr/bin/env bash
# The project's one test command: formatting, lints, every test, the wasm32 build of the
# portable crates, and (when their scripts exist) the CUDA and wgpu checks.
#
#   bash scripts/test.sh          (CI runs it through .ci/run)
#
# Idempotent: it installs only what is missing and relies on cargo's incremental builds,
# so a second run costs little more than the tests themselves. All cargo steps share one
# target directory (./target, or $CARGO_TARGET_DIR) and one profile (dev), so nothing
# heavy is compiled twice except where a step needs it (clippy's check builds, the
# wasm32 target).
#
# Hooks written by other parts of the project, run only if present:
#   bench/install-nvrtc.sh  makes NVRTC available so CUDA kernels can be compiled (no GPU
#                           needed). Run before the tests as `bench/install-nvrtc.sh --env`,
#                           its documented interface: on success its stdout (shell
#                           `export` lines) is `eval`ed here, so the tests see
#                           BRRR_NVRTC_LIB and LD_LIBRARY_PATH. Its failure is tolerated:
#                           the CUDA compile checks then report themselves skipped.
#   scripts/test-wgpu.sh    installs lavapipe/Chromium and runs the GPU-backend tests.
#                           Its failure fails the run.
#   scripts/test-book.sh    installs mdbook; the book and the exercises (stubs fail,
#                           solutions pass).
#   scripts/test-web.sh     installs trunk and puppeteer-core; builds the web app and
#                           drives it in headless Chromium.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${CI:-}" == "true" ]]; then
    # CI logs are plain text files; escape codes only make them harder to read.
    export CARGO_TERM_COLOR=never
    # A clean clone builds once: incremental caches would only take disk (GBs) for nothing.
    export CARGO_INCREMENTAL=0
fi

# ---- step bookkeeping --------------------------------------------------------------------

# EPOCHREALTIME (bash 5) has microseconds, written with the locale's decimal separator.
now() {
    local t="${EPOCHREALTIME:-$(date +%s)}"
    echo "${t/,/.}"
}
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

START="$(now)"
CURRENT=""
SUMMARY=()
# Every test that finds something absent (a GPU, a driver, a compiler) appends a line
# `NAME: SKIPPED (reason)` here (brrr_backend::skip::report_skipped); the summary lists them.
BRRR_SKIP_LOG="$(mktemp -t brrr-skips.XXXXXX)"
export BRRR_SKIP_LOG

# step NAME COMMAND...: runs COMMAND under a header and records how long it took.
step() {
    local name="$1"
    shift
    CURRENT="$name"
    echo
    echo "==> $name"
    local t0
    t0="$(now)"
    "$@"
    local dt
    dt="$(elapsed "$t0")"
    echo "<== $name: ${dt}s"
    SUMMARY+=("$(printf '  %-34s %8ss' "$name" "$dt")")
    CURRENT=""
}

finish() {
    local rc=$?
    echo
    echo "==> summary"
    if ((${#SUMMARY[@]})); then printf '%s\n' "${SUMMARY[@]}"; fi
    if [[ -s "$BRRR_SKIP_LOG" ]]; then
        echo "skipped (absent here, reported by name):"
        sort -u "$BRRR_SKIP_LOG" | sed 's/^/  /'
    else
        echo "skipped: nothing"
    fi
    rm -f "$BRRR_SKIP_LOG"
    if ((rc != 0)); then
        echo "FAILED in step: ${CURRENT:-setup} (exit status $rc)"
    else
        echo "all steps passed"
    fi
    echo "total: $(elapsed "$START")s"
}
trap finish EXIT

# ---- steps -----------------------------------------------------------------------------

toolchain() {
    cargo --version
    # A full cold build of every test binary needs several GB of disk; say how much there is.
    df -h "${CARGO_TARGET_DIR:-target}" 2>/dev/null || df -h .
    rustc --version
    if ! command -v rustup >/dev/null 2>&1; then
        # Without rustup we cannot install anything; the steps below say what is missing.
        echo "rustup not found: assuming rustfmt, clippy and the wasm32 target are installed"
        return 0
    fi
    local have
    have="$(rustup component list --installed)"
    for c in rustfmt clippy; do
        if grep -q "^$c" <<<"$have"; then
            echo "$c: installed"
        else
            rustup component add "$c"
        fi
    done
    if rustup target list --installed | grep -qx wasm32-unknown-unknown; then
        echo "wasm32-unknown-unknown: installed"
    else
        rustup target add wasm32-unknown-unknown
    fi
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest --version | head -n 1
    else
        echo "cargo-nextest not installed: using cargo test"
    fi
}

nvrtc() {
    local script=bench/install-nvrtc.sh
    if [[ ! -f "$script" ]]; then
        echo "skipped: $script does not exist"
        return 0
    fi
    local out rc=0
    out="$(bash "$script" --env)" || rc=$?
    if ((rc == 0)); then
        printf '%s\n' "$out"
        eval "$out"
    else
        printf '%s\n' "$out"
        echo "warning: $script failed (exit status $rc); continuing without NVRTC"
    fi
}

tests() {
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest run --workspace --no-fail-fast --no-tests=warn
    else
        cargo test --workspace --no-fail-fast
    fi
}

wgpu() {
    local script=scripts/test-wgpu.sh
    if [[ -f "$script" ]]; then
        bash "$script"
    else
        echo "skipped: $script does not exist"
    fi
}

# `mpi` builds only where OpenMPI is installed (test-mpi.sh --install, or recorded as
# skipped there); without it the other features are still linted.
clippy_all_features() {
    if command -v mpicc > /dev/null; then
        cargo clippy -p brrr --all-features --all-targets -- -D warnings
    else
        echo "OpenMPI missing: linting brrr with --features cuda,wgpu (mpi is skipped)"
        cargo clippy -p brrr --features cuda,wgpu --all-targets -- -D warnings
    fi
}

step "toolchain" toolchain
step "cargo fmt --check" cargo fmt --all --check
step "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
# The brrr binary's optional backends (--features cuda,wgpu) are outside the line above.
# Its `mpi` feature needs OpenMPI and libclang: install them first (or skip by name).
step "openmpi (scripts/test-mpi.sh --install)" bash scripts/test-mpi.sh --install
step "cargo clippy (brrr, all features)" clippy_all_features
step "nvrtc (bench/install-nvrtc.sh)" nvrtc
# Lavapipe before the workspace tests: otherwise, on a fresh machine, they report wgpu
# as SKIPPED and only the wgpu step below runs its suite.
step "lavapipe (scripts/test-wgpu.sh install)" bash scripts/test-wgpu.sh install
step "tests" tests
step "mpi (scripts/test-mpi.sh)" bash scripts/test-mpi.sh
# nextest does not run doctests.
step "doctests" cargo test --workspace --doc
step "wasm32 build" cargo build --target wasm32-unknown-unknown \
    -p brrr-backend -p brrr-cpu -p brrr-tensor -p brrr-nn -p brrr-perf -p brrr-profile
step "wgpu (scripts/test-wgpu.sh)" wgpu
# The book (mdbook build, test, links, generated pages) and the exercises both ways.
step "book (scripts/test-book.sh)" bash scripts/test-book.sh
# The browser app: trunk build, browser unit tests, end to end in headless Chromium.
step "web (scripts/test-web.sh)" bash scripts/test-web.sh
