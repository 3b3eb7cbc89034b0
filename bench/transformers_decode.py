#!/usr/bin/env python3
"""The Hugging Face `transformers` peer of `brrr bench decode`: the same GPT-2 shape with
random weights, the same batch sizes, prompt length and step counts, greedy decoding with
the library's KV cache, each step synchronised. Prints a Markdown table like brrr's.

    python3 bench/transformers_decode.py --preset gpt2-124m --dtype bf16 --batches 1,8,64

Needs torch and transformers (a GPU if --device cuda, the default when one exists).
"""
import argparse
import json
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

# brrr's presets (crates/brrr/src/train.rs `Preset`): the vocabulary padded as brrr pads it,
# so both sides read the same bytes per step.
PRESETS = {
    "tiny": dict(n_layer=4, n_head=4, n_embd=128, n_positions=128, vocab_size=256),
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50304),
}


def one_batch(model, cfg, b, args, device):
    gen = torch.Generator(device="cpu").manual_seed(b)
    prompt = torch.randint(0, cfg.vocab_size, (b, args.prompt_len), generator=gen).to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    sync()
    t0 = time.perf_counter()
    out = model(input_ids=prompt, use_cache=True)
    past = out.past_key_values
    nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
    sync()
    prefill_s = time.perf_counter() - t0
    times = []
    for i in range(args.warmup + args.new_tokens):
        t = time.perf_counter()
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
        sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - t)
    step_s = statistics.median(times)
    return dict(batch=b, prefill_s=prefill_s, step_s=step_s, tokens_per_s=b / step_s)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32, as in brrr
    cfg = GPT2Config(**PRESETS[args.preset], attn_implementation=args.attention)
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).to(device=device, dtype=dtype).eval()
    params = sum(p.numel() for p in model.parameters())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"transformers decode on {name}: {params / 1e6:.1f}M parameters in {args.dtype}, "
          f"attention {args.attention}, torch {torch.__version__}\n")
    print("| batch | prefill (ms) | step (ms) | tokens/s |")
    print("|---:|---:|---:|---:|")
    rows = []
    with torch.inference_mode():
        for b in [int(x) for x in args.batches.split(",")]:
            r = one_batch(model, cfg, b, args, device)
            rows.append(r)
            print(f"| {b} | {1e3 * r['prefill_s']:.1f} | {1e3 * r['step_s']:.2f} | {r['tokens_per_s']:.0f} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=name, dtype=args.dtype, preset=args.preset, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
