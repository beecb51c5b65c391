"""Owns ``streamflow topics apply|describe``: a namespace's topics from the manifests, on a cluster.

Exit codes: 0 done; 2 refused or misconfigured (one line on stderr says why, nothing created);
1 the cluster did not answer. Wire it into ``streamflow`` with :func:`register` and dispatch
with :func:`run`; :func:`main` runs it alone (``python -m streamflow.cli.topics topics apply``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from streamflow.cli.wire_args import add_wire_args, wire_args
from streamflow.core.errors import ClusterUnavailable, SchemaRegistryUnavailable, TopicsRefused
from streamflow.kafka.config import (
    DEFAULT_ADMIN_TIMEOUT,
    ENV_BOOTSTRAP,
    ENV_MANIFESTS,
    ENV_NAMESPACE,
    KafkaSettings,
)
from streamflow.serde.registry import register_schemas

if TYPE_CHECKING:
    from streamflow.kafka.admin import ApplyReport, TopicState

T = TypeVar("T")
EXIT_OK = 0
EXIT_UNAVAILABLE = 1
EXIT_REFUSED = 2
DEFAULT_PROFILE = "production"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``topics apply`` and ``topics describe`` to a ``streamflow`` sub-command set."""
    topics = subparsers.add_parser(
        "topics",
        help="create and verify a namespace's Kafka topics from the manifests",
        description="Create and verify a namespace's Kafka topics from topologies/*.toml.",
    )
    actions = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    commands: tuple[tuple[str, str, Callable[[argparse.Namespace], int]], ...] = (
        ("apply", "create missing topics, verify existing ones, refuse unsafe ones", cmd_apply),
        ("describe", "compare the cluster's topics with the manifests", cmd_describe),
    )
    for name, summary, handler in commands:
        parser = actions.add_parser(name, help=summary, description=summary)
        parser.add_argument("--bootstrap", help=f"host:port[,host:port] (default ${ENV_BOOTSTRAP})")
        add_wire_args(parser)
        parser.add_argument("--namespace", help=f"topic prefix (default ${ENV_NAMESPACE})")
        parser.add_argument(
            "--profile",
            default=DEFAULT_PROFILE,
            help="replication profile of the manifest: production (RF 3) or dev (RF 1)",
        )
        parser.add_argument(
            "--partitions",
            type=int,
            help="partitions of requests, history, tasks and retention (default: the manifest's)",
        )
        parser.add_argument(
            "--build",
            action="append",
            default=[],
            dest="builds",
            metavar="ID",
            help="runtime build whose tasks topic to include (repeatable)",
        )
        parser.add_argument(
            "--manifests",
            type=Path,
            help=f"manifest directory (default ${ENV_MANIFESTS}, else the repository's)",
        )
        parser.add_argument(
            "--timeout", type=float, default=DEFAULT_ADMIN_TIMEOUT, help="seconds per cluster call"
        )
        parser.set_defaults(handler=handler)


def run(args: argparse.Namespace) -> int:
    """Dispatch parsed ``topics ...`` arguments to their command."""
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def cmd_apply(args: argparse.Namespace) -> int:
    """``streamflow topics apply``: create the namespace's missing topics and verify the others;
    the exit status."""
    from streamflow.kafka.admin import apply  # the Kafka client: only for this command

    try:
        settings, report = _on_cluster(apply, args)
    except (ValueError, TopicsRefused) as exc:  # ManifestError is a ValueError
        return _fail(exc, EXIT_REFUSED)
    except ClusterUnavailable as exc:
        return _fail(exc, EXIT_UNAVAILABLE)
    _print_apply(report)
    if settings.schema_registry is not None:
        try:
            registered = register_schemas(settings.schema_registry)
        except SchemaRegistryUnavailable as exc:
            return _fail(exc, EXIT_UNAVAILABLE)
        print(f"schema registry {registered.url}: {len(registered.ids)} schemas registered")
        for subject, schema_id in sorted(registered.ids.items()):
            print(f"  {subject}  id {schema_id}")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    """``streamflow topics describe``: the declared topics next to what the cluster has; the exit
    status (refused if ``apply`` would refuse)."""
    from streamflow.kafka.admin import describe  # the Kafka client: only for this command

    try:
        settings, states = _on_cluster(describe, args)
    except ValueError as exc:
        return _fail(exc, EXIT_REFUSED)
    except ClusterUnavailable as exc:
        return _fail(exc, EXIT_UNAVAILABLE)
    print(f"namespace {settings.namespace} (profile {args.profile})")
    _print_states(states, created=())
    problems = [f"{s.spec.name}: {p}" for s in states for p in s.problems]
    if problems:
        return _fail(f"apply would refuse: {'; '.join(problems)}", EXIT_REFUSED)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``topics ...`` on its own, before it is wired into ``streamflow``."""
    parser = argparse.ArgumentParser(prog="streamflow", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


def _on_cluster(command: Callable[..., T], args: argparse.Namespace) -> tuple[KafkaSettings, T]:
    """The settings of the namespace ``args`` names, and what ``command`` (``apply`` or
    ``describe``) returns for its topics in the manifests, with the options of ``args``."""
    from streamflow.kafka.manifest import load_manifest

    settings = KafkaSettings.from_env(
        **wire_args(args), bootstrap=args.bootstrap, namespace=args.namespace
    )
    manifest = load_manifest(args.manifests)
    return settings, command(
        settings,
        manifest,
        profile=args.profile,
        partitions=args.partitions,
        builds=args.builds,
        timeout=args.timeout,
    )


def _fail(reason: object, code: int) -> int:
    print(f"streamflow topics: {' '.join(str(reason).split())}", file=sys.stderr)
    return code


def _print_apply(report: ApplyReport) -> None:
    print(
        f"namespace {report.namespace} (profile {report.profile}): created "
        f"{len(report.created)}, verified {len(report.existing)} in {report.seconds:.2f} s"
    )
    _print_states(report.topics, created=report.created)


def _print_states(states: Sequence[TopicState], *, created: Sequence[str]) -> None:
    width = max((len(s.spec.name) for s in states), default=0)
    for state in states:
        spec = state.spec
        if spec.name in created:
            status = "created"
        elif not state.exists:
            status = "missing"
        else:
            status = "refused" if state.problems else "drift" if state.drift else "ok"
        actual = state.partitions if state.exists else spec.partitions
        policy = spec.config.get("cleanup.policy", "?")
        print(f"  {status:<8} {spec.name:<{width}}  {actual} partitions  rf {_rf(state)}  {policy}")
        for line in (*state.problems, *state.drift):
            print(f"           {line}")


def _rf(state: TopicState) -> int:
    if state.exists and state.replication_factor is not None:
        return state.replication_factor
    return state.spec.replication_factor


if __name__ == "__main__":
    raise SystemExit(main())
