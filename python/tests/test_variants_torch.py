"""The variants (window_size, softcap, alibi_slopes, sinks, cu_seqlens, dropout) against
PyTorch: the same definitions written out in torch in float64, gradients by torch's
autograd (dsinks included), over random problems that combine them with GQA, masks,
both causal alignments and padding; float64 runs attnlab's reference, float32 its
engine (tolerances: torch_reference.py). Dropout is compared with attnlab's returned
mask held fixed in torch: the backward must be the gradient of that forward."""

import re

import numpy as np
import pytest

import attnlab

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import torch  # noqa: E402
import torch_reference as ref  # noqa: E402

DTYPES = [np.float32, np.float64]


def frames(nq, nk, batch, key_lengths, cu_q, cu_k):
    """Per (b, i): (key0, n_keys, i_local, n_q) of the row's sequence (attention_variants.hpp)."""
    out = np.zeros((batch, nq, 4), dtype=np.int64)
    for b in range(batch):
        for i in range(nq):
            if cu_q is None:
                out[b, i] = (0, nk if key_lengths is None else key_lengths[b], i, nq)
            else:
                s = np.searchsorted(cu_q, i, side="right") - 1
                out[b, i] = (cu_k[s], cu_k[s + 1] - cu_k[s], i - cu_q[s], cu_q[s + 1] - cu_q[s])
    return out


def torch_attention(p, grad_out, dropout_mask=None):
    """The definition in torch, float64; returns out, lse and the gradients (dsinks with sinks)."""
    q, k, v = (torch.from_numpy(p[n].astype(np.float64)).requires_grad_(True) for n in ("q", "k", "v"))
    B, Hq, Nq, d = q.shape
    Nk = k.shape[2]
    kk, vv = ref.expand_heads(k, Hq), ref.expand_heads(v, Hq)
    scale = 1 / np.sqrt(d) if p["scale"] is None else p["scale"]
    s = q @ kk.transpose(-1, -2) * scale
    if p["softcap"] is not None:
        s = p["softcap"] * torch.tanh(s / p["softcap"])
    f = frames(Nq, Nk, B, p["key_lengths"], p["cu_q"], p["cu_k"])
    key0, nkeys, iloc, nq = (torch.from_numpy(f[..., c])[:, None, :, None] for c in range(4))
    j = torch.arange(Nk)[None, None, None, :]
    jl = j - key0
    diag = iloc + nkeys - nq  # within the sequence
    if p["alibi"] is not None:
        slopes = torch.from_numpy(np.asarray(p["alibi"], dtype=np.float64))
        n_seq = 1 if p["cu_q"] is None else len(p["cu_q"]) - 1
        if slopes.ndim == 1:
            slope = slopes[None, :, None, None]
        elif p["cu_q"] is None:
            slope = slopes[:, :, None, None]
        else:  # per packed sequence: the row's sequence picks the row of slopes
            seq = torch.from_numpy(np.array([[np.searchsorted(p["cu_q"], i, side="right") - 1 for i in range(Nq)]]))
            slope = slopes[seq].permute(0, 2, 1)[..., None]
            assert slopes.shape[0] == n_seq
        s = s - slope * (diag - jl).abs()
    if p["mask"] is not None and p["mask"].dtype != np.bool_:
        s = s + torch.from_numpy(np.asarray(p["mask"], dtype=np.float64))
    vis = (jl >= 0) & (jl < nkeys)
    if p["causal"] == "top_left":
        vis = vis & (jl <= iloc)
    if p["causal"] == "bottom_right":
        vis = vis & (jl <= diag)
    left, right = p["window"] if p["window"] is not None else (-1, -1)
    if left >= 0:
        vis = vis & (jl >= diag - left)
    if right >= 0:
        vis = vis & (jl <= diag + right)
    if p["mask"] is not None and p["mask"].dtype == np.bool_:
        vis = vis & torch.from_numpy(np.broadcast_to(p["mask"], (B, Hq, Nq, Nk)).copy())
    s = s.masked_fill(~vis.expand(B, Hq, Nq, Nk), -np.inf)
    sinks = None
    if p["sinks"] is not None:
        sinks = torch.from_numpy(np.asarray(p["sinks"], dtype=np.float64)).requires_grad_(True)
        s = torch.cat([s, sinks[None, :, None, None].expand(B, Hq, Nq, 1)], dim=-1)
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)
    s = s.masked_fill(dead, 0.0)
    prob = torch.softmax(s, dim=-1).masked_fill(dead, 0.0)
    lse = torch.logsumexp(s, dim=-1).masked_fill(dead[..., 0], -np.inf)
    prob = prob[..., :Nk]  # the sink has no value row
    if dropout_mask is not None:
        prob = prob * torch.from_numpy(dropout_mask.astype(np.float64)) / (1 - p["dropout_p"])
    out = prob @ vv
    out.backward(torch.from_numpy(grad_out.astype(np.float64)))
    r = dict(out=out.detach().numpy(), lse=lse.detach().numpy(), dq=q.grad.numpy(), dk=k.grad.numpy(),
             dv=v.grad.numpy())
    if sinks is not None:
        r["dsinks"] = sinks.grad.numpy()
    return r


