"""UTC instants: RFC 3339 text, validation and checked millisecond arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streamflow.core.errors import InvalidTransition, SerializationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def require_utc(value: datetime, what: str) -> datetime:
    """Return ``value`` in UTC; naive datetimes are ambiguous and rejected."""
    if not isinstance(value, datetime):
        raise InvalidTransition(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidTransition(f"{what} must be timezone-aware (UTC), got naive {value!r}")
    return value.astimezone(UTC)


def format_utc(value: datetime) -> str:
    """RFC 3339 with a ``Z`` suffix and the shortest of 0, 3 or 6 fractional digits."""
    value = value.astimezone(UTC)
    base = value.strftime("%Y-%m-%dT%H:%M:%S")
    micros = value.microsecond
    if micros == 0:
        return base + "Z"
    if micros % 1000 == 0:
        return f"{base}.{micros // 1000:03d}Z"
    return f"{base}.{micros:06d}Z"


def parse_utc(text: str) -> datetime:
    """Parse RFC 3339 text (``Z`` or an offset; up to 9 fractional digits, kept to microseconds)."""
    if not isinstance(text, str):
        raise SerializationError(f"expected an RFC 3339 timestamp string, got {text!r}")
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    if "." in raw:
        head, _, rest = raw.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        raw = f"{head}.{(digits + '000000')[:6]}{rest}"
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise SerializationError(f"invalid RFC 3339 timestamp {text!r}") from exc
    if parsed.tzinfo is None:
        raise SerializationError(f"RFC 3339 timestamp {text!r} has no offset")
    return parsed.astimezone(UTC)


def add_millis(anchor: datetime, millis: int) -> datetime | None:
    """``anchor + millis`` or ``None`` when the result is not a representable UTC instant."""
    try:
        result = anchor + timedelta(milliseconds=millis)
    except OverflowError:
        return None
    return result


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch (for ordered index keys)."""
    delta = value.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
