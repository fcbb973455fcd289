"""attnlab.torch on bfloat16 and float16 tensors, against the float64 formula."""

import math

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402


# Half an ulp of the type, relative: the rounding of each 16-bit output.
HALF_ULP = {torch.bfloat16: 2.0 ** -9, torch.float16: 2.0 ** -12}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_tensors_against_the_float64_formula(dtype):
    """bf16/fp16 tensors through attnlab.torch (GQA, causal and a float mask that gets a
    gradient): out within a few of the type's roundings of torch's formula in float64 on
    the same 16-bit values, the gradients within the 16-bit regime's error (dO and O are
    16-bit: D = rowsum(dO*O) carries their rounding); lse and the mask's gradient in
    float32; out bit for bit the float32 engine's on the up-converted inputs, rounded (where
    bfloat16's forward runs on the CPU's bfloat16 dot products: within their roundings)."""
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
    with open("/proc/cpuinfo") as f:
        flags = f.read().split()
    if dtype == torch.bfloat16 and attnlab.engine_target().startswith("AVX3") and "avx512_bf16" in flags:
        # P rounded to bfloat16 for P·V (docs/engine.md, "bfloat16 and float16")
        assert (out.detach().float() - out32).abs().max() <= 2.0 ** -6 * out32.abs().max()
        assert torch.allclose(lse, lse32, rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(out.detach(), out32.to(dtype)) and torch.equal(lse, lse32)
