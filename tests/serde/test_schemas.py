"""The shipped ``schemas/*.avsc``: they parse, every one is used, they match the Python types
field for field, and their fingerprints are pinned (a change must be deliberate)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from enum import Enum
from pathlib import Path
from typing import Any, get_args

import pytest
from fastavro import parse_schema

import streamflow.core.events as ev
from streamflow.core.admission import DEFAULT_PRIORITY, Admission, Holder, LimitClaim, SlotGrant
from streamflow.core.attributes import KINDS, SearchAttributes, check_attributes
from streamflow.core.errors import SerializationError
from streamflow.core.events import EVENT_TYPES, FlowEventEnvelope, StepFailed
from streamflow.core.ledger import LedgerCounters, RateWindow
from streamflow.core.request_kinds import RequestKind
from streamflow.core.retention import FlowHistoryTombstone, HistoryHold
from streamflow.core.retry import RetryBackoff, RetryPolicy, StepFailureAction
from streamflow.core.schedules import Schedule, ScheduleState
from streamflow.core.spec import WorkflowRuntime, WorkflowSpec
from streamflow.core.trace_context import TraceParent
from streamflow.core.values import (
    CancellationRequest,
    CancelledOutcome,
    ChildOperationReference,
    ChildWorkflowCancellationPolicy,
    Completed,
    ContinuationLink,
    ContinuedAsNew,
    Failed,
    HostShutdown,
    ParentLink,
    RetryExhausted,
    TimedOut,
    WorkflowProgress,
    WorkflowSignal,
)
from streamflow.serde import attributes as search_wire
from streamflow.serde import codec, messages
from streamflow.serde.codec import WireCodec
from streamflow.serde.schemas import (
    NAMESPACE,
    SCHEMA_DIR,
    TOP_LEVEL,
    build_registry,
    crc64_fingerprint,
    expand,
    load_definitions,
    references,
    shipped_registry,
    walk,
)
from tests.serde import apache
from tests.serde import examples as ex

PINNED_FINGERPRINTS = {
    "Request": "98e5e81dc1b17a81",
    "HistoryRecord": "2dc467fb2d0fbc05",
    "StepTask": "b18216d3ff1d3f24",
    "Reply": "e4595c8a1d35824f",
    "Incident": "e7f5667e9f3bed96",
    "DeadLetter": "31a1dca49c6abafe",
    "BuildRegistration": "0b1714bfa2986a3c",
    "HookRequest": "1a71638d7225a723",
    "TokenRecord": "c1e6433bc5811e9b",
    "RetentionRecord": "469fe1f89d4670ac",
    "AuditRecord": "9195f3959cf895d0",
    "MetricSample": "63d86828325dd99c",
    "ScheduleRecord": "205764929c934f00",
    "LimitRequest": "b29e38ac68f8a1d8",
    "LimitEntry": "4d97f33727cf1f02",
    "LimitCounters": "4440a099461c537e",
    "ShareCounts": "04b81dc9e24a0d64",
}
"""The 8 header bytes of every shipped top-level schema, as hex.

If this test fails you changed the wire contract. That is allowed only as a deliberate schema
evolution (docs/wire-format.md): keep the old expanded schema in ``schemas/retired/`` so old
buffers stay decodable, then update the pin.
"""

RETIRED_FINGERPRINTS = {
    "51a92df0ffbd2875": "Request",
    "dbdb3fa9f1848482": "Request",
    "b3a607ef21af0cb6": "HistoryRecord",
    "2e574cd53edb9253": "HookRequest",
    "9045929b847bc9a9": "Incident",
    "6cfd35d67a15b189": "HookRequest",
    "c24e40eebab4077a": "TokenRecord",
    "d186cdd37e2c5317": "BuildRegistration",
    "640cb8b095318ffc": "Reply",
    "208fd4879d180d82": "Request",
    "40c805455f1b412b": "HistoryRecord",
    "ff5c4ae72df863df": "HookRequest",
    "32e2c3b21bf35469": "Request",
    "7c49784f4c880974": "HistoryRecord",
    "ddaaf601d20e8295": "HookRequest",
    "849694ead6a34ed8": "Request",
    "4ea4af60effad010": "HistoryRecord",
    "505c5829d103b671": "HookRequest",
    "cd10d49709a9f1a3": "Request",
    "bf90043cebdb0365": "HistoryRecord",
    "5ff22dafd92822d3": "HookRequest",
    "ecde2e2014323af5": "BuildRegistration",
    "9a10533728123a6b": "ScheduleRecord",
    "8405132bc5b203e1": "Request",
    "d0502d1751d7dc18": "HistoryRecord",
    "07cca32548f232e3": "HookRequest",
    "94abbdd12af5e775": "Request",
    "601308f53880ee3a": "HistoryRecord",
    "33c3ad8a5ceff9a3": "HookRequest",
    "def99169c9a129e8": "Request",
    "4e3925776373f9f4": "HistoryRecord",
    "9ad9190ad8bdc392": "HookRequest",
}
"""Decode-only versions shipped in ``schemas/retired/`` (fingerprint → schema)."""

RECORD_TYPES: dict[str, type[Any]] = {
    "AuditRecord": messages.AuditRecord,
    "MetricSample": messages.MetricSample,
    "Request": messages.Request,
    "HistoryRecord": FlowEventEnvelope,
    "StepTask": messages.StepTask,
    "Reply": messages.Reply,
    "Incident": messages.Incident,
    "DeadLetter": messages.DeadLetter,
    "BuildRegistration": messages.BuildRegistration,
    "ServedWorkflow": messages.ServedWorkflow,
    "HookRequest": messages.HookRequest,
    "TokenRecord": messages.TokenRecord,
    "RetentionRecord": messages.RetentionRecord,
    "ScheduleRecord": messages.ScheduleRecord,
    "ScheduleDefinition": Schedule,
    "ScheduleFired": ScheduleState,
    "HoldHistory": messages.HoldHistory,
    "ReleaseHistoryHold": messages.ReleaseHistoryHold,
    "PruneComponent": messages.PruneComponent,
    "SealedRun": messages.SealedRun,
    "UnsealRun": messages.UnsealRun,
    "ForgetRun": messages.ForgetRun,
    "HistoryHold": HistoryHold,
    "HistoryTombstone": FlowHistoryTombstone,
    "ErrorInfo": messages.ErrorInfo,
    "StartRun": messages.StartRun,
    "CancelRun": messages.CancelRun,
    "ForceCancelRun": messages.ForceCancelRun,
    "TerminateRun": messages.TerminateRun,
    "RecordProgress": messages.RecordProgress,
    "LinkChild": messages.LinkChild,
    "StepResult": messages.StepResult,
    "WakeUp": messages.WakeUp,
    "Proposal": messages.Proposal,
    "SendSignal": messages.SendSignal,
    "ResumeHook": messages.ResumeHook,
    "DisposeHook": messages.DisposeHook,
    "ResolveChild": messages.ResolveChild,
    "QueryChild": messages.QueryChild,
    "GrantSlot": messages.GrantSlot,
    "LimitRequest": messages.LimitRequest,
    "EnqueueSlot": messages.EnqueueSlot,
    "ReleaseSlot": messages.ReleaseSlot,
    "LimitTick": messages.LimitTick,
    "LimitEntry": messages.LimitEntry,
    "LimitCounters": messages.LimitCounters,
    "ShareCounts": messages.ShareCounts,
    "ShareCount": messages.ShareCount,
    "LedgerCounters": LedgerCounters,
    "RateWindow": RateWindow,
    "Holder": Holder,
    "SlotGrant": SlotGrant,
    "LimitClaim": LimitClaim,
    "Admission": Admission,
    "ClaimToken": messages.ClaimToken,
    "ReleaseToken": messages.ReleaseToken,
    "HookCallback": messages.TokenCallback,
    "WorkflowSpec": WorkflowSpec,
    "WorkflowRuntime": WorkflowRuntime,
    "RetryPolicy": RetryPolicy,
    "WorkflowProgress": WorkflowProgress,
    "ChildOperationReference": ChildOperationReference,
    "CancellationRequest": CancellationRequest,
    "WorkflowSignal": WorkflowSignal,
    "ParentLink": ParentLink,
    "ContinuationLink": ContinuationLink,
    "TraceContext": TraceParent,
    "CompletedOutcome": Completed,
    "FailedOutcome": Failed,
    "CancelledOutcome": CancelledOutcome,
    "TimedOutOutcome": TimedOut,
    "RetryExhaustedOutcome": RetryExhausted,
    "HostShutdownOutcome": HostShutdown,
    "ContinuedAsNewOutcome": ContinuedAsNew,
    **{cls.__name__: cls for cls in EVENT_TYPES.values()},
}
WIRE_ONLY_RECORDS: dict[str, tuple[str, ...]] = {
    "SearchAttribute": ("name", "value"),
    "AttributeTime": ("utc_micros",),
}
"""Records without a Python class of their own (record -> fields): a ``SearchAttribute`` is one
item of ``SearchAttributes.items``, an ``AttributeTime`` wraps a time attribute's datetime."""
ENUM_TYPES: dict[str, type[Enum]] = {
    "TerminationKind": messages.TerminationKind,
    "ReplyKind": messages.ReplyKind,
    "CallbackAction": messages.CallbackAction,
    "RetryBackoff": RetryBackoff,
    "StepFailureAction": StepFailureAction,
    "ChildWorkflowCancellationPolicy": ChildWorkflowCancellationPolicy,
}
JSON_FIELDS = {"input", "output", "details", "metadata", "payload"}

