"""The errors of the parts streamflow relies on: the ``InfrastructureError`` family (the store,
I/O, task queues, a deployment that serves a run's build, dead letters, waits that time out,
fencing, inspection) and the errors of topic administration (``AdminError`` and its two
classes, and ``ManifestError``, an ``InvalidInputError`` about a topic manifest).

Operator territory: what the message names is fixed, or waited for, outside the application's
code. The tree is drawn, and imported, from :mod:`streamflow.core.errors`.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamflow.core.errors_root import InfrastructureError, InvalidInputError


class RuntimeBuildUnavailable(InfrastructureError):
    """Raised when this engine's build compatibility does not admit the run.

    Nothing is written. Operator action: route the work to a compatible build, or deploy one.
    """

    def __init__(
        self,
        run_id: str,
        required_build_id: str | None,
        current_build_id: str | None,
        *,
        routed: bool = False,
    ) -> None:
        """``routed``: raised by a Kafka journal, which admits any build that has a live
        processor route (it has no build of its own)."""
        required = required_build_id or "<unpinned>"
        if routed:
            message = (
                f"workflow run {run_id} requires runtime build {required}, but no live "
                f"processor route admits build {required}"
            )
        else:
            current = current_build_id or "<unconfigured>"
            message = (
                f"workflow run {run_id} requires runtime build {required}, "
                f"which this engine (build {current}) does not admit"
            )
        super().__init__(message)
        self.run_id = run_id
        self.required_build_id = required_build_id
        self.current_build_id = current_build_id


class TaskManagement(InfrastructureError):
    """Raised when a task queue rejects or fails an operation."""


class StoreError(InfrastructureError):
    """Raised when the event store fails. Engines leave the run to be resumed later."""


class RequestDeadLettered(InfrastructureError):
    """A Kafka request could not be processed and was parked in the dead-letter topic.

    ``dead_letters`` names that topic; ``topic``, ``partition`` and ``offset`` say where the
    request was, ``reason`` why it failed. Nothing of the request was applied. Operator action:
    read the dead letter (its ``reason`` and the component's log), fix the cause, and send the
    request again if it still matters.
    """

    def __init__(
        self, dead_letters: str, topic: str, partition: int, offset: int, reason: str
    ) -> None:
        super().__init__(
            f"the request at {topic}[{partition}]@{offset} could not be processed and was "
            f"dead-lettered to {dead_letters}: {reason}"
        )
        self.dead_letters = dead_letters
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class IoError(InfrastructureError):
    """Raised when file or process I/O fails."""


# -- Kafka deployments: topics, topologies, inspection ----------------------------------------
# Defined in the core (they carry only text) so that the whole tree is one import; the Kafka
# modules that raise them re-export them under their old import paths.


class FlowTimeout(InfrastructureError, TimeoutError):
    """A wait gave up after ``seconds``: ``waiting_for`` says for what, ``hint`` (may be
    ``None``) what to check.

    Raised by ``FlowEngine.result`` and ``FlowClient.result`` when their ``timeout`` passes, by
    ``FlowClient`` when a request gets no reply within its request timeout, and by the Kafka
    topologies when reading a topic to its end takes too long. It is also a ``TimeoutError``,
    so ``except TimeoutError`` (and code written for ``asyncio.wait_for``) catches it.
    """

    def __init__(self, waiting_for: str, seconds: float, hint: str | None = None) -> None:
        super().__init__(
            f"gave up after {seconds:g}s waiting for {waiting_for}" + (f"; {hint}" if hint else "")
        )
        self.waiting_for = waiting_for
        self.seconds = seconds
        self.hint = hint


class Fenced(InfrastructureError, RuntimeError):
    """Another instance took over this topology's transactional id or group membership, or a
    client cannot be kept alive in this process: the topology stops (its process exits with
    status 1, for its supervisor to start it again). Still a ``RuntimeError``, as it was
    before it joined this tree."""


class SchemaRegistryUnavailable(InfrastructureError):
    """A schema registry did not answer, or answered an error, when a record's schema had to
    be registered or looked up: the record is not refused, it is tried again later. The text
    names the registry's URL and what failed, never a credential."""


class PayloadUnreadable(InfrastructureError):
    """A sealed payload (the payload codec's envelope) cannot be opened here: this process has
    no payload codec, it does not hold the key the payload names, or that key does not open it
    (another key under the same id, or an altered value). The message names the key id and
    what reads the value, never the value. Nothing is recorded: the run waits, as after any
    infrastructure failure. Operator action: give the process the key file that holds the key
    (``--payload-codec``)."""

    def __init__(self, key_id: str | None, reason: str, what: str = "a payload") -> None:
        named = "a key id that is not text" if key_id is None else f"key {key_id!r}"
        super().__init__(f"{what} is sealed with {named}: {reason}")
        self.key_id = key_id
        self.what = what


class InspectionUnavailable(InfrastructureError):
    """Part of an inspection answer lives with an observers instance that cannot answer now
    (HTTP 503); the message names the instance or the partitions. Operator action: check that
    every observers instance is running, then ask again."""


class AdminError(InfrastructureError):
    """Root of the errors of topic administration (``streamflow topics``); never raised
    itself."""


class TopicsRefused(AdminError):
    """The cluster or the request is unsafe, or the cluster rejected a topic.

    Raised before anything is created when existing topics disagree with the manifest on
    partitions or cleanup policy, allow unclean leader election, or the profile needs more
    brokers than the cluster has; also when the cluster rejects a declared topic, and by a
    topology that will not start on topics that must be co-partitioned and are not. ``problems``
    lists every reason; ``created`` names topics this call created before a late rejection (a
    concurrent creator). Operator action: fix the topic or the flags named in each problem.
    """

    def __init__(self, problems: Sequence[str], *, created: Sequence[str] = ()) -> None:
        self.problems = tuple(problems)
        self.created = tuple(created)
        done = f"created before refusing: {', '.join(created)}" if created else "nothing created"
        super().__init__(f"refused: {'; '.join(self.problems)} ({done})")


class ClusterUnavailable(AdminError):
    """The cluster did not answer ``operation`` within the timeout, or the transport failed.

    Operator action: check the bootstrap address, network and credentials, then retry; a
    retried ``apply`` is safe.
    """

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(f"{operation}: {detail}")
        self.operation = operation
        self.detail = detail


class ManifestError(InvalidInputError, ValueError):
    """A topic manifest is missing, malformed or unsafe, or an override makes it so.

    Raised by ``load_manifest``, ``parse_manifest`` and the rendering methods of ``Manifest``
    (``streamflow.kafka.manifest``); nothing has touched a cluster yet. ``source`` names the
    file (or ``override``), ``reason`` says what is wrong. Operator action: fix that file or
    flag. Still a ``ValueError``, as it was before it joined this tree.
    """

    def __init__(self, reason: str, *, source: str | None = None) -> None:
        super().__init__(f"{source}: {reason}" if source else reason)
        self.reason = reason
        self.source = source
