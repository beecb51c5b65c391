"""Owns the request and reply traffic of the Kafka ``FlowClient``: requests produced on
``{ns}.requests`` (partitioned by run id) and token callbacks on ``{ns}.hook_requests``
(partitioned by token digest), and the thread that reads ``{ns}.replies`` from the end it had
when the client started, hands each reply to the call awaiting it and keeps the ``run_finished``
notices of the runs the client follows (the runs it started that had not ended yet).

A refused request's typed error is raised from the call that sent it, as the embedded engine
raises it; no reply within the request timeout raises ``FlowTimeout``. ``FlowClient`` sends
through here and waits here for the end of the runs it follows; its docstrings describe the
calls.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import TopicPartition

from streamflow.core import requests as rq
from streamflow.core.errors import FlowError, FlowTimeout, SchemaRegistryUnavailable
from streamflow.core.ids import validate_run_id
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.lru import LruCache
from streamflow.core.tokens import token_digest
from streamflow.kafka.clients import partition_count, poll_batch, producer, read_targets, reader
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.otel import trace_headers
from streamflow.serde import codec
from streamflow.serde import messages as m
from streamflow.serde.errors import to_error

log = logging.getLogger("streamflow.client")

FOLLOWED = 10_000
"""How many runs this client started it follows until their result is returned once, keeping
the ``run_finished`` notice of one that ended before anyone asked (see
:meth:`FlowClient.result <streamflow.kafka.client.FlowClient.result>`)."""

Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Future[m.Reply]]
"""A call awaiting a reply: the future the listener resolves, on the loop it belongs to."""


class ClientRequests:
    """A client's requests and the replies to them, through its own producer and its own
    ``{ns}.replies`` reader. ``wire``: the client's encoding under the deployment's record
    limits; ``timeout``: how long a call waits for its reply (seconds). The reply listener runs
    once :meth:`start` is called, until :meth:`close`."""

    def __init__(self, settings: KafkaSettings, wire: codec.Wire, timeout: float) -> None:
        self._names = Names(settings.namespace)
        self._wire = wire
        self._timeout = timeout
        self._producer = producer(settings)
        self._partitions = partition_count(self._producer, self._names.requests)
        self._hook_partitions = partition_count(self._producer, self._names.hook_requests)
        self._waiters: dict[str, Waiter] = {}
        self._finished: dict[str, list[Waiter]] = defaultdict(list)
        self._lock = threading.Lock()
        # Runs this client started that had not ended when the journal recorded the start,
        # oldest first, with their run_finished notice once read (None until then): their end
        # is known without reading history.
        self._followed: LruCache[str, m.Reply | None] = LruCache(FOLLOWED)
        self._replies = reader(settings)
        count = partition_count(self._replies, self._names.replies)
        # Start at the current end, resolved now: a reply produced after this point is seen.
        ends = read_targets(self._replies, self._names.replies, count)
        self._replies.assign(
            [TopicPartition(self._names.replies, p, ends[p]) for p in range(count)]
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="sf-client-replies", daemon=True)

    @property
    def partitions(self) -> int:
        """The partition count of ``{ns}.requests``."""
        return self._partitions

    def start(self) -> None:
        """Start the thread that reads ``{ns}.replies``."""
        self._thread.start()

    # -- following runs ---------------------------------------------------------------------

    def follow(self, run_id: str) -> None:
        """Follow ``run_id``; the oldest followed run is dropped past :data:`FOLLOWED` (its
        ``result`` reads history instead)."""
        with self._lock:
            self._followed.put(run_id, None)

    def unfollow(self, run_id: str) -> None:
        """Stop following ``run_id`` (its end is then read from history)."""
        with self._lock:
            self._followed.pop(run_id)

    def watch(self, run_id: str) -> tuple[bool, m.Reply | None, asyncio.Future[m.Reply]]:
        """Await ``run_id``'s ``run_finished`` notice: whether the run is followed, its notice
        if already read (kept since, until :meth:`unfollow`), and otherwise the future the
        listener resolves with it; :meth:`unwatch` the future once done with it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[m.Reply] = loop.create_future()
        with self._lock:
            fresh = run_id in self._followed
            notice = self._followed.peek(run_id)
            if notice is None:
                self._finished[run_id].append((loop, future))
        return fresh, notice, future

    def unwatch(self, run_id: str, future: asyncio.Future[m.Reply]) -> None:
        """Stop awaiting ``run_id``'s notice with ``future`` (from :meth:`watch`)."""
        with self._lock:
            waiters = self._finished.get(run_id, [])
            if (future.get_loop(), future) in waiters:
                waiters.remove((future.get_loop(), future))

    # -- requests ---------------------------------------------------------------------------

    async def request(self, run_id: str, body: m.RequestBody) -> m.Reply:
        """Send a request for ``run_id`` and await the journal's reply; a refusal raises its
        typed error."""
        validate_run_id(run_id)
        rq.check_request(body)  # what the journal would refuse is refused before it is sent
        request_id = str(uuid.uuid4())
        request = m.Request(
            request_id=request_id,
            run_id=run_id,
            sent_at=datetime.now(tz=UTC),
            body=body,
            reply=True,
        )
        return await self._await_reply(
            request_id,
            lambda: self._producer.produce(
                self._names.requests,
                key=run_id.encode(),
                value=self._wire.encode(request),
                partition=partition_for(run_id, self._partitions),
                headers=trace_headers(body.trace) if isinstance(body, m.StartRun) else None,
            ),
            f"{type(body).__name__} for run {run_id}",
        )

    async def callback(self, token: str, action: m.CallbackAction, payload: JsonValue) -> m.Reply:
        """Send a hook callback by token to the hooks topology and await its reply; a refusal
        raises its typed error."""
        digest = token_digest(token)
        request_id = str(uuid.uuid4())
        callback = m.TokenCallback(
            token=token,
            action=action,
            payload=payload,
            request_id=request_id,
            reply=True,
            sent_at=datetime.now(tz=UTC),
        )
        value = self._wire.encode(m.HookRequest(body=callback))
        return await self._await_reply(
            request_id,
            lambda: self._producer.produce(
                self._names.hook_requests,
                key=digest.encode(),
                value=value,
                partition=partition_for(digest, self._hook_partitions),
            ),
            f"hook callback ({action.value})",
        )

    async def _await_reply(self, request_id: str, send: Callable[[], None], what: str) -> m.Reply:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[m.Reply] = loop.create_future()
        with self._lock:
            self._waiters[request_id] = (loop, future)
        send()
        self._producer.poll(0)
        try:
            reply = await asyncio.wait_for(future, self._timeout)
        except TimeoutError:
            raise FlowTimeout(
                f"a reply to {what}", self._timeout, "are the topologies running?"
            ) from None
        finally:
            with self._lock:
                self._waiters.pop(request_id, None)
        if not reply.ok and reply.error is not None:
            raise to_error(reply.error)
        return reply

    # -- replies ----------------------------------------------------------------------------

    def _decoded(self, value: bytes) -> m.Reply:
        """A reply; while the schema registry does not answer, asked again every second (the
        listener would otherwise lose it)."""
        while True:
            try:
                return self._wire.decode(value, m.Reply)
            except SchemaRegistryUnavailable as exc:
                log.warning("client: cannot decode a reply yet (%s); trying again", exc)
                if self._stop.wait(1.0):
                    raise

    def _listen(self) -> None:
        while not self._stop.is_set():
            for msg in poll_batch(self._replies, 500, 0.1):
                value = msg.value()
                if msg.error() is not None or value is None:
                    continue
                try:
                    reply = self._decoded(value)
                except FlowError:
                    log.warning("client: undecodable reply at offset %s", msg.offset())
                    continue
                with self._lock:
                    if reply.kind is m.ReplyKind.REQUEST:
                        waiter = self._waiters.pop(reply.request_id, None)
                        targets = [] if waiter is None else [waiter]
                    else:
                        targets = self._finished.pop(reply.run_id, [])
                        # Kept for a later result(); not a use of the followed run.
                        self._followed.replace(reply.run_id, reply)
                for loop, future in targets:
                    loop.call_soon_threadsafe(_resolve, future, reply)

    def stop(self) -> None:
        """Stop the reply listener (waiting up to 5 s for its thread)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def close(self) -> None:
        """Close the replies reader and the producer (flushing it first, up to 10 s); call
        :meth:`stop` first."""
        self._replies.close()
        self._producer.flush(10)
        self._producer.close()


def _resolve(future: asyncio.Future[m.Reply], reply: m.Reply) -> None:
    if not future.done():
        future.set_result(reply)
