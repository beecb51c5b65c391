"""Run queries (``where=``): what each operator selects, precedence, missing fields, and a typed
error naming the position for every way a query can break the grammar or the size limits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streamflow.core.errors import InvalidQuery
from streamflow.core.query import MAX_DEPTH, MAX_IN_VALUES, MAX_QUERY_CHARS, parse_query

RUNS = {
    "a": {"workflow": "orders", "status": "running", "created": datetime(2026, 12, 1, tzinfo=UTC),
          "ended": None, "build": None, "run_id": "a", "version": "1", "parent": None},
    "b": {"workflow": "orders", "status": "completed", "created": datetime(2026, 12, 2, tzinfo=UTC),
          "ended": datetime(2026, 12, 3, tzinfo=UTC), "build": "b7", "run_id": "b", "version": "2",
          "parent": "a"},
    "c": {"workflow": "billing", "status": "failed", "created": datetime(2026, 11, 30, tzinfo=UTC),
          "ended": datetime(2026, 12, 1, tzinfo=UTC), "build": None, "run_id": "c", "version": "1",
          "parent": None},
}  # fmt: skip


def selected(text: str) -> list[str]:
    query = parse_query(text)
    return sorted(r for r, fields in RUNS.items() if query.matches(fields.get))


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        ("workflow = 'orders'", ["a", "b"]),
        ("workflow != 'orders'", ["c"]),
        ("status IN ('running', 'failed')", ["a", "c"]),
        ("status not in ('running', 'failed')", ["b"]),
        ("created > '2026-12-01T00:00:00Z'", ["b"]),
        ("created >= '2026-12-01T00:00:00Z'", ["a", "b"]),
        ("created <= '2026-12-01T01:00:00+01:00'", ["a", "c"]),  # compared as instants
        ("ended <= '2026-12-01T00:00:00Z'", ["c"]),
        ("ended = NULL", ["a"]),
        ("ended != null", ["b", "c"]),
        ("build = 'b7'", ["b"]),
        ("build != 'b7'", ["a", "c"]),  # a run without a build is not b7
        ("ended > '2020-01-01T00:00:00Z'", ["b", "c"]),  # a run that has not ended fails it
        ("parent = 'a'", ["b"]),
        ("workflow = 'orders' OR status = 'failed' AND version = '2'", ["a", "b"]),
        ("(workflow = 'orders' OR status = 'failed') AND version = '1'", ["a", "c"]),
        ("NOT workflow = 'orders' OR run_id = 'a'", ["a", "c"]),
        ("NOT (workflow = 'orders' OR run_id = 'a')", ["c"]),
        ("  WORKFLOW = 'orders'  and   Status = 'running' ", ["a"]),
    ],
)
def test_a_query_selects_the_runs_it_says(text, runs):
    assert selected(text) == runs


def test_a_quote_inside_a_value_is_doubled():
    query = parse_query("workflow = 'it''s'")
    assert query.matches({"workflow": "it's"}.get)
    assert not query.matches({"workflow": "it"}.get)
    assert query.text == "workflow = 'it''s'"


@pytest.mark.parametrize(
    ("text", "position", "says"),
    [
        ("", 0, "empty"),
        ("customer = 42.5.1", 15, "unexpected '.'"),
        ("customer = x", 11, "expected a quoted value, a number, TRUE, FALSE or NULL"),
        ("customer IN ('a', NULL)", 18, "NULL is compared with = or != only"),
        ("customer NOT = 'x'", 13, "expected IN after NOT"),
        ("customer ~ 'x'", 9, "unexpected '~'"),
        ("customer", 8, "expected a comparison after customer, found the end"),
        ("workflow = TRUE", 11, "expected a quoted value"),
        ("created > 5", 10, "expected a quoted value"),
        ("a" * 65 + " = 1", 0, "attribute name longer than 64"),
        ("workflow = 'x", 11, "not closed"),
        ("workflow = x", 11, "expected a quoted value"),
        ("workflow > 'x'", 9, "compares times only"),
        ("status = 'sleeping'", 9, "unknown status 'sleeping'"),
        ("created > 'yesterday'", 10, "not an RFC 3339 time"),
        ("created > '2026-12-01T00:00:00'", 10, "no time zone"),
        ("workflow = 'x' AND", 18, "expected a field, found the end"),
        ("workflow = 'x' status = 'y'", 15, "expected AND, OR or the end"),
        ("(workflow = 'x'", 15, "expected ')'"),
        ("workflow IN ()", 13, "expected a quoted value"),
        ("workflow IN ('a', NULL)", 18, "NULL is compared with = or != only"),
        ("workflow NOT = 'x'", 13, "expected IN after NOT"),
        ("workflow = 'x' ; drop", 15, "unexpected ';'"),
        ("workflow", 8, "expected a comparison after workflow, found the end"),
    ],
)
def test_a_broken_query_is_invalid_at_the_position_where_it_breaks(text, position, says):
    with pytest.raises(InvalidQuery) as caught:
        parse_query(text)
    assert caught.value.position == position
    assert says in str(caught.value)
    assert f"at position {position}" in str(caught.value)


def test_a_query_is_bounded_in_size_depth_and_list_length():
    with pytest.raises(InvalidQuery, match="longer than"):
        parse_query("workflow = '" + "x" * MAX_QUERY_CHARS + "'")
    deep = "(" * (MAX_DEPTH + 1) + "workflow = 'x'" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(InvalidQuery, match="nested deeper"):
        parse_query(deep)
    many = ", ".join(f"'w{i}'" for i in range(MAX_IN_VALUES + 1))
    with pytest.raises(InvalidQuery, match="more than"):
        parse_query(f"workflow IN ({many})")
    fits = ", ".join(f"'w{i}'" for i in range(MAX_IN_VALUES))
    assert parse_query(f"workflow IN ({fits})").matches({"workflow": "w99"}.get)


def test_the_equalities_every_match_passes_are_what_an_index_may_narrow_to():
    query = parse_query("workflow = 'orders' AND status = 'running' AND ended = NULL")
    assert query.required() == {"workflow": "orders", "status": "running"}
    assert parse_query("status = 'failed'").required() == {"status": "failed"}
    # Under OR or NOT nothing is required of every match.
    assert parse_query("workflow = 'a' OR status = 'failed'").required() == {}
    assert parse_query("NOT workflow = 'a'").required() == {}
    assert (
        parse_query("workflow IN ('a', 'b') AND created > '2026-01-01T00:00:00Z'").required() == {}
    )


# -- search attributes ---------------------------------------------------------------------------

WHEN = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
ATTRIBUTED = {
    "p": {"customer": "42", "amount": 120, "vip": True, "due": WHEN, "tags": ("urgent", "eu"),
          "score": 0.5, "status": "running"},
    "q": {"customer": "43", "amount": 80.0, "vip": False, "tags": ("eu",), "status": "running"},
    "r": {"customer": "42", "amount": "a lot", "status": "completed"},
    "s": {"status": "running"},
}  # fmt: skip


def attributed(text: str) -> list[str]:
    query = parse_query(text)
    return sorted(r for r, fields in ATTRIBUTED.items() if query.matches(fields.get))


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        ("customer = '42'", ["p", "r"]),
        ("customer = '42' AND status = 'running'", ["p"]),
        ("customer != '42'", ["q", "s"]),  # a run without the attribute is not 42
        ("customer = NULL", ["s"]),
        ("amount > 100", ["p"]),  # the text "a lot" is not ordered against a number
        ("amount >= 80", ["p", "q"]),
        ("amount = 80", ["q"]),  # an int literal equals a float value
        ("amount = '120'", []),  # a text is not a number
        ("amount != '120'", ["p", "q", "r", "s"]),
        ("vip = TRUE", ["p"]),
        ("vip = false", ["q"]),
        ("vip = 1", []),  # a number is not a bool
        ("due < '2026-12-06T11:00:00Z'", ["p"]),
        ("due = '2026-12-06T11:00:00+01:00'", ["p"]),  # compared as instants
        ("due > 5", []),
        ("tags = 'urgent'", ["p"]),  # a keyword list contains the value
        ("tags = 'eu'", ["p", "q"]),
        ("tags IN ('urgent', 'apac')", ["p"]),
        ("tags NOT IN ('urgent')", ["q", "r", "s"]),
        ("customer IN ('43', '44') OR vip = TRUE", ["p", "q"]),
        ("score < 1e0 AND score > -0.5", ["p"]),
        ("Customer = '42'", []),  # attribute names are case-sensitive
    ],
)
def test_a_query_reads_search_attributes_by_their_kind(text, runs):
    assert attributed(text) == runs


def test_attribute_equalities_narrow_unless_the_value_reads_as_a_time():
    query = parse_query("customer = '42' AND amount = 5 AND vip = TRUE AND status = 'running'")
    assert query.required() == {"customer": "42", "amount": 5, "vip": True, "status": "running"}
    # A time attribute equal to this text has no index entry: no narrowing on it.
    assert parse_query("due = '2026-12-06T10:00:00Z'").required() == {}
    assert parse_query("tags IN ('a') AND customer != '1'").required() == {}
    # Through nested AND: what a batch's query (the user's in parentheses) is narrowed by.
    nested = parse_query("(customer = '42' AND status = 'running') AND workflow != 'b'")
    assert nested.required() == {"customer": "42", "status": "running"}
    assert parse_query("(customer = '42' OR vip = TRUE) AND tier = 1").required() == {"tier": 1}
