"""attnlab's attention against PyTorch's explicit formula (see torch_reference.py for
the oracle and the tolerances)."""

import numpy as np
import pytest

import attnlab

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import torch_reference as ref  # noqa: E402  (imports torch)

DTYPES = [np.float32, np.float64]


def random_problem(rng, dtype):
    """A random attention problem: GQA, Nq != Nk, dv != d, masks of every kind and shape."""
    B, Hkv, group = rng.integers(1, 3), rng.integers(1, 3), rng.integers(1, 4)
    Hq = Hkv * group
    Nq, Nk = rng.integers(1, 10), rng.integers(1, 10)
    d, dv = rng.choice([1, 4, 8, 16]), rng.choice([1, 3, 8])
    q = rng.standard_normal((B, Hq, Nq, d)).astype(dtype)
    k = rng.standard_normal((B, Hkv, Nk, d)).astype(dtype)
    v = rng.standard_normal((B, Hkv, Nk, dv)).astype(dtype)
    shapes = [(Nq, Nk), (B, 1, Nq, Nk), (1, Hq, Nq, Nk), (B, Hq, Nq, Nk), (B, 1, 1, Nk)]
    shape = shapes[rng.integers(len(shapes))]
    kind = rng.choice(["none", "bool", "float", "float_inf"])
    mask = None
    if kind == "bool":
        mask = rng.random(shape) < 0.8
    elif kind == "float":
        mask = rng.standard_normal(shape).astype(dtype)
    elif kind == "float_inf":
        mask = np.where(rng.random(shape) < 0.8, rng.standard_normal(shape), -np.inf).astype(dtype)
    causal = rng.choice(["none", "top_left", "bottom_right"])
    scale = None if rng.random() < 0.5 else float(rng.uniform(0.1, 1.0))
    key_lengths = None if rng.random() < 0.7 else rng.integers(0, Nk + 1, size=B)
    grad_out = rng.standard_normal((B, Hq, Nq, dv)).astype(dtype)
    return dict(q=q, k=k, v=v, mask=mask, causal=str(causal), scale=scale, key_lengths=key_lengths,
                grad_out=grad_out)


def run_both(p, dtype):
    kw = dict(causal=p["causal"], scale=p["scale"], key_lengths=p["key_lengths"])
    out, lse = attnlab.attention_forward(p["q"], p["k"], p["v"], p["mask"], **kw)
    assert out.dtype == dtype and lse.dtype == dtype
    dq, dk, dv = attnlab.attention_backward(p["q"], p["k"], p["v"], out, lse, p["grad_out"], p["mask"], **kw)
    want = ref.attention(p["q"], p["k"], p["v"], p["mask"], grad_out=p["grad_out"], **kw)
    return dict(out=out, lse=lse, dq=dq, dk=dk, dv=dv), want


