#!/usr/bin/env bash
# bench/optimizers.sh — the optimizers side by side on one model and one data stream:
# the bytes of optimizer state each allocated (against its estimate), the backend's peak
# bytes in a step, the validation loss after the same number of steps, and tokens/s.
#
#   bench/optimizers.sh                       # the 10.8M config (6L x 384, ctx 256, B 8)
#   STEPS=300 OPTIMIZERS="adamw adamw8bit" bench/optimizers.sh
#   MODEL="--n-layer 4 --n-embd 128 --n-head 4" bench/optimizers.sh   # the default model
#   OPTIMIZERS="adamw adamw+offload" bench/optimizers.sh                # AdamW on the host
#
# An entry NAME+offload trains with `--optimizer NAME --offload`: the optimizer's state and
# update on the host, its pipeline's phases printed per update below the table.
# Each optimizer trains `brrr train --steps STEPS` from the same seed on the shipped corpus
# (so every run sees the same batches), evaluating at the end. The state bytes, their
# estimate and GaLore's SVD time are the lines `brrr train` prints in its summary; the
# validation loss and tokens/s are its summary's too. Prints one Markdown table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

STEPS=${STEPS:-150}
OPTIMIZERS=${OPTIMIZERS:-adamw adamw8bit galore:64:50 galore:128:50 adamw+offload}
MODEL=${MODEL:---n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --seq-len 256 --batch-size 8}
OUT=${OUT:-target/bench-optimizers}
mkdir -p "$OUT"

cargo build --release -q -p brrr
BIN=target/release/brrr

echo "| optimizer | state MiB | estimate MiB | AdamW f32 MiB | device peak MiB | val loss after $STEPS steps | tokens/s | SVDs (s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
offload_lines=()
for entry in $OPTIMIZERS; do
    opt=${entry%+offload}
    flags=()
    [[ $entry == *+offload ]] && flags=(--offload)
    dir="$OUT/${entry//[:+]/-}"
    # shellcheck disable=SC2086 # MODEL is a list of flags
    log=$("$BIN" train $MODEL --steps "$STEPS" --eval-every "$STEPS" --warmup-steps 20 \
        --optimizer "$opt" "${flags[@]}" --out "$dir" --force 2>&1)
    val=$(sed -n 's/^final val loss: *\([0-9.]*\).*/\1/p' <<<"$log")
    tps=$(sed -n 's/^throughput: *\([0-9]*\).*/\1/p' <<<"$log")
    state=$(sed -n 's/^optimizer [^:]*\(:[0-9:]*\)\?: \([0-9.]*\) MiB of state\( on the host\)\?, estimated \([0-9.]*\) MiB.*f32 moments \([0-9.]*\) MiB/\2 | \4 | \5/p' <<<"$log")
    svd=$(sed -n 's/^GaLore: \([0-9]*\) SVDs took \([0-9.]*\) s.*/\1 (\2)/p' <<<"$log")
    # The backend's peak bytes in the last step (metrics.csv's peak_bytes column).
    peak=$(tail -n 1 "$dir/metrics.csv" | cut -d, -f9)
    peak=$(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1048576 }')
    echo "| $entry | $state | $peak | $val | $tps | ${svd:--} |"
    off=$(sed -n 's/^offload: //p' <<<"$log")
    [[ -n $off ]] && offload_lines+=("- $entry: $off")
done
if ((${#offload_lines[@]})); then
    echo
    printf '%s\n' "${offload_lines[@]}"
fi
