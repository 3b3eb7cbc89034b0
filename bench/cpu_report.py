#!/usr/bin/env python3
"""The report of bench/cpu.sh: reads the logs and JSON it wrote into OUT and prints the
markdown tables (training throughput, MFU, GEMM), writing them to OUT/table.md and the
numbers to OUT/summary.json.

    python3 bench/cpu_report.py target/bench-cpu --warmup 3 --threads 2 --configs default,6l384

brrr's tokens/s are computed from its metrics.csv (each step's own tokens/s, the first
--warmup steps dropped; an evaluation or checkpoint between steps is never inside a step's
time), PyTorch's from torch_reference.py's JSON (wall clock over the steps after its
warm-up). MFU uses one formula and one peak for every column: flops/token = 6 N + 12 L T C
(PaLM, Chowdhery et al. 2022, App. B; N without the positional table), as brrr-nn's
`GptConfig::flops_per_token`, over the CPU ceiling brrr measured (the larger of brrr-perf's FMA loop and brrr's best
GEMM, as `brrr train`'s MFU). Exits 1 if the two sides' parameter counts or flops/token differ.

Standard library only: it runs with the system python3 when PyTorch is absent.
"""

import argparse
import json
import re
import statistics
import sys
import tomllib
from pathlib import Path


def fail(msg):
    print(f"cpu_report: {msg}", file=sys.stderr)
    sys.exit(1)


def brrr_formula(model, seq):
    """brrr-nn's GptConfig::num_params and ::flops_per_token (crates/nn/src/gpt.rs)."""
    c, v, t, layers = model["n_embd"], model["vocab_size"], model["block_size"], model["n_layer"]
    params = (v + t) * c + layers * (12 * c * c + 13 * c) + 2 * c
    return params, 6 * (params - t * c) + 12 * layers * seq * c


def measured_peak(out, threads):
    """brrr's measured FMA peak in FLOP/s at `threads` threads, how it was obtained, and
    every measurement the run made.

    Each brrr process measures it once (`brrr bench gemm` prints the loop's figures,
    `brrr train` the peak its MFU divides by). Other processes on the machine can only
    lower a measurement, so the highest one of the run is used, for every column.
    """
    found = []
    for log in gemm_logs(out):
        text = log.read_text()
        m = re.search(r"fp32 peak: measured (\S+) loop: ([\d.]+) GFLOP/s on 1 thread, ([\d.]+) GFLOP/s on (\d+) threads", text)
        if not m:
            fail(f"no measured fp32 peak in {log}")
        isa, one, all_threads, n = m.group(1), float(m.group(2)), float(m.group(3)), int(m.group(4))
        # brrr-perf's rule (MeasuredFmaPeak::peak_flops): the larger of all threads at once
        # and threads x one thread, so a core taken by another process does not lower it.
        found.append((log.stem, max(all_threads, one * threads) if threads == n else one * threads))
        # MFU's ceiling is the larger of the loop and brrr's best GEMM (train::mfu_peak).
        g = re.search(r"^best GEMM: ([\d.]+) GFLOP/s", text, re.M)
        if g:
            found.append((f"{log.stem}, best GEMM", float(g.group(1))))
    if threads == n:
        # brrr train measures on all the machine's threads too.
        for log in sorted(out.glob("train-brrr-*.log")):
            t = re.search(r"^MFU: .* of ([\d.]+) GFLOP/s", log.read_text(), re.M)
            if t:
                found.append((log.stem, float(t.group(1))))
    source, best = max(found, key=lambda f: f[1])
    what = f"{best:.1f} GFLOP/s on {plural(threads, 'thread')}, the highest of {len(found)} measurements in this run of brrr-perf's {isa} loop and brrr's best GEMM ({source})"
    if threads != n:
        what += f"; {threads} x one thread's {one:.1f}, the machine has {n}"
    return best * 1e9, what, dict(found)


def gemm_logs(out):
    """`brrr bench gemm`'s logs, one per round (gemm-brrr-1.log, ...)."""
    logs = sorted(out.glob("gemm-brrr*.log"))
    if not logs:
        fail(f"no gemm-brrr*.log in {out}")
    return logs


