#!/usr/bin/env bash
# Installs NVIDIA's NVRTC runtime compiler (libnvrtc.so.12 + libnvrtc-builtins) from PyPI into a
# cached prefix, so that kernels/*.cu can be compiled to PTX on a machine with no GPU and no
# CUDA toolkit. Idempotent: a second run only prints the library directory.
#
#   eval "$(bench/install-nvrtc.sh --env)"   # exports BRRR_NVRTC_LIB and LD_LIBRARY_PATH
#   bench/install-nvrtc.sh                   # prints the directory holding libnvrtc.so.12
#
# Needs python3 with pip (or `uv`). Nothing is installed outside the cache directory.
set -euo pipefail

VERSION="${BRRR_NVRTC_VERSION:-12.8.93}"
CACHE="${BRRR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brrr}"
PREFIX="$CACHE/nvrtc-$VERSION"
LIBDIR="$PREFIX/nvidia/cuda_nvrtc/lib"

if [[ ! -e "$LIBDIR/libnvrtc.so.12" ]]; then
    mkdir -p "$CACHE"
    tmp="$(mktemp -d "$CACHE/nvrtc-install.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # --target installs the wheel's files only (no venv needed); --no-deps keeps it to NVRTC.
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$tmp" "nvidia-cuda-nvrtc-cu12==$VERSION" >&2
    if [[ ! -e "$tmp/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]]; then
        echo "install-nvrtc: the wheel did not provide nvidia/cuda_nvrtc/lib/libnvrtc.so.12" >&2
        exit 1
    fi
    rm -rf "$PREFIX"
    mv "$tmp" "$PREFIX"
    trap - EXIT
    # cudarc's dynamic loader looks for `libnvrtc.so` (and versioned names) on the loader
    # path; give it the unversioned name too.
    ln -sf libnvrtc.so.12 "$LIBDIR/libnvrtc.so"
fi

if [[ "${1:-}" == "--env" ]]; then
    echo "export BRRR_NVRTC_LIB=\"$LIBDIR\""
    echo "export LD_LIBRARY_PATH=\"$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
else
    echo "$LIBDIR"
fi
