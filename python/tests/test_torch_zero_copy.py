"""attnlab.torch hands torch's tensors to attnlab without copies, in float32 and float64
and in the 16-bit types."""

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402
from attnlab.torch import _function  # noqa: E402


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
