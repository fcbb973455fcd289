"""attnlab.KVCache over NumPy, attnlab.torch's cache and attention block, and the generation
example (the same tokens with and without the cache)."""

import pathlib
import re
import runpy
import sys

import numpy as np
import pytest

import attnlab
from attnlab._results import ForwardResult

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "generate_with_cache.py"
TYPES = ["float32", "bfloat16", "float16", "int8", "int4", "fp8_e4m3"]


def filled(rng, key_type="float32", value_type="float32", lengths=(5, 40, 70)):
    cache = attnlab.KVCache(layers=2, kv_heads=2, head_dim=32, max_tokens=512, key_type=key_type,
                            value_type=value_type, block_tokens=16)
    seqs = []
    for n in lengths:
        s = cache.add_sequence()
        seqs.append(s)
        cache.append(1, s, rng.standard_normal((2, n, 32), dtype=np.float32),
                     rng.standard_normal((2, n, 32), dtype=np.float32))
    return cache, seqs


@pytest.mark.parametrize("kind", TYPES)
def test_attention_is_the_engine_over_the_gathered_cache(rng, kind):
    cache, seqs = filled(rng, kind, kind)
    q = rng.standard_normal((3, 4, 2, 32), dtype=np.float32)
    result = cache.attention(1, seqs, q, return_lse=True)
    out, lse = result  # a ForwardResult, as attention_forward's: unpacks, and names its fields
    assert isinstance(result, ForwardResult)
    assert result.out is out and result.lse is lse
    assert out.shape == (3, 4, 2, 32) and lse.shape == (3, 4, 2)
    for i, s in enumerate(seqs):
        k, v = cache.gather(1, s)
        o, l = attnlab.attention_forward(q[i], k, v, causal="bottom_right")
        # Decoding reads the blocks in place: float32 attention over the same dequantized values,
        # rounded in another order than the engine's (the C++ tests hold it to the accuracy rule
        # against the double reference); here a few float32 ulps of |O| ≤ 4 and |L| ≤ 8.
        assert np.allclose(o, out[i], rtol=0, atol=4e-6) and np.allclose(l, lse[i], rtol=0, atol=4e-6)


def test_chunked_prefill_with_a_chunk_per_sequence(rng):
    cache, seqs = filled(rng)
    q = rng.standard_normal((4, 1 + 7 + 3, 32), dtype=np.float32)
    out = cache.attention(1, seqs, q, query_lengths=[1, 7, 3], softcap=20.0, window_size=(30, 0))
    k, v = cache.gather(1, seqs[1])
    o, _ = attnlab.attention_forward(q[:, 1:8], k, v, causal="bottom_right", softcap=20.0,
                                     window_size=(30, 0))
    assert np.array_equal(o, out[:, 1:8])


def test_quantized_rows_are_within_their_step(rng):
    cache = attnlab.KVCache(1, 1, 64, 64, key_type="int8", value_type="int4")
    s = cache.add_sequence()
    k = rng.standard_normal((1, 3, 64), dtype=np.float32)
    cache.append(0, s, k, k)
    k8, v4 = cache.gather(0, s)
    amax = np.abs(k.reshape(1, 3, 2, 32)).max(-1, keepdims=True)
    assert np.all(np.abs(k8 - k).reshape(1, 3, 2, 32) <= amax / 254 * 1.0001)
    assert np.all(np.abs(v4 - k).reshape(1, 3, 2, 32) <= amax / 8 * 1.0001)


def test_fork_shares_and_copies_on_write(rng):
    cache, seqs = filled(rng, lengths=(40,))
    k0, v0 = cache.gather(1, seqs[0])
    f = cache.fork(seqs[0], 0)  # layer 0 is empty: a fork of nothing
    cache.free(f)
    cache2 = attnlab.KVCache(1, 2, 32, 128, block_tokens=16)
    a = cache2.add_sequence()
    cache2.append(0, a, k0, v0)
    b = cache2.fork(a, 20)
    assert cache2.memory()["shared_blocks"] == 2
    new = np.ones((2, 1, 32), np.float32)
    cache2.append(0, b, new, new)
    assert cache2.memory()["used_blocks"] == 4
    kb, _ = cache2.gather(0, b)
    assert np.array_equal(kb[:, :20], k0[:, :20]) and np.array_equal(kb[:, 20:], new)
    ka, _ = cache2.gather(0, a)
    assert np.array_equal(ka, k0)


