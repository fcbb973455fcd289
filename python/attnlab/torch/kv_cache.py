"""A KV cache for a torch generation loop, and a causal self-attention block that uses it.

`KVCache` is attnlab.KVCache (paged, quantized on write) taking and giving torch tensors;
it is for inference: its calls raise when autograd would have to differentiate them (a
tensor that requires grad, with grad enabled), rather than cut the gradient silently, and
under torch.jit.trace, which could not record them. `CausalSelfAttention` is the attention
block of nanoGPT and Llama code (q, k, v projections, grouped-query heads, optional rotary
embeddings, an output projection): without a cache it runs attnlab's differentiable
`scaled_dot_product_attention`; with one, it appends the new positions' K/V to every
sequence of the batch (all or none) and attends to each sequence's whole cache.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _attnlab
from . import scaled_dot_product_attention
from ._function import JIT_TRACE
from ._tensors import check_float, check_tensor, options_dtype
from .rope import apply_rope, check_rope

__all__ = ["KVCache", "CausalSelfAttention"]


NO_GRAD = ("the KV cache is for inference and computes no gradients; run it under torch.no_grad() "
           "(or torch.inference_mode()), or train the block without a cache (block(x))")


def _rows(x: torch.Tensor, name: str):
    """A float32 NumPy view (a copy only when the dtype or layout needs one) of a float CPU
    tensor that autograd need not follow; otherwise an error naming `name`."""
    if torch.jit.is_tracing():  # the extension's call is invisible to the tracer: it would freeze its result
        raise RuntimeError(JIT_TRACE)
    check_tensor(x, name)
    check_float(x, name)
    if x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name}: requires grad, but {NO_GRAD}")
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

    def append(self, layer: int, seq, k: torch.Tensor, v: torch.Tensor) -> None:
        """One sequence `seq`: k [kv_heads, n, head_dim], v [kv_heads, n, value_dim] (or with a
        leading axis of 1). A list of sequences `seq`: k [len(seq), kv_heads, n, head_dim],
        v [len(seq), kv_heads, n, value_dim], appended to all of them or, on any error, to none."""
        many = not isinstance(seq, int)
        self.cache.append(layer, list(seq) if many else seq, _rows(k, "k"), _rows(v, "v"))

    def attention(self, layer: int, seqs, q: torch.Tensor, **options):
        """q [len(seqs), Hq, Nq, head_dim] (or [Hq, total, head_dim] with query_lengths=...),
        the options of attnlab.KVCache.attention. Computed in float32; the result in q's dtype
        (with return_lse=True, (out, lse), lse float32 for 16-bit q)."""
        out = self.cache.attention(layer, list(seqs), _rows(q, "q"), **options)
        if isinstance(out, tuple):  # lse as attention() gives it: float32 for the 16-bit types
            return torch.from_numpy(out[0]).to(q.dtype), torch.from_numpy(out[1]).to(options_dtype(q.dtype))
        return torch.from_numpy(out).to(q.dtype)


class CausalSelfAttention(nn.Module):
    """Causal self-attention with grouped-query heads, as in nanoGPT and Llama code.

    forward(x [B, T, n_embd], cache=None, seqs=None, layer=0) -> [B, T, n_embd].
    With `cache` (a KVCache) and `seqs` (B distinct sequence ids), the T new positions of
    each sequence are appended to the cache's `layer` (all B or none) and attend to
    everything it holds. Inference only (see KVCache); without a cache it differentiates.

    rope: None, "interleaved" or "half_split" (attnlab.torch.rope): q and k are rotated
    before attention (k before it enters the cache) by their positions, 0 … T − 1 without a
    cache, the sequence's cached length onwards with one; rope_base is θ.
    """

    def __init__(self, n_embd: int, n_head: int, n_kv_head: int | None = None, bias: bool = False,
                 rope: str | None = None, rope_base: float = 10000.0):
        super().__init__()
        n_kv_head = n_kv_head or n_head
        if n_embd % n_head or n_head % n_kv_head:
            raise ValueError(f"n_embd {n_embd}, n_head {n_head}, n_kv_head {n_kv_head}: n_head must divide n_embd "
                             "and n_kv_head must divide n_head")
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, n_embd // n_head
        check_rope(rope, rope_base, self.head_dim)
        self.rope, self.rope_base = rope, rope_base
        self.q_proj = nn.Linear(n_embd, n_head * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_head * self.head_dim, n_embd, bias=bias)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, seqs=None, layer: int = 0) -> torch.Tensor:
        B, T, _ = x.shape
        if cache is not None:
            if torch.jit.is_tracing():  # the trace would freeze the output and never append
                raise RuntimeError(JIT_TRACE)
            if seqs is None or len(seqs) != B:
                raise ValueError(f"seqs: {B} sequence ids are needed with a cache, one per batch row")
            if len(set(seqs)) != B:
                raise ValueError(f"seqs: {list(seqs)} lists a sequence twice; each batch row is its own sequence "
                                 "(fork one to continue it twice)")
            if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
                raise RuntimeError(f"CausalSelfAttention with a cache: {NO_GRAD}")
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if self.rope is not None:
            start = torch.zeros(B, 1, dtype=torch.int64) if cache is None else \
                torch.tensor([[cache.length(seq, layer)] for seq in seqs], dtype=torch.int64)
            positions = start + torch.arange(T)  # [B, T]: each sequence from its own length
            q = apply_rope(q, positions, base=self.rope_base, convention=self.rope)
            k = apply_rope(k, positions, base=self.rope_base, convention=self.rope)
        if cache is None:
            y = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_head != self.n_head)
        else:
            cache.append(layer, list(seqs), k, v)
            y = cache.attention(layer, seqs, q)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))
