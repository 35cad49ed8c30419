"""Tampered LangGraph checkpoints never run code: every read path raises a typed error.

The attacker writes through the store with a serializer that emits msgpack extensions naming
``os.system``, ``builtins.eval`` and ``subprocess``, and a ``pickle`` value, as channel values
and as pending writes. LangGraph's permissive serializer runs them (checked below, so the
gadgets are known to be live); the saver's default does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from typer.testing import CliRunner

from foundry_checkpoint import CorruptPayloadError, FoundryCheckpointer, StrictSerializer
from foundry_checkpoint.errors import UnreadableValueError
from tests.cli.conftest import Cli, build
from tests.langgraph._util import cfg

from ._gadgets import Planted, attacker_serde, langgraph_gadgets

GADGETS = list(langgraph_gadgets(Path("/nonexistent")))


def _plant(env: Any, thread: str, typed: tuple[str, bytes], *, as_write: bool) -> str:
    """Store a checkpoint of ``thread`` whose ``steps`` channel (or pending write) is ``typed``."""
    with FoundryCheckpointer(**env.kwargs(serde=attacker_serde())) as attacker:
        checkpoint = empty_checkpoint()
        value: Any = ["fine"] if as_write else Planted(typed)
        checkpoint["channel_values"] = {"steps": value}
        checkpoint["channel_versions"] = {"steps": 1}
        config = attacker.put(cfg(thread), checkpoint, {"source": "loop", "step": 1}, {"steps": 1})
        if as_write:
            attacker.put_writes(config, [("steps", Planted(typed))], "task-1")
        return str(config["configurable"]["checkpoint_id"])


@pytest.mark.parametrize("gadget", GADGETS)
def test_the_gadget_is_live_under_permissive_decoding(tmp_path: Path, gadget: str) -> None:
    marker = tmp_path / "ran"
    typed = langgraph_gadgets(marker)[gadget]
    serde = JsonPlusSerializer(allowed_msgpack_modules=True, pickle_fallback=True)
    serde.loads_typed(typed)
    assert marker.exists()


@pytest.mark.parametrize("as_write", [False, True], ids=["channel", "write"])
@pytest.mark.parametrize("gadget", GADGETS)
def test_every_read_path_refuses_a_planted_gadget(
    store_env: Any, tmp_path: Path, gadget: str, as_write: bool
) -> None:
    marker = tmp_path / "ran"
    checkpoint_id = _plant(store_env, "t1", langgraph_gadgets(marker)[gadget], as_write=as_write)
    with FoundryCheckpointer(**store_env.kwargs()) as victim:
        with pytest.raises(CorruptPayloadError):
            victim.get_tuple(cfg("t1"))
        with pytest.raises(CorruptPayloadError):
            victim.get_tuple(cfg("t1", checkpoint_id))
        with pytest.raises(CorruptPayloadError):
            list(victim.list(cfg("t1")))
        with pytest.raises(CorruptPayloadError):
            list(victim.list(None))
        with pytest.raises(CorruptPayloadError):
            build(victim).get_state(cfg("t1"))
    cli = Cli(store_env, CliRunner())
    shown = cli("show", "t1")
    assert shown.exit_code != 0
    assert "called" in shown.stderr  # "nothing was called" (refused) or "Nothing was called"
    assert not marker.exists()


async def test_the_async_faces_refuse_too(store_env: Any, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    typed = langgraph_gadgets(marker)["os_system"]
    await _aplant(store_env, typed)
    async with FoundryCheckpointer(**store_env.kwargs()) as victim:
        with pytest.raises(CorruptPayloadError):
            await victim.aget_tuple(cfg("t1"))
        with pytest.raises(CorruptPayloadError):
            [t async for t in victim.alist(cfg("t1"))]
        with pytest.raises(CorruptPayloadError):
            await build(victim).aget_state(cfg("t1"))
    assert not marker.exists()


async def _aplant(env: Any, typed: tuple[str, bytes]) -> None:
    async with FoundryCheckpointer(**env.kwargs(serde=attacker_serde())) as attacker:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"steps": Planted(typed)}
        checkpoint["channel_versions"] = {"steps": 1}
        await attacker.aput(cfg("t1"), checkpoint, {"source": "loop", "step": 1}, {"steps": 1})


def test_the_permissive_option_is_documented_and_works(store_env: Any) -> None:
    permissive = JsonPlusSerializer(allowed_msgpack_modules=True)
    with FoundryCheckpointer(**store_env.kwargs(serde=permissive)) as saver:
        assert saver.serde is permissive
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        assert isinstance(saver.serde, StrictSerializer)


def test_the_compiled_graph_adds_its_state_types_through_with_allowlist(store_env: Any) -> None:
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        clone = saver.with_allowlist({("tests.cli.conftest", "State")})
        assert isinstance(clone.serde, StrictSerializer)
        assert ("tests.cli.conftest", "State") in clone.serde.allowed
        assert isinstance(saver.serde, StrictSerializer)
        assert not saver.serde.allowed  # the original is unchanged
        graph = build(clone)
        graph.invoke({"steps": []}, cfg("t1"))
        assert graph.get_state(cfg("t1")).values == {"steps": ["a", "b"]}


@dataclass
class Point:
    x: int
    y: int


def test_a_type_no_graph_declares_needs_the_allow_list(store_env: Any) -> None:
    key = (Point.__module__, Point.__qualname__)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"p": Point(1, 2)}
    checkpoint["channel_versions"] = {"p": 1}
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        # no graph calls: nothing but the allow-list is admitted, so the save fails, naming it
        with pytest.raises(UnreadableValueError, match=r"with_allowlist\(\[\('tests\."):
            saver.put(cfg("t1"), checkpoint, {"source": "loop", "step": 1}, {"p": 1})
        assert saver.get_tuple(cfg("t1")) is None  # nothing was written
        allowed = saver.with_allowlist({key})
        allowed.put(cfg("t1"), checkpoint, {"source": "loop", "step": 1}, {"p": 1})
        got = allowed.get_tuple(cfg("t1"))
        assert got is not None and got.checkpoint["channel_values"]["p"] == Point(1, 2)
        with pytest.raises(CorruptPayloadError, match="Point"):
            saver.get_tuple(cfg("t1"))  # the saver without the entry still refuses it


_ATTACKER = """
import sys
from pathlib import Path
from tests.security._gadgets import langgraph_gadgets
from tests.security.test_tamper_langgraph import _plant
from tests.conftest import StoreEnv

env = StoreEnv("local", Path(sys.argv[2]))
print(_plant(env, "t1", langgraph_gadgets(Path(sys.argv[1]))["os_system"], as_write=False))
"""


def test_a_gadget_planted_by_another_process_is_refused(store_env: Any, tmp_path: Path) -> None:
    if store_env.mode != "local":
        pytest.skip("the other process shares the local state root")
    marker = tmp_path / "ran"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _ATTACKER, str(marker), str(store_env.root)],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    checkpoint_id = done.stdout.strip()
    with FoundryCheckpointer(**store_env.kwargs()) as victim:
        with pytest.raises(CorruptPayloadError, match=r"os\.system"):
            victim.get_tuple(cfg("t1", checkpoint_id))
        with pytest.raises(CorruptPayloadError):
            build(victim).get_state(cfg("t1"))
    assert not marker.exists()
