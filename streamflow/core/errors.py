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
    │   ├── InvalidPriority                a priority outside 1..5, or not an int
    │   ├── InvalidLimitKey                a limit key function returned no usable key
    │   ├── AdmissionRequired              a start of a limited workflow without its admission
    │   ├── InvalidQuery                   a run query that breaks the grammar (its position)
    │   ├── InvalidSearchAttributes        a search attribute's name, value or count breaks a rule
    │   ├── InvalidPublication             a ctx.publish topic, key, value or header breaks a rule
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
    │   ├── SchemaRegistryUnavailable      a schema registry did not answer: tried again later
    │   ├── PayloadUnreadable              a sealed payload this process has no key for
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

Import every class from this module. It defines the errors of runs, hooks, builds, inputs and
the application's code, and re-exports the rest of the tree from the two modules it builds on:
``errors_root`` (``FlowError`` and the four families) and ``errors_infra`` (the
``InfrastructureError`` family and topic administration).
"""

from __future__ import annotations

from collections.abc import Sequence

from streamflow.core.errors_infra import AdminError as AdminError
from streamflow.core.errors_infra import ClusterUnavailable as ClusterUnavailable
from streamflow.core.errors_infra import Fenced as Fenced
from streamflow.core.errors_infra import FlowTimeout as FlowTimeout
from streamflow.core.errors_infra import InspectionUnavailable as InspectionUnavailable
from streamflow.core.errors_infra import IoError as IoError
from streamflow.core.errors_infra import ManifestError as ManifestError
from streamflow.core.errors_infra import PayloadUnreadable as PayloadUnreadable
from streamflow.core.errors_infra import RequestDeadLettered as RequestDeadLettered
from streamflow.core.errors_infra import RuntimeBuildUnavailable as RuntimeBuildUnavailable
from streamflow.core.errors_infra import SchemaRegistryUnavailable as SchemaRegistryUnavailable
from streamflow.core.errors_infra import StoreError as StoreError
from streamflow.core.errors_infra import TaskManagement as TaskManagement
from streamflow.core.errors_infra import TopicsRefused as TopicsRefused
from streamflow.core.errors_root import ConflictError as ConflictError
from streamflow.core.errors_root import FlowError as FlowError
from streamflow.core.errors_root import InfrastructureError as InfrastructureError
from streamflow.core.errors_root import InvalidInputError as InvalidInputError
from streamflow.core.errors_root import NotFoundError as NotFoundError
from streamflow.core.errors_root import _printable, _short


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


class InvalidPriority(InvalidInputError):
    """Raised for a priority outside 1..5, or not an int (``bool`` included): a start, an
    admission or a ledger command with it is refused and nothing is written."""


class InvalidLimitKey(InvalidInputError):
    """Raised when a limit key function (``Concurrency(key=...)``, ``RateLimit(key=...)``)
    raised, or returned something other than a non-blank ``str`` of at most 256 characters
    without control characters; the message names the workflow or step and the limit. Nothing
    is written: fix the key function or the input."""


class InvalidQuery(InvalidInputError):
    """Raised for a run query (``where=``, :mod:`streamflow.core.query`) that breaks the
    grammar: an unknown field or status, an unclosed quote, a time that is not RFC 3339, an
    operator a field does not take, or one over the size limits. ``position`` is where (0-based,
    in characters) the query stopped making sense; the message says it too."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"invalid query at position {position}: {reason}")
        self.reason = reason
        self.position = position


class InvalidSearchAttributes(InvalidInputError):
    """Raised for search attributes (``attributes=`` at a start, ``ctx.set_attributes``) that
    break a rule of :mod:`streamflow.core.attributes`: a name that is not an identifier or is a
    run query's own field, a value of no attribute kind (a naive datetime, NaN, a nested
    object), or more attributes, values, characters or keywords than a run may carry. Nothing
    is written."""


class InvalidPublication(InvalidInputError):
    """Raised for a ``ctx.publish`` that breaks a rule of :mod:`streamflow.core.publications`
    (a malformed publish id, topic name, key or header, a value of no publishable kind), and on
    Kafka for a topic the journal may not write (one of the namespace's own topics, or one that
    does not exist): nothing is recorded or published."""


class AdmissionRequired(InvalidInputError):
    """Raised (Kafka) for a new start of a workflow that declares concurrency or rate limits
    when the ``StartRun`` carries no admission with claims: a start sent without the App (a
    bare ``FlowClient.start_with_id``, a client in another language) cannot run the key
    functions. Nothing is written; start it with its admission."""

    def __init__(self, workflow: str) -> None:
        super().__init__(
            f"workflow {workflow} declares concurrency or rate limits: start it with its "
            "admission (Workflow.start, the HTTP API, or FlowClient.start_with_id(..., "
            "admission=workflow.admission(input, priority)))"
        )
        self.workflow = workflow


class InvalidWorkerConfiguration(InvalidInputError):
    """Raised for invalid worker, router, queue or host settings (a hook secret too short, or
    missing where ``hook_token`` is called)."""


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


class ReplayLimitExceeded(FlowError):
    """Raised when a drive loop makes ``limit`` iterations in a row without recording anything
    (a long run's progress never spends the budget), or a host conflict-retry loop exceeds it.

    Typical cause: workflow code keeps returning a command for an already-completed wait or hook.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"workflow replay exceeded the limit of {limit} iterations")
        self.limit = limit


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


ALL_ERRORS: tuple[type[FlowError], ...] = (
    RunNotFound,
    RunTerminal,
    InvalidRunId,
    ContinueAsNewCycle,
    ContinueAsNewLimitExceeded,
    ChildWorkflowCycle,
    ChildWorkflowDepthExceeded,
    RunConflict,
    InvalidRuntimeBuildId,
    InvalidWorkflowPatchId,
    RuntimeBuildUnavailable,
    RuntimeBuildRouteNotFound,
    NonDeterministic,
    EventConflict,
    HookTokenNotFound,
    HookAlreadyResolved,
    LeaseLost,
    HookTokenTooShort,
    HookTokenConflict,
    HookConflict,
    SignalConflict,
    InvalidWorkflow,
    InvalidTransition,
    InvalidWorkerConfiguration,
    TaskManagement,
    StoreError,
    RequestDeadLettered,
    RuntimeFailure,
    NonRetryable,
    SerializationError,
    PayloadTooLarge,
    InvalidPayload,
    IoError,
    ReplayLimitExceeded,
    FlowTimeout,
    Fenced,
    InspectionUnavailable,
    SchemaRegistryUnavailable,
    TopicsRefused,
    ClusterUnavailable,
    ManifestError,
    UnknownWorkflow,
    UnsupportedAwait,
    NotAStep,
    InvalidPriority,
    InvalidLimitKey,
    AdmissionRequired,
    InvalidQuery,
    InvalidSearchAttributes,
    InvalidPublication,
    PayloadUnreadable,
)
"""Every class of the tree that is raised, in a fixed order (the order the tree's classes were
defined in when it was one module): each crosses a process boundary by name and fields
(``streamflow.serde.errors``). A class the tree gains joins this list or ``FAMILIES``
(``tests/unit/test_errors_and_typed.py`` checks that every class is in one of them).
"""
