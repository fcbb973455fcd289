"""attnlab's forward and backward for attnlab.torch's functions, over the registered operators.

`attend` calls torch.ops.attnlab.attention (_ops.py; its Autograd kernel keeps O and the
log-sum-exp L, one number per query row, never the N×N probabilities, and runs
attention_backward on them), so that autograd, torch.jit.script and torch.jit.trace see
one operator. A float mask that requires a gradient goes instead through
`AttentionFunction` below, which calls the same forward and backward operators and adds the
mask's gradient (computed with torch, from the saved L). Both receive 4-D tensors
[B, H, N, E] (the public functions reshape and broadcast first, with torch operations, so
that autograd sums the gradients of anything expanded) and a float mask of at most 4 axes
that broadcasts to [B, Hq, Nq, Nk].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import _ops
from ._tensors import HALF_DTYPES, options_dtype

# What the ring raises under torch.jit.trace (it has no registered operator: its exchange
# between processes would be invisible to the tracer).
JIT_TRACE = ("attnlab.torch: torch.jit.trace cannot record attnlab's ring attention (it runs outside torch's "
             "operators, so the trace would keep this call's output as a constant and return it for every "
             "input); run it eagerly")

# The seed of dropout is drawn in Python, so a trace would keep it: every call the same mask.
JIT_TRACE_DROPOUT = ("attnlab.torch: under torch.jit.trace, dropout_p > 0 would keep this call's seed as a "
                     "constant (the same dropout mask on every call); trace the model in eval mode without dropout")

# What attnlab.torch raises where attnlab.torch cannot do what was asked (yet).
DOUBLE_BACKWARD = ("attnlab.torch: attnlab's backward is not itself differentiable, so double backward "
                   "(create_graph=True, or torch.autograd.grad of a gradient) is not supported; take the "
                   "second derivative with the plain torch formula instead")


@dataclass(frozen=True)
class Options:
    """attnlab's options for one call, as attnlab.torch.attention takes them."""

    causal: Any = False  # False, True (top-left, PyTorch's is_causal) or "bottom_right"
    scale: Any = None  # None (1/sqrt(E)), a number, or a scale policy name
    key_lengths: Any = None  # None, or an int64 NumPy array: one length per batch entry
    check_finite: bool = True
    threads: int = 1
    # Dropout on the probabilities (PyTorch's dropout_p) and the seed of attnlab's Philox
    # mask, drawn from torch's generator by the caller: the backward regenerates the same mask.
    dropout_p: float = 0.0
    seed: int = 0
    # Further keyword options (the attention variants' window_size, softcap, alibi_slopes,
    # cu_seqlens_q/k), as (name, value) pairs.
    extra: tuple = ()

    def op_args(self, mask, sinks, dtype: torch.dtype) -> tuple:
        """The operators' options in schema order (attention_ops.cpp): mask, sinks, causal,
        scale, key_lengths, check_finite, threads, dropout_p, seed, window_size, softcap,
        alibi_slopes, cu_seqlens_q, cu_seqlens_k. Tensor options of the 16-bit types in float32."""
        extra = dict(self.extra)
        window = extra.get("window_size")
        if window is not None:
            if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
                raise TypeError("window_size: expected (left, right), two ints (-1 = unbounded on that side), or None")
            window = [_integer(w, "window_size") for w in window]
        softcap = extra.get("softcap")
        if isinstance(softcap, torch.Tensor) and softcap.numel() == 1:
            softcap = softcap.item()
        if softcap is not None:
            if isinstance(softcap, bool) or not isinstance(softcap, (int, float, np.floating, np.integer)):
                raise TypeError(f"softcap: expected a positive number or None, got {type(softcap).__name__}")
            softcap = float(softcap)
        lengths = None if self.key_lengths is None else _int_tensor(self.key_lengths, "key_lengths")
        return (mask, sinks, _ops.causal_name(self.causal), _ops.scale_name(self.scale), lengths,
                bool(self.check_finite), _integer(self.threads, "threads"), float(self.dropout_p), int(self.seed), window, softcap,
                _float_tensor(extra.get("alibi_slopes"), dtype, "alibi_slopes"),
                _int_tensor(extra.get("cu_seqlens_q"), "cu_seqlens_q"),
                _int_tensor(extra.get("cu_seqlens_k"), "cu_seqlens_k"))


def _integer(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name}: {x!r} is not an integer")
    return int(x)


