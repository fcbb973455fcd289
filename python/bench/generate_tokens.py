#!/usr/bin/python3
"""Tokens per second of greedy generation with a small GPT: attnlab's KV cache against the
same model whose cache is plain torch tensors and whose attention is torch's naive formula.

Both arms run the same modules with the same weights (attnlab.torch.CausalSelfAttention with
grouped-query heads): only the object passed as `cache` differs.
  attnlab:  attnlab.torch.KVCache (paged blocks; --cache-type float32, bfloat16, int8, ...);
            each step appends the new K/V and runs attnlab's decode kernel over the cache.
  torch:    TorchCache below: a preallocated [Hkv, max_len, d] tensor per layer and sequence
            (as Llama's reference code keeps it), and softmax(q kᵀ/√d) v written with torch
            operations (GQA by repeat_interleave, a bottom-right causal mask for the prompt).
The prompt is run once (prefill), then --new tokens are generated one at a time. Each repeat
times both arms in turn (alternating which goes first); the median tokens/s of the generation
phase is reported, with the prefill time, and whether the two arms chose the same tokens.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/generate_tokens.py \\
        [--prompt 1024] [--new 64] [--layers 4] [--embd 512] [--heads 8] [--kv-heads 2] \\
        [--threads 2] [--repeats 3] [--cache-type float32]
"""

import argparse
import math
import statistics
import time

import torch
from torch import nn

import attnlab
from attnlab.torch import CausalSelfAttention, KVCache


class TorchCache:
    """The interface of attnlab.torch.KVCache that CausalSelfAttention uses, in plain torch."""

    def __init__(self, layers, kv_heads, head_dim, max_tokens):
        self.layers, self.kv_heads, self.head_dim, self.max_tokens = layers, kv_heads, head_dim, max_tokens
        self.k, self.v, self.lengths = {}, {}, {}

    def add_sequence(self):
        seq = len(self.lengths)
        for layer in range(self.layers):
            shape = (self.kv_heads, self.max_tokens, self.head_dim)
            self.k[layer, seq], self.v[layer, seq] = torch.zeros(shape), torch.zeros(shape)
            self.lengths[layer, seq] = 0
        return seq

    def append(self, layer, seqs, k, v):  # k, v [len(seqs), Hkv, T, d]
        for seq, kb, vb in zip(seqs, k, v):
            n, t = self.lengths[layer, seq], kb.shape[1]
            self.k[layer, seq][:, n:n + t] = kb
            self.v[layer, seq][:, n:n + t] = vb
            self.lengths[layer, seq] = n + t

    def attention(self, layer, seqs, q):  # q [B, Hq, T, d]
        outs = []
        for b, seq in enumerate(seqs):
            n = self.lengths[layer, seq]
            group = q.shape[1] // self.kv_heads
            k = self.k[layer, seq][:, :n].repeat_interleave(group, dim=0)
            v = self.v[layer, seq][:, :n].repeat_interleave(group, dim=0)
            s = q[b] @ k.transpose(-2, -1) * (1.0 / math.sqrt(self.head_dim))
            t = q.shape[2]
            if t > 1:  # bottom-right causal: new row i sees the keys up to n - t + i
                hidden = torch.ones(t, n, dtype=torch.bool).triu(n - t + 1)
                s = s.masked_fill(hidden, float("-inf"))
            outs.append(torch.softmax(s, dim=-1) @ v)
        return torch.stack(outs)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, n_kv_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, cache, seqs, layer):
        x = x + self.attn(self.ln1(x), cache, seqs, layer)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, n_embd, n_head, n_kv_head, n_layer, max_len):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, n_embd), nn.Embedding(max_len, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, n_kv_head) for _ in range(n_layer))
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, tokens, start, cache, seqs):
        x = self.tok(tokens) + self.pos(torch.arange(start, start + tokens.shape[1]))
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, seqs, layer)
        return self.head(x)


@torch.no_grad()
def generate(model, prompt, new, cache):
    """(tokens, prefill seconds, generation seconds)."""
    seqs = [cache.add_sequence() for _ in range(prompt.shape[0])]
    t0 = time.perf_counter()
    logits = model(prompt, 0, cache, seqs)
    t1 = time.perf_counter()
    tokens = prompt
    for _ in range(new):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        logits = model(nxt, tokens.shape[1] - 1, cache, seqs)
    return tokens, t1 - t0, time.perf_counter() - t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-type", default="float32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)  # attnlab.torch follows torch's thread count
    torch.manual_seed(0)
    max_len = a.prompt + a.new
    model = GPT(a.vocab, a.embd, a.heads, a.kv_heads, a.layers, max_len).eval()
    prompt = torch.randint(0, a.vocab, (1, a.prompt))
    head_dim = a.embd // a.heads

    def attnlab_cache():
        return KVCache(layers=a.layers, kv_heads=a.kv_heads, head_dim=head_dim, max_tokens=max_len,
                       key_type=a.cache_type, value_type=a.cache_type)

    def torch_cache():
        return TorchCache(a.layers, a.kv_heads, head_dim, max_len)

    arms = {"attnlab": attnlab_cache, "torch": torch_cache}
    runs = {name: [] for name in arms}
    tokens = {}
    generate(model, prompt[:, :64], 4, attnlab_cache())  # warm both paths
    generate(model, prompt[:, :64], 4, torch_cache())
    for r in range(a.repeats):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for name in order:
            out, prefill, gen = generate(model, prompt, a.new, arms[name]())
            runs[name].append((prefill, a.new / gen))
            tokens[name] = out
    print(f"engine target {attnlab.engine_target()}, {a.threads} threads; model: {a.layers} layers, "
          f"n_embd {a.embd}, heads {a.heads}/{a.kv_heads} (d {head_dim}), vocab {a.vocab}; "
          f"prompt {a.prompt}, {a.new} new tokens, batch 1, median of {a.repeats}")
    for name, rs in runs.items():
        label = f"{name} ({a.cache_type} cache)" if name == "attnlab" else "torch (naive attention, tensor cache)"
        print(f"  {label:40} prefill {1e3 * statistics.median(p for p, _ in rs):8.1f} ms   "
              f"generation {statistics.median(t for _, t in rs):7.1f} tokens/s")
    ratio = statistics.median(t for _, t in runs["attnlab"]) / statistics.median(t for _, t in runs["torch"])
    same = torch.equal(tokens["attnlab"], tokens["torch"])
    print(f"  attnlab / torch tokens/s: {ratio:.2f}x; generated tokens {'identical' if same else 'differ'}")


if __name__ == "__main__":
    main()