def compare(ours, want, dtype, case):
    live = ~want["dead"]
    ref.assert_close(ours["out"], want["out"], dtype, f"{case} out")
    # lse: -inf on exactly the fully masked rows, close elsewhere.
    assert np.array_equal(np.isneginf(ours["lse"]), want["dead"]), case
    ref.assert_close(ours["lse"][live], want["lse"][live], dtype, f"{case} lse")
    for g in ("dq", "dk", "dv"):
        ref.assert_close(ours[g], want[g], dtype, f"{case} {g}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(40))
def test_random_forward_backward(seed, dtype):
    rng = np.random.default_rng(seed)
    p = random_problem(rng, dtype)
    ours, want = run_both(p, dtype)
    compare(ours, want, dtype, f"seed {seed}")


def kv_cache_problem(rng):
    """A few new queries against a long key/value cache (the engine's decode path: Nq <= 64,
    Nk > 512): grouped heads, per-sequence cache lengths, masks, both causal alignments."""
    p = random_problem(rng, np.float32)
    B, Hq, Hkv = p["q"].shape[0], p["q"].shape[1], p["k"].shape[1]
    Nq, Nk = int(rng.choice([1, 1, 3, 16])), int(rng.integers(600, 2500))
    d, dv = int(rng.choice([1, 64, 80])), int(rng.choice([8, 64]))
    p["q"] = rng.standard_normal((B, Hq, Nq, d)).astype(np.float32)
    p["k"] = rng.standard_normal((B, Hkv, Nk, d)).astype(np.float32)
    p["v"] = rng.standard_normal((B, Hkv, Nk, dv)).astype(np.float32)
    p["grad_out"] = rng.standard_normal((B, Hq, Nq, dv)).astype(np.float32)
    if p["mask"] is not None:
        shape = (B, 1, Nq, Nk) if rng.random() < 0.5 else (Nq, Nk)
        p["mask"] = rng.random(shape) < 0.8 if p["mask"].dtype == bool else rng.standard_normal(shape).astype(np.float32)
    if p["key_lengths"] is not None:
        p["key_lengths"] = rng.integers(0, Nk + 1, size=B)
    return p


@pytest.mark.parametrize("seed", range(12))
def test_kv_cache_shapes_forward_backward(seed):
    # The engine chooses its decode path (split-KV, grouped heads together) for these shapes;
    # the results must be torch's as for any other shape, and so must the gradients.
    rng = np.random.default_rng(1000 + seed)
    p = kv_cache_problem(rng)
    ours, want = run_both(p, np.float32)
    compare(ours, want, np.float32, f"seed {seed}: q {p['q'].shape} k {p['k'].shape} causal {p['causal']}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_are_zero_where_torch_gives_nan(rng, dtype):
    B, H, Nq, Nk, d = 2, 2, 5, 6, 4
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in [(B, H, Nq, d), (B, H, Nk, d), (B, H, Nk, d)])
    mask = rng.random((B, H, Nq, Nk)) < 0.7
    mask[0, 1, 2, :] = False  # row (0, 1, 2) sees no key
    mask[1, 0, :, :] = False  # so does every row of (1, 0)
    plain = ref.plain_attention(q, k, v, mask)
    dead = np.isnan(plain).any(axis=-1)
    assert dead[0, 1, 2] and dead[1, 0].all()
    ours = attnlab.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert np.all(ours[dead] == 0)
    ref.assert_close(ours[~dead], plain[~dead], dtype, "live rows")
    grad_out = rng.standard_normal((B, H, Nq, d)).astype(dtype)
    out, lse = attnlab.attention_forward(q, k, v, mask)
    assert np.all(np.isneginf(lse[dead])) and np.all(np.isfinite(lse[~dead]))
    dq, dk, dv = attnlab.attention_backward(q, k, v, out, lse, grad_out, mask)
    assert np.all(dq[dead] == 0)  # a dead row sends nothing back to its query
    assert np.all(dk[1, 0] == 0) and np.all(dv[1, 0] == 0)  # nor to a head whose rows are all dead
    want = ref.attention(q, k, v, mask, grad_out=grad_out)
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        ref.assert_close(g, want[name], dtype, name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("logit_scale", [10.0, 40.0])
def test_large_logits(rng, dtype, logit_scale):
    # Scores of order logit_scale^2 * sqrt(d) / sqrt(d) ~ hundreds to a thousand: exp overflows
    # unless the row max is subtracted first. The softmax is then close to one-hot.
    B, H, Nq, Nk, d = 1, 2, 6, 7, 8
    q = (logit_scale * rng.standard_normal((B, H, Nq, d))).astype(dtype)
    k = (logit_scale * rng.standard_normal((B, H, Nk, d))).astype(dtype)
    v = rng.standard_normal((B, H, Nk, 5)).astype(dtype)
    grad_out = rng.standard_normal((B, H, Nq, 5)).astype(dtype)
    out, lse = attnlab.attention_forward(q, k, v)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse))
    want = ref.attention(q, k, v, grad_out=grad_out)
    ref.assert_close(out, want["out"], dtype, "out")
    # lse is of the order of the logits: compare it relative to its own size.
    ref.assert_close(lse / np.max(np.abs(want["lse"])), want["lse"] / np.max(np.abs(want["lse"])), dtype, "lse")
    dq, dk, dv = attnlab.attention_backward(q, k, v, out, lse, grad_out)
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        ref.assert_close(g, want[name], dtype, name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_diagnostics(rng, dtype):
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in [(2, 3, 5, 8), (2, 3, 9, 8), (2, 3, 9, 4)])
    mask = rng.random((5, 9)) < 0.6
    mask[1] = False
    out, lse, diag = attnlab.attention_forward(q, k, v, mask, causal="bottom_right", diagnostics=True)
    p = ref.attention(q, k, v, mask, causal="bottom_right")["p"]
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)
    jac = np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - p[..., :, None] * p[..., None, :]
    ref.assert_close(diag["max_prob"], p.max(axis=-1), dtype, "max_prob")
    ref.assert_close(diag["entropy"], entropy, dtype, "entropy")
    ref.assert_close(diag["jacobian_fro_sq"], np.sum(jac**2, axis=(-1, -2)), dtype, "jacobian_fro_sq")
    assert np.all(diag["max_prob"][:, :, 1] == 0)  # the fully masked row


