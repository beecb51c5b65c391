"""The payload codec (``streamflow.payloads``): envelopes, keys, rotation and what a process
without the key is told. Real AES-GCM from ``cryptography``; nothing is mocked."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from streamflow.core.errors import PayloadUnreadable, RunConflict
from streamflow.payloads import (
    KEY_ENV,
    KEYS_ENV,
    SEALED,
    PayloadCodec,
    PayloadKeyError,
    PayloadKeys,
    across_rotation,
    codec_from_env,
    is_sealed,
    open_value,
    openable,
    seal_value,
    sealed_key_id,
    shown,
)

VALUES = [None, 0, -1.5, True, "", "text", "\ud800 lone", [1, [2, {"a": None}]], {"é": "ü"}]


@pytest.mark.parametrize("value", VALUES)
def test_every_json_value_seals_and_opens_to_itself(value: object) -> None:
    codec = PayloadCodec(PayloadKeys.generate("k1"))
    sealed = codec.seal(value)  # type: ignore[arg-type]
    assert is_sealed(sealed)
    assert sealed_key_id(sealed) == "k1"
    assert codec.open(sealed) == value
    assert codec.seal(sealed) is sealed  # sealing twice seals once


def test_sealing_is_deterministic_per_key_and_differs_between_keys() -> None:
    keys = PayloadKeys.generate("k1")
    one, again = PayloadCodec(keys), PayloadCodec(keys)
    other = PayloadCodec(PayloadKeys.generate("k1"))
    value = {"order": 42}
    assert one.seal(value) == again.seal(value)
    assert one.seal(value) != other.seal(value)
    assert one.seal(value) != one.seal({"order": 43})


def test_an_altered_envelope_or_another_key_under_the_same_id_does_not_open() -> None:
    codec = PayloadCodec(PayloadKeys.generate("k1"))
    sealed = codec.seal({"amount": 100})
    data = bytearray(base64.urlsafe_b64decode(sealed[SEALED]["data"] + "=="))
    data[-1] ^= 1
    altered = {SEALED: {"key": "k1", "data": base64.urlsafe_b64encode(data).decode()}}
    with pytest.raises(PayloadUnreadable, match="does not open it"):
        codec.open(altered)
    # The same key material under two ids: an envelope relabelled with the other id does not
    # open, since the key id is authenticated with the ciphertext.
    material = b"\1" * 32
    twins = PayloadCodec(PayloadKeys("k1", {"k1": material, "k2": material}))
    twin_sealed = twins.seal({"amount": 100})
    assert twins.open(twin_sealed) == {"amount": 100}
    relabelled = {SEALED: {"key": "k2", "data": twin_sealed[SEALED]["data"]}}
    with pytest.raises(PayloadUnreadable, match="does not open it"):
        twins.open(relabelled)
    with pytest.raises(PayloadUnreadable, match="does not open it"):
        PayloadCodec(PayloadKeys.generate("k1")).open(sealed)


def test_a_process_without_the_key_is_told_which_key_and_never_the_value() -> None:
    sealed = PayloadCodec(PayloadKeys.generate("2026-12")).seal("card 4111")
    with pytest.raises(PayloadUnreadable) as missing:
        open_value(None, sealed, "step charge input")
    assert str(missing.value) == (
        "step charge input is sealed with key '2026-12': this process has no payload codec "
        "(--payload-codec)"
    )
    with pytest.raises(PayloadUnreadable, match="does not hold that key") as other:
        open_value(PayloadCodec(PayloadKeys.generate("k9")), sealed, "x")
    assert "4111" not in str(other.value)
    assert open_value(None, {"plain": 1}, "x") == {"plain": 1}
    assert seal_value(None, {"plain": 1}) == {"plain": 1}
    assert not openable(None, sealed)
    assert openable(None, "plain")


def test_rotation_keeps_old_values_readable_and_seal_like_reuses_what_was_recorded() -> None:
    keys = PayloadKeys.generate("k1")
    old = PayloadCodec(keys)
    recorded = old.seal({"step": "input"})
    rotated = PayloadCodec(keys.rotated("k2"))
    assert rotated.active == "k2"
    assert rotated.open(recorded) == {"step": "input"}
    assert sealed_key_id(rotated.seal({"step": "input"})) == "k2"
    # A value computed again on replay keeps the envelope its history holds...
    assert rotated.seal_like({"step": "input"}, recorded) is recorded
    # ...unless it changed (then the history's check reports the drift).
    assert sealed_key_id(rotated.seal_like({"step": "other"}, recorded)) == "k2"
    retired = PayloadCodec(keys.rotated("k2").without("k1"))
    with pytest.raises(PayloadUnreadable):
        retired.open(recorded)
    with pytest.raises(PayloadKeyError, match="active key"):
        keys.without("k1")
    with pytest.raises(PayloadKeyError, match="already in use"):
        keys.rotated("k1")


def test_a_key_file_is_private_round_trips_and_bad_ones_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    keys = PayloadKeys.generate("k1").rotated("k2")
    keys.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert PayloadKeys.load(path) == keys
    assert "keys=" not in repr(keys)  # key material is never in a repr
    assert base64.b64encode(keys.keys["k1"]).decode() not in repr(keys)
    path.write_text("{")
    with pytest.raises(PayloadKeyError, match="is not JSON"):
        PayloadKeys.load(path)
    path.write_text(json.dumps({"active": "k1", "keys": {"k1": "c2hvcnQ="}}))
    with pytest.raises(PayloadKeyError, match="is 5 bytes, not 32"):
        PayloadKeys.load(path)
    path.write_text(
        json.dumps({"active": "k3", "keys": {"k1": base64.b64encode(b"\0" * 32).decode()}})
    )
    with pytest.raises(PayloadKeyError, match="not among the keys"):
        PayloadKeys.load(path)
    with pytest.raises(PayloadKeyError, match="key id"):
        PayloadKeys.generate("no spaces")
    with pytest.raises(PayloadKeyError, match="No such file"):
        PayloadKeys.load(tmp_path / "missing.json")


def test_the_environment_names_a_key_file_or_holds_one_key(tmp_path: Path) -> None:
    assert codec_from_env({}) is None
    path = tmp_path / "keys.json"
    PayloadKeys.generate("file-key").save(path)
    assert codec_from_env({KEYS_ENV: str(path)}).active == "file-key"  # type: ignore[union-attr]
    text = base64.b64encode(b"\7" * 32).decode()
    single = codec_from_env({KEY_ENV: f"env-key:{text}"})
    assert single is not None
    assert single.active == "env-key"
    with pytest.raises(PayloadKeyError, match="ID:base64"):
        codec_from_env({KEY_ENV: text})


def test_a_view_shows_what_it_can_open_and_names_the_key_of_the_rest() -> None:
    mine = PayloadCodec(PayloadKeys.generate("mine"))
    theirs = PayloadCodec(PayloadKeys.generate("theirs"))
    view = {"input": mine.seal({"a": 1}), "events": [{"payload": theirs.seal("x")}]}
    assert shown(view, mine) == {
        "input": {"a": 1},
        "events": [{"payload": "encrypted (key theirs)"}],
    }
    assert shown(view) == {
        "input": "encrypted (key mine)",
        "events": [{"payload": "encrypted (key theirs)"}],
    }
    assert mine.open_tree(view)["events"][0]["payload"] == view["events"][0]["payload"]


def test_a_view_with_a_value_its_key_does_not_open_still_renders() -> None:
    """Another key under the same id (a key file that was replaced): reading code is told
    (``PayloadUnreadable``), a view shows the value as encrypted instead of failing."""
    sealed = PayloadCodec(PayloadKeys.generate("k1")).seal({"secret": 1})
    replaced = PayloadCodec(PayloadKeys.generate("k1"))
    with pytest.raises(PayloadUnreadable):
        replaced.open(sealed)
    assert replaced.open_tree({"input": sealed}) == {"input": sealed}
    assert shown({"input": sealed}, replaced) == {"input": "encrypted (key k1)"}


def test_resealed_recognises_one_value_sealed_under_two_keys_and_nothing_else() -> None:
    keys = PayloadKeys.generate("k1")
    first = PayloadCodec(keys).seal({"amount": 5})
    rotated = PayloadCodec(keys.rotated("k2"))
    again = rotated.seal({"amount": 5})
    assert again != first  # another key, another envelope
    assert rotated.resealed(again, first) == first
    assert rotated.resealed(rotated.seal({"amount": 6}), first) is None  # another value
    assert rotated.resealed(again, again) is None  # one key: envelopes compare as they are
    assert rotated.resealed({"amount": 5}, first) is None  # nothing was sealed
    stranger = PayloadCodec(PayloadKeys.generate("k1")).seal({"amount": 5})
    assert rotated.resealed(again, stranger) is None  # k1, but not this k1: it does not open


async def test_a_conflict_across_a_rotation_is_sent_again_with_the_recorded_envelope() -> None:
    keys = PayloadKeys.generate("k1")
    recorded = PayloadCodec(keys).seal("order-7")
    rotated = PayloadCodec(keys.rotated("k2"))
    sent: list[object] = []

    async def send(value: object) -> str:  # stands in for a journal that compares envelopes
        sent.append(value)
        if value != recorded:
            raise RunConflict("run-1", "workflow input differs")
        return "deduplicated"

    async def first_input(_: object) -> object:
        return recorded

    assert await across_rotation(rotated, send, rotated.seal("order-7"), first_input) == (
        "deduplicated"
    )
    assert sent == [rotated.seal("order-7"), recorded]
    sent.clear()
    with pytest.raises(RunConflict):  # another value: the conflict stands, sent once
        await across_rotation(rotated, send, rotated.seal("order-8"), first_input)
    assert sent == [rotated.seal("order-8")]
    with pytest.raises(RunConflict):  # no codec: nothing to compare
        await across_rotation(None, send, "order-7", first_input)
