"""The error tree of streamflow: one root, ``FlowError``, and one subclass per seed variant.

::

    FlowError
    ├── RunNotFound                  unknown or empty run stream
    ├── RunTerminal                  a mutation reached a run that already ended
    ├── InvalidRunId                 run id empty or outside [A-Za-z0-9_-]
    ├── ContinueAsNewCycle           a continuation link revisits a run
    ├── ContinueAsNewLimitExceeded   chain longer than the configured hop limit
    ├── ChildWorkflowCycle           a child is already in the active ancestry
    ├── ChildWorkflowDepthExceeded   child nesting beyond the configured depth
    ├── RunConflict                  idempotent start / cancellation request disagrees with history
    ├── InvalidRuntimeBuildId        malformed runtime build identifier
    ├── InvalidWorkflowPatchId       malformed patch marker identifier
    ├── RuntimeBuildUnavailable      this engine does not admit the run's build (nothing written)
    ├── RuntimeBuildRouteNotFound    no task route for a build (nothing dispatched)
    ├── NonDeterministic             replayed workflow code disagrees with recorded history
    ├── EventConflict                an expected-sequence append lost a race
    ├── HookTokenNotFound            no active hook owns a token (token redacted)
    │   └── HookAlreadyResolved      ... and the last hook that did was resolved
    ├── LeaseLost                    a task lease is stale, rotated or unknown
    ├── HookTokenTooShort            a new hook's token has fewer than 16 characters
    ├── HookTokenConflict            a token is owned by another active hook (token redacted)
    ├── HookConflict                 a hook resolution contradicts history
    ├── SignalConflict               a signal id was redelivered with other content
    ├── InvalidWorkflow              WorkflowSpec validation failed
    ├── InvalidTransition            corrupt history or an invalid command
    ├── InvalidWorkerConfiguration   bad worker / router / queue / host settings
    ├── TaskManagement               a task queue rejected or failed an operation
    ├── StoreError                   the event store failed (also how tests inject crashes)
    ├── RequestDeadLettered          a Kafka request could not be processed; it was parked
    ├── RuntimeFailure               workflow or step code failed
    │   └── NonRetryable             step code says the step will never succeed: no retry
    ├── SerializationError           a value could not be encoded or decoded
    │   └── PayloadTooLarge          a record or payload exceeds the record-size limit
    ├── IoError                      file or process I/O failed
    └── ReplayLimitExceeded          a drive loop exceeded max_replay_iterations

Every error carries its data as attributes. Hook tokens never reach an error at all: the
token errors carry the token's SHA-256 digest, and their text shows only its first 12 hex
digits.
"""

from __future__ import annotations

REDACTED = "<redacted>"


def _short(digest: str) -> str:
    return f"sha256:{digest[:12]}…"


class FlowError(Exception):
    """Root of every error streamflow raises on purpose."""

    def __init__(self, message: str) -> None:
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


class RunNotFound(FlowError):
    """Raised for a snapshot, history or mutation of a run that has no history.

    Operator action: check the run id; it may have been pruned by retention.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(f"workflow run {run_id} was not found")
        self.run_id = run_id


class RunTerminal(FlowError):
    """Raised when a new signal, hook resolution or host mutation targets a terminal run."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"workflow run {run_id} is terminal")
        self.run_id = run_id


class InvalidRunId(FlowError):
    """Raised when a run id is empty or contains characters outside ``[A-Za-z0-9_-]``."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"invalid workflow run id {run_id!r}: use 1+ characters of [A-Za-z0-9_-]")
        self.run_id = run_id


class ContinueAsNewCycle(FlowError):
    """Raised when following continue-as-new links revisits ``run_id``."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"continue-as-new chain revisits workflow run {run_id}")
        self.run_id = run_id


class ContinueAsNewLimitExceeded(FlowError):
    """Raised when a continuation chain would exceed the engine's hop limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"continue-as-new chain exceeds the limit of {limit} hops")
        self.limit = limit


class ChildWorkflowCycle(FlowError):
    """Raised when a child or continuation run is already part of the active ancestry."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"child workflow run {run_id} is already in the active ancestry")
        self.run_id = run_id


