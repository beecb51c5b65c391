"""streamflow beside Restate on the same three workloads, back to back, in one invocation.

Each round runs, one after another on the same machine:

* streamflow on Kafka: ``bench.kafka`` (a local broker it starts, the topologies as processes,
  W1/W2/W3, CPU of every process including the broker, the broker's idle CPU, and the raw
  transactional consume→produce loop as the second baseline);
* streamflow embedded: ``bench.embedded --peer``, on RocksDB with ``sync=True`` (every
  acknowledged append fsynced, as Restate's and DBOS's logs are) and without;
* Restate: its server and Python SDK, driven by a harness that runs the same workloads
  (``--restate`` names its folder: it holds ``run.sh``, which writes ``restate-*.json``).

Then every figure is printed with its ratio to Restate's figure of the same round (higher is
better for throughput, lower for latency and CPU). Workloads: W1 1,000 runs x 3 no-op steps
started at once (runs/s); W2 200 one-step runs one after another (start to result, p50/p99);
W3 one run of 500 sequential steps (ms per step; the last 100 steps over the first 100).

Run: ``.venv/bin/python -m bench.versus --restate PEERS/restate --restate-python VENV/bin/python
--restate-npm NPM_PREFIX [--rounds 2] [--brokers 3] [--local-steps] [--no-embedded] [--out
bench/results/versus-DATE.txt]`` (``--brokers 3``: streamflow on a 3-node KRaft cluster with
replication factor 3; ``--local-steps``: a second Kafka row whose steps are local, run by the
deciding journal).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

Figures = dict[str, Any]


def run_json(label: str, command: list[str], out: Path, env: dict[str, str]) -> Figures:
    """Run ``command`` (which writes JSON to ``out``) in ``env``; what it wrote."""
    began = time.monotonic()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    print(f"  {label}: {time.monotonic() - began:.0f} s", file=sys.stderr)
    figures: Figures = json.loads(out.read_text())
    return figures


def streamflow_kafka(scratch: Path, *, brokers: int = 1, local_steps: bool = False) -> Figures:
    name = "kafka-local.json" if local_steps else "kafka.json"
    out = scratch / name
    # Its own broker (no STREAMFLOW_BOOTSTRAP), so that the broker's CPU is measured too.
    env = {k: v for k, v in os.environ.items() if k != "STREAMFLOW_BOOTSTRAP"}
    command = [sys.executable, "-m", "bench.kafka", "--rss-runs", "0", "--json", str(out)]
    command += ["--brokers", str(brokers)] + (["--local-steps"] if local_steps else [])
    label = "streamflow on Kafka" + (", local steps" if local_steps else "")
    return run_json(label, command, out, env)


def streamflow_embedded(scratch: Path) -> Figures:
    out = scratch / "embedded.json"
    command = [sys.executable, "-m", "bench.embedded", "--peer", "--json", str(out)]
    return run_json("streamflow embedded", command, out, dict(os.environ))


def restate(scratch: Path, harness: Path, python: str, npm: str) -> Figures:
    out = scratch / "restate"
    out.mkdir()
    env = {"PY": python, "NPM_PREFIX": npm, "OUT": str(out), "BENCH_DIR": str(scratch / "rs")}
    (scratch / "rs").mkdir()
    began = time.monotonic()
    subprocess.run(
        ["bash", str(harness / "run.sh")],
        check=True,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    print(f"  Restate: {time.monotonic() - began:.0f} s", file=sys.stderr)
    found = sorted(out.glob("restate-*.json"))
    if not found:
        raise SystemExit(f"the Restate harness wrote no restate-*.json into {out}")
    figures: Figures = json.loads(found[0].read_text())
    return figures


def restate_row(r: Figures) -> Figures:
    w1 = r["w1"]
    median = min(w1["runs"], key=lambda rep: abs(rep["wall_s"] - w1["median_wall_s"]))
    procs = {k: v for k, v in median["procs"].items() if k != "machine"}
    runs = w1["wf_per_s"] * w1["median_wall_s"]
    return {
        "W1 runs/s": w1["wf_per_s"],
        "W2 p50 ms": r["w2"]["p50_ms"],
        "W2 p99 ms": r["w2"]["p99_ms"],
        "W3 ms/step": r["w3"]["ms_per_step"],
        "W3 last100/first100": r["w3"]["last100_ms_per_step"] / r["w3"]["first100_ms_per_step"],
        "CPU ms per W1 run": sum(p["cpu_s"] for p in procs.values()) * 1000 / runs,
    }


def brokers(by_process: dict[str, float]) -> float | None:
    """The brokers' figure: the one broker's, or the sum over a cluster's nodes."""
    found = [v for name, v in by_process.items() if name.startswith("kafka-broker")]
    return sum(found) if found else None


