"""_attnlab.pyi is the one text of each signature of the extension: the bindings take their
parameters and docstrings from it (python/src/generate_signatures.py writes them into
signatures.hpp at build time). Here the built module is held to the stub: the same functions
and methods, the same parameters in the same order, keyword-only marker and defaults (from
pybind11's own signature line, which says what the bindings really declare), and the same
texts. A binding written by hand beside the stub, or a build older than the stub, fails."""

import ast
import importlib.util
import pathlib
import re

import pytest

import attnlab
import attnlab._attnlab as ext

STUB = pathlib.Path(attnlab.__file__).with_name("_attnlab.pyi")
GENERATOR = pathlib.Path(__file__).resolve().parent.parent / "src" / "generate_signatures.py"


def generator():
    spec = importlib.util.spec_from_file_location("generate_signatures", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_class(name):
    return next(n for n in stub_tree().body if isinstance(n, ast.ClassDef) and n.name == name)


def signature_of(node: ast.FunctionDef):
    a = node.args
    params = [p.arg for p in a.args] + (["*"] if a.kwonlyargs else []) + [p.arg for p in a.kwonlyargs]
    defaults = [ast.literal_eval(d) for d in a.defaults] + [
        ast.literal_eval(d) for d in a.kw_defaults if d is not None]
    return params, defaults


def stub_functions(body):
    """name: the first overload's node (it has every default), properties aside."""
    found = {}
    for node in body:
        if isinstance(node, ast.FunctionDef) and not any(
                isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
            found.setdefault(node.name, node)
    return found


def runtime_signature(fn):
    """Parameter names and defaults from pybind11's signature line."""
    line = fn.__doc__.splitlines()[0]
    inner = line[line.index("(") + 1: line.rindex(") ->")]
    parts, depth, current = [], 0, ""
    for ch in inner:  # split at commas outside brackets: "config: dict[str, str]" is one part
        depth += ch in "[("
        depth -= ch in "])"
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


def public_functions():
    return {n for n in dir(ext) if not n.startswith("_") and callable(getattr(ext, n))
            and not isinstance(getattr(ext, n), type)}


def methods(cls):
    return {n for n, v in vars(cls).items() if callable(v) and (not n.startswith("_") or n == "__init__")
            and getattr(v, "__doc__", None) and "(self: " in v.__doc__.splitlines()[0]}


def test_the_extension_has_the_stub_s_functions_and_parameters():
    stubs = stub_functions(stub_tree().body)
    assert set(stubs) == public_functions()
    for name, node in stubs.items():
        assert runtime_signature(getattr(ext, name)) == signature_of(node), name
    assert (STUB.parent / "py.typed").exists()


def test_the_cache_has_the_stub_s_methods_and_parameters():
    stubs = stub_functions(stub_class("KVCache").body)
    assert set(stubs) == methods(ext.KVCache)
    for name, node in stubs.items():
        assert runtime_signature(getattr(ext.KVCache, name)) == signature_of(node), name


def texts():
    """(what, the built docstring, the text the stub gives it) for the module, every function,
    the cache and each of its methods."""
    gen, tree = generator(), stub_tree()
    yield "module", ext.__doc__, ast.get_docstring(tree)
    for scope, body, method in ((ext, tree.body, False), (ext.KVCache, stub_class("KVCache").body, True)):
        for name, (node, doc) in gen.functions(body).items():
            built = getattr(scope, name).__doc__.split("\n", 2)[2].rstrip("\n")  # after pybind11's line
            yield name, built, f"{gen.signature_line(node, method)}\n\n{doc}"
    yield "KVCache", ext.KVCache.__doc__, ast.get_docstring(stub_class("KVCache"))


def test_every_text_of_the_extension_is_the_stub_s():
    seen = 0
    for what, built, written in texts():
        assert built == written, what
        seen += 1
    assert seen > len(public_functions())


def test_the_typed_signature_line_says_what_the_bindings_declare():
    # The line under pybind11's own, written from the stub: its names and defaults are the
    # bindings' (pybind11's line has them from the arguments the .def calls really pass).
    for name in public_functions():
        fn = getattr(ext, name)
        line = fn.__doc__.splitlines()[2]
        args = ast.parse(f"def f{line[len(name):line.rindex(') ->') + 1]}: pass").body[0].args
        written = ([p.arg for p in args.args] + (["*"] if args.kwonlyargs else []) + [p.arg for p in args.kwonlyargs],
                   [ast.literal_eval(d) for d in args.defaults]
                   + [ast.literal_eval(d) for d in args.kw_defaults if d is not None])
        assert written == runtime_signature(fn), name


@pytest.mark.parametrize("stub, error", [
    ('"""m"""\ndef f(x: int) -> int: ...\n', "f: no docstring"),
    ('"""m"""\ndef f(x: list[int] = [1]) -> int:\n    """d"""\n', "f: default [1] is not"),
    ('def f() -> None:\n    """d"""\n', "no module docstring"),
    ('"""m"""\nclass C:\n    """c"""\n    def g(self, *args: int) -> None:\n        """d"""\n', "C.g: positional-only"),
])
def test_the_generator_refuses_what_it_cannot_write(tmp_path, stub, error):
    path = tmp_path / "stub.pyi"
    path.write_text(stub)
    gen = generator()
    with pytest.raises(gen.StubError, match=re.escape(error)):
        gen.header(path)
