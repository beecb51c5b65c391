"""Docstring discipline of ``streamflow/api`` and ``streamflow/testing``, checked with ``ast``
(nothing is imported).

Every module has a docstring, and so has every public class, function and method (name not
starting with ``_``, reached through public classes only). A public function or method with
more than two parameters (``self``/``cls`` not counted) names every one of them under
``Args:``, Google style.

Exempt: functions and classes defined inside a function, ``__dunder__`` methods, ``@overload``
stubs, property setters and deleters (the getter carries the text), the methods of
:data:`IMPLEMENTS` (their protocol documents them) and of :data:`PROTOCOL_OVERRIDES` (their
library documents them)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streamflow/api", "streamflow/testing")

Function = ast.FunctionDef | ast.AsyncFunctionDef

IMPLEMENTS: dict[str, tuple[str, ...]] = {
    "streamflow/api/control.py::FlowControl": ("streamflow/api/control.py::ControlPlane",),
    "streamflow/api/control.py::EmbeddedControl": ("streamflow/api/control.py::ControlPlane",),
    "streamflow/api/kafka.py::KafkaControl": ("streamflow/api/control.py::ControlPlane",),
    "streamflow/api/remote.py::ObserversIndex": ("streamflow/observe/http.py::Inspector",),
    "streamflow/api/remote.py::HttpControl": ("streamflow/api/control.py::ControlPlane",),
    "streamflow/api/index.py::HttpIndex": ("streamflow/api/index.py::RunIndex",),
    "streamflow/api/index.py::FlowIndex": ("streamflow/api/index.py::RunIndex",),
    "streamflow/api/index.py::InspectorIndex": ("streamflow/api/index.py::RunIndex",),
    "streamflow/testing/harness.py::FlowDriver": ("streamflow/testing/harness.py::RunDriver",),
    "streamflow/testing/harness.py::EmbeddedDriver": (
        "streamflow/testing/harness.py::RunDriver",
        "streamflow/testing/harness.py::FlowDriver",
    ),
    "streamflow/testing/kafka_harness.py::KafkaDriver": (
        "streamflow/testing/harness.py::RunDriver",
        "streamflow/testing/harness.py::FlowDriver",
    ),
}
"""Classes that implement a protocol of this project: a method of theirs that the protocol
documents (under the same name) needs no docstring of its own; any other method does."""

PROTOCOL_OVERRIDES: dict[str, dict[str, str]] = {
    "Response": {"render": "starlette's Response.render: the body's bytes for a content"},
}
"""Per base class (as the ``class`` statement names it), overrides whose meaning the base's
library documents, with why they need no docstring of their own."""


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).glob("*.py"))


def _is_public(name: str) -> bool:
    return not name.startswith("_")


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _decorator_names(node: Function) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def _parameters(node: Function, method: bool) -> list[str]:
    args = node.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if method and "staticmethod" not in _decorator_names(node) and positional:
        positional = positional[1:]  # self or cls
    names = [*positional, *(a.arg for a in args.kwonlyargs)]
    if args.vararg is not None:
        names.append(args.vararg.arg)
    if args.kwarg is not None:
        names.append(args.kwarg.arg)
    return names


def _args_section(doc: str) -> str | None:
    """The lines of the docstring's ``Args:`` section (up to the next line indented no deeper
    than its heading), or ``None`` without one."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Args:":
            indent = len(line) - len(line.lstrip())
            body = []
            for following in lines[i + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            return "\n".join(body)
    return None


def _lists(section: str, name: str) -> bool:
    for line in section.splitlines():
        entry = line.strip().lstrip("*")
        if entry.startswith((f"{name}:", f"{name} (")):
            return True
    return False


@cache
def _documented_methods(qualified: str) -> frozenset[str]:
    """The methods class ``path::Name`` defines with a docstring."""
    path, name = qualified.split("::")
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return frozenset(
                n.name for n in node.body if isinstance(n, Function) and ast.get_docstring(n)
            )
    raise AssertionError(f"IMPLEMENTS names {qualified}, which is not there")


def _check_function(where: str, node: Function, method: bool) -> Iterator[str]:
    decorators = _decorator_names(node)
    if "overload" in decorators or decorators & {"setter", "deleter"}:
        return
    doc = ast.get_docstring(node)
    if not doc:
        yield f"{where}: no docstring"
        return
    parameters = _parameters(node, method)
    if len(parameters) <= 2:
        return
    section = _args_section(doc)
    if section is None:
        yield f"{where}: {len(parameters)} parameters and no Args: section"
        return
    missing = [name for name in parameters if not _lists(section, name)]
    if missing:
        yield f"{where}: Args: lacks {', '.join(missing)}"


def _check_class(where: str, node: ast.ClassDef) -> Iterator[str]:
    if not ast.get_docstring(node):
        yield f"{where}: no docstring"
    inherited: set[str] = set()
    for protocol in IMPLEMENTS.get(where, ()):
        inherited |= _documented_methods(protocol)
    for base in _base_names(node):
        inherited |= set(PROTOCOL_OVERRIDES.get(base, {}))
    for child in node.body:
        if isinstance(child, ast.ClassDef) and _is_public(child.name):
            yield from _check_class(f"{where}.{child.name}", child)
        elif isinstance(child, Function) and _is_public(child.name):
            if _is_dunder(child.name) or child.name in inherited:
                continue
            yield from _check_function(f"{where}.{child.name}", child, method=True)


def problems(source: str, name: str) -> list[str]:
    """What module ``name`` (its ``source``) lacks, one line each (empty when documented)."""
    tree = ast.parse(source, filename=name)
    found = [] if ast.get_docstring(tree) else [f"{name}: no module docstring"]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and _is_public(node.name):
            found.extend(_check_class(f"{name}::{node.name}", node))
        elif isinstance(node, Function) and _is_public(node.name):
            found.extend(_check_function(f"{name}::{node.name}", node, method=False))
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_public_names_are_documented(path: Path) -> None:
    found = problems(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert not found, "\n".join(found)


def test_the_checker_sees_the_packages() -> None:
    assert {p.parent.name for p in _modules()} == {"api", "testing"}


@pytest.mark.parametrize("qualified", sorted(IMPLEMENTS))
def test_every_implementation_named_is_there(qualified: str) -> None:
    path, name = qualified.split("::")
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    assert any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)


def test_the_checker_finds_what_is_missing() -> None:
    source = '''
class Open:
    def method(self, a, b, *, c):
        """Does.

        Args:
            a: one.
            b: two.
        """

    @staticmethod
    def three(a, b, c):
        """Does.

        Args:
            a: one.
            b: two.
            c: three.
        """

    def _private(self): pass

    def __repr__(self): pass

class _Hidden:
    def method(self): pass

def bare(): pass

def outer():
    """Documented."""
    def inner(): pass
'''
    assert problems(source, "probe.py") == [
        "probe.py: no module docstring",
        "probe.py::Open: no docstring",
        "probe.py::Open.method: Args: lacks c",
        "probe.py::bare: no docstring",
    ]
