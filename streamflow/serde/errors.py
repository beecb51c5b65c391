"""``FlowError`` ⇄ :class:`ErrorInfo`: typed errors cross process boundaries intact. Errors never
hold a hook token (only its digest); a ``token`` attribute, should one ever appear, is dropped
before encoding as a second line of defence."""

from __future__ import annotations

import json

from streamflow.core import errors
from streamflow.serde.messages import ErrorInfo

_BY_NAME = {cls.__name__: cls for cls in errors.ALL_ERRORS}
_SECRET_FIELDS = {"token"}


def error_info(error: errors.FlowError) -> ErrorInfo:
    """The wire form of ``error``: its class name, its text and its attributes as JSON (a
    ``token`` attribute is dropped)."""
    fields = {
        name: json.dumps(value)
        for name, value in vars(error).items()
        if name not in _SECRET_FIELDS and name != "message"
    }
    return ErrorInfo(type=type(error).__name__, message=str(error), fields=fields)


def to_error(info: ErrorInfo) -> errors.FlowError:
    """Rebuild the typed error; unknown types become ``RuntimeFailure`` with the text."""
    cls = _BY_NAME.get(info.type)
    if cls is None:
        return errors.RuntimeFailure(f"{info.type}: {info.message}")
    error = cls.__new__(cls)
    Exception.__init__(error, info.message)
    error.message = info.message
    for name, raw in info.fields.items():
        setattr(error, name, json.loads(raw))
    return error