DEFINITIONS = load_definitions(SCHEMA_DIR)
FILES = sorted(SCHEMA_DIR.glob("*.avsc"))


def definition(name: str) -> dict[str, Any]:
    return DEFINITIONS[f"{NAMESPACE}.{name}"]


def union_names(union: list[Any]) -> list[str]:
    return [branch if isinstance(branch, str) else branch["name"] for branch in union]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_schema_file_is_one_documented_named_type_that_parses(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert schema["name"] == path.stem
    assert schema["namespace"] == NAMESPACE
    assert schema["doc"].strip()
    expanded = expand(path.stem, DEFINITIONS)
    parse_schema(expanded, named_schemas={})
    apache.parse(expanded)


def test_every_schema_file_is_reachable_from_a_top_level_schema() -> None:
    used: set[str] = set()
    for name in TOP_LEVEL:
        used |= references(name, DEFINITIONS)
    assert used == set(DEFINITIONS)
    assert len(FILES) == len(DEFINITIONS) == 118


def test_shipped_fingerprints_are_pinned() -> None:
    shipped = {name: fp.hex() for name, fp in codec.shipped_fingerprints().items()}
    assert shipped == PINNED_FINGERPRINTS
    registry = shipped_registry()
    assert {fp.hex() for fp in registry.by_fingerprint} == set(PINNED_FINGERPRINTS.values()) | set(
        RETIRED_FINGERPRINTS
    )


def test_the_wire_format_doc_lists_the_pinned_fingerprints() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "wire-format.md").read_text(encoding="utf-8")
    for name, hex_ in PINNED_FINGERPRINTS.items():
        as_long = int.from_bytes(bytes.fromhex(hex_), "little", signed=True)
        spaced = " ".join(hex_[i : i + 2] for i in range(0, 16, 2))
        assert f"| `{name}` | `{spaced}` | `{as_long}` |" in doc


def test_the_fingerprint_is_little_endian_crc64_of_the_canonical_form() -> None:
    # The Avro spec's test vector: the schema "null" has fingerprint 7195948357588979594.
    assert crc64_fingerprint("null") == (7195948357588979594).to_bytes(8, "little")
    for name in TOP_LEVEL:
        shipped = shipped_registry().schema(name)
        assert shipped.fingerprint == crc64_fingerprint(json.loads(shipped.canonical))
        assert "doc" not in shipped.canonical
        assert "logicalType" not in shipped.canonical


def test_schema_json_is_the_expanded_schema_and_a_copy() -> None:
    for name in TOP_LEVEL:
        schema = codec.schema_json(name)
        assert schema == expand(name, DEFINITIONS)
        assert schema["name"] == name
        schema["fields"].clear()
        assert codec.schema_json(name)["fields"]


NOT_ON_THE_WIRE: dict[str, set[str]] = {"StartRun": {"trace"}}
"""Python attributes that are no field of their record (record -> attributes): a start's trace
context travels in the Kafka record's ``traceparent`` header, not in its value."""


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_record_fields_are_the_python_attributes(name: str) -> None:
    fields = [f["name"] for f in definition(name)["fields"]]
    python = [f.name for f in dataclasses.fields(RECORD_TYPES[name])]
    skipped = NOT_ON_THE_WIRE.get(name, set())
    assert sorted(fields) == sorted(n for n in python if n not in skipped)


def test_every_record_and_enum_has_a_python_counterpart() -> None:
    names = [*RECORD_TYPES, *WIRE_ONLY_RECORDS, *ENUM_TYPES]
    assert set(DEFINITIONS) == {f"{NAMESPACE}.{n}" for n in names}


@pytest.mark.parametrize("name", sorted(WIRE_ONLY_RECORDS))
def test_wire_only_records_have_their_fields(name: str) -> None:
    assert tuple(f["name"] for f in definition(name)["fields"]) == WIRE_ONLY_RECORDS[name]


