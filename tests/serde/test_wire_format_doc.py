"""docs/wire-format.md is the whole contract for clients in other languages: its partitioning
rule, test vectors and reference code agree with ``partition_for``, and its table of reply
errors covers every request kind and names only real error classes."""

from __future__ import annotations

import hashlib
import re
import zlib
from pathlib import Path
from typing import Any, get_args

import pytest
from confluent_kafka import murmur2 as confluent_partition
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from streamflow.core import errors
from streamflow.kafka.naming import history_key, partition_for
from streamflow.serde import messages

DOC = (Path(__file__).parents[2] / "docs" / "wire-format.md").read_text(encoding="utf-8")
INT32_MAX = 0x7FFFFFFF
TOKEN = "tok-example"
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()

PARTITION_VECTORS: dict[str, tuple[int, int, int, int]] = {
    "order-42": (501153024, 501153024, 0, 10),
    "run-1": (637533037, 637533037, 1, 11),
    "run-3": (-1065441791, 1082041857, 9, 3),
    DIGEST: (996628459, 996628459, 7, 0),
}
"""key → (Java's signed murmur2, toPositive of it, partition of 12, CRC32 % 12), as the doc
states them. CRC32 is what librdkafka's default partitioner (consistent_random) would use."""


def signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def section(title: str) -> str:
    start = DOC.index(f"\n{title}\n")
    end = DOC.find("\n#", start + len(title) + 2)
    return DOC[start : end if end != -1 else len(DOC)]


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[1:]  # without the header


def doc_partition_function() -> Any:
    """The ``partition`` function of the doc's Python reference code."""
    blocks = re.findall(r"```python\n(.*?)```", DOC, flags=re.DOTALL)
    code = next(b for b in blocks if "def murmur2(" in b)
    scope: dict[str, Any] = {}
    exec(code, scope)
    return scope["partition"]


DOC_PARTITION = doc_partition_function()


# -- partitioning --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(PARTITION_VECTORS))
def test_the_vectors_are_what_partition_for_computes(key: str) -> None:
    signed, positive, partition, crc = PARTITION_VECTORS[key]
    assert partition_for(key, 12) == partition
    # Modulo 2**31 - 1 leaves the positive hash itself, so every bit of it is compared.
    assert partition_for(key, INT32_MAX) == positive
    assert signed & INT32_MAX == positive
    # An independent implementation (kafka-python) gives the whole 32-bit hash.
    assert signed32(kafka_python_murmur2(key.encode())) == signed
    assert zlib.crc32(key.encode()) % 12 == crc


@pytest.mark.parametrize("key", sorted(PARTITION_VECTORS))
def test_the_doc_states_the_vectors(key: str) -> None:
    signed, positive, partition, crc = PARTITION_VECTORS[key]
    assert f"| `{key}` | `{signed}` | `{positive}` | `{partition}` | `{crc}` |" in DOC


def test_the_doc_explains_its_examples_correctly() -> None:
    assert DIGEST in DOC
    assert f"hook token `{TOKEN}`" in DOC
    # toPositive is not abs: run-3 is the vector where they differ.
    assert abs(PARTITION_VECTORS["run-3"][0]) % 12 == 11
    assert "`abs(-1065441791) % 12` would be 11" in DOC
    # A history key is partitioned by its run id alone, not by the whole key.
    key = history_key("order-42", 1)
    assert " ".join(f"{b:02x}" for b in key) in DOC
    assert partition_for("order-42", 12) == 0
    assert confluent_partition(key, 12) == 9
    assert "murmur2 of that whole key would say 9" in DOC


def test_the_doc_reference_code_agrees_on_the_vectors() -> None:
    partition = DOC_PARTITION
    for key, (_, positive, expected, _) in PARTITION_VECTORS.items():
        assert partition(key, 12) == expected
        assert partition(key, INT32_MAX) == positive


@given(st.text(max_size=80), st.integers(min_value=1, max_value=4096))
def test_the_doc_reference_code_is_partition_for(key: str, partitions: int) -> None:
    # Arbitrary text: non-ASCII keys and every tail length (0-3 bytes) of the hash.
    expected = partition_for(key, partitions)
    assert DOC_PARTITION(key, partitions) == expected
    assert confluent_partition(key.encode("utf-8"), partitions) == expected


# -- reply errors -------------------------------------------------------------------------------


KINDS = {cls.__name__ for cls in get_args(messages.RequestBody)}


def error_names(cell: str) -> set[str]:
    """Class names in a table cell (a cell may also refer to another request kind's errors)."""
    return set(re.findall(r"`([A-Z][A-Za-z]+)`", cell)) - KINDS


def test_every_request_kind_has_a_row_in_the_reply_error_table() -> None:
    rows = table_rows(section("### Errors per request kind"))
    documented = {name for row in rows for name in re.findall(r"`([A-Za-z]+)`", row[0])}
    assert documented >= KINDS, sorted(KINDS - documented)
    assert "HookCallback" in documented


def test_the_reply_error_tables_name_only_real_error_classes() -> None:
    known = {cls.__name__ for cls in errors.ALL_ERRORS}
    every_kind = table_rows(section("### Errors of every kind"))
    per_kind = table_rows(section("### Errors per request kind"))
    named = set().union(*(error_names(row[0]) for row in every_kind))
    named |= set().union(*(error_names(row[2]) for row in per_kind))
    assert named, "no error classes found: did the tables move?"
    assert named <= known, sorted(named - known)
    assert {"InvalidRunId", "RunNotFound", "RuntimeBuildUnavailable"} <= named
    assert {"SerializationError", "PayloadTooLarge"} <= named
