"""How ``RocksDBEventStore`` lays its data out in RocksDB, and the checked reads it makes.

Layout (raw bytes, nine column families, every append one atomic ``WriteBatch``):

* ``events``  ``run_id 0x00 u64be(sequence)`` → envelope JSON
* ``runs``    ``run_id`` → ``{"last_sequence": n, "open": bool, "row": [...]}`` (``open``: not
  ended yet; a directory written before the flag existed has entries without it, read as open.
  ``row``: the run's listing row, :meth:`~streamflow.core.inspect.WorkflowRunRow.to_json`: status,
  workflow, version, build, parent, creation time, open waits, hooks, retries, children,
  signal waits and search attributes (their JSON form, or null; rows written before search
  attributes end the head without it), then last sequence, update and end times (times in µs
  since the epoch, or null); rewritten with each append, and missing from entries written
  before rows existed)
* ``wakeups`` ``u64be(due µs) kind 0x00 run_id 0x00 subject`` → wake-up JSON, so a scheduler tick
  reads only the due prefix instead of replaying histories.
* ``hooks``   ``token_digest 0x00 run_id 0x00 hook_id`` → empty: the active hooks of non-terminal
  runs by token digest, so a callback by token and the token-uniqueness check are one prefix
  read. (A directory written before this index existed gets it rebuilt on open.)
* ``incidents`` ``run_id`` → incident JSON: why the run's latest decision failed (beside its
  history, never in it).
* ``resolved`` ``token_digest`` → JSON of the last hook that held the token, once resolved (so a
  late callback is told ``HookAlreadyResolved``); deleted with that run's history.
* ``retention`` ``h 0x00 run_id 0x00 hold_id`` → hold JSON; ``t 0x00 run_id`` → the tombstone
  JSON of a pruned (or discarded) run.
* ``schedules`` ``d 0x00 schedule_id`` → schedule JSON; ``s 0x00 schedule_id`` → how far it has
  fired (:mod:`streamflow.stores.schedules`).
* ``listing`` the creation-ordered indexes of listings and the kept counts
  (:mod:`streamflow.core.listing`), each entry written in the batch of the append (or prune) that
  changes it. Index keys are an index prefix followed by the run's place, newest first:
  ``u64be(2^64-1 - created key)`` then the run id with every byte inverted (``255 - b``) and a
  closing ``0xff`` (so a forward scan reads ``(created_at, run_id)`` descending); the value is
  the run id. Prefixes: ``a 0x00`` every run; ``s 0x00 status 0x00`` per status;
  ``w u32be(len) workflow`` per workflow; ``x u32be(len) workflow status 0x00`` per workflow
  and status; ``t u32be(len) name u32be(len) value`` per search attribute value (the value as
  :func:`~streamflow.core.attributes.index_values` writes it: a run has one entry per value
  of each of its attributes, each keyword of a list counted). ``m 0x00 summary`` → the
  summary's counts, ``i64be`` each in the order of
  :class:`~streamflow.core.inspect.WorkflowRunSummary`'s fields; ``b 0x00 build`` (empty:
  unpinned runs) → ``i64be(runs) i64be(open runs)`` of one build, deleted with its last run.
  ``m 0x00 ready`` → ``1`` (the family's form) once the
  whole family describes every stored run: a directory written before it existed (no key) has
  the family, and every ``row``, rebuilt from the histories when it is first opened for
  writing; opened read-only, its rows are projected in memory instead.

Every read goes through :func:`scan` or :func:`get`, which verify block checksums and turn a
read RocksDB could not complete into :class:`StoreError` instead of a shorter answer.

Opened for writing, the directory is made ``0700`` (created so, and an existing one changed)
and every file in it ``0600``; files RocksDB writes afterwards get the process umask, behind
the directory only its owner can enter. Opened read-only (possibly as another user), nothing is
changed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol, cast

from rocksdict import AccessType, Options, Rdict, ReadOptions

from streamflow.core import events as ev
from streamflow.core.errors import SerializationError, StoreError
from streamflow.core.inspect import OPEN_OF_BUILD, RUNS_OF_BUILD, SUMMARY_FIELDS, WorkflowRunRow
from streamflow.core.listing import IndexName, Order
from streamflow.core.snapshot import WorkflowRunSnapshot
from streamflow.core.timeutil import EPOCH, format_utc, parse_utc, to_micros
from streamflow.core.wakeups import ScheduledWakeup, WakeupKind
from streamflow.stores.base import ActiveHook

FAMILIES = (
    "events",
    "runs",
    "wakeups",
    "hooks",
    "retention",
    "incidents",
    "resolved",
    "schedules",
    "listing",
    "outbox",
)
HOOK_INDEX_READY = b"\xff/index-ready"
"""The ``hooks`` key whose presence says the hook index is complete (rebuilt on open if not)."""
LISTING_READY = b"m\x00ready"
"""The ``listing`` key whose presence says the rows, indexes and counts describe every run."""
LISTING_VERSION = b"1"
"""What ``LISTING_READY`` holds: the form of the family it vouches for (another value, an
older form, is rebuilt like a missing one)."""
SUMMARY_KEY = b"m\x00summary"
"""The ``listing`` key of the summary's counts."""
BUILD_PREFIX = b"b\x00"
"""The prefix of the ``listing`` keys of the per-build counts (the build id follows)."""
_SUMMARY = struct.Struct(f">{len(SUMMARY_FIELDS)}q")
_BUILD = struct.Struct(">qq")
DIRECTORY_MODE = 0o700
"""A store's directory: its owner only (set at every open for writing)."""
FILE_MODE = 0o600
"""The files in it when it is opened for writing (later ones get the process umask, behind the
0700 directory)."""
# Shift so instants before 1970 still sort correctly as unsigned big-endian keys.
_MICROS_OFFSET = -to_micros(datetime.min.replace(tzinfo=EPOCH.tzinfo))


