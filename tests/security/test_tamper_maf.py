"""Tampered MAF checkpoints never run code: every read path refuses them with a typed error.

An attacker who can write to the store (here: raw item writes that bypass the storage's own
save-time check, from this process and from a separate one) plants checkpoints whose state
holds pickles that construct a string-evaluating class through a module that merely imports
it. MAF's own restricted decoder runs them (checked below, so the gadget is known to be live);
ours refuses them before anything is called.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
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

from foundry_checkpoint.errors import CorruptPayloadError
from foundry_checkpoint_maf import FoundryCheckpointStorage
from foundry_checkpoint_maf._payload import (
    CheckpointDecodeError,
    CheckpointRefusedError,
    _decode_value,
    decode_payload,
    encode_payload,
)
from foundry_checkpoint_maf._records import checkpoint_tags
from tests.cli.conftest import Cli

from ._gadgets import global_call_pickle, pickle_envelope, touch_expression, type_adapter_pickle

WF = "triage"
_FILE_STORAGE = FileCheckpointStorage.__module__  # where the class is defined


def _gadgets(marker: Path) -> dict[str, bytes]:
    expr = touch_expression(marker)
    return {
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


@pytest.mark.parametrize("gadget", ["type_adapter_tools", "framework_constructor"])
def test_the_gadget_is_live_in_the_framework_decoder(tmp_path: Path, gadget: str) -> None:
    marker = tmp_path / "ran"
    envelope = pickle_envelope(_gadgets(marker)[gadget])
    with pytest.raises(WorkflowCheckpointException):
        decode_checkpoint_value(envelope, allowed_types=frozenset())
    assert marker.exists()  # the framework's decoder ran it before its type check


@pytest.mark.parametrize("gadget", list(_gadgets(Path("/nonexistent"))))
async def test_every_read_path_refuses_a_planted_gadget(
    store_env: Any, tmp_path: Path, gadget: str
) -> None:
    marker = tmp_path / "ran"
    attacker = FoundryCheckpointStorage("conv", **store_env.kwargs())
    victim = FoundryCheckpointStorage("conv", **store_env.kwargs())
    try:
        cid = await _plant(attacker, _gadgets(marker)[gadget])
        with pytest.raises(CheckpointDecodeError, match=cid) as caught:
            await victim.load(cid)
        assert isinstance(caught.value, WorkflowCheckpointException)
        assert isinstance(caught.value, CorruptPayloadError)
        with pytest.raises(CheckpointDecodeError, match=cid):
            await victim.load_with_hash(cid)
        with pytest.raises(CheckpointDecodeError, match=cid):
            await victim.get_latest(workflow_name=WF)
        # each names a loaded module's function or re-exported class: tampering, so a listing
        # raises instead of skipping (a class merely outside the allow-list is skipped)
        with pytest.raises(CheckpointRefusedError, match=cid):
            await victim.list_checkpoints(workflow_name=WF)
        with pytest.raises(CheckpointRefusedError, match=cid):
            await victim.list_checkpoint_ids(workflow_name=WF)
        assert not marker.exists()
    finally:
        await attacker.aclose()
        await victim.aclose()


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
        with pytest.raises(CheckpointRefusedError, match=cid):
            await victim.get_latest(workflow_name=WF)
        with pytest.raises(CheckpointRefusedError, match=cid):
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


# MAF's encoder writes the highest protocol; protocols below 3 spell bytes through a function
# (``_codecs.encode``), which the decoder refuses like every other function
@pytest.mark.parametrize("protocol", range(3, pickle.HIGHEST_PROTOCOL + 1))
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


@pytest.mark.parametrize("gadget", ["type_adapter_tools", "framework_constructor"])
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
