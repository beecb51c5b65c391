"""``GET /v1/runs/{id}`` shows the patch markers a run recorded (``ctx.patched``) and its races
(``ctx.first``): id, members, winner; on a real uvicorn server over the embedded engine."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import ApiStack


def detail(stack: ApiStack, run_id: str) -> dict[str, Any]:
    answer = stack.client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    return view


def sequence_of(stack: ApiStack, run_id: str, kind: str) -> list[int]:
    events = stack.client.get(f"/v1/runs/{run_id}/history").json()["events"]
    return [e["sequence"] for e in events if e["type"] == kind]


def test_run_detail_lists_the_patches_a_run_recorded(api_stack: ApiStack) -> None:
    started = api_stack.client.post("/v1/runs", json={"workflow": "api.patched", "run_id": "p-1"})
    assert started.status_code == 201
    result = api_stack.client.get("/v1/runs/p-1/result", params={"wait": "20s"}).json()
    assert result["output"] == "new"
    view = detail(api_stack, "p-1")
    assert view["patches"] == [
        {"patch_id": "fast-path", "sequence": sequence_of(api_stack, "p-1", "patch_recorded")[0]}
    ]
    # A run that recorded no patch says so with an empty list.
    api_stack.client.post(
        "/v1/runs", json={"workflow": "api.echo", "run_id": "p-2", "input": {"n": 1}}
    )
    api_stack.client.get("/v1/runs/p-2/result", params={"wait": "20s"})
    assert detail(api_stack, "p-2")["patches"] == []


def test_run_detail_shows_a_race_open_then_won(api_stack: ApiStack) -> None:
    started = api_stack.client.post("/v1/runs", json={"workflow": "api.first", "run_id": "r-1"})
    assert started.status_code == 201
    api_stack.wait_for(lambda: detail(api_stack, "r-1")["status"] == "suspended", "the race")
    (race,) = detail(api_stack, "r-1")["races"]
    assert race == {
        "race_id": "signal_wait:go",
        "status": "open",
        "winner": None,
        "members": [
            {"member": "signal_wait", "member_id": "go", "status": "open"},
            {"member": "timer", "member_id": "deadline", "status": "open"},
        ],
    }
    sent = api_stack.client.post("/v1/runs/r-1/signals", json={"name": "go", "payload": "yes"})
    assert sent.status_code == 202
    result = api_stack.client.get("/v1/runs/r-1/result", params={"wait": "20s"}).json()
    assert result["output"] == {"id": "go", "value": "yes"}
    (race,) = detail(api_stack, "r-1")["races"]
    assert race == {
        "race_id": "signal_wait:go",
        "status": "won",
        "winner": {"member": "signal_wait", "member_id": "go"},
        "members": [
            {"member": "signal_wait", "member_id": "go", "status": "won"},
            {"member": "timer", "member_id": "deadline", "status": "lost"},
        ],
    }
