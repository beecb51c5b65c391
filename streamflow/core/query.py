"""Run queries: a small language that selects runs by what a listing knows of them.

``workflow = 'orders' AND status IN ('running', 'suspended') AND created > '2026-12-01T00:00:00Z'``

Grammar (keywords in any case; ``NOT`` binds tighter than ``AND``, ``AND`` than ``OR``)::

    query      := or
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | "(" or ")" | comparison
    comparison := field ("=" | "!=" | "<" | "<=" | ">" | ">=") value
                | field ["NOT"] "IN" "(" value ("," value)* ")"
    value      := 'text' (a quote inside doubled: 'it''s') | NULL

Fields: ``run_id``, ``workflow``, ``version``, ``build``, ``parent`` (the parent's run id),
``status`` (one of the run statuses), ``created`` and ``ended`` (times: RFC 3339 text, compared
as instants). ``=``, ``!=`` and ``IN`` compare any field; ``<``, ``<=``, ``>``, ``>=`` the times
only. A field a run does not have (a run that has not ended has no ``ended``, a run without a
build no ``build``) fails every comparison but ``!=`` and ``NOT IN``; ``field = NULL`` and
``field != NULL`` ask whether it has one.

A query that breaks these rules is :class:`~streamflow.core.errors.InvalidQuery`, whose message
names the position (0-based, in characters) where it stopped making sense. A query is at most
:data:`MAX_QUERY_CHARS` characters, nests at most :data:`MAX_DEPTH` levels and lists at most
:data:`MAX_IN_VALUES` values in one ``IN``: what a network can send is bounded before any run is
looked at. Pure: no clock, no I/O; a query is parsed once and evaluated on each row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamflow.core.errors import InvalidQuery
from streamflow.core.snapshot import WorkflowRunStatus

MAX_QUERY_CHARS = 4096
MAX_DEPTH = 32
MAX_IN_VALUES = 100

TEXT_FIELDS = ("run_id", "workflow", "version", "build", "parent")
TIME_FIELDS = ("created", "ended")
FIELDS = (*TEXT_FIELDS, "status", *TIME_FIELDS)
KEYWORDS = ("AND", "OR", "NOT", "IN", "NULL")
_TOKEN = re.compile(
    r"\s*(?:(?P<text>'(?:[^']|'')*')|(?P<op>!=|<=|>=|=|<|>|\(|\)|,)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<open>')|(?P<bad>\S))"
)
_STATUSES = {s.value for s in WorkflowRunStatus}

Row = Callable[[str], Any]
"""How a query reads a run: a field's value by name (``None`` when the run has none)."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    """``text``, ``op``, ``word`` or ``end``."""
    value: str
    position: int


def _tokens(text: str) -> Iterator[_Token]:
    """The tokens of ``text`` as the parser asks for them (so the first error a reader would
    meet is the one reported), then ``end`` for ever."""
    position = 0
    while True:
        match = _TOKEN.match(text, position)
        if match is None:  # only blanks are left
            while True:
                yield _Token("end", "", len(text))
        kind = match.lastgroup or "bad"
        start = match.start(kind)
        if kind == "open":
            raise InvalidQuery("a quoted text is not closed", start)
        if kind == "bad":
            raise InvalidQuery(f"unexpected {text[start]!r}", start)
        value = match.group(kind)
        if kind == "text":
            value = value[1:-1].replace("''", "'")
        yield _Token(kind, value, start)
        position = match.end()


@dataclass(frozen=True, slots=True)
class _Compare:
    field: str
    op: str
    values: tuple[Any, ...]
    """One value (``None``: NULL) for ``=`` and the others; the list of an ``IN``."""

    def holds(self, row: Row) -> bool:
        have = row(self.field)
        if self.op in ("IN", "NOT IN"):
            inside = have is not None and have in self.values
            return inside if self.op == "IN" else not inside
        (want,) = self.values
        if want is None:
            return (have is None) == (self.op == "=")
        if have is None:
            return self.op == "!="
        if self.op == "=":
            return bool(have == want)
        if self.op == "!=":
            return bool(have != want)
        if self.op == "<":
            return bool(have < want)
        if self.op == "<=":
            return bool(have <= want)
        if self.op == ">":
            return bool(have > want)
        return bool(have >= want)


@dataclass(frozen=True, slots=True)
class _Not:
    inner: _Node

    def holds(self, row: Row) -> bool:
        return not self.inner.holds(row)


@dataclass(frozen=True, slots=True)
class _All:
    parts: tuple[_Node, ...]

    def holds(self, row: Row) -> bool:
        return all(p.holds(row) for p in self.parts)


@dataclass(frozen=True, slots=True)
class _Any:
    parts: tuple[_Node, ...]

    def holds(self, row: Row) -> bool:
        return any(p.holds(row) for p in self.parts)


_Node = _Compare | _Not | _All | _Any


