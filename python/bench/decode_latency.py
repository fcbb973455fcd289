#!/usr/bin/python3
"""Latency distribution of small decode calls, alone and beside a busy torch thread pool.

A decoding step is one query row per head against the cache: tens of microseconds of work
at short contexts. An OpenMP team of two threads ends each call with a barrier; when
another thread pool (torch's, in a generation loop that runs the rest of the model) keeps
the cores busy, the second thread may wait for a scheduler slice, and the call's tail grows
from microseconds to milliseconds. This measures it, so that the engine's thread policy for
small calls (docs/engine.md, "Threads for small calls") rests on numbers.

For each context length and thread count, `--calls` calls of attnlab.attention_forward on
q [1, H, 1, d], K and V [1, H, N, d] (float32, bottom-right causal as in decoding) are
timed one by one (with --layers L, each call takes the next of L caches, so that K and V
come from memory once L caches exceed the last-level cache), in two conditions:
  idle: nothing else runs in the process;
  busy: a Python thread runs torch matrix products continuously on torch's own pool
        (torch.set_num_threads(--torch-threads)), as a model's other layers would.
The median, 90th and 99th percentiles (µs) are printed per (condition, N, threads).

    PYTHONPATH=build/python /usr/bin/python3 python/bench/decode_latency.py \\
        [--contexts 256,1024,4096,16384] [--heads 8] [--dim 128] [--calls 2000] [--layers 1] [--json out.json]
"""

import argparse
import json
import threading
import time

import numpy as np
import torch

import attnlab


def percentiles(samples_us):
    s = np.sort(np.asarray(samples_us))
    return {p: float(np.percentile(s, p)) for p in (50, 90, 99)}


def time_calls(q, caches, threads, calls):
    out = []
    for i in range(calls):
        k, v = caches[i % len(caches)]
        t0 = time.perf_counter_ns()
        attnlab.attention_forward(q, k, v, causal="bottom_right", threads=threads)
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


class BusyTorch:
    """A thread that keeps torch's pool busy with 256×256 products until stopped."""

    def __init__(self, threads):
        self.threads = threads
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        torch.set_num_threads(self.threads)
        a = torch.randn(256, 256)
        while not self.stop.is_set():
            a = torch.tanh(a @ a * 0.01)

    def __enter__(self):
        self.thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default="256,1024,4096,16384")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--threads", default="1,2", help="attnlab thread counts to compare")
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=1,
                    help="distinct caches called in turn, as a model's layers: enough of them and each call reads "
                         "its K and V from memory, not from the last-level cache")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    contexts = [int(x) for x in a.contexts.split(",")]
    thread_counts = [int(x) for x in a.threads.split(",")]
    rng = np.random.default_rng(0)
    rows = []
    print(f"engine target {attnlab.engine_target()}, heads {a.heads}, d {a.dim}, {a.calls} calls each; µs")
    print(f"{'condition':9} {'N':>6} {'threads':>7} {'p50':>9} {'p90':>9} {'p99':>9}")
    for condition in ("idle", "busy"):
        for n in contexts:
            q = rng.standard_normal((1, a.heads, 1, a.dim), dtype=np.float32)
            caches = [(rng.standard_normal((1, a.heads, n, a.dim), dtype=np.float32),
                       rng.standard_normal((1, a.heads, n, a.dim), dtype=np.float32)) for _ in range(a.layers)]
            for threads in thread_counts:
                time_calls(q, caches, threads, 50)  # warm the engine's scratch and the team
                if condition == "busy":
                    with BusyTorch(a.torch_threads):
                        samples = time_calls(q, caches, threads, a.calls)
                else:
                    samples = time_calls(q, caches, threads, a.calls)
                p = percentiles(samples)
                rows.append({"condition": condition, "N": n, "threads": threads, **{f"p{k}": x for k, x in p.items()}})
                print(f"{condition:9} {n:>6} {threads:>7} {p[50]:>9.1f} {p[90]:>9.1f} {p[99]:>9.1f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
