#!/usr/bin/env bash
# The collectives over MPI: installs OpenMPI when missing (idempotent), builds brrr with
# `--features mpi`, and checks every collective and algorithm against the reference
# under `mpirun -np 4`, under `brrr launch --nproc 4` (which hands the ranks to mpirun
# when built with MPI) and under `brrr launch --transport socket`.
#
#   scripts/test-mpi.sh             # install if needed, build, run
#   scripts/test-mpi.sh --install   # only make sure OpenMPI and libclang are present
#
# Where OpenMPI is missing and apt-get is not available, reports `mpi: SKIPPED (...)`
# through $BRRR_SKIP_LOG (the test command's skip list) and succeeds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export DEBIAN_FRONTEND=noninteractive

skip() {
    echo "mpi: SKIPPED ($1)"
    if [[ -n "${BRRR_SKIP_LOG:-}" ]]; then echo "mpi collectives (scripts/test-mpi.sh): SKIPPED ($1)" >> "$BRRR_SKIP_LOG"; fi
    exit 0
}

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

have_mpi() { command -v mpirun > /dev/null && command -v mpicc > /dev/null; }
have_libclang() { ldconfig -p 2> /dev/null | grep -q 'libclang.*\.so'; }

if ! have_mpi || ! have_libclang; then
    if ! command -v apt-get > /dev/null; then
        skip "OpenMPI or libclang missing and no apt-get to install them"
    fi
    echo "==> installing openmpi-bin libopenmpi-dev libclang-dev"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q < /dev/null
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
        openmpi-bin libopenmpi-dev libclang-dev < /dev/null
else
    echo "==> OpenMPI present: $(mpirun --version 2> /dev/null | head -n 1)"
fi
if [[ "${1:-}" == "--install" ]]; then exit 0; fi

# The dev profile, as every other step: only brrr-collectives (with its mpi feature),
# the mpi crate and the brrr binary are compiled again.
# Under scripts/test.sh (BRRR_FEATURES set) this is the binary its tests step built: the
# same packages and features, so nothing compiles again.
if [[ -n "${BRRR_FEATURES:-}" ]]; then
    echo "==> cargo build --workspace --bins --features $BRRR_FEATURES"
    cargo build --workspace --bins --features "$BRRR_FEATURES"
else
    echo "==> cargo build -p brrr --features mpi"
    cargo build -p brrr --features mpi
fi
# Where cargo put it: $CARGO_TARGET_DIR when set (scripts/test.sh honours it too).
BRRR="${CARGO_TARGET_DIR:-$ROOT/target}/debug/brrr"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export BRRR_COLL_TIMEOUT_S=60

expect() { # expect TEXT COMMAND...: runs COMMAND, fails unless its output contains TEXT
    local want="$1" out
    shift
    echo "==> $*"
    out="$("$@")"
    printf '%s\n' "$out"
    grep -qF "$want" <<< "$out" || {
        echo "error: expected '$want'" >&2
        exit 1
    }
}

expect "on 4 ranks over mpi: 0 wrong elements" \
    mpirun --oversubscribe -np 4 "$BRRR" bench collectives --check
expect "on 4 ranks over mpi: 0 wrong elements" \
    "$BRRR" launch --nproc 4 -- bench collectives --check
expect "on 4 ranks over socket: 0 wrong elements" \
    "$BRRR" launch --transport socket --nproc 4 -- bench collectives --check
expect "out of bounds values : 0 OK" \
    mpirun --oversubscribe -np 3 "$BRRR" bench collectives --ops all-reduce --max-bytes 65536

# Faults: a rank that exits or stops answering mid-collective ends the job with an
# error that names it, well within the timeout (5 s here), never a hang.
expect_failure() { # expect_failure TEXT MAX_SECONDS COMMAND...
    local want="$1" max="$2" out start elapsed
    shift 2
    echo "==> $* (must fail within ${max} s)"
    start=$SECONDS
    if out="$(BRRR_COLL_TIMEOUT_S=5 timeout $((max + 30)) "$@" 2>&1)"; then
        printf '%s\n' "$out"
        echo "error: expected a failure" >&2
        exit 1
    fi
    elapsed=$((SECONDS - start))
    printf '%s\n' "$out" | tail -n 20
    grep -qF "$want" <<< "$out" || {
        echo "error: expected '$want'" >&2
        exit 1
    }
    if ((elapsed > max)); then
        echo "error: took ${elapsed} s, more than ${max} s" >&2
        exit 1
    fi
    echo "    failed as expected in ${elapsed} s"
}
FAULT=(bench collectives --ops all-reduce --algorithms ring --max-bytes 16777216
    --budget-bytes 1073741824 --die-rank 2 --die-after-ms 500)
