"""``streamflow builds``: per build, open and terminal runs from histories and live routes from
registrations (the real-broker run is in tests/kafka/test_rolling_deploy.py)."""

from __future__ import annotations

from streamflow.cli.builds import BuildUsage, pins_of_rows, usage
from streamflow.core.events import FlowEventEnvelope, RunCompleted, RunCreated, RunStarted
from streamflow.serde.messages import BuildRegistration
from tests.support import T0, spec


def history(run_id, build, *, ended):
    pinned = spec() if build is None else spec().with_runtime_build(build)
    events = [RunCreated(spec=pinned), RunStarted()] + ([RunCompleted()] if ended else [])
    return [
        FlowEventEnvelope(run_id=run_id, sequence=i, event_id=str(i), timestamp=T0, event=e)
        for i, e in enumerate(events, start=1)
    ]


def registration(role, current, *compatible, unpinned=False):
    return BuildRegistration(
        group=f"ns.{role}.{current}",
        instance="0",
        role=role,
        current=current,
        compatible=compatible,
        accepts_unpinned=unpinned,
        heartbeat_at=T0,
        ttl_ms=20_000,
    )


def test_runs_are_counted_per_pinned_build_and_routes_follow_compatibility():
    histories = {
        "a": history("a", "v1", ended=False),
        "b": history("b", "v1", ended=True),
        "c": history("c", None, ended=False),
        "d": history("d", "v0", ended=True),
    }
    live = [registration("processor", "v2", "v1"), registration("worker", "v2")]

    rows = {row.build: row for row in usage(histories, live)}

    assert list(rows) == [None, "v0", "v1", "v2"]
    assert rows["v1"] == BuildUsage(
        build="v1",
        open_runs=1,
        terminal_runs=1,
        route=True,
        workers=False,
        groups=("ns.processor.v2",),
    )
    assert not rows["v1"].safe_to_retire
    # Unpinned runs with no group that accepts them: stuck, and not safe to retire.
    assert (rows[None].open_runs, rows[None].route, rows[None].safe_to_retire) == (1, False, False)
    # A build whose runs all ended and that nobody serves any more: retired safely.
    assert (rows["v0"].terminal_runs, rows["v0"].route, rows["v0"].safe_to_retire) == (
        1,
        False,
        True,
    )
    # A build that is served but has no runs yet.
    assert (rows["v2"].open_runs, rows["v2"].route, rows["v2"].workers) == (0, True, True)


def test_runs_can_be_counted_from_an_observers_run_index():
    rows = [
        {"run_id": "a", "status": "completed", "workflow": "w", "build": "v1"},
        {"run_id": "b", "status": "suspended", "workflow": "w", "build": "v1"},
        {"run_id": "c", "status": "running", "workflow": "w", "build": None},
        {"run_id": "d", "status": "pending", "workflow": None, "build": None},  # not started
    ]
    counted = {
        r.build: (r.open_runs, r.terminal_runs) for r in usage(None, [], pins=pins_of_rows(rows))
    }
    assert counted == {"v1": (1, 1), None: (1, 0)}
