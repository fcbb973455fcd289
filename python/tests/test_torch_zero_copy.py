"""attnlab.torch hands torch's tensors to attnlab's registered operator without copies, in
float32 and float64 and in the 16-bit types: the operator reads them in place with their
strides (python/torch_ops/views.hpp)."""

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab.torch as at  # noqa: E402


def spy_on_attention(monkeypatch):
    """Records the tensors torch.ops.attnlab.attention receives and returns."""
    seen = {}
    real = torch.ops.attnlab.attention

    def spy(q, k, v, mask, *args):
        seen.update(q=q, k=k, v=v, mask=mask)
        r = real(q, k, v, mask, *args)
        seen.update(out=r[0])
        return r

    monkeypatch.setattr(torch.ops.attnlab, "attention", spy)
    return seen


def test_tensors_reach_attnlab_without_copies(monkeypatch):
    """Every tensor the operator receives is the caller's memory (same address, same
    strides): contiguous, transposed (the usual (B, N, H, E) -> (B, H, N, E) view), and
    broadcast (stride 0); the output is the operator's tensor, not a copy."""
    seen = spy_on_attention(monkeypatch)
    q = torch.randn(2, 16, 4, 8).transpose(1, 2).requires_grad_()  # (B, N, H, E) memory
    k = torch.randn(2, 4, 16, 8, requires_grad=True)
    v = torch.randn(1, 4, 16, 8).expand(2, 4, 16, 8)  # batch broadcast: stride 0
    mask = torch.rand(16, 16) < 0.9
    mask[:, 0] = True
    out = at.scaled_dot_product_attention(q, k, v, mask)
    for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        a = seen[name]
        assert a.data_ptr() == t.data_ptr(), f"{name} was copied"
        assert a.stride()[-t.dim():] == t.stride(), name
    assert seen["v"].stride()[0] == 0
    assert out.data_ptr() == seen["out"].data_ptr()
    out.sum().backward()  # the operator's backward, on the same tensors it saved
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_tensors_reach_attnlab_without_copies(monkeypatch, dtype):
    """bf16 and fp16 go as themselves: the tensor's memory with its strides."""
    seen = spy_on_attention(monkeypatch)
    base = torch.randn(1, 2, 8, 16).to(dtype)
    q = base.transpose(1, 2)  # strided
    with torch.no_grad():
        at.attention(q, q, q)
    def strides(t):  # a size-1 axis's stride is free
        return tuple(st for st, n in zip(t.stride(), t.shape) if n > 1)
    assert seen["q"].dtype == dtype and seen["q"].data_ptr() == q.data_ptr() and strides(seen["q"]) == strides(q)
