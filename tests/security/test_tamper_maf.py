"""Tampered MAF checkpoints never run code: every read path refuses them with a typed error.

An attacker who can write to the store (here: raw item writes that bypass the storage's own
save-time check, from this process and from a separate one) plants checkpoints whose state
holds pickles that construct a string-evaluating class through a module that merely imports
it, reach pydantic's metaclass through ``builtins.type``, run a constructor through
``copyreg._reconstructor``, ``BUILD`` a class, or name a memo index of 2**26. MAF's own
restricted decoder runs them (checked below, so each gadget is known to be live); ours refuses
them as tampering, runs nothing, and logs the tampering at WARNING.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import subprocess
import sys
import tracemalloc
from collections import Counter, OrderedDict, defaultdict, deque
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value
from typer.testing import CliRunner

from foundry_checkpoint.errors import CorruptPayloadError, FoundryCheckpointError
from foundry_checkpoint_maf import (
    CheckpointDecodeError,
    CheckpointTamperedError,
    CheckpointTypeBlockedError,
    FoundryCheckpointStorage,
)
from foundry_checkpoint_maf._payload import _decode_value, decode_payload, encode_payload
from foundry_checkpoint_maf._records import checkpoint_tags
from tests.cli.conftest import Cli

from ._audit import watching
from ._gadgets import (
    build_on_class_pickle,
    global_call_pickle,
    memo_index_pickle,
    metaclass_pickle,
    pickle_envelope,
    reconstructor_pickle,
    touch_expression,
    type_adapter_pickle,
)

WF = "triage"
_FILE_STORAGE = FileCheckpointStorage.__module__  # where the class is defined
_FILE_STORAGE_KEY = f"{_FILE_STORAGE}:FileCheckpointStorage"
_EVENT_KEY = "agent_framework._workflows._events:WorkflowEvent"
_PLANTED = "planted_by_a_checkpoint"


def _gadgets(marker: Path) -> dict[str, bytes]:
    """Each gadget creates ``marker`` (a file, or a folder) or sets a class attribute when run."""
    expr = touch_expression(marker)
    return {
        "metaclass": metaclass_pickle(marker),
        "reconstructor": reconstructor_pickle(marker, _FILE_STORAGE_KEY),
        "build_on_class": build_on_class_pickle(_EVENT_KEY, _PLANTED, str(marker), slots=True),
        "build_on_class_dict": build_on_class_pickle(_EVENT_KEY, _PLANTED, str(marker)),
        "memo_index": memo_index_pickle(2**26),
        "type_adapter_tools": type_adapter_pickle(marker),
        "type_adapter_types": type_adapter_pickle(marker, "agent_framework._types"),
        "os_system": global_call_pickle("os", "system", f"touch {marker}"),
        "eval": global_call_pickle("builtins", "eval", expr),
        "partial": global_call_pickle("functools", "partial", "x"),
        "subprocess": global_call_pickle("subprocess", "getoutput", f"touch {marker}"),
        # a class defined in the framework, called with arguments (its constructor makes a folder)
        "framework_constructor": global_call_pickle(
            _FILE_STORAGE, "FileCheckpointStorage", str(marker)
        ),
    }


def _planted_payload(checkpoint: WorkflowCheckpoint, gadget: bytes) -> bytes:
    doc: Any = json.loads(encode_payload(checkpoint))
    doc["state"]["loot"] = pickle_envelope(gadget)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


async def _plant(attacker: FoundryCheckpointStorage, gadget: bytes) -> str:
    """Write a checkpoint holding ``gadget`` as a raw item, skipping the save-time check."""
    checkpoint = WorkflowCheckpoint(workflow_name=WF, graph_signature_hash="h", state={"n": 1})
    cid = checkpoint.checkpoint_id
    tags, extra = checkpoint_tags(cid, WF, checkpoint.timestamp, None)
    payload = _planted_payload(checkpoint, gadget)
    await attacker._run(attacker._items.write(cid, payload, tags, extra))
    return cid


def _event_class() -> type:
    from agent_framework._workflows._events import WorkflowEvent

    return WorkflowEvent


@pytest.mark.parametrize(
    "gadget", ["type_adapter_tools", "framework_constructor", "metaclass", "reconstructor"]
)
def test_the_gadget_is_live_in_the_framework_decoder(tmp_path: Path, gadget: str) -> None:
    marker = tmp_path / "ran"
    envelope = pickle_envelope(_gadgets(marker)[gadget])
    with pytest.raises(WorkflowCheckpointException):
        decode_checkpoint_value(envelope, allowed_types=frozenset())
    assert marker.exists()  # the framework's decoder ran it before its type check


def test_build_on_a_class_is_live_in_the_framework_decoder(tmp_path: Path) -> None:
    envelope = pickle_envelope(_gadgets(tmp_path / "x")["build_on_class"], "builtins:dict")
    try:
        assert decode_checkpoint_value(envelope, allowed_types=frozenset()) == {"n": 1}
        assert getattr(_event_class(), _PLANTED) == str(tmp_path / "x")  # set process-wide
    finally:
        if _PLANTED in vars(_event_class()):
            delattr(_event_class(), _PLANTED)


def _gadget_refused(gadget: str, marker: Path, caught: BaseException) -> None:
    """Nothing of the gadget happened, and it was refused as tampering."""
    assert isinstance(caught, CheckpointTamperedError), (gadget, caught)
    assert isinstance(caught, WorkflowCheckpointException)
    assert not marker.exists(), gadget
    assert _PLANTED not in vars(_event_class()), gadget


# agent_framework._types does not define (or import) TypeAdapter in this version: a name an
# admitted module lacks is blocked (as after an upgrade that removed a class), not tampering
_NOT_FOUND = "type_adapter_types"
_TAMPERING = [name for name in _gadgets(Path("/nonexistent")) if name != _NOT_FOUND]


def test_a_name_the_module_lacks_is_blocked_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    checkpoint = WorkflowCheckpoint(workflow_name=WF, graph_signature_hash="h")
    payload = _planted_payload(checkpoint, _gadgets(marker)[_NOT_FOUND])
    with watching() as seen, pytest.raises(CheckpointTypeBlockedError, match="TypeAdapter"):
        decode_payload(payload, allowed=frozenset(), checkpoint_id=checkpoint.checkpoint_id)
    assert seen == [] and not marker.exists()


@pytest.mark.parametrize("gadget", _TAMPERING)
def test_decoding_a_gadget_runs_nothing_at_all(tmp_path: Path, gadget: str) -> None:
    """Under an audit hook: no import, exec, compile, os/subprocess/shutil call, file write,
    and no ``pickle.find_class`` (no unpickler sees the stream)."""
    marker = tmp_path / "ran"
    checkpoint = WorkflowCheckpoint(workflow_name=WF, graph_signature_hash="h")
    payload = _planted_payload(checkpoint, _gadgets(marker)[gadget])
    with watching() as seen, pytest.raises(CheckpointTamperedError) as caught:
        decode_payload(payload, allowed=frozenset(), checkpoint_id=checkpoint.checkpoint_id)
    assert seen == []
    _gadget_refused(gadget, marker, caught.value)


_TAMPER_LOG = "tampered checkpoint {cid} refused"


@pytest.mark.parametrize("gadget", _TAMPERING)
async def test_every_read_path_refuses_a_planted_gadget(
    store_env: Any, tmp_path: Path, gadget: str, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "ran"
    attacker = FoundryCheckpointStorage("conv", **store_env.kwargs())
    victim = FoundryCheckpointStorage("conv", **store_env.kwargs())
    caplog.set_level(logging.WARNING, logger="foundry_checkpoint_maf")
    try:
        cid = await _plant(attacker, _gadgets(marker)[gadget])
        with pytest.raises(CheckpointTamperedError, match=cid) as caught:
            await victim.load(cid)
        assert isinstance(caught.value, CorruptPayloadError)  # not what this storage wrote
        _gadget_refused(gadget, marker, caught.value)
        # tampering is never skipped: every path raises, and each logs it as tampering
        reads = {
            "load_with_hash": victim.load_with_hash(cid),
            "get_latest": victim.get_latest(workflow_name=WF),
            "list_checkpoints": victim.list_checkpoints(workflow_name=WF),
            "list_checkpoint_ids": victim.list_checkpoint_ids(workflow_name=WF),
        }
        for name, read in reads.items():
            caplog.clear()
            with pytest.raises(CheckpointTamperedError, match=cid):
                await read
            warned = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert [r.getMessage().startswith(_TAMPER_LOG.format(cid=cid)) for r in warned] == [
                True
            ], name
            assert not any("skips" in r.getMessage() for r in caplog.records), name
        _gadget_refused(gadget, marker, caught.value)
    finally:
        await attacker.aclose()
        await victim.aclose()


async def test_a_memo_index_of_2_to_the_26_stays_small(store_env: Any) -> None:
    """The C unpickler sizes its memo to the index (1 GiB here); ours stores what it read."""
    async with FoundryCheckpointStorage("conv", **store_env.kwargs()) as storage:
        cid = await _plant(storage, memo_index_pickle(2**26))
        tracemalloc.start()
        try:
            with pytest.raises(CheckpointTamperedError, match="memo"):
                await storage.get_latest(workflow_name=WF)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 * 2**20, peak
        assert cid


class NotAllowed:
    """A class of the application's own that the storage was not told about."""

    def __init__(self, n: int) -> None:
        self.n = n


