"""Tampered spill namespaces and spill folders never steer reads or deletes elsewhere.

The spill namespace of a thread is read back from the store; a value changed there must have
the shape the core writes (``<prefix>/<32 hex>``) or nothing is read or deleted under it. A
symbolic link placed in a ``LocalSpill`` directory never lets it read, list or delete outside.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import JSONValue

from foundry_checkpoint import CorruptPayloadError, FoundryCheckpointer, LocalSpill
from foundry_checkpoint._core import _META_KEY
from foundry_checkpoint.errors import InvalidIdentifierError
from tests.cli.conftest import build
from tests.langgraph._util import cfg

BIG = os.urandom(1_500_000)  # over the item limit: spilled


def _spilled_thread(env: Any, thread: str) -> FoundryCheckpointer:
    saver = FoundryCheckpointer(**env.kwargs(spill=LocalSpill(env.root / "spill", fsync=False)))
    build(saver).invoke({"steps": [BIG.hex()[:10], BIG.decode("latin-1")]}, cfg(thread))
    return saver


def _set_namespace(saver: FoundryCheckpointer, thread: str, value: JSONValue) -> None:
    async def go() -> None:
        scope = await saver._core.scope(thread)
        item = await scope.store.get_item(_META_KEY)
        assert item is not None
        await scope.store.set_item(_META_KEY, {**item.value, "ns": value}, tags=item.tags)

    saver._core.run(go())


def _blobs(root: Path) -> set[Path]:
    return {p for p in (root / "spill").rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "bad",
    ["other/" + "0" * 32, "test/../x", "test/abc", "test/" + "0" * 32 + "/x", "../" + "a" * 32, 7],
)
def test_a_rewritten_namespace_is_refused(store_env: Any, bad: JSONValue) -> None:
    victim = _spilled_thread(store_env, "victim")
    attacker = _spilled_thread(store_env, "attacker")
    before = _blobs(store_env.root)
    assert before
    _set_namespace(attacker, "attacker", bad)
    with FoundryCheckpointer(**store_env.kwargs(spill=LocalSpill(store_env.root / "spill"))) as s:
        with pytest.raises(CorruptPayloadError, match="spill namespace"):
            s.get_tuple(cfg("attacker"))
        with pytest.raises(CorruptPayloadError, match="spill namespace"):
            s.delete_thread("attacker")
        assert s.get_tuple(cfg("victim")) is not None
    assert _blobs(store_env.root) == before
    victim.close()
    attacker.close()


def test_namespaces_of_the_shape_written_still_work(store_env: Any) -> None:
    with _spilled_thread(store_env, "t1") as saver:
        got = saver.get_tuple(cfg("t1"))
        assert (
            got is not None and BIG.decode("latin-1") in got.checkpoint["channel_values"]["steps"]
        )
        saver.delete_thread("t1")
    assert not _blobs(store_env.root)


def _blob(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_local_spill_refuses_a_symlinked_namespace_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    data = b"precious"
    precious = outside / _blob(data)
    precious.write_bytes(data)
    root = tmp_path / "spill"
    (root / "p").mkdir(parents=True)
    namespace = "p/" + "1" * 32
    os.symlink(outside, root / namespace)
    spill = LocalSpill(root, fsync=False)
    for call in (
        lambda: spill.get(namespace, _blob(data)),
        lambda: spill.delete(namespace, [_blob(data)]),
        lambda: spill.delete_namespace(namespace),
        lambda: spill.list(namespace),
        lambda: spill.put(namespace, b"x"),
    ):
        with pytest.raises(CorruptPayloadError, match="outside the spill directory"):
            asyncio.run(call())
    assert precious.read_bytes() == data
    assert sorted(p.name for p in outside.iterdir()) == [precious.name]


def test_local_spill_refuses_a_symlinked_blob(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s")
    root = tmp_path / "spill"
    namespace = "p/" + "2" * 32
    (root / namespace).mkdir(parents=True)
    os.symlink(secret, root / namespace / _blob(b"s"))
    spill = LocalSpill(root, fsync=False)
    with pytest.raises(CorruptPayloadError, match="outside the spill directory"):
        asyncio.run(spill.get(namespace, _blob(b"s")))
    assert secret.exists()


def test_local_spill_still_refuses_bad_namespace_shapes(tmp_path: Path) -> None:
    spill = LocalSpill(tmp_path, fsync=False)
    with pytest.raises(InvalidIdentifierError):
        asyncio.run(spill.get("../x", "0" * 64))


def test_a_symlinked_spill_root_itself_is_fine(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    spill = LocalSpill(tmp_path / "link", fsync=False)
    namespace = "p/" + "3" * 32
    asyncio.run(spill.put(namespace, b"ok"))
    assert asyncio.run(spill.get(namespace, _blob(b"ok"))) == b"ok"