def brrr_run(out, cfg, r, warmup):
    log = (out / f"train-brrr-{cfg}-{r}.log").read_text()
    m = re.search(r"brrr train: (\d+) parameters", log)
    if not m:
        fail(f"no parameter count in train-brrr-{cfg}-{r}.log")
    printed = int(m.group(1))
    run = out / "runs" / f"brrr-{cfg}-{r}"
    conf = tomllib.loads((run / "config.toml").read_text())
    model, seq, batch = conf["model"], conf["seq_len"], conf["batch_size"]
    params, fpt = brrr_formula(model, seq)
    if params != printed:
        fail(f"brrr printed {printed} parameters, its config gives {params}")
    inverse = []
    for line in (run / "metrics.csv").read_text().splitlines()[1:]:
        fields = line.split(",")
        if int(fields[0]) > warmup:
            inverse.append(1.0 / float(fields[5]))
    if not inverse:
        fail(f"brrr run {cfg}-{r} has no step after the {warmup} warm-up steps")
    # Each step's time is tokens / its tokens/s; total tokens over total time.
    tok_s = len(inverse) / sum(inverse)
    shape = dict(model, seq=seq, batch=batch)
    return dict(tok_s=tok_s, params=params, flops_per_token=fpt, shape=shape, steps=len(inverse))


def torch_run(out, mode, cfg, r):
    path = out / f"train-torch-{mode}-{cfg}-{r}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    row = data["rows"][0]
    return dict(tok_s=row["value"], params=row["params"], flops_per_token=row["flops_per_token"], model=row["model"], torch=data["torch"], threads=data["threads"])


def check_same_model(cfg, b, t, mode):
    m = t["model"]
    mine = dict(vocab=b["shape"]["vocab_size"], block_size=b["shape"]["block_size"], n_layer=b["shape"]["n_layer"], n_head=b["shape"]["n_head"], c=b["shape"]["n_embd"], seq=b["shape"]["seq"], batch=b["shape"]["batch"])
    theirs = {k: m[k] for k in mine}
    if mine != theirs:
        fail(f"{cfg}: PyTorch {mode} trained {theirs}, brrr {mine}: not the same shape")
    if t["params"] != b["params"]:
        fail(f"{cfg}: PARAMETER COUNTS DIFFER: brrr {b['params']}, PyTorch {mode} {t['params']}")
    if t["flops_per_token"] != b["flops_per_token"]:
        fail(f"{cfg}: flops/token differ: brrr {b['flops_per_token']}, PyTorch {t['flops_per_token']}")


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def median(xs):
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def ratio(a, b):
    return None if a is None or not b else a / b


def train_table(out, configs, repeats, warmup, peak):
    rows, lines = [], []
    lines.append("| config | parameters | B × T | brrr tok/s | PyTorch eager tok/s | PyTorch compile + SDPA tok/s | brrr / eager | brrr / compile | MFU brrr | MFU eager | MFU compile |")
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cfg in configs:
        b_runs = [brrr_run(out, cfg, r, warmup) for r in range(1, repeats + 1)]
        b = b_runs[0]
        sides, each = {}, {"brrr": [x["tok_s"] for x in b_runs]}
        for mode in ("eager", "compile"):
            runs = [t for t in (torch_run(out, mode, cfg, r) for r in range(1, repeats + 1)) if t]
            for t in runs:
                check_same_model(cfg, b, t, mode)
            each[mode] = [t["tok_s"] for t in runs]
            sides[mode] = median(each[mode])
        tb = median([x["tok_s"] for x in b_runs])
        te, tc = sides["eager"], sides["compile"]
        mfu = {k: (None if v is None else v * b["flops_per_token"] / peak) for k, v in (("brrr", tb), ("eager", te), ("compile", tc))}
        shape = b["shape"]
        name = f"{cfg}: {shape['n_layer']} layers, {shape['n_embd']} wide, {shape['n_head']} heads, context {shape['block_size']}, vocab {shape['vocab_size']}"
        lines.append(
            f"| {name} | {b['params']:,} | {shape['batch']} × {shape['seq']} | {tb:,.0f} | {fmt(te, ',.0f')} | {fmt(tc, ',.0f')} "
            f"| {fmt(ratio(tb, te), '.2f')} | {fmt(ratio(tb, tc), '.2f')}"
            + " | "
            + " | ".join(fmt(None if v is None else 100 * v, ".1f") + ("%" if v is not None else "") for v in mfu.values())
            + " |"
        )
        rows.append(dict(config=cfg, shape=shape, params=b["params"], flops_per_token=b["flops_per_token"], brrr_tok_s=tb, eager_tok_s=te, compile_tok_s=tc, runs_tok_s=each, mfu=mfu, timed_steps=b["steps"]))
    if repeats > 1:
        lines += ["", "Every run, tokens/s in the order they ran:", ""]
        for r in rows:
            parts = [f"{side} " + " / ".join(f"{v:,.0f}" for v in vals) for side, vals in r["runs_tok_s"].items() if vals]
            lines.append(f"- {r['config']}: " + "; ".join(parts))
    return lines, rows


