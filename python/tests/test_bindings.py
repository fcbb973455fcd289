"""How the bindings take NumPy arrays and report bad input (no torch needed)."""

import sys
import threading
import time

import numpy as np
import pytest

import attnlab


def qkv(rng, dtype=np.float64, shape=(2, 3, 5, 8)):
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


def test_module_surface():
    for name in set(attnlab.__all__) - {"experiments"}:
        assert callable(getattr(attnlab, name)), name
        assert getattr(attnlab, name).__doc__, name
    assert attnlab.scaled_dot_product_attention.__doc__.count("enable_gqa") >= 1
    assert isinstance(attnlab.engine_target(), str)
    assert attnlab.release_cached_memory() is None
    assert callable(attnlab.experiments.run)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_strided_and_foreign_layouts_give_the_same_answer(rng, dtype):
    q, k, v = qkv(rng, dtype, (2, 3, 6, 8))
    want = attnlab.scaled_dot_product_attention(q, k, v)
    # Views with non-unit strides: every other key, a transposed head/seq layout.
    wide = np.zeros((2, 3, 12, 8), dtype=dtype)
    wide[:, :, ::2] = k
    k_t = np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert not k_t.flags.c_contiguous
    for k2 in (wide[:, :, ::2], k_t, k.astype(k.dtype.newbyteorder(">")), np.asfortranarray(k)):
        np.testing.assert_array_equal(attnlab.scaled_dot_product_attention(q, k2, v), want)
    # Negative strides are copied (TensorView strides are non-negative).
    np.testing.assert_array_equal(attnlab.scaled_dot_product_attention(q[:, :, ::-1][:, :, ::-1], k, v), want)
    # Inputs are never written to.
    before = [x.copy() for x in (q, k, v)]
    attnlab.attention_forward(q, k, v, causal=True)
    for x, b in zip((q, k, v), before):
        np.testing.assert_array_equal(x, b)


def test_a_scalar_float_mask_broadcasts(rng):
    q, k, v = qkv(rng)
    # A constant added to every score leaves the softmax unchanged (up to rounding).
    np.testing.assert_allclose(attnlab.scaled_dot_product_attention(q, k, v, attn_mask=np.float64(3.0)),
                               attnlab.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-13)


def test_lists_are_accepted_as_float64():
    x = [[0.0, 1.0], [2.0, 3.0]]
    out = attnlab.scaled_dot_product_attention(x, x, x)
    assert out.dtype == np.float64 and out.shape == (2, 2)


def test_dtype_errors_are_type_errors(rng):
    q, k, v = qkv(rng)
    with pytest.raises(TypeError, match="query: dtype int64 is not supported"):
        attnlab.scaled_dot_product_attention(q.astype(np.int64), k, v)
    with pytest.raises(TypeError, match="key: dtype float32 does not match query's float64"):
        attnlab.scaled_dot_product_attention(q, k.astype(np.float32), v)
    with pytest.raises(TypeError, match="key: dtype float64 does not match query's float16"):
        attnlab.attention_forward(q.astype(np.float16), k, v)
    with pytest.raises(TypeError, match='query: dtype uint16 is not supported .*dtype="bfloat16"'):
        attnlab.attention_forward(q.astype(np.uint16), k.astype(np.uint16), v.astype(np.uint16))
    with pytest.raises(TypeError, match='query: dtype float64; with dtype="bfloat16"'):
        attnlab.attention_forward(q, k, v, dtype="bfloat16")
    with pytest.raises(TypeError, match="query: dtype float64 does not match dtype=float32"):
        attnlab.attention_forward(q, k, v, dtype=np.float32)
    with pytest.raises(TypeError, match="dtype: 'bfloat17' is not a dtype"):
        attnlab.attention_forward(q, k, v, dtype="bfloat17")
    with pytest.raises(TypeError, match="dtype: int32 is not one attention computes in"):
        attnlab.attention_forward(q, k, v, dtype="int32")
    np.testing.assert_array_equal(attnlab.attention_forward(q, k, v, dtype="float64").out,
                                  attnlab.attention_forward(q, k, v).out)
    with pytest.raises(TypeError, match="attn_mask: dtype int"):
        attnlab.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((5, 5), dtype=np.int32))
    with pytest.raises(TypeError, match="x: dtype"):
        attnlab.softmax(np.arange(3))


