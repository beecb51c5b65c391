"""The hooks topology: the global hook-token index, exactly once.

Runs are partitioned by run id, but a hook token is global: two runs on different partitions
must never hold the same token at once, and a callback that names only a token must find its
run. One consumer group (``{ns}.hooks``) reads ``{ns}.hook-requests``, keyed and partitioned by
token digest, and owns ``{ns}.hook-tokens`` (compacted, co-partitioned): digest → the (run,
hook) holding it.

* **Claim** (from a processor whose workflow created a hook): free, or already held by the same
  (run, hook) → record the holder and forward the processor's proposal (with a claim id) to
  the journal, which appends ``hook_created`` if the run has not moved on. Held by another
  hook → a ``HookTokenConflict`` incident for the claiming run.
* **Release** (from the journal, in the transaction of ``hook_received``, ``hook_disposed``, a
  cancellation or the end of the run): the token is free, and its record says how the last
  hook that held it was resolved, so that a late callback is told ``HookAlreadyResolved``.
  A release without a resolution (a stale claimed proposal's, naming its claim id, or the
  prune of the run's history) forgets the token.
* **Callback** (from a caller, the only record that carries a token in plaintext): hash the
  token, compare with the record key in constant time, and route a digest-only resume or
  dispose request to the holder's run; the journal replies. An unknown token gets a typed
  ``HookTokenNotFound`` reply from here, a resolved one ``HookAlreadyResolved``.

Records of this topic may carry tokens, so a record that cannot be decoded is dead-lettered
without its value.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Unpack

from confluent_kafka import Message

from streamflow.core.errors import (
    FlowError,
    HookTokenConflict,
    HookTokenNotFound,
    InvalidTransition,
    SchemaRegistryUnavailable,
)
from streamflow.core.tokens import ResolvedHook, digests_equal, is_token_digest, token_digest
from streamflow.kafka.clients import partition_count
from streamflow.kafka.config import KafkaSettings
from streamflow.kafka.naming import Names, partition_for
from streamflow.serde import messages as m
from streamflow.serde.errors import error_info
from streamflow.topologies.common import send_dead_letter
from streamflow.topologies.mirrored import MirroredTopology
from streamflow.topologies.options import TransactionalOptions, Tuning

log = logging.getLogger("streamflow.hooks")
COMPONENT = "hooks"


class Hooks(MirroredTopology):
    """One hooks instance: owns the token index of its ``{ns}.hook-requests`` partitions (see the
    module docstring), kept in local state under ``state_dir`` and restored from
    ``{ns}.hook-tokens``. ``TopicsRefused`` when the two topics do not have the same partition
    count."""

    component = COMPONENT
    defaults = Tuning(commit_interval=0.05)

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        state_dir: Path,
        **options: Unpack[TransactionalOptions],
    ) -> None:
        """``options``: the instance name, clock, group membership and transaction tuning
        (:class:`~streamflow.topologies.options.Tuning`; the hooks commit every 50 ms)."""
        names = Names(settings.namespace)
        fitted = [names.hook_requests, names.hook_tokens, names.requests, names.replies]
        super().__init__(
            settings,
            options,
            input_topic=names.hook_requests,
            mirror=names.hook_tokens,
            fitted_to=fitted,
            state_dir=state_dir,
            family="tokens",
            offset_prefix=b"hook-tokens:",
        )
        self._run_partitions = partition_count(self._consumer, names.requests)
        self._staged: dict[str, m.TokenRecord | None] = {}
        """The token records the open transaction wrote (``None``: released), read first."""

    # -- the transactional topology's hooks ----------------------------------------------------

    def begin(self) -> None:
        """Start staging the token records and offsets of a new transaction."""
        super().begin()
        self._staged = {}

    def committed(self) -> None:
        """Write the staged token records (a ``None`` deletes) and offsets to local state."""
        super().committed()
        self._staged = {}

    def aborted(self) -> None:
        """Drop the staged token records."""
        super().aborted()
        self._staged = {}

    # -- one record ----------------------------------------------------------------------------

    def writes_to(self, topic: str) -> bool:
        """The token index, incidents, requests, replies and dead letters."""
        names = self._names
        return topic in (
            names.hook_tokens,
            names.incidents,
            names.requests,
            names.replies,
            names.dead_letters,
        )

    def handle(self, msg: Message) -> None:
        """Handle one claim, release or callback (see the module docstring) in the open
        transaction."""
        now = self._clock()
        try:
            request = self._wire.decode_value(msg.value(), m.HookRequest)
        except SchemaRegistryUnavailable:
            raise  # a registry outage: tried again, never refused
        except FlowError as exc:
            self._dead_letter(msg, str(exc), now)
            return
        body = request.body
        if isinstance(body, m.TokenCallback):
            self._callback(msg, body, now)
            return
        digest = body.token_digest
        if (
            not is_token_digest(digest)
            or msg.key() != digest.encode()
            or partition_for(digest, self._partitions) != msg.partition()
        ):
            self._dead_letter(msg, "hook request is keyed or partitioned for another token", now)
            return
        if isinstance(body, m.ClaimToken):
            self._claim(msg, body, now)
        else:
            self._release(msg, body)

    def _claim(self, msg: Message, claim: m.ClaimToken, now: datetime) -> None:
        digest = claim.token_digest
        holder = self._holder(digest)
        if (
            holder is not None
            and holder.holds
            and (holder.run_id, holder.hook_id) != (claim.run_id, claim.hook_id)
        ):
            conflict = HookTokenConflict(digest, holder.run_id, holder.hook_id)
            incident = m.Incident(
                run_id=claim.run_id,
                sequence=claim.proposal.expected_sequence,
                build=claim.proposal.build,
                error=error_info(conflict),
                processor=self._source,
                at=now,
            )
            self._producer.produce(
                self._names.incidents,
                key=claim.run_id.encode(),
                value=self._wire.encode(incident),
            )
            self.produced()
            log.info("run %s hook %s: %s", claim.run_id, claim.hook_id, conflict)
            return
        claim_id = f"{msg.partition()}:{msg.offset()}"
        record = m.TokenRecord(
            token_digest=digest,
            run_id=claim.run_id,
            hook_id=claim.hook_id,
            claim_id=claim_id,
            claimed_at=now,
        )
        self._put(msg.partition() or 0, digest, record)
        proposal = m.Proposal(
            expected_sequence=claim.proposal.expected_sequence,
            events=claim.proposal.events,
            build=claim.proposal.build,
            processor=claim.proposal.processor,
            claim_id=claim_id,
        )
        self._send(m.Request(request_id=claim_id, run_id=claim.run_id, sent_at=now, body=proposal))

    def _release(self, msg: Message, release: m.ReleaseToken) -> None:
        holder = self._holder(release.token_digest)
        if holder is None or (holder.run_id, holder.hook_id) != (release.run_id, release.hook_id):
            return  # another hook holds (or last held) the token
        if release.claim_id is not None and release.claim_id != holder.claim_id:
            return  # a stale proposal's claim; the hook claimed the token again since
        if release.resolution is None:
            # A stale claim, or the run's history was pruned: forget the token.
            self._put(msg.partition() or 0, release.token_digest, None)
            return
        resolved = replace(
            holder, resolution=release.resolution, payload_digest=release.payload_digest
        )
        self._put(msg.partition() or 0, release.token_digest, resolved)

    def _callback(self, msg: Message, callback: m.TokenCallback, now: datetime) -> None:
        try:
            digest = token_digest(callback.token)
        except InvalidTransition as exc:
            self._reject(callback, exc, now)
            return
        key = msg.key() or b""
        if not digests_equal(digest, key.decode("utf-8", "replace")):
            error = InvalidTransition("hook callback is keyed by another token's digest")
            self._reject(callback, error, now)
            return
        holder = self._holder(digest)
        if holder is None:
            self._reject(callback, HookTokenNotFound(digest), now)
            return
        if not holder.holds:
            assert holder.resolution is not None
            late = ResolvedHook(
                token_digest=digest,
                run_id=holder.run_id,
                hook_id=holder.hook_id,
                resolution=holder.resolution,
                payload_digest=holder.payload_digest,
            )
            resume = callback.action is m.CallbackAction.RESUME
            self._reject(callback, late.error(callback.payload, resume=resume), now)
            return
        body: m.RequestBody
        if callback.action is m.CallbackAction.RESUME:
            body = m.ResumeHook(
                hook_id=holder.hook_id, payload=callback.payload, token_digest=digest
            )
        else:
            body = m.DisposeHook(hook_id=holder.hook_id, token_digest=digest)
        self._send(
            m.Request(
                request_id=callback.request_id,
                run_id=holder.run_id,
                sent_at=callback.sent_at,
                body=body,
                reply=callback.reply,
            )
        )

    # -- state and output ------------------------------------------------------------------------

    def _holder(self, digest: str) -> m.TokenRecord | None:
        if digest in self._staged:
            return self._staged[digest]
        raw = self.state.get("tokens", digest.encode())
        return None if raw is None else self._wire.decode(raw, m.TokenRecord)

    def _put(self, partition: int, digest: str, record: m.TokenRecord | None) -> None:
        self.put(partition, digest.encode(), None if record is None else self._wire.encode(record))
        self._staged[digest] = record

    def _send(self, request: m.Request) -> None:
        self._producer.produce(
            self._names.requests,
            key=request.run_id.encode(),
            value=self._wire.encode(request),
            partition=partition_for(request.run_id, self._run_partitions),
        )
        self.produced()

    def _reject(self, callback: m.TokenCallback, error: FlowError, now: datetime) -> None:
        if not callback.reply:
            log.info("hook callback %s refused: %s", callback.request_id, error)
            return
        reply = m.Reply(
            request_id=callback.request_id,
            run_id="",
            kind=m.ReplyKind.REQUEST,
            ok=False,
            error=error_info(error),
            at=now,
        )
        self._producer.produce(
            self._names.replies,
            key=callback.request_id.encode(),
            value=self._wire.encode(reply),
        )
        self.produced()

    def dead_letter(self, msg: Message, reason: str) -> None:
        """Park ``msg`` without its value (it may carry a token), with ``reason``."""
        self._dead_letter(msg, reason, self._clock())

    def _dead_letter(self, msg: Message, reason: str, now: datetime) -> None:
        send_dead_letter(
            self._producer,
            self._names,
            msg,
            reason,
            COMPONENT,
            now=now,
            withhold_value=True,
            wire=self._wire,
        )
        self.produced()
