"""attnlab.torch's cache and attention block: the result's dtype, a batch appended to all its
sequences or none, gradients refused rather than cut, torch.jit.trace recording the appends
(or refusing, never freezing an output), and rotary embeddings against a plain torch implementation of each convention."""

import math

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")
import torch  # noqa: E402
import attnlab.torch as at  # noqa: E402
from attnlab.torch import CausalSelfAttention, KVCache, apply_rope  # noqa: E402


def filled_cache(lengths=(5,), kv_heads=2, head_dim=32, max_tokens=512, block_tokens=16):
    torch.manual_seed(0)
    cache = KVCache(1, kv_heads, head_dim, max_tokens, block_tokens=block_tokens)
    seqs = []
    for n in lengths:
        s = cache.add_sequence()
        cache.append(0, s, torch.randn(kv_heads, n, head_dim), torch.randn(kv_heads, n, head_dim))
        seqs.append(s)
    return cache, seqs


# --- the result's dtype -----------------------------------------------------------------

def test_an_integer_query_is_refused_not_truncated():
    cache, seqs = filled_cache()
    with pytest.raises(TypeError, match="q: dtype torch.int64"):
        cache.attention(0, seqs, torch.ones(1, 4, 1, 32, dtype=torch.int64))
    with pytest.raises(TypeError, match="k: dtype torch.int32"):
        cache.append(0, seqs[0], torch.ones(2, 1, 32, dtype=torch.int32), torch.ones(2, 1, 32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_the_result_is_in_the_query_dtype(dtype):
    cache, seqs = filled_cache()
    q = torch.randn(1, 4, 1, 32)
    want, want_lse = cache.attention(0, seqs, q, return_lse=True)
    out, lse = cache.attention(0, seqs, q.to(dtype), return_lse=True)
    assert out.dtype == dtype and lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.allclose(out.float(), want, atol=1e-2) and torch.allclose(lse.float(), want_lse, atol=1e-2)


# --- a batch: distinct sequences, all appended or none ------------------------------------

def test_one_sequence_twice_in_a_batch_is_refused():
    cache, _ = filled_cache(())
    s = cache.add_sequence()
    block = CausalSelfAttention(64, 2).eval()
    with torch.no_grad(), pytest.raises(ValueError, match=r"seqs: \[0, 0\] lists a sequence twice"):
        block(torch.randn(2, 5, 64), cache, [s, s])
    assert cache.length(s) == 0
    with pytest.raises(ValueError, match="sequence 0 is listed twice"):
        cache.append(0, [s, s], torch.randn(2, 2, 5, 32), torch.randn(2, 2, 5, 32))


def test_a_batch_that_does_not_fit_appends_nothing():
    cache, (a, b) = filled_cache((16, 20), max_tokens=64)  # 3 of 4 blocks of 16 used
    block = CausalSelfAttention(64, 2).eval()
    x = torch.randn(2, 14, 64)  # a alone would fit in the last block; a and b need two
    with torch.no_grad(), pytest.raises(ValueError, match="need 2 more blocks.*nothing was appended"):
        block(x, cache, [a, b])
    assert (cache.length(a), cache.length(b)) == (16, 20)
    bad = torch.randn(2, 2, 3, 32)
    bad[1, 0, 2, 7] = float("nan")
    with pytest.raises(ValueError, match=r"sequence 1, position 22"):
        cache.append(0, [a, b], bad, bad)
    assert (cache.length(a), cache.length(b)) == (16, 20)
    bad[1, 0, 2, 7] = 0.0
    cache.append(0, [a, b], bad, bad)  # the same batch, valid: both
    assert (cache.length(a), cache.length(b)) == (19, 23)
    assert torch.equal(cache.gather(0, b)[0][:, 20:], bad[1])


# --- gradients: refused, never cut silently ------------------------------------------------

def test_the_cache_path_refuses_to_run_under_autograd():
    cache, _ = filled_cache(())
    s = cache.add_sequence()
    block = CausalSelfAttention(64, 2)
    x = torch.randn(1, 3, 64)
    with pytest.raises(RuntimeError, match=r"computes no gradients; run it under torch.no_grad\(\)"):
        block(x, cache, [s])  # the weights require grad
    assert cache.length(s) == 0
    q = torch.randn(1, 2, 1, 32, requires_grad=True)
    with pytest.raises(RuntimeError, match="q: requires grad"):
        cache.attention(0, [s], q)
    with pytest.raises(RuntimeError, match="k: requires grad"):
        cache.append(0, s, q[0], q[0].detach())
    with torch.no_grad():
        block(x, cache, [s])
    with torch.inference_mode():
        block(x, cache, [s])
    assert cache.length(s) == 6
    block(x).sum().backward()  # without a cache the block differentiates
    assert block.q_proj.weight.grad is not None


# --- torch.jit.trace: recorded, or refused, never a frozen output --------------------------

class CachedBlock(torch.nn.Module):
    """A block decoding against a cache it holds: the tracer reaches the cache's handle
    through the module's attribute, so the trace records every append."""

    def __init__(self, block, cache, seqs):
        super().__init__()
        self.block, self.cache, self.seqs = block, cache.handle, seqs

    def forward(self, x):
        return self.block(x, self.cache, self.seqs)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the shape checks: constants of the trace
def test_a_traced_block_appends_on_every_call():
    torch.manual_seed(1)
    block = CausalSelfAttention(64, 2, rope="half_split").eval()
    traced_cache, (s,) = filled_cache(head_dim=32)
    eager_cache, (e,) = filled_cache(head_dim=32)
    with torch.no_grad():
        x0 = torch.randn(1, 1, 64)
        traced = torch.jit.trace(CachedBlock(block, traced_cache, [s]), x0, check_trace=False)
        first = block(x0, eager_cache, [e])  # the step the trace ran
        assert traced_cache.length(s) == 6 and "kv_cache_append" in str(traced.inlined_graph)
        for _ in range(3):
            x = torch.randn(1, 1, 64)
            assert torch.equal(traced(x), block(x, eager_cache, [e]))
    assert traced_cache.length(s) == eager_cache.length(e) == 9
    assert first.shape == (1, 1, 64)
    for a, b in zip(traced_cache.gather(0, s), eager_cache.gather(0, e)):
        assert torch.equal(a, b)


def test_tracing_a_cache_the_module_does_not_hold_is_refused():
    cache, (s,) = filled_cache()
    q = torch.randn(1, 4, 1, 32)
    with pytest.raises(RuntimeError, match="not part of the active trace"):
        torch.jit.trace(lambda q: cache.attention(0, [s], q), q)
    with pytest.raises(RuntimeError, match="not part of the active trace"):
        torch.jit.trace(lambda k: (cache.append(0, s, k, k), k)[1], torch.randn(2, 1, 32))
    assert cache.length(s) == 5  # nothing appended
    with pytest.raises(RuntimeError, match="torch.jit.trace cannot record attnlab's ring"):
        torch.jit.trace(lambda q: at.ring_attention(None, q, q, q), torch.randn(1, 2, 4, 8))


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the shape checks: constants of the trace
def test_apply_rope_traces_correctly():  # plain torch operators: the trace follows x and the positions
    def rotate(x, positions):
        return apply_rope(x, positions, convention="interleaved")
    traced = torch.jit.trace(rotate, (torch.randn(2, 6, 8), torch.arange(6)))
    x, positions = torch.randn(2, 6, 8), torch.arange(40, 46)
    assert torch.equal(traced(x, positions), rotate(x, positions))


# --- rotary embeddings --------------------------------------------------------------------

def rope_reference(x, positions, base, convention):
    """Meta's Llama code (complex pairs 2i, 2i+1) and Hugging Face's rotate_half, in float64."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.outer(positions.to(torch.float64).reshape(-1), inv_freq).reshape(*positions.shape, d // 2)
    x = x.to(torch.float64)
    if convention == "interleaved":
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
        return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    rotate_half = torch.cat((-x[..., d // 2:], x[..., : d // 2]), -1)
    return x * cos + rotate_half * sin


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_rope_matches_plain_torch(convention, base):
    torch.manual_seed(1)
    x = torch.randn(3, 4, 7, 64)  # [B, H, T, d]
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [90, 91, 92, 93, 94, 95, 96], [131000 + i for i in range(7)]])
    want = rope_reference(x, positions[:, None, :], base, convention)
    got = apply_rope(x, positions, base=base, convention=convention)
    assert got.dtype == torch.float32
    # float32 rotation of |x| ≲ 4 by exact float64 angles: a few float32 roundings.
    assert (got.double() - want).abs().max() < 2e-6 * want.abs().max()
    assert torch.allclose(apply_rope(x.double(), positions[0], base=base, convention=convention),
                          rope_reference(x, positions[0], base, convention), atol=1e-12)
    other = "half_split" if convention == "interleaved" else "interleaved"
    assert not torch.allclose(got, apply_rope(x, positions, base=base, convention=other), atol=1e-3)


def test_rope_errors_name_the_argument():
    with pytest.raises(ValueError, match="rope: 'neox' is not a convention"):
        CausalSelfAttention(64, 2, rope="neox")
    with pytest.raises(ValueError, match="rope_base: 0.5 is not a finite number above 1"):
        CausalSelfAttention(64, 2, rope="interleaved", rope_base=0.5)
    with pytest.raises(ValueError, match="head_dim 5 is odd"):
        apply_rope(torch.randn(2, 5), torch.arange(2))
    with pytest.raises(ValueError, match=r"positions: shape \(3,\)"):
        apply_rope(torch.randn(2, 4), torch.arange(3))


def llama_attention(block, x, positions, convention):
    """The block's computation in plain torch: projections, RoPE, GQA by repeat_interleave,
    causal softmax over all earlier positions."""
    B, T, _ = x.shape
    q = block.q_proj(x).view(B, T, block.n_head, block.head_dim).transpose(1, 2)
    k = block.k_proj(x).view(B, T, block.n_kv_head, block.head_dim).transpose(1, 2)
    v = block.v_proj(x).view(B, T, block.n_kv_head, block.head_dim).transpose(1, 2)
    q, k = (rope_reference(t, positions, block.rope_base, convention).float() for t in (q, k))
    group = block.n_head // block.n_kv_head
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-2, -1) / math.sqrt(block.head_dim)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.softmax(s, -1) @ v
    return block.o_proj(y.transpose(1, 2).reshape(B, T, -1))


@pytest.mark.parametrize("convention", ["interleaved", "half_split"])
def test_the_block_with_rope_is_llamas_with_and_without_a_ragged_cache(convention):
    torch.manual_seed(2)
    block = CausalSelfAttention(128, 8, 2, rope=convention, rope_base=10000.0).eval()
    prompts = [torch.randn(1, 11, 128), torch.randn(1, 4, 128)]  # two sequences of different lengths
    steps = torch.randn(2, 3, 128)
    with torch.no_grad():
        whole = [torch.cat((p, steps[b:b + 1]), 1) for b, p in enumerate(prompts)]
        for w in whole:
            want = llama_attention(block, w, torch.arange(w.shape[1]), convention)
            assert torch.allclose(block(w), want, atol=1e-5)
        cache = KVCache(1, 2, 16, 256)
        seqs = [cache.add_sequence(), cache.add_sequence()]
        for s, p in zip(seqs, prompts):  # prefill each prompt alone
            block(p, cache, [s])
        out = torch.cat([block(steps[:, t:t + 1], cache, seqs) for t in range(3)], 1)  # decode together
        for b, w in enumerate(whole):
            want = llama_attention(block, w, torch.arange(w.shape[1]), convention)[0, -3:]
            assert torch.allclose(out[b], want, atol=1e-5), (b, (out[b] - want).abs().max())


def test_the_torch_cache_takes_named_scale_policies():
    cache, (s,) = filled_cache()
    q = torch.randn(1, 4, 1, 32)
    assert torch.equal(cache.attention(0, [s], q, scale="inv_d"), cache.attention(0, [s], q, scale=1 / 32))
    assert torch.equal(cache.attention(0, [s], q, scale="inv_sqrt_d"), cache.attention(0, [s], q))
