"""Section 9: one hosted-mode process serving thousands of threads for many users.

A Foundry-hosted agent is one long-lived process with one checkpointer. This unit builds a
``FoundryCheckpointer()`` with no credential (the documented default: ``DefaultAzureCredential``)
against the emulator and serves ``threads`` threads, each in its own request context (a user id
out of ``users``, as the hosts set it), one checkpoint written and read back per thread. It
reports, at each mark, the process's open descriptors and resident memory, and at the end how
many credentials were constructed and the store calls per thread.

``azure.identity.aio.DefaultAzureCredential`` is replaced by a class that counts its
constructions and signs tokens the emulator accepts (nothing may leave the machine); nothing
in the package is patched.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["run_unit"]

NAMES = {"fc-hosted": "FoundryCheckpointer (hosted, emulator, default credential)"}


def _fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def _rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def threads(emulator: Any, scale: dict[str, Any]) -> dict[str, Any]:
    """Serve ``scale["threads"]`` threads; figures at each of ``scale["marks"]``."""
    import azure.identity.aio
    from azure.ai.agentserver.core import (
        FoundryAgentRequestContext,
        reset_request_context,
        set_request_context,
    )
    from langgraph.checkpoint.base import empty_checkpoint

    from foundry_checkpoint import FoundryCheckpointer
    from foundry_checkpoint.emulator import EmulatorCredential

    class CountingCredential(EmulatorCredential):
        made: ClassVar[int] = 0

        def __init__(self, **kwargs: Any) -> None:
            CountingCredential.made += 1
            super().__init__("agent")

    azure.identity.aio.DefaultAzureCredential = CountingCredential  # type: ignore[misc,assignment]
    total, users = int(scale["threads"]), int(scale["users"])
    marks = {int(m) for m in scale["marks"]}
    emulator.reset()
    out: dict[str, Any] = {"threads": total, "users": users, "marks": {}}
    saver = FoundryCheckpointer(**emulator.client_kwargs())
    began = time.perf_counter()
    try:
        for i in range(total):
            context = FoundryAgentRequestContext(user_id=f"user-{i % users}")
            token = set_request_context(context)
            try:
                config: Any = {"configurable": {"thread_id": f"thread-{i}", "checkpoint_ns": ""}}
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"n": i}
                checkpoint["channel_versions"] = {"n": 1}
                saved = await saver.aput(
                    config, checkpoint, {"source": "loop", "step": 0}, {"n": 1}
                )
                got = await saver.aget_tuple(saved)
                if got is None or got.checkpoint["channel_values"] != {"n": i}:
                    raise AssertionError(f"thread {i} did not read back its checkpoint")
            finally:
                reset_request_context(token)
            if i + 1 in marks:
                gc.collect()
                out["marks"][str(i + 1)] = {
                    "fds": _fds(),
                    "rss_mb": _rss_mb(),
                    "s": time.perf_counter() - began,
                }
    finally:
        await saver.aclose()
    out["credentials"] = CountingCredential.made
    counts = emulator.counts()
    out["requests"] = counts.get("requests", {})
    return out


async def run_unit(
    workload: str,
    subject_key: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run the one workload of this section (hosted only)."""
    if emulator is None:
        return {"skipped": "needs the emulator"}
    return await threads(emulator, scale)
