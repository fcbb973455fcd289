"""`attnlab attention` and `attnlab attention-backward` on files written by NumPy,
checked against the PyTorch formula (torch_reference.py) and the Python module."""

import os
import subprocess

import numpy as np
import pytest

import attnlab

CLI = os.environ.get("ATTNLAB_CLI")
pytestmark = pytest.mark.skipif(not CLI, reason="ATTNLAB_CLI is not set (ctest sets it to the built attnlab program)")


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=60)


def save(path, a):
    np.save(path, a)
    return path


@pytest.fixture
def problem(tmp_path, rng):
    def make(dtype=np.float64, B=2, Hq=4, Hkv=2, Nq=5, Nk=7, d=8, dv=3, byteorder="="):
        arrays = dict(q=rng.standard_normal((B, Hq, Nq, d)), k=rng.standard_normal((B, Hkv, Nk, d)),
                      v=rng.standard_normal((B, Hkv, Nk, dv)), do=rng.standard_normal((B, Hq, Nq, dv)))
        arrays = {n: a.astype(np.dtype(dtype).newbyteorder(byteorder)) for n, a in arrays.items()}
        paths = {n: save(tmp_path / f"{n}.npy", a) for n, a in arrays.items()}
        return arrays, paths

    return make


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("byteorder", ["<", ">"])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_cli_matches_torch_and_the_module(tmp_path, rng, problem, dtype, byteorder, mask_kind):
    ref = pytest.importorskip("torch_reference", reason="python3-torch is not installed")
    a, p = problem(dtype, byteorder=byteorder)
    mask, mask_args = None, []
    if mask_kind == "bool":
        mask = rng.random((1, 1, 5, 7)) < 0.7  # broadcast over batch and heads
        mask_args = ["--mask", save(tmp_path / "m.npy", mask)]
    elif mask_kind == "float":
        mask = rng.standard_normal((5, 7)).astype(dtype)
        mask_args = ["--mask", save(tmp_path / "m.npy", mask)]
    common = ["--q", p["q"], "--k", p["k"], "--v", p["v"], *mask_args, "--causal", "--scale", "0.3"]
    r = run("attention", *common, "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy", "--threads", 1)
    assert r.returncode == 0, r.stderr
    r = run("attention-backward", *common, "--grad-out", p["do"], "--dq", tmp_path / "dq.npy", "--dk",
            tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy")
    assert r.returncode == 0, r.stderr
    got = {n: np.load(tmp_path / f"{n}.npy") for n in ("o", "l", "dq", "dk", "dv")}
    assert got["o"].dtype == np.dtype(dtype) and got["o"].shape == (2, 4, 5, 3) and got["l"].shape == (2, 4, 5)
    want = ref.attention(a["q"], a["k"], a["v"], mask, causal="top_left", scale=0.3, grad_out=a["do"])
    ref.assert_close(got["o"], want["out"], dtype, "out")
    ref.assert_close(got["l"], want["lse"], dtype, "lse")
    for g in ("dq", "dk", "dv"):
        ref.assert_close(got[g], want[g], dtype, g)
    # The same engine or reference as the Python module: identical bits.
    out, lse = attnlab.attention_forward(a["q"], a["k"], a["v"], mask, causal=True, scale=0.3)
    np.testing.assert_array_equal(got["o"], out)
    np.testing.assert_array_equal(got["l"], lse)


def test_bottom_right_causal_with_grouped_heads(tmp_path, problem):
    ref = pytest.importorskip("torch_reference", reason="python3-torch is not installed")
    a, p = problem(np.float64, Nq=3, Nk=7)
    common = ["--q", p["q"], "--k", p["k"], "--v", p["v"], "--causal", "--causal-align", "bottom_right"]
    assert run("attention", *common, "--out", tmp_path / "o.npy").returncode == 0
    r = run("attention-backward", *common, "--grad-out", p["do"], "--dq", tmp_path / "dq.npy", "--dk", tmp_path / "dk.npy",
            "--dv", tmp_path / "dv.npy")
    assert r.returncode == 0, r.stderr
    want = ref.attention(a["q"], a["k"], a["v"], causal="bottom_right", grad_out=a["do"])
    ref.assert_close(np.load(tmp_path / "o.npy"), want["out"], np.float64, "out")
    for g in ("dq", "dk", "dv"):
        ref.assert_close(np.load(tmp_path / f"{g}.npy"), want[g], np.float64, g)


def test_three_dimensional_files_and_outputs_numpy_reads(tmp_path, rng):
    q, k, v = (rng.standard_normal((3, 4, 8)) for _ in range(3))
    paths = [save(tmp_path / f"{n}.npy", x) for n, x in zip("qkv", (q, k, v))]
    r = run("attention", "--q", paths[0], "--k", paths[1], "--v", paths[2], "--out", tmp_path / "o.npy")
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "o.npy")
    assert out.shape == (3, 4, 8) and out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, attnlab.scaled_dot_product_attention(q, k, v))


