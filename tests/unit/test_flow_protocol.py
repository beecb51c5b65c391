"""``FlowEngine`` and ``FlowClient`` implement ``streamflow.Flow`` exactly: every member with the
protocol's parameter names, kinds, defaults and annotations and its return type, so that a
drift on either side fails here (mypy checks the assignments in ``streamflow.testing``, but not
parameter names or defaults)."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

import streamflow
from streamflow import Flow, FlowEngine, InMemoryEventStore
from streamflow.flow import FLOW_OPERATIONS
from streamflow.kafka.client import FlowClient
from streamflow.serde import messages
from streamflow.testing.harness import CHANGES
from tests.support import Scripted, sequential

IMPLEMENTATIONS = [FlowEngine, FlowClient]

BACKEND_OPTIONS: dict[tuple[type, str], set[str]] = {
    (FlowClient, "prune_terminal_history"): {"index"},  # plan from an observers' run index
    # drive=False: record the change and return; the host drives the run afterwards.
    (FlowEngine, "start_with_id"): {"drive"},
    (FlowEngine, "send_signal"): {"drive"},
    (FlowEngine, "request_cancellation"): {"drive"},
    (FlowEngine, "resume_hook_by_token"): {"drive"},
    (FlowEngine, "dispose_hook_by_token"): {"drive"},
}
"""Keyword-only options with defaults that one backend adds to a ``Flow`` call."""


def _parameters(function: object) -> list[tuple[str, object, object, object]]:
    hints = typing.get_type_hints(function)
    return [
        (p.name, p.kind, p.default, hints.get(p.name))
        for p in inspect.signature(function).parameters.values()  # type: ignore[arg-type]
        if p.name != "self"
    ]


def test_the_operations_are_every_protocol_member():
    members = {n for n in dir(Flow) if not n.startswith("_")}
    assert set(FLOW_OPERATIONS) == members
    assert len(FLOW_OPERATIONS) == len(members)
    assert set(FLOW_OPERATIONS) >= CHANGES


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", FLOW_OPERATIONS)
def test_each_backend_implements_the_call_exactly(implementation, name):
    expected = getattr(Flow, name)
    actual = getattr(implementation, name, None)
    assert actual is not None, f"{implementation.__name__} has no {name}"
    assert inspect.iscoroutinefunction(actual), f"{implementation.__name__}.{name} is not async"
    wanted = _parameters(expected)
    got = _parameters(actual)
    assert got[: len(wanted)] == wanted, f"{implementation.__name__}.{name}"
    extras = got[len(wanted) :]
    allowed = BACKEND_OPTIONS.get((implementation, name), set())
    assert {e[0] for e in extras} == allowed, f"{implementation.__name__}.{name}"
    for extra_name, kind, default, _ in extras:
        assert kind is inspect.Parameter.KEYWORD_ONLY, extra_name
        assert default is not inspect.Parameter.empty, extra_name
    returns = typing.get_type_hints(actual)["return"]
    assert returns == typing.get_type_hints(expected)["return"], f"{implementation.__name__}.{name}"
    assert returns is not messages.Reply
    assert messages.Reply not in typing.get_args(returns)


def test_the_classes_and_an_engine_are_flows():
    assert issubclass(FlowEngine, Flow)
    assert issubclass(FlowClient, Flow)
    assert isinstance(FlowEngine(InMemoryEventStore(), Scripted(sequential("a"))), Flow)
    assert streamflow.Flow is Flow


def test_the_protocol_module_imports_only_the_core():
    source = Path(streamflow.__file__).with_name("flow.py").read_text(encoding="utf-8")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    ours = {m for m in imported if m.startswith("streamflow")}
    assert ours
    assert all(m.startswith("streamflow.core.") for m in ours), ours
