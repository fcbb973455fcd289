"""attnlab.torch's dropout (torch's semantics, the seed from torch's generator; bad p and
unsupported combinations are errors) and attention sinks (differentiable, against the
formula)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402
from torch_sdpa_oracle import DTYPES, assert_close, leaf  # noqa: E402


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
