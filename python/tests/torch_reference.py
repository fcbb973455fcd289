"""The oracle for the PyTorch comparisons: the explicit formula

    out = softmax(q @ k^T * scale + mask) @ v

in float64 with torch autograd for the gradients (torch 1.13 has no
F.scaled_dot_product_attention). Grouped-query heads are expanded with
repeat_interleave, as torch 2.5's enable_gqa does.

Fully masked rows: the plain formula gives NaN there (softmax of all -inf).
`attention` neutralises such rows (their scores are replaced by 0 before the
softmax and their probabilities by 0 after), which changes no other row and keeps
NaN out of the gradients of the shared k and v; `plain_attention` is the formula
untouched, to show the NaN.
"""

import numpy as np
import torch


def visible(nq, nk, batch, heads, mask=None, causal="none", key_lengths=None):
    """Boolean [B, H, Nq, Nk]: which keys each row may see (bool masks, causality, padding)."""
    vis = torch.ones(batch, heads, nq, nk, dtype=torch.bool)
    if mask is not None and mask.dtype == np.bool_:
        vis = vis & torch.from_numpy(np.broadcast_to(mask, (batch, heads, nq, nk)).copy())
    if causal in (True, "top_left"):
        vis = vis & torch.ones(nq, nk, dtype=torch.bool).tril()
    if key_lengths is not None:
        for b, n in enumerate(key_lengths):
            row_vis = torch.arange(nk) < n
            if causal == "bottom_right":
                row_vis = row_vis[None, :] & torch.ones(nq, nk, dtype=torch.bool).tril(int(n) - nq)
            vis[b] &= row_vis
    elif causal == "bottom_right":
        vis = vis & torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq)
    return vis


def _scores(q, k, mask, causal, scale, key_lengths):
    B, H, Nq, d = q.shape
    Nk = k.shape[2]
    s = q @ k.transpose(-1, -2) * (1.0 / np.sqrt(d) if scale is None else scale)
    if mask is not None and mask.dtype != np.bool_:
        s = s + torch.from_numpy(np.asarray(mask, dtype=np.float64))
    vis = visible(Nq, Nk, B, H, mask, causal, key_lengths)
    s = s.masked_fill(~vis, -np.inf)
    return s


def to4(x):
    x = np.asarray(x)
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def expand_heads(k, hq):
    return k.repeat_interleave(hq // k.shape[1], dim=1)


def plain_attention(q, k, v, mask=None, causal="none", scale=None, key_lengths=None):
    """The formula as is (NaN for fully masked rows). numpy in, numpy float64 out."""
    q, k, v = (torch.from_numpy(to4(x).astype(np.float64)) for x in (q, k, v))
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])
    p = torch.softmax(_scores(q, k, mask, causal, scale, key_lengths), dim=-1)
    return (p @ v).numpy()


def attention(q, k, v, mask=None, causal="none", scale=None, key_lengths=None, grad_out=None):
    """Returns dict(out, lse, p, dead[, dq, dk, dv]) as float64 numpy arrays, 4-D."""
    qt, kt, vt = (torch.from_numpy(to4(x).astype(np.float64)).requires_grad_(True) for x in (q, k, v))
    hq = qt.shape[1]
    s = _scores(qt, expand_heads(kt, hq), mask, causal, scale, key_lengths)
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)  # [B, H, Nq, 1] fully masked rows
    s = s.masked_fill(dead, 0.0)
    p = torch.softmax(s, dim=-1).masked_fill(dead, 0.0)
    out = p @ expand_heads(vt, hq)
    lse = torch.logsumexp(s, dim=-1).masked_fill(dead[..., 0], -np.inf)
    r = {"out": out.detach().numpy(), "lse": lse.detach().numpy(), "p": p.detach().numpy(),
         "dead": dead[..., 0].numpy()}
    if grad_out is not None:
        out.backward(torch.from_numpy(to4(grad_out).astype(np.float64)))
        r.update(dq=qt.grad.numpy(), dk=kt.grad.numpy(), dv=vt.grad.numpy())
    return r


# Tolerances. float64 calls run attnlab's double reference: it and torch compute the same
# sums in different orders, so they agree to ~1e-15 relative per operation; 1e-9 leaves
# room for the condition number of softmax at large logits (|s| up to ~1e3 here) while
# still catching any real error. float32 calls run the float32 engine on the same inputs
# (rounded to float32 before both computations): its unit roundoff is 6e-8, and a score
# sum over d terms, the exp of scores up to ~50 and sums over up to ~20 keys and
# queries in the backward amplify that to at most a few 1e-5 of the tensor's largest
# element; 2e-4 of it is the bound we hold the engine to.
TOLERANCE = {np.float64: 1e-9, np.float32: 2e-4}


def assert_close(ours, ref, dtype, what=""):
    tol = TOLERANCE[np.dtype(dtype).type]
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    # -inf (the lse of a fully masked row) must sit at the same places; the rest is compared.
    assert np.array_equal(np.isneginf(ours), np.isneginf(ref)), f"{what}: -inf at different places"
    ours, ref = ours[~np.isneginf(ref)], ref[~np.isneginf(ref)]
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    err = np.max(np.abs(ours - ref)) if ref.size else 0.0
    assert err <= tol * scale, f"{what}: max |ours - torch| = {err:.3e} > {tol:.0e} * {scale:.3g}"
