"""Owns ``streamflow builds``: which runtime builds still have open runs, and which have a live
route, so an operator knows when an old build can be retired.

It reads every committed history of the namespace and the live registrations on
``{ns}.builds`` and prints, per build (runs' pins and builds some live group serves): open and
terminal runs, whether a live processor registration admits it (the route the journal and the
timer require), whether a live worker serves it, and whether it is safe to retire (no open
runs). It counts runs by reading every history (development, small namespaces), or with
``--url`` from the run index of an observers instance (any instance answers for the whole
namespace).

Exit codes: 0 listed; 2 misconfigured; 1 the cluster did not answer. Wire it into
``streamflow`` with :func:`register` and dispatch with :func:`run`; :func:`main` runs it alone
(``python -m streamflow.cli.builds builds``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.events import FlowEventEnvelope, RunCreated
from streamflow.core.snapshot import WorkflowRunStatus
from streamflow.kafka.config import ENV_BOOTSTRAP, ENV_NAMESPACE, KafkaSettings
from streamflow.observe.http import InspectionUnavailable, fetch_json
from streamflow.serde.messages import BuildRegistration

# The Kafka client and the topologies' modules (RocksDB too) are imported by the functions that
# use them: ``streamflow --help`` and the other commands load neither.

EXIT_OK = 0
EXIT_UNAVAILABLE = 1
EXIT_REFUSED = 2
UNPINNED = "(unpinned)"


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildUsage:
    """One build's runs and routes."""

    build: str | None
    """The runtime build id; ``None`` for runs without a pin."""
    open_runs: int
    """Runs pinned to it whose history has no terminal event."""
    terminal_runs: int
    """Runs pinned to it that ended (continued-as-new segments included)."""
    route: bool
    """Whether a live processor registration admits it (starts, wake-ups and cancellations
    are accepted)."""
    workers: bool
    """Whether a live worker registration serves its step tasks."""
    groups: tuple[str, ...]
    """The live groups (processor and worker) that admit it."""

    @property
    def safe_to_retire(self) -> bool:
        """No open run needs this build any more."""
        return self.open_runs == 0

    def to_json(self) -> dict[str, object]:
        """The JSON form ``streamflow builds --json`` prints."""
        return {
            "build": self.build,
            "open_runs": self.open_runs,
            "terminal_runs": self.terminal_runs,
            "route": self.route,
            "workers": self.workers,
            "safe_to_retire": self.safe_to_retire,
            "groups": list(self.groups),
        }


Pins: TypeAlias = Iterable[tuple[str | None, bool]]
"""One ``(build, terminal)`` pair per run."""


def pins_of_histories(histories: Mapping[str, Sequence[FlowEventEnvelope]]) -> Pins:
    """The ``(build, terminal)`` pair of every history that starts with ``run_created``."""
    for events in histories.values():
        if not events or not isinstance(events[0].event, RunCreated):
            continue
        pin = events[0].event.spec.runtime_build_id
        yield (None if pin is None else str(pin)), events[-1].event.is_terminal()


def pins_of_rows(rows: Iterable[Mapping[str, Any]]) -> Pins:
    """From the rows of an observers instance's ``/v1/runs``."""
    for row in rows:
        if row.get("workflow") is None:
            continue  # not started (no run_created)
        yield row["build"], WorkflowRunStatus(row["status"]).is_terminal


def usage(
    histories: Mapping[str, Sequence[FlowEventEnvelope]] | None,
    registrations: Iterable[BuildRegistration],
    *,
    pins: Pins | None = None,
) -> list[BuildUsage]:
    """Per build: open and terminal runs (from histories, or from ``pins``) and live routes
    (from live registrations); unpinned first, then by build id."""
    open_runs: dict[str | None, int] = {}
    terminal_runs: dict[str | None, int] = {}
    for build, terminal in pins if pins is not None else pins_of_histories(histories or {}):
        tally = terminal_runs if terminal else open_runs
        tally[build] = tally.get(build, 0) + 1
    live = list(registrations)
    builds: set[str | None] = set(open_runs) | set(terminal_runs)
    for registration in live:
        builds.update(b for b in (registration.current, *registration.compatible) if b)
        if registration.accepts_unpinned:
            builds.add(None)
    from streamflow.topologies.registry import admitted_by

    rows = []
    for build in builds:
        serving = [r for r in live if admitted_by(r, build)]
        rows.append(
            BuildUsage(
                build=build,
                open_runs=open_runs.get(build, 0),
                terminal_runs=terminal_runs.get(build, 0),
                route=any(r.role == "processor" for r in serving),
                workers=any(r.role == "worker" for r in serving),
                groups=tuple(sorted({r.group for r in serving})),
            )
        )
    return sorted(rows, key=lambda row: (row.build is not None, row.build or ""))


