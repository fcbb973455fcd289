"""The .pyi stubs describe the functions the extension actually has: same names,
same parameters in the same order, same keyword-only marker and defaults."""

import ast
import pathlib
import re

import attnlab
import attnlab._attnlab as ext

STUB = pathlib.Path(attnlab.__file__).with_name("_attnlab.pyi")


def stub_signatures():
    sigs = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            params = [p.arg for p in a.args] + (["*"] if a.kwonlyargs else []) + [p.arg for p in a.kwonlyargs]
            defaults = [ast.literal_eval(d) for d in a.defaults] + [
                ast.literal_eval(d) if d is not None else "<required>" for d in a.kw_defaults]
            sigs.setdefault(node.name, (params, defaults))  # the first overload has every default
    return sigs


def runtime_signature(fn):
    """Parameter names and defaults from pybind11's signature line."""
    line = fn.__doc__.splitlines()[0]
    inner = line[line.index("(") + 1: line.rindex(") ->")]
    parts, depth, current = [], 0, ""
    for ch in inner:  # split at commas outside brackets: "config: dict[str, str]" is one part
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    params, defaults = [], []
    for part in filter(None, parts):
        if part == "*":
            params.append("*")
            continue
        m = re.fullmatch(r"(\w+): [\w.\[\], ]+?(?: = (.+))?", part)
        assert m, part
        params.append(m.group(1))
        if m.group(2) is not None:
            defaults.append(ast.literal_eval(m.group(2)))
    return params, defaults


def test_stubs_match_the_extension():
    stubs = stub_signatures()
    public = {n for n in dir(ext) if not n.startswith("_") and callable(getattr(ext, n))}
    classes = {n for n in public if isinstance(getattr(ext, n), type)}  # KVCache: a class of the stub
    stub_classes = {node.name for node in ast.parse(STUB.read_text()).body if isinstance(node, ast.ClassDef)}
    assert classes <= stub_classes
    assert set(stubs) == public - classes
    for name, (params, defaults) in stubs.items():
        rt_params, rt_defaults = runtime_signature(getattr(ext, name))
        assert params == rt_params, name
        assert defaults == rt_defaults, name
    assert (STUB.parent / "py.typed").exists()


def written_signature(fn):
    """Parameter names and defaults from the signature line docstrings.hpp writes at the top
    of a function's text (the line after pybind11's own), or None where it writes none."""
    lines = fn.__doc__.splitlines()
    line = lines[2] if len(lines) > 2 else ""
    if not re.match(rf"{fn.__name__}\(", line):
        return None
    args = ast.parse(f"def f{line[len(fn.__name__):line.rindex(') ->') + 1]}: pass").body[0].args
    params = [p.arg for p in args.args] + (["*"] if args.kwonlyargs else []) + [p.arg for p in args.kwonlyargs]
    defaults = [ast.literal_eval(d) for d in args.defaults] + [
        ast.literal_eval(d) for d in args.kw_defaults if d is not None]
    return params, defaults


def test_the_written_signatures_match_the_extension():
    # docstrings.hpp writes each signature by hand: a renamed or re-defaulted parameter
    # (bfloat16=False became dtype=None) must change it too.
    written = {}
    for name in dir(ext):
        fn = getattr(ext, name)
        if not name.startswith("_") and callable(fn) and not isinstance(fn, type) and written_signature(fn):
            written[name] = written_signature(fn)
    assert {"attention_forward", "attention_backward", "scaled_dot_product_attention"} <= set(written)
    for name, signature in written.items():
        assert signature == runtime_signature(getattr(ext, name)), name