def test_a_search_attribute_value_has_one_branch_per_kind() -> None:
    """The ``SearchAttribute.value`` union: ``null`` (a removal), then one branch per kind, in
    a pinned order (branches are never reordered). ``long`` comes before ``double``: a reader
    resolving a writer's ``long`` takes the first branch it matches, and a long also matches a
    double (by promotion)."""
    value = next(f for f in definition("SearchAttribute")["fields"] if f["name"] == "value")
    assert value["type"] == [
        "null", "string", "long", "double", "boolean", "AttributeTime",
        {"type": "array", "items": "string"},
    ]  # fmt: skip
    assert value["default"] is None
    assert set(search_wire._BRANCHES) == set(KINDS)
    instant = {"type": "long", "logicalType": "timestamp-micros"}
    assert definition("AttributeTime")["fields"][0]["type"] == instant


def test_plain_attribute_values_are_written_to_their_kinds_branch() -> None:
    """streamflow names each value's branch, and a writer that does not (fastavro given plain
    values, as a Python client writes them) takes the same one: the first branch a value
    validates against, where neither ``long`` nor ``double`` takes a bool."""
    for value in (
        ex.request(ex.BODIES_FULL[0]),
        ex.envelope(ex.EVENTS_FULL[0]),
        ex.envelope(ex.EVENTS_FULL[-1]),
    ):
        data = codec.encode(value)
        name, record = codec.decode_record(data)
        assert codec.encode_record(name, record) == data


def test_an_int_attribute_stays_an_int_through_schema_resolution(tmp_path: Path) -> None:
    """A buffer of a retired version is resolved to the current schema, and a reader resolving
    a writer's ``long`` takes the first branch of its own union that the long matches:
    ``long``, which comes before ``double`` (a long also matches a double, by promotion)."""
    old_dir = _copy_schemas(tmp_path / "old")
    path = old_dir / "HistoryRecord.avsc"
    schema = json.loads(path.read_text())
    schema["fields"].append({"name": "dropped", "type": "long", "default": 0, "doc": "gone"})
    path.write_text(json.dumps(schema))
    old = WireCodec(build_registry(old_dir))
    new_dir = _copy_schemas(tmp_path / "new")
    (new_dir / "retired").mkdir()
    shipped = old.registry.schema("HistoryRecord")
    retired = new_dir / "retired" / f"HistoryRecord.{shipped.fingerprint.hex()}.avsc"
    retired.write_text(json.dumps(shipped.expanded))
    new = WireCodec(build_registry(new_dir))
    for event in (ex.EVENTS_FULL[0], ex.EVENTS_FULL[-2]):
        data = old.encode(ex.envelope(event))
        decoded = new.decode(data).event
        assert isinstance(decoded, ev.RunCreated | ev.RunAttributesSet)
        assert decoded == event
        assert decoded.attributes is not None
        assert [v for _, v in decoded.attributes.items if type(v) is int]


@pytest.mark.parametrize("cls", list(EVENT_TYPES.values()), ids=lambda c: c.__name__)
def test_event_records_follow_the_event_field_declarations(cls: type[ev.FlowEvent]) -> None:
    fields = [f["name"] for f in definition(cls.__name__)["fields"]]
    assert fields == [name for name, _ in cls.FIELDS]
    assert cls.KEY in definition(cls.__name__)["doc"]


def test_unions_list_every_variant_in_python_order() -> None:
    events = [cls.__name__ for cls in EVENT_TYPES.values()]
    history = {f["name"]: f for f in definition("HistoryRecord")["fields"]}
    assert union_names(history["event"]["type"]) == events
    proposal = {f["name"]: f for f in definition("Proposal")["fields"]}
    assert union_names(proposal["events"]["type"]["items"]) == events
    request = {f["name"]: f for f in definition("Request")["fields"]}
    assert union_names(request["body"]["type"]) == [
        c.__name__ for c in get_args(messages.RequestBody)
    ]
    hook_request = {f["name"]: f for f in definition("HookRequest")["fields"]}
    # By wire name: the record HookCallback is messages.TokenCallback.
    assert [RECORD_TYPES[n] for n in union_names(hook_request["body"]["type"])] == list(
        get_args(messages.HookRequestBody)
    )
    limit_request = {f["name"]: f for f in definition("LimitRequest")["fields"]}
    assert union_names(limit_request["body"]["type"]) == [
        c.__name__ for c in get_args(messages.LimitRequestBody)
    ]
    resolved = {f["name"]: f for f in definition("ChildWorkflowResolved")["fields"]}
    outcomes = union_names(resolved["outcome"]["type"])
    assert [RECORD_TYPES[n].TYPE.value for n in outcomes] == [
        "completed", "failed", "cancelled", "timed_out", "retry_exhausted", "host_shutdown",
        "continued_as_new",
    ]  # fmt: skip
    resolve_child = {f["name"]: f for f in definition("ResolveChild")["fields"]}
    assert resolve_child["outcome"]["type"] == resolved["outcome"]["type"]


def test_every_request_kind_is_a_request_body() -> None:
    """``RequestBody`` lists the core's request kinds one by one (in wire branch order): a kind
    the core adds must be given its wire form."""
    assert set(get_args(RequestKind)) <= set(get_args(messages.RequestBody))


def _branches(schema: dict[str, Any], field: str) -> list[str]:
    kind = next(f for f in schema["fields"] if f["name"] == field)["type"]
    union = kind["items"] if isinstance(kind, dict) else kind
    return union_names(union)


@pytest.mark.parametrize("name", ["Request", "HistoryRecord"])
def test_a_union_only_ever_gains_branches_at_its_end(name: str) -> None:
    """Schema evolution rule 3: every retired version's union is a prefix of the current one,
    so a branch keeps its index (and its meaning) in every version."""
    field = "body" if name == "Request" else "event"
    current = _branches(shipped_registry().schema(name).expanded, field)
    retired = [
        s for s in shipped_registry().by_fingerprint.values() if s.name == name and not s.current
    ]
    assert retired
    for shipped in retired:
        old = _branches(shipped.expanded, field)
        assert current[: len(old)] == old, shipped.fingerprint.hex()


ADDED_FIELDS: dict[str, dict[str, object]] = {
    "StartRun": {"parent": None, "predecessor": None, "admission": None, "attributes": None},
    "CancelRun": {"propagated": False},
    "ForceCancelRun": {"propagated": False},
    "Proposal": {"claim_id": None},
    "Request": {"forwarded": 0},
    "Reply": {"subject": None, "created": False},
}
"""Fields added to records that had shipped before, with their defaults."""
ADDED_BODIES = [
    "SendSignal",
    "ResumeHook",
    "DisposeHook",
    "ResolveChild",
    "QueryChild",
    "HoldHistory",
    "ReleaseHistoryHold",
    "PruneComponent",
    "UnsealRun",
    "ForgetRun",
    "GrantSlot",
]


