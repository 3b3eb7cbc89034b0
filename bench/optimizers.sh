#!/usr/bin/env bash
# bench/optimizers.sh — the optimizers side by side on one model and one data stream:
# the bytes of optimizer state each allocated (against its estimate), the validation
# loss after the same number of steps, and tokens/s.
#
#   bench/optimizers.sh                       # the 10.8M config (6L x 384, ctx 256, B 8)
#   STEPS=300 OPTIMIZERS="adamw adamw8bit" bench/optimizers.sh
#   MODEL="--n-layer 4 --n-embd 128 --n-head 4" bench/optimizers.sh   # the default model
#
# Each optimizer trains `brrr train --steps STEPS` from the same seed on the shipped corpus
# (so every run sees the same batches), evaluating at the end. The state bytes, their
# estimate and GaLore's SVD time are the lines `brrr train` prints in its summary; the
# validation loss and tokens/s are its summary's too. Prints one Markdown table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

STEPS=${STEPS:-150}
OPTIMIZERS=${OPTIMIZERS:-adamw adamw8bit galore:64:50 galore:128:50}
MODEL=${MODEL:---n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --seq-len 256 --batch-size 8}
OUT=${OUT:-target/bench-optimizers}
mkdir -p "$OUT"

cargo build --release -q -p brrr
BIN=target/release/brrr

echo "| optimizer | state MiB | estimate MiB | AdamW f32 MiB | val loss after $STEPS steps | tokens/s | SVDs (s) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for opt in $OPTIMIZERS; do
    dir="$OUT/${opt//:/-}"
    # shellcheck disable=SC2086 # MODEL is a list of flags
    log=$("$BIN" train $MODEL --steps "$STEPS" --eval-every "$STEPS" --warmup-steps 20 \
        --optimizer "$opt" --out "$dir" --force 2>&1)
    val=$(sed -n 's/^final val loss: *\([0-9.]*\).*/\1/p' <<<"$log")
    tps=$(sed -n 's/^throughput: *\([0-9]*\).*/\1/p' <<<"$log")
    state=$(sed -n 's/^optimizer [^:]*\(:[0-9:]*\)\?: \([0-9.]*\) MiB of state, estimated \([0-9.]*\) MiB.*f32 moments \([0-9.]*\) MiB/\2 | \3 | \4/p' <<<"$log")
    svd=$(sed -n 's/^GaLore: \([0-9]*\) SVDs took \([0-9.]*\) s.*/\1 (\2)/p' <<<"$log")
    echo "| $opt | $state | $val | $tps | ${svd:--} |"
done
