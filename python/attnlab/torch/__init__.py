"""attnlab for PyTorch: attention on CPU tensors, differentiable, with torch's signature.

    import attnlab.torch as at
    out = at.scaled_dot_product_attention(q, k, v, is_causal=True)   # torch 2.x's function
    out.sum().backward()                                              # attnlab's backward

`scaled_dot_product_attention` follows torch 2.x's `torch.nn.functional` function of that
name (Debian's torch 1.13 has none): shapes (..., H, L, E) with broadcasting, bool or float
`attn_mask`, `is_causal` (top-left), `scale`, `enable_gqa`. `attention` is the same
computation with attnlab's own options: `causal="bottom_right"`, `key_lengths`, scale
policies, `diagnostics`, the log-sum-exp, `threads`, `check_finite`.

Both run attnlab's fused engine for float32, float16 and bfloat16 tensors (the 16-bit
types computed in float32 and rounded once, lse and a float mask in float32) and its
double-precision reference for float64, forward and backward, through the registered
operator torch.ops.attnlab.attention (_ops.py: its autograd keeps O and the per-row
log-sum-exp, never the N×N probabilities), which torch.jit.trace and torch.jit.script
record. Tensors are read where they are,
with their strides; nothing is copied on the way in except where several broadcast batch
axes must be merged. The GIL is released while attnlab computes. Threads: torch's
(`torch.get_num_threads()`), unless `threads=` says otherwise.

Differences from torch 2.x, by design: a row that sees no key gives 0 (as torch ≥ 2.5's
math backend, not NaN as earlier versions), NaN or ±inf in the inputs is a ValueError
(`attention(..., check_finite=False)` lets NaN through), and only CPU tensors of float32,
float64, float16 and bfloat16 are taken. `dropout_p` is PyTorch's dropout with attnlab's
own generator (Philox, seeded from torch's generator): the same distribution, not the
same bits as torch's mask. Not supported, with an error that says so: double backward, a
float mask's gradient together with a scale policy that differs from row to row, or with
dropout, sinks or the other variants, a gradient for ALiBi slopes or a softcap, and
torch.jit.trace with dropout_p > 0 (the trace would keep the seed as a constant).

`KVCache` and `CausalSelfAttention` (kv_cache.py) decode against attnlab's paged cache, for
inference; `apply_rope` (rope.py) applies rotary position embeddings as Llama does.

Importing attnlab never imports torch: this module is loaded only by `import attnlab.torch`.
"""

from __future__ import annotations

import numbers

try:
    import torch
except ImportError as e:  # `import attnlab` works without torch; this module cannot
    raise ImportError("attnlab.torch needs PyTorch (Debian: apt-get install python3-torch); "
                      "attnlab itself works without it, on NumPy arrays") from e

from ._function import JIT_TRACE_DROPOUT, Options, attend, key_lengths_array
from ._ring import ring_attention
from ._shapes import pad_to_rank, sdpa_operands
from ._tensors import check_float, check_tensor, options_dtype, sinks_tensor
from .rope import apply_rope

__all__ = ["CausalSelfAttention", "KVCache", "apply_rope", "attention", "ring_attention", "scaled_dot_product_attention"]


def _check_inputs(query, key, value, attn_mask) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_tensor(x, name)
        check_float(x, name)
    for name, x in (("key", key), ("value", value)):
        if x.dtype != query.dtype:
            raise TypeError(f"{name}: dtype {x.dtype} does not match query's {query.dtype}")
    if attn_mask is not None:
        check_tensor(attn_mask, "attn_mask")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise TypeError(f"attn_mask: dtype {attn_mask.dtype} is not supported (bool: True = attend; "
                            "or float: added to the scaled scores)")


def _mask_in_dtype(mask, dtype):
    """A float mask in the dtype attnlab takes it in for inputs of `dtype` (float32 for the
    16-bit types), by a tracked conversion: its gradient flows back."""
    dtype = options_dtype(dtype)
    if mask is None or mask.dtype == torch.bool or mask.dtype == dtype:
        return mask
    check_float(mask, "attn_mask")
    return mask.to(dtype)


