"""The payload codec of a ``streamflow`` command: ``streamflow --payload-codec FILE ...``, else
the environment (``STREAMFLOW_PAYLOAD_CODEC``, ``STREAMFLOW_PAYLOAD_KEY``).

Every command that loads an App gives it this codec (unless the App set its own), so a host, a
processor, a worker, a deciding journal, a trigger and an embedded store's commands seal and open
payloads alike; the client commands seal what they send and open what they print with it."""

from __future__ import annotations

import argparse
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from streamflow.payloads import (
    PayloadCodec,
    PayloadKeyError,
    codec_from_env,
    codec_from_file,
    shown,
)
from streamflow.workflow.runtime import FlowRuntime

_CODEC: ContextVar[PayloadCodec | None] = ContextVar("streamflow_cli_payload_codec", default=None)


def add_payload_codec_arg(parser: argparse.ArgumentParser) -> None:
    """The program-wide ``--payload-codec FILE``."""
    parser.add_argument(
        "--payload-codec",
        type=Path,
        metavar="KEYFILE",
        help="seal and open workflow payloads with the keys of this file (streamflow "
        "payload-keys new); default $STREAMFLOW_PAYLOAD_CODEC, or one key in "
        "$STREAMFLOW_PAYLOAD_KEY",
    )


def use_payload_codec(args: argparse.Namespace) -> Any:
    """Make the codec the options (or the environment) name this command's; returns the token
    that :func:`release` takes. A key file that cannot be used is a ``SystemExit`` naming it."""
    path: Path | None = getattr(args, "payload_codec", None)
    try:
        codec = codec_from_file(path) if path is not None else codec_from_env()
    except PayloadKeyError as exc:
        raise SystemExit(f"streamflow: {exc}") from None
    return _CODEC.set(codec)


def release(token: Any) -> None:
    """Forget the codec :func:`use_payload_codec` set."""
    _CODEC.reset(token)


def cli_codec() -> PayloadCodec | None:
    """This command's payload codec (``None``: payloads are neither sealed nor opened)."""
    return _CODEC.get()


def with_cli_codec(runtime: FlowRuntime) -> FlowRuntime:
    """``runtime`` with this command's codec, unless it set one itself."""
    codec = cli_codec()
    if codec is not None and runtime.payload_codec is None:
        runtime.with_payload_codec(codec)
    return runtime


def for_reading(value: Any) -> Any:
    """``value`` for a person: sealed payloads opened with this command's codec, the others
    shown as ``encrypted (key ID)``."""
    return shown(value, cli_codec())
