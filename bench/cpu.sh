#!/usr/bin/env bash
# bench/cpu.sh — brrr against PyTorch on this machine's CPU, in one run: GPT training
# throughput (brrr, PyTorch eager, PyTorch torch.compile + SDPA) on the same shapes with
# the same thread count, f32 GEMM (brrr's trait on both of its kernels, torch.matmul,
# numpy's BLAS) and the CPU ceiling MFU divides by (`brrr bench peak`).
#
#   bench/cpu.sh                          # everything: install, build, gemm, train
#   bench/cpu.sh gemm                     # parts: peak gemm train (install and build always run)
#   CONFIGS=default STEPS=50 REPEATS=3 bench/cpu.sh train
#
# Settings (environment):
#   CONFIGS   comma-separated: default (what `brrr train` trains without flags: 4 layers,
#             4 heads, 128 wide, context 128, batch 16) and 6l384 (6 layers, 6 heads,
#             384 wide, context 256, batch 8) [default,6l384]
#   STEPS     timed steps per run [100 for default, 20 for 6l384]
#   WARMUP    steps before the timed ones, excluded on both sides [3]
#   REPEATS   runs per config and side, alternating brrr / eager / compile [1]
#   THREADS   threads of both sides (RAYON_NUM_THREADS, torch.set_num_threads,
#             OPENBLAS_NUM_THREADS) [nproc]
#   SIZES     GEMM sizes [256,512,1024,2048]
#   GEMM_ROUNDS  rounds of GEMM timings, alternating brrr and PyTorch/numpy; the report
#             takes each size's median [5]
#   VENV      the PyTorch virtual environment [~/.cache/brrr-bench/venv]
#   NO_TORCH=1  skip PyTorch entirely (brrr's columns only)
#   BRRR_FLAGS  extra `brrr train` flags, e.g. "--attention composite" [none]
#
# PyTorch and numpy are benchmark dependencies installed here into VENV, never
# dependencies of the crates. Output: a markdown table on stdout and, in
# target/bench-cpu/, table.md, summary.json and every run's log and JSON.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

CONFIGS=${CONFIGS:-default,6l384}
WARMUP=${WARMUP:-3}
REPEATS=${REPEATS:-1}
# nproc honours OMP_NUM_THREADS, which this script sets: count the cores without it.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
THREADS=${THREADS:-$CORES}
SIZES=${SIZES:-256,512,1024,2048}
GEMM_ROUNDS=${GEMM_ROUNDS:-5}
VENV=${VENV:-$HOME/.cache/brrr-bench/venv}
OUT=${OUT:-target/bench-cpu}
PARTS=${*:-peak gemm train}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT"/table.md
rm -rf "$OUT/runs"

export RAYON_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
export MKL_NUM_THREADS=$THREADS MATMUL_NUM_THREADS=$THREADS

# ---- PyTorch -------------------------------------------------------------------------
PY=$VENV/bin/python
TORCH=yes
has_torch() { [[ -x $PY ]] && "$PY" -c 'import torch, numpy' 2>/dev/null; }

# Installs a CPU PyTorch and numpy into VENV unless they are there: the CPU wheel index
# first (a ~200 MB wheel), PyPI's default wheel (CUDA libraries included, several GB, but
# it runs on a CPU) if that index cannot be reached.
install_torch() {
    if has_torch; then
        echo "PyTorch: reusing $VENV (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
        return 0
    fi
    echo "==== installing PyTorch and numpy into $VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV" || return 1
    local t0=$SECONDS log=$OUT/install.log
    if "$PY" -m pip install --progress-bar off --timeout 15 --retries 0 \
        --index-url https://download.pytorch.org/whl/cpu torch >"$log" 2>&1; then
        echo "PyTorch from the CPU index (download.pytorch.org/whl/cpu)"
    else
        echo "the CPU index is unreachable; installing PyPI's default torch wheel (with CUDA libraries)"
        "$PY" -m pip install --progress-bar off torch >>"$log" 2>&1 || return 1
    fi
    "$PY" -m pip install --progress-bar off numpy >>"$log" 2>&1 || return 1
    echo "installed in $((SECONDS - t0)) s; $VENV is $(du -sh "$VENV" | cut -f1)"
    has_torch
}

if [[ ${NO_TORCH:-0} == 1 ]]; then
    TORCH=no
    echo "PyTorch: skipped (NO_TORCH=1); brrr's columns only"
elif ! install_torch; then
    TORCH=no
    echo "PyTorch: NOT INSTALLED (see $OUT/install.log); brrr's columns only" >&2
fi

# ---- brrr ----------------------------------------------------------------------------
echo "==== building brrr --release"
mkdir -p "$HOME/.cache"
flock "$HOME/.cache/brrr-release.lock" cargo build --release -q -p brrr
BRRR=$ROOT/target/release/brrr

