"""attnlab.torch's arguments: errors that say what is wrong, options it cannot
differentiate refused rather than silently given no gradient, views NumPy cannot see
resolved, the thread default from OpenMP's (clamped), and torch.jit.trace recording the operator."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import attnlab.torch as at  # noqa: E402


def qkv(requires_grad=False):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(1, 2, 5, 4, generator=g, requires_grad=requires_grad) for _ in range(3)]


def test_a_wrong_type_of_threads_says_threads():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"threads: 2.5 is not an integer"):
        at.attention(q, k, v, threads=2.5)


def test_an_option_attention_does_not_take_is_refused_up_front():
    q, k, v = qkv(requires_grad=True)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) return_dropout_mask"):
        at.attention(q, k, v, return_dropout_mask=True)


@pytest.mark.parametrize("name, value", [("alibi_slopes", [0.5, 0.25]), ("softcap", 20.0)])
def test_an_option_that_requires_grad_is_refused_not_silently_given_none(name, value):
    q, k, v = qkv(requires_grad=True)
    x = torch.tensor(value, requires_grad=True)
    with pytest.raises(NotImplementedError, match=f"{name}: requires a gradient"):
        at.attention(q, k, v, **{name: x}).sum().backward()
    out = at.attention(q, k, v, **{name: x.detach()})  # as a constant it works
    assert torch.isfinite(out).all()


def test_a_mask_gradient_with_the_default_scale_alias():
    q, k, v = qkv()
    mask = torch.zeros(5, 5, requires_grad=True)
    at.attention(q, k, v, mask, scale="default").sum().backward()
    g_default = mask.grad.clone()
    mask.grad = None
    at.attention(q, k, v, mask).sum().backward()
    assert torch.equal(g_default, mask.grad)


def test_a_negative_view_is_resolved():
    q, k, v = qkv()
    neg = torch._neg_view(q)
    assert neg.is_neg()
    assert torch.equal(at.attention(neg, k, v), at.attention(-q, k, v))
    assert torch.equal(at.scaled_dot_product_attention(neg, k, v), at.scaled_dot_product_attention(-q, k, v))
    qg = q.clone().requires_grad_()
    at.attention(torch._neg_view(qg), k, v).sum().backward()
    qr = q.clone().requires_grad_()
    at.attention(-qr, k, v).sum().backward()
    assert torch.equal(qg.grad, qr.grad)


def test_torch_jit_trace_records_the_operator_not_a_frozen_output():
    # The trace once kept the call's output as a constant; now it records torch.ops.attnlab.attention.
    class Attend(torch.nn.Module):
        def forward(self, x):
            return at.scaled_dot_product_attention(x, x, x, is_causal=True)

    traced = torch.jit.trace(Attend(), torch.randn(1, 2, 4, 8))
    assert "attnlab::attention" in str(traced.graph)
    x2 = torch.randn(1, 2, 4, 8)
    assert torch.equal(traced(x2), Attend()(x2))


def test_torch_jit_trace_with_dropout_is_refused():  # the seed, drawn in Python, would be a constant
    class Attend(torch.nn.Module):
        def forward(self, x):
            return at.scaled_dot_product_attention(x, x, x, dropout_p=0.5)

    with pytest.raises(RuntimeError, match="dropout_p > 0 would keep this call's seed"):
        torch.jit.trace(Attend(), torch.randn(1, 2, 4, 8))


def test_a_huge_omp_num_threads_is_clamped_for_the_default():
    # torch.get_num_threads() (OMP_NUM_THREADS) was passed as if the user had given it,
    # and refused: "threads: 5000 is outside [0, 1024]".
    code = """
        import torch, attnlab.torch as at
        q = torch.ones(1, 2, 8, 4)
        print("ran", tuple(at.attention(q, q, q).shape), tuple(at.scaled_dot_product_attention(q, q, q).shape))
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="5000"))
    assert r.returncode == 0 and "ran (1, 2, 8, 4) (1, 2, 8, 4)" in r.stdout, (r.returncode, r.stdout, r.stderr)
