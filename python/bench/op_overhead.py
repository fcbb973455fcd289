#!/usr/bin/python3
"""Per-call cost of the registered operator against the extension's pybind11 function.

The same attention forward (float32, bottom-right causal, the same threads) through four
paths, on the same memory:
  pybind11   attnlab.attention_forward on NumPy views of the tensors (the Python path of the
             NumPy API: pybind11's argument conversion, the arrays' buffers);
  operator   torch.ops.attnlab.attention_forward on the tensors (the dispatcher: schema
             parsing of 18 arguments, the CPU kernel, output tensors);
  autograd   torch.ops.attnlab.attention, the differentiable operator (its Autograd kernel: a
             torch::autograd::Function around attention_forward);
  attention  attnlab.torch.attention under torch.no_grad() (the public function: its checks
             in Python, then torch.ops.attnlab.attention).
For each shape the four paths are called in turn, call by call, each first in turn (so
that a change of the machine's load, or an effect of the order, falls on all four), each
call timed alone; the median of the calls is
printed with its ratio to pybind11's and the difference in µs. Three shapes: two decoding
steps (q [1, H, 1, d] against K, V [1, Hkv, N, d]: a short one, where a fixed cost shows most,
and a Llama-sized one) and a training-size call (q, K, V [B, H, N, d]).

    PYTHONPATH=build/python /usr/bin/python3 python/bench/op_overhead.py \\
        [--threads 1] [--decode-calls 3000] [--train-calls 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import numpy as np
import torch

import attnlab
import attnlab.torch as at


def shapes(args) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], int]]:
    """name: (q's shape, K's and V's shape, calls)."""
    return {
        "decode-s": ((1, 8, 1, 64), (1, 8, 256, 64), args.decode_calls),
        "decode": ((1, 32, 1, 128), (1, 8, 1024, 128), args.decode_calls),
        "train": ((2, 8, 512, 64), (2, 8, 512, 64), args.train_calls),
    }


def paths(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, threads: int) -> dict[str, Callable[[], object]]:
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()  # the tensors' own memory
    op, differentiable = torch.ops.attnlab.attention_forward, torch.ops.attnlab.attention
    options = (None, None, "bottom_right", "inv_sqrt_d", None, True, threads, 0.0, 0, None, None, None, None, None)
    return {
        "pybind11": lambda: attnlab.attention_forward(qn, kn, vn, causal="bottom_right", threads=threads),
        "operator": lambda: op(q, k, v, *options, False),
        "autograd": lambda: differentiable(q, k, v, *options, False),
        "attention": lambda: at.attention(q, k, v, causal="bottom_right", threads=threads),
    }


def measure(calls: dict[str, Callable[[], object]], n: int) -> dict[str, float]:
    """The median µs of n calls of each, the calls interleaved."""
    for call in calls.values():  # warm-up: first-call costs (imports, the engine's buffers)
        for _ in range(3):
            call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for i in range(n):
        for name in names[i % len(names):] + names[:i % len(names)]:  # each path first in turn
            call = calls[name]
            t0 = time.perf_counter_ns()
            call()
            samples[name].append((time.perf_counter_ns() - t0) / 1e3)
    return {name: float(np.median(s)) for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="threads of every call (and torch's)")
    parser.add_argument("--decode-calls", type=int, default=3000)
    parser.add_argument("--train-calls", type=int, default=40)
    parser.add_argument("--json", help="also write the medians here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    results = {}
    print(f"{'shape':<8} {'q':<18} {'K, V':<18} {'path':<10} {'median µs':>10} {'× pybind11':>10} {'+ µs':>9}")
    with torch.no_grad():
        for name, (q_shape, kv_shape, n) in shapes(args).items():
            q = torch.randn(q_shape, generator=gen)
            k, v = torch.randn(kv_shape, generator=gen), torch.randn(kv_shape, generator=gen)
            medians = measure(paths(q, k, v, args.threads), n)
            base = medians["pybind11"]
            for path, us in medians.items():
                print(f"{name:<8} {str(list(q_shape)):<18} {str(list(kv_shape)):<18} {path:<10} {us:>10.1f} "
                      f"{us / base:>10.3f} {us - base:>+9.1f}")
            results[name] = {"q": q_shape, "kv": kv_shape, "calls": n, "threads": args.threads, "median_us": medians}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
