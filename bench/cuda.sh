#!/usr/bin/env bash
# bench/cuda.sh — the CUDA benchmark of brrr, in one go, on a machine with an NVIDIA GPU.
#
#   bench/cuda.sh              # everything
#   STEPS=50 BATCH=16 bench/cuda.sh
#   bench/cuda.sh conformance gemm   # only some parts: libs conformance tests gemm bandwidth train multi amp profile data wgpu nccl serve optimizers
#
# 1. conformance: the op-by-op suite on CUDA against brrr-cpu (cuBLAS and every own GEMM
#    kernel) and `brrr train`'s loop against the CPU run; then the GPU-only tests of
#    brrr-cuda (streams, events, allocator, OOM) and the NVRTC compile checks.
# 2. gemm: TFLOP/s at 4096^3 in f32, TF32 and bf16 for cuBLAS, cuBLASLt and brrr's own
#    kernels v1-v4, then PyTorch's torch.matmul on the same GPU.
# 3. bandwidth: GB/s of element-wise, softmax, LayerNorm, cross-entropy and cast kernels
#    next to a measured device-to-device copy, then the same ops in PyTorch; then the
#    reductions with few outputs (bias gradient, gradient sum and norm), one pass against
#    the split and fused kernels; then the embedding backward, v1 against v2.
# 4. train: the GPT-2 small (124M) preset on synthetic tokens with `brrr train`, in f32
#    and with --amp bf16, then the equivalent PyTorch model (bench/torch_reference.py) in
#    f32, bf16 autocast and bf16 with torch.compile: tokens/s and MFU for all.
#    multi: the same 124M training run (f32 and bf16) with the optimizer phases as one
#    kernel per parameter (BRRR_CUDA_MULTI_TENSOR=0) and as one launch per phase over
#    every parameter (multi-tensor apply, the default): tokens/s both ways.
# 5. amp: `brrr bench amp` on the 124M preset: step time, tokens/s and memory of f32, bf16
#    and fp16 (the target is bf16 at least 2x f32's tokens/s).
#    profile: an op-by-op profile of a few f32 and bf16 steps of the same run (`--profile`):
#    which kinds of op take a step's time, the ranking the tokens/s alone cannot give.
# 6. data: the host-to-device path of a batch: GB/s of an upload through pinned staging,
#    and how much of it hides behind GEMMs enqueued before it (copy stream) against a
#    write that must wait for them.
# 7. wgpu: brrr-wgpu on the same GPU through Vulkan: the conformance suite, training
#    against the CPU, GEMM GFLOP/s per WGSL kernel version, the element-wise overhead /
#    bandwidth sweep and the reductions with few outputs (one pass against the split).
#    Needs a Vulkan loader (libvulkan.so.1) and the NVIDIA ICD.
# 8. nccl: brrr-collectives' NCCL communicator with one rank (what one GPU allows).
# 9. serve: `brrr bench decode` on the 124M preset in f32 and bf16 at batch 1, 8 and 64
#    (tokens/s against the memory-bandwidth bound), the same through Hugging Face
#    transformers (bench/transformers_decode.py), and brrr on wgpu (Vulkan) when present.
# 10. optimizers: the 124M preset on the shipped corpus for STEPS steps with each
#    --optimizer (adamw, adamw8bit) and adamw --offload: state bytes, the
#    device's peak, validation loss, tokens/s (bench/optimizers.sh's table on the GPU);
#    then a base run fine-tuned on the book's chapters, every weight and LoRA rank 16
#    (bench/finetune.sh's). Not in the default list: run it by name.
#
# Needs: an NVIDIA driver, a CUDA toolkit's NVRTC and cuBLAS (12.x or 13.x), for the
# PyTorch rows python3 with torch, and either cargo or a bundle of prebuilt binaries from
# bench/bundle.sh (BUNDLE=DIR; bench/bundle/ is used by default when cargo is absent).
# Everything is written to $OUT (default target/bench-cuda) as well as printed. A part
# that fails is reported at the end and makes the script exit non-zero; the other parts
# still run.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${OUT:-target/bench-cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SIZE=${SIZE:-4096}
STEPS=${STEPS:-30}
BATCH=${BATCH:-8}
SEQ=${SEQ:-1024}
PYTHON=${PYTHON:-python3}
export BRRR_REQUIRE_CUDA=1 # absence of the GPU is a failure here, not a skip
BUNDLE=${BUNDLE:-}
if [[ -z $BUNDLE ]] && ! command -v cargo >/dev/null && [[ -x bench/bundle/brrr ]]; then
    BUNDLE=bench/bundle
