"""Identifier rules: run ids, runtime build ids, workflow patch marker ids, Kafka topic names,
and the step idempotency key."""

from __future__ import annotations

import re
from typing import ClassVar, Self, TypeGuard

from streamflow.core.errors import (
    InvalidInputError,
    InvalidRunId,
    InvalidRuntimeBuildId,
    InvalidWorkflowPatchId,
)

_RUN_ID = re.compile(r"[A-Za-z0-9_-]+")
_BUILD_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9\-_.:+/@]*[A-Za-z0-9])?")
_PATCH_ID = re.compile(r"[a-z0-9](?:[a-z0-9\-_.]*[a-z0-9])?")
MAX_IDENTIFIER_BYTES = 128
MAX_RUN_ID_CHARS = 256
"""The longest run id every backend and entry point accepts."""
MAX_WORKFLOW_PATCH_MARKERS = 256
MAX_TOPIC_CHARS = 249
"""The longest topic name Kafka accepts."""
_TOPIC = re.compile(r"[A-Za-z0-9._-]+")


def is_topic_name(name: object) -> TypeGuard[str]:
    """Whether Kafka accepts ``name`` as a topic name: 1..249 of ``[A-Za-z0-9._-]``, not
    ``.`` or ``..``."""
    return (
        isinstance(name, str)
        and len(name) <= MAX_TOPIC_CHARS
        and name not in (".", "..")
        and _TOPIC.fullmatch(name) is not None
    )


def validate_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is 1-256 of ``[A-Za-z0-9_-]``; otherwise raise ``InvalidRunId``."""
    if not is_valid_run_id(run_id):
        raise InvalidRunId(str(run_id))
    return run_id


def is_valid_run_id(run_id: object) -> TypeGuard[str]:
    """Whether ``run_id`` is a string of 1-256 ``[A-Za-z0-9_-]``."""
    return (
        isinstance(run_id, str)
        and len(run_id) <= MAX_RUN_ID_CHARS
        and _RUN_ID.fullmatch(run_id) is not None
    )


def idempotency_key(run_id: str, step_id: str) -> str:
    """The key handed to every execution of a step (``flow:{run_id}:{step_id}``): the same for
    every attempt and redelivery of the step, on every backend."""
    return f"flow:{run_id}:{step_id}"


class _CheckedId(str):
    """A string checked on construction against one identifier rule: a string, 1-128 ASCII
    bytes, matching the subclass's ``_PATTERN`` (``_RULE`` says it in words); otherwise the
    subclass's ``_ERROR``."""

    __slots__ = ()
    _WHAT: ClassVar[str]
    _PATTERN: ClassVar[re.Pattern[str]]
    _RULE: ClassVar[str]
    _ERROR: ClassVar[type[InvalidInputError]]

    def __new__(cls, value: str) -> Self:
        if not isinstance(value, str):
            raise cls._ERROR(f"{cls._WHAT} must be a string, got {value!r}")
        if not value:
            raise cls._ERROR(f"{cls._WHAT} must not be empty")
        if not value.isascii() or len(value) > MAX_IDENTIFIER_BYTES:
            raise cls._ERROR(f"{cls._WHAT} {value!r} must be 1-{MAX_IDENTIFIER_BYTES} ASCII bytes")
        if not cls._PATTERN.fullmatch(value):
            raise cls._ERROR(f"{cls._WHAT} {value!r} must {cls._RULE}")
        return super().__new__(cls, value)

    @classmethod
    def new(cls, value: str) -> Self:
        """The same as ``cls(value)``: the class's error (``InvalidRuntimeBuildId``,
        ``InvalidWorkflowPatchId``) when ``value`` breaks the rules."""
        return cls(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class RuntimeBuildId(_CheckedId):
    """An opaque runtime build identity pinned in a run's spec.

    1-128 ASCII bytes, first and last character alphanumeric, other characters from
    ``A-Z a-z 0-9 - _ . : + / @``. Change it whenever replay-relevant code changes.
    """

    __slots__ = ()
    _WHAT = "runtime build id"
    _PATTERN = _BUILD_ID
    _RULE = "start and end with a letter or digit and use only A-Z a-z 0-9 - _ . : + / @"
    _ERROR = InvalidRuntimeBuildId


class WorkflowPatchId(_CheckedId):
    """A patch marker id: 1-128 ASCII bytes of ``a-z 0-9 - _ .``, first and last ``a-z0-9``."""

    __slots__ = ()
    _WHAT = "workflow patch id"
    _PATTERN = _PATCH_ID
    _RULE = "start and end with a lowercase letter or digit and use only a-z 0-9 - _ ."
    _ERROR = InvalidWorkflowPatchId
