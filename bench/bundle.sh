#!/usr/bin/env bash
# bench/bundle.sh — builds everything bench/cuda.sh runs into one folder of stripped
# binaries, for a GPU machine that has the NVIDIA driver and CUDA libraries but no Rust
# toolchain.
#
#   bench/bundle.sh                  # writes bench/bundle/ (git ignores it)
#   bench/bundle.sh /some/dir
#
# Then, on the GPU machine, from a copy of this repository with the bundle in it:
#   bench/cuda.sh                    # uses bench/bundle/ when cargo is absent
#   BUNDLE=/some/dir bench/cuda.sh   # or says where it is
#
# The binaries carry the CUDA C kernels (NVRTC compiles them there) and load the CUDA
# libraries at run time, so they need only the same CPU architecture and a glibc at least
# as new as the build machine's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dest=${1:-bench/bundle}
tmp="$dest.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"

echo "==== bundle: building (release)"
cargo build --release -p brrr --features cuda,wgpu
cargo build --release -p brrr-cuda --example cuda_bench

# The test binaries have hashed names: ask cargo which files they are.
echo "==== bundle: building the GPU test binaries"
cargo test --release --no-run --message-format=json \
    -p brrr-conformance --test cuda --test train_cuda --test wgpu --test train_wgpu --test layouts \
    -p brrr-cuda --test gpu --test nvrtc >"$tmp/artifacts.json"
# NCCL's one-rank check lives in brrr-collectives' unit tests (feature cuda).
cargo test --release --no-run --message-format=json -p brrr-collectives --features cuda --lib \
    >>"$tmp/artifacts.json"
python3 - "$tmp/artifacts.json" "$tmp" <<'PY'
import json, shutil, sys
artifacts, dest = sys.argv[1], sys.argv[2]
found = []
for line in open(artifacts):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind = m["target"]["kind"]
    if not m["profile"]["test"] or kind not in (["test"], ["lib"]):
        continue
    package = m["package_id"].split("#")[-1].split("@")[0]
    name = f"test-{package}-{'lib' if kind == ['lib'] else m['target']['name']}"
    shutil.copy2(m["executable"], f"{dest}/{name}")
    found.append(name)
wanted = {"test-brrr-conformance-cuda", "test-brrr-conformance-train_cuda",
          "test-brrr-conformance-wgpu", "test-brrr-conformance-train_wgpu",
          "test-brrr-cuda-gpu", "test-brrr-cuda-nvrtc", "test-brrr-conformance-layouts",
          "test-brrr-collectives-lib"}
missing = wanted - set(found)
if missing:
    sys.exit(f"bundle: cargo did not report {sorted(missing)}")
PY
rm "$tmp/artifacts.json"

target=${CARGO_TARGET_DIR:-target}
cp "$target/release/brrr" "$tmp/brrr"
cp "$target/release/examples/cuda_bench" "$tmp/cuda_bench"
if command -v strip >/dev/null; then
    strip "$tmp"/*
fi
{
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "machine: $(uname -m), $(ldd --version 2>/dev/null | head -n 1)"
} >"$tmp/MANIFEST"

rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "==== bundle: $dest"
ls -l "$dest"
du -sh "$dest"
