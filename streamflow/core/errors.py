"""The error tree of streamflow: one root, ``FlowError``, four families under it, and one
class for each thing that can go wrong.

::

    FlowError
    ├── ConflictError                      disagrees with what is recorded, or lost a race
    │   ├── RunConflict                    idempotent start / cancellation differs from history
    │   ├── RunTerminal                    a mutation reached a run that already ended
    │   ├── EventConflict                  an expected-sequence append lost a race
    │   ├── HookConflict                   a hook resolution contradicts history
    │   ├── HookTokenConflict              another active hook owns the token (token redacted)
    │   ├── SignalConflict                 a signal id was redelivered with other content
    │   └── LeaseLost                      a task lease is stale, rotated or unknown
    ├── NotFoundError                      what the request names does not exist (any more)
    │   ├── RunNotFound                    unknown or empty run stream
    │   ├── HookTokenNotFound              no active hook owns a token (token redacted)
    │   │   └── HookAlreadyResolved        ... and the last hook that did was resolved
    │   └── RuntimeBuildRouteNotFound      no task route for a build (nothing dispatched)
    ├── InvalidInputError                  breaks a rule: the same input fails the same way
    │   ├── InvalidRunId                   run id empty, > 256 chars or outside [A-Za-z0-9_-]
    │   ├── InvalidRuntimeBuildId          malformed runtime build identifier
    │   ├── InvalidWorkflowPatchId         malformed patch marker identifier
    │   ├── InvalidWorkflow                WorkflowSpec validation failed
    │   │   └── NotAStep                   ctx.step given a function no App registers
    │   ├── UnknownWorkflow                a start or replay of a workflow the App lacks
    │   ├── InvalidTransition              corrupt history or an invalid command
    │   ├── InvalidWorkerConfiguration     bad worker / router / queue / host settings
    │   ├── HookTokenTooShort              a new hook's token has fewer than 16 characters
    │   ├── ContinueAsNewCycle             a continuation link revisits a run
    │   ├── ContinueAsNewLimitExceeded     chain longer than the configured hop limit
    │   ├── ChildWorkflowCycle             a child is already in the active ancestry
    │   ├── ChildWorkflowDepthExceeded     child nesting beyond the configured depth
    │   ├── SerializationError             a value could not be encoded or decoded
    │   │   ├── PayloadTooLarge            a record or payload exceeds the record-size limit
    │   │   └── InvalidPayload             a value no store could read back: too deep, a lone
    │   │                                  surrogate, NaN or Infinity
    │   └── ManifestError                  a topic manifest is malformed (also a ValueError)
    ├── InfrastructureError                a part streamflow relies on failed or is missing
    │   ├── StoreError                     the event store failed (also how tests inject crashes)
    │   ├── IoError                        file or process I/O failed
    │   ├── TaskManagement                 a task queue rejected or failed an operation
    │   ├── RuntimeBuildUnavailable        no engine here admits the run's build (nothing written)
    │   ├── RequestDeadLettered            a Kafka request could not be processed; it was parked
    │   ├── FlowTimeout                    a wait gave up after its timeout (also a TimeoutError)
    │   ├── Fenced                         a topology was taken over: it stops (also a RuntimeError)
    │   ├── InspectionUnavailable          an observers instance cannot answer its part
    │   └── AdminError                     a Kafka topic operation did not complete
    │       ├── TopicsRefused              unsafe or rejected: co-partitioning, replication, ...
    │       └── ClusterUnavailable         the cluster did not answer within the timeout
    ├── RuntimeFailure                     workflow or step code failed
    │   ├── NonRetryable                   step code says the step will never succeed: no retry
    │   └── UnsupportedAwait               workflow code awaited something outside streamflow
    ├── NonDeterministic                   replayed workflow code disagrees with recorded history
    └── ReplayLimitExceeded                a drive loop exceeded max_replay_iterations

Catch a family to handle every error of one kind: ``except NotFoundError`` answers "no such
thing" whatever the thing, ``except InfrastructureError`` is the place for "try again later".
The families are never raised themselves, nor is ``AdminError``; ``ALL_ERRORS`` lists the
classes that are. The last three classes belong to no family: they report the application's own
code (a failing step, code that no longer replays its history, a workflow that loops), which
only a change of that code fixes.

Three classes also have a builtin base, so that ``except`` clauses written before they joined
the tree still work: ``FlowTimeout`` is a ``TimeoutError`` (what ``FlowEngine.result``,
``FlowClient.result`` and the Kafka client's waits raised before, as ``asyncio.wait_for``
does), ``Fenced`` a ``RuntimeError`` and ``ManifestError`` a ``ValueError``.

Every error carries its data as attributes. Hook tokens never reach an error at all: the
token errors carry the token's SHA-256 digest, and their text shows only its first 12 hex
digits.
"""

