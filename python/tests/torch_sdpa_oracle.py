"""The explicit-formula oracle of the attnlab.torch tests: torch 2.5's math backend of
scaled_dot_product_attention written out (torch 1.13 has none), and the comparison of
attnlab.torch's forward and gradients with it.

Tolerances are torch_reference.py's, relative to the largest element of the compared
tensor: float64 runs attnlab's reference (1e-9: the same sums in another order), float32
runs the engine and is compared with the oracle in float64 on the same float32 inputs
(2e-4: float32 rounding amplified by the sums over d, keys and queries). Imported after
the test module's importorskip of torch."""

import math

import numpy as np
import torch

import attnlab.torch as at
import torch_reference as ref

DTYPES = [torch.float32, torch.float64]
NP = {torch.float32: np.float32, torch.float64: np.float64}


def oracle_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """torch 2.5's math backend in float64 with autograd: the explicit formula, grouped
    heads by repeat_interleave, and its _safe_softmax (a row that sees no key gives 0)."""
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    L, S = q.size(-2), k.size(-2)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)) if scale is None else scale)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask
    dead = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return p @ v


def leaf(x, dtype, requires_grad=True):
    return x.to(dtype).detach().requires_grad_(requires_grad)


def assert_close(ours, want, dtype, what):
    assert ours.dtype == dtype, f"{what}: dtype {ours.dtype}"
    assert tuple(ours.shape) == tuple(want.shape), f"{what}: shape {tuple(ours.shape)} vs {tuple(want.shape)}"
    ref.assert_close(ours.detach().double().numpy(), want.detach().double().numpy(), NP[dtype], what)


def compare_with_oracle(inputs, kwargs, dtype, case, seed=0):
    """Forward and every gradient of attnlab.torch against the oracle on the same inputs."""
    names = [n for n, x in inputs.items() if x is not None and x.requires_grad]
    ours = at.scaled_dot_product_attention(**inputs, **kwargs)
    wide = {n: None if x is None else (x.detach().double().requires_grad_(x.requires_grad) if x.is_floating_point()
                                       else x) for n, x in inputs.items()}
    want = oracle_sdpa(wide["query"], wide["key"], wide["value"], wide.get("attn_mask"), **kwargs)
    assert_close(ours, want, dtype, f"{case} out")
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    g_ours = torch.autograd.grad(ours, [inputs[n] for n in names], grad.to(dtype))
    g_want = torch.autograd.grad(want, [wide[n] for n in names], grad)
    for n, a, b in zip(names, g_ours, g_want):
        assert_close(a, b, dtype, f"{case} d{n}")
