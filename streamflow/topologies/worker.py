"""The worker: executes step tasks at least once and reports their results to the journal.

Tasks are routed by exact build: each build's tasks topic (``{ns}.tasks.{build}``) is read by
one consumer group, ``{ns}.worker.{build}``. A worker instance joins that group for every build
it serves, so a v2 worker that also serves v1 shares v1's tasks with the v1 workers still
running instead of running each of them a second time. Many tasks run at once
(``max_in_flight``); a partition's offset is committed only below its lowest unfinished task,
and a task counts as finished once its result is acknowledged by Kafka, so a crash anywhere
redelivers the task — with the same attempt number and idempotency key — and the journal keeps
exactly one outcome per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Unpack

from confluent_kafka import KafkaError, Message, TopicPartition

from streamflow import faults
from streamflow.core.errors import PayloadTooLarge, SchemaRegistryUnavailable
from streamflow.core.jsonvalue import JsonValue, normalize
from streamflow.core.limits import check_payload
from streamflow.core.trace_context import TraceParent
from streamflow.kafka.clients import (
    AUTHORIZATION_ERRORS,
    SHUTDOWN_BUDGET,
    Deadline,
    KafkaAccessDenied,
    access_denied,
    check_consumer_error,
    close_producer,
    consumer,
    partition_count,
)
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, build_slug, partition_for
from streamflow.otel import header_trace
from streamflow.payloads import seal_value
from streamflow.serde import messages as m
from streamflow.topologies.options import ServingOptions
from streamflow.topologies.serving import BuildServer
from streamflow.workflow.runtime import (
    FlowRuntime,
    StepInvocation,
    invoke_step,
    json_copy,
    retryable,
    step_error,
)

log = logging.getLogger("streamflow.worker")
COMPONENT = "worker"
IDLE_POLL = 0.1
"""Seconds an idle worker of one build waits in its consumer for a task."""
Partition = tuple[str, int]


class OffsetTracker:
    """Per partition: offsets in flight, and the next offset after everything consumed."""

    def __init__(self) -> None:
        self.in_flight: dict[Partition, set[int]] = {}
        self.consumed: dict[Partition, int] = {}
        self.committed: dict[Partition, int] = {}

    def take(self, tp: Partition, offset: int) -> None:
        """Record that ``offset`` of ``tp`` is in flight."""
        self.in_flight.setdefault(tp, set()).add(offset)
        self.consumed[tp] = max(self.consumed.get(tp, 0), offset + 1)

    def finish(self, tp: Partition, offset: int) -> None:
        """Record that the task at ``offset`` of ``tp`` is finished."""
        self.in_flight.get(tp, set()).discard(offset)

    def safe_offsets(self) -> dict[Partition, int]:
        """Commit positions: the lowest unfinished offset, else everything consumed."""
        out = {}
        for tp, consumed in self.consumed.items():
            pending = self.in_flight.get(tp)
            position = min(pending) if pending else consumed
            if position != self.committed.get(tp):
                out[tp] = position
        return out

    def forget(self, tps: set[Partition]) -> None:
        """Drop what is known of partitions no longer assigned."""
        for tp in tps:
            self.in_flight.pop(tp, None)
            self.consumed.pop(tp, None)
            self.committed.pop(tp, None)

    def busy(self) -> int:
        """How many tasks are in flight."""
        return sum(len(offsets) for offsets in self.in_flight.values())


class Worker(BuildServer):
    """One worker instance, in the group of ``compatibility``'s current build (the unpinned group
    without one; see the module docstring): runs ``runtime``'s steps, at most ``max_in_flight``
    at once, for every build it serves."""

    component = COMPONENT

    def __init__(
        self,
        settings: KafkaSettings,
        runtime: FlowRuntime,
        *,
        max_in_flight: int = 64,
        commit_interval: float = 0.2,
        drain_timeout: float = 4.0,
        **options: Unpack[ServingOptions],
    ) -> None:
        """``options``: the builds it serves, its instance name, clock, group membership, tasks
        topic profile and hook secret (:class:`~streamflow.topologies.options.Serving`)."""
        super().__init__(settings, runtime, options, Names.worker_group)
        self._max_in_flight = max_in_flight
        self._commit_interval = commit_interval
        self._drain_timeout = drain_timeout
        # One consumer per served build, in that build's group: topic -> consumer. A worker of
        # another build may share a group (it serves this build too), so the static member id
        # names the worker's own build as well as its instance.
        membership = self._serving.consumer_config(f"{COMPONENT}-{build_slug(self._build)}")
        self._consumers = {
            self._names.tasks(b): consumer(
                settings,
                self._names.worker_group(b),
                None,
                on_commit=self._on_commit,
                **membership,
            )
            for b in self._builds
        }
        self._committing: set[str] = set()
        """Tasks topics with an offset commit in flight."""
        self._partitions = partition_count(self._producer, self._names.requests)
        self._offsets = OffsetTracker()
        self._tasks: set[asyncio.Task[None]] = set()
        self._denied: KafkaAccessDenied | None = None
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="sf-step")

    async def run(self, stop: threading.Event) -> None:
        """Serve until ``stop``: make sure the tasks topics exist, advertise the route, run tasks
        and commit offsets below unfinished ones. On the way out it waits up to ``drain_timeout``
        for running steps."""
        self._open_route(self._partitions)
        for topic, source in self._consumers.items():
            source.subscribe([topic], on_revoke=self._on_revoke)
        self.ready.set()
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                self._advertiser.beat(self._clock())
                messages = []
                for source in self._consumers.values():
                    room = self._max_in_flight - len(self._tasks)
                    taken = source.consume(num_messages=room, timeout=0) if room > 0 else []
                    for msg in taken:
                        self._accept(msg)
                    messages += taken
                self._producer.poll(0)  # delivery reports: acknowledged results finish tasks
                if self._denied is not None:
                    raise self._denied
                # Commit as soon as acknowledged results move a partition's safe offset, so a
                # replacement repeats only attempts that were really in flight; a commit in
                # flight batches the acknowledgements that arrive meanwhile.
                if self._offsets.safe_offsets() or (
                    time.monotonic() - last_commit >= self._commit_interval
                ):
                    self._commit(asynchronous=True)
                    last_commit = time.monotonic()
                if not messages:
                    for msg in await self._idle():
                        self._accept(msg)
        finally:
            # A worker that fails keeps its registration until its heartbeat expires (its
            # supervisor's restart takes over); one told to stop withdraws it.
            await self._shutdown(withdraw=stop.is_set())

    async def _idle(self) -> list[Message]:
        """Wait for something to do; the records taken meanwhile. With steps running, until
        one ends or 2 ms pass (their results are acknowledged through this loop). With none
        running, a worker of one build waits in the consumer itself, on a thread, for at most
        ``IDLE_POLL`` seconds: a task is taken the moment it arrives, and an idle worker wakes
        ten times a second instead of five hundred."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=0.002, return_when=asyncio.FIRST_COMPLETED)
            return []
        if len(self._consumers) == 1:
            (source,) = self._consumers.values()
            # Nothing else touches the consumer meanwhile: no step is running, and this loop
            # is parked on the poll.
            msg = await asyncio.to_thread(source.poll, IDLE_POLL)
            return [] if msg is None else [msg]
        await asyncio.sleep(0.002)
        return []

    def _accept(self, msg: Message) -> None:
        error = msg.error()
        if error is not None:
            check_consumer_error(error, COMPONENT)
            return
        tp = (msg.topic() or "", msg.partition() or 0)
        offset = msg.offset() or 0
        self._offsets.take(tp, offset)
        try:
            task = self._letters.decode(msg, m.StepTask, empty="empty task record")
        except SchemaRegistryUnavailable as exc:
            # Its offset stays taken (nothing commits past it): decoded again until it can be.
            log.warning("worker: a task waits for the schema registry (%s)", exc)
            self._start(self._decode_later(msg, tp, offset))
            return
        if task is None:
            self._offsets.finish(tp, offset)
            return
        self._start(self._execute(task, tp, offset, header_trace(msg.headers())))

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        running = asyncio.ensure_future(work)
        self._tasks.add(running)
        running.add_done_callback(self._tasks.discard)

    async def _decode_later(self, msg: Message, tp: tuple[str, int], offset: int) -> None:
        """Decode a task whose schema the registry could not resolve, backing off (1 s, then
        doubling up to 30 s) until it answers, then run it."""
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            try:
                task = self._letters.decode(msg, m.StepTask, empty="empty task record")
            except SchemaRegistryUnavailable:
                delay = min(delay * 2, 30.0)
                continue
            if task is None:
                self._offsets.finish(tp, offset)
                return
            await self._execute(task, tp, offset, header_trace(msg.headers()))
            return

    def _result(self, task: m.StepTask, value: JsonValue) -> m.StepResult:
        """The attempt's success, or a failure that ends the step (not retryable) when
        ``value`` is over the record-size limit: the same limit and text as the embedded
        engine's, and another attempt would run the step's side effect again."""
        try:
            check_payload(value, f"step {task.step_id} output", self._wire.limits)
        except PayloadTooLarge as exc:
            return self._ended(task, ok=False, error=f"PayloadTooLarge: {exc}", retryable=False)
        return self._ended(task, ok=True, output=value)

    def _ended(
        self,
        task: m.StepTask,
        *,
        ok: bool,
        output: JsonValue = None,
        error: str | None = None,
        retryable: bool = True,
    ) -> m.StepResult:
        """The result of ``task``'s attempt, ended now."""
        return m.StepResult(
            step_id=task.step_id,
            attempt=task.attempt,
            ok=ok,
            output=output,
            error=error,
            finished_at=self._clock(),
            retryable=retryable,
        )

    async def _execute(
        self, task: m.StepTask, tp: Partition, offset: int, trace: TraceParent | None
    ) -> None:
        invocation = StepInvocation(
            run_id=task.run_id,
            step_id=task.step_id,
            step_name=task.step_name,
            input=json_copy(task.input),
            history=(),
            attempt=task.attempt,
            idempotency_key=task.idempotency_key,
            hook_secret=self._hook_secret,
            trace=trace,
        )
        try:
            output = normalize(await self._call(invocation), f"step {task.step_id} output")
            value = seal_value(self._runtime.payload_codec, output)
        except Exception as exc:
            result = self._ended(task, ok=False, error=step_error(exc), retryable=retryable(exc))
        else:
            result = self._result(task, value)
        faults.hit("worker.after_effect_before_result")
        request = m.Request(
            request_id=str(uuid.uuid4()), run_id=task.run_id, sent_at=self._clock(), body=result
        )

        def delivered(error: KafkaError | None, _msg: Message) -> None:
            if error is None:
                self._offsets.finish(tp, offset)
            elif error.code() in AUTHORIZATION_ERRORS:  # an ACL is missing: the loop stops
                self._denied = self._denied or access_denied(
                    COMPONENT, error, f"writing to topic {self._names.requests}"
                )
            else:
                log.error("result of %s/%s was not delivered: %s", task.run_id, task.step_id, error)

        self._producer.produce(
            self._names.requests,
            key=task.run_id.encode(),
            value=self._wire.encode(request),
            partition=partition_for(task.run_id, self._partitions),
            on_delivery=delivered,
        )

    async def _call(self, invocation: StepInvocation) -> object:
        codec = self._runtime.payload_codec
        return await invoke_step(self._runtime.run_step, invocation, self._pool, codec)

    def _commit(self, *, asynchronous: bool = False) -> None:
        positions = self._offsets.safe_offsets()
        if not positions:
            return
        faults.hit("worker.after_result_before_commit")
        for topic, source in self._consumers.items():
            mine = {tp: o for tp, o in positions.items() if tp[0] == topic}
            if not mine or (asynchronous and topic in self._committing):
                continue
            offsets = [TopicPartition(t, p, o) for (t, p), o in mine.items()]
            try:
                if asynchronous:
                    self._committing.add(topic)
                    source.commit(offsets=offsets, asynchronous=True)
                    continue
                source.commit(offsets=offsets, asynchronous=False)
            except Exception as exc:  # a rebalance in progress; the next commit catches up
                self._committing.discard(topic)
                log.info("worker commit of %s deferred: %s", topic, exc)
                continue
            self._offsets.committed.update(mine)

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """An offset commit finished (served by the consumer's poll)."""
        for tp in partitions:
            self._committing.discard(tp.topic)
        if error is not None:
            log.info("worker commit failed (retried with the next one): %s", error)
            return
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                key = (tp.topic, tp.partition)
                self._offsets.committed[key] = max(self._offsets.committed.get(key, 0), tp.offset)

    def _on_revoke(self, _consumer: object, partitions: list[TopicPartition]) -> None:
        self._producer.flush(10)
        self._commit()
        self._offsets.forget({(tp.topic, tp.partition) for tp in partitions})

    async def _shutdown(self, *, withdraw: bool) -> None:
        """Stop taking tasks, finish (or abandon after ``drain_timeout``) the ones in flight,
        deliver their results, commit, leave the group. Unfinished tasks are redelivered."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self._drain_timeout)
        budget = Deadline(SHUTDOWN_BUDGET)
        self._producer.flush(budget.left(5.0))
        # Only results Kafka acknowledged move the offsets; asynchronously, so that a broker
        # that is down cannot hold the stop (close() sends what is queued, or drops it).
        self._commit(asynchronous=True)
        if withdraw:
            self._withdraw(budget)
        for source in self._consumers.values():
            source.close()
        # Results not delivered: their tasks are redelivered (same attempt, same key).
        close_producer(self._producer, budget.left())
        self._pool.shutdown(wait=False, cancel_futures=True)
