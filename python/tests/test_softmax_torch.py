"""attnlab's softmax functions against torch (float64 oracle)."""

import numpy as np
import pytest

import attnlab

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
from torch_reference import assert_close  # noqa: E402

DTYPES = [np.float32, np.float64]


def logits(rng, shape, dtype, spread=3.0):
    x = spread * rng.standard_normal(shape)
    x[..., 0] = -np.inf if len(shape) > 0 else x[..., 0]  # one masked entry per row
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_softmax_log_softmax_logsumexp(rng, dtype, shape):
    x = logits(rng, shape, dtype)
    t = torch.from_numpy(x.astype(np.float64))
    assert_close(attnlab.softmax(x), torch.softmax(t, -1).numpy(), dtype, "softmax")
    ours = attnlab.log_softmax(x)
    want = torch.log_softmax(t, -1).numpy()
    assert np.array_equal(np.isneginf(ours), np.isneginf(want))
    assert_close(ours[np.isfinite(ours)], want[np.isfinite(want)], dtype, "log_softmax")
    assert_close(attnlab.logsumexp(x), torch.logsumexp(t, -1).numpy(), dtype, "logsumexp")
    assert attnlab.softmax(x).dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_huge_logits(dtype):
    x = np.array([[1e30, 0.0, -1e30], [-np.inf, -np.inf, -np.inf]], dtype=dtype)
    assert np.array_equal(attnlab.softmax(x), np.array([[1, 0, 0], [0, 0, 0]], dtype=dtype))
    assert np.isneginf(attnlab.logsumexp(x)[1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_jacobian_and_vjp_match_autograd(rng, dtype):
    x = logits(rng, (3, 6), dtype)
    s = attnlab.softmax(x)
    J = attnlab.softmax_jacobian(s)
    assert J.shape == (3, 6, 6)
    g = rng.standard_normal((3, 6)).astype(dtype)
    for r in range(3):
        xt = torch.from_numpy(x[r].astype(np.float64))
        want = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), xt).numpy()
        want[:, np.isneginf(x[r])] = 0  # d/dx at a -inf entry: torch gives NaN or 0, ours 0 (p = 0 there)
        assert_close(J[r], np.nan_to_num(want), dtype, "jacobian")
    xt = torch.from_numpy(np.where(np.isneginf(x), -1e300, x).astype(np.float64)).requires_grad_(True)
    torch.softmax(xt, -1).backward(torch.from_numpy(g.astype(np.float64)))
    assert_close(attnlab.softmax_vjp(s, g), xt.grad.numpy(), dtype, "vjp")


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_with_indices_and_distributions(rng, dtype):
    x = (3 * rng.standard_normal((4, 5))).astype(dtype)
    target = rng.integers(0, 5, size=4)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
    want = torch.nn.functional.cross_entropy(xt, torch.from_numpy(target), reduction="none")
    want.sum().backward()
    loss, grad = attnlab.softmax_cross_entropy(x, target)
    assert loss.shape == (4,) and grad.shape == (4, 5)
    assert_close(loss, want.detach().numpy(), dtype, "loss")
    assert_close(grad, xt.grad.numpy(), dtype, "grad")

    y = rng.dirichlet(np.ones(5), size=4).astype(dtype)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
    want = torch.nn.functional.cross_entropy(xt, torch.from_numpy(y.astype(np.float64)), reduction="none")
    want.sum().backward()
    loss, grad = attnlab.softmax_cross_entropy(x, y)
    assert_close(loss, want.detach().numpy(), dtype, "loss (distribution)")
    assert_close(grad, xt.grad.numpy(), dtype, "grad (distribution)")