from __future__ import annotations

from collections.abc import Sequence


def _short(digest: str) -> str:
    return f"sha256:{digest[:12]}…"


def _printable(text: str) -> str:
    """``text`` with any lone surrogate escaped (``\\ud800``): an error's text can always be
    encoded, logged, stored and sent."""
    if not isinstance(text, str) or text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class FlowError(Exception):
    """Root of every error streamflow raises on purpose."""

    def __init__(self, message: str) -> None:
        message = _printable(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take their fields, not a message; pickling (e.g. across a process pool)
        # must rebuild them through __init__ with the same fields.
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls: type[FlowError], state: dict[str, object]) -> FlowError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


# -- the families: never raised themselves, caught to handle every error of one kind ----------


class ConflictError(FlowError):
    """The request disagrees with what is durably recorded, or lost a race to another writer.

    Nothing was written. Read the run again and decide anew: another caller got there first,
    or the same request was sent before with other content.
    """


class NotFoundError(FlowError):
    """What the request names (a run, an active hook's token, a route for a build) does not
    exist, or no longer does. Nothing was written."""


class InvalidInputError(FlowError):
    """The input breaks a rule (an id, a spec, a command, a value, a setting, a manifest).

    Nothing was written, and the same input fails the same way again: fix the input (or the
    code that produced it).
    """


class InfrastructureError(FlowError):
    """Something streamflow relies on failed, is missing or did not answer in time: the store,
    a task queue, Kafka, a deployment that serves the run's build.

    Operator action: fix the part the message names, or wait for it, then retry. A request
    that timed out may still be applied: send it again with the same ids, which makes it
    idempotent.
    """


class RunNotFound(NotFoundError):
    """Raised for a snapshot, history or mutation of a run that has no history.

    Operator action: check the run id; it may have been pruned by retention.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(f"workflow run {run_id} was not found")
        self.run_id = run_id


class RunTerminal(ConflictError):
    """Raised when a new signal, hook resolution or host mutation targets a terminal run."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"workflow run {run_id} is terminal")
        self.run_id = run_id


class InvalidRunId(InvalidInputError):
    """Raised when a run id is empty, longer than 256 characters or contains characters
    outside ``[A-Za-z0-9_-]``. The message quotes at most the id's first 64 characters."""

    def __init__(self, run_id: str) -> None:
        shown = run_id if len(run_id) <= 64 else f"{run_id[:64]}… ({len(run_id)} characters)"
        super().__init__(
            f"invalid workflow run id {shown!r}: use 1-256 characters of [A-Za-z0-9_-]"
        )
        self.run_id = run_id


class ContinueAsNewCycle(InvalidInputError):
    """Raised when following continue-as-new links revisits ``run_id``."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"continue-as-new chain revisits workflow run {run_id}")
        self.run_id = run_id


class ContinueAsNewLimitExceeded(InvalidInputError):
    """Raised when a continuation chain would exceed the engine's hop limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"continue-as-new chain exceeds the limit of {limit} hops")
        self.limit = limit


class ChildWorkflowCycle(InvalidInputError):
    """Raised when a child or continuation run is already part of the active ancestry."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"child workflow run {run_id} is already in the active ancestry")
        self.run_id = run_id


class ChildWorkflowDepthExceeded(InvalidInputError):
    """Raised when a child request or child replay is nested deeper than the configured limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"child workflow depth exceeds the limit of {limit}")
        self.limit = limit


class RunConflict(ConflictError):
    """Raised when an idempotent request disagrees with the run's durable authority.

    ``reason`` is e.g. ``"workflow spec differs"``, ``"workflow input differs"`` or
    ``"cancellation request differs from the durable request"``. Nothing was written.
    """

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"workflow run {run_id} conflicts with its history: {reason}")
        self.run_id = run_id
        self.reason = reason


class InvalidRuntimeBuildId(InvalidInputError):
    """Raised when a runtime build id breaks the identifier rules."""


class InvalidWorkflowPatchId(InvalidInputError):
    """Raised when a patch marker id breaks the identifier rules."""


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


class RuntimeBuildRouteNotFound(NotFoundError):
    """Raised by routers and scheduler preflight when no route serves a build."""

    def __init__(self, required_build_id: str | None) -> None:
        super().__init__(f"no task route for runtime build {required_build_id or '<unpinned>'}")
        self.required_build_id = required_build_id


class NonDeterministic(FlowError):
    """Raised when replayed workflow code disagrees with recorded history.

    ``reason`` shows ``history=…; replay=…``. Not retryable: fix the code, or pin new runs to a
    new build / patch marker and keep the old branch for old histories.
    """

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"workflow run {run_id} is non-deterministic: {reason}")
        self.run_id = run_id
        self.reason = reason


