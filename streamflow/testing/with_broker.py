"""Run a command with a Kafka broker named to it: ``python -m streamflow.testing.with_broker
make pytest canary``.

The broker is the one ``STREAMFLOW_BOOTSTRAP`` names, else a Docker container, else a local
KRaft node from the Kafka jars (``broker_from_environment``); the command sees its address in
``STREAMFLOW_BOOTSTRAP``, and a broker started here stops when the command ends. ``make test``
runs the parallel suite and the secret-canary scan after it this way, so that both see the
same broker.
"""

from __future__ import annotations

import os
import subprocess
import sys

from streamflow.testing.broker import BrokerError, broker_from_environment


def main(argv: list[str]) -> int:
    """Run command ``argv`` with a broker; its exit status (2 without a command, 1 when no
    broker could be had)."""
    if not argv:
        print("usage: python -m streamflow.testing.with_broker COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        broker = broker_from_environment()
    except BrokerError as exc:
        print(f"BrokerError: {exc}", file=sys.stderr)
        return 1
    try:
        environment = {**os.environ, "STREAMFLOW_BOOTSTRAP": broker.bootstrap}
        return subprocess.call(argv, env=environment)
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
