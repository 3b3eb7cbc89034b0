#!/usr/bin/env python3
"""PyTorch reference numbers for brrr's CUDA benchmarks, measured on the same machine.

    python3 bench/torch_reference.py gemm      [--size 4096] [--dtypes f32,tf32,bf16]
    python3 bench/torch_reference.py bandwidth [--elems 67108864]
    python3 bench/torch_reference.py train     [--steps 30] [--batch 8] [--seq 1024]
                                               [--dtype bf16|f32] [--compile] [--attention manual|sdpa]
    python3 bench/torch_reference.py all       (the three, with their defaults)

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


def device():
    if torch.cuda.is_available():
        return torch.device("cuda")
    print("torch_reference: no CUDA device; running on the CPU (numbers are not comparable)", file=sys.stderr)
    return torch.device("cpu")


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def time_it(fn, dev, warmup=3, reps=10, max_seconds=5.0):
    """Median seconds of one call of fn: CUDA events on a GPU, wall clock on a CPU."""
    for _ in range(warmup):
        fn()
    sync(dev)
    times = []
    total = 0.0
    for _ in range(max(1, reps)):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
        times.append(t)
        total += t
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


def bench_gemm(args, dev):
    n = args.size
    rows = []
    for dt in args.dtypes.split(","):
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        torch_dtype = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dt]
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.rand(n, n, device=dev, dtype=torch.float32, generator=g).mul_(2).sub_(1).to(torch_dtype)
        b = torch.rand(n, n, device=dev, dtype=torch.float32, generator=g).mul_(2).sub_(1).to(torch_dtype)
        c = torch.empty(n, n, device=dev, dtype=torch_dtype)
        s = time_it(lambda: torch.matmul(a, b, out=c), dev, warmup=args.warmup, reps=args.reps)
        tflops = 2 * n**3 / s / 1e12
        rows.append(row("torch.matmul", dt, f"{n}x{n}x{n}", s, tflops, "TFLOP/s"))
    torch.backends.cuda.matmul.allow_tf32 = False
    print_table(f"GEMM, PyTorch {torch.__version__} on {dev_name(dev)}", rows)
    return rows


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
}


def bench_train(args, dev):
    torch.manual_seed(args.seed)
    cfg = PRESETS[args.preset]
    model = GPT(**cfg, sdpa=args.attention == "sdpa").to(dev)
    seq = min(args.seq, cfg["block_size"])
    # As brrr-nn's AdamW: weight decay on matrices (linear weights, embeddings) only.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=dev.type == "cuda",
    )
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
        final_loss=losses[-1],
        steps=args.steps,
    )
    print(f"\nTraining, PyTorch {torch.__version__} on {dev_name(dev)}")
    print(
        f"{name}: {args.preset} ({model.num_params() / 1e6:.1f}M parameters), batch {args.batch} x {seq} tokens, "
        f"{args.dtype}, {args.steps} steps after {args.warmup_steps} warm-up"
    )
    print(
        f"  {seconds / args.steps * 1e3:.1f} ms/step, {tok_s:,.0f} tokens/s, {flops / 1e12:.1f} TFLOP/s, "
        f"MFU {100 * mfu:.1f}% of {peak} TFLOP/s, final loss {losses[-1]:.3f}"
    )
    return [r]


def dev_name(dev):
    return torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["gemm", "bandwidth", "train", "all"])
    p.add_argument("--size", type=int, default=4096, help="GEMM m = n = k")
    p.add_argument("--dtypes", default="f32,tf32,bf16", help="GEMM dtypes")
    p.add_argument("--elems", type=int, default=64 << 20, help="elements per buffer for bandwidth")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
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
    dev = device()
    rows = []
    if args.what in ("gemm", "all"):
        rows += bench_gemm(args, dev)
    if args.what in ("bandwidth", "all"):
        rows += bench_bandwidth(args, dev)
    if args.what in ("train", "all"):
        rows += bench_train(args, dev)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": dev_name(dev), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