def _int_tensor(x, name: str) -> torch.Tensor | None:
    if x is None:
        return None
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name}: dtype {t.dtype} is not an integer type")
    return t


def _float_tensor(x, dtype: torch.dtype, name: str) -> torch.Tensor | None:
    """A tensor option (ALiBi slopes) as the operators take it: the options' dtype."""
    if x is None:
        return None
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name}: dtype {t.dtype} is not a number type")
    return t.to(options_dtype(dtype))


def forward(q, k, v, mask, sinks, options: Options, diagnostics: bool):
    """(out [B, Hq, Nq, dv], lse [B, Hq, Nq], diagnostics dict or None), all torch tensors,
    by torch.ops.attnlab.attention_forward (no autograd)."""
    r = torch.ops.attnlab.attention_forward(q.detach(), k.detach(), v.detach(),
                                            *options.op_args(_detached(mask), _detached(sinks), q.dtype), diagnostics)
    diag = dict(zip(("max_prob", "entropy", "jacobian_fro_sq"), r[2:])) if diagnostics else None
    return r[0], r[1], diag


def _detached(x):
    return None if x is None else x.detach()


class AttentionFunction(torch.autograd.Function):
    """apply(q, k, v, mask, sinks, options, diagnostics) -> (out, lse[, max_prob, entropy, jacobian_fro_sq]).

    The path of a float mask that requires a gradient (the registered operator computes
    none for it): differentiable in q, k, v, the mask and the sinks; lse and the diagnostics are not."""

    @staticmethod
    def forward(ctx, q, k, v, mask, sinks, options, diagnostics):
        out, lse, diag = forward(q, k, v, mask, sinks, options, diagnostics)
        ctx.options = options
        ctx.save_for_backward(q, k, v, mask, sinks, out, lse)
        extras = tuple(diag.values()) if diag else ()
        ctx.mark_non_differentiable(lse, *extras)
        return (out, lse, *extras)

    @staticmethod
    def backward(ctx, grad_out, *_):
        if torch.is_grad_enabled():  # backward(create_graph=True): a graph of this backward is wanted
            raise NotImplementedError(DOUBLE_BACKWARD)
        q, k, v, mask, sinks, out, lse = ctx.saved_tensors
        need_q, need_k, need_v, need_mask, need_sinks = ctx.needs_input_grad[:5]
        dq = dk = dv = dmask = dsinks = None
        if need_mask:  # first: it says what it does not support before anything is computed
            dmask = additive_mask_gradient(q, k, v, mask, out, lse, grad_out, ctx.options, sinks)
        if need_q or need_k or need_v or need_sinks:
            dq, dk, dv, ds = torch.ops.attnlab.attention_backward(
                q, k, v, out, lse, grad_out, *ctx.options.op_args(mask.detach(), sinks, q.dtype))
            if sinks is not None:
                dsinks = ds.to(sinks.dtype)
        return (dq if need_q else None, dk if need_k else None, dv if need_v else None, dmask,
                dsinks if need_sinks else None, None, None)


def attend(q, k, v, mask, options: Options, diagnostics: bool = False, sinks=None):
    """Attention on 4-D tensors: the registered operator, differentiable through its own
    backward, or AttentionFunction when a float mask needs a gradient."""
    if mask is not None and mask.requires_grad and torch.is_grad_enabled():
        return AttentionFunction.apply(q, k, v, mask, sinks, options, diagnostics)
    r = torch.ops.attnlab.attention(q, k, v, *options.op_args(mask, sinks, q.dtype), diagnostics)
    return tuple(r) if diagnostics else (r[0], r[1])


# ---- the gradient of a float mask -------------------------------------------------------

def _nothing_to_compute(q, k, v) -> bool:
    """An empty output, or no keys at all (every row sees none: O = 0, as for a fully masked row)."""
    B, Hq, Nq, _ = q.shape
    return B == 0 or Hq == 0 or Nq == 0 or v.shape[3] == 0 or k.shape[2] == 0


def _constant_scale(scale, d: int) -> float:
    """The scale as one number, for the policies whose scale is the same for every row."""
    if scale is None or scale in ("inv_sqrt_d", "default"):  # the library's names of 1/sqrt(d)
        return 1.0 / math.sqrt(d)
    if isinstance(scale, str):
        if scale == "none":
            return 1.0
        if scale == "inv_d":
            return 1.0 / d
        try:
            return float(scale)
        except ValueError:
            raise NotImplementedError(
                f"attn_mask: its gradient is not supported with scale policy '{scale}', whose scale "
                "differs from row to row; detach the mask, or use a fixed scale") from None
    return float(scale)