def test_library_errors_are_value_errors_with_its_messages(rng):
    q, k, v = qkv(rng)
    with pytest.raises(ValueError, match=r"k: head dim 4 does not match q's 8"):
        attnlab.scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"k: non-finite value nan at \[1, 2, 3, 4\]"):
        k2 = k.copy()
        k2[1, 2, 3, 4] = np.nan
        attnlab.attention_forward(q, k2, v)
    with pytest.raises(ValueError, match=r"dropout_p: 1.5 is outside \[0, 1\)"):
        attnlab.scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(ValueError, match="must be None when is_causal=True"):
        attnlab.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((5, 5), bool), is_causal=True)
    with pytest.raises(ValueError, match="attn_mask: query length 4 does not broadcast to 5"):
        attnlab.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), bool))
    with pytest.raises(ValueError, match="q: 3 heads is not a multiple of k's 2"):
        attnlab.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True)
    with pytest.raises(ValueError, match="key: 2 heads do not broadcast with query's 3"):
        attnlab.scaled_dot_product_attention(q, k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="empty tensor"):
        attnlab.scaled_dot_product_attention(q[:, :, :0], k, v)
    with pytest.raises(ValueError, match=r"query: 1 dimension\(s\); expected \[..., L, E\]"):
        attnlab.scaled_dot_product_attention(q[0, 0, 0], k, v)
    with pytest.raises(ValueError, match="at most 4"):
        attnlab.scaled_dot_product_attention(q[None], k[None], v[None])
    with pytest.raises(ValueError, match="key_lengths: value 9 for batch 1 is outside"):
        attnlab.attention_forward(q, k, v, key_lengths=[5, 9])
    with pytest.raises(ValueError, match="causal"):
        attnlab.attention_forward(q, k, v, causal="bottom_left")
    with pytest.raises(ValueError, match="threads: -1"):
        attnlab.attention_forward(q, k, v, threads=-1)
    with pytest.raises(ValueError, match=r"row \[1\]: softmax: input inf at index 0"):
        attnlab.softmax(np.array([[0.0, 1.0], [np.inf, 0.0]]))
    with pytest.raises(ValueError, match="target 7 is outside"):
        attnlab.softmax_cross_entropy(np.zeros((2, 3)), np.array([0, 7]))
    out, lse = attnlab.attention_forward(q, k, v)
    with pytest.raises(ValueError, match="lse"):
        attnlab.attention_backward(q, k, v, out, lse[..., :2], out)


def test_scale_policies_and_causal_spellings(rng):
    q, k, v = qkv(rng)
    a = attnlab.attention_forward(q, k, v, scale=None)[0]
    b = attnlab.attention_forward(q, k, v, scale="inv_sqrt_d")[0]
    c = attnlab.attention_forward(q, k, v, scale=1 / np.sqrt(8))[0]
    np.testing.assert_allclose(a, b, rtol=0, atol=0)
    np.testing.assert_allclose(a, c, rtol=1e-15, atol=1e-15)
    assert not np.allclose(a, attnlab.attention_forward(q, k, v, scale="none")[0])
    np.testing.assert_array_equal(attnlab.attention_forward(q, k, v, causal=True)[0],
                                  attnlab.attention_forward(q, k, v, causal="top_left")[0])
    with pytest.raises(TypeError):
        attnlab.attention_forward(q, k, v, scale=[1.0])


