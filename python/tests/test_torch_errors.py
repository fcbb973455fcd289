"""attnlab.torch's errors: tensors on another device, unsupported dtypes, bad arguments, a
double backward, a mask gradient with a per-row scale, and a saved output modified in place."""

import math

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab.torch as at  # noqa: E402


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