async def test_a_class_merely_not_allowed_is_blocked_not_damaged(
    store_env: Any, caplog: pytest.LogCaptureFixture
) -> None:
    key = f"{NotAllowed.__module__}:{NotAllowed.__qualname__}"
    caplog.set_level(logging.WARNING, logger="foundry_checkpoint_maf")
    async with FoundryCheckpointStorage(
        "conv", **store_env.kwargs(), allowed_checkpoint_types=[NotAllowed]
    ) as writer:
        cp = WorkflowCheckpoint(
            workflow_name=WF, graph_signature_hash="h", state={"x": NotAllowed(1)}
        )
        await writer.save(cp)
    async with FoundryCheckpointStorage("conv", **store_env.kwargs()) as reader:
        with pytest.raises(CheckpointTypeBlockedError, match="deserialization blocked") as caught:
            await reader.load(cp.checkpoint_id)
        assert caught.value.type_key == key and key in str(caught.value)
        assert isinstance(caught.value, WorkflowCheckpointException)
        assert isinstance(caught.value, FoundryCheckpointError)
        assert not isinstance(caught.value, CorruptPayloadError)  # a configuration matter
        assert "allowed_checkpoint_types" in str(caught.value)
        # listings skip it as undecodable (an error), never as tampering
        caplog.clear()
        assert await reader.list_checkpoints(workflow_name=WF) == []
        assert await reader.get_latest(workflow_name=WF) is None
        messages = [(r.levelno, r.getMessage()) for r in caplog.records]
        assert messages and all(level == logging.ERROR for level, _ in messages), messages
        assert all("skips" in text and "tampered" not in text for _, text in messages)


