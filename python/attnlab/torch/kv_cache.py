"""A KV cache for a torch generation loop, and a causal self-attention block that uses it.

`KVCache` is attnlab.KVCache (paged, quantized on write) taking and giving torch tensors;
it is for inference: nothing that goes through it is differentiated. `CausalSelfAttention`
is the attention block of nanoGPT and Llama code (q, k, v projections, grouped-query heads,
an output projection): without a cache it runs attnlab's differentiable
`scaled_dot_product_attention`; with one, it appends the new positions' K/V and attends to
the sequence's whole cache.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _attnlab
from . import scaled_dot_product_attention

__all__ = ["KVCache", "CausalSelfAttention"]


def _rows(x: torch.Tensor):
    """A float32 NumPy view (a copy only when the dtype or layout needs one)."""
    return x.detach().to(torch.float32).contiguous().numpy()


class KVCache:
    """attnlab.KVCache over torch tensors. KVCache(layers, kv_heads, head_dim, max_tokens,
    key_type="float32", value_type="float32", **options): the options of attnlab.KVCache."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, max_tokens: int, key_type: str = "float32",
                 value_type: str = "float32", **options):
        self.cache = _attnlab.KVCache(layers, kv_heads, head_dim, max_tokens, key_type, value_type, **options)

    def add_sequence(self) -> int:
        return self.cache.add_sequence()

    def fork(self, seq: int, tokens: int) -> int:
        return self.cache.fork(seq, tokens)

    def free(self, seq: int) -> None:
        self.cache.free(seq)

    def length(self, seq: int, layer: int = 0) -> int:
        return self.cache.length(seq, layer)

    def memory(self) -> dict:
        return self.cache.memory()

    def append(self, layer: int, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """k [kv_heads, n, head_dim], v [kv_heads, n, value_dim]."""
        self.cache.append(layer, seq, _rows(k), _rows(v))

    def attention(self, layer: int, seqs, q: torch.Tensor, **options) -> torch.Tensor:
        """q [len(seqs), Hq, Nq, head_dim] (or [Hq, total, head_dim] with query_lengths=...),
        the options of attnlab.KVCache.attention; the result in q's dtype."""
        out = self.cache.attention(layer, list(seqs), _rows(q), **options)
        if isinstance(out, tuple):
            return tuple(torch.from_numpy(x) for x in out)
        return torch.from_numpy(out).to(q.dtype)


class CausalSelfAttention(nn.Module):
    """Causal self-attention with grouped-query heads, as in nanoGPT and Llama code.

    forward(x [B, T, n_embd], cache=None, seqs=None, layer=0) -> [B, T, n_embd].
    With `cache` (a KVCache) and `seqs` (B sequence ids), the T new positions of each
    sequence are appended to the cache's `layer` and attend to everything it holds.
    """

    def __init__(self, n_embd: int, n_head: int, n_kv_head: int | None = None, bias: bool = False):
        super().__init__()
        n_kv_head = n_kv_head or n_head
        if n_embd % n_head or n_head % n_kv_head:
            raise ValueError(f"n_embd {n_embd}, n_head {n_head}, n_kv_head {n_kv_head}: n_head must divide n_embd "
                             "and n_kv_head must divide n_head")
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, n_embd // n_head
        self.q_proj = nn.Linear(n_embd, n_head * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_head * self.head_dim, n_embd, bias=bias)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, seqs=None, layer: int = 0) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if cache is None:
            y = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_head != self.n_head)
        else:
            if seqs is None or len(seqs) != B:
                raise ValueError(f"seqs: {B} sequence ids are needed with a cache, one per batch row")
            for b, seq in enumerate(seqs):
                cache.append(layer, seq, k[b], v[b])
            y = cache.attention(layer, seqs, q)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))