# -- the database --------------------------------------------------------------------------------


def open_db(path: Path, *, read_only: bool) -> tuple[Rdict, list[str]]:
    """Open the store at ``path`` (created if missing, unless ``read_only``): the database and
    the column families it was opened with. Opened for writing, the directory is made its
    owner's only (0700) before RocksDB touches it, and every file in it once open (0600)."""
    if read_only:
        if not path.is_dir():
            raise FileNotFoundError(f"no such directory: {path}")
    else:
        path.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
        path.chmod(DIRECTORY_MODE)  # mkdir's mode goes through the umask; an old one is widened
    # Read-only, open the families the directory has (an older one may lack some).
    families = (
        [f for f in FAMILIES if f in Rdict.list_cf(str(path))] if read_only else list(FAMILIES)
    )
    db = Rdict(
        str(path),
        _options(),
        column_families={name: Options(raw_mode=True) for name in families},
        access_type=AccessType.read_only() if read_only else AccessType.read_write(),
    )
    if not read_only:
        try:
            restrict_files(path)
        except BaseException:
            db.close()
            raise
    return db, families


def restrict_files(path: Path) -> None:
    """Make every file in the store's directory readable and writable by its owner only
    (histories hold inputs, outputs and hook metadata). Files RocksDB writes later get the
    process umask: the 0700 directory keeps them from everyone else."""
    for entry in path.iterdir():
        if entry.is_symlink() or not entry.is_file():
            continue
        with contextlib.suppress(FileNotFoundError):  # RocksDB deleted it meanwhile
            entry.chmod(FILE_MODE)


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    return options


# -- keys ----------------------------------------------------------------------------------------


def event_prefix(run_id: str) -> bytes:
    """The prefix of every ``events`` key of ``run_id``."""
    return run_id.encode() + b"\x00"


def event_key(run_id: str, sequence: int) -> bytes:
    return event_prefix(run_id) + sequence.to_bytes(8, "big")


def wake_key(w: ScheduledWakeup) -> bytes:
    due = to_micros(w.scheduled_at) + _MICROS_OFFSET
    return (
        due.to_bytes(8, "big")
        + w.kind.value.encode()
        + b"\x00"
        + w.run_id.encode()
        + b"\x00"
        + w.subject_id.encode()
    )


def due_limit(now: datetime) -> bytes:
    """The due-time part of the ``wakeups`` keys of wake-ups due at ``now``."""
    return (to_micros(now) + _MICROS_OFFSET).to_bytes(8, "big")


def hook_key(hook: ActiveHook) -> bytes:
    digest, run_id, hook_id = hook
    return digest.encode() + b"\x00" + run_id.encode() + b"\x00" + hook_id.encode()


def hook_prefix(token_digest: str) -> bytes:
    """The prefix of every ``hooks`` key of ``token_digest``."""
    return token_digest.encode() + b"\x00"


def hold_key(run_id: str, hold_id: str) -> bytes:
    return b"h\x00" + run_id.encode() + b"\x00" + hold_id.encode()


def hold_prefix(run_id: str | None) -> bytes:
    """The prefix of the ``retention`` keys of the holds of ``run_id`` (``None``: every hold)."""
    return b"h\x00" + (b"" if run_id is None else run_id.encode() + b"\x00")


def tomb_key(run_id: str) -> bytes:
    return b"t\x00" + run_id.encode()


_MAX_KEY = (1 << 64) - 1


