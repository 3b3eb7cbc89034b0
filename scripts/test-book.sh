#!/usr/bin/env bash
# The book and its exercises:
#   1. mdbook 0.5.4 installed into $BRRR_TOOLS_DIR (default ~/.cache/brrr-tools) if missing;
#   2. book/src/generated/ is what the crates compute now (book/gen), and every generated
#      file is used by a chapter (book/gen's tests), else fail;
#   3. mdbook build book, then a link check of the HTML (every internal link and anchor);
#   4. mdbook test (the chapters' Rust snippets, against brrr-perf built into target/book);
#   5. the exercises both ways: with --features solutions every test passes; on the stubs
#      every exercise test (and GPU puzzle) fails, and any that passes is named;
#   6. the puzzle definitions compile for wasm32 (the web app shows them).
# GPU puzzles run on wgpu (Mesa's lavapipe where there is no GPU) with BRRR_REQUIRE_WGPU=1:
# no adapter is a failure here, never a silent skip.
#
#   bash scripts/test-book.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BRRR_ROOT="$ROOT"
# shellcheck source=scripts/tools.sh
source "$ROOT/scripts/tools.sh"
export BRRR_REQUIRE_WGPU=1
# lavapipe warns without it; any private directory will do.
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "${XDG_RUNTIME_DIR}" ]; then
    export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/brrr-xdg-$(id -u)"
    mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
fi

