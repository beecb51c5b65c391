"""What one record costs to encode and decode (figures, not pass/fail): the wire codec as it runs
(fastavro's compiled writer and reader given each schema's named types) against fastavro's
``schemaless_writer``/``schemaless_reader`` on the same pre-parsed schemas, measured in the same
run, for the records a W1 run's journal writes most: a ``step_started`` and a
``step_completed`` history record.

Run: ``.venv/bin/python -m bench.codec [--number 50000]``.
"""

from __future__ import annotations

import argparse
import io
import timeit
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from fastavro import schemaless_reader, schemaless_writer

from streamflow.core import events as ev
from streamflow.serde import records
from streamflow.serde.codec import Wire

HEADER = 10  # the single-object header: 2 magic bytes and the 8-byte fingerprint


def _best(call: Callable[[], object], number: int) -> float:
    """Microseconds per call, the best of five repetitions."""
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def measure(label: str, envelope: ev.FlowEventEnvelope, number: int) -> None:
    """Print what ``envelope`` costs each way, and the baseline's cost."""
    wire = Wire()
    data = wire.encode(envelope)
    name = records.schema_name_for(envelope)
    shipped = wire._records.registry.schema(name)

    def baseline_encode() -> bytes:
        out = io.BytesIO()
        out.write(data[:HEADER])
        schemaless_writer(out, shipped.parsed, records.to_avro(envelope)[1])
        return out.getvalue()

    def baseline_decode() -> object:
        body = io.BytesIO(data)
        body.seek(HEADER)
        raw = schemaless_reader(
            body, shipped.parsed, None, return_record_name=True, return_record_name_override=True
        )
        return records.from_avro(name, raw)  # type: ignore[arg-type]

    assert baseline_encode() == data
    assert baseline_decode() == wire.decode(data, ev.FlowEventEnvelope)
    encode = _best(lambda: wire.encode(envelope), number)
    decode = _best(lambda: wire.decode(data, ev.FlowEventEnvelope), number)
    base_encode = _best(baseline_encode, number)
    base_decode = _best(baseline_decode, number)
    print(
        f"{label:15s} {len(data):4d} bytes  encode {encode:5.1f} us "
        f"(schemaless_writer {base_encode:5.1f} us, {encode / base_encode:.2f}x)  "
        f"decode {decode:5.1f} us (schemaless_reader {base_decode:5.1f} us, "
        f"{decode / base_decode:.2f}x)"
    )


def main(number: int) -> None:
    now = datetime.now(UTC)
    samples = {
        "step_started": ev.StepStarted(step_id="step-1", attempt=1),
        "step_completed": ev.StepCompleted(step_id="step-1", output={"ok": True, "n": 41}),
    }
    for label, event in samples.items():
        envelope = ev.FlowEventEnvelope(
            run_id="run-0123456789",
            sequence=3,
            event_id=str(uuid.uuid4()),
            timestamp=now,
            event=event,
        )
        measure(label, envelope, number)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=50_000, help="calls per repetition")
    main(parser.parse_args().number)