def test_fields_added_to_existing_records_have_defaults() -> None:
    """Fields added after a record first shipped must carry defaults (schema evolution rule 3),
    so a reader of the new schema can resolve records written with the old one."""
    for name, defaults in ADDED_FIELDS.items():
        fields = {f["name"]: f for f in definition(name)["fields"]}
        python = {f.name: f for f in dataclasses.fields(RECORD_TYPES[name])}
        for field, default in defaults.items():
            assert fields[field]["default"] == default, f"{name}.{field}"
            assert python[field].default == default, f"{name}.{field}"


def test_records_written_without_the_added_fields_resolve_to_their_defaults(
    tmp_path: Path,
) -> None:
    old_dir = _copy_schemas(tmp_path / "old")
    for name, defaults in ADDED_FIELDS.items():
        path = old_dir / f"{name}.avsc"
        schema = json.loads(path.read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] not in defaults]
        if name == "Request":
            body = next(f for f in schema["fields"] if f["name"] == "body")
            body["type"] = [b for b in body["type"] if b not in ADDED_BODIES]
        path.write_text(json.dumps(schema))
    old = WireCodec(build_registry(old_dir))

    new_dir = _copy_schemas(tmp_path / "new")
    (new_dir / "retired").mkdir()
    for name in ("Request", "Reply"):
        shipped = old.registry.schema(name)
        assert shipped.fingerprint != codec.fingerprint_of(name)
        retired = new_dir / "retired" / f"{name}.{shipped.fingerprint.hex()}.avsc"
        retired.write_text(json.dumps(shipped.expanded))
    new = WireCodec(build_registry(new_dir))

    values: list[Any] = [
        ex.request(messages.StartRun(spec=ex.SPEC_FULL, input=ex.RICH), full=False),
        ex.request(messages.CancelRun(request=CancellationRequest("why")), full=False),
        ex.request(messages.ForceCancelRun(reason="stuck"), full=False),
        ex.request(dataclasses.replace(ex.PROPOSAL_FULL, claim_id=None), full=False),
        dataclasses.replace(ex.REPLY_FULL, subject=None),
    ]
    for value in values:
        data = old.encode(value)
        assert new.decode(data) == value


def test_only_hook_callback_has_a_token_field() -> None:
    """The plaintext hook token appears in exactly one record; everything else has digests."""
    with_token = [
        full for full, schema in DEFINITIONS.items()
        for f in schema.get("fields", []) if f["name"] == "token"
    ]  # fmt: skip
    assert with_token == [f"{NAMESPACE}.HookCallback"]
    for name in TOP_LEVEL:
        carriers = {
            node["name"]
            for node in walk(codec.schema_json(name))
            if isinstance(node, dict) and node.get("type") == "record"
            and any(f["name"] == "token" for f in node["fields"])
        }  # fmt: skip
        assert carriers == ({"HookCallback"} if name == "HookRequest" else set()), name


@pytest.mark.parametrize("name", sorted(ENUM_TYPES))
def test_enum_symbols_are_the_python_values(name: str) -> None:
    assert definition(name)["symbols"] == [member.value for member in ENUM_TYPES[name]]


def test_json_valued_fields_are_bytes_and_optionals_default_to_null() -> None:
    for full, schema in DEFINITIONS.items():
        for field in schema.get("fields", []):
            if field["name"] in JSON_FIELDS:
                assert field["type"] == "bytes", f"{full}.{field['name']}"
                if "default" in field:
                    assert field["default"] == "null"  # the JSON text of null
            if isinstance(field["type"], list) and "null" in field["type"]:
                assert field["type"][0] == "null", f"{full}.{field['name']}"
                assert "default" in field, f"{full}.{field['name']}"
                assert field["default"] is None, f"{full}.{field['name']}"


def test_no_array_or_map_item_can_encode_to_zero_bytes() -> None:
    """A hostile block count of zero-byte items costs no input bytes and unbounded memory;
    items of at least one byte each keep the work within the size limit."""
    for name in TOP_LEVEL:
        for node in walk(codec.schema_json(name)):
            if isinstance(node, dict) and node.get("type") in ("array", "map"):
                item = node["items"] if node["type"] == "array" else node["values"]
                assert item != "null"
                assert not (isinstance(item, dict) and item.get("fields") == [])


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_exactly_the_datetime_attributes_are_timestamp_micros(name: str) -> None:
    instant = {"type": "long", "logicalType": "timestamp-micros"}
    avro = {
        f["name"] for f in definition(name)["fields"] if f["type"] in (instant, ["null", instant])
    }
    python = {f.name for f in dataclasses.fields(RECORD_TYPES[name]) if "datetime" in str(f.type)}
    assert avro == python


# -- loading errors and evolution ---------------------------------------------------------------


def _copy_schemas(target: Path) -> Path:
    """The current schemas only (the shipped retired versions are left out)."""
    shutil.copytree(SCHEMA_DIR, target, ignore=shutil.ignore_patterns("retired"))
    return target


TIMEOUT_EVENTS = ("TimeoutArmed", "TimeoutElapsed", "TimeoutDisarmed")
PATCH_EVENTS = ("PatchRecorded",)
RACE_EVENTS = ("RaceArmed", "RaceLost")
FLOW_CONTROL_EVENTS = ("StepAttemptQueued",)
FLOW_CONTROL_FIELDS: dict[str, str] = {
    "RunCreated": "admission",
    "RunStarted": "grant",
    "ChildWorkflowRequested": "admission",
    "StepCreated": "limits",
    "StepStarted": "grant",
    "StartRun": "admission",
}
"""The flow-control fields added to records that had shipped before (record -> field)."""
FLOW_CONTROL_RECORDS = ("Admission", "GrantSlot")
"""The flow-control records only the fields and body above use. ``LimitClaim``, ``SlotGrant``
and ``Holder`` stay: the limits topology's top-level schemas use them too, and a definition
no schema reaches changes no fingerprint."""


PUBLISH_EVENTS = ("MessagePublished",)
ATTRIBUTE_EVENTS = ("RunAttributesSet",)
ATTRIBUTE_FIELDS: dict[str, str] = {"RunCreated": "attributes", "StartRun": "attributes"}
"""The search-attribute fields added to records that had shipped before (record -> field)."""
ATTRIBUTE_RECORDS = ("SearchAttribute", "AttributeTime")

TRACE_FIELDS: dict[str, str] = {"RunCreated": "trace"}
"""The trace-context fields added to records that had shipped before (record -> field)."""
TRACE_RECORDS = ("TraceContext",)


def _without_events(schemas: Path, names: tuple[str, ...]) -> Path:
    """``schemas`` with the events ``names`` left out of the event union (and their files)."""
    for record in ("HistoryRecord", "Proposal"):
        path = schemas / f"{record}.avsc"
        schema = json.loads(path.read_text())
        events = next(f for f in schema["fields"] if f["name"] in ("event", "events"))
        union = events["type"] if isinstance(events["type"], list) else events["type"]["items"]
        union[:] = [branch for branch in union if branch not in names]
        path.write_text(json.dumps(schema))
    for name in names:
        (schemas / f"{name}.avsc").unlink()
    return schemas


