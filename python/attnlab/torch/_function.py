"""attnlab's forward and backward as one torch.autograd.Function.

The forward runs attnlab.attention_forward and keeps O and the log-sum-exp L (one number
per query row) for the backward, never the N×N probabilities; the backward runs
attnlab.attention_backward on the saved q, k, v, O, L and the incoming dO. Both receive
4-D tensors [B, H, N, E] (the public functions reshape and broadcast first, with torch
operations, so that autograd sums the gradients of anything expanded) and a float mask of
at most 4 axes that broadcasts to [B, Hq, Nq, Nk].
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import _attnlab
from ._tensors import HALF_DTYPES, as_numpy, from_numpy, options_dtype

# What attnlab.torch raises where attnlab.torch cannot do what was asked (yet).
DOUBLE_BACKWARD = ("attnlab.torch: attnlab's backward is not itself differentiable, so double backward "
                   "(create_graph=True, or torch.autograd.grad of a gradient) is not supported; take the "
                   "second derivative with the plain torch formula instead")


JIT_TRACE = ("attnlab.torch: torch.jit.trace cannot record attnlab's computation (it runs outside torch's "
             "operators, so the trace would keep this call's output as a constant and return it for every "
             "input); run the module eagerly, or trace torch.nn.functional.scaled_dot_product_attention instead")


@dataclass(frozen=True)
class Options:
    """attnlab's options for one call, as attnlab.attention_forward/backward take them."""

    causal: Any = False  # False, True (top-left, PyTorch's is_causal) or "bottom_right"
    scale: Any = None  # None (1/sqrt(E)), a number, or a scale policy name
    key_lengths: Any = None  # None, or an int64 NumPy array: one length per batch entry
    check_finite: bool = True
    threads: int = 1
    # Dropout on the probabilities (PyTorch's dropout_p) and the seed of attnlab's Philox
    # mask, drawn from torch's generator by the caller: the backward regenerates the same mask.
    dropout_p: float = 0.0
    seed: int = 0
    # Further keyword options, passed to both extension calls as they are (the attention
    # variants' window_size, softcap, alibi_slopes, cu_seqlens_q/k), as (name, value) pairs.
    extra: tuple = ()

    def kwargs(self, dtype: torch.dtype = torch.float32) -> dict:
        """The keyword arguments of the extension's calls for inputs of `dtype` (bfloat16
        travels as int16 bit patterns with bfloat16=True; tensor options go as float32
        arrays for the 16-bit types, whose options attnlab takes in float32)."""
        kw = dict(causal=self.causal, scale=self.scale, key_lengths=self.key_lengths,
                  check_finite=self.check_finite, threads=self.threads,
                  **{name: as_numpy(_in_options_dtype(x)) if isinstance(x, torch.Tensor) else x
                     for name, x in self.extra})
        if dtype == torch.bfloat16:
            kw.update(bfloat16=True)
        if self.dropout_p:
            kw.update(dropout_p=self.dropout_p, seed=self.seed)
        return kw


def _nothing_to_compute(q, k, v) -> bool:
    """An empty output, or no keys at all (every row sees none: O = 0, as for a fully masked row)."""
    B, Hq, Nq, _ = q.shape
    return B == 0 or Hq == 0 or Nq == 0 or v.shape[3] == 0 or k.shape[2] == 0


def _call(fn, *args, **kwargs):
    """Calls the extension, turning pybind11's 'incompatible arguments' into an error that
    names the options this build does not have, or else the arguments' types."""
    try:
        return fn(*args, **kwargs)
    except TypeError as e:
        if "incompatible function arguments" not in str(e):
            raise
        signature = fn.__doc__.splitlines()[0]
        unknown = sorted(set(kwargs) - set(re.findall(r"(\w+): ", signature[signature.index("("):])))
        if unknown:
            raise TypeError(f"attnlab.torch: this attnlab build does not take {', '.join(unknown)}; "
                            f"it takes {signature}") from None
        types = ", ".join(f"{name}: {type(x).__name__}" for name, x in sorted(kwargs.items()))
        raise TypeError(f"attnlab.torch: an argument's type is not one {fn.__name__} takes ({types}); "
                        f"it takes {signature}") from None