class ChildWorkflowDepthExceeded(FlowError):
    """Raised when a child request or child replay is nested deeper than the configured limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"child workflow depth exceeds the limit of {limit}")
        self.limit = limit


class RunConflict(FlowError):
    """Raised when an idempotent request disagrees with the run's durable authority.

    ``reason`` is e.g. ``"workflow spec differs"``, ``"workflow input differs"`` or
    ``"cancellation request differs from the durable request"``. Nothing was written.
    """

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"workflow run {run_id} conflicts with its history: {reason}")
        self.run_id = run_id
        self.reason = reason


class InvalidRuntimeBuildId(FlowError):
    """Raised when a runtime build id breaks the identifier rules."""


class InvalidWorkflowPatchId(FlowError):
    """Raised when a patch marker id breaks the identifier rules."""


class RuntimeBuildUnavailable(FlowError):
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


class RuntimeBuildRouteNotFound(FlowError):
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


class EventConflict(FlowError):
    """Raised by ``append_if_sequence`` when the run's last sequence is not the expected one."""

    def __init__(self, run_id: str, expected_sequence: int, actual_sequence: int) -> None:
        super().__init__(
            f"event conflict for workflow run {run_id}: expected sequence {expected_sequence}, "
            f"actual {actual_sequence}"
        )
        self.run_id = run_id
        self.expected_sequence = expected_sequence
        self.actual_sequence = actual_sequence


class HookTokenNotFound(FlowError):
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

    ``resolution`` is ``"received"``, ``"disposed"`` or ``"cancelled"`` (the run ended, or was
    cancelled, with the hook open); ``same_payload`` says whether a resume's payload equals the
    recorded one (always ``False`` for a dispose, or a hook that was not received). Like its
    base class it carries the token's digest, never the token.
    """

    def __init__(
        self, token_digest: str, run_id: str, hook_id: str, resolution: str, same_payload: bool
    ) -> None:
        FlowError.__init__(
            self,
            f"hook {hook_id} of workflow run {run_id} holding token {_short(token_digest)} was "
            f"already {resolution}" + (" with the same payload" if same_payload else ""),
        )
        self.token_digest = token_digest
        self.run_id = run_id
        self.hook_id = hook_id
        self.resolution = resolution
        self.same_payload = same_payload


class LeaseLost(FlowError):
    """Raised when a task lease is stale, rotated or unknown; the task was not acknowledged."""

    def __init__(self, lease_id: str) -> None:
        super().__init__(f"task lease {lease_id} was lost")
        self.lease_id = lease_id


class HookTokenTooShort(FlowError):
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


class HookTokenConflict(FlowError):
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


class HookConflict(FlowError):
    """Raised when a hook resolution contradicts the hook's durable state."""

    def __init__(self, run_id: str, hook_id: str, reason: str) -> None:
        super().__init__(f"hook {hook_id} of workflow run {run_id} {reason}")
        self.run_id = run_id
        self.hook_id = hook_id
        self.reason = reason


class SignalConflict(FlowError):
    """Raised when a signal id is redelivered with a different name or payload."""

    def __init__(self, run_id: str, signal_id: str, reason: str) -> None:
        super().__init__(f"signal {signal_id} for workflow run {run_id} conflicts: {reason}")
        self.run_id = run_id
        self.signal_id = signal_id
        self.reason = reason


class InvalidWorkflow(FlowError):
    """Raised when a ``WorkflowSpec`` fails validation; nothing is written."""


class InvalidTransition(FlowError):
    """Raised for corrupt or out-of-order history and for invalid workflow commands."""


class InvalidWorkerConfiguration(FlowError):
    """Raised for invalid worker, router, queue or host settings (a hook secret too short, or
    missing where ``hook_token`` is called)."""


class TaskManagement(FlowError):
    """Raised when a task queue rejects or fails an operation."""


class StoreError(FlowError):
    """Raised when the event store fails. Engines leave the run to be resumed later."""


class RequestDeadLettered(FlowError):
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


class SerializationError(FlowError):
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


class IoError(FlowError):
    """Raised when file or process I/O fails."""


class ReplayLimitExceeded(FlowError):
    """Raised when a drive loop or a host conflict-retry loop exceeds its iteration budget.

    Typical cause: workflow code keeps returning a command for an already-completed wait or hook.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"workflow replay exceeded the limit of {limit} iterations")
        self.limit = limit


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
    IoError,
    ReplayLimitExceeded,
)