SCHEDULE_ADMISSION_FIELDS: dict[str, tuple[str, ...]] = {
    "ScheduleDefinition": ("priority", "admission"),
    "ServedWorkflow": ("limited",),
}
"""The fields a schedule's admission and a limited workflow's registration added (record ->
fields), after flow control."""


def _before_schedule_admission(schemas: Path) -> Path:
    """``schemas`` as they were before ``ScheduleDefinition.priority``/``admission`` and
    ``ServedWorkflow.limited``."""
    for record, added in SCHEDULE_ADMISSION_FIELDS.items():
        path = schemas / f"{record}.avsc"
        schema = json.loads(path.read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] not in added]
        path.write_text(json.dumps(schema))
    return schemas


def _before_publications(schemas: Path) -> Path:
    """``schemas`` as they were before the event union gained ``MessagePublished``."""
    return _without_events(schemas, PUBLISH_EVENTS)


def _before_trace(schemas: Path) -> Path:
    """``schemas`` as they were before ``RunCreated.trace`` (and its ``TraceContext``, and
    what came after it)."""
    _before_publications(schemas)
    for record, added in TRACE_FIELDS.items():
        path = schemas / f"{record}.avsc"
        schema = json.loads(path.read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] != added]
        path.write_text(json.dumps(schema))
    for name in TRACE_RECORDS:
        (schemas / f"{name}.avsc").unlink()
    return schemas


def _before_attributes(schemas: Path) -> Path:
    """``schemas`` as they were before search attributes (and what came after them): no
    ``run_attributes_set``, no ``attributes`` of ``RunCreated`` and ``StartRun``."""
    _before_trace(schemas)
    _without_events(schemas, ATTRIBUTE_EVENTS)
    for record, added in ATTRIBUTE_FIELDS.items():
        path = schemas / f"{record}.avsc"
        schema = json.loads(path.read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] != added]
        path.write_text(json.dumps(schema))
    for name in ATTRIBUTE_RECORDS:
        (schemas / f"{name}.avsc").unlink()
    return schemas


def _before_flow_control(schemas: Path) -> Path:
    """``schemas`` as they were before flow control (and what came after it): no
    ``step_attempt_queued``, none of the admission and grant fields, no ``GrantSlot`` request
    body (the limits topology's own top-level schemas stay, as every registry loads them: no
    older version of them exists)."""
    _before_attributes(schemas)
    _before_schedule_admission(schemas)
    _without_events(schemas, FLOW_CONTROL_EVENTS)
    for record, added in FLOW_CONTROL_FIELDS.items():
        path = schemas / f"{record}.avsc"
        schema = json.loads(path.read_text())
        schema["fields"] = [f for f in schema["fields"] if f["name"] != added]
        path.write_text(json.dumps(schema))
    path = schemas / "Request.avsc"
    schema = json.loads(path.read_text())
    body = next(f for f in schema["fields"] if f["name"] == "body")
    body["type"] = [b for b in body["type"] if b != "GrantSlot"]
    path.write_text(json.dumps(schema))
    for name in FLOW_CONTROL_RECORDS:
        (schemas / f"{name}.avsc").unlink()
    return schemas


def _before_races(schemas: Path) -> Path:
    """``schemas`` as they were before the event union gained the race events (and what came
    after them)."""
    return _without_events(_before_flow_control(schemas), RACE_EVENTS)


def _before_patches(schemas: Path) -> Path:
    """``schemas`` as they were before the event union gained ``PatchRecorded`` (and what it
    gained after it)."""
    return _without_events(_before_flow_control(schemas), PATCH_EVENTS + RACE_EVENTS)


def _before_timeouts(schemas: Path) -> Path:
    """``schemas`` as they were before the event union gained the timeout events (and what it
    gained after them)."""
    return _without_events(
        _before_flow_control(schemas), TIMEOUT_EVENTS + PATCH_EVENTS + RACE_EVENTS
    )


def _without_fields(event: ev.FlowEvent, *added_fields: dict[str, str]) -> ev.FlowEvent:
    """``event`` without the fields ``added_fields`` name (as written before they existed)."""
    for fields in added_fields:
        added = fields.get(type(event).__name__)
        if added is not None:
            default = next(f for f in dataclasses.fields(event) if f.name == added).default
            event = dataclasses.replace(event, **{added: default})
    return event


def _events_before(name: str) -> list[ev.FlowEvent]:
    """The full examples of the events the union held before it gained event ``name``, as
    they were written then (without the fields added after)."""
    names = [type(e).__name__ for e in ex.EVENTS_FULL]
    added = (TRACE_FIELDS, ATTRIBUTE_FIELDS)
    if name != "RunAttributesSet":
        added += (FLOW_CONTROL_FIELDS,)
    return [_without_fields(e, *added) for e in ex.EVENTS_FULL[: names.index(name)]]


def _records_of(
    events: list[ev.FlowEvent],
) -> tuple[list[FlowEventEnvelope], messages.Request, messages.HookRequest]:
    """The history records, the proposal and the token claim that carry ``events``."""
    envelopes = [
        FlowEventEnvelope(run_id="run-1", sequence=n, event_id=f"e-{n}", timestamp=ex.T0, event=e)
        for n, e in enumerate(events, start=1)
    ]
    proposal = dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(events))
    claim = messages.HookRequest(
        body=messages.ClaimToken(
            token_digest=ex.DIGEST, run_id="run-1", hook_id="h-1", proposal=proposal
        )
    )
    return envelopes, ex.request(proposal), claim


def test_buffers_written_before_publications_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_publications(_copy_schemas(tmp_path / "old"))))
    names = [type(e).__name__ for e in ex.EVENTS_FULL]
    before = ex.EVENTS_FULL[: names.index("MessagePublished")]
    envelopes, proposal, claim = _records_of(before)
    for value, fingerprint in (
        *((envelope, "4e3925776373f9f4") for envelope in envelopes),
        (proposal, "def99169c9a129e8"),
        (claim, "9ad9190ad8bdc392"),
    ):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # An old reader meets a publication as an unknown writer schema, never as something else.
    published = ex.envelope(ex.EVENTS_FULL[names.index("MessagePublished")])
    with pytest.raises(SerializationError, match="unknown schema fingerprint"):
        old.decode(codec.encode(published))