class EventConflict(ConflictError):
    """Raised by ``append_if_sequence`` when the run's last sequence is not the expected one."""

    def __init__(self, run_id: str, expected_sequence: int, actual_sequence: int) -> None:
        super().__init__(
            f"event conflict for workflow run {run_id}: expected sequence {expected_sequence}, "
            f"actual {actual_sequence}"
        )
        self.run_id = run_id
        self.expected_sequence = expected_sequence
        self.actual_sequence = actual_sequence


class HookTokenNotFound(NotFoundError):
    """Raised when no active hook owns the token.

    Carries only the token's SHA-256 digest (``token_digest``); the text shows an abbreviation
    of it, never the token.
    """

    def __init__(self, token_digest: str) -> None:
        super().__init__(f"no active hook owns token {_short(token_digest)}")
        self.token_digest = token_digest


class HookAlreadyResolved(HookTokenNotFound):
    """Raised by a callback by token when no active hook holds the token and the last hook that
    did has been resolved: a late or repeated callback (a double click, a webhook retry), not an
    unknown link.

    ``resolution`` is ``"received"``, ``"disposed"``, ``"cancelled"`` (the run ended, or was
    cancelled, with the hook open) or ``"timed_out"`` (its timeout fired first);
    ``same_payload`` says whether a resume's payload equals the recorded one (always ``False``
    for a dispose, or a hook that was not received). Like its base class it carries the token's
    digest, never the token.
    """

    def __init__(
        self, token_digest: str, run_id: str, hook_id: str, resolution: str, same_payload: bool
    ) -> None:
        FlowError.__init__(
            self,
            f"hook {hook_id} of workflow run {run_id} holding token {_short(token_digest)} was "
            f"already {resolution.replace('_', ' ')}"
            + (" with the same payload" if same_payload else ""),
        )
        self.token_digest = token_digest
        self.run_id = run_id
        self.hook_id = hook_id
        self.resolution = resolution
        self.same_payload = same_payload


class LeaseLost(ConflictError):
    """Raised when a task lease is stale, rotated or unknown; the task was not acknowledged."""

    def __init__(self, lease_id: str) -> None:
        super().__init__(f"task lease {lease_id} was lost")
        self.lease_id = lease_id


class HookTokenTooShort(InvalidInputError):
    """Raised when workflow code creates a hook with a token shorter than ``minimum`` (16)
    characters: short tokens can be guessed. Carries only the lengths, never the token.

    Derive tokens with ``ctx.hook_token(hook_id)`` (``FlowEngine.builder(...)
    .with_hook_secret(...)``), or generate them with ``secrets.token_urlsafe(32)``.
    """

    def __init__(self, hook_id: str, length: int, minimum: int) -> None:
        super().__init__(
            f"hook {hook_id} token is {length} characters long; tokens must have at least "
            f"{minimum} (use ctx.hook_token(hook_id) or secrets.token_urlsafe(32))"
        )
        self.hook_id = hook_id
        self.length = length
        self.minimum = minimum


class HookTokenConflict(ConflictError):
    """Raised when a hook token is already owned by an active hook of a non-terminal run.

    Carries the token's SHA-256 digest (``token_digest``), never the token.
    """

    def __init__(self, token_digest: str, existing_run_id: str, existing_hook_id: str) -> None:
        super().__init__(
            f"hook token {_short(token_digest)} is already active for workflow run "
            f"{existing_run_id} hook {existing_hook_id}"
        )
        self.token_digest = token_digest
        self.existing_run_id = existing_run_id
        self.existing_hook_id = existing_hook_id


class HookConflict(ConflictError):
    """Raised when a hook resolution contradicts the hook's durable state."""

    def __init__(self, run_id: str, hook_id: str, reason: str) -> None:
        super().__init__(f"hook {hook_id} of workflow run {run_id} {reason}")
        self.run_id = run_id
        self.hook_id = hook_id
        self.reason = reason


class SignalConflict(ConflictError):
    """Raised when a signal id is redelivered with a different name or payload."""

    def __init__(self, run_id: str, signal_id: str, reason: str) -> None:
        super().__init__(f"signal {signal_id} for workflow run {run_id} conflicts: {reason}")
        self.run_id = run_id
        self.signal_id = signal_id
        self.reason = reason


class InvalidWorkflow(InvalidInputError):
    """Raised when a ``WorkflowSpec`` fails validation; nothing is written."""


class InvalidTransition(InvalidInputError):
    """Raised for corrupt or out-of-order history and for invalid workflow commands."""


class InvalidWorkerConfiguration(InvalidInputError):
    """Raised for invalid worker, router, queue or host settings (a hook secret too short, or
    missing where ``hook_token`` is called)."""


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


class RuntimeFailure(FlowError):
    """Workflow or step code failed. Raise it from ``run_step`` to fail the attempt explicitly."""

    def __init__(self, message: str) -> None:
        super().__init__(f"runtime error: {message}")
        self.reason = message


