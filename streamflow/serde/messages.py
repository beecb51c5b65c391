"""Wire messages of the Kafka form, as frozen dataclasses (the Avro mapping is in ``records``).

Topic → value type:

* ``{ns}.requests``     :class:`Request` (header + one body: start, cancel, force-cancel,
  terminate, host progress, child link, step result, wake-up, proposal, signal, hook
  resolution, child resolution, child query, history holds and the prune protocol)
* ``{ns}.history``      ``FlowEventEnvelope`` (the core's)
* ``{ns}.tasks.{build}`` :class:`StepTask`
* ``{ns}.replies``      :class:`Reply` (keyed by request id, or by run id for run_finished)
* ``{ns}.incidents``    :class:`Incident` (compacted by run id)
* ``{ns}.dead-letters`` :class:`DeadLetter`
* ``{ns}.builds``       :class:`BuildRegistration` (compacted by group/instance)
* ``{ns}.hook-requests`` :class:`HookRequest` (keyed by token digest: claim, release, callback)
* ``{ns}.hook-tokens``  :class:`TokenRecord` (compacted by token digest; tombstone = released)
* ``{ns}.retention``    :class:`RetentionRecord` (compacted by run id: holds, seal, tombstone)
* ``{ns}.limit-requests`` :class:`LimitRequest` (keyed by limit group: enqueue, release, tick)
* ``{ns}.limits``       :class:`LimitEntry` (key ``group 0x00 holder``; tombstone = gone) and
  :class:`LimitCounters` (key ``group 0x01``), compacted: each limit group's ledger
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TypeAlias

from streamflow.core.admission import Holder, LimitClaim, SlotGrant, fairness_key
from streamflow.core.incidents import FlowIncident
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.ledger import EntryState, LedgerCounters, LedgerEntry
from streamflow.core.requests import CancelRun as CancelRun
from streamflow.core.requests import DisposeHook as DisposeHook
from streamflow.core.requests import ForceCancelRun as ForceCancelRun
from streamflow.core.requests import GrantSlot as GrantSlot
from streamflow.core.requests import LinkChild as LinkChild
from streamflow.core.requests import Proposal as Proposal
from streamflow.core.requests import QueryChild as QueryChild
from streamflow.core.requests import RecordProgress as RecordProgress
from streamflow.core.requests import ResolveChild as ResolveChild
from streamflow.core.requests import ResumeHook as ResumeHook
from streamflow.core.requests import SendSignal as SendSignal
from streamflow.core.requests import StartRun as StartRun
from streamflow.core.requests import StepResult as StepResult
from streamflow.core.requests import TerminateRun as TerminateRun
from streamflow.core.requests import TerminationKind as TerminationKind
from streamflow.core.requests import WakeUp as WakeUp
from streamflow.core.retention import FlowHistoryTombstone, HistoryHold
from streamflow.core.retry import RetryPolicy
from streamflow.core.schedules import Schedule, ScheduleState


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorInfo:
    """A typed ``FlowError`` on the wire: its class name, text and fields (never secrets)."""

    type: str
    """``FlowError`` subclass name, e.g. ``RunConflict``."""
    message: str
    """``str(error)``."""
    fields: dict[str, str] = field(default_factory=dict)
    """Constructor fields, each JSON-encoded, e.g. ``{"reason": "\\"spec differs\\""}``."""


# -- request bodies: the core's request kinds (streamflow.core.requests), and the prune protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldHistory:
    """Keep the run's history (and its whole component) from retention until released."""

    hold_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseHistoryHold:
    """Release one hold; the reply's ``subject`` is ``hold_id`` if a hold was released."""

    hold_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SealedRun:
    """One member's vote in a prune: sealed by its owner, with what its tombstone will keep."""

    run_id: str
    terminal_sequence: int
    event_id: str
    event_key: str
    history_sha256: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneComponent:
    """Delete one whole component: relayed partition by partition in ascending order (the
    request's ``run_id`` is the first member of the partition asked next), each journal sealing
    the members of its partition and adding their votes."""

    component_id: str
    members: tuple[str, ...]
    cutoff: datetime
    sealed: tuple[SealedRun, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsealRun:
    """A prune was refused: lift the seal ``component_id`` placed on the run."""

    component_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetRun:
    """The run was pruned (its history keys are tombstoned): drop it, keep the tombstone."""

    component_id: str
    tombstone: FlowHistoryTombstone


RequestBody: TypeAlias = (
    StartRun
    | CancelRun
    | ForceCancelRun
    | TerminateRun
    | RecordProgress
    | LinkChild
    | StepResult
    | WakeUp
    | Proposal
    | SendSignal
    | ResumeHook
    | DisposeHook
    | ResolveChild
    | QueryChild
    | HoldHistory
    | ReleaseHistoryHold
    | PruneComponent
    | UnsealRun
    | ForgetRun
    | GrantSlot
)
"""A request's body: one of the core's request kinds (``RequestKind``), or a step of the prune
protocol. Listed one by one, in the branch order of the ``Request.body`` union: a kind added
later is appended, so the branches that shipped before keep their place."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Everything on ``{ns}.requests``: a header and one body."""

    request_id: str
    """Unique per logical request; replies are keyed by it."""
    run_id: str
    """Target run; also the partitioning key."""
    sent_at: datetime
    """Sender wall clock (diagnostics only)."""
    body: RequestBody
    reply: bool = False
    """Whether the sender waits for a :class:`Reply`."""
    forwarded: int = 0
    """How many times a journal handed this request on along a continuation chain (a
    request for a run that continued as new acts on its successor)."""


# -- other topics -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTask:
    """One step attempt to execute, produced with its ``step_started`` in one transaction."""

    run_id: str
    step_id: str
    step_name: str
    input: JsonValue
    attempt: int
    retry: RetryPolicy
    idempotency_key: str
    runtime_build_id: str | None = None
    started_sequence: int = 0
    """Sequence of the ``step_started`` event this task belongs to."""


class ReplyKind(str, Enum):
    """What a :class:`Reply` answers."""

    REQUEST = "request"
    """The outcome of one request."""
    RUN_FINISHED = "run_finished"
    """A run reached a terminal state (keyed by run id)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """The journal's (or the hooks topology's) answer on ``{ns}.replies``: the outcome of a
    request, or the notice that a run finished."""

    request_id: str
    run_id: str
    kind: ReplyKind
    ok: bool
    error: ErrorInfo | None = None
    status: str | None = None
    """Run status after the request was handled."""
    last_sequence: int = 0
    at: datetime
    subject: str | None = None
    """What the request acted on when the caller did not name it: the hook id of a callback
    by token."""
    created: bool = False
    """A start that created the run (``false`` for a start of a run that already existed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Incident:
    """Why a processor could not decide a run at ``sequence`` (drift, failing code, …)."""

    run_id: str
    sequence: int
    build: str | None
    error: ErrorInfo
    processor: str
    at: datetime
    attempts: int = 1
    """Decisions of the run that failed in a row, this one included."""
    first_at: datetime | None = None
    """When the first of them failed (``None``: this one is the first)."""

    def flow_incident(self) -> FlowIncident:
        """The record as the embedded engine reports the same failure."""
        return FlowIncident(
            run_id=self.run_id,
            error_type=self.error.type,
            error=self.error.message,
            attempts=self.attempts,
            first_at=self.first_at or self.at,
            last_at=self.at,
            sequence=self.sequence,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """An input record that could not be processed, kept with the reason."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    component: str
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildRegistration:
    """A topology instance advertising the builds it serves (``{ns}.builds``, compacted)."""

    group: str
    """Consumer group of the instance, e.g. ``{ns}.processor.v2``."""
    instance: str
    """Instance id within the group."""
    role: str
    """``processor`` or ``worker``."""
    current: str | None
    """The build it runs (``None``: an unconfigured, unpinned-only group)."""
    compatible: tuple[str, ...] = ()
    """Older builds it also replays."""
    accepts_unpinned: bool = False
    """Whether it admits runs without a build pin."""
    heartbeat_at: datetime
    """When this registration was last refreshed."""
    ttl_ms: int
    """How long it stays live without a refresh."""
    workflows: tuple[ServedWorkflow, ...] = ()
    """The workflows its runtime registers (a ``streamflow.App``), sorted by name; empty when
    the runtime does not say (a hand-written ``FlowRuntime`` serves any workflow)."""


@dataclass(frozen=True, slots=True)
class ServedWorkflow:
    """A workflow a processor's runtime registers: its name and version, and whether that
    version declares concurrency or rate limits (a new start of it then needs its admission)."""

    name: str
    version: str
    limited: bool = False


# -- observers ({ns}.audit, {ns}.metrics) --------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One committed history event on ``{ns}.audit``, with the run's labels and status after it."""

    run_id: str
    sequence: int
    event_id: str
    committed_at: datetime
    event_key: str
    workflow_name: str
    workflow_version: str
    runtime_build_id: str | None = None
    status: str
    event: str
    """The event's JSON form."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSample:
    """One sample of one metric on ``{ns}.metrics``."""

    name: str
    kind: str
    labels: dict[str, str]
    value: float
    at: datetime
    source: str


# -- the hook-token index ({ns}.hook-requests, {ns}.hook-tokens) --------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimToken:
    """A processor asks for a token before ``hook_created`` may be appended. Granted, the
    hooks topology forwards ``proposal`` to the run; refused, it reports ``HookTokenConflict``
    as an incident of the run."""

    token_digest: str
    run_id: str
    hook_id: str
    proposal: Proposal


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseToken:
    """The hook no longer holds the token. With ``claim_id``, only that claim is released
    (a stale proposal's); without, whatever (run, hook) holds."""

    token_digest: str
    run_id: str
    hook_id: str
    claim_id: str | None = None
    resolution: str | None = None
    """How the hook was resolved (``received``, ``disposed``, ``cancelled``): the token is kept
    as resolved so a late callback is told so. ``None`` forgets it (a stale claim, a pruned
    run)."""
    payload_digest: str | None = None
    """SHA-256 of the received payload's canonical JSON."""


class CallbackAction(str, Enum):
    """What a :class:`TokenCallback` asks: resume or dispose the hook."""

    RESUME = "resume"
    DISPOSE = "dispose"


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenCallback:
    """A caller resumes or disposes a hook by token (the wire record ``HookCallback``; not
    :class:`streamflow.HookCallback`, a hook's expected callback route). The only record that
    carries a token in plaintext: the hooks topology hashes it, compares it with the key in
    constant time, and routes a digest-only request to the owning run."""

    token: str = field(repr=False)
    action: CallbackAction
    payload: JsonValue = None
    request_id: str
    reply: bool = True
    sent_at: datetime


HookRequestBody: TypeAlias = ClaimToken | ReleaseToken | TokenCallback


@dataclass(frozen=True, slots=True, kw_only=True)
class HookRequest:
    """Everything on ``{ns}.hook-requests`` (keyed by token digest)."""

    body: HookRequestBody


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRecord:
    """Which active hook holds a token (``{ns}.hook-tokens``, compacted by digest), or, with a
    ``resolution``, which hook last held it (the token is then free)."""

    token_digest: str
    run_id: str
    hook_id: str
    claim_id: str
    claimed_at: datetime
    resolution: str | None = None
    payload_digest: str | None = None

    @property
    def holds(self) -> bool:
        """Whether the hook still holds the token."""
        return self.resolution is None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionRecord:
    """A run's retention state (``{ns}.retention``, compacted by run id): its holds, the prune
    that sealed it (while one is in progress) and, once pruned, its tombstone."""

    run_id: str
    holds: tuple[HistoryHold, ...] = ()
    sealed_by: str | None = None
    tombstone: FlowHistoryTombstone | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    """A value of ``{ns}.schedules`` (compacted): a schedule's definition (key
    ``schedule_id``), or how far it has fired (key ``schedule_id 0x00 fired``)."""

    schedule_id: str
    definition: Schedule | None = None
    fired: ScheduleState | None = None


# -- flow control: the limits topology's input and state ------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueSlot:
    """A run or step attempt waits for a slot of ``group``: produced by the journal in the
    transaction of the event that queued it (``run_created`` with claims,
    ``step_attempt_queued``)."""

    group: str
    holder: Holder
    claims: tuple[LimitClaim, ...]
    priority: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseSlot:
    """``holder`` no longer holds (or waits for) a slot of ``group``: produced by the journal
    in the transaction of the event that ended it (the run's or attempt's end, a cancellation,
    a grant its run gave back). ``grant_id``: release only that grant (``None``: whatever the
    holder holds, or its place in the queue)."""

    group: str
    holder: Holder
    grant_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitTick:
    """Wake ``group``'s ledger: a rate window may have freed a slot (the limits topology sends
    it to itself when the ledger's next change is due)."""

    group: str


LimitRequestBody: TypeAlias = EnqueueSlot | ReleaseSlot | LimitTick


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitRequest:
    """Everything on ``{ns}.limit-requests`` (keyed by limit group)."""

    body: LimitRequestBody
    sent_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitEntry:
    """One holder a limit group's ledger knows (``{ns}.limits``, key ``group 0x00 holder``):
    queued (no grant) or holding ``grant``. ``expiring`` and ``lease_until_ms`` are reserved on
    the wire (no slot is leased): written ``False`` and ``None``, ignored when read."""

    group: str
    holder: Holder
    claims: tuple[LimitClaim, ...]
    priority: int
    arrival: int
    grant: SlotGrant | None = None
    expiring: bool = False
    lease_until_ms: int | None = None

    @staticmethod
    def of(group: str, entry: LedgerEntry) -> LimitEntry:
        """The record of a ledger's ``entry`` in ``group``."""
        return LimitEntry(
            group=group,
            holder=entry.holder,
            claims=entry.claims,
            priority=entry.priority,
            arrival=entry.arrival,
            grant=entry.grant,
        )

    def entry(self) -> LedgerEntry:
        """The ledger entry this record saved (for :meth:`Ledger.load
        <streamflow.core.ledger.Ledger.load>`)."""
        state: EntryState = "held" if self.grant is not None else "queued"
        return LedgerEntry(
            holder=self.holder,
            claims=self.claims,
            priority=self.priority,
            fairness_key=fairness_key(self.claims),
            arrival=self.arrival,
            order=0,
            state=state,
            grant=self.grant,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareCount:
    """How many holders of a partition's shares hold ``limit_id`` (``key`` ``""``: the limit's
    total) or one key of it."""

    limit_id: str
    key: str
    max: int
    """The limit's ``max`` as the latest claim counted names it."""
    held: int


MAX_SHARE_KEYS = 1000
"""The most keys one :class:`ShareCounts` lists (the largest counts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareCounts:
    """How many holders of run partition ``partition``'s shares of ``group``'s split limits
    hold each limit (``totals``) and each key (``keys``: the :data:`MAX_SHARE_KEYS` largest;
    ``keys_left`` more are not listed): ``{ns}.limits``, key ``group 0x02 partition``, written
    by the journal for the views (the limits topology never reads it)."""

    group: str
    partition: int
    totals: tuple[ShareCount, ...] = ()
    keys: tuple[ShareCount, ...] = ()
    keys_left: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitCounters:
    """A limit group's counters, served records and rate windows (``{ns}.limits``, key
    ``group 0x01``): with its entries, everything its ledger needs after a failover."""

    group: str
    counters: LedgerCounters
