"""The Confluent Schema Registry framing: ``00``, the 4-byte (big-endian) id a schema registry
gave the writer schema, then the same Avro binary body the single-object framing carries.

:class:`RegistryFraming` speaks the Confluent-compatible REST API (Confluent Schema Registry,
Apicurio Registry's ``/apis/ccompat/v7``, Karapace, Redpanda): it registers each shipped
top-level schema the first time a record of it is written (its subject is the schema's full
name, ``streamflow.v1.HistoryRecord``: Confluent's ``RecordNameStrategy``, so one subject per
record type whatever topic carries it), and reads the schema of an id it has not seen once,
keeping both. A framed record whose schema is not one streamflow ships (its parsing canonical
form has no shipped fingerprint) is refused like an unknown fingerprint: ``SerializationError``.
A registry that cannot be reached is a :class:`~streamflow.core.errors.SchemaRegistryUnavailable`
(an infrastructure error: the record is not refused, it is tried again).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from streamflow.core.errors import SchemaRegistryUnavailable, SerializationError
from streamflow.serde.schemas import (
    SchemaRegistry,
    ShippedSchema,
    crc64_fingerprint,
    shipped_registry,
)

MAGIC = b"\x00"
"""The first byte of a Confluent-framed record."""
HEADER_SIZE = 5
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_SCHEMA_ID = 2**31 - 1


def subject_of(shipped: ShippedSchema) -> str:
    """The subject a shipped schema is registered under (its full name)."""
    return shipped.full_name


def redacted_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``<redacted>@``: how a registry (or any
    URL that may carry credentials) is named in messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://<redacted>@{rest.split('@', 1)[1]}"


class RegistryClient:
    """HTTP calls to one schema registry's Confluent-compatible API at ``url`` (credentials in
    the URL are used, never shown: messages name :attr:`shown`), with ``timeout`` seconds a
    call. A registry that does not answer, answers an error or answers no JSON is
    :class:`~streamflow.core.errors.SchemaRegistryUnavailable`. The HTTP client is made on the
    first call; :meth:`close` releases it."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.shown = redacted_url(self.url)
        """The URL without credentials."""
        self._timeout = timeout
        self._client: Any = None
        self._lock = threading.Lock()

    def call(self, method: str, path: str, body: Any = None, *, missing_ok: bool = False) -> Any:
        """The JSON answer to ``method path`` with the JSON ``body`` (``None`` for a 404 when
        ``missing_ok``)."""
        import httpx  # only where a registry is configured

        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.url, timeout=self._timeout, headers={"Accept": CONTENT_TYPE}
                )
            client = self._client
        try:
            answer = client.request(
                method,
                path,
                content=None if body is None else json.dumps(body).encode(),
                headers={"Content-Type": CONTENT_TYPE} if body is not None else None,
            )
        except httpx.HTTPError as exc:
            raise SchemaRegistryUnavailable(
                f"no answer from the schema registry at {self.shown}: {type(exc).__name__}"
            ) from None
        if missing_ok and answer.status_code == 404:
            return None
        if answer.status_code >= 400:
            raise SchemaRegistryUnavailable(
                f"the schema registry at {self.shown} answered {method} {path} with "
                f"HTTP {answer.status_code}: {answer.text[:200]}"
            )
        try:
            return answer.json()
        except ValueError:
            raise SchemaRegistryUnavailable(
                f"the schema registry at {self.shown} answered {method} {path} with no JSON"
            ) from None

    def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


class RegistryFraming:
    """The ids of shipped schemas in one schema registry at ``url`` (the base of its
    Confluent-compatible API), registering and fetching over HTTP with ``timeout`` seconds
    a call. Thread-safe; every answer is kept for the life of the object."""

    def __init__(self, url: str, shipped: SchemaRegistry, *, timeout: float = 10.0) -> None:
        """Args:
        url: the API's base URL, e.g. ``http://registry:8081`` or
            ``http://apicurio:8080/apis/ccompat/v7``.
        shipped: the schemas streamflow reads and writes.
        timeout: seconds each HTTP call may take.
        """
        self._http = RegistryClient(url, timeout=timeout)
        self.url = self._http.url
        self.shown = self._http.shown
        """The URL without credentials."""
        self._shipped = shipped
        self._ids: dict[str, int] = {}
        self._schemas: dict[int, ShippedSchema] = {}
        self._lock = threading.Lock()

    def header(self, shipped: ShippedSchema) -> bytes:
        """``00`` and the id of ``shipped`` (registered under its subject on first use)."""
        schema_id = self._ids.get(shipped.name)
        if schema_id is None:
            schema_id = self.register(shipped)
        return MAGIC + schema_id.to_bytes(4, "big")

    def register(self, shipped: ShippedSchema) -> int:
        """Register ``shipped`` under its subject (the registry answers the existing id when
        it holds the schema already); its id."""
        body = {"schema": json.dumps(shipped.expanded, separators=(",", ":"))}
        answer = self._http.call("POST", f"/subjects/{subject_of(shipped)}/versions", body)
        schema_id = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(schema_id, int) or not 0 <= schema_id <= MAX_SCHEMA_ID:
            raise SchemaRegistryUnavailable(
                f"{self.shown} answered a registration of {subject_of(shipped)} without an id"
            )
        with self._lock:
            self._ids[shipped.name] = schema_id
            self._schemas[schema_id] = shipped
        return schema_id

    def schema_of(self, data: bytes) -> ShippedSchema:
        """The shipped writer schema of a Confluent-framed buffer (its header: 5 bytes)."""
        if len(data) < HEADER_SIZE:
            raise SerializationError(
                f"buffer of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
            )
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        shipped = self._schemas.get(schema_id)
        if shipped is not None:
            return shipped
        answer = self._http.call("GET", f"/schemas/ids/{schema_id}", missing_ok=True)
        text = answer.get("schema") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise SerializationError(f"schema id {schema_id} is not in the schema registry")
        try:
            fingerprint = crc64_fingerprint(json.loads(text))
        except Exception as exc:  # not JSON, or not an Avro schema fastavro can fingerprint
            raise SerializationError(f"schema id {schema_id} is not an Avro schema") from exc
        shipped = self._shipped.by_fingerprint.get(fingerprint)
        if shipped is None:
            raise SerializationError(
                f"schema id {schema_id} is not a shipped schema (fingerprint {fingerprint.hex()})"
            )
        with self._lock:
            self._schemas[schema_id] = shipped
        return shipped

    def close(self) -> None:
        """Close the HTTP client."""
        self._http.close()


@dataclass(frozen=True, slots=True)
class Registered:
    """What :func:`register_schemas` registered: each subject's schema id."""

    url: str
    """The registry's URL, without credentials."""
    ids: dict[str, int]


def register_schemas(url: str, *, timeout: float = 10.0) -> Registered:
    """Register every shipped top-level schema (its current version) in the registry at
    ``url`` under its subject, as ``streamflow topics apply`` does at deploy: the registry
    answers the existing id of one it holds already."""
    shipped = shipped_registry()
    framing = RegistryFraming(url, shipped, timeout=timeout)
    try:
        ids = {subject_of(s): framing.register(s) for s in shipped.current.values()}
    finally:
        framing.close()
    return Registered(framing.shown, ids)
