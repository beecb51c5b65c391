"""Derived hook tokens: HMAC-SHA-256 of the run and hook ids under the host secret."""

from __future__ import annotations

import pickle
import re

import pytest

from streamflow import HookSecret, InvalidWorkerConfiguration
from streamflow.cli.run import load_hook_secret
from streamflow.core.tokens import MIN_TOKEN_LENGTH, derive_hook_token

KEY = bytes(range(32))


def test_the_same_secret_run_and_hook_give_the_same_token_and_anything_else_another():
    secret = HookSecret(KEY)
    token = secret.token("order-1", "approval")
    assert token == HookSecret(KEY).token("order-1", "approval")
    others = {
        secret.token("order-2", "approval"),
        secret.token("order-1", "approval-2"),
        HookSecret(bytes(reversed(KEY))).token("order-1", "approval"),
        # The length prefix keeps the split between run id and hook id unambiguous.
        secret.token("order-1:a", "pproval"),
    }
    assert token not in others
    assert len(others) == 4


def test_tokens_are_url_safe_and_long_enough_to_be_unguessable():
    token = HookSecret(KEY).token("order-1", "approval")
    assert re.fullmatch(r"sfh_[A-Za-z0-9_-]{43}", token)  # 256 bits, base64url, no padding
    assert len(token) >= MIN_TOKEN_LENGTH


def test_a_secret_never_shows_its_key():
    secret = HookSecret(b"k" * 40)
    assert "k" * 8 not in repr(secret) + str(secret)
    assert pickle.loads(pickle.dumps(secret)).token("r", "h") == secret.token("r", "h")


@pytest.mark.parametrize("key", [b"", b"short", b"x" * 31])
def test_a_short_secret_is_refused(key):
    with pytest.raises(InvalidWorkerConfiguration, match="at least 32 bytes"):
        HookSecret(key)


def test_a_text_secret_is_refused():
    with pytest.raises(InvalidWorkerConfiguration, match="bytes"):
        HookSecret("x" * 40)  # type: ignore[arg-type]


def test_deriving_without_a_secret_says_how_to_configure_one():
    with pytest.raises(InvalidWorkerConfiguration, match="with_hook_secret"):
        derive_hook_token(None, "r", "h")


def test_the_secret_file_is_read_without_its_surrounding_whitespace(tmp_path):
    path = tmp_path / "hook-secret"
    path.write_bytes(KEY.hex().encode() + b"\n")
    assert load_hook_secret(path).token("r", "h") == HookSecret(KEY.hex().encode()).token("r", "h")
    assert load_hook_secret(None) is None


def test_a_bad_secret_file_names_the_file_never_its_content(tmp_path):
    path = tmp_path / "hook-secret"
    path.write_bytes(b"too-short-secret")
    with pytest.raises(SystemExit) as caught:
        load_hook_secret(path)
    assert str(path) in str(caught.value)
    assert "too-short-secret" not in str(caught.value)
    with pytest.raises(SystemExit, match="missing"):
        load_hook_secret(tmp_path / "missing")
