"""The root of the error tree and its four families: ``FlowError`` (with the text and pickling
rules every error shares) and ``ConflictError``, ``NotFoundError``, ``InvalidInputError`` and
``InfrastructureError``, which are caught, never raised.

The tree is drawn, and imported, from :mod:`streamflow.core.errors`; this module holds only
what the modules of the tree build on.
"""

from __future__ import annotations


def _short(digest: str) -> str:
    return f"sha256:{digest[:12]}…"


def _printable(text: str) -> str:
    """``text`` with any lone surrogate escaped (``\\ud800``): an error's text can always be
    encoded, logged, stored and sent."""
    if not isinstance(text, str) or text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class FlowError(Exception):
    """Root of every error streamflow raises on purpose."""

    def __init__(self, message: str) -> None:
        message = _printable(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take their fields, not a message; pickling (e.g. across a process pool)
        # must rebuild them through __init__ with the same fields.
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls: type[FlowError], state: dict[str, object]) -> FlowError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


# -- the families: never raised themselves, caught to handle every error of one kind ----------


class ConflictError(FlowError):
    """The request disagrees with what is durably recorded, or lost a race to another writer.

    Nothing was written. Read the run again and decide anew: another caller got there first,
    or the same request was sent before with other content.
    """


class NotFoundError(FlowError):
    """What the request names (a run, an active hook's token, a route for a build) does not
    exist, or no longer does. Nothing was written."""


class InvalidInputError(FlowError):
    """The input breaks a rule (an id, a spec, a command, a value, a setting, a manifest).

    Nothing was written, and the same input fails the same way again: fix the input (or the
    code that produced it).
    """


class InfrastructureError(FlowError):
    """Something streamflow relies on failed, is missing or did not answer in time: the store,
    a task queue, Kafka, a deployment that serves the run's build.

    Operator action: fix the part the message names, or wait for it, then retry. A request
    that timed out may still be applied: send it again with the same ids, which makes it
    idempotent.
    """