def gemm_table(out, peak):
    """Median per size over the rounds: brrr's default kernel, the other kernel `brrr bench
    gemm` timed beside it, torch.matmul and numpy, each round alternating the sides."""
    brrr, other, kernel, other_name = {}, {}, "brrr", None
    for log in gemm_logs(out):
        text = log.read_text()
        k = re.search(r"GEMM kernel: (.+?) \(chosen", text)
        kernel = k.group(1) if k else kernel
        h = re.search(r"% peak\s+(.+?)\s+ratio\s*$", text, re.M)
        other_name = h.group(1).strip() if h else other_name
        for m in re.finditer(r"^\s*(\d+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+%(?:\s+([\d.]+))?", text, re.M):
            brrr.setdefault(int(m.group(1)), []).append(float(m.group(2)))
            if m.group(3):
                other.setdefault(int(m.group(1)), []).append(float(m.group(3)))
    torch_rows, numpy_rows, blas = {}, {}, "numpy"
    for path in sorted(out.glob("gemm-torch*.json")):
        for r in json.loads(path.read_text())["rows"]:
            n = int(r["size"].split("x")[0])
            if r["name"] == "torch.matmul":
                torch_rows.setdefault(n, []).append(r["value"])
            else:
                numpy_rows.setdefault(n, []).append(r["value"])
                blas = r["name"]
    med = lambda d, n: statistics.median(d[n]) if d.get(n) else None
    lines = [
        f"| n | brrr ({kernel}) GFLOP/s | {other_name or 'other kernel'} | torch.matmul | {blas} | brrr / {other_name or 'other'} | brrr / torch | brrr / numpy | brrr of peak |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for n in sorted(brrr):
        g, o, t, npv = med(brrr, n), med(other, n), med(torch_rows, n), med(numpy_rows, n)
        lines.append(f"| {n} | {g:.1f} | {fmt(o, '.1f')} | {fmt(t, '.1f')} | {fmt(npv, '.1f')} | {fmt(ratio(g, o), '.2f')} | {fmt(ratio(g, t), '.2f')} | {fmt(ratio(g, npv), '.2f')} | {100 * g * 1e9 / peak:.0f}% |")
        rows.append(dict(n=n, kernel=kernel, brrr_gflops=g, other_kernel=other_name, other_gflops=o, torch_gflops=t, numpy_gflops=npv, rounds=len(brrr[n])))
    return lines, rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--configs", default="default,6l384")
    args = p.parse_args()
    out = args.out
    peak, peak_what, peaks = measured_peak(out, args.threads)
    configs = [c for c in args.configs.split(",") if c]
    repeats = len(list(out.glob(f"train-brrr-{configs[0]}-*.log"))) if configs else 0
    md = [(out / "machine.txt").read_text().strip().replace("\n", "  \n"), "", f"MFU peak: {peak_what}", ""]
    summary = dict(peak_flops=peak, peak=peak_what, peak_measurements_gflops=peaks, threads=args.threads, warmup_steps=args.warmup)
    if repeats:
        lines, rows = train_table(out, configs, repeats, args.warmup, peak)
        md += [f"Training, f32, AdamW, clipping at 1, {plural(args.threads, 'thread')} on both sides; tokens/s median of {repeats} run(s), {args.warmup} warm-up steps excluded", ""] + lines + [""]
        summary["train"] = rows
    lines, rows = gemm_table(out, peak)
    if len(rows) > 1 or any(r["torch_gflops"] for r in rows):
        rounds = max(r["rounds"] for r in rows)
        md += [f"GEMM f32 n × n × n, {plural(args.threads, 'thread')}, median of {plural(rounds, 'round')} alternating brrr and PyTorch/numpy", ""] + lines + [""]
        summary["gemm"] = rows
    if (out / "peak.log").exists():
        md += [(out / "peak.log").read_text().strip(), ""]
    text = "\n".join(md)
    print(text)
    (out / "table.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