def test_errors_name_the_problem(rng):
    cache, seqs = filled(rng)
    bad = rng.standard_normal((2, 3, 32), dtype=np.float32)
    bad[1, 2, 5] = np.inf
    with pytest.raises(ValueError, match=r"k\[head 1, token 2, channel 5\] is inf"):
        cache.append(1, seqs[0], bad, bad)
    with pytest.raises(ValueError, match="unknown sequence 7"):
        cache.append(1, 7, bad, bad)
    with pytest.raises(ValueError, match="pool exhausted"):
        cache.append(1, seqs[0], *(2 * [rng.standard_normal((2, 500, 32), dtype=np.float32)]))
    with pytest.raises(ValueError, match="unknown element type 'q4_0'"):
        attnlab.KVCache(1, 1, 32, 32, key_type="q4_0")
    with pytest.raises(ValueError, match="holds no position in layer 0"):
        cache.attention(0, seqs, np.zeros((3, 2, 1, 32), np.float32))


def test_gather_names_itself_in_its_errors(rng):
    cache, seqs = filled(rng)  # it sizes its output by the sequence's length: errors are still gather's
    with pytest.raises(ValueError, match=r"^kv_cache gather: layer 2 is not in \[0, 2\)$"):
        cache.gather(2, seqs[0])
    with pytest.raises(ValueError, match=r"^kv_cache gather: unknown sequence 7"):
        cache.gather(0, 7)


def test_values_beyond_float32_are_refused_by_name_not_made_inf(rng):
    cache, seqs = filled(rng)
    k = rng.standard_normal((2, 3, 32))  # float64, converted to float32 by the binding
    v = rng.standard_normal((2, 3, 32), dtype=np.float32)
    k[1, 2, 5] = -1e39
    message = r"^k\[1, 2, 5\] = -1e\+39 does not fit float32 \(largest finite 3\.4028235e\+38\)"
    with pytest.raises(ValueError, match=message):
        cache.append(1, seqs[0], k, v)
    with pytest.raises(ValueError, match=r"^v\[0, 0, 0\] = 1e\+300 does not fit float32"):
        cache.append(1, seqs[0], v, np.full((2, 3, 32), 1e300))
    with pytest.raises(ValueError, match=r"^q\[0, 1, 0, 3\] = 4e\+38 does not fit float32"):
        q = np.zeros((1, 2, 1, 32))
        q[0, 1, 0, 3] = 4e38
        cache.attention(1, seqs[:1], q)
    k[1, 2, 5] = 3e38  # within float32's range: converted and stored
    cache.append(1, seqs[0], k, k)


def test_sizes_whose_product_leaves_memory_are_refused():
    # Each value in its range; the block (2^67 bytes) wrapped to 0 (SIGFPE) or to 2^28 (writes past the pool).
    for args, block in [((65536, 65536, 65536, 1), 65536), ((38737, 55424, 17408, 1), 61696)]:
        with pytest.raises(ValueError, match=r"beyond the limit of 140737488355328 bytes"):
            attnlab.KVCache(*args, block_tokens=block)


