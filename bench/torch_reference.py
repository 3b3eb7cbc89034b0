#!/usr/bin/env python3
"""PyTorch reference numbers for brrr's CUDA benchmarks, measured on the same machine.

    python3 bench/torch_reference.py gemm      [--size 4096[,N...]] [--dtypes f32,tf32,bf16] [--numpy]
    python3 bench/torch_reference.py bandwidth [--elems 67108864]
    python3 bench/torch_reference.py train     [--steps 30] [--batch 8] [--seq 1024] [--preset NAME]
                                               [--dtype bf16|f32] [--compile] [--attention manual|sdpa]
    python3 bench/torch_reference.py all       (the three, with their defaults)

    --device cpu --threads N   run on the CPU with N intra-op threads (bench/cpu.sh does);
                               the default --device auto takes the GPU where there is one.

Each prints a table in the format of `brrr bench` (name, dtype, size, seconds, rate) and,
with --json FILE, writes the rows as JSON too.

The model of `train` is the same GPT as brrr-nn's `Gpt` with the `gpt2-124m` preset:
GPT-2 small (12 layers, 12 heads, 768 wide, 1024 context) with the vocabulary padded to
50304, pre-norm blocks with biases, tanh-approximate GELU, fused q/k/v projection, tied
token embedding / output head, initialised as GPT-2 (N(0, 0.02^2), residual projections
scaled by 1/sqrt(2 n_layer), biases 0, LayerNorm 1/0), AdamW (betas 0.9/0.95, weight decay
0.1 on matrices only), gradient clipping at norm 1, trained on synthetic tokens (uniform over the 50257 real ids). Attention is written out
(QK^T, causal softmax, .V) as brrr computes it; `--attention sdpa` uses PyTorch's fused
scaled_dot_product_attention (FlashAttention) instead, for context.

MFU is computed as brrr computes it (PaLM, Chowdhery et al. 2022, App. B):
flops/token = 6 N + 12 L T C, N = parameters excluding the positional table, divided by
the device's dense peak for the dtype (--peak-tflops to override).

Timing: CUDA events around each repetition, median after warm-up; training throughput
over the steps after the warm-up steps (torch.compile's compilation is never counted).
On the CPU, wall clock; a small GEMM is repeated inside each timing (about 0.2 s of work,
as `brrr bench gemm` does) so that the clock's resolution does not matter.

The presets `brrr-default` (what `brrr train` trains without flags: 4 layers, 4 heads,
128 wide, context 128, the byte tokenizer's 256 ids) and `brrr-6l384` (6 layers, 6 heads,
384 wide, context 256, 10.8M parameters) are the CPU shapes of bench/cpu.sh; the
`--vocab/--n-layer/--n-head/--n-embd/--block-size` flags override a preset's fields.
"""

import argparse
import json
import math
import statistics
import sys
import time


