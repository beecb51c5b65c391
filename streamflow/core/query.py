"""Run queries: a small language that selects runs by what a listing knows of them.

``workflow = 'orders' AND status IN ('running', 'suspended') AND created > '2026-12-01T00:00:00Z'``

Grammar (keywords in any case; ``NOT`` binds tighter than ``AND``, ``AND`` than ``OR``)::

    query      := or
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | "(" or ")" | comparison
    comparison := field ("=" | "!=" | "<" | "<=" | ">" | ">=") value
                | field ["NOT"] "IN" "(" value ("," value)* ")"
    value      := 'text' (a quote inside doubled: 'it''s') | number | TRUE | FALSE | NULL

Fields: ``run_id``, ``workflow``, ``version``, ``build``, ``parent`` (the parent's run id),
``status`` (one of the run statuses), ``created`` and ``ended`` (times: RFC 3339 text, compared
as instants), and any other name is the run's **search attribute** of that name (case
matters; :mod:`streamflow.core.attributes`). ``=``, ``!=`` and ``IN`` compare any field;
``<``, ``<=``, ``>``, ``>=`` the times and attributes only. The run's own fields take quoted
values. An attribute is compared by its kind: a text with a quoted value, a number (int or
float) with a number, a bool with ``TRUE`` or ``FALSE``, a time with a quoted RFC 3339 time,
and a keyword list equals a quoted value it contains (``tags = 'urgent'``; ``IN``: any of
them). A value of another kind is not equal (``!=`` holds) and not ordered (``<`` and the
others fail). A field a run does not have (a run that has not ended has no ``ended``, a run
without a build no ``build``, a run without the attribute) fails every comparison but ``!=``
and ``NOT IN``; ``field = NULL`` and ``field != NULL`` ask whether it has one.

A query that breaks these rules is :class:`~streamflow.core.errors.InvalidQuery`, whose message
names the position (0-based, in characters) where it stopped making sense. A query is at most
:data:`MAX_QUERY_CHARS` characters, nests at most :data:`MAX_DEPTH` levels and lists at most
:data:`MAX_IN_VALUES` values in one ``IN``: what a network can send is bounded before any run is
looked at. Pure: no clock, no I/O; a query is parsed once and evaluated on each row.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamflow.core.errors import InvalidQuery
from streamflow.core.ids import is_valid_run_id
from streamflow.core.snapshot import WorkflowRunStatus

MAX_QUERY_CHARS = 4096
MAX_DEPTH = 32
MAX_IN_VALUES = 100
MAX_ATTRIBUTE_NAME = 64
_TOKEN_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
_LOOKS_LIKE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]")

TEXT_FIELDS = ("run_id", "workflow", "version", "build", "parent")
TIME_FIELDS = ("created", "ended")
FIELDS = (*TEXT_FIELDS, "status", *TIME_FIELDS)
KEYWORDS = ("AND", "OR", "NOT", "IN", "NULL", "TRUE", "FALSE")
_TOKEN = re.compile(
    r"\s*(?:(?P<text>'(?:[^']|'')*')|(?P<op>!=|<=|>=|=|<|>|\(|\)|,)"
    r"|(?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<open>')|(?P<bad>\S))"
)
_STATUSES = {s.value for s in WorkflowRunStatus}

Row = Callable[[str], Any]
"""How a query reads a run: a field's value by name (``None`` when the run has none)."""


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    """``text``, ``op``, ``number``, ``word`` or ``end``."""
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


def _same(have: Any, want: Any, instant: datetime | None) -> bool:
    """Whether attribute value ``have`` equals literal ``want`` (``instant``: the literal read
    as a time, if it is one), by the attribute's kind."""
    if isinstance(have, tuple):
        return isinstance(want, str) and want in have
    if isinstance(have, datetime):
        return instant is not None and have == instant
    if isinstance(have, bool) or isinstance(want, bool):
        return isinstance(have, bool) and isinstance(want, bool) and have == want
    if isinstance(have, int | float):
        return isinstance(want, int | float) and have == want
    return isinstance(want, str) and have == want


def _ordered(have: Any, want: Any, instant: datetime | None) -> tuple[Any, Any] | None:
    """The pair an ordering compares, or ``None`` when the kinds do not order."""
    if isinstance(have, datetime):
        return None if instant is None else (have, instant)
    if isinstance(have, bool) or isinstance(want, bool) or isinstance(have, tuple):
        return None
    if isinstance(have, int | float) and isinstance(want, int | float):
        return (have, want)
    if isinstance(have, str) and isinstance(want, str):
        return (have, want)
    return None


@dataclass(frozen=True, slots=True)
class _AttributeCompare:
    field: str
    op: str
    values: tuple[Any, ...]
    """Texts, numbers, booleans (``None``: NULL), as :class:`_Compare`'s."""
    instants: tuple[datetime | None, ...]
    """Each value read as an RFC 3339 time (``None``: it is not one)."""

    def holds(self, row: Row) -> bool:
        have = row(self.field)
        pairs = zip(self.values, self.instants, strict=True)
        if self.op in ("IN", "NOT IN"):
            inside = have is not None and any(_same(have, v, t) for v, t in pairs)
            return inside if self.op == "IN" else not inside
        want, instant = self.values[0], self.instants[0]
        if want is None:
            return (have is None) == (self.op == "=")
        if have is None:
            return self.op == "!="
        if self.op in ("=", "!="):
            return _same(have, want, instant) == (self.op == "=")
        pair = _ordered(have, want, instant)
        if pair is None:
            return False
        a, b = pair
        if self.op == "<":
            return bool(a < b)
        if self.op == "<=":
            return bool(a <= b)
        if self.op == ">":
            return bool(a > b)
        return bool(a >= b)


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