fi
if [[ -n $BUNDLE ]]; then
    [[ -x $BUNDLE/brrr ]] || { echo "bench/cuda.sh: $BUNDLE/brrr missing: run bench/bundle.sh" >&2; exit 2; }
    BUNDLE=$(cd "$BUNDLE" && pwd)
    echo "==== using the prebuilt binaries in $BUNDLE"
    cat "$BUNDLE/MANIFEST" 2>/dev/null || true
elif ! command -v cargo >/dev/null; then
    echo "bench/cuda.sh: no cargo and no bundle. Install Rust (rustc 1.95 or newer), or run" >&2
    echo "bench/bundle.sh on a machine that has it and copy bench/bundle/ here." >&2
    exit 2
fi

# The three things the script runs, from cargo or from the bundle.
brrr() {
    if [[ -n $BUNDLE ]]; then "$BUNDLE/brrr" "$@"; else cargo run --release -q -p brrr --features cuda,wgpu -- "$@"; fi
}
cuda_bench() {
    if [[ -n $BUNDLE ]]; then
        "$BUNDLE/cuda_bench" "$@"
    else
        cargo run --release -q -p brrr-cuda --example cuda_bench -- "$@"
    fi
}
# gpu_tests PACKAGE TEST...: the package's test files, one test at a time. The emulator
# tests are skipped: on a GPU machine they only repeat what CI checks everywhere.
gpu_tests() {
    local pkg=$1 t rc=0
    shift
    if [[ -n $BUNDLE ]]; then
        for t in "$@"; do
            echo "---- $pkg/$t"
            "$BUNDLE/test-$pkg-$t" --nocapture --test-threads=1 --skip emulat || rc=1
        done
        return $rc
    fi
    local args=()
    for t in "$@"; do args+=(--test "$t"); done
    cargo test --release -p "$pkg" "${args[@]}" -- --nocapture --test-threads=1 --skip emulat
}
parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(libs conformance tests gemm bandwidth train multi amp profile data wgpu nccl serve)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
failed=()
step() { # step NAME CMD... : runs CMD, tees output to $OUT/NAME.log, records failure
    local name=$1
    shift
    echo
    echo "==== $name: $*"
    if "$@" 2>&1 | tee "$OUT/$name.log"; then
        return 0
    fi
    echo "==== $name FAILED (log: $OUT/$name.log)"
    failed+=("$name")
    return 1
}

# ---- CUDA libraries ---------------------------------------------------------------------
# brrr-cuda loads libcuda, libnvrtc, libcublas and libcublasLt at run time through
# cudarc, which asks the dynamic loader for `libNAME.so`, `libNAME.so.12`, ... A CUDA 13
# toolkit names them `.so.13`, and its lib64 is not always on the loader path. Link
# whatever is installed into one directory under the unversioned names (plus NVRTC's
# builtins, which libnvrtc loads by name) and put it first on LD_LIBRARY_PATH.
find_lib() { # find_lib NAME (e.g. libcublas.so): prints the newest match
    local name=$1 d f
    for d in "${CUDA_HOME:-}/lib64" "${CUDA_PATH:-}/lib64" /usr/local/cuda/lib64 \
        /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/targets/sbsa-linux/lib \
        /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64; do
        [[ -d $d ]] || continue
        f=$(ls -1 "$d/$name" "$d/$name".[0-9]* 2>/dev/null | sort -V | tail -n 1)
        if [[ -n $f ]]; then
            echo "$f"
            return 0
        fi
    done
    f=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 ~ "^"n {print $NF}' | sort -V | tail -n 1)
    if [[ -n $f ]]; then
        echo "$f"
        return 0
    fi
    # Last, the wheels PyTorch depends on (nvidia-cublas, nvidia-cuda-nvrtc) put the
    # libraries under site-packages/nvidia/*/lib.
    $PYTHON - "$name" 2>/dev/null <<'PY'
import glob, os, site, sys
name = sys.argv[1]
hits = []
for sp in site.getsitepackages():
    for pat in ("nvidia/*/lib", "nvidia/*/*/lib"):
        for d in glob.glob(os.path.join(sp, pat)):
            hits += glob.glob(os.path.join(d, name)) + glob.glob(os.path.join(d, name + ".[0-9]*"))
if hits:
    print(sorted(hits)[-1])
PY
}
if want libs; then
    libdir="$OUT/cuda-libs"
    mkdir -p "$libdir"
    echo "==== libs: linking CUDA libraries into $libdir"
    for lib in libnvrtc.so libcublas.so libcublasLt.so libnccl.so; do
        f=$(find_lib "$lib")
        if [[ -z $f ]]; then
            echo "  $lib: not found (install the CUDA toolkit, or set CUDA_HOME)"
            continue
        fi
        echo "  $lib -> $f"
        ln -sf "$f" "$libdir/$lib"
        if [[ $lib == libnvrtc.so ]]; then
            for b in "$(dirname "$f")"/libnvrtc-builtins.so*; do
                [[ -e $b ]] && ln -sf "$b" "$libdir/$(basename "$b")"
            done
        fi
        export LD_LIBRARY_PATH="$libdir:$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
