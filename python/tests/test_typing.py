"""The stubs (_attnlab.pyi, _results.py) accepted by a type checker: mypy over a typed use of
the package (typing/usage.py). Skipped where mypy is not installed (Debian: python3-mypy)."""

import os
import pathlib
import subprocess
import sys

import pytest

import attnlab

USAGE = pathlib.Path(__file__).with_name("typing") / "usage.py"


def run_mypy(*paths):
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(attnlab.__file__).parent.parent))
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
                           "--python-executable", sys.executable, *map(str, paths)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def mypy_present():
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy is not installed (Debian: apt-get install python3-mypy)")


def test_stubs_accept_the_typed_usage(mypy_present):
    r = run_mypy(USAGE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_rejects_a_wrong_use(mypy_present, tmp_path):
    # The check can fail: a field the result does not have is an error.
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\nimport attnlab\n"
                   "r = attnlab.attention_forward(np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2, 2)))\n"
                   "r.dq\n")
    r = run_mypy(bad)
    assert r.returncode != 0 and "dq" in r.stdout, r.stdout + r.stderr
