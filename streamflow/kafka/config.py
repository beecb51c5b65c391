"""Kafka settings: bootstrap, namespace, and librdkafka properties passed through.

Settings come from flags and the environment. Any variable ``STREAMFLOW_KAFKA_<NAME>`` becomes the
librdkafka property ``<name>`` with ``_`` turned into ``.`` (``STREAMFLOW_KAFKA_SASL_MECHANISM`` →
``sasl.mechanism``), so SASL/SSL and tuning need no code. Secrets never reach logs:
:meth:`KafkaSettings.redacted` masks every property that looks like a credential.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING

from streamflow.core.limits import DEFAULT_MAX_RECORD_BYTES, RecordLimits

if TYPE_CHECKING:
    from streamflow.serde.codec import Wire
    from streamflow.serde.registry import RegistryFraming

ENV_BOOTSTRAP = "STREAMFLOW_BOOTSTRAP"
ENV_NAMESPACE = "STREAMFLOW_NAMESPACE"
ENV_PREFIX = "STREAMFLOW_KAFKA_"
ENV_MAX_RECORD_BYTES = "STREAMFLOW_MAX_RECORD_BYTES"
ENV_SCHEMA_REGISTRY = "STREAMFLOW_SCHEMA_REGISTRY"
ENV_WIRE_FORMAT = "STREAMFLOW_WIRE_FORMAT"
WIRE_FORMATS = ("single-object", "confluent")
"""How records are framed: Avro single-object (the default), or the Confluent Schema Registry
framing (``00`` and the schema's registry id), which needs ``schema_registry``."""
ENV_MANIFESTS = "STREAMFLOW_MANIFESTS"
"""The directory of the topology manifests (:mod:`streamflow.kafka.manifest`)."""
DEFAULT_ADMIN_TIMEOUT = 30.0
"""Seconds per cluster call of the topic tooling (:mod:`streamflow.kafka.admin`)."""
DEFAULT_NAMESPACE = "streamflow"
_LIBRDKAFKA = logging.getLogger("streamflow.librdkafka")
_SECRET = re.compile(r"password|secret|token|credential|sasl\.jaas|key\.pem|private", re.I)
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}")


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSettings:
    """Where the cluster is and how to talk to it."""

    bootstrap: str
    """``host:port[,host:port]``."""
    namespace: str = DEFAULT_NAMESPACE
    """Prefix of every topic and consumer group (``{ns}.requests`` …)."""
    properties: Mapping[str, str] = field(default_factory=dict)
    """Extra librdkafka properties (security, tuning), applied to every client."""
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    """The record-size limit (``streamflow.core.limits``): the codec's limit, every producer's
    ``message.max.bytes`` and the topics' ``max.message.bytes`` follow from it."""
    wire_format: str = "single-object"
    """How records are written (:data:`WIRE_FORMATS`); every reader reads both framings when a
    ``schema_registry`` is set, so a namespace switches with a rolling restart."""
    schema_registry: str | None = None
    """The base URL of a schema registry's Confluent-compatible API (Confluent Schema
    Registry, Apicurio's ``/apis/ccompat/v7``, Karapace, Redpanda)."""

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise ValueError(f"no Kafka bootstrap servers: set {ENV_BOOTSTRAP} or --bootstrap")
        if not _NAMESPACE.fullmatch(self.namespace):
            raise ValueError(f"invalid namespace {self.namespace!r}: use [A-Za-z0-9._-]")
        RecordLimits(self.max_record_bytes)  # validates
        if self.wire_format not in WIRE_FORMATS:
            raise ValueError(
                f"invalid wire format {self.wire_format!r}: use one of {', '.join(WIRE_FORMATS)}"
            )
        if self.wire_format == "confluent" and not self.schema_registry:
            raise ValueError(
                f"the confluent wire format needs a schema registry: set {ENV_SCHEMA_REGISTRY} "
                "or --schema-registry"
            )

    def wire(self) -> Wire:
        """The codec every client and topology of these settings uses: their record-size
        limit, and the schema registry's framing when one is set (one registry client per
        URL in a process)."""
        from streamflow.serde.codec import Wire

        if self.schema_registry is None:
            return Wire(self.limits)
        return Wire(
            self.limits,
            framing=_framing(self.schema_registry),
            confluent=self.wire_format == "confluent",
        )

    @property
    def limits(self) -> RecordLimits:
        """The record limits derived from ``max_record_bytes``."""
        return RecordLimits(self.max_record_bytes)

    @staticmethod
    def from_env(
        environ: Mapping[str, str] | None = None,
        *,
        bootstrap: str | None = None,
        namespace: str | None = None,
        properties: Mapping[str, str] | None = None,
        max_record_bytes: int | None = None,
        wire_format: str | None = None,
        schema_registry: str | None = None,
    ) -> KafkaSettings:
        """Settings from the environment, overridden by the arguments given:
        ``STREAMFLOW_BOOTSTRAP``, ``STREAMFLOW_NAMESPACE`` (default ``streamflow``),
        ``STREAMFLOW_MAX_RECORD_BYTES``, and every ``STREAMFLOW_KAFKA_*`` variable as a
        librdkafka property (``STREAMFLOW_KAFKA_SECURITY_PROTOCOL`` → ``security.protocol``).
        ``ValueError`` without bootstrap servers or for an invalid namespace."""
        env = os.environ if environ is None else environ
        props = {
            key[len(ENV_PREFIX) :].lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith(ENV_PREFIX)
        }
        props.update(properties or {})
        limit = max_record_bytes or int(env.get(ENV_MAX_RECORD_BYTES, DEFAULT_MAX_RECORD_BYTES))
        return KafkaSettings(
            bootstrap=bootstrap or env.get(ENV_BOOTSTRAP, ""),
            namespace=namespace or env.get(ENV_NAMESPACE, DEFAULT_NAMESPACE),
            properties=props,
            max_record_bytes=limit,
            wire_format=wire_format or env.get(ENV_WIRE_FORMAT, "single-object"),
            schema_registry=schema_registry or env.get(ENV_SCHEMA_REGISTRY) or None,
        )

    def with_namespace(self, namespace: str) -> KafkaSettings:
        """A copy for another namespace."""
        return replace(self, namespace=namespace)

    def client(
        self, defaults: Mapping[str, object] | None = None, **required: object
    ) -> dict[str, object]:
        """A librdkafka configuration, in increasing precedence: bootstrap, tunable
        ``defaults``, the pass-through properties, then ``required`` settings that correctness
        depends on (isolation level, transactional id, …) and that nothing may override."""
        # librdkafka's own log lines go through Python logging instead of raw stderr.
        config: dict[str, object] = {"bootstrap.servers": self.bootstrap, "logger": _LIBRDKAFKA}
        config.update(defaults or {})
        config.update(self.properties)
        config.update(required)
        return config

    def redacted(self) -> dict[str, str]:
        """Properties safe to log."""
        shown = {
            "bootstrap.servers": self.bootstrap,
            "namespace": self.namespace,
            "max_record_bytes": str(self.max_record_bytes),
            "wire_format": self.wire_format,
        }
        if self.schema_registry is not None:
            shown["schema_registry"] = _without_credentials(self.schema_registry)
        for key, value in self.properties.items():
            shown[key] = "<redacted>" if _SECRET.search(key) else value
        return shown

    def __repr__(self) -> str:
        return f"KafkaSettings({self.redacted()!r})"


@cache
def _framing(url: str) -> RegistryFraming:
    from streamflow.serde.registry import RegistryFraming
    from streamflow.serde.schemas import shipped_registry

    return RegistryFraming(url, shipped_registry())


def _without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``<redacted>@``."""
    from streamflow.serde.registry import redacted_url

    return redacted_url(url)
