"""attnlab.torch against torch's autograd of the explicit formula (torch 1.13 has no
scaled_dot_product_attention; the oracle below is torch 2.5's math backend written out).

Tolerances are torch_reference.py's, relative to the largest element of the compared
tensor: float64 runs attnlab's reference (1e-9: the same sums in another order), float32
runs the engine and is compared with the oracle in float64 on the same float32 inputs
(2e-4: float32 rounding amplified by the sums over d, keys and queries)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402
import torch_reference as ref  # noqa: E402
from attnlab.torch import _function  # noqa: E402

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


# ---- torch's semantics, over random problems -----------------------------------------

def random_sdpa_problem(gen, dtype):
    """Random ranks 2-5, broadcast batch axes, GQA or head broadcasting, Nq != Nk, dv != d,
    masks bool or float (with -inf, requiring grad or not) of broadcast shapes, causal,
    scale, and transposed (non-contiguous) layouts."""
    def r(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    rank = r(2, 5)
    batch = [r(1, 3) for _ in range(max(rank - 3, 0))]
    heads = ["same", "gqa", "one_kv_head", "one_query_head"][r(0, 3) if rank >= 3 else 0]
    gqa = heads == "gqa"
    Hq = Hkv = r(1, 3)
    if gqa:
        Hkv = r(1, 2)
        Hq = Hkv * r(1, 3)
    elif heads == "one_kv_head":  # broadcast over query heads (multi-query attention)
        Hq, Hkv = r(2, 3), 1
    elif heads == "one_query_head":  # one query head broadcast over the key/value heads
        Hq, Hkv = 1, r(2, 3)
    L, S, E, Ev = r(1, 9), r(1, 9), r(1, 16), r(1, 8)
    heads_q = [Hq] if rank >= 3 else []
    heads_kv = [Hkv] if rank >= 3 else []

    def shrink(shape):  # some batch axes of size 1 (broadcast)
        return [1 if r(0, 3) == 0 else n for n in shape]

    def tensor(shape, transposed):
        if transposed and len(shape) >= 3:  # (..., N, H, E) in memory, seen as (..., H, N, E)
            x = torch.randn(*shape[:-3], shape[-2], shape[-3], shape[-1], generator=gen).transpose(-2, -3)
        else:
            x = torch.randn(*shape, generator=gen)
        return leaf(x, dtype)

    q = tensor(shrink(batch) + heads_q + [L, E], r(0, 1))
    k = tensor(shrink(batch) + heads_kv + [S, E], r(0, 1))
    v = tensor(shrink(batch) + heads_kv + [S, Ev], r(0, 1))
    mask, causal = None, False
    kind = ["none", "bool", "float", "float_inf", "causal"][r(0, 4)]
    if kind == "causal":
        causal = True
    elif kind != "none":
        full = batch + [max(Hq, Hkv)] * (rank >= 3) + [L, S]
        shape = [1 if r(0, 2) == 0 else n for n in full]  # broadcast along some axes
        shape = shape[r(0, len(shape) - 1):] if r(0, 1) else shape  # and fewer leading axes
        shape = shape if len(shape) >= 1 else [S]
        if kind == "bool":
            mask = torch.rand(shape, generator=gen) < 0.8
        else:
            values = torch.randn(shape, generator=gen)
            if kind == "float_inf":
                values = values.masked_fill(torch.rand(shape, generator=gen) < 0.2, -math.inf)
            mask = leaf(values, dtype, requires_grad=r(0, 1) == 1)
    scale = None if r(0, 1) else float(torch.rand(1, generator=gen)) + 0.1
    inputs = dict(query=q, key=k, value=v, attn_mask=mask)
    return inputs, dict(is_causal=causal, scale=scale, enable_gqa=gqa)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(60))
def test_random_problems_match_torch_autograd(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    inputs, kwargs = random_sdpa_problem(gen, dtype)
    compare_with_oracle(inputs, kwargs, dtype, f"seed {seed}", seed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_give_zero_and_zero_gradients(dtype):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (leaf(torch.randn(2, 3, 5, 4, generator=gen), dtype) for _ in range(3))
    mask = torch.rand(2, 3, 5, 5, generator=gen) < 0.7
    mask[0, 1, 2] = False  # one row sees no key
    mask[1, 0] = False  # a whole head sees none
    out = at.scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(out[0, 1, 2] == 0) and torch.all(out[1, 0] == 0)
    out.sum().backward()
    assert torch.all(q.grad[0, 1, 2] == 0) and torch.all(k.grad[1, 0] == 0) and torch.all(v.grad[1, 0] == 0)
    compare_with_oracle(dict(query=q, key=k, value=v, attn_mask=mask), {}, dtype, "dead rows")


@pytest.mark.parametrize("dtype", DTYPES)
def test_no_keys_and_empty_tensors(dtype):
    # torch (>= 2.5) gives zeros when there are no keys (every row fully masked) and
    # empty outputs for empty batches or queries; attnlab.torch does the same.
    q, k, v = leaf(torch.randn(2, 3, 4, 8), dtype), leaf(torch.randn(2, 3, 0, 8), dtype), leaf(torch.randn(2, 3, 0, 5), dtype)
    out = at.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 5) and torch.all(out == 0)
    out.sum().backward()
    assert torch.all(q.grad == 0) and k.grad.shape == k.shape
    for shape_q, shape_kv in [((0, 3, 4, 8), (0, 3, 6, 8)), ((2, 3, 0, 8), (2, 3, 6, 8))]:
        q, k = leaf(torch.randn(shape_q), dtype), leaf(torch.randn(shape_kv), dtype)
        out = at.scaled_dot_product_attention(q, k, k)
        assert out.shape == shape_q[:-1] + (8,)
        out.sum().backward()
        assert k.grad.shape == k.shape and torch.all(k.grad == 0)


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(7)
    q = leaf(torch.randn(2, 4, 5, 6, generator=gen), torch.float64)
    k = leaf(torch.randn(2, 2, 7, 6, generator=gen), torch.float64)
    v = leaf(torch.randn(2, 2, 7, 3, generator=gen), torch.float64)
    mask = leaf(torch.randn(1, 4, 5, 7, generator=gen), torch.float64)
    assert torch.autograd.gradcheck(
        lambda q, k, v, m: at.scaled_dot_product_attention(q, k, v, m, scale=0.7, enable_gqa=True), (q, k, v, mask))
    assert torch.autograd.gradcheck(
        lambda q, k, v: at.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), (q, k, v))
    lengths = torch.tensor([7, 3])
    assert torch.autograd.gradcheck(
        lambda q, k, v, m: at.attention(q, k, v, m, causal="bottom_right", key_lengths=lengths), (q, k, v, mask))


# ---- attention(): attnlab's own options ----------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
def test_attention_options_match_the_reference_oracle(dtype, causal):
    gen = torch.Generator().manual_seed(3)
    q = leaf(torch.randn(2, 4, 6, 8, generator=gen), dtype)
    k = leaf(torch.randn(2, 2, 9, 8, generator=gen), dtype)
    v = leaf(torch.randn(2, 2, 9, 5, generator=gen), dtype)
    mask = torch.rand(6, 9, generator=gen) < 0.8
    lengths = [9, 4]
    grad = torch.randn(2, 4, 6, 5, generator=gen, dtype=dtype)
    out, lse, diag = at.attention(q, k, v, mask, causal=causal, key_lengths=torch.tensor(lengths), scale="ssmax",
                                  diagnostics=True)
    out.backward(grad)
    # The same call through the NumPy functions: the same engine, so the same bits.
    np_out, np_lse, np_diag = attnlab.attention_forward(*(x.detach().numpy() for x in (q, k, v)), mask.numpy(),
                                                        causal=causal, key_lengths=lengths, scale="ssmax",
                                                        diagnostics=True, threads=torch.get_num_threads())
    np.testing.assert_array_equal(out.detach().numpy(), np_out)
    np.testing.assert_array_equal(lse.numpy(), np_lse)
    for name in np_diag:
        np.testing.assert_array_equal(diag[name].numpy(), np_diag[name])
    grads = attnlab.attention_backward(*(x.detach().numpy() for x in (q, k, v)), np_out, np_lse, grad.numpy(),
                                       mask.numpy(), causal=causal, key_lengths=lengths, scale="ssmax")
    for x, g in zip((q, k, v), grads):
        np.testing.assert_array_equal(x.grad.numpy(), g)
    assert not lse.requires_grad and not diag["entropy"].requires_grad
    # And against torch's autograd with a fixed scale (the oracle of torch_reference.py).
    for x in (q, k, v):
        x.grad = None
    out = at.attention(q, k, v, mask, causal=causal, key_lengths=lengths, scale=0.4)
    out.backward(grad)
    want = ref.attention(*(x.detach().numpy() for x in (q, k, v)), mask.numpy(), causal=causal or "none",
                         scale=0.4, key_lengths=lengths, grad_out=grad.numpy())
    ref.assert_close(out.detach().numpy(), want["out"], NP[dtype], "out")
    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        ref.assert_close(x.grad.numpy(), want[name], NP[dtype], name)


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_attention_float_mask_gradient_with_causality_and_padding(causal):
    gen = torch.Generator().manual_seed(5)
    q = leaf(torch.randn(2, 2, 5, 4, generator=gen), torch.float64)
    k = leaf(torch.randn(2, 2, 7, 4, generator=gen), torch.float64)
    v = leaf(torch.randn(2, 2, 7, 3, generator=gen), torch.float64)
    for mask_shape in [(5, 7), (2, 1, 5, 7), (1, 2, 1, 7)]:
        mask = leaf(torch.randn(mask_shape, generator=gen), torch.float64)
        assert torch.autograd.gradcheck(
            lambda q, k, v, m: at.attention(q, k, v, m, causal=causal, key_lengths=[6, 2], scale="inv_d"),
            (q, k, v, mask))


def test_attention_ranks_and_return_values():
    q = torch.randn(3, 5, 8, dtype=torch.float64)
    out = at.attention(q, q, q)
    assert out.shape == (3, 5, 8)
    out, lse = at.attention(q[0], q[0], q[0], return_lse=True)
    assert out.shape == (5, 8) and lse.shape == (5,)
    want = torch.logsumexp(q[0] @ q[0].T / math.sqrt(8), -1)
    assert torch.allclose(lse, want, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="ranks"):
        at.attention(q, q[0], q[0])


# ---- torch integration: modes, modules, threads ---------------------------------------

def test_no_grad_and_inference_mode_give_the_same_values():
    gen = torch.Generator().manual_seed(2)
    q = leaf(torch.randn(1, 2, 16, 8, generator=gen), torch.float32)
    with_grad = at.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert with_grad.grad_fn is not None
    with torch.no_grad():
        plain = at.scaled_dot_product_attention(q, q, q, is_causal=True)
    with torch.inference_mode():
        qi = q.detach().clone()
        inference = at.scaled_dot_product_attention(qi, qi, qi, is_causal=True)
    assert plain.grad_fn is None and not plain.requires_grad and inference.is_inference()
    assert torch.equal(plain, with_grad.detach()) and torch.equal(inference, plain)


class TinyAttention(torch.nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):  # x [B, N, dim]
        B, N, dim = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)  # strided views
        y = self.attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, N, dim))


@pytest.mark.parametrize("dtype", DTYPES)
def test_inside_an_nn_module(dtype):
    torch.manual_seed(0)
    ours = TinyAttention(16, 4, at.scaled_dot_product_attention).to(dtype)
    plain = TinyAttention(16, 4, oracle_sdpa).to(dtype)
    plain.load_state_dict(ours.state_dict())
    x = torch.randn(2, 10, 16, dtype=dtype)
    y_ours, y_plain = ours(x), plain(x)
    assert_close(y_ours, y_plain.double(), dtype, "module output")
    y_ours.square().sum().backward()
    y_plain.square().sum().backward()
    for (name, a), b in zip(ours.named_parameters(), plain.parameters()):
        assert_close(a.grad, b.grad.double(), dtype, f"grad of {name}")


def test_threads_follow_torch_and_do_not_change_the_bits(monkeypatch):
    seen = []
    real = attnlab._attnlab.attention_forward

    def spy(*args, **kwargs):
        seen.append(kwargs["threads"])
        return real(*args, **kwargs)

    q = torch.randn(1, 2, 300, 32)
    monkeypatch.setattr(_function._attnlab, "attention_forward", spy)
    old = torch.get_num_threads()
    teams = []
    try:
        torch.set_num_threads(2)
        two = at.scaled_dot_product_attention(q, q, q)
        teams.append(attnlab._attnlab._team_size(0))
        torch.set_num_threads(1)
        one = at.scaled_dot_product_attention(q, q, q)
        teams.append(attnlab._attnlab._team_size(0))
    finally:
        torch.set_num_threads(old)
    three = at.attention(q, q, q, threads=3)
    # The default goes as 0 (OpenMP's default, clamped by the library's rule), which is
    # torch's count: torch and attnlab share libgomp, and torch.set_num_threads sets it.
    assert seen == [0, 0, 3] and teams == [2, 1]
    assert torch.equal(one, two) and torch.equal(one, three)  # the engine is deterministic across threads


def test_other_python_threads_run_during_a_call(python_runs_during):
    # As test_bindings' test of the same name, through attnlab.torch: the wrapper must not
    # hold the GIL either.
    q = torch.randn(1, 8, 384, 64, dtype=torch.float64)
    python_runs_during(lambda: at.attention(q, q, q, check_finite=False))


# ---- zero copy -------------------------------------------------------------------------

def test_tensors_reach_attnlab_without_copies(monkeypatch):
    """Every array the extension receives is the tensor's own memory (same address, same
    strides): contiguous, transposed (the usual (B, N, H, E) -> (B, H, N, E) view), and
    broadcast (stride 0); the outputs are the extension's arrays, not copies."""
    arrays = {}
    real_fwd, real_bwd = attnlab._attnlab.attention_forward, attnlab._attnlab.attention_backward

    def fwd(q, k, v, mask, **kw):
        arrays.update(q=q, k=k, v=v, mask=mask)
        r = real_fwd(q, k, v, mask, **kw)
        arrays.update(out=r[0])
        return r

    def bwd(q, k, v, out, lse, grad_out, mask, **kw):
        arrays.update(bq=q, bout=out, grad_out=grad_out)
        r = real_bwd(q, k, v, out, lse, grad_out, mask, **kw)
        arrays.update(dk=r[1])
        return r

    monkeypatch.setattr(_function._attnlab, "attention_forward", fwd)
    monkeypatch.setattr(_function._attnlab, "attention_backward", bwd)

    def address(a):
        return a.__array_interface__["data"][0]

    q = torch.randn(2, 16, 4, 8).transpose(1, 2).requires_grad_()  # (B, N, H, E) memory
    k = torch.randn(2, 4, 16, 8, requires_grad=True)
    v = torch.randn(1, 4, 16, 8).expand(2, 4, 16, 8)  # batch broadcast: stride 0
    mask = torch.rand(16, 16) < 0.9
    mask[:, 0] = True
    out = at.scaled_dot_product_attention(q, k, v, mask)
    for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        a = arrays[name]
        assert address(a) == t.data_ptr(), f"{name} was copied"
        # (the mask reaches attnlab with size-1 axes in front: their strides are never used)
        assert a.strides[-t.dim():] == tuple(s * t.element_size() for s in t.stride()), name
    assert arrays["v"].strides[0] == 0
    assert out.data_ptr() == address(arrays["out"])
    out.sum().backward()  # grad_out: an expanded tensor of ones (all strides 0)
    assert address(arrays["bq"]) == q.data_ptr() and address(arrays["bout"]) == out.data_ptr()
    assert arrays["grad_out"].strides == (0, 0, 0, 0)
    # k's gradient is attnlab's array itself (q's is copied by torch into q's own strides:
    # torch's layout rule for the .grad of a leaf, not a copy of attnlab.torch's).
    assert k.grad.data_ptr() == address(arrays["dk"])