@functools.lru_cache(maxsize=1024)
def listing_prefix(index: IndexName) -> bytes:
    """The prefix of the ``listing`` keys of ``index``."""
    kind = index[0]
    if kind == "all":
        return b"a\x00"
    if kind == "status":
        return b"s\x00" + index[1].encode() + b"\x00"
    name = index[1].encode()
    head = len(name).to_bytes(4, "big") + name
    if kind == "workflow":
        return b"w" + head
    if kind == "attribute":  # a search attribute's value, length-prefixed like its name
        value = index[2].encode()
        return b"t" + head + len(value).to_bytes(4, "big") + value
    return b"x" + head + index[2].encode() + b"\x00"


_INVERT = bytes(range(255, -1, -1))
"""``bytes.translate`` table of ``255 - b``."""


def listing_place(order: Order) -> bytes:
    """A run's place in an index: newest first in key order. (A run id is ASCII, so no
    inverted byte of one is ``0xff``, and a longer id sorts before its own prefix, as it does
    descending.)"""
    created, run_id = order
    inverted = run_id.encode().translate(_INVERT)
    return (_MAX_KEY - created).to_bytes(8, "big") + inverted + b"\xff"


def decode_place(place: bytes) -> Order:
    """The ``(created key, run id)`` of a place :func:`listing_place` wrote."""
    created = _MAX_KEY - int.from_bytes(place[:8], "big")
    return created, place[8:-1].translate(_INVERT).decode()


def listing_key(index: IndexName, order: Order) -> bytes:
    return listing_prefix(index) + listing_place(order)


def summary_value(counts: Mapping[str, int], moved: Mapping[str, int] | None = None) -> bytes:
    """The summary's counts among ``counts`` (moved by ``moved``), in the order of its
    fields."""
    if moved is None:
        return _SUMMARY.pack(*[counts.get(name, 0) for name in SUMMARY_FIELDS])
    return _SUMMARY.pack(*[counts.get(n, 0) + moved.get(n, 0) for n in SUMMARY_FIELDS])


def build_key(build: str) -> bytes:
    """The key of a build's counts (``""``: unpinned runs)."""
    return BUILD_PREFIX + build.encode()


def build_value(
    counts: Mapping[str, int], build: str, moved: Mapping[str, int] | None = None
) -> bytes | None:
    """A build's ``(runs, open)`` among ``counts`` (moved by ``moved``); ``None``: it has no
    run left."""
    runs, still_open = RUNS_OF_BUILD + build, OPEN_OF_BUILD + build
    values = [counts.get(runs, 0), counts.get(still_open, 0)]
    if moved is not None:
        values = [values[0] + moved.get(runs, 0), values[1] + moved.get(still_open, 0)]
    return _BUILD.pack(*values) if values[0] else None


def decode_counts(
    summary: bytes | None, builds: Iterable[tuple[bytes, bytes]], where: str
) -> dict[str, int]:
    """The kept counts (as :func:`~streamflow.core.inspect.row_counts` names them) from the
    summary entry and the per-build entries."""
    try:
        values = (0,) * len(SUMMARY_FIELDS) if summary is None else _SUMMARY.unpack(summary)
        counts = {name: value for name, value in zip(SUMMARY_FIELDS, values, strict=True) if value}
        for key, raw in builds:
            build = key[len(BUILD_PREFIX) :].decode()
            runs, still_open = _BUILD.unpack(raw)
            counts[RUNS_OF_BUILD + build] = runs
            if still_open:
                counts[OPEN_OF_BUILD + build] = still_open
    except (struct.error, UnicodeDecodeError) as exc:
        raise StoreError(f"{where}: undecodable counts: {exc}") from exc
    return counts


# -- values --------------------------------------------------------------------------------------


class _Record(Protocol):
    def to_json(self) -> Mapping[str, object]: ...


def record_value(record: _Record) -> bytes:
    """An incident, hold, tombstone or resolved hook as stored: its JSON."""
    return json.dumps(record.to_json()).encode()


def envelope_value(envelope: ev.FlowEventEnvelope) -> bytes:
    return json.dumps(envelope.to_json(), separators=(",", ":")).encode()


def decode_envelope(raw: bytes) -> ev.FlowEventEnvelope:
    try:
        return ev.FlowEventEnvelope.from_json(json.loads(raw))
    except (ValueError, SerializationError) as exc:
        raise StoreError(f"corrupt event record in RocksDB store: {exc}") from exc


def row_head(row: WorkflowRunRow) -> str:
    """The JSON text of a stored row up to its tail (the items most appends leave alone,
    kept by the store while they hold), without the closing bracket."""
    return json.dumps(row.head_json())[:-1]


def _number(value: int | None) -> str:
    return "null" if value is None else str(value)


