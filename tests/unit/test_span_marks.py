"""The observers' marks of exported spans, on a real RocksDB local state: a mark lasts until the
record that ended its span is committed, so records of a killed transaction that come back over
several transactions still find their spans exported (none is exported twice)."""

from __future__ import annotations

from streamflow.topologies.common import LocalState
from streamflow.topologies.span_marks import SpanMarks


def _state(path) -> LocalState:
    return LocalState(path, ("meta", "spans"))


def test_a_mark_lasts_until_its_own_record_is_committed(tmp_path) -> None:
    marks = SpanMarks(_state(tmp_path / "a"))
    marks.described(["early"], partition=0, offset=3)
    marks.described(["late"], partition=0, offset=8)
    marks.described(["other"], partition=1, offset=2)
    marks.mark(["early", "late", "other"])
    assert all(marks.exported(k) for k in ("early", "late", "other"))

    # The first transaction after a kill commits the records up to offset 4 of partition 0.
    marks.drop_committed({0: 5})
    assert not marks.exported("early")
    assert marks.exported("late")  # its record comes in a later transaction
    assert marks.exported("other")  # partition 1 not reached yet

    marks.drop_committed({0: 9, 1: 3})
    assert not any(marks.exported(k) for k in ("early", "late", "other"))


def test_marks_survive_a_restart_on_the_same_state(tmp_path) -> None:
    state = _state(tmp_path / "b")
    marks = SpanMarks(state)
    marks.described(["span"], partition=2, offset=40)
    marks.mark(["span"])
    state.close()

    again = SpanMarks(_state(tmp_path / "b"))  # the killed instance, started again
    assert again.exported("span")
    again.drop_committed({2: 40})
    assert again.exported("span")
    again.drop_committed({2: 41})
    assert not again.exported("span")


def test_a_mark_written_without_its_record_goes_at_the_next_commit(tmp_path) -> None:
    state = _state(tmp_path / "c")
    batch = state.batch()
    batch.put("spans", b"legacy", b"")  # as an earlier version wrote them
    state.write(batch)
    marks = SpanMarks(state)
    assert marks.exported("legacy")
    marks.drop_committed({})
    assert not marks.exported("legacy")
