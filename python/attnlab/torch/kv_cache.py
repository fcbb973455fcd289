"""A KV cache for a torch generation loop, and a causal self-attention block that uses it.

`KVCache` is attnlab's paged cache (quantized on write) as `torch.classes.attnlab.KVCache`
(its `handle`), taking and giving torch tensors through the registered operators
torch.ops.attnlab.kv_cache_append / kv_cache_lengths / kv_cache_attention. It is for
inference: its calls raise when autograd would have to differentiate them (a tensor that
requires grad, with grad enabled), rather than cut the gradient silently.

`CausalSelfAttention` is the attention block of nanoGPT and Llama code (q, k, v projections,
grouped-query heads, optional rotary embeddings, an output projection): without a cache it
runs the differentiable torch.ops.attnlab.attention; with one, it appends the new positions'
K/V to every sequence of the batch (all or none) and attends to each sequence's whole cache.
Its forward is TorchScript: torch.jit.script compiles it (pass the cache's `handle` to a
scripted module), and torch.jit.trace records the appends when the traced module holds the
cache's handle as an attribute (the tracer reaches an object only through the module).
torch.jit.save of a scripted module holding the handle saves the cache's contents with it, and
torch.jit.load (after `import attnlab.torch`) gives them back (docs/python.md).
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch import nn

from . import _ops
from ._tensors import check_float, check_tensor, options_dtype
from .rope import check_rope, rope_angles, rotate

__all__ = ["KVCache", "CausalSelfAttention"]


NO_GRAD = ("the KV cache is for inference and computes no gradients; run it under torch.no_grad() "
           "(or torch.inference_mode()), or train the block without a cache (block(x))")


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    """A float CPU tensor that autograd need not follow; otherwise an error naming `name`
    (the operator converts it to float32)."""
    check_tensor(x, name)
    check_float(x, name)
    if x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name}: requires grad, but {NO_GRAD}")
    return x


class KVCache:
    """attnlab.KVCache over torch tensors. KVCache(layers, kv_heads, head_dim, max_tokens,
    key_type="float32", value_type="float32", *, value_dim=None, block_tokens=128,
    key_scales=(), value_scales=(), key_rotation="none", value_rotation="none", center_keys=False):
    attnlab.KVCache's configuration. `handle` is the
    torch.classes.attnlab.KVCache object itself, for scripted and traced modules."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, max_tokens: int, key_type: str = "float32",
                 value_type: str = "float32", *, value_dim: int | None = None, block_tokens: int = 128,
                 key_scales=(), value_scales=(), key_rotation: str = "none", value_rotation: str = "none",
                 center_keys: bool = False):
        if not isinstance(center_keys, bool):
            raise TypeError(f"center_keys: expected True or False, got {type(center_keys).__name__}")
        self.handle = torch.classes.attnlab.KVCache(layers, kv_heads, head_dim, max_tokens, key_type, value_type,
                                                    value_dim, block_tokens, [float(s) for s in key_scales],
                                                    [float(s) for s in value_scales], key_rotation, value_rotation,
                                                    center_keys)
        # attnlab.KVCache's read-only properties, as created (the handle checked them)
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.value_dim = head_dim if value_dim is None else value_dim
        self.block_tokens, self.key_type, self.value_type = block_tokens, key_type, value_type
        self.key_rotation, self.value_rotation, self.center_keys = key_rotation, value_rotation, center_keys

    def add_sequence(self) -> int:
        return self.handle.add_sequence()

    def fork(self, seq: int, tokens: int) -> int:
        return self.handle.fork(seq, tokens)

    def free(self, seq: int) -> None:
        self.handle.free(seq)

    def length(self, seq: int, layer: int = 0) -> int:
        return self.handle.length(seq, layer)

    def memory(self) -> dict:
        return dict(self.handle.memory())

    def gather(self, layer: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first length(seq, layer) positions, dequantized: k [kv_heads, len, head_dim],
        v [kv_heads, len, value_dim], float32."""
        return self.handle.gather(layer, seq)

    def append(self, layer: int, seq, k: torch.Tensor, v: torch.Tensor) -> None:
        """One sequence `seq`: k [kv_heads, n, head_dim], v [kv_heads, n, value_dim] (or with a
        leading axis of 1). A list of sequences `seq`: k [len(seq), kv_heads, n, head_dim],
        v [len(seq), kv_heads, n, value_dim], appended to all of them or, on any error, to none."""
        many = not isinstance(seq, int)
        torch.ops.attnlab.kv_cache_append(self.handle, layer, list(seq) if many else [seq], _rows(k, "k"),
                                          _rows(v, "v"))

    def attention(self, layer: int, seqs, q: torch.Tensor, *, query_lengths=None, causal: str = "bottom_right",
                  scale=None, window_size=None, softcap: float | None = None, alibi_slopes=None, sinks=None,
                  threads: int = 0, return_lse: bool = False):
        """q [len(seqs), Hq, Nq, head_dim] (or [Hq, total, head_dim] with query_lengths=...),
        the options of attnlab.KVCache.attention (scale: None, a number or a policy name).
        Computed in float32; the result in q's dtype (with return_lse=True, (out, lse), lse
        float32 for 16-bit q)."""
        def floats(x):
            return None if x is None else torch.as_tensor(x, dtype=torch.float32)
        out, lse = torch.ops.attnlab.kv_cache_attention(
            self.handle, layer, list(seqs), _rows(q, "q"), None if query_lengths is None else list(query_lengths),
            _ops.causal_name(causal), _ops.scale_name(scale), None if window_size is None else list(window_size),
            None if softcap is None else float(softcap), floats(alibi_slopes), floats(sinks), threads)
        if return_lse:
            return out.to(q.dtype), lse.to(options_dtype(q.dtype))
        return out.to(q.dtype)

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
        self.rope, self.rope_base = rope, float(rope_base)
        self.q_proj = nn.Linear(n_embd, n_head * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(n_embd, n_kv_head * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_head * self.head_dim, n_embd, bias=bias)

    def forward(self, x: torch.Tensor, cache: Optional[_ops.KVCacheHandle] = None,
                seqs: Optional[List[int]] = None, layer: int = 0) -> torch.Tensor:
        if not torch.jit.is_scripting():  # eager or traced: attnlab.torch.KVCache or its handle, checked
            cache = self._checked_cache(x, cache, seqs)
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if cache is None:
            if self.rope is not None:
                angles = rope_angles(torch.arange(T), self.head_dim, self.rope_base)  # [T, d/2]: rows 0 … T − 1
                q, k = rotate(q, angles, self.rope), rotate(k, angles, self.rope)
            y = _ops.causal_attention(q, k, v)
        else:
            assert seqs is not None
            if self.rope is not None:  # each sequence from its own cached length
                angles = rope_angles(_ops.cached_positions(cache, layer, seqs, T), self.head_dim, self.rope_base)
                angles = angles.unsqueeze(1)  # [B, 1, T, d/2]
                q, k = rotate(q, angles, self.rope), rotate(k, angles, self.rope)
            y = _ops.cached_attention(cache, layer, seqs, q, k, v)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))

    @torch.jit.unused
    def _checked_cache(self, x: torch.Tensor, cache, seqs):
        """The cache's handle (or None), after the checks eager callers get named errors from."""
        check_tensor(x, "x")
        check_float(x, "x")
        if cache is None:
            return None
        B = x.shape[0]
        if seqs is None or len(seqs) != B:
            raise ValueError(f"seqs: {B} sequence ids are needed with a cache, one per batch row")
        if len(set(seqs)) != B:
            raise ValueError(f"seqs: {list(seqs)} lists a sequence twice; each batch row is its own sequence "
                             "(fork one to continue it twice)")
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters())):
            raise RuntimeError(f"CausalSelfAttention with a cache: {NO_GRAD}")
        return cache.handle if isinstance(cache, KVCache) else cache
