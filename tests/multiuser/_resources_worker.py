"""A hosted agent process serving many threads with one checkpointer; prints what it used.

Run by ``test_resources.py`` (and ``benchmarks``-style by hand)::

    python -c "from tests.multiuser._resources_worker import main; main()" CALLS.json THREADS

``FOUNDRY_HOSTING_ENVIRONMENT`` and ``FOUNDRY_PROJECT_ENDPOINT`` point at an emulator, and
``FOUNDRY_CHECKPOINT_TEST_CA`` names its CA file. ``CALLS.json`` lists one
``[call_id, user_id]`` per thread: each thread is served in its own request context, as a host
sets it. The checkpointer is built with no ``credential=``, the documented default path
(``DefaultAzureCredential``): the only thing replaced is ``azure.identity.aio``'s
``DefaultAzureCredential`` class, by one that counts constructions and signs tokens the emulator
accepts (nothing may leave the machine). Prints one JSON object: credentials constructed, open
descriptors and RSS at each checkpoint of the run.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

#: Where the figures are taken (thread counts served so far).
MARKS = (200, 1000, 2000)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    """Serve ``THREADS`` threads, one request context each, and print the figures."""
    import azure.identity.aio

    from foundry_checkpoint.emulator import EmulatorCredential

    class CountingCredential(EmulatorCredential):
        """Stands in for DefaultAzureCredential: counts constructions, signs as "agent"."""

        made: ClassVar[int] = 0
        closed: ClassVar[int] = 0

        def __init__(self, **kwargs: Any) -> None:
            CountingCredential.made += 1
            super().__init__("agent")

        async def close(self) -> None:
            CountingCredential.closed += 1

    azure.identity.aio.DefaultAzureCredential = CountingCredential  # type: ignore[assignment, misc]

    from azure.ai.agentserver.core import (
        FoundryAgentRequestContext,
        reset_request_context,
        set_request_context,
    )
    from langgraph.checkpoint.base import empty_checkpoint

    from foundry_checkpoint import FoundryCheckpointer

    calls = json.loads(Path(sys.argv[1]).read_text())
    threads = int(sys.argv[2])
    figures: dict[str, Any] = {"marks": {}}
    saver = FoundryCheckpointer(connection_verify=os.environ["FOUNDRY_CHECKPOINT_TEST_CA"])
    for i in range(threads):
        call_id, user_id = calls[i]
        token = set_request_context(FoundryAgentRequestContext(call_id=call_id, user_id=user_id))
        try:
            config: Any = {"configurable": {"thread_id": f"thread-{i}", "checkpoint_ns": ""}}
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"n": i}
            checkpoint["channel_versions"] = {"n": 1}
            saved = saver.put(config, checkpoint, {"source": "loop", "step": 0}, {"n": 1})
            got = saver.get_tuple(saved)
            assert got is not None and got.checkpoint["channel_values"] == {"n": i}
        finally:
            reset_request_context(token)
        if i + 1 in MARKS:
            gc.collect()
            figures["marks"][str(i + 1)] = {"fds": _fds(), "rss_kib": _rss_kib()}
    figures["credentials_made"] = CountingCredential.made
    saver.close()
    figures["credentials_closed"] = CountingCredential.closed
    gc.collect()
    figures["fds_after_close"] = _fds()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
