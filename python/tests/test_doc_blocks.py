"""Every ```cpp, ```python and ```sh block of README.md and docs/*.md runs, or says why not.

Each block is found by its first line in BLOCKS below, which says what runs it:
- ("file", path): the block is that file, word for word, and ctest runs the file;
- ("run",): this test runs the block (Python, or sh with build/ meaning this build);
- ("flags",): a command too long to run here (a benchmark, the whole report, a synopsis with
  [placeholders]): each of its `--option`s must be in its command's --help;
- ("script", path, words): a test script of ctest runs it; the script must hold `words`;
- ("names", path, names): a fragment (undefined inputs); the names it calls must exist in path;
- ("cannot", why): not run, with the reason.
A block not listed, or a listed block no longer there, fails: a documentation change that
breaks or adds an example is a failing test.
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

import attnlab

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
PACKAGE_DIR = pathlib.Path(attnlab.__file__).resolve().parents[1]  # build/python
CLI = os.environ.get("ATTNLAB_CLI")

BLOCKS = {
    ("README.md", "make demo    # installs"): (
        "cannot", "builds everything and runs every test (minutes): it is what runs this test"),
    ("README.md", "make install-lib PREFIX=$HOME/.local"): (
        "script", "tests/install/check_install.sh", "cmake --install"),
    ("README.md", "/usr/bin/python3 -m venv --system-site-packages"): (
        "script", "python/tests/wheel_install.sh", "-m build --wheel --no-isolation"),
    ("README.md", "#include <attnlab/attnlab.hpp>", 0): ("file", "examples/engine_attention.cpp"),
    ("README.md", "#include <attnlab/attnlab.hpp>", 1): ("file", "examples/kv_cache_decode.cpp"),
    ("README.md", "g++ -std=c++20 -O2 -I include -I build/include"): (
        "script", "tests/install/check_build_tree.sh", "readme_compile_lines.sh"),
    ("README.md", "import numpy as np"): ("file", "python/examples/quickstart.py"),
    ("README.md", "import torch"): ("file", "python/examples/torch_attention.py"),
    ("README.md", "#!/bin/sh"): ("file", "examples/npy_attention.sh"),
    ("README.md", "build/attnlab bench --heads 2"): ("flags",),
    ("README.md", "./build/attnlab report [--out report]"): ("flags",),
    ("docs/lab.md", "attnlab report [--out DIR]"): ("flags",),
    ("docs/python.md", "PYTHONPATH=build/python /usr/bin/python3 -c"): ("run",),
    ("docs/python.md", "from attnlab import experiments"): ("run",),
    ("docs/python.md", "PYTHONPATH=build/python /usr/bin/python3 python/bench/torch_sdpa.py"): ("flags",),
    ("docs/python.md", "PYTHONPATH=build/python /usr/bin/python3 python/bench/op_overhead.py"): ("flags",),
    ("docs/python.md", "import numpy as np"): ("file", "python/examples/kv_cache.py"),
    ("docs/python.md", "import attnlab"): ("run",),
    ("docs/python.md", "attnlab attention --q Q.npy"): ("flags",),
    ("docs/scale-out.md", "const auto layout = attnlab::mpi::RingLayout::zigzag"): (
        "names", "src/mpi/include/attnlab/ring_attention.hpp",
        ("RingLayout", "zigzag", "global_row", "ring_attention_forward", "ring_attention_backward")),
    ("docs/scale-out.md", "mpirun -np 4 build/attnlab attention"): ("flags",),
    ("docs/scale-out.md", "from mpi4py import MPI"): (
        "names", "python/attnlab/mpi.py", ("def zigzag_rows", "def ring_attention")),
    ("docs/scale-out.md", "mpirun -np 2 build/attnlab report"): ("flags",),
    ("docs/engine.md", "attnlab tune --out decode-tuning.txt"): ("flags",),
    ("docs/lm.md", "attnlab run lm   "): ("flags",),
    ("docs/training.md", "attnlab run train   "): ("flags",),
    ("docs/training.md", "/usr/bin/time -v build/attnlab run train --full"): ("flags",),
}


def doc_blocks():
    """(doc, first line, index among blocks of that doc with that first line, language, body)."""
    found = []
    for doc in DOCS:
        seen = {}
        for m in re.finditer(r"^```(cpp|python|sh)\n(.*?)^```", (ROOT / doc).read_text(), flags=re.S | re.M):
            body = m.group(2)
            first = body.splitlines()[0]
            n = sum(1 for (d, f) in seen if d == doc and f == first)
            seen[doc, first] = True
            found.append((doc, first, n, m.group(1), body))
    return found


def entry_of(doc, first, n):
    for key, how in BLOCKS.items():
        if key[0] == doc and first.startswith(key[1]) and (len(key) == 2 or key[2] == n):
            return key, how
    return None, None


def test_every_block_is_listed_and_every_listing_has_its_block():
    used = set()
    for doc, first, n, _, _ in doc_blocks():
        key, _ = entry_of(doc, first, n)
        assert key is not None, f"{doc}: the block starting {first!r} is new: list it in BLOCKS with what runs it"
        used.add(key)
    assert not set(BLOCKS) - used, f"listed but no longer in the docs: {sorted(set(BLOCKS) - used)}"


def blocks_of(kind):
    cases = []
    for doc, first, n, lang, body in doc_blocks():
        key, how = entry_of(doc, first, n)
        if how is not None and how[0] == kind:
            cases.append(pytest.param(doc, lang, body, how, id=f"{doc}:{first[:40]}"))
    return cases


@pytest.mark.parametrize("doc, lang, body, how", blocks_of("file"))
def test_the_block_is_the_file_ctest_runs(doc, lang, body, how):
    assert (ROOT / how[1]).read_text() == body, f"{doc} does not show {how[1]} as it is"


def this_build(text):
    """The block's build/ paths as this build's."""
    text = text.replace("PYTHONPATH=build/python", f"PYTHONPATH={PACKAGE_DIR}")
    return text.replace("./build/attnlab", str(CLI)).replace("build/attnlab", str(CLI))


@pytest.mark.parametrize("doc, lang, body, how", blocks_of("run"))
def test_the_block_runs(doc, lang, body, how, tmp_path):
    env = dict(os.environ, PAGER="cat", PYTHONPATH=str(PACKAGE_DIR))
    command = [sys.executable, "-c", body] if lang == "python" else ["sh", "-euc", this_build(body)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


# A synopsis's placeholders, as one real value (`--PARAM`-style options are skipped).
PLACEHOLDERS = {"EXPERIMENT": "saturation"}


def commands(body):
    """Each command line of a block (continuations joined), without comments."""
    joined = re.sub(r"\\\n\s*", " ", body)
    for line in joined.splitlines():
        line = line.split("  #")[0].strip()
        if line and not line.startswith("#"):
            yield line


@pytest.mark.parametrize("doc, lang, body, how", blocks_of("flags"))
def test_the_commands_options_exist(doc, lang, body, how):
    if CLI is None:
        pytest.skip("ATTNLAB_CLI is not set (ctest sets it when the attnlab command is built)")
    for line in commands(body):
        words = shlex.split(re.sub(r"\[([^]]*)\]", r"\1", line.replace("|", " ")))
        while words and (words[0] in ("mpirun", "/usr/bin/time") or words[0].startswith(("-", "PYTHONPATH="))
                         or words[0].isdigit()):
            words.pop(0)  # the launcher and its options
        if words[0].endswith("python3"):
            program, words = [sys.executable, str(ROOT / words[1])], words[2:]
            path = []
        else:
            assert words[0].endswith("attnlab"), line
            program, words = [CLI], words[1:]
            path = [PLACEHOLDERS.get(w, w)
                    for w in words[: next((i for i, w in enumerate(words) if w.startswith("-")), len(words))]]
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
        done = subprocess.run(program + path + ["--help"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        for option in {w.split("=")[0] for w in words if w.startswith("--") and not w[2:].isupper()}:
            assert re.search(rf"{re.escape(option)}\b", done.stdout), f"{doc}: {line!r}: {option} is not an option " \
                                                                        f"of {' '.join(path) or program[-1]}"


@pytest.mark.parametrize("doc, lang, body, how", blocks_of("script"))
def test_a_ctest_script_runs_the_block(doc, lang, body, how):
    assert how[2] in (ROOT / how[1]).read_text(), f"{how[1]} no longer does what {doc}'s block shows"


@pytest.mark.parametrize("doc, lang, body, how", blocks_of("names"))
def test_the_fragments_names_exist(doc, lang, body, how):
    source = (ROOT / how[1]).read_text()
    for name in how[2]:
        assert name.split()[-1] in body and name in source, f"{doc}: {name} not in the block or in {how[1]}"


def test_readme_compile_lines_are_found():  # the install checks run what this script prints
    lines = subprocess.run([str(ROOT / "tests/install/readme_compile_lines.sh"), str(ROOT)], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    assert len(lines) == 2 and "-I build/include" in lines[0] and '-I "$PREFIX/include"' in lines[1], lines
