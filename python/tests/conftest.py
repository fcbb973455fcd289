"""Shared fixtures. The PyTorch comparisons need Debian's python3-torch (1.13), which
`make test` installs through scripts/install-deps; without it they skip, saying why."""

import numpy as np
import pytest


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="python3-torch is not installed (scripts/install-deps installs it)")


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