def run_value(
    last_sequence: int, snapshot: WorkflowRunSnapshot, row: WorkflowRunRow, head: str
) -> bytes:
    """The ``runs`` entry of a run whose last event is ``last_sequence``, its row's ``head``
    (:func:`row_head`) given. Written with every append: put together from text instead of
    encoded whole (what :func:`json.dumps` would make of the same entry)."""
    last, updated, ended = row.tail_json()
    is_open = "true" if _still_open(snapshot) else "false"
    tail = f"{last}, {_number(updated)}, {_number(ended)}]"
    return (
        f'{{"last_sequence": {last_sequence}, "open": {is_open}, "row": {head}, {tail}}}'.encode()
    )


def with_row(raw: bytes, row: WorkflowRunRow) -> bytes:
    """The ``runs`` entry ``raw`` with ``row`` as its listing row (the rest kept)."""
    entry = {**json.loads(raw), "row": row.to_json()}
    return json.dumps(entry).encode()


def decode_row(run_id: str, raw: bytes, where: str) -> WorkflowRunRow | None:
    """The listing row of a ``runs`` entry (``None``: an entry from before rows existed)."""
    try:
        data = json.loads(raw).get("row")
        return None if data is None else WorkflowRunRow.from_json(run_id, data)
    except (ValueError, KeyError, TypeError, AttributeError, SerializationError) as exc:
        raise StoreError(f"{where}: undecodable entry of run {run_id}: {exc}") from exc


def closed_run_value(raw: bytes) -> bytes:
    """The ``runs`` entry ``raw`` with nothing left for recovery to do."""
    entry = {**json.loads(raw), "open": False}
    return json.dumps(entry).encode()


def run_is_open(raw: bytes) -> bool:
    """Whether a ``runs`` entry is open (an entry from before the flag existed is)."""
    return bool(json.loads(raw).get("open", True))


def _still_open(snapshot: WorkflowRunSnapshot) -> bool:
    """Whether a run may still need recovery: it has not ended, or it continued as new and its
    successor is not known to exist yet."""
    return not snapshot.is_terminal or snapshot.continuation is not None


def wake_value(w: ScheduledWakeup) -> bytes:
    return json.dumps(
        {
            "kind": w.kind.value,
            "run_id": w.run_id,
            "subject_id": w.subject_id,
            "scheduled_at": format_utc(w.scheduled_at),
            "runtime_build_id": w.runtime_build_id,
        }
    ).encode()


def wake_decode(raw: bytes) -> ScheduledWakeup:
    data = json.loads(raw)
    return ScheduledWakeup(
        kind=WakeupKind(data["kind"]),
        run_id=data["run_id"],
        subject_id=data["subject_id"],
        scheduled_at=parse_utc(data["scheduled_at"]),
        runtime_build_id=data.get("runtime_build_id"),
    )


# -- checked reads -------------------------------------------------------------------------------


def scan(family: Rdict, where: str, from_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) pairs of a column family in key order, from ``from_key``; a read that
    RocksDB could not complete (a block that fails its checksum, say) raises
    :class:`StoreError` naming ``where`` instead of ending early.

    ``Rdict.items()`` ends quietly where the iterator hit an error, so a damaged store would
    read back as a shorter one; this checks the iterator's status before saying it is done.
    """
    iterator = family.iter(_CHECKED)
    try:
        if from_key is None:
            iterator.seek_to_first()
        else:
            iterator.seek(from_key)
        while iterator.valid():
            yield cast(bytes, iterator.key()), cast(bytes, iterator.value())
            iterator.next()
        iterator.status()
    except StoreError:
        raise
    except Exception as exc:  # rocksdict raises a bare Exception with RocksDB's text
        raise damaged(where, exc) from exc
    finally:
        del iterator


def scan_prefix(
    family: Rdict, where: str, prefix: bytes, from_key: bytes | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """:func:`scan` from ``from_key`` (default: ``prefix``) while the keys start with ``prefix``."""
    for key, value in scan(family, where, prefix if from_key is None else from_key):
        if not key.startswith(prefix):
            break
        yield key, value


def get(family: Rdict, key: bytes, where: str) -> bytes | None:
    """A point read that raises :class:`StoreError` (naming ``where``) when RocksDB fails."""
    try:
        value = family.get(key, read_opt=_CHECKED)
    except Exception as exc:
        raise damaged(where, exc) from exc
    return None if value is None else cast(bytes, value)


def damaged(where: str, exc: BaseException) -> StoreError:
    return StoreError(
        f"{where}: RocksDB could not read it: {exc} (the store is damaged: "
        "`streamflow check --dir` lists what is affected)"
    )


def _checked_options() -> ReadOptions:
    options = ReadOptions()
    options.set_verify_checksums(True)
    return options


_CHECKED = _checked_options()
"""The options of every read: verify block checksums. Never changed after this, so one value
serves every read instead of one built per read."""