_ATTACKER = """
import asyncio, sys
from pathlib import Path
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests.security.test_tamper_maf import _plant
from tests.security._gadgets import type_adapter_pickle

async def main() -> None:
    async with FoundryCheckpointStorage("conv") as attacker:
        print(await _plant(attacker, type_adapter_pickle(Path(sys.argv[1]))))

asyncio.run(main())
"""


def _attack_from_another_process(marker: Path) -> str:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", _ATTACKER, str(marker)],
        env=env, cwd=root, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.strip()


async def test_a_gadget_planted_by_another_process_is_refused(
    store_env: Any, tmp_path: Path
) -> None:
    if store_env.mode != "local":
        pytest.skip("the other process shares the local state root")
    marker = tmp_path / "ran"
    cid = _attack_from_another_process(marker)
    async with FoundryCheckpointStorage("conv") as victim:
        with pytest.raises(CheckpointTamperedError, match=cid):
            await victim.get_latest(workflow_name=WF)
        with pytest.raises(CheckpointTamperedError, match=cid):
            await victim.list_checkpoints(workflow_name=WF)
    assert not marker.exists()


def test_deep_nesting_is_a_typed_error() -> None:
    checkpoint = WorkflowCheckpoint(workflow_name=WF, graph_signature_hash="h")
    doc: Any = json.loads(encode_payload(checkpoint))
    for depth in (300, 100_000):
        doc["state"] = {"x": "[" * depth + "]" * depth}
        text = (
            json.dumps(doc)
            .replace('"' + "[" * depth, "[" * depth)
            .replace("]" * depth + '"', "]" * depth)
        )
        with pytest.raises(CheckpointDecodeError):
            decode_payload(
                text.encode(), allowed=frozenset(), checkpoint_id=checkpoint.checkpoint_id
            )