def random_problem(rng, dtype):
    packed = rng.random() < 0.35
    B = 1 if packed else int(rng.integers(1, 3))
    Hkv, group = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    Hq = Hkv * group
    Nq, Nk = int(rng.integers(1, 12)), int(rng.integers(1, 12))
    d, dv = int(rng.choice([1, 4, 8])), int(rng.choice([1, 3, 8]))
    p = dict(q=rng.standard_normal((B, Hq, Nq, d)).astype(dtype), k=rng.standard_normal((B, Hkv, Nk, d)).astype(dtype),
             v=rng.standard_normal((B, Hkv, Nk, dv)).astype(dtype), mask=None, key_lengths=None, cu_q=None, cu_k=None,
             causal=str(rng.choice(["none", "top_left", "bottom_right"])),
             scale=None if rng.random() < 0.6 else float(rng.uniform(0.2, 1.0)), window=None, softcap=None,
             alibi=None, sinks=None, dropout_p=0.0)
    if rng.random() < 0.3:
        p["mask"] = rng.random((B, 1, Nq, Nk)) < 0.8 if rng.random() < 0.5 else rng.standard_normal((Nq, Nk)).astype(dtype)
    if packed:
        n = int(rng.integers(1, 4))
        p["cu_q"] = np.concatenate([[0], np.sort(rng.integers(0, Nq + 1, n - 1)), [Nq]]).astype(np.int64)
        p["cu_k"] = np.concatenate([[0], np.sort(rng.integers(0, Nk + 1, n - 1)), [Nk]]).astype(np.int64)
    elif rng.random() < 0.3:
        p["key_lengths"] = rng.integers(0, Nk + 1, size=B)
    if rng.random() < 0.5:
        p["window"] = (int(rng.integers(-1, 6)), int(rng.integers(-1, 6)))
    if rng.random() < 0.4:
        p["softcap"] = float(rng.uniform(0.5, 10.0))
    if rng.random() < 0.4:
        n_seq = B if not packed else len(p["cu_q"]) - 1
        p["alibi"] = rng.uniform(0, 0.6, size=Hq if rng.random() < 0.5 else (n_seq, Hq))
    if rng.random() < 0.4:
        p["sinks"] = rng.normal(0, 1.5, size=Hq)
    if rng.random() < 0.3:
        p["dropout_p"] = float(rng.uniform(0.1, 0.6))
    grad_out = rng.standard_normal((B, Hq, Nq, dv)).astype(dtype)
    return p, grad_out


def kwargs(p, seed):
    return dict(causal=p["causal"], scale=p["scale"], key_lengths=p["key_lengths"], window_size=p["window"],
                softcap=p["softcap"], alibi_slopes=p["alibi"], sinks=p["sinks"], cu_seqlens_q=p["cu_q"],
                cu_seqlens_k=p["cu_k"], dropout_p=p["dropout_p"], seed=seed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(60))
