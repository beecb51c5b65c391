"""The HTTP API's own errors and the mapping of every error to an HTTP status.

::

    ApiError                 a request the API refuses before it reaches a backend
    ├── Unauthorized         401: a keyed route without the right bearer key
    ├── UnknownParameter     400: a query parameter the route does not take
    ├── InvalidParameter     400: a query parameter with a value the route cannot read
    ├── InvalidCursor        400: a ``cursor`` this API did not hand out
    ├── InvalidRequest       400: a body that is not the JSON object the route takes
    ├── IncidentNotFound     404: the run has no incident
    ├── LimitGroupNotFound   404: no App declares that group and nothing claimed a limit of it
    ├── LimitsUnavailable    501: the backend's limit ledgers cannot be read here
    ├── BatchesUnavailable   501: this server cannot run batches (bulk operations)
    ├── BatchNotFound        404: no batch has that id
    ├── ReadOnlyServer       403: a mutation sent to a server that takes none
    ├── InvalidWorkflowInput 422 ``InvalidInputError``: the workflow's annotation refuses it
    ├── PayloadTooLargeBody  413 ``PayloadTooLarge``: a body too large to read at all
    ├── InvalidPayloadBody   400 ``InvalidPayload``: a body nested too deeply to parse
    ├── HostNotAllowed       400: a ``Host`` header that does not name this server
    ├── CrossSiteRequest     403: a hook callback sent by another site's page
    ├── RequestTimeout       408: a body that did not arrive in time
    ├── UnsupportedMediaType 415: a hook callback whose body is not declared JSON
    └── TooManyRequests      429: an unkeyed route called too often from one address

``FlowError`` subclasses keep their class name as the ``error`` of the answer; anything else is
a 500 ``InternalError`` whose details stay in the server's log (its type only: never a payload).
"""

from __future__ import annotations

from typing import ClassVar

from streamflow.core.errors import (
    ConflictError,
    FlowError,
    HookAlreadyResolved,
    InfrastructureError,
    InvalidInputError,
    InvalidPayload,
    InvalidQuery,
    InvalidRunId,
    NotFoundError,
    PayloadTooLarge,
    UnknownWorkflow,
)


class ApiError(Exception):
    """A request the API refuses itself; ``status`` is its HTTP status."""

    status = 400
    name: ClassVar[str | None] = None
    """The ``error`` of the answer, when it is not the class's own name."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(ApiError):
    """Raised when a keyed route is called without ``Authorization: Bearer <key>`` or with
    another key. Send the key the server was started with."""

    status = 401


class UnknownParameter(ApiError):
    """Raised for a query parameter the route does not take (never silently ignored)."""


class InvalidParameter(ApiError):
    """Raised for a query parameter whose value cannot be read (a time that is not ISO-8601,
    a ``limit`` outside 1..500, a ``wait`` that is not a duration up to 60s, ...)."""


class InvalidCursor(ApiError):
    """Raised for a ``cursor`` that is not one a listing answered with."""


class InvalidRequest(ApiError):
    """Raised for a body that is not valid JSON or not the object the route takes."""


class IncidentNotFound(ApiError):
    """Raised by ``GET /v1/runs/{run_id}/incident`` when the run has no incident."""

    status = 404


class LimitGroupNotFound(ApiError):
    """Raised by ``GET /v1/limits/{group}`` for a group the served App does not declare and no
    run or step attempt claimed a limit of since the engine (re)built its ledgers."""

    status = 404


class BatchesUnavailable(ApiError):
    """Raised by ``POST /v1/batches`` on a server that cannot run batches: a read-only one, or
    one whose runtime is not a ``streamflow.App`` (the batch workflow is registered in it)."""

    status = 501


class BatchNotFound(ApiError):
    """Raised by ``GET /v1/batches/{id}`` for an id that is no batch's run."""

    status = 404


class LimitsUnavailable(ApiError):
    """Raised by ``GET /v1/limits`` on a backend whose limit ledgers this server cannot read
    (a Kafka deployment, for now)."""

    status = 501


class Forbidden(ApiError):
    """Raised when a valid API key's role does not allow the route (a ``read`` key that
    cancels a run, an ``operate`` key that terminates one): use a key with the role the
    message names."""

    status = 403


class ReadOnlyServer(ApiError):
    """Raised for a mutation sent to a server that takes none (an observers instance without
    an API key): send it to one that does."""

    status = 403


class InvalidWorkflowInput(ApiError):
    """A start whose input the workflow's annotation refuses: answered as 422
    ``InvalidInputError``."""

    status = 422
    name = "InvalidInputError"


class PayloadTooLargeBody(ApiError):
    """A request body larger than the API reads at all: answered as 413 ``PayloadTooLarge``,
    like a payload over the record-size limit."""

    status = 413
    name = "PayloadTooLarge"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request body of {size} bytes exceeds the limit of {limit} bytes")


class InvalidPayloadBody(ApiError):
    """A body nested too deeply to be parsed at all: answered as 400 ``InvalidPayload``, like a
    payload that cannot be stored."""

    name = "InvalidPayload"


class HostNotAllowed(ApiError):
    """Raised for a request whose ``Host`` header names neither this server's address nor
    one of its allowed host names (``--allowed-host``): the defence against DNS rebinding."""


class CrossSiteRequest(ApiError):
    """Raised for a hook callback that a browser sent from another site's page."""

    status = 403


class RequestTimeout(ApiError):
    """Raised when a request's body does not arrive in full within the body time limit."""

    status = 408


class UnsupportedMediaType(ApiError):
    """Raised for a hook callback whose body is not declared ``application/json``."""

    status = 415


class TooManyRequests(ApiError):
    """Raised when one client address calls the unkeyed routes faster than their rate limit;
    the answer's ``Retry-After`` says when to try again."""

    status = 429


def status_of(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and ``error`` name an exception is answered with."""
    if isinstance(exc, ApiError):
        return exc.status, exc.name or type(exc).__name__
    if not isinstance(exc, FlowError):
        return 500, "InternalError"
    name = type(exc).__name__
    if isinstance(exc, HookAlreadyResolved | ConflictError):
        return 409, name
    if isinstance(exc, UnknownWorkflow | NotFoundError):
        return 404, name
    if isinstance(exc, PayloadTooLarge):
        return 413, name
    if isinstance(exc, InvalidRunId | InvalidPayload | InvalidQuery):
        return 400, name
    if isinstance(exc, InvalidInputError):
        return 422, name
    if isinstance(exc, InfrastructureError):
        return 503, name
    return 500, name
