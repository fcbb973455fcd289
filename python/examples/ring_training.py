#!/usr/bin/python3
"""A causal attention model trained with its sequence sharded across MPI ranks
(attnlab.torch.ring_attention), against the same model trained in one process
(attnlab.torch.attention) on every rank: same initial weights, same data, same SGD steps.
The losses must agree at every step.

The task: at each position predict the input vector LAG positions back (a causal model
must find, by content, the key LAG steps behind; no positional encoding is needed, the
inputs carry a one-hot position code). Each rank holds its zigzag rows of the sequence
(attnlab.mpi.zigzag_rows); the loss is the sum over ranks of each rank's rows' squared
errors, so the replicated weights' gradients are summed over ranks (comm.allreduce).

Tolerance: the ring sums the same float32 terms in another order (~1e-7 relative per
step); SGD feeds the differences back over the steps. The check allows 1e-5 relative.

    mpirun -np 2 /usr/bin/python3 python/examples/ring_training.py   (PYTHONPATH=build/python)
"""

import sys

import numpy as np
import torch
from mpi4py import MPI

import attnlab.mpi as am
import attnlab.torch as at

comm = MPI.COMM_WORLD
B, N, E, H, LAG, STEPS, LR = 2, 96, 32, 4, 3, 30, 4.0
torch.manual_seed(0)
x = torch.randn(B, N, E)
x[:, :, :16] = 0
x[:, torch.arange(N), torch.arange(N) % 16] = 1.0  # a position code, so keys can be found by content
target = torch.zeros(B, N, E)
target[:, LAG:] = x[:, :-LAG]
weights = [torch.randn(E, E) / E ** 0.5 for _ in range(4)]  # Wq, Wk, Wv, Wo


def heads(t):  # [B, n, E] -> [B, H, n, E/H]
    return t.view(t.shape[0], t.shape[1], H, E // H).transpose(1, 2)


def model(w, xs, attend):
    q, k, v = (heads(xs @ wi) for wi in w[:3])
    y = attend(q, k, v).transpose(1, 2).reshape(xs.shape)
    return y @ w[3]


def train(attend, rows, reduce):
    w = [wi.clone().requires_grad_() for wi in weights]
    losses = []
    for _ in range(STEPS):
        y = model(w, x[:, rows], attend)
        loss = ((y - target[:, rows]) ** 2).sum() / (B * N * E)
        loss.backward()
        losses.append(reduce(loss.item()))
        with torch.no_grad():
            for wi in w:
                wi -= LR * torch.from_numpy(reduce(wi.grad.numpy()))
                wi.grad = None
    return losses


everything = np.arange(N)
one_process = train(lambda q, k, v: at.attention(q, k, v, causal=True), everything, lambda a: a)
mine = am.zigzag_rows(N, comm.size, comm.rank)
ring = train(lambda q, k, v: at.ring_attention(comm, q, k, v, causal=True), mine,
             lambda a: comm.allreduce(a))  # the sum over ranks (numbers and NumPy arrays alike)
worst = max(abs(a - b) / abs(b) for a, b in zip(ring, one_process))
if comm.rank == 0:
    print(f"{comm.size} ranks, {STEPS} SGD steps: loss {one_process[0]:.4f} -> {one_process[-1]:.4f}, "
          f"largest relative difference ring vs one process {worst:.1e}")
if not worst <= 1e-5 or not one_process[-1] < 0.9 * one_process[0]:
    sys.exit(f"rank {comm.rank}: FAIL: difference {worst:.1e}, losses {one_process[0]:.4f} -> {one_process[-1]:.4f}")
if comm.rank == 0:
    print("losses agree at every step")
