"""attnlab.torch.scaled_dot_product_attention against torch's autograd of the explicit
formula (torch_sdpa_oracle.py): random problems of every shape and option torch takes, rows
that see no key, empty tensors, and gradcheck in float64."""

import math

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab.torch as at  # noqa: E402
from torch_sdpa_oracle import DTYPES, compare_with_oracle, leaf  # noqa: E402


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
