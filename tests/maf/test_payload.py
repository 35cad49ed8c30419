"""Pure helpers of the MAF storage: ordering tags, lineage choice, escaping, allowed types."""

from __future__ import annotations

import enum
import json
import random
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from azure.ai.agentserver.core.storage import StateStoreItemKey
from hypothesis import given
from hypothesis import strategies as st

from foundry_checkpoint._store._naming import escape, unescape
from foundry_checkpoint_maf import _payload
from foundry_checkpoint_maf._payload import (
    CheckpointTypeBlockedError,
    decode_payload,
    encode_document,
    encode_payload,
    type_keys,
    verify_document,
)
from foundry_checkpoint_maf._records import pick_latest, sortable_timestamp


def _key(cid: str, ts: str, prev: str | None) -> StateStoreItemKey:
    tags = {"kind": "maf.checkpoint", "id": cid, "ts": ts}
    if prev is not None:
        tags["prev"] = prev
    return StateStoreItemKey(
        {
            "id": f"id-{cid}",
            "key": f"k/{cid}",
            "etag": '"1"',
            "created_at": 1,
            "updated_at": 1,
            "tags": tags,
        }
    )


@pytest.mark.parametrize("seed", range(20))
def test_pick_latest_follows_lineage_whatever_the_listing_order(seed: int) -> None:
    # ids sort against the lineage, so no id order can stand in for it
    chain = [_key(f"c{9 - i}", "5", f"c{10 - i}" if i else None) for i in range(8)]
    older = [_key(f"z{i}", "4", None) for i in range(5)]
    listed = chain + older
    random.Random(seed).shuffle(listed)
    assert pick_latest(listed).key == "k/c2"


def test_pick_latest_prefers_the_newer_timestamp_over_lineage() -> None:
    parent = _key("a", "00000000000000000009", None)
    child = _key("b", "00000000000000000008", "a")  # written later by a skewed clock
    assert pick_latest([child, parent]).key == "k/a"


def test_pick_latest_breaks_forks_deterministically() -> None:
    root = _key("r", "5", None)
    left, right = _key("l", "5", "r"), _key("x", "5", "r")
    assert pick_latest([root, left, right]).key == pick_latest([right, root, left]).key


@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9000, 1, 1)),
    st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=9000)),
)
def test_sortable_timestamp_orders_like_time(moment: datetime, step: timedelta) -> None:
    first = moment.replace(tzinfo=timezone.utc)
    later = first + step
    if later.year > 9999:
        return
    a = sortable_timestamp(first.isoformat(), "x")
    b = sortable_timestamp(later.astimezone(timezone(timedelta(hours=5))).isoformat(), "x")
    assert len(a) == len(b) and a < b


def test_sortable_timestamp_reads_z_and_naive_as_utc() -> None:
    expected = sortable_timestamp("2025-01-02T03:04:05.678901+00:00", "x")
    assert sortable_timestamp("2025-01-02T03:04:05.678901Z", "x") == expected
    assert sortable_timestamp("2025-01-02T03:04:05.678901", "x") == expected


def test_sortable_timestamp_rejects_garbage() -> None:
    with pytest.raises(WorkflowCheckpointException, match="cp-1"):
        sortable_timestamp("yesterday", "cp-1")


@given(st.text())
def test_unescape_inverts_escape(text: str) -> None:
    assert unescape(escape(text)) == text


def test_type_keys() -> None:
    assert type_keys(None) == frozenset()
    assert type_keys([int, "a.b:C.D"]) == frozenset({"builtins:int", "a.b:C.D"})
    with pytest.raises(ValueError):
        type_keys(["nocolon"])
    with pytest.raises(TypeError):
        type_keys([3.5])  # type: ignore[list-item]


class Colour(str, enum.Enum):
    """A str subclass that JSON writes as a plain string."""

    RED = "red"


class Mine:
    """An application class, admitted only where it is allowed."""

    def __init__(self, value: int) -> None:
        self.value = value


