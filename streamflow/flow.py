"""``Flow``: the calls an application makes on either backend.

:class:`~streamflow.FlowEngine` (embedded) and :class:`~streamflow.kafka.client.FlowClient`
(Kafka) both implement it with the same names, arguments, return values and errors, so code
written against ``Flow`` switches backend by changing the constructor::

    flow: Flow = FlowEngine.builder(runtime).with_store(store).build()
    flow: Flow = FlowClient(KafkaSettings.from_env())

The one difference is *where the run is driven*. The embedded engine drives a run inside the
call that changed it (a start, a signal, a hook callback, a completed wait, a cancellation
request), so the snapshot it returns already shows the workflow's reaction, and an error
raised while driving (a failing ``run_workflow``, ``NonDeterministic``) raises from that call
as well as being recorded as the run's incident. On Kafka the call returns once the journal
has recorded the change; the processors drive the run after it, and an error while driving is
only recorded as the run's incident (:meth:`Flow.incident`). Code that must see the outcome
waits with :meth:`Flow.result` or polls :meth:`Flow.snapshot` — which works on both.

Everything is validated before it is written: a malformed run id is ``InvalidRunId``, an
unknown run ``RunNotFound``, a request that contradicts what is recorded a ``ConflictError``
(``RunConflict``, ``SignalConflict``, ``HookConflict``), a value over the record-size limit
``PayloadTooLarge``; a refused request writes nothing. Calls that record a change are
idempotent: the exact same request again writes nothing and returns as the first did.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol, runtime_checkable

from streamflow.core.admission import Admission
from streamflow.core.events import FlowEventEnvelope
from streamflow.core.incidents import FlowIncident
from streamflow.core.inspect import RunPage, WorkflowRunSummary, WorkflowRunSuspension
from streamflow.core.retention import (
    FlowHistoryRetentionPolicy,
    FlowHistoryRetentionReport,
    FlowHistoryTombstone,
    HistoryHold,
)
from streamflow.core.snapshot import ActiveHookSnapshot, WorkflowRunSnapshot
from streamflow.core.spec import WorkflowSpec
from streamflow.core.values import (
    CancellationRequest,
    ChildOperationReference,
    StartResult,
    WorkflowProgress,
    WorkflowSignal,
)

__all__ = ["Flow", "FLOW_OPERATIONS"]


@runtime_checkable
class Flow(Protocol):
    """Start, signal, cancel and inspect workflow runs, embedded or on Kafka.

    Every method is ``async``. ``isinstance(x, Flow)`` checks only that ``x`` has these
    methods; their signatures are pinned by the test suite on both implementations.
    """

    # -- starting -----------------------------------------------------------------------------

    async def start(
        self,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        attributes: Mapping[str, object] | None = None,
    ) -> StartResult:
        """Start a run under a fresh id; returns the id (a :class:`StartResult`)."""
        ...

    async def start_with_id(
        self,
        run_id: str,
        spec: WorkflowSpec,
        input: object = None,
        *,
        priority: int = 3,
        admission: Admission | None = None,
        attributes: Mapping[str, object] | None = None,
    ) -> StartResult:
        """Start ``run_id``; returns it (the chain's root, even if the run continued as new)
        as a :class:`StartResult`, a ``str`` whose ``created`` says whether this call created
        the run (the backend's single writer decides it: of racing starts exactly one did).

        Idempotent: the same spec and input again writes nothing. Another spec or input for an
        existing (or pruned) id is ``RunConflict``; a build no engine or processor admits is
        ``RuntimeBuildUnavailable``; an invalid spec ``InvalidWorkflow``.

        A workflow that declares concurrency or rate limits is recorded **queued** and begins
        when its limit group grants it a slot, ``priority`` first (1 first .. 5, default 3;
        ``InvalidPriority`` otherwise), first come first served within a priority and key.
        ``admission`` is the run's claims computed by the caller (``Workflow.start`` does);
        without it the backend computes them with its runtime. A retry with another priority
        is ``RunConflict``.

        ``attributes`` are the run's search attributes (``{"customer": "42"}``: texts, ints,
        floats, bools, timezone-aware datetimes and lists of texts), which run queries read;
        ``InvalidSearchAttributes`` for one that breaks a rule (nothing is written). A retry
        does not compare them.
        """
        ...

    # -- reading ------------------------------------------------------------------------------

    async def list_runs(
        self, where: str | None = None, *, page_size: int = 50, page_token: str | None = None
    ) -> RunPage:
        """One page of runs, newest first, that match the run query ``where`` (``None``: every
        run; the grammar reads the run's own fields and its search attributes:
        ``"customer = '42' AND status = 'running'"``). ``page_size`` is 1..1000;
        ``page_token`` is the previous page's ``next_page_token``. ``InvalidQuery`` (naming
        the position) for a query that breaks the grammar, a bad size or token."""
        ...

    async def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        """The run as its committed history projects it (``RunNotFound`` if it has none)."""
        ...

    async def history(self, run_id: str) -> list[FlowEventEnvelope]:
        """The run's committed events, in sequence order (``RunNotFound`` if none)."""
        ...

    async def result(self, run_id: str, timeout: float | None = None) -> WorkflowRunSnapshot:
        """Wait until the run's continue-as-new chain ends; the snapshot of its last run.

        Only waits: the run is driven by whatever hosts it. ``FlowTimeout`` (a
        ``TimeoutError``) when ``timeout`` seconds pass first, ``RunNotFound`` for an unknown
        run, ``ContinueAsNewCycle`` / ``ContinueAsNewLimitExceeded`` for a chain that loops
        or is longer than the hop limit.
        """
        ...

    async def continuation_chain(self, run_id: str) -> list[str]:
        """Run ids from ``run_id`` along its continue-as-new links to the last run, checking
        that every successor was started by its predecessor's link (``RunConflict`` if not,
        ``RunNotFound`` for a missing one, ``ContinueAsNewCycle``,
        ``ContinueAsNewLimitExceeded``)."""
        ...

    async def incident(self, run_id: str) -> FlowIncident | None:
        """Why the run's latest decision failed, or ``None`` (it did not, a later one
        succeeded, or the run ended). Kept beside the history, never in it."""
        ...

    async def list_incidents(self) -> list[FlowIncident]:
        """The current incident of every run that has one, by run id."""
        ...

    async def list_run_ids(self) -> list[str]:
        """Every run with a history, sorted."""
        ...

    async def list_snapshots(self) -> list[WorkflowRunSnapshot]:
        """The snapshot of every run, by run id."""
        ...

    async def run_summary(self) -> WorkflowRunSummary:
        """Runs counted per status, with the actionable work of the non-terminal ones."""
        ...

    async def list_open_suspensions(self, now: datetime) -> list[WorkflowRunSuspension]:
        """What every non-terminal run waits on (timers, hooks, signals, children, retries)
        at ``now`` (a UTC time)."""
        ...

    async def list_active_hooks(self) -> list[ActiveHookSnapshot]:
        """Active hooks of non-terminal runs, by (run, hook), with their token's SHA-256
        digest, never the token."""
        ...

    # -- changing a run -----------------------------------------------------------------------
    #
    # Each returns the snapshot of the run the change landed on: the active leaf of the chain
    # for calls that act on a chain (signals, cancellation, termination, progress, links), the
    # leaf too for a hook or wait of a run that has since continued as new.

    async def send_signal(self, run_id: str, signal: WorkflowSignal) -> WorkflowRunSnapshot:
        """Deliver a named signal to the chain's active leaf.

        De-duplicated by ``signal_id`` along the chain: the same delivery again writes nothing
        (even after the run ended), another with the same id is ``SignalConflict``, a new one
        to an ended run ``RunTerminal``, an undeclared name ``InvalidTransition``.
        """
        ...

    async def resume_hook(
        self, run_id: str, hook_id: str, payload: object = None
    ) -> WorkflowRunSnapshot:
        """Deliver the callback of hook ``hook_id``. The same payload again writes nothing;
        another is ``HookConflict``; an unknown hook ``InvalidTransition``."""
        ...

    async def dispose_hook(self, run_id: str, hook_id: str) -> WorkflowRunSnapshot:
        """Revoke an active hook (the workflow sees ``hook_disposed``). Disposing it again
        writes nothing; a hook already resumed or cancelled is ``HookConflict``."""
        ...

    async def resume_hook_by_token(self, token: str, payload: object = None) -> tuple[str, str]:
        """Resume the active hook holding ``token``; returns ``(run_id, hook_id)``.

        A token no active hook holds is ``HookTokenNotFound``, or ``HookAlreadyResolved``
        (with ``same_payload``) when the hook that held it was already resolved.
        """
        ...

    async def dispose_hook_by_token(self, token: str) -> tuple[str, str]:
        """Revoke the active hook holding ``token``; returns ``(run_id, hook_id)``."""
        ...

    async def resume_wait(self, run_id: str, wait_id: str) -> WorkflowRunSnapshot:
        """Complete timer wait ``wait_id`` now (due-ness is the caller's decision); a wait
        already completed writes nothing. An unknown wait is ``InvalidTransition``."""
        ...

    async def request_cancellation(
        self, run_id: str, request: CancellationRequest | None = None
    ) -> WorkflowRunSnapshot:
        """Record a cleanup-aware cancellation request on the chain's active leaf; the
        workflow decides how to end (children requested before it get the same request). The
        same request again writes nothing, another while one is recorded is ``RunConflict``;
        an ended run is returned as it is."""
        ...

    async def force_cancel(self, run_id: str, reason: str | None = None) -> WorkflowRunSnapshot:
        """End the chain's active leaf now as cancelled, without workflow code (children with
        the ``request_cancellation`` policy end too). An ended run is returned as it is."""
        ...

    async def terminate_for_timeout(
        self, run_id: str, deadline: datetime, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the chain's active leaf now as timed out at ``deadline`` (a UTC time)."""
        ...

    async def terminate_for_host_shutdown(
        self, run_id: str, reason: str | None = None
    ) -> WorkflowRunSnapshot:
        """End the chain's active leaf for good. Ordinary shutdowns must not call this: they
        leave runs open so that a replacement process resumes them."""
        ...

    async def record_progress(self, run_id: str, progress: WorkflowProgress) -> WorkflowRunSnapshot:
        """Record host progress on the chain's active leaf, idempotent by ``progress_id``
        (another record with the same id is ``NonDeterministic``, an ended run
        ``RunTerminal``); never drives."""
        ...

    async def link_child_operation(
        self, run_id: str, child: ChildOperationReference
    ) -> WorkflowRunSnapshot:
        """Link an external child operation to the chain's active leaf, idempotent by
        ``reference_id`` (another link with the same id is ``NonDeterministic``, an ended run
        ``RunTerminal``); a link to a workflow run that does not exist is
        ``InvalidTransition``. Never drives."""
        ...

    # -- retention ----------------------------------------------------------------------------

    async def hold_history(self, run_id: str, hold_id: str, reason: str) -> HistoryHold:
        """Keep the run's history, and its whole component, from pruning until released.
        Idempotent for the same ``(hold_id, reason)``; another reason is ``RunConflict``."""
        ...

    async def release_history_hold(self, run_id: str, hold_id: str) -> bool:
        """Release a hold; whether there was one to release."""
        ...

    async def history_holds(self, run_id: str) -> list[HistoryHold]:
        """The run's holds, by hold id."""
        ...

    async def history_tombstone(self, run_id: str) -> FlowHistoryTombstone | None:
        """What is kept of a pruned run, or ``None`` if it was never pruned."""
        ...

    async def prune_terminal_history(
        self, policy: FlowHistoryRetentionPolicy
    ) -> FlowHistoryRetentionReport:
        """Delete the histories of every component (runs joined by continue-as-new, parent and
        child, child-operation links) whose members all ended before ``policy.cutoff`` and are
        unheld, a whole component at a time. A pruned run id can never be started again."""
        ...


FLOW_OPERATIONS: tuple[str, ...] = tuple(
    name for name, value in vars(Flow).items() if not name.startswith("_") and callable(value)
)
"""The names of :class:`Flow`'s methods, in declaration order."""
