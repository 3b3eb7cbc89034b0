#!/usr/bin/env bash
# The library crates as someone outside this repository gets them:
#   1. their API docs build without a warning (every public item documented: each crate
#      has #![warn(missing_docs)]);
#   2. `cargo package` succeeds for each (metadata, versions on path dependencies, every
#      file it includes inside its own directory) and the packaged crate compiles alone,
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
    brrr-profile brrr-launch brrr-serve brrr)

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"

api_docs() {
    local args=()
    for l in "${LIBS[@]}"; do args+=(-p "$l"); done
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps "${args[@]}" --features "${BRRR_FEATURES:-}"
}

# `cargo package` checks each manifest (metadata, versions on path dependencies, the
# files it includes). Its own verification would build every packaged crate alone, each
# resolving its dependencies' features anew: on a cold machine that is most of the
# dependency tree compiled again, several minutes. Instead the packages are unpacked side
# by side, their brrr dependencies patched to each other (as crates.io would serve them),
# and each is type-checked alone (`cargo check -p`, its own feature resolution), sharing
# the workspace's target directory and lock file.
package() {
    local args=()
    for l in "${LIBS[@]}"; do args+=(-p "$l"); done
    # --allow-dirty: a developer runs this on uncommitted work; CI's clone is clean anyway.
    cargo package --no-verify --allow-dirty "${args[@]}" 2>&1 |
        grep -v -e 'manifest has no documentation, homepage or repository' \
            -e 'package-metadata for more info' -e '^ *|$' -e '^ *= note: see https'
    local rc="${PIPESTATUS[0]}"
    ((rc == 0)) || return "$rc"

    local dir=target/package/alone
    rm -rf "$dir"
    mkdir -p "$dir"
    {
        echo '[workspace]'
        echo 'resolver = "3"'
        printf 'members = ['
        printf '"%s", ' "${LIBS[@]/%/-$VERSION}"
        echo ']'
        # The workspace's profiles, so the dependencies already checked are reused.
        sed -n '/^\[profile/,$p' Cargo.toml
        echo '[patch.crates-io]'
        for l in "${LIBS[@]}"; do
            tar -xzf "target/package/$l-$VERSION.crate" -C "$dir"
            echo "$l = { path = \"$l-$VERSION\" }"
        done
    } > "$dir/Cargo.toml"
    cp Cargo.lock "$dir/"
    # `cargo package` stamps every file with one fixed time (reproducible archives), so
    # the unpacked sources would look unchanged since the last run and cargo would reuse
    # that run's checks of older code: give them the time they were unpacked.
    find "$dir" -type f -exec touch {} +
    for l in "${LIBS[@]}"; do
        echo "cargo check -p $l (from $l-$VERSION.crate)"
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
            cargo check -q --manifest-path "$dir/Cargo.toml" -p "$l"
    done
}

outside() {
    local dir=tests/outside
    cargo fmt --manifest-path "$dir/Cargo.toml" --check
    # The workspace's target directory: the dependencies compiled for the tests are reused
    # where the outside project resolves them the same way.
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" \
        cargo run --locked --manifest-path "$dir/Cargo.toml"
}

# phase TITLE FUNCTION: runs FUNCTION under a header and says how long it took.
phase() {
    echo "--- $1"
    local t0=$SECONDS
    "$2"
    echo "--- $1: $((SECONDS - t0)) s"
}

phase "API docs (cargo doc, warnings are errors)" api_docs
phase "cargo package, then each packaged crate checked alone" package
phase "tests/outside: a project of its own using the crates by path" outside
