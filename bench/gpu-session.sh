#!/usr/bin/env bash
# bench/gpu-session.sh — every GPU check of brrr in one short, bounded run, for a GPU
# machine that is lent for minutes: nothing is built there, each part has its own time
# limit (so one that hangs cannot eat the others'), the most wanted parts run first, and
# the logs end up in one small archive.
#
#   bench/bundle.sh && tar cJf bundle.tar.xz -C bench bundle   # here, with cargo
#   bench/gpu-session.sh bundle.tar.xz /some/dir/results.tgz    # there
#
# The first argument is the bundle (a directory, or a .tar.xz of `bundle/`); the second,
# where the archive of logs goes. `DEBS=DIR` names .deb files (a Vulkan loader, say) to
# unpack into / first. Parts and their limits, in order (seconds):
#   nccl serve 140 · conformance tests 150 · train (BATCH=16, STEPS=20) 190 ·
#   multi (the same, multi-tensor ops off and on) 120 · profile (BATCH=16) 90 · wgpu 70 ·
#   optimizers (STEPS=50: each --optimizer, --offload, a LoRA fine-tune) 240
# about thirteen minutes at most without optimizers; PARTS="serve train" runs some of
# them (the default leaves out train, whose PyTorch side takes the longest, and
# optimizers). The archive leaves out
# checkpoints (a 124M run writes 1.4 GB of them) and the library links.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bundle=${1:?usage: bench/gpu-session.sh BUNDLE(.tar.xz or dir) RESULTS.tgz}
archive=${2:?usage: bench/gpu-session.sh BUNDLE(.tar.xz or dir) RESULTS.tgz}
PARTS=${PARTS:-"nccl serve conformance multi profile wgpu"}

if [[ -n ${DEBS:-} ]]; then
    for f in "$DEBS"/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[[ -f $icd && -z ${VK_DRIVER_FILES:-} ]] && export VK_DRIVER_FILES=$icd

if [[ -f $bundle ]]; then
    rm -rf bench/bundle
    tar xJf "$bundle" -C bench || { echo "gpu-session: cannot unpack $bundle" >&2; exit 2; }
    bundle=bench/bundle
fi
export BUNDLE=$bundle
results=$(mktemp -d)
export OUT=$results

want() { [[ " $PARTS " == *" $1 "* ]]; }
# part LIMIT NAME ARGS...: one bench/cuda.sh call under a time limit, its output in NAME.log.
part() {
    local limit=$1 name=$2 started=$SECONDS
    shift 2
    timeout "$limit" bench/cuda.sh libs "$@" >"$results/session-$name.log" 2>&1
    echo "gpu-session: $name: exit $? after $((SECONDS - started)) s"
    pack
}
# The archive is rewritten after every part, so a session cut short keeps what ran.
pack() {
    tar czf "$archive.partial" -C "$results" --exclude='*.safetensors' --exclude='*.bin' \
        --exclude=cuda-libs . && mv "$archive.partial" "$archive"
}
{
    date -u
    nvidia-smi 2>&1
    ldconfig -p | grep -E 'libvulkan|libnccl'
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
} >"$results/machine.txt"

serve_parts=()
want nccl && serve_parts+=(nccl)
want serve && serve_parts+=(serve)
[[ ${#serve_parts[@]} -gt 0 ]] && part 140 serve "${serve_parts[@]}"
want conformance && part 150 conformance conformance tests
want train && STEPS=${STEPS:-20} BATCH=${BATCH:-16} part 190 train train
want multi && STEPS=${STEPS:-20} BATCH=${BATCH:-16} part 120 multi multi
want profile && BATCH=${BATCH:-16} part 90 profile profile
want wgpu && part 70 wgpu wgpu
want optimizers && STEPS=${STEPS:-50} part 240 optimizers optimizers

pack || exit 1
echo "gpu-session: logs in $archive ($(du -h "$archive" | cut -f1))"
grep -h "FAILED\|cuda.sh: done" "$results"/session-*.log