# ---- scaled_dot_product_attention: torch's signature and semantics -----------------

def torch_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """torch 2.5's F.scaled_dot_product_attention written out (math backend), float64."""
    import torch

    q, k, v = (torch.from_numpy(np.asarray(x, dtype=np.float64)) for x in (q, k, v))
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    L, S = q.size(-2), k.size(-2)
    bias = torch.zeros(L, S, dtype=torch.float64)
    if is_causal:
        bias.masked_fill_(~torch.ones(L, S, dtype=torch.bool).tril(0), float("-inf"))
    if attn_mask is not None:
        m = torch.from_numpy(np.asarray(attn_mask))
        bias = bias.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else bias + m.double()
    s = q @ k.transpose(-2, -1) * (1 / np.sqrt(q.size(-1)) if scale is None else scale)
    return (torch.softmax(s + bias, dim=-1) @ v).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, mask_shape, is_causal, enable_gqa",
    [
        ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 3), None, False, False),      # Nq != Nk, dv != d
        ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (5, 7), False, False),    # 2-D mask
        ((2, 4, 7, 8), (2, 4, 5, 8), (2, 4, 5, 8), None, True, False),       # causal, Nq > Nk
        ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), None, True, False),       # causal, Nq < Nk
        ((1, 6, 5, 8), (1, 2, 5, 8), (1, 2, 5, 4), (1, 6, 5, 5), False, True),  # GQA, 3 heads per group
        ((2, 4, 5, 8), (2, 1, 5, 8), (2, 1, 5, 8), None, False, False),      # MQA by broadcasting
        ((1, 4, 5, 8), (3, 4, 6, 8), (3, 4, 6, 8), (3, 1, 1, 6), False, False),  # batch broadcast
        ((4, 5, 8), (4, 6, 8), (4, 6, 2), (4, 5, 6), False, False),          # 3-D [H, L, E]
        ((5, 8), (6, 8), (6, 8), (6,), False, False),                        # 2-D [L, E], 1-D mask
        ((2, 1, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), None, False, False),      # query head broadcast
    ],
)
@pytest.mark.parametrize("mask_dtype", ["bool", "float"])
def test_sdpa_matches_torch(rng, dtype, q_shape, k_shape, v_shape, mask_shape, is_causal, enable_gqa, mask_dtype):
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in (q_shape, k_shape, v_shape))
    mask = None
    if mask_shape is not None:
        mask = rng.random(mask_shape) < 0.75 if mask_dtype == "bool" else rng.standard_normal(mask_shape).astype(dtype)
        if mask_dtype == "bool":
            mask[..., 0] = True  # keep every row alive: torch would give NaN
    for scale in (None, 0.37):
        ours = attnlab.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
                                                    enable_gqa=enable_gqa)
        want = torch_sdpa(q, k, v, mask, is_causal, scale, enable_gqa)
        assert ours.dtype == dtype
        ref.assert_close(ours, want, dtype, f"sdpa scale={scale}")


def test_sdpa_accepts_torch_tensors_converted_by_numpy(torch, rng):
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    ours = attnlab.scaled_dot_product_attention(q.numpy(), q.numpy(), q.numpy(), is_causal=True)
    ref.assert_close(ours, torch_sdpa(q.numpy(), q.numpy(), q.numpy(), is_causal=True), np.float64, "sdpa")