def test_variants_match_torch(seed, dtype):
    rng = np.random.default_rng(1000 + seed)
    p, grad_out = random_problem(rng, dtype)
    kw = kwargs(p, seed=seed)
    out, lse, mask = attnlab.attention_forward(p["q"], p["k"], p["v"], p["mask"], return_dropout_mask=True, **kw)
    assert mask.dtype == np.bool_ and mask.shape == p["q"].shape[:3] + (p["k"].shape[2],)
    grads = attnlab.attention_backward(p["q"], p["k"], p["v"], out, lse, grad_out, p["mask"], **kw)
    assert len(grads) == (4 if p["sinks"] is not None else 3)
    want = torch_attention(p, grad_out, mask if p["dropout_p"] else None)
    case = f"seed {seed} {dtype.__name__}: " + ", ".join(f"{k}={v}" for k, v in kw.items() if v is not None)
    ref.assert_close(out, want["out"], dtype, f"{case} out")
    ref.assert_close(lse, want["lse"], dtype, f"{case} lse")
    for name, g in zip(("dq", "dk", "dv", "dsinks"), grads):
        ref.assert_close(g, want[name], dtype, f"{case} {name}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_mask_is_the_same_for_any_thread_count_and_in_both_precisions(rng, dtype):
    q, k, v = (rng.standard_normal((2, 4, 300, 16)).astype(dtype) for _ in range(3))
    kw = dict(dropout_p=0.3, seed=42, causal=True, return_dropout_mask=True)
    outs = [attnlab.attention_forward(q, k, v, threads=t, **kw) for t in (1, 2, 3)]
    for o in outs[1:]:
        assert np.array_equal(o[0], outs[0][0]) and np.array_equal(o[2], outs[0][2])
    other_dtype = np.float64 if dtype == np.float32 else np.float32
    other = attnlab.attention_forward(q.astype(other_dtype), k.astype(other_dtype), v.astype(other_dtype), **kw)
    assert np.array_equal(np.asarray(other[2]), outs[0][2])  # Philox: the same bits in engine and reference
    visible = np.tril(np.ones((300, 300), dtype=bool))
    rate = outs[0][2][:, :, visible].mean()
    n = 2 * 4 * visible.sum()
    assert abs(rate - 0.7) < 4 * np.sqrt(0.3 * 0.7 / n)


def test_sdpa_dropout_matches_pytorchs_semantics(rng):
    # scaled_dot_product_attention(dropout_p=...) with a seed: the output is the softmax with
    # the returned mask applied and the kept probabilities scaled by 1/(1 - p).
    q, k, v = (rng.standard_normal((1, 2, 40, 8)) for _ in range(3))
    out = attnlab.scaled_dot_product_attention(q, k, v, dropout_p=0.25, seed=5)
    _, _, mask = attnlab.attention_forward(q, k, v, dropout_p=0.25, seed=5, return_dropout_mask=True)
    p = torch.softmax(torch.from_numpy(q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)), dim=-1).numpy()
    ref.assert_close(out, (p * mask / 0.75) @ v, np.float64, "sdpa dropout")
    np.random.seed(3)
    a = attnlab.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
    np.random.seed(3)
    b = attnlab.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
    assert np.array_equal(a, b)  # seeded by NumPy's global generator when no seed is given


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(window_size=(-2, 0)), "window: (-2, 0) has a side below -1"),
        (dict(softcap=0.0), "softcap: 0 must be a positive finite number"),
        (dict(softcap=float("nan")), "softcap: nan must be a positive finite number"),
        (dict(alibi_slopes=[0.5, 0.25, 0.125]), "alibi_slopes: 3 values; expected Hq = 2"),
        (dict(alibi_slopes=np.ones((2, 1))), "alibi_slopes: shape (2, 1) should be (Hq,) = (2,) or (n_seq, Hq) = (1, 2)"),
        (dict(sinks=[0.5]), "sinks: 1 value; expected one per query head (Hq = 2)"),
        (dict(cu_seqlens_q=[0, 3, 2, 4], cu_seqlens_k=[0, 1, 2, 4]), "cu_seqlens_q: decreases from 3 to 2"),
        (dict(cu_seqlens_q=[0, 2, 4], cu_seqlens_k=[0, 2, 3]), "cu_seqlens_k: ends at 3, but total_k"),
        (dict(cu_seqlens_q=[0, 2, 4]), "cu_seqlens_k: missing"),
        (dict(dropout_p=1.0), "dropout_p: 1 is outside [0, 1)"),
        (dict(dropout_p=-0.5), "dropout_p: -0.5 is outside [0, 1)"),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bad_variant_options_are_value_errors(kw, message, dtype):
    q = np.zeros((1, 2, 4, 8), dtype=dtype)
    with pytest.raises(ValueError, match=re.escape(message)):
        attnlab.attention_forward(q, q, q, **kw)


def test_window_size_must_be_two_ints():
    q = np.zeros((1, 1, 4, 8), dtype=np.float32)
    with pytest.raises(TypeError, match="window_size"):
        attnlab.attention_forward(q, q, q, window_size=3)
    with pytest.raises(TypeError, match="window_size"):
        attnlab.attention_forward(q, q, q, window_size=(1.5, 0))