_Node = _Compare | _AttributeCompare | _Not | _All | _Any


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

    def _comparison(self) -> _Compare | _AttributeCompare:
        token = self._next()
        name = token.value.lower()
        if token.kind != "word" or token.value.upper() in KEYWORDS:
            raise InvalidQuery(f"expected a field, found {_shown(token)}", token.position)
        if name not in FIELDS:
            return self._attribute(token)
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

    def _attribute(self, field: _Token) -> _AttributeCompare:
        name = field.value
        if len(name) > MAX_ATTRIBUTE_NAME:
            raise InvalidQuery(
                f"attribute name longer than {MAX_ATTRIBUTE_NAME} characters", field.position
            )
        if self._keyword("NOT"):
            if not self._keyword("IN"):
                after = self._peek()
                raise InvalidQuery(f"expected IN after NOT, found {_shown(after)}", after.position)
            op = "NOT IN"
        elif self._keyword("IN"):
            op = "IN"
        else:
            token = self._next()
            if token.kind != "op" or token.value not in ("=", "!=", "<", "<=", ">", ">="):
                raise InvalidQuery(
                    f"expected a comparison after {name}, found {_shown(token)}", token.position
                )
            op = token.value
        if op in ("IN", "NOT IN"):
            self._expect("(")
            values = [self._literal(null=False)]
            while self._peek().kind == "op" and self._peek().value == ",":
                self._next()
                if len(values) >= MAX_IN_VALUES:
                    raise InvalidQuery(
                        f"more than {MAX_IN_VALUES} values in one IN", self._peek().position
                    )
                values.append(self._literal(null=False))
            self._expect(")")
        else:
            values = [self._literal(null=op in ("=", "!="))]
        instants = tuple(_maybe_instant(v) for v in values)
        return _AttributeCompare(name, op, tuple(values), instants)

    def _literal(self, *, null: bool) -> Any:
        """A search attribute's literal: a quoted text, a number, TRUE, FALSE or NULL."""
        token = self._next()
        word = token.value.upper() if token.kind == "word" else None
        if word == "NULL":
            if not null:
                raise InvalidQuery("NULL is compared with = or != only", token.position)
            return None
        if word in ("TRUE", "FALSE"):
            return word == "TRUE"
        if token.kind == "number":
            number = (
                float(token.value) if any(c in token.value for c in ".eE") else int(token.value)
            )
            if isinstance(number, float) and not math.isfinite(number):
                raise InvalidQuery(f"{token.value} is not a finite number", token.position)
            return number
        if token.kind != "text":
            raise InvalidQuery(
                f"expected a quoted value, a number, TRUE, FALSE or NULL, found {_shown(token)}",
                token.position,
            )
        return token.value

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


def _maybe_instant(value: object) -> datetime | None:
    """``value`` read as an RFC 3339 time with a zone, if it is one."""
    if not isinstance(value, str) or not _LOOKS_LIKE_TIME.match(value):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return None if when.tzinfo is None else when.astimezone(UTC)


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

    def required(self) -> dict[str, Any]:
        """The ``field = value`` comparisons every matching run passes (those joined to the
        rest of the query by ``AND`` at its top), by field: a listing may read only the runs
        an index lists for them. A run's own fields give texts; a search attribute a text, a
        number or a bool (not a text that reads as a time: a time attribute equal to it has
        no index entry)."""
        parts = list(_conjuncts(self._node))
        found: dict[str, Any] = {}
        for part in parts:
            if not isinstance(part, _Compare | _AttributeCompare) or part.op != "=":
                continue
            value = part.values[0]
            if isinstance(part, _Compare):
                if isinstance(value, str):
                    found.setdefault(part.field, value)
            elif value is not None and part.instants[0] is None:
                found.setdefault(part.field, value)
        return found


def _conjuncts(node: _Node) -> Iterator[_Node]:
    """The parts every match passes: ``node``'s, through nested ``AND`` (parenthesised or
    not)."""
    if isinstance(node, _All):
        for part in node.parts:
            yield from _conjuncts(part)
    else:
        yield node


def encode_page_token(created_at: datetime | None, run_id: str) -> str:
    """An opaque token naming the last row of a page (its creation time and run id): the
    ``next_cursor`` of ``GET /v1/runs`` and the ``next_page_token`` of ``list_runs``."""
    when = "" if created_at is None else created_at.astimezone(UTC).strftime(_TOKEN_TIME)
    raw = json.dumps([when, run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_token(text: str) -> tuple[datetime | None, str]:
    """Where a page token says the next page starts: the last row's creation time (``None``
    for none) and run id; ``ValueError`` for text no listing answered with."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        created_at, run_id = json.loads(raw)
        if not isinstance(run_id, str) or not is_valid_run_id(run_id):
            raise ValueError("not a run id")
        if not created_at:
            return None, run_id
        return datetime.strptime(created_at, _TOKEN_TIME).replace(tzinfo=UTC), run_id
    except (binascii.Error, ValueError, TypeError, RecursionError):
        raise ValueError("not a page token") from None


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
