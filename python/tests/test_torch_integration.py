"""attnlab.torch inside torch: no_grad and inference mode, an nn.Module, torch's thread
count (the bits do not depend on it), and other Python threads running during a call."""

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import torch  # noqa: E402
import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402
from torch_sdpa_oracle import DTYPES, assert_close, leaf, oracle_sdpa  # noqa: E402


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
    real = torch.ops.attnlab.attention

    def spy(*args):
        seen.append(args[9])  # the schema's `int threads` (attention_ops.cpp)
        return real(*args)

    q = torch.randn(1, 2, 300, 32)
    monkeypatch.setattr(torch.ops.attnlab, "attention", spy)
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
