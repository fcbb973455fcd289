#!/usr/bin/python3
"""A small transformer trained in PyTorch twice: once with attnlab's attention
(attnlab.torch.scaled_dot_product_attention, its forward and backward) and once with the
plain torch formula softmax(q kᵀ/√d + causal mask) v and torch's autograd. Same initial
weights, same batches, same AdamW: the two runs must give the same loss at every step,
within the tolerance below; the wall time of each run is printed.

The task (synthetic, learnable in 50 steps only through attention): a sequence of random
tokens, and at each position the model predicts the token LAG positions back (the first
LAG positions have no target). A causal model must find, by position, the key LAG steps
behind: embedding + learned positions, two pre-LayerNorm blocks of causal multi-head
attention and a GELU MLP, a final LayerNorm and a linear read-out.

Tolerance. The two attentions compute the same function with different float32 roundings
(attnlab: tiles and an online softmax; torch: the whole score matrix), a few 1e-7
relative at each step. Training feeds the differences back (AdamW divides each gradient
by its running RMS) and compounds them over 50 steps, most while the loss falls fastest.
Measured, seeds 0-7: the largest |loss_attnlab - loss_torch| / loss_torch over the 50
steps is 2.6e-6 to 1.4e-5. The check allows 1e-4. A real error is far larger: dK wrong
by 0.1 % (a mutation tried once) already gives 1e-3 at step 50. In float64 (--dtype
float64: attnlab's reference against torch's float64) the differences are ~1e-15 and the
bound is 1e-9.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/torch_training.py [--steps 50]
"""

import argparse
import copy
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab.torch

TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9}  # relative to the loss; see above


def torch_attention(q, k, v, is_causal=False):
    """The code a torch 1.13 user writes: the N×N scores in memory, autograd for the backward."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):  # x [B, N, dim]
        B, N, dim = x.shape
        # q, k, v [B, heads, N, dim/heads]: strided views of one projection, read in place.
        q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        y = self.attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, N, dim))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab, seq, dim, heads, layers, attention):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))
        self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):  # tokens [B, N] -> logits [B, N, vocab]
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.out(self.norm(x))


def batches(steps, batch, seq, vocab, lag, seed):
    """(tokens [batch, seq], targets [batch, seq]) per step; -100 marks positions without a target."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (batch, seq), generator=gen)
        targets = torch.full_like(tokens, -100)
        targets[:, lag:] = tokens[:, :-lag]
        yield tokens, targets


def train(model, data, lr):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses, start = [], time.perf_counter()
    for tokens, targets in data:
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=16)
    p.add_argument("--lag", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    torch.manual_seed(args.seed)
    shape = (args.vocab, args.seq, args.dim, args.heads, args.layers)
    ours = TinyTransformer(*shape, attnlab.torch.scaled_dot_product_attention).to(dtype)
    plain = TinyTransformer(*shape, torch_attention).to(dtype)
    plain.load_state_dict(copy.deepcopy(ours.state_dict()))  # the same initial weights

    def data():
        return batches(args.steps, args.batch, args.seq, args.vocab, args.lag, args.seed)

    losses_ours, time_ours = train(ours, data(), args.lr)
    losses_plain, time_plain = train(plain, data(), args.lr)

    tol = TOLERANCE[dtype]
    worst = 0.0
    print(f"{'step':>4} {'attnlab loss':>14} {'torch loss':>14} {'relative diff':>13}")
    for step, (a, b) in enumerate(zip(losses_ours, losses_plain)):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        if step % 10 == 0 or step == args.steps - 1 or rel > tol:
            print(f"{step:>4} {a:>14.8f} {b:>14.8f} {rel:>13.2e}{'  > tolerance' if rel > tol else ''}")
    print(f"{args.dtype}, {torch.get_num_threads()} thread(s), batch {args.batch}, seq {args.seq}, "
          f"dim {args.dim}, {args.heads} heads, {args.layers} layers")
    print(f"wall time, {args.steps} steps: attnlab {time_ours:.2f} s, torch formula {time_plain:.2f} s")
    if worst > tol:
        print(f"FAIL: the losses differ by up to {worst:.2e} of the loss (tolerance {tol:.0e})")
        return 1
    print(f"losses agree at every step: largest relative difference {worst:.2e} (tolerance {tol:.0e}); "
          f"loss {losses_ours[0]:.3f} -> {losses_ours[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
