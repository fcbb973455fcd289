"""The package itself: its version is the C++ project's, and `import attnlab` never needs torch."""

import pathlib
import re
import subprocess
import sys

import attnlab

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cmake_project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(attnlab\s+VERSION\s+([0-9.]+)", text).group(1)


def test_version_is_the_cmake_project_version():
    assert attnlab.__version__ == cmake_project_version()
    assert attnlab._attnlab.__version__ == attnlab.__version__


def run_fresh(code):
    """Runs `code` in a fresh interpreter (a clean sys.modules) and returns its stdout."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_import_attnlab_does_not_import_torch():
    out = run_fresh("import sys, attnlab, attnlab.experiments\n"
                    "print('torch' in sys.modules, 'attnlab.torch' in sys.modules)")
    assert out.split() == ["False", "False"]


def test_attnlab_torch_without_torch_says_what_is_missing():
    # sys.modules["torch"] = None makes `import torch` fail as if it were not installed.
    out = run_fresh("import sys\n"
                    "sys.modules['torch'] = None\n"
                    "import attnlab\n"
                    "try:\n"
                    "    import attnlab.torch\n"
                    "except ImportError as e:\n"
                    "    print(e)\n")
    assert "attnlab.torch needs PyTorch (Debian: apt-get install python3-torch)" in out
