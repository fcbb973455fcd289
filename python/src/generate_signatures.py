"""Writes signatures.hpp from python/attnlab/_attnlab.pyi: the stub is the one text of each
signature of the _attnlab extension (names, order, keyword-only marker, defaults, types and the
docstring), and the bindings take their pybind11 arguments and docstrings from the header
this writes, so that the two cannot disagree.

    generate_signatures.py STUB OUT

For each function of the stub, and each method of its classes (properties aside), OUT gets
an inline function of that name (a method's in a namespace named after its class;
`__init__` as `init`) returning a tuple for bindings.hpp's `def`: the name (not for
`__init__`), a py::arg per parameter after `self` (py::arg_v with the stub's default), a
py::kw_only() where the stub has `*`, and the docstring: the typed signature line, a blank
line, the stub's docstring. Of overloads, the first gives the parameters (it has every
default) and the docstring. A default other than None, a bool, a number, a string or () is
refused, as is a function without a docstring: the error names it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


class StubError(Exception):
    pass


def cpp_default(node: ast.expr, where: str) -> str:
    value = ast.literal_eval(node)
    if value is None:
        return "py::none()"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value == ():
        return "py::tuple()"
    raise StubError(f"{where}: default {ast.unparse(node)} is not None, a bool, a number, a string or ()")


def cpp_arguments(fn: ast.FunctionDef, where: str, method: bool) -> list[str]:
    a = fn.args
    if a.posonlyargs or a.vararg or a.kwarg:
        raise StubError(f"{where}: positional-only parameters, *args and **kwargs are not written by this generator")
    positional = a.args[1:] if method else a.args
    skipped = len(a.args) - len(positional)
    first_default = len(a.args) - len(a.defaults)
    out = []
    for i, p in enumerate(positional, start=skipped):
        arg = f'py::arg("{p.arg}")'
        out.append(arg if i < first_default else f"{arg} = {cpp_default(a.defaults[i - first_default], where)}")
    if a.kwonlyargs:
        out.append("py::kw_only()")
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        arg = f'py::arg("{p.arg}")'
        out.append(arg if d is None else f"{arg} = {cpp_default(d, where)}")
    return out


def signature_line(fn: ast.FunctionDef, method: bool) -> str:
    """The typed signature as the first line of the text: `name(params) -> returns`, without self."""
    a = fn.args

    def param(p: ast.arg, default: ast.expr | None) -> str:
        text = p.arg + (f": {ast.unparse(p.annotation)}" if p.annotation is not None else "")
        return text if default is None else f"{text} = {ast.unparse(default)}"

    defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    params = [param(p, d) for p, d in zip(a.args, defaults)][1 if method else 0:]
    if a.kwonlyargs:
        params.append("*")
    params += [param(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    returns = f" -> {ast.unparse(fn.returns)}" if fn.returns is not None else ""
    return f"{fn.name}({', '.join(params)}){returns}"


def raw_string(text: str) -> str:
    if ")doc\"" in text:
        raise StubError(f"a docstring holds the raw string's terminator: {text[:60]!r}")
    return f'R"doc({text})doc"'


def is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def functions(body: list[ast.stmt]) -> dict[str, tuple[ast.FunctionDef, str]]:
    """name: (the first overload's node, the first docstring among the overloads)."""
    found: dict[str, tuple[ast.FunctionDef, str]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef) and not is_property(node):
            first, doc = found.get(node.name, (node, ""))
            found[node.name] = (first, doc or ast.get_docstring(node) or "")
    return found


def definition(fn: ast.FunctionDef, doc: str, where: str, method: bool) -> str:
    if not doc:
        raise StubError(f"{where}: no docstring in the stub (its text in help() and docs)")
    name = "init" if fn.name == "__init__" else fn.name
    parts = ([] if fn.name == "__init__" else [f'"{fn.name}"']) + cpp_arguments(fn, where, method)
    parts.append(raw_string(f"{signature_line(fn, method)}\n\n{doc}"))
    items = ",\n      ".join(parts)
    return f"inline auto {name}() {{\n  return std::make_tuple(\n      {items});\n}}\n"


def header(stub: Path) -> str:
    tree = ast.parse(stub.read_text(), filename=str(stub))
    module_doc = ast.get_docstring(tree)
    if not module_doc:
        raise StubError(f"{stub}: no module docstring (the module's text in help())")
    out = [f"// Written by python/src/generate_signatures.py from python/attnlab/{stub.name}, where each\n"
           "// signature and its text is written once: edit the stub, not this file.\n"
           "#pragma once\n#include <tuple>\n\n#include <pybind11/pybind11.h>\n\n"
           "namespace attnlab::python::signatures {\nnamespace py = pybind11;\n\n"
           f"inline constexpr const char* module_doc = {raw_string(module_doc)};\n"]
    for name, (fn, doc) in functions(tree.body).items():
        out.append("\n" + definition(fn, doc, name, method=False))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        cls_doc = ast.get_docstring(cls)
        if not cls_doc:
            raise StubError(f"{cls.name}: no docstring in the stub")
        out.append(f"\nnamespace {cls.name} {{\ninline constexpr const char* doc = {raw_string(cls_doc)};\n")
        for name, (fn, doc) in functions(cls.body).items():
            out.append("\n" + definition(fn, doc, f"{cls.name}.{name}", method=True))
        out.append(f"}}  // namespace {cls.name}\n")
    out.append("}  // namespace attnlab::python::signatures\n")
    return "".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    stub, out = Path(argv[1]), Path(argv[2])
    try:
        text = header(stub)
    except (StubError, SyntaxError, ValueError) as e:
        print(f"generate_signatures.py: {stub}: {e}", file=sys.stderr)
        return 1
    # Rewritten only when it changes, so that an edit elsewhere in the stub rebuilds nothing.
    if not out.is_file() or out.read_text() != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