def test_gil_is_released_and_calls_are_thread_safe(rng):
    q, k, v = qkv(rng, np.float32, (2, 4, 64, 32))
    want = attnlab.scaled_dot_product_attention(q, k, v)
    results = [None] * 4

    def work(i):
        results[i] = attnlab.scaled_dot_product_attention(q, k, v)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)


def test_other_python_threads_run_during_a_call(rng, python_runs_during):
    q, k, v = qkv(rng, np.float64, (1, 8, 384, 64))
    python_runs_during(lambda: attnlab.attention_forward(q, k, v, check_finite=False))


@pytest.mark.parametrize("shape", [(5, 8), (3, 5, 8), (2, 3, 5, 8)])
def test_ranks_two_to_four_round_trip_through_forward_and_backward(rng, shape):
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    out, lse, diag = attnlab.attention_forward(q, k, v, diagnostics=True)
    assert out.shape == shape and lse.shape == shape[:-1] and diag["entropy"].shape == shape[:-1]
    grads = attnlab.attention_backward(q, k, v, out, lse, np.ones_like(out))
    # lse may also be given with its trailing unit axis, [..., Nq, 1].
    grads_unit = attnlab.attention_backward(q, k, v, out, lse[..., None], np.ones_like(out))
    for g, g2 in zip(grads, grads_unit):
        assert g.shape == shape
        np.testing.assert_array_equal(g, g2)
    # The same numbers as the 4-D call.
    q4, k4, v4 = (x.reshape((1,) * (4 - len(shape)) + shape) for x in (q, k, v))
    np.testing.assert_array_equal(attnlab.attention_forward(q4, k4, v4)[0].reshape(shape), out)


# Issue 18 (reliability): crashes and unvalidated numbers, each as a clear error.
def test_a_huge_thread_count_is_an_error_not_a_crash():
    q = np.ones((1, 1, 4, 8), np.float32)
    for threads in (99999, 65536, attnlab.__dict__.get("MAX_THREADS", 1024) + 1):
        with pytest.raises(ValueError, match="threads"):
            attnlab.attention_forward(q, q, q, threads=threads)
    attnlab.attention_forward(q, q, q, threads=1024)  # the bound itself runs


def test_the_softmax_derivatives_reject_non_finite_input_like_softmax():
    s = np.array([0.5, np.nan, 0.5])
    for f in (lambda: attnlab.softmax_jacobian(s), lambda: attnlab.softmax_vjp(s, np.ones(3)),
              lambda: attnlab.softmax_vjp(np.full(3, 1 / 3), np.array([1.0, np.inf, 0.0]))):
        with pytest.raises(ValueError, match="non-finite"):
            f()


def test_unclear_messages_now_name_the_problem():
    # Issue 18: these gave "dtype float64", a wrapped -1, or pybind's "Unable to cast".
    q = np.ones((1, 1, 2, 4), np.float32)
    with pytest.raises(ValueError, match=r"key_lengths: empty; give one length per batch entry"):
        attnlab.attention_forward(q, q, q, key_lengths=[])
    with pytest.raises(ValueError, match=r"key_lengths: value 9223372036854775813 for batch 0 is too large"):
        attnlab.attention_forward(q, q, q, key_lengths=np.array([2**63 + 5], np.uint64))
    with pytest.raises(ValueError, match=r"scale: 1000000000.* cannot be a double \(OverflowError"):
        attnlab.attention_forward(q, q, q, scale=10**400)
    # NumPy scalars are numbers like any other.
    a, _ = attnlab.attention_forward(q, q, q, scale=np.float32(0.5))
    b, _ = attnlab.attention_forward(q, q, q, scale=0.5)
    np.testing.assert_array_equal(a, b)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("dtype,shape", [(np.float64, (1, 3, 4096, 64)), (np.float32, (1, 8, 16384, 64))])