def die(msg):
    print(f"torch_reference: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    die("PyTorch is not installed (pip install torch)")


# ---- device peaks ------------------------------------------------------------------------

# Dense peak TFLOP/s by (device-name substring, dtype): the same figures as brrr-perf's
# spec table (crates/perf/src/specs.rs), so both MFUs divide by the same number. SXM parts;
# the PCIe/NVL variants are lower (pass --peak-tflops). Sources: NVIDIA H100/H200/A100
# datasheets (dense = half the sparse figure).
PEAKS = [
    ("H200", {"bf16": 989.5, "f16": 989.5, "tf32": 494.5, "f32": 67.0}),
    ("H100", {"bf16": 989.5, "f16": 989.5, "tf32": 494.5, "f32": 67.0}),
    ("A100", {"bf16": 312.0, "f16": 312.0, "tf32": 156.0, "f32": 19.5}),
    ("L40S", {"bf16": 362.1, "f16": 362.1, "tf32": 183.0, "f32": 91.6}),
    ("4090", {"bf16": 165.2, "f16": 165.2, "tf32": 82.6, "f32": 82.6}),
]


def peak_tflops(dtype, override=None):
    if override:
        return override
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    for key, peaks in PEAKS:
        if key in name:
            return peaks[dtype]
    return None


# ---- timing -----------------------------------------------------------------------------


def device(which="auto"):
    if which == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if which == "cuda":
        die("--device cuda: PyTorch sees no CUDA device")
    print("torch_reference: no CUDA device; running on the CPU (numbers are not comparable)", file=sys.stderr)
    return torch.device("cpu")


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


# Seconds of timed work per GEMM size at the least, as in brrr's `bench gemm`.
GEMM_MIN_SECONDS = 0.5


def time_it(fn, dev, warmup=3, reps=10, max_seconds=5.0, inner=1, min_seconds=0.0):
    """Median seconds of one call of fn: CUDA events on a GPU, wall clock on a CPU
    (where each timing runs fn `inner` times and divides). Timing goes on past `reps`
    until `min_seconds` of work, as brrr's `bench gemm` does on the CPU, so a short
    stall of a shared machine lands in a minority of timings."""
    for _ in range(warmup):
        fn()
    sync(dev)
    times = []
    total = 0.0
    while len(times) < max(1, reps) or (total < min_seconds and len(times) < 10_000):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            t = (time.perf_counter() - t0) / inner
        times.append(t)
        total += t * (inner if dev.type != "cuda" else 1)
        if total > max_seconds:
            break
    return statistics.median(times)


def row(name, dtype, size, seconds, value, unit, note=""):
    return {"name": name, "dtype": dtype, "size": size, "seconds": seconds, "value": value, "unit": unit, "note": note}


def print_table(title, rows, baseline_of=None):
    print(f"\n{title}")
    print(f"{'name':<28} {'dtype':<6} {'size':<18} {'seconds':>11} {'rate':>12}  {'of base':>7}  note")
    base = {}
    for r in rows:
        key = baseline_of(r) if baseline_of else None
        if key is not None and key not in base:
            base[key] = r["value"]
        frac = f"{100 * r['value'] / base[key]:6.1f}%" if key is not None and base.get(key) else ""
        print(
            f"{r['name']:<28} {r['dtype']:<6} {r['size']:<18} {r['seconds']:>11.6f} "
            f"{r['value']:>8.2f} {r['unit']:<7} {frac:>7}  {r['note']}"
        )


# ---- GEMM -------------------------------------------------------------------------------


def cpu_inner(n):
    """Repetitions inside one CPU timing: about 2e8 flops, 1 to 64 (as `brrr bench gemm`)."""
    return int(min(64, max(1, math.ceil(2e8 / (2 * n**3)))))


def bench_gemm(args, dev):
    rows = []
    for n in args.size:
        rows += gemm_rows(args, dev, n)
    print_table(f"GEMM, PyTorch {torch.__version__} on {dev_name(dev)}", rows)
    return rows


def gemm_rows(args, dev, n):
    rows = []
    inner = 1 if dev.type == "cuda" else cpu_inner(n)
    for dt in args.dtypes.split(","):
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        torch_dtype = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dt]
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.rand(n, n, device=dev, dtype=torch.float32, generator=g).mul_(2).sub_(1).to(torch_dtype)
        b = torch.rand(n, n, device=dev, dtype=torch.float32, generator=g).mul_(2).sub_(1).to(torch_dtype)
        c = torch.empty(n, n, device=dev, dtype=torch_dtype)
        s = time_it(lambda: torch.matmul(a, b, out=c), dev, warmup=args.warmup, reps=args.reps, inner=inner, min_seconds=GEMM_MIN_SECONDS)
        rows.append(row("torch.matmul", dt, f"{n}x{n}x{n}", s, *flop_rate(2 * n**3 / s, dev)))
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.numpy:
        rows.append(numpy_gemm_row(args, n, inner))
    return rows


