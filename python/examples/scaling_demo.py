#!/usr/bin/python3
"""Claim C6 from Python: without 1/sqrt(d_k) the gradient reaching Q and K vanishes
as d_k grows; with it, it stays of the same order.

For each head dim d_k, random q, k ~ N(0, 1) of shape [1, H, N, d_k] and v, dO ~ N(0, 1)
go through attnlab.attention_forward / attention_backward (float64, the reference),
once with scale 1/sqrt(d_k) and once unscaled. The figure shows, against d_k, the
median over rows of the gradient norms ||dQ_i|| and ||dK_j|| (the typical row), and
their root-mean-square over rows: unscaled, the median collapses at large d_k while
the RMS grows, because a rare row whose two best keys nearly tie keeps a large
gradient. Both are averaged over seeds; the table is printed.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/scaling_demo.py --out-dir /tmp
"""

import argparse
import os

import numpy as np

import attnlab


def gradient_norms(d_k, scale, seed, heads=4, n=32, d_v=16):
    """[median ||dQ_i||, median ||dK_j||, RMS ||dQ_i||, RMS ||dK_j||] over rows, one random problem."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, heads, n, d_k))
    k = rng.standard_normal((1, heads, n, d_k))
    v = rng.standard_normal((1, heads, n, d_v))
    grad_out = rng.standard_normal((1, heads, n, d_v))
    out, lse = attnlab.attention_forward(q, k, v, scale=scale)
    dq, dk, _ = attnlab.attention_backward(q, k, v, out, lse, grad_out, scale=scale)
    nq, nk = np.linalg.norm(dq, axis=-1), np.linalg.norm(dk, axis=-1)  # [1, H, N] row norms
    return [np.median(nq), np.median(nk), np.sqrt(np.mean(nq**2)), np.sqrt(np.mean(nk**2))]


def measure(dims, seeds):
    """{policy: array [len(dims), 4] of gradient_norms averaged over seeds}."""
    return {
        policy: np.array([np.mean([gradient_norms(d, policy, s) for s in range(seeds)], axis=0) for d in dims])
        for policy in ("inv_sqrt_d", "none")
    }


def plot(dims, results, path):
    import matplotlib  # type: ignore[import]  # Debian's matplotlib ships no type information

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for col, name in enumerate(("dQ", "dK")):
        ax = axes[col]
        ax.loglog(dims, results["inv_sqrt_d"][:, col], "o-", color="C0", label="1/sqrt(d_k): median row")
        ax.loglog(dims, results["inv_sqrt_d"][:, col + 2], ":", color="C0", label="1/sqrt(d_k): RMS over rows")
        ax.loglog(dims, results["none"][:, col], "s-", color="C3", label="unscaled: median row")
        ax.loglog(dims, results["none"][:, col + 2], ":", color="C3", label="unscaled: RMS over rows")
        ax.set_xlabel("d_k")
        ax.set_title(f"row norms of {name}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("gradient norm (mean over seeds)")
    axes[0].legend()
    fig.suptitle("C6: the gradient reaching Q and K vs d_k (attnlab, float64)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", default=".", help="where to write scaling_demo.png")
    parser.add_argument("--dims", default="4,16,64,256,1024,4096", help="head dims d_k, comma-separated")
    parser.add_argument("--seeds", type=int, default=3, help="random problems per point")
    args = parser.parse_args(argv)
    dims = [int(d) for d in args.dims.split(",")]
    results = measure(dims, args.seeds)
    print("median over rows of ||dQ_i|| and ||dK_j|| (RMS over rows in brackets), mean over seeds")
    print(f"{'d_k':>6} {'dQ scaled':>22} {'dQ unscaled':>22} {'dK scaled':>22} {'dK unscaled':>22}")
    for i, d in enumerate(dims):
        cells = [f"{r[c]:.3e} ({r[c + 2]:.2e})" for c in (0, 1) for r in (results["inv_sqrt_d"][i], results["none"][i])]
        print(f"{d:>6} " + " ".join(f"{c:>22}" for c in (cells[0], cells[1], cells[2], cells[3])))
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "scaling_demo.png")
    plot(dims, results, path)
    print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()
