"""LocalSpill specifics: layout on disk, atomic writes, stale temporaries, several processes.

The behaviour every spill store shares is in tests/blob/test_azure_blob_spill.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.errors import InvalidArgumentError
from foundry_checkpoint.spill import LocalSpill

NS = "lg/3f2a9c"


def _blob(text: str) -> tuple[str, bytes]:
    data = text.encode()
    return hashlib.sha256(data).hexdigest(), data


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


async def test_local_layout_and_atomic_writes(tmp_path: Path) -> None:
    spill = LocalSpill(tmp_path, fsync=True)
    assert spill.describe == f"local:{tmp_path}"
    digest, data = _blob("on disk")
    await spill.put("lg/t1", data)
    path = tmp_path / "lg" / "t1" / digest
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == [digest]  # no temporary left


async def test_local_write_failure_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spill = LocalSpill(tmp_path, fsync=False)

    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError("injected: disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    _, data = _blob("half")
    with pytest.raises(OSError, match="injected"):
        await spill.put(NS, data)
    monkeypatch.undo()
    assert _files(tmp_path) == []
    assert await spill.list(NS) == []


async def test_local_delete_namespace_removes_stale_temporaries(tmp_path: Path) -> None:
    spill = LocalSpill(tmp_path, fsync=False)
    digest, data = _blob("x")
    await spill.put(NS, data)
    (tmp_path / NS / f".{digest}.0123456789abcdef.tmp").write_bytes(b"partial")
    (tmp_path / NS / "unrelated.txt").write_bytes(b"not ours")
    assert [i.digest for i in await spill.list(NS)] == [digest]
    assert await spill.delete_namespace(NS) == 1
    assert sorted(p.name for p in (tmp_path / NS).iterdir()) == ["unrelated.txt"]


async def test_local_spill_is_shared_across_processes(tmp_path: Path) -> None:
    digest, data = _blob("from another process")
    script = (
        "import asyncio, sys\n"
        "from foundry_checkpoint.spill import LocalSpill\n"
        "asyncio.run(LocalSpill(sys.argv[1]).put(sys.argv[2], sys.argv[3].encode()))\n"
    )
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, str(tmp_path), NS, data.decode()
        )
        for _ in range(4)
    ]
    assert [await w.wait() for w in workers] == [0, 0, 0, 0]
    spill = LocalSpill(tmp_path)
    assert await spill.get(NS, digest) == data
    assert sorted(p.name for p in (tmp_path / NS).iterdir()) == [digest]


async def test_async_with_gives_the_store_and_closes_it(tmp_path: Path) -> None:
    async with LocalSpill(tmp_path, fsync=False) as spill:
        digest, data = _blob("in a block")
        assert await spill.put(NS, data) == digest
    assert await spill.get(NS, digest) == data  # nothing stays open; usable after the block


@pytest.mark.parametrize("directory", [None, 5, b"/tmp/x"])
def test_directory_must_be_a_path(directory: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="directory path"):
        LocalSpill(directory)