# ---- errors ----------------------------------------------------------------------------

def test_tensors_on_another_device_are_an_error():
    # The CUDA check, on the meta device (no CUDA here): the same code path.
    q = torch.empty(1, 2, 4, 8, device="meta")
    with pytest.raises(ValueError, match="query: attnlab computes on the CPU and this tensor is on 'meta'"):
        at.scaled_dot_product_attention(q, q, q)
    c = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="key: .*on 'meta'.*\\.cpu\\(\\)"):
        at.attention(c, q, c)
    with pytest.raises(ValueError, match="attn_mask: .*'meta'"):
        at.scaled_dot_product_attention(c, c, c, torch.empty(4, 4, dtype=torch.bool, device="meta"))


@pytest.mark.parametrize("dtype, match", [(torch.int32, "not supported"), (torch.complex64, "not supported")])
def test_unsupported_dtypes(dtype, match):
    q = torch.ones(1, 2, 4, 8, dtype=dtype)
    with pytest.raises(TypeError, match=f"query: dtype {dtype}.*({match})"):
        at.scaled_dot_product_attention(q, q, q)


def test_argument_errors():
    q = torch.randn(1, 4, 5, 8)
    with pytest.raises(TypeError, match="key: dtype torch.float64 does not match query's torch.float32"):
        at.scaled_dot_product_attention(q, q.double(), q)
    with pytest.raises(TypeError, match="query: expected a torch.Tensor, got ndarray"):
        at.scaled_dot_product_attention(q.numpy(), q, q)
    with pytest.raises(TypeError, match="attn_mask: dtype torch.int64"):
        at.scaled_dot_product_attention(q, q, q, torch.ones(5, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="must be None when is_causal=True"):
        at.scaled_dot_product_attention(q, q, q, torch.ones(5, 5, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="not a multiple"):
        at.scaled_dot_product_attention(q, q[:, :3], q[:, :3], enable_gqa=True)
    with pytest.raises(ValueError, match="query has 4 heads and key/value 2"):
        at.scaled_dot_product_attention(q, q[:, :2], q[:, :2])
    with pytest.raises(ValueError, match="batch axes do not broadcast"):
        at.scaled_dot_product_attention(q.expand(3, 4, 5, 8), q.expand(2, 4, 5, 8), q)
    with pytest.raises(ValueError, match="head dim"):  # attnlab's own message
        at.scaled_dot_product_attention(q, q[..., :4], q)
    with pytest.raises(ValueError, match="non-finite"):
        at.scaled_dot_product_attention(q.masked_fill(q > 1, math.nan), q, q)
    with pytest.raises(TypeError, match="scale: expected None or a number"):
        at.scaled_dot_product_attention(q, q, q, scale="ssmax")
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) window_sizes"):
        at.attention(q, q, q, window_sizes=(2, 2))


def _dropout_oracle(q, k, v, p, seed, **kw):
    """The explicit formula in float64 with the mask attnlab applies for this seed."""
    _, _, keep = attnlab.attention_forward(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                                           dropout_p=p, seed=seed, return_dropout_mask=True, **kw)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if kw.get("causal"):
        s = s.masked_fill(~torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(), -math.inf)
    prob = torch.softmax(s, -1) * torch.from_numpy(keep.astype(np.float64)) / (1 - p)
    return prob @ v


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_follows_torch_semantics_with_a_seed_from_torchs_generator(dtype):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g, dtype=torch.float64) for _ in range(3))
    qa, ka, va = (leaf(x, dtype) for x in (q, k, v))
    torch.manual_seed(11)
    out = at.scaled_dot_product_attention(qa, ka, va, dropout_p=0.3, is_causal=True)
    torch.manual_seed(11)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())  # the draw attnlab.torch makes
    qo, ko, vo = (x.detach().requires_grad_(True) for x in (q, k, v))
    want = _dropout_oracle(qo, ko, vo, 0.3, seed, causal=True)
    assert_close(out, want, dtype, "out")
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(grad.to(dtype))
    want.backward(grad)
    for name, ours, theirs in (("dq", qa, qo), ("dk", ka, ko), ("dv", va, vo)):
        assert_close(ours.grad, theirs.grad, dtype, name)
    # The same torch seed repeats the mask; another one draws a different one.
    torch.manual_seed(11)
    again = at.scaled_dot_product_attention(qa, ka, va, dropout_p=0.3, is_causal=True)
    assert torch.equal(again, out)
    torch.manual_seed(12)
    assert not torch.equal(at.scaled_dot_product_attention(qa, ka, va, dropout_p=0.3, is_causal=True), out)