def test_the_legitimate_types_still_round_trip() -> None:
    from datetime import datetime, timezone
    from uuid import uuid4

    from agent_framework import Message

    state = {
        "m": [Message(role="user", contents=["hi"])],
        "t": (1, 2),
        "none_type": type(None),
        "when": datetime.now(timezone.utc),
        "id": uuid4(),
        "s": {1, 2},
    }
    checkpoint = WorkflowCheckpoint(workflow_name=WF, graph_signature_hash="h", state=state)
    back = decode_payload(
        encode_payload(checkpoint), allowed=frozenset(), checkpoint_id=checkpoint.checkpoint_id
    )
    assert back.state["m"][0].text == "hi"
    assert {k: v for k, v in back.state.items() if k != "m"} == {
        k: v for k, v in state.items() if k != "m"
    }


@dataclass
class Mine:
    """A class of the application's own, admitted through the allow-list."""

    n: int
    when: datetime


# MAF's encoder writes the highest protocol; protocol 2 spells bytes through
# ``_codecs.encode``, one of the decoder's fixed value builders
@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_value_types_decode_from_every_python3_pickle_protocol(protocol: int) -> None:
    from agent_framework import Message, WorkflowRunState

    values: list[Any] = [
        WorkflowRunState.IDLE,
        Message(role="user", contents=["hi"]),
        OrderedDict(a=1),
        defaultdict(list, a=[1]),
        deque([1, 2]),
        Counter("abca"),
        Decimal("1.5"),
        datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
        date(2025, 1, 2),
        time(3, 4),
        complex(1, 2),
        frozenset({1, 2}),
        b"x",
        bytearray(b"y"),
        ((1, 2), [3, (4,)]),
        type(None),
        Mine(1, datetime(2025, 1, 1)),
    ]
    allowed = frozenset({f"{Mine.__module__}:{Mine.__qualname__}"})
    for value in values:
        data = pickle.dumps(value, protocol=protocol)
        back = _decode_value(
            pickle_envelope(data, f"{type(value).__module__}:{type(value).__qualname__}"), allowed
        )
        if isinstance(value, Message):
            assert back.text == "hi"
        else:
            assert back == value, (protocol, value)


@pytest.mark.parametrize(
    "gadget", ["type_adapter_tools", "framework_constructor", "metaclass", "reconstructor"]
)
async def test_the_cli_refuses_a_planted_gadget(
    store_env: Any, tmp_path: Path, gadget: str
) -> None:
    marker = tmp_path / "ran"
    async with FoundryCheckpointStorage("conv", **store_env.kwargs()) as attacker:
        cid = await _plant(attacker, _gadgets(marker)[gadget])
    cli = Cli(store_env, CliRunner())
    for args in (["maf", "show", "conv", cid], ["maf", "show", "conv"]):
        shown = await asyncio.to_thread(cli, *args)
        assert shown.exit_code == 1, shown.stdout
        assert "refused" in shown.stderr and cid in shown.stderr
    assert not marker.exists()