def _visible(b: int, Nq: int, Nk: int, options: Options) -> torch.Tensor | None:
    """[Nq, Nk] bool: the keys causality and key padding leave to each row of batch b
    (attnlab's rule, src/core/visibility.hpp: the prefix j < key_end(b, i)), or None for all."""
    lengths = options.key_lengths
    if options.causal in (False, None, "none") and lengths is None:
        return None
    n_keys = Nk if lengths is None else int(lengths[b])
    end = torch.full((Nq,), n_keys, dtype=torch.int64)
    rows = torch.arange(Nq)
    if options.causal in (True, "top_left"):
        end = torch.minimum(end, rows + 1)
    elif options.causal == "bottom_right":
        end = torch.minimum(end, rows + (n_keys - Nq) + 1)
    return torch.arange(Nk)[None, :] < end[:, None]


def additive_mask_gradient(q, k, v, mask, out, lse, grad_out, options: Options, sinks=None) -> torch.Tensor:
    """dL/dmask for a float mask added to the scaled scores: the score gradient
    dS = P ∘ (dP − D), with P = exp(scale·QKᵀ + mask − L), dP = dO Vᵀ, D = rowsum(dO ∘ O),
    summed over the axes along which the mask broadcasts. This is what torch's autograd
    gives for the explicit formula. It needs the N×N matrices that attnlab's own backward
    never forms, so it is computed here, with torch, one batch entry at a time (memory
    Hq·Nq·Nk), from the L that attnlab's forward kept."""
    unsupported = [name for name, _ in options.extra] + ["sinks"] * (sinks is not None) + \
        ["dropout_p"] * (options.dropout_p != 0)
    if unsupported:
        raise NotImplementedError("attn_mask: its gradient is not supported together with "
                                  f"{', '.join(unsupported)}; detach the mask")
    if q.dtype in HALF_DTYPES:  # in float32, the mask's dtype (and torch 1.13 has no float16 matmul on CPU)
        q, k, v, out, grad_out = (x.float() for x in (q, k, v, out, grad_out))
    B, Hq, Nq, d = q.shape
    Hkv, Nk, dv = k.shape[1], k.shape[2], v.shape[3]
    group = Hq // Hkv
    scale = _constant_scale(options.scale, d)
    mask4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    grad = torch.zeros(mask4.shape, dtype=q.dtype)
    if _nothing_to_compute(q, k, v):
        return grad.reshape(mask.shape)
    # Axes (of [H, Nq, Nk], per batch entry) along which the mask broadcasts.
    summed = [a - 1 for a in (1, 2, 3) if mask4.shape[a] == 1 and (Hq, Nq, Nk)[a - 1] > 1]
    D = (grad_out * out).sum(-1, keepdim=True)  # [B, Hq, Nq, 1]
    for b in range(B):
        # Query heads grouped by the key/value head they read: [Hkv, group, Nq, ·].
        qb = q[b].reshape(Hkv, group, Nq, d)
        kb, vb = k[b].unsqueeze(1), v[b].unsqueeze(1)
        scores = (qb @ kb.transpose(-1, -2)).reshape(Hq, Nq, Nk) * scale + mask4[b if mask4.shape[0] > 1 else 0]
        p = torch.exp(scores - lse[b].unsqueeze(-1))
        visible = _visible(b, Nq, Nk, options)
        if visible is not None:
            p = p.masked_fill(~visible, 0.0)
        p = p.masked_fill(torch.isneginf(lse[b]).unsqueeze(-1), 0.0)  # rows that see no key: exp(nan)
        dp = (grad_out[b].reshape(Hkv, group, Nq, dv) @ vb.transpose(-1, -2)).reshape(Hq, Nq, Nk)
        ds = p * (dp - D[b])
        if summed:
            ds = ds.sum(dim=summed, keepdim=True)
        if mask4.shape[0] > 1:
            grad[b] = ds
        else:
            grad[0] += ds
    return grad.reshape(mask.shape)


def key_lengths_array(key_lengths) -> np.ndarray | None:
    """key_lengths as the extension takes them: a tensor, list or array of integers."""
    if key_lengths is None:
        return None
    if isinstance(key_lengths, torch.Tensor):
        key_lengths = key_lengths.detach().cpu().resolve_neg().numpy()
    return np.asarray(key_lengths)
