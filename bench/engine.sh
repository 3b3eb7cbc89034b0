#!/usr/bin/env bash
# bench/engine.sh — the default CPU training run on two versions of brrr, in one go:
# tokens/s of each, and whether their metrics agree bit for bit.
#
#   bench/engine.sh                     # BASE = 85133c3 (the last commit before brrr-train)
#   BASE=<commit> STEPS=200 ROUNDS=3 bench/engine.sh
#
# Builds BASE (in a detached git worktree under target/bench-engine/) and the working tree,
# both `--release`, then runs `brrr train --steps 800 --stop-after STEPS` with each, ROUNDS
# times, alternating (base, new, base, new, ...) so that a machine that gets busier or
# quieter during the run affects both alike. It prints each run's tokens/s (the first step,
# which pays for allocation, is excluded by brrr itself), the median of each, their ratio,
# and compares the two `metrics.csv` files column by column: `step, loss, val_loss, lr,
# grad_norm` must be identical text (the wall-clock `tokens_per_s` column is not compared).
# Exits non-zero if they differ. The working tree runs with NEW_FLAGS (default
# `--attention composite`: the base's attention, since the fused kernel sums in another
# order; set NEW_FLAGS= to time the new default against the base, whose metrics then
# differ in the last digits).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

BASE=${BASE:-85133c3}
STEPS=${STEPS:-800}
ROUNDS=${ROUNDS:-1}
NEW_FLAGS=${NEW_FLAGS---attention composite}
OUT=${OUT:-target/bench-engine}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

echo "==== building base $BASE"
if [[ ! -d $OUT/base-src ]]; then
    git worktree add --detach "$OUT/base-src" "$BASE" >/dev/null
fi
git -C "$OUT/base-src" checkout --detach -q "$BASE"
(cd "$OUT/base-src" && CARGO_TARGET_DIR="$OUT/base-target" cargo build --release -q -p brrr)
echo "==== building the working tree"
cargo build --release -q -p brrr
BIN_BASE="$OUT/base-target/release/brrr"
BIN_NEW="$ROOT/target/release/brrr"

# run NAME BIN DIR [FLAGS...]: one training run; prints its tokens/s.
run() {
    local bin=$2 dir=$3
    shift 3
    rm -rf "$dir"
    "$bin" train --steps 800 --stop-after "$STEPS" --out "$dir" --quiet "$@" >"$dir.log" 2>&1 ||
        { echo "run $1 failed:" >&2; cat "$dir.log" >&2; exit 1; }
    awk '/^throughput:/ { print $2 }' "$dir.log"
}

declare -a T_BASE T_NEW
for ((r = 1; r <= ROUNDS; r++)); do
    T_BASE+=("$(run base "$BIN_BASE" "$OUT/run-base-$r")")
    # shellcheck disable=SC2086 # NEW_FLAGS is a list of flags
    T_NEW+=("$(run new "$BIN_NEW" "$OUT/run-new-$r" $NEW_FLAGS)")
    echo "round $r: base ${T_BASE[-1]} tokens/s, new ${T_NEW[-1]} tokens/s"
done

median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
MB=$(median "${T_BASE[@]}")
MN=$(median "${T_NEW[@]}")

echo
echo "| version | tokens/s (median of $ROUNDS, $STEPS steps) | ratio |"
echo "|---|---:|---:|"
echo "| base $BASE | $MB | 1.00 |"
echo "| new $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty') | $MN | $(awk -v a="$MN" -v b="$MB" 'BEGIN { printf "%.3f", a / b }') |"

# The metrics without the wall-clock column.
cols() { cut -d, -f1-5 "$1/metrics.csv"; }
echo
if diff <(cols "$OUT/run-base-1") <(cols "$OUT/run-new-1") >"$OUT/metrics.diff"; then
    echo "metrics.csv (step, loss, val_loss, lr, grad_norm): identical over $STEPS steps"
else
    echo "metrics.csv differs between base and new (first lines of $OUT/metrics.diff):"
    head -n 10 "$OUT/metrics.diff"
    exit 1
fi
