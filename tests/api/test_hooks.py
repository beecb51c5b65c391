"""Hook routes: resume and dispose by token in the path or the body, authorised by the token
alone; a resolved hook is 409, an unknown token 404; tokens never reach the logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from tests.api.apps import links
from tests.api.conftest import ApiStack
from tests.api.test_runs import start


def approval_token(stack: ApiStack, run_id: str) -> str:
    assert start(stack, run_id, "api.approve").status_code == 201
    stack.wait_for(lambda: run_id in links, "the approval link")
    stack.wait_for(
        lambda: stack.client.get(f"/v1/runs/{run_id}").json()["status"] == "suspended",
        "the hook",
    )
    return links[run_id]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def logs() -> Iterator[_Collect]:
    """Every record of uvicorn's and streamflow's loggers, as formatted."""
    collect = _Collect()
    names = ["uvicorn", "uvicorn.access", "uvicorn.error", "streamflow"]
    for name in names:
        logging.getLogger(name).addHandler(collect)
    yield collect
    for name in names:
        logging.getLogger(name).removeHandler(collect)


def test_resume_by_token_in_the_path_without_an_api_key(api_stack: ApiStack) -> None:
    token = approval_token(api_stack, "hook-1")
    listed = api_stack.client.get("/v1/hooks").json()["hooks"]
    assert [(h["run_id"], h["hook_id"]) for h in listed] == [("hook-1", "approval")]
    assert token not in str(listed)
    resumed = httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume", json={"payload": "yes"})
    assert resumed.status_code == 200
    assert resumed.json() == {"run_id": "hook-1", "hook_id": "approval"}
    result = api_stack.client.get("/v1/runs/hook-1/result", params={"wait": "20s"}).json()
    assert (result["status"], result["output"]) == ("completed", "yes")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_a_hook_callback_declared_json_is_taken(api_stack: ApiStack, content_type: str) -> None:
    run_id = f"hook-ct-{len(content_type)}"
    token = approval_token(api_stack, run_id)
    resumed = httpx.post(
        f"{api_stack.url}/v1/hooks/{token}/resume",
        content=b'{"payload": "ok"}',
        headers={"content-type": content_type},
    )
    assert resumed.status_code == 200, resumed.text
    result = api_stack.client.get(f"/v1/runs/{run_id}/result", params={"wait": "20s"}).json()
    assert (result["status"], result["output"]) == ("completed", "ok")


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x", None],
    ids=["an HTML form", "text/plain", "multipart", "no content type"],
)
def test_a_hook_callback_not_declared_json_is_refused_and_leaves_the_hook_open(
    api_stack: ApiStack, content_type: str | None
) -> None:
    """What another site's page can send without a preflight (a form, a text/plain or untyped
    fetch) never resumes a hook, even with the right token."""
    run_id = f"hook-form-{(content_type or 'none')[:4]}"
    token = approval_token(api_stack, run_id)
    headers = {} if content_type is None else {"content-type": content_type}
    refused = httpx.post(
        f"{api_stack.url}/v1/hooks/{token}/resume", content=b'{"payload": "ok"}', headers=headers
    )
    assert (refused.status_code, refused.json()["error"]) == (415, "UnsupportedMediaType")
    listed = api_stack.client.get("/v1/hooks").json()["hooks"]
    assert [h["run_id"] for h in listed if h["run_id"] == run_id] == [run_id]


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
    ],
    ids=["another origin", "an opaque origin", "a cross-site fetch"],
)
def test_a_hook_callback_from_another_sites_page_is_refused(
    api_stack: ApiStack, headers: dict[str, str]
) -> None:
    run_id = f"hook-xsite-{len(str(headers))}"
    token = approval_token(api_stack, run_id)
    refused = httpx.post(
        f"{api_stack.url}/v1/hooks/{token}/resume", json={"payload": "ok"}, headers=headers
    )
    assert (refused.status_code, refused.json()["error"]) == (403, "CrossSiteRequest")
    assert token not in refused.text
    same_site = httpx.post(
        f"{api_stack.url}/v1/hooks/{token}/resume",
        json={"payload": "ok"},
        headers={"origin": api_stack.url, "sec-fetch-site": "same-origin"},
    )
    assert same_site.status_code == 200, same_site.text


def test_resume_by_token_without_a_body(api_stack: ApiStack) -> None:
    token = approval_token(api_stack, "hook-2")
    assert httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume").status_code == 200
    result = api_stack.client.get("/v1/runs/hook-2/result", params={"wait": "20s"}).json()
    assert (result["status"], result["output"]) == ("completed", None)


def test_resume_by_token_in_the_body(api_stack: ApiStack) -> None:
    token = approval_token(api_stack, "hook-3")
    resumed = httpx.post(
        f"{api_stack.url}/v1/hooks/resume", json={"token": token, "payload": {"ok": True}}
    )
    assert resumed.status_code == 200
    assert resumed.json() == {"run_id": "hook-3", "hook_id": "approval"}
    result = api_stack.client.get("/v1/runs/hook-3/result", params={"wait": "20s"}).json()
    assert result["output"] == {"ok": True}


def test_dispose_by_token(api_stack: ApiStack) -> None:
    token = approval_token(api_stack, "hook-4")
    disposed = httpx.post(f"{api_stack.url}/v1/hooks/{token}/dispose")
    assert disposed.status_code == 200
    assert disposed.json() == {"run_id": "hook-4", "hook_id": "approval"}
    assert api_stack.client.get("/v1/hooks").json()["hooks"] == []


def test_a_resolved_hook_is_409_and_an_unknown_token_404(api_stack: ApiStack) -> None:
    token = approval_token(api_stack, "hook-5")
    assert httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume").status_code == 200
    again = httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume", json={"payload": 2})
    assert again.status_code == 409
    assert again.json()["error"] == "HookAlreadyResolved"
    assert token not in again.text
    unknown = httpx.post(f"{api_stack.url}/v1/hooks/{'u' * 32}/resume")
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "HookTokenNotFound"
    assert "u" * 32 not in unknown.text
    in_body = httpx.post(f"{api_stack.url}/v1/hooks/resume", json={"token": "v" * 32})
    assert (in_body.status_code, in_body.json()["error"]) == (404, "HookTokenNotFound")


def test_tokens_never_reach_the_logs(api_stack: ApiStack, logs: _Collect) -> None:
    token = approval_token(api_stack, "hook-6")
    assert httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume").status_code == 200
    assert httpx.post(f"{api_stack.url}/v1/hooks/{token}/resume").status_code == 409
    assert httpx.post(f"{api_stack.url}/v1/hooks/{token}/dispose").status_code == 409
    api_stack.client.get("/v1/runs/hook-6/result", params={"wait": "20s"})
    text = "\n".join(logs.lines)
    assert "/v1/hooks/<redacted>/resume" in text  # the access log was captured
    assert token not in text