def test_bad_files_fail_cleanly_and_keep_existing_outputs(tmp_path, problem):
    a, p = problem(np.float64)
    out = tmp_path / "o.npy"
    r = run("attention", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--out", out)
    assert r.returncode == 0
    before = out.read_bytes()

    def fails(*args, message):
        r = run("attention", *args, "--out", out)
        assert r.returncode != 0 and message in r.stderr, r.stderr
        assert out.read_bytes() == before  # the earlier output survives
        assert sorted(f.name for f in tmp_path.iterdir() if ".tmp." in f.name) == []

    truncated = tmp_path / "trunc.npy"
    truncated.write_bytes(p["q"].read_bytes()[:-5])
    fails("--q", truncated, "--k", p["k"], "--v", p["v"], message="truncated .npy file")
    fortran = save(tmp_path / "f.npy", np.asfortranarray(a["q"]))
    fails("--q", fortran, "--k", p["k"], "--v", p["v"], message="Fortran-order arrays are not supported")
    ints = save(tmp_path / "i.npy", np.zeros((2, 4, 5, 8), dtype=np.int64))
    fails("--q", ints, "--k", p["k"], "--v", p["v"], message="dtype '<i8' is not supported")
    garbage = tmp_path / "g.npy"
    garbage.write_bytes(b"not numpy at all")
    fails("--q", garbage, "--k", p["k"], "--v", p["v"], message="not a .npy file")
    f32 = save(tmp_path / "k32.npy", a["k"].astype(np.float32))
    fails("--q", p["q"], "--k", f32, "--v", p["v"], message="must share one dtype")
    fails("--q", p["q"], "--k", p["k"], "--v", p["v"], "--mask", save(tmp_path / "bad_mask.npy", np.ones((4, 7), bool)),
          message="mask query length 4 does not broadcast to 5")
    fails("--q", p["q"], "--k", p["q"], "--v", p["v"], message="v: 2 heads does not match k's 4")
    fails("--q", p["q"], "--k", p["k"], "--v", p["v"], "--scale", "sideways", message="scale")
    fails("--q", tmp_path / "missing.npy", "--k", p["k"], "--v", p["v"], message="missing.npy: cannot open")
    # An output in a directory that does not exist: an error, and no partial file.
    r = run("attention", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--out", out, "--lse", tmp_path / "no" / "l.npy")
    assert r.returncode != 0 and "cannot write" in r.stderr, r.stderr
    assert out.read_bytes() == before  # not replaced either: all outputs or none


def to_bfloat16_bits(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_cli_16bit_files_match_the_module(tmp_path, rng, problem, half):
    """float16 '<f2' files, and bfloat16 as uint16 '<u2' with --bf16: the outputs in the
    inputs' dtype (lse float32), bit for bit the Python module's (the same engine)."""
    a, _ = problem(np.float32)
    if half == "float16":
        a = {n: x.astype(np.float16) for n, x in a.items()}
        flag, kw = [], {}
    else:
        a = {n: to_bfloat16_bits(x) for n, x in a.items()}
        flag, kw = ["--bf16"], {"dtype": "bfloat16"}
    p = {n: save(tmp_path / f"{n}16.npy", x) for n, x in a.items()}
    common = ["--q", p["q"], "--k", p["k"], "--v", p["v"], "--causal", *flag]
    r = run("attention", *common, "--out", tmp_path / "o.npy", "--lse", tmp_path / "l.npy")
    assert r.returncode == 0, r.stderr
    r = run("attention-backward", *common, "--grad-out", p["do"], "--dq", tmp_path / "dq.npy", "--dk",
            tmp_path / "dk.npy", "--dv", tmp_path / "dv.npy")
    assert r.returncode == 0, r.stderr
    got = {n: np.load(tmp_path / f"{n}.npy") for n in ("o", "l", "dq", "dk", "dv")}
    out, lse = attnlab.attention_forward(a["q"], a["k"], a["v"], causal=True, **kw)
    grads = attnlab.attention_backward(a["q"], a["k"], a["v"], out, lse, a["do"], causal=True, **kw)
    assert got["o"].dtype == a["q"].dtype and got["l"].dtype == np.float32
    np.testing.assert_array_equal(got["o"], out)
    np.testing.assert_array_equal(got["l"], lse)
    for n, g in zip(("dq", "dk", "dv"), grads):
        assert got[n].dtype == a["q"].dtype
        np.testing.assert_array_equal(got[n], g)
    # The same files without --bf16 (bfloat16), or with a float32 grad-out: named errors.
    if half == "bfloat16":
        r = run("attention", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--out", tmp_path / "x.npy")
        assert r.returncode == 2 and "dtype uint16; if it holds bfloat16 values, add --bf16" in r.stderr
    r = run("attention-backward", *common, "--grad-out", save(tmp_path / "g32.npy", np.zeros(a["do"].shape, np.float32)),
            "--dq", tmp_path / "x1.npy", "--dk", tmp_path / "x2.npy", "--dv", tmp_path / "x3.npy")
    assert r.returncode == 2 and "does not match q's" in r.stderr