class NonRetryable(RuntimeFailure):
    """Raise it from step code to say the step will never succeed (a card declined, an order
    that does not exist): the attempt fails and the step fails at once, whatever attempts its
    retry policy has left; the policy's failure action then applies (fail the run, or hand the
    failure to workflow code). Any other exception is retried by the policy."""

    retryable = False


class SerializationError(InvalidInputError):
    """Raised when a value cannot be encoded or decoded (never falls back to defaults)."""


class PayloadTooLarge(SerializationError):
    """Raised when a payload or a record would exceed the record-size limit; nothing is written.

    ``subject`` says what was too large (``"workflow input"``, ``"encoded Request"``, …),
    ``size`` its size in bytes and ``limit`` the limit it broke. The limit is one setting
    (``max_record_bytes``, default 1 MiB) on every backend, so an app that works embedded
    does not fail on Kafka. Operator action: keep large data outside the run and pass a
    reference, or raise the limit on every producer, topic and engine at once.
    """

    def __init__(self, subject: str, size: int, limit: int) -> None:
        super().__init__(f"{subject} is {size} bytes, over the {limit}-byte limit")
        self.subject = subject
        self.size = size
        self.limit = limit


class InvalidPayload(SerializationError):
    """Raised when a value could not be read back once stored; nothing is written.

    Three things are refused, on every backend and at every entry point: JSON nested more
    than ``MAX_JSON_DEPTH`` (64) levels deep (``streamflow.core.jsonvalue``), a lone surrogate
    (``"\\ud800"``: a string that is not Unicode text, in a value, a dict key or a free string
    such as a reason) and a non-finite number (NaN, Infinity). ``subject`` says what was
    refused (``"signal payload"``, ``"workflow input"``, ``"cancellation reason"``, …),
    ``reason`` why (``"is nested more than 64 levels deep"``, ``"contains a lone surrogate
    (U+D800) at $.a.b"``, …) and ``path`` where, as a JSON path (``None`` for the depth and for
    a free string). Neither quotes the value. Operator action: fix the code or client that
    produced the value.
    """

    def __init__(self, subject: str, reason: str, path: str | None = None) -> None:
        subject, reason = _printable(subject), _printable(reason)
        super().__init__(f"{subject} {reason}" if subject else reason)
        self.subject = subject
        self.reason = reason
        self.path = path

    def within(self, outer: str) -> InvalidPayload:
        """The same refusal, its subject prefixed by ``outer`` (the record field that held it)."""
        subject = f"{outer}: {self.subject}" if self.subject else outer
        return InvalidPayload(subject, self.reason, self.path)


class IoError(InfrastructureError):
    """Raised when file or process I/O fails."""


class ReplayLimitExceeded(FlowError):
    """Raised when a drive loop or a host conflict-retry loop exceeds its iteration budget.

    Typical cause: workflow code keeps returning a command for an already-completed wait or hook.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"workflow replay exceeded the limit of {limit} iterations")
        self.limit = limit


# -- Kafka deployments: topics, topologies, inspection ----------------------------------------
# Defined here (they carry only text) so that the whole tree is one module; the Kafka modules
# that raise them re-export them under their old import paths.


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


FAMILIES: tuple[type[FlowError], ...] = (
    ConflictError,
    NotFoundError,
    InvalidInputError,
    InfrastructureError,
    AdminError,
)
"""The classes of the tree that are only caught, never raised: the four families and
``AdminError``. Every other class is in ``ALL_ERRORS``."""


class UnknownWorkflow(InvalidInputError):
    """Workflow ``name`` is not registered with the ``App`` (a misspelt name never runs a
    fallback): refused before anything is written, or the run's incident on replay."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(
            f"workflow {name!r} is not registered with this App (registered: {listed})"
        )
        self.name = name


class UnsupportedAwait(RuntimeFailure):
    """Workflow code awaited something that is not a streamflow operation (``asyncio.sleep``,
    a network call): it would run outside history and break replay. The decision fails and
    nothing is written; use ``ctx.sleep`` for time and a step for I/O."""

    def __init__(self, run_id: str, awaited: str) -> None:
        super().__init__(
            f"workflow run {run_id} awaited {awaited}, which is not a streamflow operation: use "
            "ctx.sleep for time and ctx.step for I/O"
        )


class NotAStep(InvalidWorkflow):
    """``ctx.step`` was given a function that is not registered with ``@app.step``."""


ALL_ERRORS: tuple[type[FlowError], ...] = tuple(
    value
    for value in list(globals().values())
    if isinstance(value, type)
    and issubclass(value, FlowError)
    and value is not FlowError
    and value not in FAMILIES
)
"""Every class of the tree that is raised, in the order this module defines them: each crosses
a process boundary by name and fields (``streamflow.serde.errors``)."""
