"""Shared fixtures. The PyTorch comparisons need Debian's python3-torch (1.13), which
`make test` installs through scripts/install-deps; without it they skip, saying why."""

import sys
import threading
import time

import numpy as np
import pytest


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


@pytest.fixture
def python_runs_during():
    """check(call): asserts that other Python threads run while call() computes. A thread
    keeps stamping the clock; if the call held the GIL the stamps would stop for the whole
    computation (a gap as long as the call), released they stay near the switch interval.
    A few tries, in case the machine is busy."""

    def check(call):
        stamps, stop = [], threading.Event()

        def stamper():
            while not stop.is_set():
                stamps.append(time.perf_counter())

        old = sys.getswitchinterval()
        sys.setswitchinterval(0.001)
        t = threading.Thread(target=stamper)
        t.start()
        try:
            for _ in range(5):
                t0 = time.perf_counter()
                call()
                t1 = time.perf_counter()
                window = [t0] + [s for s in stamps[-1000000:] if t0 < s < t1] + [t1]
                longest_gap = max(b - a for a, b in zip(window, window[1:]))
                if longest_gap < 0.5 * (t1 - t0):
                    break
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(old)
        assert longest_gap < 0.5 * (t1 - t0), f"no Python ran for {longest_gap:.3f} s of a {t1 - t0:.3f} s call"

    return check
