"""``schemas/expanded/``: the self-contained top-level schemas shipped for other languages are
exactly what the codec expands, and their fingerprints are what it writes in its headers.

If a test here fails after a schema change, regenerate the files (from the repository root):
``python -m streamflow.serde.expand``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, to_parsing_canonical_form

from streamflow.serde import codec, expand, records
from streamflow.serde.codec import HEADER_SIZE, MAGIC
from streamflow.serde.schemas import TOP_LEVEL, shipped_registry
from tests.serde import apache
from tests.serde import examples as ex

EXPANDED = Path(__file__).parents[2] / "schemas" / "expanded"
REGENERATE = "out of date: run `python -m streamflow.serde.expand` from the repository root"
EXAMPLES = {records.schema_name_for(v): v for v in ex.TOP_LEVEL_FULL}


def load(name: str) -> dict[str, object]:
    schema = json.loads((EXPANDED / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(schema, dict)
    return schema


def test_there_is_one_file_per_top_level_schema_and_nothing_else() -> None:
    assert sorted(p.name for p in EXPANDED.iterdir()) == sorted(f"{n}.json" for n in TOP_LEVEL)
    assert set(EXAMPLES) == set(TOP_LEVEL)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_each_file_is_the_expansion_the_codec_uses(name: str) -> None:
    text = (EXPANDED / f"{name}.json").read_text(encoding="utf-8")
    assert json.loads(text) == shipped_registry().schema(name).expanded, REGENERATE
    assert text == expand.render(name), REGENERATE  # byte for byte, formatting included


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_each_file_fingerprints_to_the_header_the_codec_writes(name: str) -> None:
    schema = load(name)
    from_file = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    data = codec.encode(EXAMPLES[name])
    assert data[:2] == MAGIC
    assert data[2:HEADER_SIZE] == from_file == codec.fingerprint_of(name)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_each_file_alone_reads_what_the_codec_writes(name: str) -> None:
    # What a client does with nothing but the file: parse it, skip the header, read the body.
    data = codec.encode(EXAMPLES[name])
    body = io.BytesIO(data[HEADER_SIZE:])
    record = schemaless_reader(body, parse_schema(load(name), named_schemas={}), None)
    assert isinstance(record, dict)
    assert body.tell() == len(data) - HEADER_SIZE
    apache.parse(load(name))  # and the Apache Avro library parses it too


def test_the_generator_reports_and_repairs_drift(tmp_path: Path) -> None:
    target = tmp_path / "expanded"
    assert expand.stale(target) == sorted(f"{n}.json" for n in TOP_LEVEL)
    assert expand.main([str(target)]) == 0
    assert expand.stale(target) == []
    assert expand.main(["--check", str(target)]) == 0
    (target / "Reply.json").write_text("{}\n", encoding="utf-8")
    (target / "Request.json").unlink()
    (target / "Obsolete.json").write_text("{}\n", encoding="utf-8")
    assert expand.stale(target) == ["Obsolete.json", "Reply.json", "Request.json"]
    assert expand.main(["--check", str(target)]) == 1
    assert expand.write(target) == ["Obsolete.json", "Reply.json", "Request.json"]
    assert sorted(p.name for p in target.iterdir()) == sorted(f"{n}.json" for n in TOP_LEVEL)


def test_the_repository_copy_passes_the_generators_check() -> None:
    assert expand.stale(EXPANDED) == [], REGENERATE
