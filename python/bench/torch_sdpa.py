#!/usr/bin/python3
"""attnlab.torch.scaled_dot_product_attention against the torch formula a torch 1.13 user
writes (softmax(q kᵀ·scale + causal mask) v, autograd for the backward), float32 on the CPU.

Both get the same tensors [batch, heads, N, d] (requires_grad, as in training) and the same
threads (torch.set_num_threads; attnlab.torch follows torch.get_num_threads()). For each
shape, the four timings (attnlab forward, torch forward, attnlab forward+backward, torch
forward+backward) are interleaved in each repeat, in an order that alternates between
repeats, with an idle pause before each timed call (OpenMP's worker threads spin after a
parallel region and would otherwise steal a core from the next call); the median of the
repeats is reported. attnlab's times include everything the integration does: checks,
reshapes, the NumPy views, the autograd Function, wrapping its outputs.

GFLOP/s counts the products only: forward 4·B·H·N²·d (QKᵀ and PV), backward 2.5× that
(five products), both halved when causal. "% peak" divides by the FMA peak that
`attnlab peak` measures (CPU column) when --attnlab names the CLI.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/torch_sdpa.py --threads 2 \\
        [--sizes 512,2048,4096] [--dims 64,128] [--batch 1] [--heads 4] [--repeats 5] [--json out.json]
"""

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import time

import torch

import attnlab
import attnlab.torch


def torch_formula(q, k, v, causal_mask=None):
    """The N×N scores in memory; causal_mask is True where a key is hidden (made once per shape)."""
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
    if causal_mask is not None:
        s = s.masked_fill(causal_mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def timed(fn, settle_s):
    time.sleep(settle_s)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(B, H, N, d, causal, repeats, settle_s, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, N, d, generator=gen).requires_grad_() for _ in range(3))
    grad = torch.randn(B, H, N, d, generator=gen)
    mask = torch.ones(N, N, dtype=torch.bool).triu(1) if causal else None

    def ours_fwd():
        attnlab.torch.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def plain_fwd():
        torch_formula(q, k, v, mask)

    def ours_fwd_bwd():
        attnlab.torch.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)

    def plain_fwd_bwd():
        torch_formula(q, k, v, mask).backward(grad)

    runs = {"attnlab forward": ours_fwd, "torch forward": plain_fwd,
            "attnlab forward+backward": ours_fwd_bwd, "torch forward+backward": plain_fwd_bwd}
    # Check once that they agree, and warm up (first-call allocations, thread start-up).
    with torch.no_grad():
        diff = (attnlab.torch.scaled_dot_product_attention(q, k, v, is_causal=causal)
                - torch_formula(q, k, v, mask)).abs().max().item()
    assert diff < 1e-4, f"attnlab and the torch formula differ by {diff}"
    for fn in runs.values():
        fn()
    times = {name: [] for name in runs}
    order = list(runs)
    for r in range(repeats):
        for name in (order if r % 2 == 0 else order[::-1]):
            for x in (q, k, v):
                x.grad = None
            times[name].append(timed(runs[name], settle_s))
    return {name: statistics.median(t) for name, t in times.items()}


def measured_peak(cli, threads):
    """The FMA peak on `threads` threads (GFLOP/s, CPU column) from `attnlab peak`, or None."""
    if not cli:
        return None
    out = subprocess.run([cli, "peak", "--threads", str(threads), "--seconds", "0.3"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        cols = line.split()
        if len(cols) == 3 and cols[0] == str(threads) and re.fullmatch(r"[0-9.]+", cols[2]):
            return float(cols[2])
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="512,2048,4096")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--settle-ms", type=float, default=100.0)
    p.add_argument("--causal", default="false,true", help="which of false,true to run")
    p.add_argument("--attnlab", default="", help="the attnlab CLI, to measure the FMA peak (e.g. build/attnlab)")
    p.add_argument("--json", default="")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    sizes = [int(x) for x in args.sizes.split(",")]
    dims = [int(x) for x in args.dims.split(",")]
    causals = [x.strip() == "true" for x in args.causal.split(",")]
    peak = measured_peak(args.attnlab, args.threads)
    load = os.getloadavg()
    print(f"torch {torch.__version__}, attnlab {attnlab.__version__} (engine {attnlab.engine_target()}), "
          f"{torch.get_num_threads()} threads, batch {args.batch}, {args.heads} heads, float32, "
          f"median of {args.repeats}; {platform.processor() or platform.machine()}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
          + (f"; FMA peak {peak:.0f} GFLOP/s" if peak else ""))
    print("| N | d | causal | pass | attnlab ms | GFLOP/s" + (" (% peak)" if peak else "")
          + " | torch formula ms | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for N in sizes:
        for d in dims:
            for causal in causals:
                t = measure(args.batch, args.heads, N, d, causal, args.repeats, args.settle_ms / 1000)
                fwd_flop = 4.0 * args.batch * args.heads * N * N * d * (0.5 if causal else 1.0)
                for label, flop in (("forward", fwd_flop), ("forward+backward", 3.5 * fwd_flop)):
                    ours, plain = t[f"attnlab {label}"], t[f"torch {label}"]
                    gflops = flop / ours / 1e9
                    rate = f"{gflops:.1f}" + (f" ({100 * gflops / peak:.0f} %)" if peak else "")
                    print(f"| {N} | {d} | {'yes' if causal else 'no'} | {label} | {1e3 * ours:.1f} | {rate} "
                          f"| {1e3 * plain:.1f} | {plain / ours:.1f}× |", flush=True)
                    rows.append(dict(N=N, d=d, causal=causal, passes=label, attnlab_s=ours, torch_s=plain,
                                     gflops=gflops, speedup=plain / ours))
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(threads=args.threads, batch=args.batch, heads=args.heads, repeats=args.repeats,
                           peak_gflops=peak, load_before=load, load_after=load_after, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