# The machine, for the report: CPU, load, versions.
{
    echo "cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo) ($CORES threads available)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "threads: $THREADS"
    echo "brrr train flags beyond the config's: ${BRRR_FLAGS:-none}"
    echo "brrr: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+dirty'), $(rustc --version)"
    if [[ $TORCH == yes ]]; then
        "$PY" -c 'import torch, numpy, platform; print(f"torch: {torch.__version__}, numpy: {numpy.__version__}, python: {platform.python_version()}")'
    fi
} | tee "$OUT/machine.txt"

torch_ref() { "$PY" bench/torch_reference.py --device cpu --threads "$THREADS" "$@"; }

# ---- the CPU ceiling -------------------------------------------------------------------
# How far the peak MFU divides by moves between measurements (five runs, one process).
if [[ " $PARTS " == *" peak "* ]]; then
    echo "==== the CPU ceiling, 5 runs"
    "$BRRR" bench peak --runs 5 | tee "$OUT/peak.log"
fi

# ---- GEMM ----------------------------------------------------------------------------
if [[ " $PARTS " == *" gemm "* ]]; then
    for ((r = 1; r <= GEMM_ROUNDS; r++)); do
        echo "==== GEMM f32, n = $SIZES, round $r of $GEMM_ROUNDS"
        "$BRRR" bench gemm --backend cpu --sizes "$SIZES" | tee "$OUT/gemm-brrr-$r.log"
        if [[ $TORCH == yes ]]; then
            torch_ref gemm --dtypes f32 --size "$SIZES" --numpy --json "$OUT/gemm-torch-$r.json" |
                tee "$OUT/gemm-torch-$r.log"
        fi
    done
else
    # MFU still needs brrr's measured peak: the smallest GEMM run prints it.
    "$BRRR" bench gemm --backend cpu --sizes 64 --reps 1 >"$OUT/gemm-brrr.log"
fi

# ---- training ------------------------------------------------------------------------
# brrr's flags and PyTorch's preset for each config; the batch and context are the
# same on both sides.
brrr_flags() {
    case $1 in
        default) echo "" ;;
        6l384) echo "--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --seq-len 256 --batch-size 8" ;;
        *) echo "unknown config $1 (default, 6l384)" >&2; exit 2 ;;
    esac
}
torch_flags() {
    case $1 in
        default) echo "--preset brrr-default --batch 16 --seq 128" ;;
        6l384) echo "--preset brrr-6l384 --batch 8 --seq 256" ;;
    esac
}
steps_for() {
    if [[ -n ${STEPS:-} ]]; then echo "$STEPS"; elif [[ $1 == default ]]; then echo 100; else echo 20; fi
}

if [[ " $PARTS " == *" train "* ]]; then
    mkdir -p "$OUT/runs"
    IFS=, read -ra CFGS <<<"$CONFIGS"
    for cfg in "${CFGS[@]}"; do
        steps=$(steps_for "$cfg")
        for ((r = 1; r <= REPEATS; r++)); do
            echo "==== $cfg, round $r of $REPEATS: $WARMUP warm-up + $steps timed steps"
            # The default run's schedule (800 steps, warmup 50) stopped early: the same
            # arithmetic per step as a full run. Its first WARMUP steps are dropped from
            # metrics.csv by the report.
            # shellcheck disable=SC2046,SC2086
            "$BRRR" train $(brrr_flags "$cfg") ${BRRR_FLAGS:-} --steps 800 --stop-after $((WARMUP + steps)) \
                --out "$OUT/runs/brrr-$cfg-$r" >"$OUT/train-brrr-$cfg-$r.log" 2>&1 ||
                { cat "$OUT/train-brrr-$cfg-$r.log" >&2; exit 1; }
            grep -E '^(brrr train|throughput|MFU)' "$OUT/train-brrr-$cfg-$r.log"
            if [[ $TORCH == yes ]]; then
                for mode in eager compile; do
                    extra=""
                    [[ $mode == compile ]] && extra="--compile --attention sdpa"
                    # shellcheck disable=SC2046,SC2086
                    torch_ref train $(torch_flags "$cfg") $extra --dtype f32 --lr 2e-3 \
                        --steps "$steps" --warmup-steps "$WARMUP" \
                        --json "$OUT/train-torch-$mode-$cfg-$r.json" >"$OUT/train-torch-$mode-$cfg-$r.log" 2>&1 ||
                        { cat "$OUT/train-torch-$mode-$cfg-$r.log" >&2; exit 1; }
                    grep -E 'tokens/s' "$OUT/train-torch-$mode-$cfg-$r.log"
                done
            fi
        done
    done
fi

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo
python3 bench/cpu_report.py "$OUT" --warmup "$WARMUP" --threads "$THREADS" --configs "$CONFIGS"