def test_buffers_written_before_the_trace_context_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_trace(_copy_schemas(tmp_path / "old"))))
    published = [type(e).__name__ for e in ex.EVENTS_FULL].index("MessagePublished")
    before = [_without_fields(e, TRACE_FIELDS) for e in ex.EVENTS_FULL[:published]]
    envelopes, proposal, claim = _records_of(before)
    start = ex.request(ex.BODIES_FULL[0])
    for value, fingerprint in (
        *((envelope, "601308f53880ee3a") for envelope in envelopes),
        (proposal, "94abbdd12af5e775"),
        (start, "94abbdd12af5e775"),
        (claim, "33c3ad8a5ceff9a3"),
    ):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # The added field reads as "outside any trace".
    assert codec.decode(old.encode(envelopes[0])).event.trace is None
    # An old reader meets a run with a trace context as an unknown writer schema, never as a
    # run outside any trace.
    for value in (
        dataclasses.replace(envelopes[0], event=ex.EVENTS_FULL[0]),
        ex.request(ex.PROPOSAL_FULL),
    ):
        with pytest.raises(SerializationError, match="unknown schema fingerprint"):
            old.decode(codec.encode(value))


def test_the_trace_field_defaults_to_none() -> None:
    """Fields added to shipped records need defaults (schema evolution rule 3): null, which is
    the Python default too."""
    for record, added in TRACE_FIELDS.items():
        field = next(f for f in definition(record)["fields"] if f["name"] == added)
        python = next(f for f in dataclasses.fields(RECORD_TYPES[record]) if f.name == added)
        assert field["type"] == ["null", "TraceContext"], record
        assert (field["default"], python.default) == (None, None), record


def test_a_trace_context_is_the_fields_of_a_traceparent() -> None:
    fields = [(f["name"], f["type"]) for f in definition("TraceContext")["fields"]]
    assert fields == [("trace_id", "string"), ("span_id", "string"), ("sampled", "boolean")]


def test_no_trace_context_is_null_on_the_wire() -> None:
    """A run outside any trace is written as before the field existed wrote nothing: ``null``,
    and reads back as ``None``; a run inside one carries the ids as they are."""
    none = ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN))
    assert codec.decode_record(codec.encode(none))[1]["event"][1]["trace"] is None
    assert codec.decode(codec.encode(none)).event.trace is None
    traced = ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN, trace=ex.TRACE_FULL))
    assert codec.decode_record(codec.encode(traced))[1]["event"][1]["trace"] == {
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "sampled": True,
    }


def test_buffers_written_before_search_attributes_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_attributes(_copy_schemas(tmp_path / "old"))))
    before = _events_before("RunAttributesSet")
    envelopes, proposal, claim = _records_of(before)
    start = ex.request(dataclasses.replace(ex.BODIES_FULL[0], attributes=None))
    for value, fingerprint in (
        *((envelope, "d0502d1751d7dc18") for envelope in envelopes),
        (proposal, "8405132bc5b203e1"),
        (start, "8405132bc5b203e1"),
        (claim, "07cca32548f232e3"),
    ):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # The added fields read as "no attributes".
    assert codec.decode(old.encode(envelopes[0])).event.attributes is None
    assert codec.decode(old.encode(start)).body.attributes is None
    # An old reader meets the new event and a run with attributes as an unknown writer schema,
    # never as a run without them.
    for value in (
        dataclasses.replace(envelopes[0], event=ex.EVENTS_FULL[-1]),
        dataclasses.replace(envelopes[0], event=ex.EVENTS_FULL[0]),
        ex.request(ex.BODIES_FULL[0]),
    ):
        with pytest.raises(SerializationError, match="unknown schema fingerprint"):
            old.decode(codec.encode(value))


def test_the_attribute_fields_default_to_none() -> None:
    """Fields added to shipped records need defaults (schema evolution rule 3): null, which is
    the Python default too."""
    for record, added in ATTRIBUTE_FIELDS.items():
        field = next(f for f in definition(record)["fields"] if f["name"] == added)
        python = next(f for f in dataclasses.fields(RECORD_TYPES[record]) if f.name == added)
        assert (field["default"], python.default) == (None, None), record


def test_no_attributes_are_null_on_the_wire() -> None:
    """A run without attributes is written as before attributes existed wrote nothing: ``null``
    (empty attributes too, as the history's JSON form leaves them out), and reads back as
    ``None``."""
    none = ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN))
    empty = ex.envelope(ev.RunCreated(spec=ex.SPEC_MIN, attributes=SearchAttributes()))
    assert codec.encode(empty) == codec.encode(none)
    assert codec.decode_record(codec.encode(none))[1]["event"][1]["attributes"] is None
    assert codec.decode(codec.encode(empty)) == none
    start = ex.request(messages.StartRun(spec=ex.SPEC_MIN, attributes=check_attributes({})))
    assert codec.decode(codec.encode(start)).body.attributes is None


def test_buffers_written_before_flow_control_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_flow_control(_copy_schemas(tmp_path / "old"))))
    before = _events_before("StepAttemptQueued")
    envelopes = [
        FlowEventEnvelope(run_id="run-1", sequence=n, event_id=f"e-{n}", timestamp=ex.T0, event=e)
        for n, e in enumerate(before, start=1)
    ]
    proposal = ex.request(dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(before)))
    start = ex.request(messages.StartRun(spec=ex.SPEC_FULL, input=ex.RICH))
    claim = messages.HookRequest(
        body=messages.ClaimToken(
            token_digest=ex.DIGEST,
            run_id="run-1",
            hook_id="h-1",
            proposal=dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(before)),
        )
    )
    for value, fingerprint in (
        *((envelope, "bf90043cebdb0365") for envelope in envelopes),
        (proposal, "cd10d49709a9f1a3"),
        (start, "cd10d49709a9f1a3"),
        (claim, "5ff22dafd92822d3"),
    ):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # The added fields read as "not limited": no admission, no grant, no claims.
    created, started = (codec.decode(old.encode(e)).event for e in envelopes[:2])
    assert (created.admission, started.grant) == (None, None)
    step = next(e for e in envelopes if isinstance(e.event, ev.StepCreated))
    assert codec.decode(old.encode(step)).event.limits == ()
    # An old reader meets the new event, a limited run and a grant as an unknown writer
    # schema, never as something else (a queued run taken for a started one).
    for value in (
        dataclasses.replace(envelopes[0], event=ev.StepAttemptQueued(step_id="s", attempt=1)),
        dataclasses.replace(envelopes[0], event=ex.EVENTS_FULL[0]),
        ex.request(ex.BODIES_FULL[-1]),
    ):
        with pytest.raises(SerializationError, match="unknown schema fingerprint"):
            old.decode(codec.encode(value))


def test_the_flow_control_fields_default_to_not_limited() -> None:
    """Fields added to shipped records need defaults (schema evolution rule 3): null, or an
    empty array for the step's claims, which are the Python defaults too."""
    for record, added in FLOW_CONTROL_FIELDS.items():
        field = next(f for f in definition(record)["fields"] if f["name"] == added)
        python = next(f for f in dataclasses.fields(RECORD_TYPES[record]) if f.name == added)
        if added == "limits":
            assert (field["default"], python.default) == ([], ())
        else:
            assert (field["default"], python.default) == (None, None), record


