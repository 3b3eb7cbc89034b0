#!/usr/bin/env bash
# The library crates as someone outside this repository gets them:
#   1. their API docs build without a warning (every public item documented: each crate
#      has #![warn(missing_docs)]);
#   2. `cargo package` succeeds for each (metadata, versions on path dependencies, every
#      file it includes inside its own directory) and the packaged crate builds alone,
#      against the other packaged crates; nothing is published;
#   3. tests/outside, a project with its own workspace and lock file, builds against the
#      crates by path and runs: its own training loop, a memory estimate, an all-reduce.
#
#   bash scripts/test-crates.sh        (a step of scripts/test.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every library crate: the workspace's members under crates/ (brrr, the command line, too:
# it is what `cargo install` would build).
LIBS=(brrr-backend brrr-cpu brrr-tensor brrr-nn brrr-perf brrr-wgpu brrr-cuda brrr-train
    brrr-checkpoint brrr-amp brrr-collectives brrr-data brrr-tp brrr-pp brrr-dp
    brrr-profile brrr-launch brrr)

# The workspace's dev profile for the packaged builds too (a packaged manifest carries no
# profile): the dependencies the tests compiled are then reused rather than built again.
PROFILE=(--config 'profile.dev.opt-level=1' --config 'profile.dev.debug="line-tables-only"'
    --config 'profile.dev.package."*".opt-level=3' --config 'profile.dev.package."*".debug=false')

api_docs() {
    local args=()
    for l in "${LIBS[@]}"; do args+=(-p "$l"); done
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps "${args[@]}" --features "${BRRR_FEATURES:-}"
}

package() {
    local args=()
    for l in "${LIBS[@]}"; do args+=(-p "$l"); done
    # --allow-dirty: a developer runs this on uncommitted work; CI's clone is clean anyway.
    cargo package "${PROFILE[@]}" --allow-dirty "${args[@]}" 2>&1 |
        grep -v -e 'manifest has no documentation, homepage or repository' \
            -e 'package-metadata for more info' -e '^ *|$' -e '^ *= note: see https'
    local rc="${PIPESTATUS[0]}"
    ls -l target/package/*.crate
    return "$rc"
}

outside() {
    local dir=tests/outside
    cargo fmt --manifest-path "$dir/Cargo.toml" --check
    # The workspace's target directory: the dependencies compiled for the tests are reused
    # where the outside project resolves them the same way.
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
        cargo run --locked --manifest-path "$dir/Cargo.toml"
}

echo "--- API docs (cargo doc, warnings are errors)"
api_docs
echo "--- cargo package (verified: each packaged crate builds alone)"
package
echo "--- tests/outside: a project of its own using the crates by path"
outside
