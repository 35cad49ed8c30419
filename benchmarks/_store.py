"""Store-level units: the embedded engine against the SDK's local mode.

* ``engine``: :class:`foundry_checkpoint._store._engine.StateEngine` on a file, filled to
  10 / 1,000 / 100,000 items of ~2 KB in one store (one user partition), measuring at each
  size the median cost of writing a new item (``put_item``), replacing an existing one, reading one
  (``get_item``) and the latest-key lookup the adapters make (``list_keys`` newest first,
  filtered by a tag, one page of 100 keys; and ``limit=1``), plus ``set_item`` through the
  async store face the adapters use (``EngineStore``, one worker-thread hop per call).
* ``sdk``: ``FoundryStateStore`` in its own local mode, the same items at 10 / 100 / 1,000
  (it rewrites its whole JSON file on every write, so filling is capped by a time budget).
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._common import Budget, median

__all__ = ["run_unit"]

_TAGS = {"kind": "cp", "thread": "t1"}


def _value(rng: random.Random, size: int) -> dict[str, Any]:
    data = base64.b64encode(rng.randbytes(size * 3 // 4)).decode("ascii")
    return {"v": 1, "c": "raw", "d": data}


def _sizes(directory: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in directory.glob(pattern) if p.is_file())


def _us(samples: list[float]) -> float:
    return median(samples) * 1e6


def _time_each(count: int, call: Callable[[int], object]) -> list[float]:
    samples = []
    for i in range(count):
        start = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - start)
    return samples


async def _atime_each(count: int, call: Callable[[int], Any]) -> list[float]:
    samples = []
    for i in range(count):
        start = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - start)
    return samples


async def engine(scale: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The embedded engine at growing item counts."""
    from foundry_checkpoint._store._embedded import EngineStore
    from foundry_checkpoint._store._engine import StateEngine

    rng = random.Random(1)
    ops, value_bytes = scale["ops"], scale["value_bytes"]
    db = workdir / "engine.sqlite3"
    eng = StateEngine(db)
    name = "bench/engine"
    eng.create_store(name, user_isolation=True, item_ttl_seconds=-1)
    face = await EngineStore.get_or_create(
        eng, name, user_isolation=True, item_ttl_seconds=-1, user="u"
    )
    values = [_value(rng, value_bytes) for _ in range(64)]
    count = 0
    fill_s = 0.0
    out: dict[str, Any] = {"value_bytes": value_bytes, "ops": ops, "sizes": {}}
    for size in scale["sizes"]:
        start = time.perf_counter()
        while count < size:
            eng.put_item(name, f"k{count:08d}", values[count % 64], _TAGS, user="u", if_match=None)
            count += 1
        fill_s += time.perf_counter() - start
        keys = [f"k{rng.randrange(count):08d}" for _ in range(ops)]
        base = count

        def new(i: int, base: int = base) -> object:
            return eng.put_item(
                name, f"n{base + i:08d}", values[i % 64], _TAGS, user="u", if_match=None
            )

        def replace(i: int, keys: list[str] = keys) -> object:
            return eng.put_item(name, keys[i], values[(i + 1) % 64], _TAGS, user="u", if_match=None)

        def get(i: int, keys: list[str] = keys) -> object:
            return eng.get_item(name, keys[i], user="u")

        def page(i: int) -> object:
            return eng.list_keys(name, user="u", tags=_TAGS, limit=100, order="desc")

        def first(i: int) -> object:
            return eng.list_keys(name, user="u", tags=_TAGS, limit=1, order="desc")

        async def face_set(i: int, keys: list[str] = keys) -> object:
            return await face.set_item(keys[i], values[(i + 2) % 64], tags=_TAGS)

        out["sizes"][str(size)] = {
            "items": count,
            "put_new_us": _us(_time_each(ops, new)),
            "put_replace_us": _us(_time_each(ops, replace)),
            "get_us": _us(_time_each(ops, get)),
            "latest_page_us": _us(_time_each(ops, page)),
            "latest_one_us": _us(_time_each(ops, first)),
            "face_set_us": _us(await _atime_each(ops, face_set)),
        }
        count += ops
    eng.close()
    out["fill_s"] = fill_s
    out["db_mb"] = _sizes(workdir, "engine.sqlite3*") / 2**20
    return out


async def sdk(scale: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The SDK's local mode at growing item counts (capped by a time budget)."""
    os.environ.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    from azure.ai.agentserver.core.storage import FoundryStateStore

    rng = random.Random(1)
    ops, value_bytes = scale["ops"], scale["value_bytes"]
    store = await FoundryStateStore.get_or_create(
        "bench/sdk", user_isolation=True, item_ttl_seconds=-1
    )
    values = [_value(rng, value_bytes) for _ in range(64)]
    budget = Budget(scale["budget_s"])
    count = 0
    out: dict[str, Any] = {"value_bytes": value_bytes, "ops": ops, "sizes": {}, "capped": False}
    async with store:
        for size in scale["sizes"]:
            while count < size and not budget.spent:
                await store.set_item(f"k{count:08d}", values[count % 64], tags=_TAGS)
                count += 1
            if count < size:
                out["capped"] = True
                out["cap_note"] = (
                    f"filling stopped at {count} items after the {scale['budget_s']} s budget"
                )
                break
            keys = [f"k{rng.randrange(count):08d}" for _ in range(ops)]
            base = count

            async def new(i: int, base: int = base) -> object:
                return await store.set_item(f"n{base + i:08d}", values[i % 64], tags=_TAGS)

            async def get(i: int, keys: list[str] = keys) -> object:
                return await store.get_item(keys[i])

            async def page(i: int) -> object:
                return await store.list_keys(tags=_TAGS, limit=100, order="desc")

            root = Path(os.environ.get("AGENTSERVER_STATE_ROOT", Path.home() / ".agentserver"))
            out["sizes"][str(size)] = {
                "items": count,
                "put_new_us": _us(await _atime_each(ops, new)),
                "get_us": _us(await _atime_each(ops, get)),
                "latest_page_us": _us(await _atime_each(ops, page)),
                "file_mb": _sizes(root / "state_stores", "*.json") / 2**20,
            }
            count += ops
    return out


async def run_unit(
    workload: str,
    subject: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run the ``engine`` or ``sdk`` unit."""
    if workload == "engine":
        return await engine(scale, workdir)
    await asyncio.sleep(0)
    return await sdk(scale, workdir)