def read_usage(
    settings: KafkaSettings, now: datetime, *, url: str | None = None
) -> list[BuildUsage]:
    """:func:`usage` for a namespace on a cluster: live routes, and the runs from an observers
    instance's run index (``url``) or else from every committed history."""
    from streamflow.kafka.client import HistoryReader
    from streamflow.topologies.registry import RouteTable

    routes = RouteTable(settings)
    try:
        registrations = routes.live(now)
    finally:
        routes.close()
    if url is not None:
        key = os.environ.get("STREAMFLOW_API_KEY")  # the inspection shapes: ``scope=all``
        rows = fetch_json(url, "/v1/runs", {"scope": "all"}, timeout=60, api_key=key)
        return usage(None, registrations, pins=pins_of_rows(rows))
    reader = HistoryReader(settings)
    try:
        histories = reader.histories()
    finally:
        reader.close()
    return usage(histories, registrations)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``builds`` to a ``streamflow`` sub-command set."""
    summary = "list runtime builds: open runs, live routes, whether each is safe to retire"
    parser = subparsers.add_parser("builds", help=summary, description=summary)
    parser.add_argument("--bootstrap", help=f"host:port[,host:port] (default ${ENV_BOOTSTRAP})")
    add_wire_args(parser)
    parser.add_argument("--namespace", help=f"topic prefix (default ${ENV_NAMESPACE})")
    parser.add_argument(
        "-X",
        dest="properties",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka property (repeatable), e.g. for SASL/SSL",
    )
    parser.add_argument(
        "--url",
        help="count runs from an observers instance's run index (e.g. http://127.0.0.1:9464) "
        "instead of reading every history",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.set_defaults(handler=cmd_builds)


def run(args: argparse.Namespace) -> int:
    """Dispatch parsed ``builds`` arguments."""
    return cmd_builds(args)


def cmd_builds(args: argparse.Namespace) -> int:
    """``streamflow builds``: each build's runs and live routes, as a table or JSON; the exit
    status."""
    from confluent_kafka import KafkaException

    from streamflow.clock import utc_now

    try:
        properties = dict(_property(p) for p in args.properties)
        settings = KafkaSettings.from_env(
            **wire_args(args),
            bootstrap=args.bootstrap,
            namespace=args.namespace,
            properties=properties,
        )
    except ValueError as exc:
        return _fail(exc, EXIT_REFUSED)
    try:
        rows = read_usage(settings, utc_now(), url=args.url)
    except (KafkaException, OSError, ValueError, InspectionUnavailable) as exc:
        return _fail(exc, EXIT_UNAVAILABLE)
    if args.json:
        print(json.dumps({"namespace": settings.namespace, "builds": [r.to_json() for r in rows]}))
        return EXIT_OK
    _print_table(settings.namespace, rows)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``builds`` on its own, before it is wired into ``streamflow``."""
    parser = argparse.ArgumentParser(prog="streamflow", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


def _property(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(f"-X {item!r}: expected KEY=VALUE")
    return key, value


def _fail(reason: object, code: int) -> int:
    print(f"streamflow builds: {' '.join(str(reason).split())}", file=sys.stderr)
    return code


def _print_table(namespace: str, rows: Sequence[BuildUsage]) -> None:
    print(f"namespace {namespace}: {len(rows)} builds")
    header = ("BUILD", "OPEN", "TERMINAL", "ROUTE", "WORKERS", "SAFE TO RETIRE")
    table = [
        (
            UNPINNED if r.build is None else r.build,
            str(r.open_runs),
            str(r.terminal_runs),
            _yes(r.route),
            _yes(r.workers),
            _yes(r.safe_to_retire),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in (header, *table)) for i in range(len(header))]
    for line in (header, *table):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    stuck = [r for r in rows if r.open_runs and not r.route]
    for r in stuck:
        build = UNPINNED if r.build is None else r.build
        print(
            f"warning: {r.open_runs} open runs of {build} have no live route: they make no "
            "progress until a processor that admits the build runs"
        )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


if __name__ == "__main__":
    raise SystemExit(main())
