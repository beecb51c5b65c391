"""The chaos suite's short version (``python -m bench.chaos --short``): one fault of each kind
under load — SIGKILL of every role (some onto empty state directories), a SIGSTOPped journal,
poison and oversized records, a single broker killed and restarted on its data directory, a
3-broker cluster losing a node — with hook callbacks sent twice or contradicting and two
observers instances, one of them killed repeatedly. Nothing may be lost, stuck, written twice
or answered partially. The full version and its figures: docs/reliability.md."""

from __future__ import annotations

import pytest

from bench.chaos.__main__ import SCENARIOS, main, render

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.timeout(900)
async def test_the_short_chaos_suite_loses_and_breaks_nothing(kafka_broker, tmp_path):
    outcomes = await main(
        list(SCENARIOS), short=True, seed=1, root=tmp_path, bootstrap=kafka_broker.bootstrap
    )
    assert [o.name for o in outcomes] == ["mixed", "limits", "broker", "cluster"]
    for outcome in outcomes:
        report = render(outcome)
        assert outcome.runs > 0, report
        assert outcome.completed == outcome.runs, report
        assert not outcome.stuck, report
        assert not outcome.missing, report
        assert not outcome.violations, report
        assert outcome.faults, report
        assert outcome.audited > 0, report
        assert outcome.observers.get("partial") == 0, report
        assert outcome.observers.get("false_404") == 0, report
        assert outcome.observers.get("index_incomplete") == 0, report
        if outcome.name == "limits":  # limited runs only: the limit proof, every limit reached
            bulk = outcome.runs // 3  # each holds its run's slot; the others also a step's
            assert outcome.limits["holders"] == 2 * (outcome.runs - bulk) + bulk, report
            assert outcome.limits["at_max"] > 0, report  # limits were reached, not idle
            assert outcome.limits["shared"] > 0, report  # partitions granted shares
            continue
        assert outcome.hooks["resolved_once"] == outcome.hooks["runs"] > 0, report
    mixed = outcomes[0]
    assert {f.kind.split(" (")[0] for f in mixed.faults} >= {
        "kill -9 journal",
        "kill -9 processor",
        "kill -9 worker",
        "kill -9 timer",
        "kill -9 hooks",
        "kill -9 observers",
        "SIGSTOP journal",
        "poison records",
    }
