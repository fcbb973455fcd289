"""Hostile arguments to the extension's functions: each error names the argument and
what it should be, NaN fails every range, and thread counts follow the library's rule
(OpenMP's default clamped, a count the caller gave checked, threads that cannot be
created an exception, never the interpreter's exit)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import attnlab

Q = np.ones((1, 2, 4, 8), np.float32)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(dropout_p=0.5, seed=-1), ValueError, r"seed: -1 is outside \[0, 18446744073709551615\]"),
    (dict(dropout_p=0.5, seed=2**64), ValueError, r"seed: 18446744073709551616 is outside \[0, "),
    (dict(dropout_p=0.5, seed=1.5), TypeError, r"seed: 1.5 is not an integer"),
    (dict(window_size=(2**63, 0)), ValueError, r"window_size: 9223372036854775808 is outside \["),
    (dict(threads=2.5), TypeError, r"threads: 2.5 is not an integer \(expected an int in \[0, 1024\]\)"),
    (dict(threads=2**70), ValueError, r"threads: 1180591620717411303424 is outside \[0, 1024\]"),
    (dict(softcap=10**400), ValueError, r"softcap: 1000.* cannot be a double"),
    (dict(dropout_p=10**400), ValueError, r"dropout_p: 1000.* cannot be a double"),
    (dict(dropout_p="0.5"), TypeError, r"dropout_p: expected a probability in \[0, 1\), got <class 'str'>"),
])
def test_argument_errors_name_the_argument_and_its_range(kwargs, error, message):
    with pytest.raises(error, match=message):
        attnlab.attention_forward(Q, Q, Q, **kwargs)


def test_sdpa_seed_errors_name_the_seed():
    for seed in (-1, 1.5):
        with pytest.raises((ValueError, TypeError), match="seed: "):
            attnlab.scaled_dot_product_attention(Q, Q, Q, dropout_p=0.5, seed=seed)


def test_nan_fails_every_numeric_range():
    nan = float("nan")
    for kwargs, name in [(dict(dropout_p=nan), "dropout_p"), (dict(softcap=nan), "softcap"),
                         (dict(scale=nan), "scale"), (dict(alibi_slopes=[nan, 0.5]), "alibi_slopes"),
                         (dict(sinks=[0.0, nan]), "sinks"), (dict(threads=nan), "threads"),
                         (dict(window_size=(nan, 0)), "window_size"), (dict(seed=nan, dropout_p=0.5), "seed")]:
        with pytest.raises((ValueError, TypeError), match=name):
            attnlab.attention_forward(Q, Q, Q, **kwargs)
    with pytest.raises(ValueError, match="dropout_p"):
        attnlab.scaled_dot_product_attention(Q, Q, Q, dropout_p=nan)


def run_python(code, env=None):
    """Runs code in a fresh interpreter (with this one's attnlab), returning (rc, stdout, stderr)."""
    full_env = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                       timeout=300)
    return r.returncode, r.stdout, r.stderr


def test_a_huge_omp_num_threads_is_clamped_not_a_crash():
    # The default team (threads=0) took OMP_NUM_THREADS=100000 unchecked: a segfault in libgomp.
    rc, out, err = run_python("""
        import numpy as np, attnlab
        q = np.ones((1, 2, 40, 8), np.float32)
        o = attnlab.attention_forward(q, q, q)[0]
        print("ran", o.shape)
    """, env={"OMP_NUM_THREADS": "100000"})
    assert rc == 0 and "ran (1, 2, 40, 8)" in out, (rc, out, err)


def test_threads_that_cannot_be_created_are_an_exception_and_the_interpreter_lives():
    # libgomp printed "Thread creation failed" and exited the interpreter (rc 1).
    rc, out, err = run_python("""
        import resource, numpy as np, attnlab
        q = np.ones((1, 2, 40, 8), np.float32)
        attnlab.attention_forward(q, q, q, threads=1)
        size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (20 << 20), resource.RLIM_INFINITY))
        try:
            attnlab.attention_forward(q, q, q, threads=16)
            print("no error")
        except MemoryError as e:
            print("MemoryError:", e)
        print("alive")
    """)
    assert rc == 0, (rc, out, err)
    assert "MemoryError: engine: threads: cannot start 16 threads" in out, out
    assert "alive" in out