@pytest.mark.parametrize("rows", [1, 20])  # 1: the fused decode step; 20: gathered, then the engine
def test_every_path_refuses_the_same_options(rng, rows):
    cache, seqs = filled(rng, lengths=(40,))
    q = rng.standard_normal((1, 4, rows, 32), dtype=np.float32)
    for options, message in [(dict(alibi_slopes=[0.5]), r"alibi_slopes: 1 value; expected Hq = 4"),
                             (dict(sinks=[0.5]), r"sinks: 1 value; expected one per query head \(Hq = 4\)"),
                             (dict(window_size=(-5, 0)), r"window_size: -5 is outside \[-1,"),
                             (dict(softcap=0.0), r"softcap: 0 must be a positive finite number"),
                             (dict(softcap=-1.0), r"softcap: -1 must be a positive finite number"),
                             (dict(softcap=float("nan")), r"softcap: nan must be a positive finite number"),
                             (dict(alibi_slopes=[0.5, float("nan"), 0.5, 0.5]), r"alibi_slopes: non-finite value nan"),
                             (dict(sinks=[0.5, 0.5, float("inf"), 0.5]), r"sinks: non-finite value inf"),
                             (dict(alibi_slopes=[-1e38] * 4), r"alibi_slopes: -1e\+38 at \[0\] times the farthest")]:
        with pytest.raises(ValueError, match=message):
            cache.attention(1, seqs, q, **options)
    assert np.isfinite(cache.attention(1, seqs, q, alibi_slopes=[0.5] * 4)).all()


def test_integer_arguments_are_named_with_their_range(rng):
    cache, seqs = filled(rng)
    with pytest.raises(TypeError, match=r"layers: 1.5 is not an integer"):
        attnlab.KVCache(1.5, 1, 32, 64)
    with pytest.raises(TypeError, match=r"seq: 'a' is not an integer"):
        cache.fork("a", 1)
    with pytest.raises(ValueError, match=r"tokens: 1180591620717411303424 is outside \[0, 1099511627776\]"):
        cache.fork(seqs[0], 2**70)
    q = rng.standard_normal((1, 2, 1, 32), dtype=np.float32)
    with pytest.raises(ValueError, match=r"threads: 1099511627776 is outside \[0, 1024\]"):
        cache.attention(1, seqs[:1], q, threads=2**40)
    with pytest.raises(ValueError, match=r"layer: -1 is outside"):
        cache.length(seqs[0], -1)
    with pytest.raises(ValueError, match=r"^k: 2 dimensions"):  # k first, as written
        cache.append(1, seqs[0], np.ones((2, 32), np.float32), np.ones((2, 32), np.float32))


def test_torch_block_with_and_without_the_cache(torch):
    import attnlab.torch as at
    torch.manual_seed(0)
    block = at.CausalSelfAttention(48, n_head=6, n_kv_head=2).eval()
    x = torch.randn(2, 10, 48)
    with torch.no_grad():
        full = block(x)
        cache = at.KVCache(layers=1, kv_heads=2, head_dim=8, max_tokens=256)  # a block (128 positions) each
        seqs = [cache.add_sequence(), cache.add_sequence()]
        parts = [block(x[:, :6], cache, seqs)] + [block(x[:, t:t + 1], cache, seqs) for t in range(6, 10)]
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length(seqs[1]) == 10
    y = block(x.requires_grad_())
    y.sum().backward()
    assert x.grad is not None


def run_generation_example(kind, capsys, monkeypatch, *extra):
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--steps", "24", *extra] + (["--cache-type", kind] if kind else []))
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    return done.value.code, capsys.readouterr().out


def test_generation_example_gives_the_same_tokens(torch, capsys, monkeypatch):
    code, out = run_generation_example("float32", capsys, monkeypatch)
    assert code == 0 and "tokens identical with and without the cache" in out


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_generation_example_compares_a_lossy_cache_by_a_tolerance(torch, kind, capsys, monkeypatch):
    code, out = run_generation_example(kind, capsys, monkeypatch)
    assert code == 0, out
    assert re.search(rf"cache {kind} \(lossy\): logits [0-9.e-]+ from the float32 cache's on its tokens, within "
                     r"the tolerance [0-9.e-]+; its own greedy tokens agree with float32's at \d+ of 48 steps", out), out


def test_generation_example_lists_the_cache_types(torch, capsys, monkeypatch):
    code, out = run_generation_example(None, capsys, monkeypatch, "--help")
    assert code == 0
    for kind in ("float32", "bfloat16", "float16", "int8", "int4", "fp8_e4m3"):
        assert kind in out
    code, _ = run_generation_example("q4_0", capsys, monkeypatch)
    assert code == 2  # argparse: invalid choice