def kafka_row(k: Figures) -> Figures:
    return {
        "W1 runs/s": k["W1"]["runs_per_s"],
        "W2 p50 ms": k["W2"]["p50_ms"],
        "W2 p99 ms": k["W2"]["p99_ms"],
        "W3 ms/step": k["W3"]["ms_per_step"],
        "W3 last100/first100": k["W3"]["last_over_first"],
        "CPU ms per W1 run": k["W1"]["cpu_ms_per_run"]["all"],
        "broker CPU ms per W2 run": brokers(k["W2"]["cpu_ms_per_run"]),
        "broker idle, cores": brokers(k["idle_cores"]),
        "W1 events/s over raw loop": k["W1_events_over_baseline"],
    }


def embedded_row(e: Figures) -> Figures:
    return {
        "W1 runs/s": e["W1"]["runs_per_s"],
        "W2 p50 ms": e["W2"]["p50_ms"],
        "W2 p99 ms": e["W2"]["p99_ms"],
        "W3 ms/step": e["W3"]["seconds"] * 1000 / e["W3"]["steps"],
        "W3 last100/first100": e["W3"]["last_over_first"],
        "CPU ms per W1 run": e["W1"]["cpu_ms_per_run"],
    }


HIGHER_IS_BETTER = {"W1 runs/s"}


def table(rows: dict[str, Figures], reference: str) -> str:
    """One line per figure: each system's value, and its ratio to ``reference``'s."""
    names = list(rows)
    figures: list[str] = []
    for row in rows.values():
        figures += [f for f in row if f not in figures]
    width = max(len(f) for f in figures) + 2
    lines = ["".ljust(width) + "".join(n.rjust(24) for n in names)]
    for figure in figures:
        cells = []
        base = rows[reference].get(figure)
        for name in names:
            value = rows[name].get(figure)
            if value is None:
                cells.append("—".rjust(24))
                continue
            text = f"{value:,.3f}" if value < 100 else f"{value:,.0f}"
            if name != reference and isinstance(base, (int, float)) and base:
                text += f" ({value / base:.2f}x)"
            cells.append(text.rjust(24))
        lines.append(figure.ljust(width) + "".join(cells))
    return "\n".join(lines)


def peer_versions(python: str, npm: str) -> dict[str, str]:
    versions: dict[str, str] = {}
    probe = "import importlib.metadata as m; print(m.version('restate-sdk'))"
    sdk = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    versions["restate-sdk"] = sdk.stdout.strip()
    package = Path(npm) / "node_modules/@restatedev/restate-server/package.json"
    if package.exists():
        versions["restate-server"] = json.loads(package.read_text())["version"]
    return versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--restate", type=Path, required=True, help="the Restate harness folder")
    parser.add_argument("--restate-python", required=True, help="python with restate-sdk")
    parser.add_argument("--restate-npm", required=True, help="npm prefix with restate-server")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--brokers", type=int, default=1, help="3: streamflow on a 3-node cluster, RF 3"
    )
    parser.add_argument(
        "--local-steps",
        action="store_true",
        help="also run streamflow on Kafka with local steps (run by the deciding journal)",
    )
    parser.add_argument(
        "--no-embedded", dest="embedded", action="store_false", help="skip the embedded rows"
    )
    parser.add_argument("--out", type=Path, help="also write the report (and .json beside it)")
    args = parser.parse_args()
    scratch_root = Path(tempfile.mkdtemp(prefix="streamflow-versus-"))
    versions = peer_versions(args.restate_python, args.restate_npm)
    report: list[str] = [
        f"python -m bench.versus --rounds {args.rounds} --brokers {args.brokers}"
        + (" --local-steps" if args.local_steps else "")
        + ("" if args.embedded else " --no-embedded"),
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; peers: {versions}",
    ]
    raw: list[Figures] = []
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}", file=sys.stderr)
        scratch = scratch_root / f"round{round_number}"
        scratch.mkdir()
        kafka = streamflow_kafka(scratch, brokers=args.brokers)
        local = (
            streamflow_kafka(scratch, brokers=args.brokers, local_steps=True)
            if args.local_steps
            else None
        )
        embedded = streamflow_embedded(scratch) if args.embedded else None
        peer = restate(scratch, args.restate, args.restate_python, args.restate_npm)
        raw.append({"kafka": kafka, "kafka_local": local, "embedded": embedded, "restate": peer})
        rows = {"Restate": restate_row(peer), "streamflow Kafka": kafka_row(kafka)}
        if local is not None:
            rows["Kafka local steps"] = kafka_row(local)
        if embedded is not None:
            rows["embedded sync=True"] = embedded_row(embedded["rocksdb_sync"])
            rows["embedded no fsync"] = embedded_row(embedded["rocksdb"])
        report += ["", f"round {round_number} (ratios to Restate in parentheses)"]
        report.append(table(rows, "Restate"))
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    main()