def test_buffers_written_before_the_race_events_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_races(_copy_schemas(tmp_path / "old"))))
    before = _events_before("RaceArmed")
    envelope = FlowEventEnvelope(
        run_id="run-1", sequence=3, event_id="e-3", timestamp=ex.T0, event=before[-1]
    )
    proposal = ex.request(dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(before)))
    claim = messages.HookRequest(
        body=messages.ClaimToken(
            token_digest=ex.DIGEST,
            run_id="run-1",
            hook_id="h-1",
            proposal=dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(before)),
        )
    )
    for value, fingerprint in (
        (envelope, "4ea4af60effad010"),
        (proposal, "849694ead6a34ed8"),
        (claim, "505c5829d103b671"),
    ):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # An old reader meets the new events as an unknown writer schema, never as something else.
    for event in (
        ev.RaceArmed(race_id="hook:h-1", member="hook", member_id="h-1"),
        ev.RaceLost(member="timer", member_id="deadline"),
    ):
        with pytest.raises(SerializationError, match="unknown schema fingerprint"):
            old.decode(codec.encode(dataclasses.replace(envelope, event=event)))


def test_buffers_written_before_the_patch_events_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_patches(_copy_schemas(tmp_path / "old"))))
    before = _events_before("PatchRecorded")
    envelope = FlowEventEnvelope(
        run_id="run-1", sequence=3, event_id="e-3", timestamp=ex.T0, event=before[-1]
    )
    proposal = ex.request(dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(before)))
    claim = messages.HookRequest(
        body=messages.ClaimToken(
            token_digest=ex.DIGEST,
            run_id="run-1",
            hook_id="h-1",
            proposal=dataclasses.replace(ex.PROPOSAL_FULL, events=tuple(before)),
        )
    )
    for value, fingerprint in (
        (envelope, "7c49784f4c880974"),
        (proposal, "32e2c3b21bf35469"),
        (claim, "ddaaf601d20e8295"),
    ):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # An old reader meets the new event as an unknown writer schema, never as something else.
    marked = dataclasses.replace(envelope, event=ev.PatchRecorded(patch_id="charge-first"))
    with pytest.raises(SerializationError, match="unknown schema fingerprint"):
        old.decode(codec.encode(marked))


def test_buffers_written_before_the_timeout_events_still_decode(tmp_path: Path) -> None:
    old = WireCodec(build_registry(_before_timeouts(_copy_schemas(tmp_path / "old"))))
    envelope = FlowEventEnvelope(
        run_id="run-1",
        sequence=3,
        event_id="e-3",
        timestamp=ex.T0,
        event=_events_before("TimeoutArmed")[-1],  # hook_disposed
    )
    before = tuple(_events_before("TimeoutArmed"))
    proposal = ex.request(dataclasses.replace(ex.PROPOSAL_FULL, events=before))
    for value, fingerprint in ((envelope, "40c805455f1b412b"), (proposal, "208fd4879d180d82")):
        data = old.encode(value)
        assert data[2:10].hex() == fingerprint
        assert codec.decode(data) == value
    # An old reader meets a new event as an unknown writer schema, never as something else.
    timed_out = dataclasses.replace(envelope, event=ev.TimeoutElapsed(wait_id="h-1:timeout"))
    with pytest.raises(SerializationError, match="unknown schema fingerprint"):
        old.decode(codec.encode(timed_out))


def test_the_shipped_retired_versions_decode_to_current_values(tmp_path: Path) -> None:
    registry = shipped_registry()
    for fingerprint, name in RETIRED_FINGERPRINTS.items():
        retired = registry.by_fingerprint[bytes.fromhex(fingerprint)]
        assert retired.name == name
        assert not retired.current
    # Requests written by the previous Request schemas still decode: before StepResult had
    # `retryable` and StepFailed `no_retry` (their defaults fill in), and before that, before
    # the retention bodies.
    for fingerprint, union_ends in (("dbdb3fa9f1848482", None), ("51a92df0ffbd2875", "QueryChild")):
        old_dir = _before_timeouts(_copy_schemas(tmp_path / fingerprint))
        for record, added in (("StepResult", "retryable"), ("StepFailed", "no_retry")):
            schema = json.loads((old_dir / f"{record}.avsc").read_text())
            schema["fields"] = [f for f in schema["fields"] if f["name"] != added]
            (old_dir / f"{record}.avsc").write_text(json.dumps(schema))
        if union_ends is not None:
            request = json.loads((old_dir / "Request.avsc").read_text())
            body = next(f for f in request["fields"] if f["name"] == "body")
            body["type"] = body["type"][: body["type"].index(union_ends) + 1]
            (old_dir / "Request.avsc").write_text(json.dumps(request))
        old = WireCodec(build_registry(old_dir))
        for value in (
            ex.request(messages.QueryChild(parent_run_id="p", child_id="c")),
            ex.request(
                messages.StepResult(
                    step_id="s", attempt=2, ok=False, error="boom", finished_at=ex.T0
                )
            ),
        ):
            data = old.encode(value)
            assert data[2:10].hex() == fingerprint
            assert codec.decode(data) == value


def test_incidents_written_before_attempts_were_counted_decode_as_first_attempts(
    tmp_path: Path,
) -> None:
    old_dir = _copy_schemas(tmp_path / "incident")
    schema = json.loads((old_dir / "Incident.avsc").read_text())
    schema["fields"] = [f for f in schema["fields"] if f["name"] not in ("attempts", "first_at")]
    (old_dir / "Incident.avsc").write_text(json.dumps(schema))
    old = WireCodec(build_registry(old_dir))
    incident = messages.Incident(
        run_id="r",
        sequence=4,
        build=None,
        error=messages.ErrorInfo(type="RuntimeFailure", message="boom"),
        processor="processor/0",
        at=ex.T0,
    )
    data = old.encode(incident)
    assert data[2:10].hex() == "9045929b847bc9a9"
    decoded = codec.decode(data)
    assert decoded == incident
    assert (decoded.attempts, decoded.first_at) == (1, None)


def test_registrations_written_before_workflows_were_advertised_serve_any_workflow(
    tmp_path: Path,
) -> None:
    old_dir = _copy_schemas(tmp_path / "registration")
    schema = json.loads((old_dir / "BuildRegistration.avsc").read_text())
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "workflows"]
    (old_dir / "BuildRegistration.avsc").write_text(json.dumps(schema))
    (old_dir / "ServedWorkflow.avsc").unlink()
    old = WireCodec(build_registry(old_dir))
    registration = messages.BuildRegistration(
        group="ns.processor.v1",
        instance="0",
        role="processor",
        current="v1",
        heartbeat_at=ex.T0,
        ttl_ms=20_000,
    )
    data = old.encode(registration)
    assert data[2:10].hex() == "d186cdd37e2c5317"
    decoded = codec.decode(data)
    assert decoded == registration
    assert decoded.workflows == ()  # advertises nothing: a processor that runs any workflow