_STATES: list[Any] = [
    {},
    {"n": 1, "f": 1.5, "inf": float("inf"), "none": None, "flag": True},
    {"nested": [[{"a": ["é", "\u2603", "\ud800"]}]], "colour": Colour.RED},
    {"when": datetime(2025, 1, 2, tzinfo=timezone.utc), "id": uuid.UUID(int=7)},
    {"tuple": (1, 2), "set": {3}, "keys": {1: "int key"}},
]


@pytest.mark.parametrize("state", _STATES)
def test_save_check_agrees_with_the_decoder_of_the_stored_bytes(state: Any) -> None:
    cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state=state)
    encoded, payload = encode_document(cp)
    assert payload == encode_payload(cp)
    assert json.loads(payload) == json.loads(json.dumps(encoded))
    verify_document(encoded, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
    back = decode_payload(payload, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
    assert back.to_dict().keys() == cp.to_dict().keys()


def _count_unpickles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = _payload._unpickle

    def counting(envelope: dict[str, Any], allowed: frozenset[str]) -> Any:
        seen.append(envelope["__type__"])
        return real(envelope, allowed)

    monkeypatch.setattr(_payload, "_unpickle", counting)
    monkeypatch.setattr(_payload, "_VERIFIED", {})  # what earlier tests checked is forgotten
    return seen


def test_an_unchanged_pickle_is_checked_once_across_saves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unpickled = _count_unpickles(monkeypatch)
    history = [datetime(2025, 1, 1, tzinfo=timezone.utc) + timedelta(days=i) for i in range(5)]
    first = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"h": history})
    verify_document(
        encode_document(first)[0], allowed=frozenset(), checkpoint_id=first.checkpoint_id
    )
    assert len(unpickled) == 5
    history.append(datetime(2026, 1, 1, tzinfo=timezone.utc))
    second = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"h": history})
    verify_document(
        encode_document(second)[0], allowed=frozenset(), checkpoint_id=second.checkpoint_id
    )
    assert len(unpickled) == 6  # only the new value was walked and unpickled
    # loads never skip a check
    decode_payload(encode_payload(second), allowed=frozenset(), checkpoint_id=second.checkpoint_id)
    assert len(unpickled) == 12


def test_a_pass_under_one_allow_list_admits_nothing_under_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unpickled = _count_unpickles(monkeypatch)
    mine = f"{Mine.__module__}:{Mine.__qualname__}"
    cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"m": Mine(1)})
    encoded = encode_document(cp)[0]
    verify_document(encoded, allowed=frozenset({mine}), checkpoint_id=cp.checkpoint_id)
    verify_document(encoded, allowed=frozenset({mine}), checkpoint_id=cp.checkpoint_id)
    assert unpickled == [mine]
    for _ in range(2):  # a refusal is never remembered: every save is refused again
        with pytest.raises(CheckpointTypeBlockedError, match="deserialization blocked"):
            verify_document(encoded, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
    assert unpickled == [mine, mine, mine]


class Registered:
    """Registered with MAF's ``register_checkpoint_type``; pickles by calling itself."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        return (Registered, (self.value,))


def test_register_checkpoint_type_admits_a_class_as_allowed_types_do() -> None:
    from agent_framework import register_checkpoint_type
    from agent_framework._workflows import _checkpoint_encoding

    cp = WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="h", state={"r": Registered(4)}
    )
    payload = encode_payload(cp)
    with pytest.raises(CheckpointTypeBlockedError, match=r"tests\.maf\.test_payload:Registered"):
        decode_payload(payload, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
    register_checkpoint_type(Registered)
    try:
        back = decode_payload(payload, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
    finally:
        _checkpoint_encoding._REGISTERED_CHECKPOINT_TYPE_KEYS.discard(
            f"{Registered.__module__}:{Registered.__qualname__}"
        )
    assert type(back.state["r"]) is Registered and back.state["r"].value == 4