def _in_options_dtype(x: torch.Tensor) -> torch.Tensor:
    """A tensor option (sinks, ALiBi slopes) as attnlab takes it: 16-bit ones in float32."""
    return x.detach().float() if x.dtype in HALF_DTYPES else x


def _sink_kwargs(sinks) -> dict:
    return {} if sinks is None else {"sinks": as_numpy(_in_options_dtype(sinks))}


def forward(q, k, v, mask, sinks, options: Options, diagnostics: bool):
    """(out [B, Hq, Nq, dv], lse [B, Hq, Nq], diagnostics dict or None), all torch tensors.
    sinks: None, or a [Hq] tensor of sink logits (one more logit per row, no value row)."""
    if _nothing_to_compute(q, k, v):
        # Every row sees no key: O = 0, L = −inf (or the sink, which then takes all the
        # mass), and the diagnostics of a fully masked row, 0 (attnlab's RowDiagnostics).
        B, Hq, Nq, _ = q.shape
        rows = options_dtype(q.dtype)
        out = q.new_zeros((B, Hq, Nq, v.shape[3]))
        if sinks is None:
            lse = q.new_full((B, Hq, Nq), -math.inf, dtype=rows)
        else:
            lse = sinks.detach().to(rows).reshape(1, Hq, 1).expand(B, Hq, Nq).clone()
        diag = {name: q.new_zeros((B, Hq, Nq), dtype=rows)
                for name in ("max_prob", "entropy", "jacobian_fro_sq")} if diagnostics else None
        return out, lse, diag
    r = _call(_attnlab.attention_forward, as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(mask),
              diagnostics=diagnostics, **_sink_kwargs(sinks), **options.kwargs(q.dtype))
    out, lse = from_numpy(r[0], q.dtype), torch.from_numpy(r[1])
    diag = {name: torch.from_numpy(a) for name, a in r[2].items()} if diagnostics else None
    return out, lse, diag


class AttentionFunction(torch.autograd.Function):
    """apply(q, k, v, mask, sinks, options, diagnostics) -> (out, lse[, max_prob, entropy, jacobian_fro_sq]).

    Differentiable in q, k, v, a float mask and the sinks; lse and the diagnostics are not."""

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
        if need_q or need_k or need_v or need_sinks:
            if _nothing_to_compute(q, k, v):
                dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
                if sinks is not None:  # a row of nothing but its sink: P(sink) = 1 whatever it is
                    dsinks = torch.zeros_like(sinks)
            else:
                r = _call(_attnlab.attention_backward, as_numpy(q), as_numpy(k), as_numpy(v), as_numpy(out),
                          as_numpy(lse), as_numpy(grad_out), as_numpy(mask), **_sink_kwargs(sinks),
                          **ctx.options.kwargs(q.dtype))
                dq, dk, dv = (from_numpy(g, q.dtype) for g in r[:3])
                if sinks is not None:
                    dsinks = torch.from_numpy(np.asarray(r[3])).to(sinks.dtype)
        if need_mask:
            dmask = additive_mask_gradient(q, k, v, mask, out, lse, grad_out, ctx.options, sinks)
        return (dq if need_q else None, dk if need_k else None, dv if need_v else None, dmask,
                dsinks if need_sinks else None, None, None)


def attend(q, k, v, mask, options: Options, diagnostics: bool = False, sinks=None):
    """Attention on 4-D tensors, through the autograd Function when a gradient may be wanted."""
    wants_grad = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, mask, sinks))
    if not wants_grad:  # no_grad, inference_mode, or nothing requires grad: nothing to save
        out, lse, diag = forward(q, k, v, mask, sinks, options, diagnostics)
        return (out, lse, *(diag.values() if diag else ()))
    return AttentionFunction.apply(q, k, v, mask, sinks, options, diagnostics)


# ---- the gradient of a float mask -------------------------------------------------------

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