def test_attention_takes_named_scale_policies():  # as attention_forward does; a float scale only, before
    cache = attnlab.KVCache(1, 2, 32, 256)
    s = cache.add_sequence()
    rng = np.random.default_rng(0)
    cache.append(0, s, rng.standard_normal((2, 5, 32), dtype=np.float32), rng.standard_normal((2, 5, 32), dtype=np.float32))
    q = rng.standard_normal((1, 4, 1, 32), dtype=np.float32)
    assert np.array_equal(cache.attention(0, [s], q, scale="inv_d"), cache.attention(0, [s], q, scale=1 / 32))
    assert np.array_equal(cache.attention(0, [s], q, scale="inv_sqrt_d"), cache.attention(0, [s], q))
    with pytest.raises(ValueError, match="scale"):
        cache.attention(0, [s], q, scale="no_such_policy")


def outlier_keys(rng, heads=2, n=600, d=128):
    """docs/python.md's outlier keys: 4 channels per head of offset 20 and spread 4."""
    k = rng.standard_normal((heads, n, d), dtype=np.float32)
    k[:, :, [3, 40, 77, 101]] = 20 + 4 * k[:, :, [3, 40, 77, 101]]
    return k, rng.standard_normal((heads, n, d), dtype=np.float32)


def test_rotation_and_centring_are_invisible_to_the_caller(rng):
    k, v = outlier_keys(rng)
    plain = attnlab.KVCache(1, 2, 128, 1024)
    turned = attnlab.KVCache(1, 2, 128, 1024, key_rotation="hadamard", value_rotation="hadamard", center_keys=True)
    assert (turned.key_rotation, turned.value_rotation, turned.center_keys) == ("hadamard", "hadamard", True)
    assert (plain.key_rotation, plain.center_keys) == ("none", False)
    for cache in (plain, turned):
        s = cache.add_sequence()
        cache.append(0, s, k[:, :300], v[:, :300])  # the first rows fix the keys' means
        cache.append(0, s, k[:, 300:], v[:, 300:])
    gk, gv = turned.gather(0, 0)
    np.testing.assert_allclose(gk, k, atol=2e-5 * np.abs(k).max())
    np.testing.assert_allclose(gv, v, atol=2e-5 * np.abs(v).max())
    q = rng.standard_normal((1, 8, 3, 128), dtype=np.float32)
    for options in ({}, {"sinks": [0.5] * 8}, {"softcap": 4.0}):
        want = plain.attention(0, [0], q, return_lse=True, **options)
        got = turned.attention(0, [0], q, return_lse=True, **options)
        np.testing.assert_allclose(got.out, want.out, atol=2e-5)
        np.testing.assert_allclose(got.lse, want.lse, rtol=2e-5)


def test_rotated_centred_int4_keys_stay_usable_on_outlier_keys(rng):
    k, v = outlier_keys(rng)
    q = rng.standard_normal((1, 8, 1, 128), dtype=np.float32)
    out = {}
    for name, extra in (("float32", {}), ("plain", {"key_type": "int4"}),
                        ("turned", {"key_type": "int4", "key_rotation": "hadamard", "center_keys": True})):
        cache = attnlab.KVCache(1, 2, 128, 1024, **extra)
        cache.append(0, cache.add_sequence(), k, v)
        out[name] = cache.attention(0, [0], q)
    error = {name: np.abs(out[name] - out["float32"]).max() / np.abs(out["float32"]).max() for name in ("plain", "turned")}
    assert error["turned"] < error["plain"] / 3, error


def test_rotation_options_are_checked_by_name():
    with pytest.raises(ValueError, match="unknown rotation 'walsh'"):
        attnlab.KVCache(1, 2, 128, 1024, key_rotation="walsh")
    with pytest.raises(TypeError, match="center_keys"):
        attnlab.KVCache(1, 2, 128, 1024, center_keys=1)
