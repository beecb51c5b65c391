"""Least-privilege Kafka ACLs: what each streamflow role needs on one namespace.

Every name is the namespace's: its topics (``{ns}.history``, ...), its groups (``{ns}.journal``;
``{ns}.readers``, which the group-less readers name without joining), the transactional ids of
its transactional topologies (``{ns}.journal.<instance>``: a prefix). Task topics and the
processor and worker groups are one per build, so they are prefixes too (``{ns}.tasks.``,
``{ns}.processor.``, ``{ns}.worker.``). Publication topics (``ctx.publish``) and trigger
topics are the user's: pass them as ``topics``. No role needs a CLUSTER ACL (every producer is
idempotent, which WRITE on a topic allows since Kafka 2.8), except ``admin`` (``topics
apply``), which creates the topics.

``streamflow acls --role ROLE --namespace NS`` prints them; ``docs/security.md`` says how to
grant them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LITERAL = "LITERAL"
PREFIXED = "PREFIXED"

ROLES = (
    "journal",
    "processor",
    "worker",
    "timer",
    "hooks",
    "observers",
    "limits",
    "triggers",
    "client",
    "admin",
)
"""The roles, one per topology, then ``client`` (``FlowClient``, the CLI's ``--kafka``,
``serve --kafka``) and ``admin`` (``topics apply``)."""


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """One ALLOW rule: ``operation`` on the ``resource`` named ``name`` (``pattern``: LITERAL,
    or PREFIXED for every name that starts with it)."""

    resource: str
    """TOPIC, GROUP, TRANSACTIONAL_ID or CLUSTER."""
    name: str
    pattern: str
    operation: str
    """READ, WRITE, DESCRIBE, CREATE or DESCRIBE_CONFIGS."""

    def binding(self, principal: str) -> Any:
        """The ``confluent_kafka`` ``AclBinding`` that allows ``principal`` this rule."""
        kafka: Any = importlib.import_module("confluent_kafka.admin")  # its stubs re-export none
        return kafka.AclBinding(
            kafka.ResourceType[self.resource],
            self.name,
            kafka.ResourcePatternType[self.pattern],
            principal,
            "*",
            kafka.AclOperation[self.operation],
            kafka.AclPermissionType.ALLOW,
        )

    def command(self, principal: str) -> str:
        """The ``kafka-acls.sh`` arguments that grant this rule to ``principal``."""
        flag = {
            "TOPIC": "--topic",
            "GROUP": "--group",
            "TRANSACTIONAL_ID": "--transactional-id",
            "CLUSTER": "--cluster",
        }[self.resource]
        target = flag if self.resource == "CLUSTER" else f"{flag} '{self.name}'"
        operation = "".join(p.capitalize() for p in self.operation.split("_"))
        pattern = f" --resource-pattern-type {self.pattern.lower()}"
        return (
            f"--add --allow-principal {principal} --operation {operation} {target}"
            f"{pattern if self.resource != 'CLUSTER' else ''}"
        )


def _topic(name: str, *operations: str, pattern: str = LITERAL) -> list[Acl]:
    return [Acl("TOPIC", name, pattern, op) for op in operations]


def _transactional(ns: str, component: str) -> list[Acl]:
    """A transactional topology's group (joined, offsets sent to its transactions) and its
    transactional ids (one per instance)."""
    return [
        Acl("GROUP", f"{ns}.{component}", LITERAL, "READ"),
        Acl("TRANSACTIONAL_ID", f"{ns}.{component}.", PREFIXED, "WRITE"),
    ]


def _readers(ns: str) -> list[Acl]:
    # Imported here: `streamflow acls` (and its --help) loads no Kafka client library.
    from streamflow.kafka.naming import reader_group

    return [Acl("GROUP", reader_group(ns), LITERAL, "DESCRIBE")]


def acls_for(role: str, namespace: str, topics: Iterable[str] = ()) -> list[Acl]:
    """The ACLs ``role`` needs on ``namespace``, sorted; ``topics``: the user topics of the
    role (the journal's publication topics, the triggers' input topics). ``ValueError`` for an
    unknown role."""
    ns = namespace
    user = list(topics)
    t = f"{ns}."
    requests, history, replies = f"{t}requests", f"{t}history", f"{t}replies"
    dead, incidents, builds = f"{t}dead-letters", f"{t}incidents", f"{t}builds"
    hook_requests, hook_tokens = f"{t}hook-requests", f"{t}hook-tokens"
    limit_requests, limits = f"{t}limit-requests", f"{t}limits"
    retention, schedules = f"{t}retention", f"{t}schedules"
    audit, metrics, tasks = f"{t}audit", f"{t}metrics", f"{t}tasks."
    rules: list[Acl]
    if role == "journal":
        rules = [
            *_transactional(ns, "journal"),
            *_readers(ns),
            *_topic(requests, "READ", "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(history, "READ", "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(retention, "READ", "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(replies, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(dead, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(incidents, "WRITE"),
            *_topic(limits, "WRITE"),
            *_topic(limit_requests, "WRITE"),
            *_topic(hook_requests, "WRITE"),
            *_topic(metrics, "WRITE"),
            *_topic(builds, "READ"),
            *_topic(tasks, "WRITE", pattern=PREFIXED),
            *(a for name in user for a in _topic(name, "WRITE")),
        ]
    elif role == "processor":
        rules = [
            Acl("GROUP", f"{ns}.processor.", PREFIXED, "READ"),
            *_topic(history, "READ"),
            *_topic(requests, "WRITE"),
            *_topic(hook_requests, "WRITE"),
            *_topic(incidents, "WRITE"),
            *_topic(dead, "WRITE"),
            *_topic(builds, "WRITE"),
            *_topic(tasks, "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", pattern=PREFIXED),
        ]
    elif role == "worker":
        rules = [
            Acl("GROUP", f"{ns}.worker.", PREFIXED, "READ"),
            *_topic(tasks, "READ", "CREATE", "DESCRIBE_CONFIGS", pattern=PREFIXED),
            *_topic(requests, "WRITE"),
            *_topic(dead, "WRITE"),
            *_topic(builds, "WRITE"),
        ]
    elif role == "timer":
        rules = [
            Acl("GROUP", f"{ns}.timer", LITERAL, "READ"),
            *_readers(ns),
            *_topic(history, "READ"),
            *_topic(requests, "WRITE"),
            *_topic(dead, "WRITE"),
            *_topic(schedules, "READ", "WRITE"),
            *_topic(builds, "READ"),
        ]
    elif role == "hooks":
        rules = [
            *_transactional(ns, "hooks"),
            *_readers(ns),
            *_topic(hook_requests, "READ", "DESCRIBE_CONFIGS"),
            *_topic(hook_tokens, "READ", "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(requests, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(replies, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(dead, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(incidents, "WRITE"),
        ]
    elif role == "observers":
        rules = [
            *_transactional(ns, "observers"),
            *_readers(ns),
            *_topic(history, "READ"),
            *_topic(audit, "WRITE"),
            *_topic(dead, "READ", "WRITE"),
            *_topic(metrics, "READ", "WRITE"),
            *_topic(incidents, "READ"),
            *_topic(builds, "READ"),
        ]
    elif role == "limits":
        rules = [
            *_transactional(ns, "limits"),
            *_readers(ns),
            *_topic(limit_requests, "READ", "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(limits, "READ", "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(requests, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(dead, "WRITE", "DESCRIBE_CONFIGS"),
        ]
    elif role == "triggers":
        rules = [
            *_transactional(ns, "triggers"),
            *_readers(ns),
            *_topic(requests, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(dead, "WRITE", "DESCRIBE_CONFIGS"),
            *_topic(builds, "READ"),
            *(a for name in user for a in _topic(name, "READ")),
        ]
    elif role == "client":
        rules = [
            *_readers(ns),
            *_topic(requests, "WRITE"),
            *_topic(hook_requests, "WRITE"),
            *_topic(replies, "READ"),
            *_topic(history, "READ"),
            *_topic(retention, "READ"),
            *_topic(incidents, "READ"),
            *_topic(schedules, "READ", "WRITE"),
            *_topic(builds, "READ"),
            *_topic(limits, "READ"),
        ]
    elif role == "admin":
        rules = [*_topic(t, "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", pattern=PREFIXED)]
    else:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    return sorted(set(rules))
