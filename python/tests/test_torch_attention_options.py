"""attnlab.torch.attention(): attnlab's own options (causal alignment, padding, float
masks with their gradient) against the oracle, and its ranks and return values."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402
import torch_reference as ref  # noqa: E402
from torch_sdpa_oracle import DTYPES, NP, leaf  # noqa: E402


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