def _dropout_seed(dropout_p) -> int:
    """Checks dropout_p and draws the seed of attnlab's dropout mask from torch's default
    generator (so torch.manual_seed makes a training run repeatable); 0 without dropout."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"dropout_p: {dropout_p!r} is not a probability in [0, 1) "
                         "(each probability is kept with 1 - dropout_p)")
    if dropout_p == 0.0:
        return 0
    if torch.jit.is_tracing():
        raise RuntimeError(JIT_TRACE_DROPOUT)
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())


# The keyword options attention() passes to the extension as they are (attention_variants.hpp).
VARIANT_OPTIONS = ("window_size", "softcap", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k")


def _variant_options(options: dict) -> tuple:
    """attention()'s further keyword options, checked: only the variants, and no tensor that
    requires a gradient (attnlab computes none for ALiBi slopes or a softcap)."""
    unknown = sorted(set(options) - set(VARIANT_OPTIONS))
    if unknown:
        raise TypeError(f"attention() got unexpected keyword argument(s) {', '.join(unknown)} "
                        f"(its further options are {', '.join(VARIANT_OPTIONS)})")
    for name, x in options.items():
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError(f"{name}: requires a gradient, which attnlab does not compute for it; "
                                      f"pass {name}.detach() to use it as a constant")
    return tuple(sorted(options.items()))


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """torch 2.x's `torch.nn.functional.scaled_dot_product_attention`, computed by attnlab.

    query (..., Hq, L, E), key (..., H, S, E), value (..., H, S, Ev) -> (..., Hq, L, Ev).
    Leading axes broadcast; heads broadcast, or with enable_gqa=True Hq is a multiple of H
    (query head h reads key/value head h // (Hq // H)). attn_mask broadcasts to
    (..., Hq, L, S): bool attends where True, float is added to the scaled scores (and gets
    a gradient if it requires one). is_causal: row i sees keys j <= i; not with attn_mask.
    scale: default 1/sqrt(E). Differentiable in query, key, value and a float mask.
    """
    _check_inputs(query, key, value, attn_mask)
    seed = _dropout_seed(dropout_p)
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask: must be None when is_causal=True (as in torch); put the causal mask "
                         "into attn_mask, or use attnlab.torch.attention(causal=...), which takes both")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (float, numbers.Real))):
        raise TypeError(f"scale: expected None or a number, got {type(scale).__name__} "
                        "(attnlab.torch.attention takes scale policies by name)")
    ops = sdpa_operands(query, key, value, _mask_in_dtype(attn_mask, query.dtype), enable_gqa)
    options = Options(causal=bool(is_causal), scale=None if scale is None else float(scale),
                      threads=0, dropout_p=float(dropout_p), seed=seed)
    out = attend(ops.q, ops.k, ops.v, ops.mask, options)[0]
    return out.reshape(ops.out_shape)


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, *, causal: bool | str = False,
              scale: float | str | None = None, key_lengths=None, diagnostics: bool = False,
              return_lse: bool = False, check_finite: bool = True, threads: int | None = None,
              dropout_p: float = 0.0, sinks=None, **options):
    """Attention with attnlab's options, differentiable in query, key, value and a float mask.

    query [..., Hq, Nq, E], key [..., Hkv, Nk, E], value [..., Hkv, Nk, Ev], all of one rank
    (2 to 4 axes: [N, E], [H, N, E] or [B, H, N, E]); no broadcasting, and Hq may be any
    multiple of Hkv (grouped-query heads). attn_mask: bool or float, broadcasting to
    [B, Hq, Nq, Nk]. causal: False, True or "top_left" (row i sees keys j <= i), or
    "bottom_right" (j <= i + Nk - Nq); combinable with a mask. key_lengths: one length per
    batch entry (keys at or past it are padding). scale: None (1/sqrt(E)), a number, or a
    policy name ("inv_sqrt_d", "none", "inv_d", "entropy_invariant", "ssmax", "ssmax:S").
    threads: default torch.get_num_threads() (OpenMP's, clamped to 1024). check_finite=False lets NaN through.
    dropout_p: PyTorch's dropout on the probabilities, the mask from a seed drawn from torch's
    generator (torch.manual_seed repeats it) and regenerated by the backward.
    sinks: a [Hq] tensor of sink logits (gpt-oss), differentiable: its gradient is attnlab's dsinks.
    The attention variants go to attnlab.attention_forward/backward as they are:
    window_size=(left, right), softcap=c, alibi_slopes=[Hq] or [B·Hq], cu_seqlens_q=,
    cu_seqlens_k= (packed sequences, batch 1).

    Returns out; (out, lse) with return_lse=True; (out, lse, diagnostics) with
    diagnostics=True, where diagnostics is a dict of per-row max_prob, entropy and
    jacobian_fro_sq. lse and the diagnostics are [..., Hq, Nq] and carry no gradient.
    """
    _check_inputs(query, key, value, attn_mask)
    seed = _dropout_seed(dropout_p)
    rank = query.dim()
    if not 2 <= rank <= 4:
        raise ValueError(f"query: {rank} dimension(s); expected [N, E], [H, N, E] or [B, H, N, E]")
    if key.dim() != rank or value.dim() != rank:
        raise ValueError(f"key, value: ranks {key.dim()} and {value.dim()} must equal query's {rank} "
                         "(attention does not broadcast; scaled_dot_product_attention does)")
    opts = Options(causal=causal, scale=scale, key_lengths=key_lengths_array(key_lengths),
                   check_finite=bool(check_finite),
                   threads=0 if threads is None else threads,
                   dropout_p=float(dropout_p), seed=seed, extra=_variant_options(options))
    q, k, v = (pad_to_rank(x, 4) for x in (query, key, value))
    result = attend(q, k, v, _mask_in_dtype(attn_mask, query.dtype), opts, diagnostics, sinks_tensor(sinks, query))
    rows = tuple(query.shape[:-1])  # [..., Hq, Nq]
    out = result[0].reshape(*rows, value.shape[-1])
    if not (return_lse or diagnostics):
        return out
    lse = result[1].reshape(rows)
    if not diagnostics:
        return out, lse
    names = ("max_prob", "entropy", "jacobian_fro_sq")
    return out, lse, {name: t.reshape(rows) for name, t in zip(names, result[2:])}


from .kv_cache import CausalSelfAttention, KVCache  # noqa: E402  (it uses scaled_dot_product_attention above)
