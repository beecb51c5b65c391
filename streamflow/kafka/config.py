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

from streamflow.core.limits import DEFAULT_MAX_RECORD_BYTES, RecordLimits

ENV_BOOTSTRAP = "STREAMFLOW_BOOTSTRAP"
ENV_NAMESPACE = "STREAMFLOW_NAMESPACE"
ENV_PREFIX = "STREAMFLOW_KAFKA_"
ENV_MAX_RECORD_BYTES = "STREAMFLOW_MAX_RECORD_BYTES"
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

    def __post_init__(self) -> None:
        if not self.bootstrap:
            raise ValueError(f"no Kafka bootstrap servers: set {ENV_BOOTSTRAP} or --bootstrap")
        if not _NAMESPACE.fullmatch(self.namespace):
            raise ValueError(f"invalid namespace {self.namespace!r}: use [A-Za-z0-9._-]")
        RecordLimits(self.max_record_bytes)  # validates

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
        }
        for key, value in self.properties.items():
            shown[key] = "<redacted>" if _SECRET.search(key) else value
        return shown

    def __repr__(self) -> str:
        return f"KafkaSettings({self.redacted()!r})"