def numpy_gemm_row(args, n, inner):
    """f32 `numpy.matmul` (the BLAS numpy was built with: OpenBLAS in PyPI's wheels), timed
    on the host like a CPU torch.matmul."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    c = np.empty((n, n), dtype=np.float32)
    s = time_it(lambda: np.matmul(a, b, out=c), torch.device("cpu"), warmup=args.warmup, reps=args.reps, inner=inner, min_seconds=GEMM_MIN_SECONDS)
    return row(f"numpy.matmul ({numpy_blas()})", "f32", f"{n}x{n}x{n}", s, *flop_rate(2 * n**3 / s, torch.device("cpu")))


def flop_rate(flops_per_s, dev):
    """(value, unit): TFLOP/s on a GPU, GFLOP/s on a CPU (where TFLOP/s would read 0.15)."""
    return (flops_per_s / 1e12, "TFLOP/s") if dev.type == "cuda" else (flops_per_s / 1e9, "GFLOP/s")


def numpy_blas():
    """The BLAS numpy links, e.g. "openblas 0.3.31", as numpy's build config names it."""
    import numpy as np

    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '?')}"
    except Exception:  # older numpy has no mode="dicts"
        return "BLAS"


# ---- bandwidth --------------------------------------------------------------------------


def bench_bandwidth(args, dev):
    n = args.elems
    rows = []
    src = torch.zeros(n, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    s = time_it(lambda: dst.copy_(src), dev, warmup=args.warmup, reps=args.reps)
    rows.append(row("copy d2d", "f32", f"{n >> 20}Mi elements", s, 8 * n / s / 1e9, "GB/s"))
    for dt in ["f32", "bf16"]:
        t = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
        es = torch.tensor([], dtype=t).element_size()
        x = torch.rand(n, device=dev, dtype=torch.float32).to(t)
        y = torch.rand(n, device=dev, dtype=torch.float32).to(t)
        out = torch.empty_like(x)

        def add(rows, name, fn, nbytes, size=f"{n >> 20}Mi elements"):
            s = time_it(fn, dev, warmup=args.warmup, reps=args.reps)
            rows.append(row(name, dt, size, s, nbytes / s / 1e9, "GB/s"))

        add(rows, "add (a + b)", lambda: torch.add(x, y, out=out), 3 * n * es)
        add(rows, "exp", lambda: torch.exp(x, out=out), 2 * n * es)
        add(rows, "axpy", lambda: out.add_(x, alpha=0.5), 3 * n * es)
        add(rows, "gelu", lambda: F.gelu(x, approximate="tanh"), 2 * n * es)
        cols = 768
        r = n // cols
        x2 = x[: r * cols].view(r, cols)
        bias = torch.rand(cols, device=dev).to(t)
        add(rows, "bias add (broadcast)", lambda: torch.add(x2, bias), 2 * r * cols * es, f"{r}x{cols}")
        other = torch.bfloat16 if dt == "f32" else torch.float32
        oes = torch.tensor([], dtype=other).element_size()
        add(rows, f"cast to {'bf16' if dt == 'f32' else 'f32'}", lambda: x.to(other), n * (es + oes))
        sc = 1024
        xs = x[: (n // sc) * sc].view(n // sc, sc)
        mask = torch.ones(sc, sc, device=dev, dtype=torch.bool).tril()
        # brrr's causal softmax masks inside the kernel; PyTorch needs masked_fill + softmax.
        add(
            rows,
            "softmax (causal)",
            lambda: F.softmax((xs.view(-1, sc, sc) * 0.125).masked_fill(~mask, float("-inf")), dim=-1),
            2 * (n // sc) * sc * es,
            f"{n // sc}x{sc}",
        )
        ln = nn.LayerNorm(cols, device=dev, dtype=t)
        add(rows, "layernorm", lambda: ln(x2), 2 * r * cols * es, f"{r}x{cols}")
        v = 50304
        ce_rows = max(1, n // v)
        logits = x[: ce_rows * v].view(ce_rows, v)
        targets = torch.randint(0, v, (ce_rows,), device=dev)
        add(
            rows,
            "cross_entropy",
            lambda: F.cross_entropy(logits, targets, reduction="none"),
            ce_rows * v * es,
            f"{ce_rows}x{v}",
        )
    print_table(
        f"Memory bandwidth, PyTorch {torch.__version__} on {dev_name(dev)} (fraction of the copy)",
        rows,
        baseline_of=lambda r: "copy",
    )
    return rows


# ---- the GPT ---------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, c, n_head, block_size, proj_std, sdpa):
        super().__init__()
        self.n_head = n_head
        self.sdpa = sdpa
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        nn.init.normal_(self.c_attn.weight, 0.0, 0.02)
        nn.init.zeros_(self.c_attn.bias)
        nn.init.normal_(self.c_proj.weight, 0.0, proj_std)
        nn.init.zeros_(self.c_proj.bias)
        self.register_buffer("mask", torch.ones(block_size, block_size, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        h, d = self.n_head, c // self.n_head
        q, k, v = self.c_attn(x).view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, c, n_head, block_size, proj_std, sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = CausalSelfAttention(c, n_head, block_size, proj_std, sdpa)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)
        nn.init.normal_(self.c_fc.weight, 0.0, 0.02)
        nn.init.zeros_(self.c_fc.bias)
        nn.init.normal_(self.c_proj.weight, 0.0, proj_std)
        nn.init.zeros_(self.c_proj.bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50304, block_size=1024, n_layer=12, n_head=12, c=768, sdpa=False):
        super().__init__()
        proj_std = 0.02 / math.sqrt(2 * n_layer)
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block_size, c)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.h = nn.ModuleList([Block(c, n_head, block_size, proj_std, sdpa) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.config = dict(vocab=vocab, block_size=block_size, n_layer=n_layer, n_head=n_head, c=c)

    def forward(self, ids, targets):
        b, t = ids.shape
        pos = torch.arange(t, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq):
        cfg = self.config
        n_matmul = self.num_params() - cfg["block_size"] * cfg["c"]
        return 6 * n_matmul + 12 * cfg["n_layer"] * seq * cfg["c"]


PRESETS = {
    "gpt2-124m": dict(vocab=50304, block_size=1024, n_layer=12, n_head=12, c=768),
    # For smoke runs on a CPU.
    "tiny": dict(vocab=512, block_size=64, n_layer=2, n_head=2, c=64),
    # `brrr train` without flags (TrainConfig::default in crates/train/src/config.rs):
    # the byte tokenizer's 256 ids, 4 layers, 4 heads, 128 wide, context 128.
    "brrr-default": dict(vocab=256, block_size=128, n_layer=4, n_head=4, c=128),
    # 6 layers, 6 heads, 384 wide, context 256 on the same byte vocabulary (10.8M parameters).
    "brrr-6l384": dict(vocab=256, block_size=256, n_layer=6, n_head=6, c=384),
}


def model_config(args):
    """The preset's shape with the --vocab/--n-layer/--n-head/--n-embd/--block-size overrides."""
    cfg = dict(PRESETS[args.preset])
    for key, value in [
        ("vocab", args.vocab),
        ("block_size", args.block_size),
        ("n_layer", args.n_layer),
        ("n_head", args.n_head),
        ("c", args.n_embd),
    ]:
        if value is not None:
            cfg[key] = value
    if cfg["c"] % cfg["n_head"]:
        die(f"--n-embd {cfg['c']} is not a multiple of --n-head {cfg['n_head']}")
    return cfg


def bench_train(args, dev):
    torch.manual_seed(args.seed)
    cfg = model_config(args)
    model = GPT(**cfg, sdpa=args.attention == "sdpa").to(dev)
    seq = min(args.seq, cfg["block_size"])
    # As brrr-nn's AdamW: weight decay on matrices (linear weights, embeddings) only.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused AdamW (one kernel over all tensors, as brrr's): on CUDA, and on the CPU
    # since PyTorch 2.4; older versions fall back to the default implementation.
    try:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step_model = torch.compile(model) if args.compile else model
    use_bf16 = args.dtype == "bf16"
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    real_vocab = min(50257, cfg["vocab"])

    def batch():
        x = torch.randint(0, real_vocab, (args.batch, seq + 1), generator=g)
        x = x.to(dev, non_blocking=True)
        return x[:, :-1], x[:, 1:]

    def step():
        ids, targets = batch()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = step_model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    losses = []
    for _ in range(args.warmup_steps):
        losses.append(step().item())
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    losses.append(loss.item())  # one host sync at the end, as brrr does
    sync(dev)
    seconds = time.perf_counter() - t0
    tokens = args.steps * args.batch * seq
    tok_s = tokens / seconds
    flops = model.flops_per_token(seq) * tok_s
    peak = peak_tflops(args.dtype, args.peak_tflops)
    mfu = flops / (peak * 1e12) if peak else float("nan")
    name = "pytorch eager" + (" + compile" if args.compile else "") + (" (sdpa)" if args.attention == "sdpa" else "")
    r = row(name, args.dtype, f"{args.preset} B={args.batch} T={seq}", seconds / args.steps, tok_s, "tok/s")
    r.update(
        mfu=mfu,
        peak_tflops=peak,
        achieved_tflops=flops / 1e12,
        params=model.num_params(),
        flops_per_token=model.flops_per_token(seq),
        model=dict(model.config, seq=seq, batch=args.batch),
        final_loss=losses[-1],
        steps=args.steps,
    )
    print(f"\nTraining, PyTorch {torch.__version__} on {dev_name(dev)}{threads_note(dev)}")
    print(
        f"{name}: {args.preset} ({model.num_params() / 1e6:.1f}M parameters), batch {args.batch} x {seq} tokens, "
        f"{args.dtype}, {args.steps} steps after {args.warmup_steps} warm-up"
    )
    rate, unit = flop_rate(flops, dev)
    mfu_text = f"MFU {100 * mfu:.1f}% of {peak} TFLOP/s" if peak else "MFU n/a (no peak known: --peak-tflops)"
    print(
        f"  {seconds / args.steps * 1e3:.1f} ms/step, {tok_s:,.0f} tokens/s, {rate:.1f} {unit}, "
        f"{mfu_text}, final loss {losses[-1]:.3f}"
    )
    print(f"parameters: {model.num_params()}")
    return [r]


def dev_name(dev):
    return torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"


def threads_note(dev):
    return "" if dev.type == "cuda" else f", {torch.get_num_threads()} threads"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["gemm", "bandwidth", "train", "all"])
    p.add_argument(
        "--size",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[4096],
        help="GEMM m = n = k; several comma-separated",
    )
    p.add_argument("--numpy", action="store_true", help="GEMM: also time f32 numpy.matmul (its BLAS)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--dtypes", default="f32,tf32,bf16", help="GEMM dtypes")
    p.add_argument("--elems", type=int, default=64 << 20, help="elements per buffer for bandwidth")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
    p.add_argument("--vocab", type=int, default=None, help="override the preset's vocabulary")
    p.add_argument("--block-size", type=int, default=None, help="override the preset's context")
    p.add_argument("--n-layer", type=int, default=None)
    p.add_argument("--n-head", type=int, default=None)
    p.add_argument("--n-embd", type=int, default=None)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument(
        "--dtype",
        choices=["bf16", "tf32", "f32"],
        default="f32",
        help="training precision: f32 (as brrr trains today), tf32 matmuls, or bf16 autocast",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--attention", choices=["manual", "sdpa"], default="manual")
    p.add_argument("--peak-tflops", type=float, default=None, help="dense peak for MFU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the rows to this file")
    args = p.parse_args()
    dev = device(args.device)
    if args.threads is not None:
        if args.threads < 1:
            die(f"--threads {args.threads} must be at least 1")
        torch.set_num_threads(args.threads)
    rows = []
    if args.what in ("gemm", "all"):
        rows += bench_gemm(args, dev)
    if args.what in ("bandwidth", "all"):
        rows += bench_bandwidth(args, dev)
    if args.what in ("train", "all"):
        rows += bench_train(args, dev)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"torch": torch.__version__, "device": dev_name(dev), "threads": torch.get_num_threads(), "rows": rows},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