def test_a_signal_stops_a_long_call_promptly(dtype, shape):
    # Issue 18: Ctrl-C waited for the whole call (8 s for a long float64 one). The library
    # polls between tiles (engine) and rows (reference); the binding runs Python's signal
    # handlers there and raises what they raise. A handler of our own, not KeyboardInterrupt,
    # so that a late signal cannot stop pytest itself.
    import os
    import signal

    q = np.full(shape, 0.01, dtype)
    old = signal.signal(signal.SIGINT, lambda *_: (_ for _ in ()).throw(_Stop()))
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    try:
        t0 = time.perf_counter()
        timer.start()
        with pytest.raises(_Stop):
            attnlab.attention_forward(q, q, q, threads=1)
        elapsed = time.perf_counter() - t0
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, old)
    assert elapsed < 1.0, f"stopped only after {elapsed:.2f} s (the whole call takes over 3 s)"


def _run_fresh(tmp_path, code):
    """Runs `code` in a fresh interpreter (a peak RSS, an address-space cap) and returns its stdout."""
    import subprocess

    script = tmp_path / "fresh.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_tiny_head_dims_do_not_multiply_memory(tmp_path):
    # Issue 18: with d = dv = 1 the engine padded V rows to 16 floats and packed them
    # whole: a 64 MB key array raised peak memory by 1087 MB. Now a head past the pack
    # budget copies V per key tile. Measured in a fresh process (ru_maxrss is a peak).
    grown_mb = float(_run_fresh(tmp_path,
        "import resource, numpy as np, attnlab\n"
        "k = np.ones((1, 1, 1 << 22, 1), np.float32)  # 16 MB\n"
        "q = np.ones((1, 1, 64, 1), np.float32)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "attnlab.attention_forward(q, k, k, threads=2)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)\n"))
    assert grown_mb < 48, f"peak grew by {grown_mb:.0f} MB for a 16 MB key array (was ~270 MB)"


def test_out_of_memory_is_memory_error_not_an_abort(tmp_path):
    # Issue 18: with `ulimit -v`, a float32 call whose scratch could not be allocated died
    # with "Abort ... Assert p". In a fresh process whose address space is capped 16 MB
    # above what it uses, the engine's 64 MB pack cannot be had: MemoryError naming the size.
    # (128 queries: the tiled path, which packs K and V; up to 64 would take the decode
    # path, which reads them in place and needs no such buffer.)
    out = _run_fresh(tmp_path,
        "import resource, numpy as np, attnlab\n"
        "q = np.ones((1, 1, 128, 64), np.float32)\n"
        "k = np.ones((1, 1, 131072, 64), np.float32)\n"
        "vm_kb = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize:'))\n"
        "resource.setrlimit(resource.RLIMIT_AS, ((vm_kb + 16 * 1024) * 1024, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "try:\n"
        "    attnlab.attention_forward(q, k, k, threads=1)\n"
        "    print('no error')\n"
        "except MemoryError as e:\n"
        "    print('MemoryError:', e)\n")
    assert "MemoryError: attention: out of memory allocating a working buffer of 67108864 bytes" in out, out


# ---- float16 and bfloat16 -----------------------------------------------------------

def to_bfloat16_bits(x):
    """float32 values rounded to bfloat16 (nearest, ties to even), as uint16 bit patterns."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bfloat16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def bf16_products():
    """Whether bfloat16 inputs' tiled forward runs on the CPU's bfloat16 dot products
    (docs/engine.md, "bfloat16 and float16"): an AVX-512 target on a CPU with AVX512_BF16."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read().split()
    except OSError:
        return False
    return attnlab.engine_target().startswith("AVX3") and "avx512_bf16" in flags


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_16bit_results_are_the_float32_engines_rounded_once(rng, half):
    """The promise of docs/engine.md: computed in float32 on the 16-bit inputs, rounded once,
    bit for bit; lse (float32) equal to the float32 engine's. Where bfloat16 runs on the
    bfloat16 dot products, out and lse are the float32 engine's within those products'
    roundings (P rounded to bfloat16 for P·V), and so are the gradients (P and dS rounded
    for theirs)."""
    q, k, v = qkv(rng, np.float32, shape=(2, 4, 70, 24))
    g = rng.standard_normal(q.shape).astype(np.float32)
    if half == "float16":
        q, k, v, g = (x.astype(np.float16) for x in (q, k, v, g))
        up, down, kw = (lambda x: x.astype(np.float32)), (lambda x: x.astype(np.float16)), {}
    else:
        q, k, v, g = (to_bfloat16_bits(x) for x in (q, k, v, g))
        up, down, kw = from_bfloat16_bits, to_bfloat16_bits, {"dtype": "bfloat16"}
    out, lse = attnlab.attention_forward(q, k, v, causal="bottom_right", **kw)
    out32, lse32 = attnlab.attention_forward(up(q), up(k), up(v), causal="bottom_right")
    assert out.dtype == q.dtype and lse.dtype == np.float32
    if half == "bfloat16" and bf16_products():
        # O's terms rounded by up to 2^-8 each, then O once: a few of bfloat16's roundings.
        assert np.abs(up(out) - out32).max() <= 2.0 ** -6 * np.abs(out32).max()
        assert not np.array_equal(out, down(out32))  # the products did run
        np.testing.assert_allclose(lse, lse32, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(out, down(out32))
        np.testing.assert_array_equal(lse, lse32)
    grads = attnlab.attention_backward(q, k, v, out, lse, g, causal="bottom_right", **kw)
    grads32 = attnlab.attention_backward(up(q), up(k), up(v), up(out), lse, up(g), causal="bottom_right")
    for name, x, x32 in zip(("dq", "dk", "dv"), grads, grads32):
        assert x.dtype == q.dtype, name
        if half == "bfloat16" and bf16_products():
            # Each term rounded by up to 2^-8 (P or dS), then the gradient once.
            assert np.abs(up(x) - x32).max() <= 2.0 ** -5 * np.abs(x32).max(), name
            assert not np.array_equal(x, down(x32)), name  # the products did run
        else:
            np.testing.assert_array_equal(x, down(x32), err_msg=name)
    # An int16 view of the bit patterns is read in place, the same bfloat16 values.
    if half == "bfloat16":
        out16, _ = attnlab.attention_forward(q.view(np.int16), k.view(np.int16), v.view(np.int16),
                                             causal="bottom_right", dtype="bfloat16")
        np.testing.assert_array_equal(out16, out)
    # scaled_dot_product_attention takes float16 too.
    if half == "float16":
        np.testing.assert_array_equal(attnlab.scaled_dot_product_attention(q, k, v), down(
            attnlab.scaled_dot_product_attention(up(q), up(k), up(v))))


def test_16bit_errors(rng):
    q, k, v = (x.astype(np.float16) for x in qkv(rng))
    out, lse = attnlab.attention_forward(q, k, v)
    with pytest.raises(TypeError, match="lse: dtype float16 should be float32 for query of dtype float16"):
        attnlab.attention_backward(q, k, v, out, lse.astype(np.float16), out)
    with pytest.raises(TypeError, match="grad_out: dtype float32 does not match query's float16"):
        attnlab.attention_backward(q, k, v, out, lse, out.astype(np.float32))
    bad = q.copy()
    bad[0, 1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"q: non-finite value nan at \[0, 1, 2, 3\]"):
        attnlab.attention_forward(bad, k, v)
    big = np.full((1, 1, 600, 8), 200, dtype=np.float16)
    o, l = attnlab.attention_forward(np.zeros_like(big), np.zeros((1, 1, 1, 8), np.float16),
                                     np.ones((1, 1, 1, 8), np.float16))
    with pytest.raises(ValueError, match="dv overflows float16"):
        attnlab.attention_backward(np.zeros_like(big), np.zeros((1, 1, 1, 8), np.float16),
                                   np.ones((1, 1, 1, 8), np.float16), o, l, big)