fi
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || echo "nvidia-smi not available"

# ---- 1. conformance and GPU tests ---------------------------------------------------------
if want conformance; then
    # layouts: dp, tp, tp+sp, pp and dp × pp on CUDA (and wgpu) through brrr-launch.
    step conformance gpu_tests brrr-conformance cuda train_cuda layouts
fi
if want tests; then
    step cuda-tests gpu_tests brrr-cuda gpu nvrtc
fi

# ---- 2. GEMM ----------------------------------------------------------------------------------
if want gemm; then
    step gemm-brrr cuda_bench gemm "$SIZE"
    if $PYTHON -c "import torch" 2>/dev/null; then
        step gemm-torch $PYTHON bench/torch_reference.py gemm --size "$SIZE" --json "$OUT/torch-gemm.json"
    else
        echo "==== gemm-torch: skipped (python3 has no torch)"
    fi
fi

# ---- 3. bandwidth -------------------------------------------------------------------------
if want bandwidth; then
    step bandwidth-brrr cuda_bench bandwidth
    step reduce-brrr cuda_bench reduce
    step embedding-brrr cuda_bench embedding
    if $PYTHON -c "import torch" 2>/dev/null; then
        step bandwidth-torch $PYTHON bench/torch_reference.py bandwidth --json "$OUT/torch-bandwidth.json"
    fi
fi

# ---- 4. training the 124M preset -------------------------------------------------------------
if want train; then
    step train-brrr brrr train --backend cuda --preset gpt2-124m --synthetic \
        --steps "$STEPS" --batch-size "$BATCH" --seq-len "$SEQ" --out "$OUT/train-brrr"
    step train-brrr-bf16 brrr train --backend cuda --preset gpt2-124m --synthetic --amp bf16 \
        --steps "$STEPS" --batch-size "$BATCH" --seq-len "$SEQ" --out "$OUT/train-brrr-bf16"
    if $PYTHON -c "import torch" 2>/dev/null; then
        # The same precisions on PyTorch's side (TF32 off in f32), plus torch.compile
        # with fused attention: what PyTorch reaches with the usual settings.
        step train-torch-f32 $PYTHON bench/torch_reference.py train --steps "$STEPS" --batch "$BATCH" \
            --seq "$SEQ" --dtype f32 --json "$OUT/torch-train-f32.json"
        step train-torch-bf16 $PYTHON bench/torch_reference.py train --steps "$STEPS" --batch "$BATCH" \
            --seq "$SEQ" --dtype bf16 --json "$OUT/torch-train-bf16.json"
        step train-torch-bf16-compile $PYTHON bench/torch_reference.py train --steps "$STEPS" --batch "$BATCH" \
            --seq "$SEQ" --dtype bf16 --compile --attention sdpa --json "$OUT/torch-train-bf16-compile.json"
    fi
fi

# ---- 4b. the optimizer phases: one kernel per parameter against one launch per phase ----------
if want multi; then
    for amp in off bf16; do
        for mt in 0 1; do
            BRRR_CUDA_MULTI_TENSOR=$mt step "multi-$amp-$mt" brrr train --backend cuda --preset gpt2-124m \
                --synthetic --amp "$amp" --steps "$STEPS" --batch-size "$BATCH" --seq-len "$SEQ" \
                --out "$OUT/multi-$amp-$mt" --force
        done
    done
fi

# ---- 5. mixed precision ----------------------------------------------------------------------
if want amp; then
    step amp-brrr brrr bench amp --backend cuda --preset gpt2-124m --batch-size "$BATCH" \
        --seq-len "$SEQ" --steps 10 --warmup 2
fi

# ---- 5b. where a step's time goes: every op timed (synchronised after each) -----------------
if want profile; then
    for amp in off bf16; do
        step "profile-$amp" brrr train --backend cuda --preset gpt2-124m --synthetic --steps 4 \
            --warmup-steps 1 --batch-size "$BATCH" --seq-len "$SEQ" --amp "$amp" --profile --quiet \
            --out "$OUT/profile-$amp" --force
    done
    # The bf16 step again with one optimizer kernel per parameter: the table before.
    BRRR_CUDA_MULTI_TENSOR=0 step "profile-bf16-per-parameter" brrr train --backend cuda \
        --preset gpt2-124m --synthetic --steps 4 --warmup-steps 1 --batch-size "$BATCH" \
        --seq-len "$SEQ" --amp bf16 --profile --quiet --out "$OUT/profile-bf16-per-parameter" --force
