#!/usr/bin/env bash
# The project's one test command: formatting, lints, every test (the GPU backends on
# lavapipe, the CUDA kernels through the emulator and NVRTC), MPI, the book and its
# exercises, and the browser (wasm32 tests in headless Chromium, the app end to end).
#
#   bash scripts/test.sh          (CI runs it through .ci/run)
#
# Idempotent: it installs only what is missing (apt packages; tools under
# ~/.cache/brrr-tools, see scripts/tools.sh) and relies on cargo's builds, so a second run
# costs little more than the tests themselves. Every native cargo step shares one target
# directory (./target, or $CARGO_TARGET_DIR), one profile (dev) and one feature set
# ($BRRR_FEATURES below), so each crate is compiled once natively (plus clippy's check
# build) and once for wasm32. Each step prints its time; the summary lists them all and
# every test that found something absent (SKIPPED, by name).
#
# Hooks written by other parts of the project:
#   bench/install-nvrtc.sh  makes NVRTC available so CUDA kernels can be compiled (no GPU
#                           needed). Run before the tests as `bench/install-nvrtc.sh --env`,
#                           its documented interface: on success its stdout (shell
#                           `export` lines) is `eval`ed here, so the tests see
#                           BRRR_NVRTC_LIB and LD_LIBRARY_PATH. Its failure is tolerated:
#                           the CUDA compile checks then report themselves skipped.
#   scripts/test-mpi.sh     installs OpenMPI; mpirun and `brrr launch` over the binary.
#   scripts/test-wgpu.sh    installs lavapipe and Chromium (its native and browser suites
#                           run here inside the tests and web steps).
#   scripts/test-book.sh    installs mdbook; the book and the exercises (stubs fail,
#                           solutions pass).
#   scripts/test-crates.sh  API docs, `cargo package` of every library crate, tests/outside.
#   scripts/test-web.sh     installs wasm-bindgen and puppeteer-core; the wasm32 tests, the
#                           app's build (scripts/build-web.sh), end to end in Chromium.
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

# One feature set for every native cargo command (clippy, tests, the mpi binary, the
# doctests, the book's exercise builds): cargo compiles a crate once per feature set, so
# a step that selected other features (or `-p` instead of `--workspace`, which changes
# how features unify) would build much of the workspace again. `mpi` needs OpenMPI, which
# the step before installs or reports as skipped.
# Decided after the OpenMPI step below.
choose_features() {
    BRRR_FEATURES="brrr/cuda,brrr/wgpu"
    if command -v mpicc > /dev/null; then
        BRRR_FEATURES="$BRRR_FEATURES,brrr/mpi"
    fi
    export BRRR_FEATURES
}

clippy() {
    echo "features: $BRRR_FEATURES"
    cargo clippy --workspace --all-targets --features "$BRRR_FEATURES" -- -D warnings
}

tests() {
    # With lavapipe present, a wgpu test that finds no adapter fails instead of
    # skipping: the GPU-backend suites run here, once, not in a second step.
    if compgen -G '/usr/share/vulkan/icd.d/lvp_icd*.json' > /dev/null; then
        export BRRR_REQUIRE_WGPU=1
        echo "lavapipe present: BRRR_REQUIRE_WGPU=1"
    fi
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest run --workspace --features "$BRRR_FEATURES" --no-fail-fast --no-tests=warn
    else
        cargo test --workspace --features "$BRRR_FEATURES" --no-fail-fast
    fi
}

step "toolchain" toolchain
step "cargo fmt --check" cargo fmt --all --check
# OpenMPI (and libclang) for the `mpi` feature, lavapipe and Chromium for the GPU-backend
# and browser tests: installed first so that every later step sees them.
step "openmpi (scripts/test-mpi.sh --install)" bash scripts/test-mpi.sh --install
step "lavapipe, chromium (scripts/test-wgpu.sh install)" bash scripts/test-wgpu.sh install
choose_features
step "cargo clippy (workspace, one feature set)" clippy
step "nvrtc (bench/install-nvrtc.sh)" nvrtc
step "tests" tests
# The binary the tests built (same features): mpirun and `brrr launch` over it.
step "mpi (scripts/test-mpi.sh)" bash scripts/test-mpi.sh
# nextest does not run doctests.
step "doctests" cargo test --workspace --doc --features "$BRRR_FEATURES"
# The crates as others get them: API docs without warnings, `cargo package` for each,
# and tests/outside (a project of its own) built against them and run.
step "crates alone (scripts/test-crates.sh)" bash scripts/test-crates.sh
# The book (mdbook build, test, links, generated pages) and the exercises both ways.
export BRRR_WEB_BUILDS_WASM32=1
step "book (scripts/test-book.sh)" bash scripts/test-book.sh
# The browser: the wasm32 test binaries in headless Chromium (the app's pages, the
# conformance suite on WebGPU, a training run), the app's release build, end to end.
export BRRR_WORKSPACE_TESTED=1
step "web (scripts/test-web.sh)" bash scripts/test-web.sh
