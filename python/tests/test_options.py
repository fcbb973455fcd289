"""Every entry that attends takes the options of attnlab._options.ATTENTION_OPTIONS under the
same names with the same defaults, or attnlab._options says why not (and nothing more: an
entry that takes an option it is said not to take fails too)."""

import ast
import importlib
import inspect
import re

import pytest

import attnlab
from attnlab._options import ATTENTION_OPTIONS, NOT_TAKEN, OTHER_DEFAULTS


def extension_parameters(fn) -> dict:
    """name: default (inspect.Parameter.empty when required) from pybind11's signature line."""
    line = fn.__doc__.splitlines()[0]
    inner = line[line.index("(") + 1: line.rindex(") ->")]
    params, depth, current = {}, 0, ""
    for ch in inner + ",":
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            m = re.fullmatch(r"(\w+): .+?(?: = (.+))?", current.strip())
            if m:
                params[m.group(1)] = inspect.Parameter.empty if m.group(2) is None else ast.literal_eval(m.group(2))
            current = ""
        else:
            current += ch
    return params


def python_parameters(fn) -> dict:
    return {name: p.default for name, p in inspect.signature(fn).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def entry(name: str):
    if name.startswith("attnlab.torch"):
        pytest.importorskip("torch", reason="python3-torch is not installed")
        at = importlib.import_module("attnlab.torch")
        from attnlab.torch import VARIANT_OPTIONS  # attention's further keyword options (**options)
        if name == "attnlab.torch.attention":
            return {**python_parameters(at.attention), **{o: None for o in VARIANT_OPTIONS}}
        if name == "attnlab.torch.KVCache.attention":
            return python_parameters(at.KVCache.attention)
        return python_parameters(at.ring_attention)
    if name == "attnlab.attention_forward":
        return extension_parameters(attnlab.attention_forward)
    if name == "attnlab.KVCache.attention":
        return extension_parameters(attnlab.KVCache.attention)
    try:
        mpi = importlib.import_module("attnlab.mpi")
    except ImportError as e:
        pytest.skip(f"attnlab.mpi: {e}")
    return python_parameters(mpi.ring_attention)


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_every_entry_takes_the_options_or_says_why_not(name):
    params = entry(name)
    for option, default in ATTENTION_OPTIONS.items():
        if option in NOT_TAKEN[name]:
            assert option not in params, f"{name} takes {option}, which attnlab._options says it does not"
            continue
        assert option in params, f"{name} does not take {option} (nor does attnlab._options say why)"
        want = OTHER_DEFAULTS.get(name, {}).get(option, (default, ""))[0]
        assert params[option] == want, f"{name}: {option} defaults to {params[option]!r}, not {want!r}"