now() {
    local t="${EPOCHREALTIME:-$(date +%s)}"
    echo "${t/,/.}"
}
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
START="$(now)"
CURRENT=""
SUMMARY=()
step() {
    local name="$1"
    shift
    CURRENT="$name"
    echo
    echo "==> $name"
    local t0
    t0="$(now)"
    "$@"
    SUMMARY+=("$(printf '  %-44s %8ss' "$name" "$(elapsed "$t0")")")
    CURRENT=""
}
finish() {
    local rc=$?
    echo
    echo "==> test-book summary"
    if ((${#SUMMARY[@]})); then printf '%s\n' "${SUMMARY[@]}"; fi
    if ((rc != 0)); then
        echo "FAILED in step: ${CURRENT:-setup} (exit status $rc)"
    else
        echo "all book steps passed"
    fi
    echo "total: $(elapsed "$START")s"
}
trap finish EXIT

install_mdbook() {
    ensure_mdbook
    echo "mdbook: $(mdbook --version)"
}
lavapipe() {
    if compgen -G '/usr/share/vulkan/icd.d/lvp_icd*.json' > /dev/null \
        && ldconfig -p 2> /dev/null | grep -q 'libvulkan\.so\.1'; then
        echo "lavapipe and libvulkan1 present"
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 update -q < /dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends mesa-vulkan-drivers libvulkan1 < /dev/null
}

# Cargo resolves features over the packages it is asked to build, so `-p CRATE` would
# rebuild CRATE's dependencies with other features than the test command's
# `--workspace` build (minutes on 2 cores). Everything here selects the whole
# workspace and narrows to a target instead: the dependencies are built once. (The
# generator's own unit tests run in the test command's workspace test step.)
TARGET_DIR="${CARGO_TARGET_DIR:-target}"

book_gen() {
    cargo build -q --workspace --bin brrr-book-gen ${BRRR_FEATURES:+--features "$BRRR_FEATURES"} < /dev/null
    "$TARGET_DIR/debug/brrr-book-gen" "$@" < /dev/null
}

# exercises_lib_tests [CARGO FLAGS]: builds brrr-exercises' unit-test binary and prints
# its path.
exercises_lib_tests() {
    cargo test -q --workspace --lib --no-run --message-format=json "$@" < /dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if (m.get("reason") == "compiler-artifact" and m.get("executable")
            and m["target"]["name"] == "brrr_exercises" and m["profile"]["test"]):
        print(m["executable"])
'
}

generated() {
    book_gen check book/src/generated
}

# mdbook reports a missing {{#include}} as an ERROR line but still builds: fail on it.
build_book() {
    rm -rf book/book
    local log
    log="$(mdbook build book 2>&1)"
    printf '%s\n' "$log"
    if grep -q 'ERROR' <<< "$log"; then
        echo "mdbook reported errors (above)"
        return 1
    fi
}

links() {
    book_gen links book/book
}

# The README's headline figures, each against the section of bench/ its link names.
readme_figures() {
    book_gen readme README.md
}

# Snippets say `extern crate brrr_perf;`; only the crates they use are built, into their
# own target dir, so that mdbook's -L sees one rlib per crate.
mdbook_test() {
    cargo build -q -p brrr-perf --target-dir target/book < /dev/null
    # A build with other settings (another profile, CARGO_INCREMENTAL, toolchain) leaves
    # its .rlib and .rmeta beside the new ones under another hash, and rustc then refuses
    # `extern crate` with "multiple candidates": keep only the newest build of each crate.
    local deps=target/book/debug/deps file crate newest
    for file in "$deps"/lib*.rlib; do
        [[ -e "$file" ]] || continue
        crate="${file##*/}"
        crate="${crate%-*}"
        newest="$(ls -t "$deps/$crate"-*.rlib | head -n 1)"
        newest="${newest%.rlib}"
        for stale in "$deps/$crate"-*.rlib "$deps/$crate"-*.rmeta; do
            [[ "${stale%.*}" == "$newest" ]] || rm -f "$stale"
        done
    done
    mdbook test book -L "$deps"
}

clippy_solutions() {
    cargo clippy -q --workspace --features "${BRRR_FEATURES:+$BRRR_FEATURES,}brrr-exercises/solutions" --all-targets -- -D warnings < /dev/null
}

solutions() {
    local bin
    bin="$(exercises_lib_tests --features "${BRRR_FEATURES:+$BRRR_FEATURES,}brrr-exercises/solutions")"
    [ -x "$bin" ] || { echo "no test binary of brrr-exercises was built"; return 1; }
    "$bin" < /dev/null
}

# The exercise tests are `...::tests::check` and the puzzles `puzzles::gpu::tests::pNN_*`.
stubs() {
    local out
    out="$(mktemp -t brrr-stubs.XXXXXX)"
    local bin
    bin="$(exercises_lib_tests ${BRRR_FEATURES:+--features "$BRRR_FEATURES"})"
    [ -x "$bin" ] || { echo "no test binary of brrr-exercises was built"; return 1; }
    "$bin" --include-ignored --test-threads 4 < /dev/null > "$out" 2>&1 || true
    awk '
        /^test .* \.\.\. / {
            name = $2; result = $4
            if (name ~ /::tests::check$/ || name ~ /^puzzles::gpu::tests::p[0-9][0-9]_/) {
                total++
                if (result == "FAILED") failed++
                else { bad++; print "  passes on the stub: " name " (" result ")" }
            }
        }
        END {
            printf "exercise tests on the stubs: %d, failing: %d\n", total, failed
            if (total == 0) { print "  no exercise tests found in the output"; exit 1 }
            exit bad > 0
        }' "$out" || {
        echo "every exercise test must fail on its stub; the full output is in $out"
        return 1
    }
    rm -f "$out"
}

wasm32() {
    # Under scripts/test.sh the web step compiles brrr-web for wasm32, and with it this
    # crate (its puzzles page): a check build here would only check the same code twice.
    if [ "${BRRR_WEB_BUILDS_WASM32:-}" = 1 ]; then
        echo "brrr-exercises is compiled for wasm32 by the web step (brrr-web depends on it)"
        return 0
    fi
    if ! rustup target list --installed 2> /dev/null | grep -qx wasm32-unknown-unknown; then
        echo "SKIPPED: wasm32 check of brrr-exercises (the wasm32-unknown-unknown target is not installed)"
        return 0
    fi
    cargo check -q -p brrr-exercises --lib --target wasm32-unknown-unknown < /dev/null
}

step "mdbook $MDBOOK_VERSION" install_mdbook
step "lavapipe (Vulkan on the CPU)" lavapipe
step "generated tables and figures up to date" generated
step "mdbook build" build_book
step "link check (book/book)" links
step "README figures match their sources" readme_figures
step "mdbook test" mdbook_test
step "clippy brrr-exercises --features solutions" clippy_solutions
step "exercises: solutions pass" solutions
step "exercises: stubs fail" stubs
step "puzzle data compiles for wasm32" wasm32