class _Parser:
    def __init__(self, text: str) -> None:
        self._tokens = _tokens(text)
        self._ahead: _Token | None = None

    def _peek(self) -> _Token:
        if self._ahead is None:
            self._ahead = next(self._tokens)
        return self._ahead

    def _next(self) -> _Token:
        token = self._peek()
        self._ahead = None
        return token

    def _keyword(self, word: str) -> bool:
        token = self._peek()
        if token.kind == "word" and token.value.upper() == word:
            self._ahead = None
            return True
        return False

    def _expect(self, op: str) -> _Token:
        token = self._next()
        if token.kind != "op" or token.value != op:
            raise InvalidQuery(f"expected {op!r}, found {_shown(token)}", token.position)
        return token

    def query(self) -> _Node:
        node = self._or(0)
        token = self._peek()
        if token.kind != "end":
            raise InvalidQuery(
                f"expected AND, OR or the end, found {_shown(token)}", token.position
            )
        return node

    def _or(self, depth: int) -> _Node:
        parts = [self._and(depth)]
        while self._keyword("OR"):
            parts.append(self._and(depth))
        return parts[0] if len(parts) == 1 else _Any(tuple(parts))

    def _and(self, depth: int) -> _Node:
        parts = [self._not(depth)]
        while self._keyword("AND"):
            parts.append(self._not(depth))
        return parts[0] if len(parts) == 1 else _All(tuple(parts))

    def _not(self, depth: int) -> _Node:
        token = self._peek()
        if depth >= MAX_DEPTH:
            raise InvalidQuery(f"nested deeper than {MAX_DEPTH} levels", token.position)
        if self._keyword("NOT"):
            return _Not(self._not(depth + 1))
        if token.kind == "op" and token.value == "(":
            self._next()
            node = self._or(depth + 1)
            self._expect(")")
            return node
        return self._comparison()

    def _comparison(self) -> _Compare:
        token = self._next()
        name = token.value.lower()
        if token.kind != "word" or token.value.upper() in KEYWORDS:
            raise InvalidQuery(f"expected a field, found {_shown(token)}", token.position)
        if name not in FIELDS:
            raise InvalidQuery(
                f"unknown field {token.value!r}: use one of {FIELDS}", token.position
            )
        negated = self._keyword("NOT")
        if self._keyword("IN"):
            return self._in(name, "NOT IN" if negated else "IN")
        if negated:
            raise InvalidQuery(
                f"expected IN after NOT, found {_shown(self._peek())}", self._peek().position
            )
        op = self._next()
        if op.kind != "op" or op.value not in ("=", "!=", "<", "<=", ">", ">="):
            raise InvalidQuery(
                f"expected a comparison after {name}, found {_shown(op)}", op.position
            )
        if op.value not in ("=", "!=") and name not in TIME_FIELDS:
            raise InvalidQuery(
                f"{op.value} compares times only ({', '.join(TIME_FIELDS)})", op.position
            )
        value = self._value(name, null=op.value in ("=", "!="))
        return _Compare(name, op.value, (value,))

    def _in(self, name: str, op: str) -> _Compare:
        self._expect("(")
        values = [self._value(name, null=False)]
        while self._peek().kind == "op" and self._peek().value == ",":
            self._next()
            if len(values) >= MAX_IN_VALUES:
                raise InvalidQuery(
                    f"more than {MAX_IN_VALUES} values in one IN", self._peek().position
                )
            values.append(self._value(name, null=False))
        self._expect(")")
        return _Compare(name, op, tuple(values))

    def _value(self, name: str, *, null: bool) -> Any:
        token = self._next()
        if token.kind == "word" and token.value.upper() == "NULL":
            if not null:
                raise InvalidQuery("NULL is compared with = or != only", token.position)
            return None
        if token.kind != "text":
            raise InvalidQuery(f"expected a quoted value, found {_shown(token)}", token.position)
        if name == "status" and token.value not in _STATUSES:
            raise InvalidQuery(
                f"unknown status {token.value!r}: use one of {sorted(_STATUSES)}", token.position
            )
        if name in TIME_FIELDS:
            return _instant(token)
        return token.value


def _instant(token: _Token) -> datetime:
    try:
        when = datetime.fromisoformat(token.value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidQuery(f"{token.value!r} is not an RFC 3339 time", token.position) from None
    if when.tzinfo is None:
        raise InvalidQuery(f"{token.value!r} has no time zone (add Z)", token.position)
    return when.astimezone(UTC)


def _shown(token: _Token) -> str:
    if token.kind == "end":
        return "the end"
    if token.kind == "text":
        return "a quoted value"
    return repr(token.value)


@dataclass(frozen=True, slots=True)
class RunQuery:
    """A parsed query (:func:`parse_query`): ``text`` as given, and whether a run matches."""

    text: str
    _node: _Node

    def matches(self, row: Row) -> bool:
        """Whether the run ``row`` reads passes the query."""
        return self._node.holds(row)

    def required(self) -> dict[str, str]:
        """The ``field = 'value'`` comparisons every matching run passes (those joined to the
        rest of the query by ``AND`` at its top), by field: a listing may read only the runs
        an index lists for them."""
        parts = self._node.parts if isinstance(self._node, _All) else (self._node,)
        found: dict[str, str] = {}
        for part in parts:
            if isinstance(part, _Compare) and part.op == "=" and isinstance(part.values[0], str):
                found.setdefault(part.field, part.values[0])
        return found


def parse_query(text: str) -> RunQuery:
    """Parse ``text`` (see the module docstring); ``InvalidQuery`` naming the position where it
    stops making sense."""
    if not isinstance(text, str):
        raise InvalidQuery("a query is text", 0)
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"longer than {MAX_QUERY_CHARS} characters", MAX_QUERY_CHARS)
    if not text.strip():
        raise InvalidQuery("the query is empty", 0)
    return RunQuery(text, _Parser(text).query())
