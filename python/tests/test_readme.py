"""The README's examples (C++, Python, .npy) are the files CI runs, word for word."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def code_blocks(markdown):
    return re.findall(r"```[a-z]*\n(.*?)```", markdown, flags=re.S)


def test_readme_examples_are_the_files_ctest_runs():
    blocks = code_blocks((ROOT / "README.md").read_text())
    for example in ("python/examples/quickstart.py", "python/examples/torch_attention.py",
                    "examples/npy_attention.sh", "examples/engine_attention.cpp",
                    "examples/kv_cache_decode.cpp"):
        assert (ROOT / example).read_text() in blocks, f"README.md does not show {example} as it is"
