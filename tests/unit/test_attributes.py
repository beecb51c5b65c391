"""Search attributes: what a run may carry, the typed JSON form history keeps, updates that add,
change and remove, and the index entries equal values share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from streamflow.core.attributes import (
    MAX_ATTRIBUTES,
    MAX_INDEXED_VALUES,
    MAX_KEYWORDS,
    MAX_TEXT_CHARS,
    SearchAttributes,
    check_attributes,
    from_plain,
    index_value,
    index_values,
    view_of,
)
from streamflow.core.errors import InvalidSearchAttributes, SerializationError

PARIS = timezone(timedelta(hours=1))


def test_every_kind_round_trips_through_its_json_form():
    attributes = check_attributes(
        {
            "customer": "42",
            "amount": 120,
            "score": 0.25,
            "vip": True,
            "due": datetime(2026, 12, 6, 11, 0, tzinfo=PARIS),
            "tags": ["urgent", "eu"],
        }
    )
    form = attributes.to_json()
    assert form == {
        "amount": {"int": 120},
        "customer": {"text": "42"},
        "due": {"time": "2026-12-06T10:00:00Z"},
        "score": {"float": 0.25},
        "tags": {"keywords": ["urgent", "eu"]},
        "vip": {"bool": True},
    }
    assert SearchAttributes.from_json(form) == attributes
    assert attributes.get("due") == datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    assert view_of(attributes)["tags"] == ["urgent", "eu"]
    assert view_of(attributes)["due"] == {"time": "2026-12-06T10:00:00Z"}
    assert from_plain(view_of(attributes)) == attributes  # a view's attributes read back


def test_an_update_adds_changes_and_removes():
    start = check_attributes({"customer": "42", "stage": "new"})
    update = check_attributes({"stage": "paid", "customer": None, "total": 9}, removals=True)
    assert start.merged(update).as_dict() == {"stage": "paid", "total": 9}
    # A removal is only an update's: a start's None is refused.
    with pytest.raises(InvalidSearchAttributes, match="only an update removes"):
        check_attributes({"customer": None})
    with pytest.raises(SerializationError):
        SearchAttributes.from_json({"customer": None})


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        ({"status": "x"}, "run query's own field"),
        ({"NULL": "x"}, "run query's own field"),
        ({"9lives": "x"}, "invalid attribute name"),
        ({"has-dash": "x"}, "invalid attribute name"),
        ({"x" * 65: "x"}, "invalid attribute name"),
        ({"n": float("nan")}, "finite"),
        ({"n": 2**63}, "64-bit"),
        ({"t": datetime(2026, 12, 6)}, "without a time zone"),  # noqa: DTZ001 (naive on purpose)
        ({"s": "x" * (MAX_TEXT_CHARS + 1)}, "at most 256"),
        ({"s": "a\x00b"}, "control character"),
        ({"s": "\ud800"}, "lone surrogate"),
        ({"k": ["a"] * (MAX_KEYWORDS + 1)}, "keywords"),
        ({"k": ["a", 1]}, "must be a str"),
        ({"o": {"nested": 1}}, "is a dict"),
        ({f"a{i}": i for i in range(MAX_ATTRIBUTES + 1)}, "at most 32"),
        ({f"k{i}": ["x"] * MAX_KEYWORDS for i in range(5)}, f"at most {MAX_INDEXED_VALUES}"),
    ],
)
def test_what_no_run_may_carry_is_refused_with_the_reason(attributes, says):
    with pytest.raises(InvalidSearchAttributes, match=says):
        check_attributes(attributes)


def test_a_recorded_form_that_breaks_a_rule_is_a_serialization_error():
    with pytest.raises(SerializationError, match="finite"):
        SearchAttributes.from_json({"n": {"float": float("inf")}})
    with pytest.raises(SerializationError, match="unknown kind"):
        SearchAttributes.from_json({"n": {"decimal": "1"}})
    with pytest.raises(SerializationError, match="not a valid int value"):
        SearchAttributes.from_json({"n": {"int": True}})


def test_equal_values_share_an_index_entry_and_times_have_none():
    assert index_values(5) == index_values(5.0) == [index_value(5)] == ["n:5"]
    assert index_values(5.5) == ["n:5.5"]
    assert index_values(True) == ["b:1"] != index_values(1)
    assert index_values(("eu", "urgent", "eu")) == ["s:eu", "s:urgent"]
    assert index_values("eu") == ["s:eu"]
    assert index_values(datetime(2026, 1, 1, tzinfo=UTC)) == []


def test_a_stored_form_reads_back_without_being_checked_again():
    from streamflow.core.attributes import stored

    attributes = check_attributes(
        {"due": datetime(2026, 12, 6, 11, 0, 0, 250000, tzinfo=PARIS), "n": 2.5, "k": ["a"]}
    )
    assert stored(attributes.to_json()) == attributes
    with pytest.raises(ValueError, match="unknown kind"):
        stored({"n": {"decimal": "1"}})