def test_dropout_p_outside_its_range_and_unsupported_combinations_are_errors():
    q = torch.randn(1, 2, 4, 8)
    for bad in (1.0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match="dropout_p: .* is not a probability in \\[0, 1\\)"):
            at.scaled_dot_product_attention(q, q, q, dropout_p=bad)
    mask = torch.zeros(4, 4, requires_grad=True)
    out = at.attention(q.requires_grad_(True), q, q, mask, dropout_p=0.2)
    with pytest.raises(NotImplementedError, match="attn_mask: its gradient is not supported together with dropout_p"):
        out.sum().backward()
    at.scaled_dot_product_attention(q, q, q, dropout_p=0.0)  # the evaluation call of a model


def _sinks_oracle(q, k, v, sinks, softcap=None):
    """The explicit formula with one more logit per row (the sink) and no value row for it."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    B, H, N, _ = s.shape
    s = torch.cat([s, sinks[None, :, None, None].expand(B, H, N, 1)], -1)
    return torch.softmax(s, -1)[..., :-1] @ v


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinks_are_differentiable_and_match_the_formula(dtype):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    sinks = torch.randn(4, generator=g, dtype=torch.float64)
    qa, ka, va, sa = (leaf(x, dtype) for x in (q, k, v, sinks))
    out, lse = at.attention(qa, ka, va, sinks=sa, softcap=3.0, return_lse=True)
    qo, ko, vo, so = (x.detach().requires_grad_(True) for x in (q, k, v, sinks))
    want = _sinks_oracle(qo, ko, vo, so, softcap=3.0)
    assert_close(out, want, dtype, "out")
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(grad.to(dtype))
    want.backward(grad)
    for name, ours, theirs in (("dq", qa, qo), ("dk", ka, ko), ("dv", va, vo), ("dsinks", sa, so)):
        assert_close(ours.grad, theirs.grad, dtype, name)
    # float64 runs attnlab's reference: torch's own finite-difference check agrees.
    if dtype == torch.float64:
        small = [x[:1, :2, :5].detach().clone().requires_grad_(True) for x in (q, k, v)]
        s2 = sinks[:2].detach().clone().requires_grad_(True)
        assert torch.autograd.gradcheck(
            lambda a, b, c, d: at.attention(a, b, c, sinks=d, window_size=(2, 1)), (*small, s2))


def test_double_backward_is_a_clear_error():
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    out = at.scaled_dot_product_attention(q, q, q)
    with pytest.raises(NotImplementedError, match="double backward \\(create_graph=True"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    # Without create_graph the same graph differentiates once, as usual.
    (g,) = torch.autograd.grad(at.scaled_dot_product_attention(q, q, q).sum(), q)
    assert g.shape == q.shape


def test_mask_gradient_with_a_per_row_scale_is_a_clear_error():
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    mask = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    out = at.attention(q, q, q, mask, scale="ssmax")
    with pytest.raises(NotImplementedError, match="attn_mask: its gradient is not supported with scale policy 'ssmax'"):
        out.sum().backward()


def test_saved_output_modified_in_place_is_detected():
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    out = at.scaled_dot_product_attention(q, q, q)
    out.add_(1.0)  # the backward needs O as the forward returned it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


# ---- float16 and bfloat16 ---------------------------------------------------------------

# Half an ulp of the type, relative: the rounding of each 16-bit output.
HALF_ULP = {torch.bfloat16: 2.0 ** -9, torch.float16: 2.0 ** -12}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_tensors_against_the_float64_formula(dtype):
    """bf16/fp16 tensors through attnlab.torch (GQA, causal and a float mask that gets a
    gradient): out within a few of the type's roundings of torch's formula in float64 on
    the same 16-bit values, the gradients within the 16-bit regime's error (dO and O are
    16-bit: D = rowsum(dO*O) carries their rounding); lse and the mask's gradient in
    float32; out bit for bit the float32 engine's on the up-converted inputs, rounded."""
    gen = torch.Generator().manual_seed(15)
    q = torch.randn(2, 4, 37, 32, generator=gen).to(dtype).requires_grad_()
    k = torch.randn(2, 2, 45, 32, generator=gen).to(dtype).requires_grad_()
    v = torch.randn(2, 2, 45, 32, generator=gen).to(dtype).requires_grad_()
    mask = torch.randn(37, 45, generator=gen).requires_grad_()
    out, lse = at.attention(q, k, v, mask, causal="bottom_right", return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    grad = torch.randn(out.shape, generator=gen).to(dtype)
    out.backward(grad)
    assert q.grad.dtype == dtype and k.grad.dtype == dtype and mask.grad.dtype == torch.float32

    wide = [x.detach().double().requires_grad_() for x in (q, k, v, mask)]
    vis = torch.ones(37, 45, dtype=torch.bool).tril(45 - 37)
    s = (wide[0] @ wide[1].repeat_interleave(2, 1).transpose(-1, -2)) / math.sqrt(32) + wide[3]
    want = torch.softmax(s.masked_fill(~vis, -math.inf), -1) @ wide[2].repeat_interleave(2, 1)
    want.backward(grad.double())
    ulp = HALF_ULP[dtype]
    for name, ours, ref_, tol in (("out", out, want, 4 * ulp), ("dq", q.grad, wide[0].grad, 64 * ulp),
                                  ("dk", k.grad, wide[1].grad, 64 * ulp), ("dv", v.grad, wide[2].grad, 16 * ulp),
                                  ("dmask", mask.grad, wide[3].grad, 16 * ulp)):
        err = (ours.double() - ref_).abs().max().item()
        size = max(1.0, ref_.abs().max().item())
        assert err <= tol * size, f"{dtype} {name}: max |ours - torch| = {err:.3e} > {tol:.1e} * {size:.3g}"

    up = [x.detach().float() for x in (q, k, v)]
    out32, lse32 = at.attention(*up, mask.detach(), causal="bottom_right", return_lse=True)
    assert torch.equal(out.detach(), out32.to(dtype)) and torch.equal(lse, lse32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_tensors_reach_attnlab_without_copies(monkeypatch, dtype):
    """bf16 goes as its int16 bit patterns, fp16 as itself: views of the tensor's memory."""
    seen = []
    real = _function._attnlab.attention_forward

    def spy(q, k, v, *args, **kwargs):
        strides = tuple(st for st, n in zip(q.strides, q.shape) if n > 1)  # a size-1 axis's stride is free
        seen.append((q.__array_interface__["data"][0], strides, kwargs.get("bfloat16", False)))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(_function._attnlab, "attention_forward", spy)
    base = torch.randn(1, 2, 8, 16).to(dtype)
    q = base.transpose(1, 2)  # strided
    with torch.no_grad():
        at.attention(q, q, q)
    strides = tuple(2 * st for st, n in zip(q.stride(), q.shape) if n > 1)
    assert seen == [(q.data_ptr(), strides, dtype == torch.bfloat16)]
