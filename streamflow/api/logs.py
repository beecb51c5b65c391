"""Keeping hook tokens out of logs: a filter that redacts ``/v1/hooks/<token>`` in every
record it sees (uvicorn's access log prints request paths)."""

from __future__ import annotations

import logging
import re

_TOKEN_PATH = re.compile(r"(/v1/hooks/)(?!resume(?:[/?\s\"']|$))[^/?\s\"']+")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    """``text`` with the token of every ``/v1/hooks/<token>/...`` path replaced."""
    return _TOKEN_PATH.sub(rf"\g<1>{REDACTED}", text)


class RedactHookTokens(logging.Filter):
    """Rewrites a record's message and arguments so that no hook token in a path survives."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record``'s message and string arguments in place; always keep it."""
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def redact_access_log(logger_name: str = "uvicorn.access") -> RedactHookTokens:
    """Install :class:`RedactHookTokens` on ``logger_name`` (once) and return it."""
    logger = logging.getLogger(logger_name)
    for existing in logger.filters:
        if isinstance(existing, RedactHookTokens):
            return existing
    installed = RedactHookTokens()
    logger.addFilter(installed)
    return installed