expect_failure "rank 2: exiting on purpose" 20 \
    mpirun --oversubscribe -np 4 "$BRRR" "${FAULT[@]}" --die-how exit
expect_failure "no message from rank 2 within 5.0 s" 20 \
    mpirun --oversubscribe -np 4 "$BRRR" "${FAULT[@]}" --die-how hang
TP_OUT="$(mktemp -d)"
TP_ARGS=(train --tp 2 --dp 2 --sp --synthetic --steps 2 --batch-size 4 --seq-len 16
    --n-layer 2 --n-head 4 --n-embd 32 --eval-every 2 --eval-batches 1 --quiet --force)
expect "steps done:        2" \
    mpirun --oversubscribe -np 4 "$BRRR" "${TP_ARGS[@]}" --out "$TP_OUT/mpi"
expect "steps done:        2" \
    "$BRRR" launch --transport socket --nproc 4 -- "${TP_ARGS[@]}" --out "$TP_OUT/socket"
test -s "$TP_OUT/mpi/checkpoint.safetensors" && test -s "$TP_OUT/socket/metrics.csv"
rm -rf "$TP_OUT"
# Pipeline stages as processes: the same losses as the same stages as threads.
PP_DIR="$(mktemp -d)"
PP_ARGS=(train --pp 2 --schedule 1f1b --micro-batches 4 --steps 3 --batch-size 2 --seq-len 32 --quiet --force)
PP_WANT="$("$BRRR" "${PP_ARGS[@]}" --out "$PP_DIR/threads" | grep '^final train loss')"
expect "$PP_WANT" mpirun --oversubscribe -np 2 "$BRRR" "${PP_ARGS[@]}" --out "$PP_DIR/mpi"
expect "$PP_WANT" "$BRRR" launch --transport socket --nproc 2 -- "${PP_ARGS[@]}" --out "$PP_DIR/socket"
# Stages two tensor ranks wide as processes (world = pp 2 × tp 2): the threads' losses.
PPTP_WANT="$("$BRRR" "${PP_ARGS[@]}" --tp 2 --out "$PP_DIR/tp-threads" | grep '^final train loss')"
expect "$PPTP_WANT" mpirun --oversubscribe -np 4 "$BRRR" "${PP_ARGS[@]}" --tp 2 --out "$PP_DIR/tp-mpi"
expect "$PPTP_WANT" "$BRRR" launch --transport socket --nproc 4 -- "${PP_ARGS[@]}" --tp 2 --sp \
    --out "$PP_DIR/tp-socket"
rm -rf "$PP_DIR"
# brrr-dp: --dp 4 --zero 0 and --zero 3 over MPI give bitwise the losses of in-process ranks
# (the same ring schedules reduce in the same order whatever the transport).
DPTMP="$(mktemp -d)"
for zero in 0 3; do
    dp_flags=(train --dp 4 --zero "$zero" --steps 3 --batch-size 4 --seq-len 32 --n-layer 2
        --n-embd 64 --eval-every 3 --quiet)
    echo "==> brrr ${dp_flags[*]} (in-process, then mpirun -np 4)"
    "$BRRR" "${dp_flags[@]}" --out "$DPTMP/inproc$zero" > /dev/null
    mpirun --oversubscribe -np 4 "$BRRR" "${dp_flags[@]}" --out "$DPTMP/mpi$zero" > /dev/null
    if ! cmp <(cut -d, -f1-3 "$DPTMP/inproc$zero/metrics.csv") \
        <(cut -d, -f1-3 "$DPTMP/mpi$zero/metrics.csv"); then
        echo "error: --dp 4 --zero $zero losses differ between mpirun and in-process ranks" >&2
        exit 1
    fi
done
rm -rf "$DPTMP"
echo "mpi: all checks passed"
