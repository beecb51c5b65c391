"""Owns ``streamflow acls``: the least-privilege Kafka ACLs one role needs on a namespace, as
``kafka-acls.sh`` arguments (one rule a line), e.g. ``kafka-acls.sh --bootstrap-server ...
$line`` for each."""

from __future__ import annotations

import argparse
import os
import sys

from streamflow.kafka.acls import ROLES, acls_for


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``streamflow acls`` to the command line."""
    acls = subparsers.add_parser(
        "acls", help="print the least-privilege Kafka ACLs of a role on a namespace"
    )
    acls.add_argument("--role", required=True, choices=ROLES, help="the topology (or client)")
    acls.add_argument(
        "--namespace",
        default=os.environ.get("STREAMFLOW_NAMESPACE"),
        help="the topic prefix (default $STREAMFLOW_NAMESPACE)",
    )
    acls.add_argument(
        "--principal", help="the principal to allow (default User:<role>), e.g. User:journal"
    )
    acls.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC",
        help="a user topic of the role: a journal's publication topic, a triggers' input topic "
        "(repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the ACLs; exit 2 without a namespace."""
    if not args.namespace:
        print("error: --namespace (or $STREAMFLOW_NAMESPACE) is required", file=sys.stderr)
        return 2
    principal = args.principal or f"User:{args.role}"
    for acl in acls_for(args.role, args.namespace, args.topic):
        print(acl.command(principal))
    return 0