def test_schedules_and_registrations_written_before_their_admission_fields_still_decode(
    tmp_path: Path,
) -> None:
    """A schedule stored before ``priority``/``admission`` decodes at priority 3 without an
    admission; a registration written before ``limited`` marks no workflow limited."""
    old = WireCodec(build_registry(_before_schedule_admission(_copy_schemas(tmp_path / "old"))))
    definition = dataclasses.replace(
        ex.SCHEDULE_FULL.definition, priority=DEFAULT_PRIORITY, admission=None
    )
    schedule = messages.ScheduleRecord(schedule_id="nightly", definition=definition)
    data = old.encode(schedule)
    assert data[2:10].hex() == "9a10533728123a6b"
    decoded = codec.decode(data)
    assert decoded == schedule
    assert decoded.definition.priority == 3
    assert decoded.definition.admission is None
    registration = dataclasses.replace(
        ex.REGISTRATION_FULL, workflows=(messages.ServedWorkflow("orders.fulfill", "7"),)
    )
    data = old.encode(registration)
    assert data[2:10].hex() == "ecde2e2014323af5"
    assert codec.decode(data).workflows == (messages.ServedWorkflow("orders.fulfill", "7", False),)


def test_a_schedule_priority_outside_1_to_5_is_refused_on_decode() -> None:
    definition = dataclasses.replace(ex.SCHEDULE_FULL.definition, priority=9, admission=None)
    data = codec.encode(messages.ScheduleRecord(schedule_id="nightly", definition=definition))
    with pytest.raises(SerializationError, match="invalid priority 9"):
        codec.decode(data)


def test_a_reply_written_before_created_decodes_as_not_created(tmp_path: Path) -> None:
    """A journal not yet upgraded answers starts without ``created``: its replies still
    decode, as starts that created nothing (a client then reports ``created`` false)."""
    old_dir = _copy_schemas(tmp_path / "reply")
    schema = json.loads((old_dir / "Reply.avsc").read_text())
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "created"]
    (old_dir / "Reply.avsc").write_text(json.dumps(schema))
    old = WireCodec(build_registry(old_dir))
    reply = messages.Reply(
        request_id="r-1", run_id="run-1", kind=messages.ReplyKind.REQUEST, ok=True, at=ex.T0
    )
    data = old.encode(reply)
    assert data[2:10].hex() == "640cb8b095318ffc"
    decoded = codec.decode(data)
    assert decoded == reply
    assert decoded.created is False
    created = messages.Reply(
        request_id="r-2",
        run_id="run-1",
        kind=messages.ReplyKind.REQUEST,
        ok=True,
        at=ex.T0,
        created=True,
    )
    assert codec.decode(codec.encode(created)).created is True


def test_an_undefined_reference_fails_loading(tmp_path: Path) -> None:
    schemas = _copy_schemas(tmp_path / "schemas")
    (schemas / "ErrorInfo.avsc").unlink()
    with pytest.raises(SerializationError, match=r"ErrorInfo.*is not defined"):
        build_registry(schemas)


def test_a_misnamed_schema_file_fails_loading(tmp_path: Path) -> None:
    schemas = _copy_schemas(tmp_path / "schemas")
    (schemas / "ErrorInfo.avsc").rename(schemas / "Error.avsc")
    with pytest.raises(SerializationError, match="defines 'ErrorInfo', expected 'Error'"):
        load_definitions(schemas)


def _evolve_dead_letter(schemas: Path) -> None:
    """Version 2 of DeadLetter: one more field, with a default (a compatible change)."""
    path = schemas / "DeadLetter.avsc"
    schema = json.loads(path.read_text())
    schema["fields"].append(
        {"name": "attempts", "type": "long", "default": 1, "doc": "Tries before giving up."}
    )
    path.write_text(json.dumps(schema))


def test_a_retired_version_stays_decodable_after_evolution(tmp_path: Path) -> None:
    v1 = WireCodec(build_registry(_copy_schemas(tmp_path / "v1")))
    old = v1.encode(ex.DEAD_LETTER_FULL)

    schemas = _copy_schemas(tmp_path / "v2")
    _evolve_dead_letter(schemas)
    without_retired = WireCodec(build_registry(schemas))
    with pytest.raises(SerializationError, match="unknown schema fingerprint"):
        without_retired.decode(old)

    (schemas / "retired").mkdir()
    old_fingerprint = codec.fingerprint_of("DeadLetter").hex()
    (schemas / "retired" / f"DeadLetter.{old_fingerprint}.avsc").write_text(
        json.dumps(codec.schema_json("DeadLetter"))
    )
    v2 = WireCodec(build_registry(schemas))
    assert v2.registry.schema("DeadLetter").fingerprint.hex() != old_fingerprint
    assert v2.decode(old) == ex.DEAD_LETTER_FULL
    name, record = v2.decode_record(old)
    assert (name, record["attempts"]) == ("DeadLetter", 1)  # resolved to the current schema
    assert v2.decode(v2.encode(ex.DEAD_LETTER_FULL)) == ex.DEAD_LETTER_FULL


def test_a_fingerprint_is_never_registered_twice(tmp_path: Path) -> None:
    schemas = _copy_schemas(tmp_path / "schemas")
    (schemas / "retired").mkdir()
    (schemas / "retired" / "Reply.old.avsc").write_text(json.dumps(codec.schema_json("Reply")))
    with pytest.raises(SerializationError, match="is never reused"):
        build_registry(schemas)


def test_a_history_record_written_before_step_failed_had_no_retry_still_decodes(
    tmp_path: Path,
) -> None:
    old_dir = _before_timeouts(_copy_schemas(tmp_path / "old"))
    schema = json.loads((old_dir / "StepFailed.avsc").read_text())
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "no_retry"]
    (old_dir / "StepFailed.avsc").write_text(json.dumps(schema))
    old = WireCodec(build_registry(old_dir))
    envelope = FlowEventEnvelope(
        run_id="run-1",
        sequence=7,
        event_id="e-7",
        timestamp=ex.T0,
        event=StepFailed(step_id="s", attempt=3, error="boom"),
    )
    data = old.encode(envelope)
    assert data[2:10].hex() == "b3a607ef21af0cb6"
    decoded = codec.decode(data)
    assert decoded == envelope
    assert decoded.event.no_retry is None


def test_every_top_level_record_maps_every_field_of_its_class() -> None:
    """A field added to a message class but not to its record map would be dropped on the
    wire (decoded as its default) without any round trip of a default-valued example noticing."""
    import dataclasses

    from streamflow.serde import records

    for record in records.TOP_LEVEL:
        if not dataclasses.is_dataclass(record.cls):
            continue
        declared = {f.name for f in dataclasses.fields(record.cls)}
        assert {name for name, _ in record.fields} == declared, record.name