fi

# ---- 5c. optimizer memory: 8-bit moments, GaLore, offload, LoRA ---------------------------------
if want optimizers; then
    # The model's shape is given to `brrr train`; `brrr finetune` takes the base run's.
    run=(--backend cuda --batch-size "$BATCH" --seq-len "$SEQ" --quiet --force)
    gpt=("${run[@]}" --preset gpt2-124m)
    # GaLore is left out: its first step takes 48 SVDs of the 124M matrices on the host.
    for opt in adamw adamw8bit adamw+offload; do
        flags=(--optimizer "${opt%+offload}")
        [[ $opt == *+offload ]] && flags+=(--offload)
        step "optim-${opt//[:+]/-}" brrr train "${gpt[@]}" --steps "$STEPS" --eval-every "$STEPS" \
            --warmup-steps 10 "${flags[@]}" --out "$OUT/optim-${opt//[:+]/-}"
    done
    cat book/src/*.md >"$OUT/new.txt"
    step finetune-base brrr train "${gpt[@]}" --steps "$STEPS" --eval-every "$STEPS" \
        --warmup-steps 10 --out "$OUT/ft-base"
    for r in full 16; do
        flags=()
        [[ $r != full ]] && flags=(--lora-rank "$r")
        step "finetune-$r" brrr finetune "$OUT/ft-base" "${run[@]}" --corpus "$OUT/new.txt" \
            --steps "$STEPS" --eval-every "$STEPS" --warmup-steps 10 "${flags[@]}" \
            --out "$OUT/finetune-$r"
    done
fi

# ---- 6. the batch's way to the GPU --------------------------------------------------------------
if want data; then
    step data-overlap cuda_bench overlap
fi

# ---- 7. wgpu on the same GPU (Vulkan) ----------------------------------------------------------
if want wgpu; then
    if ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
        # Absence of an adapter is a failure here, as for CUDA.
        export BRRR_REQUIRE_WGPU=1
        step wgpu-conformance gpu_tests brrr-conformance wgpu train_wgpu
        step wgpu-gemm brrr bench gemm --backend wgpu --sizes 256,1024,2048,4096 --reps 10
        step wgpu-overhead brrr bench overhead
        step wgpu-reduce brrr bench reduce
    else
        echo "==== wgpu: FAILED (no Vulkan loader: libvulkan.so.1 is not installed)"
        failed+=(wgpu)
    fi
fi

# ---- 8. NCCL with one rank ------------------------------------------------------------------
if want nccl; then
    nccl_test() {
        if [[ -n $BUNDLE ]]; then
            "$BUNDLE/test-brrr-collectives-lib" nccl --nocapture --test-threads=1
        else
            cargo test --release -p brrr-collectives --features cuda --lib nccl -- --nocapture
        fi
    }
    step nccl nccl_test
fi

# ---- 9. serving: decode steps against the bandwidth bound, and the transformers peer -------
if want serve; then
    DECODE=(--preset gpt2-124m --batches 1,8,64 --prompt-len 64 --new-tokens 32)
    for dt in f32 bf16; do
        step "decode-brrr-$dt" brrr bench decode --backend cuda --dtype "$dt" "${DECODE[@]}"
        if $PYTHON -c "import torch, transformers" 2>/dev/null; then
            step "decode-transformers-$dt" $PYTHON bench/transformers_decode.py --dtype "$dt" \
                --preset gpt2-124m --batches 1,8,64 --prompt-len 64 --new-tokens 32 \
                --json "$OUT/transformers-decode-$dt.json"
        else
            echo "==== decode-transformers-$dt: skipped (python3 has no torch or transformers)"
        fi
    done
    if ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
        # The serving comparison is CUDA's: a loader without a GPU driver behind it is a
        # skip here, said by name (the wgpu part fails on it instead).
        if ! step decode-brrr-wgpu brrr bench decode --backend wgpu --dtype f32 "${DECODE[@]}" &&
            grep -q "no wgpu adapter" "$OUT/decode-brrr-wgpu.log"; then
            unset 'failed[-1]'
            echo "==== decode-brrr-wgpu: SKIPPED (no wgpu adapter: the Vulkan loader found no driver)"
        fi
    fi
fi

echo
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "bench/cuda.sh: FAILED parts: ${failed[*]} (logs in $OUT)"
    exit 1
fi
echo "bench/cuda.sh: done (logs in $OUT)"
