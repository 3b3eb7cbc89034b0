#!/usr/bin/env bash
# bench/finetune.sh — LoRA against full fine-tuning: a base run trained on the shipped
# corpus, then fine-tuned on new text (the book's chapters, a different register) for the
# same number of steps, every weight or LoRA adapters at several ranks. Prints one
# Markdown table: the parameters each trains, its optimizer state, the backend's peak
# bytes in a step, the validation loss on the held-out part of the new text (the last
# tenth of it, which no step trains on), and tokens/s.
#
#   bench/finetune.sh                          # the 10.8M config (6L x 384, ctx 256, B 8)
#   STEPS=50 RANKS="4 16" bench/finetune.sh
#   MODEL="--n-layer 4 --n-embd 128 --n-head 4" bench/finetune.sh   # the default model
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASE_STEPS=${BASE_STEPS:-150}
STEPS=${STEPS:-100}
RANKS=${RANKS:-4 16 64}
# The learning rate of every fine-tuning run (its cosine ends at a tenth of it);
# unset, `brrr finetune`'s default.
LR=${LR:-}
MODEL=${MODEL:---n-layer 6 --n-embd 384 --n-head 6 --block-size 256 --seq-len 256 --batch-size 8}
OUT=${OUT:-target/bench-finetune}
mkdir -p "$OUT"

cargo build --release -q -p brrr
BIN=target/release/brrr

# The new text: the book's chapters, concatenated.
cat book/src/*.md >"$OUT/new.txt"
# shellcheck disable=SC2086 # MODEL is a list of flags
"$BIN" train $MODEL --steps "$BASE_STEPS" --eval-every "$BASE_STEPS" --warmup-steps 20 \
    --out "$OUT/base" --force --quiet >"$OUT/base.log" 2>&1
base_val=$(sed -n 's/^final val loss: *\([0-9.]*\).*/\1/p' "$OUT/base.log")
# The base as it is on the new text: one LoRA step at a learning rate of 1e-12 leaves
# the model where it was (B starts at zero), and evaluates it.
"$BIN" finetune "$OUT/base" --corpus "$OUT/new.txt" --steps 1 --eval-every 1 --warmup-steps 1 \
    --lr 1e-12 --min-lr 0 --lora-rank 1 --out "$OUT/as-is" --force --quiet >"$OUT/as-is.log" 2>&1
as_is=$(sed -n 's/^final val loss: *\([0-9.]*\).*/\1/p' "$OUT/as-is.log")
echo "Base: $BASE_STEPS steps on the shipped corpus, validation loss $base_val there and \
$as_is on the new text before fine-tuning."
echo
echo "| fine-tuning | trained parameters | optimizer state MiB | device peak MiB | val loss on the new text after $STEPS steps | tokens/s |"
echo "|---|---:|---:|---:|---:|---:|"
runs=(full)
for r in $RANKS; do runs+=("lora:$r"); done
for run in "${runs[@]}"; do
    flags=()
    [[ $run == lora:* ]] && flags=(--lora-rank "${run#lora:}")
    [[ -n $LR ]] && flags+=(--lr "$LR" --min-lr "$(awk -v l="$LR" 'BEGIN { print l / 10 }')")
    dir="$OUT/${run//:/-}"
    log=$("$BIN" finetune "$OUT/base" --corpus "$OUT/new.txt" --steps "$STEPS" \
        --eval-every "$STEPS" "${flags[@]}" --out "$dir" --force --quiet 2>&1)
    val=$(sed -n 's/^final val loss: *\([0-9.]*\).*/\1/p' <<<"$log")
    tps=$(sed -n 's/^throughput: *\([0-9]*\).*/\1/p' <<<"$log")
    state=$(sed -n 's/^optimizer [^:]*: \([0-9.]*\) MiB of state.*/\1/p' <<<"$log")
    trained=$(sed -n 's/^LoRA rank [0-9]* (alpha [0-9.]*): \([0-9]*\) adapter parameters trained, \([0-9.]*%\).*/\1 (\2)/p' <<<"$log")
    peak=$(tail -n 1 "$dir/metrics.csv" | cut -d, -f9)
    peak=$(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1048576 }')
    echo "| $run | ${trained:-all} | $state | $peak | $val | $tps |"
done
