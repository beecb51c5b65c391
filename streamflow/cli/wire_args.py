"""The wire-format options every command that talks to Kafka takes: ``--wire-format`` and
``--schema-registry`` (defaults: ``$STREAMFLOW_WIRE_FORMAT``, ``$STREAMFLOW_SCHEMA_REGISTRY``)."""

from __future__ import annotations

import argparse
from typing import Any

from streamflow.kafka.config import ENV_SCHEMA_REGISTRY, ENV_WIRE_FORMAT, WIRE_FORMATS


def add_wire_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--wire-format`` and ``--schema-registry`` to ``parser``."""
    parser.add_argument(
        "--wire-format",
        choices=WIRE_FORMATS,
        default=None,
        help=f"how records are written (default ${ENV_WIRE_FORMAT}, else single-object; "
        "confluent needs --schema-registry)",
    )
    parser.add_argument(
        "--schema-registry",
        metavar="URL",
        default=None,
        help=f"a schema registry's Confluent-compatible API (default ${ENV_SCHEMA_REGISTRY}): "
        "records in its framing are read, and written with --wire-format confluent",
    )


def wire_args(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``KafkaSettings.from_env`` the options give."""
    return {
        "wire_format": getattr(args, "wire_format", None),
        "schema_registry": getattr(args, "schema_registry", None),
    }
