"""A task process that reads a big input by reference, killed mid-task and recovered.

``python -m tests.payloads._crash_task first OUT [CALL_ID]``: starts the platform's task runtime,
stores a 15 MiB payload (inside the request ``CALL_ID`` names, in hosted mode), starts a task with
the reference as its input, and the handler, once it has read the payload, ends the process
with ``os._exit`` (as a kill would: nothing is cleaned up).

``python -m tests.payloads._crash_task recover OUT``: a new process of the same agent and
session; the runtime's start-up recovery re-enters the handler (``entry_mode`` "recovered"),
outside any request, which reads the payload again.

Each run appends one JSON line to ``OUT``. Hosted mode reads ``FOUNDRY_PROJECT_ENDPOINT`` and
``EMULATOR_CA_FILE`` and runs as the emulator user ``summarizer-agent``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from azure.ai.agentserver.core import FoundryAgentRequestContext, set_request_context
from azure.ai.agentserver.core._config import AgentConfig
from azure.ai.agentserver.core.tasks import TaskContext, task
from azure.ai.agentserver.core.tasks._manager import TaskManager, set_task_manager

from foundry_checkpoint import PayloadStore

MODE, OUT = sys.argv[1], Path(sys.argv[2])
CALL_ID = sys.argv[3] if len(sys.argv) > 3 else None
HOSTED = bool(os.environ.get("FOUNDRY_HOSTING_ENVIRONMENT"))
AGENT = "summarizer-agent"


def _options() -> dict[str, Any]:
    if not HOSTED:
        return {}
    from foundry_checkpoint.emulator import EmulatorCredential

    return {
        "credential": EmulatorCredential(AGENT),
        "connection_verify": os.environ["EMULATOR_CA_FILE"],
    }


payloads = PayloadStore(**_options())
done = asyncio.Event()


def _record(**fields: Any) -> None:
    with OUT.open("a", encoding="utf-8") as out:
        out.write(json.dumps(fields) + "\n")


@task(name="summarize-upload")
async def summarize(ctx: TaskContext[dict[str, Any]]) -> dict[str, Any]:
    document = await payloads.aget(ctx.input["document"])
    digest = hashlib.sha256(document).hexdigest()
    _record(mode=MODE, entry=str(ctx.entry_mode), size=len(document), sha256=digest)
    if MODE == "first":
        os._exit(9)  # killed mid-task: no lease released, no status written
    done.set()
    return {"size": len(document), "sha256": digest}


def _provider() -> Any:
    if not HOSTED:
        return None
    from azure.ai.agentserver.core.tasks._client import HostedTaskProvider
    from azure.core.pipeline.transport import AioHttpTransport

    from foundry_checkpoint.emulator import EmulatorCredential

    return HostedTaskProvider(
        os.environ["FOUNDRY_PROJECT_ENDPOINT"],
        EmulatorCredential(AGENT),
        transport=AioHttpTransport(connection_verify=os.environ["EMULATOR_CA_FILE"]),
    )


async def main() -> None:
    manager = TaskManager(AgentConfig.from_env(), provider=_provider())
    set_task_manager(manager)
    await manager.startup()  # recovery of what an earlier process left in progress
    try:
        if MODE == "first":
            if CALL_ID:
                set_request_context(FoundryAgentRequestContext(call_id=CALL_ID, user_id="alice"))
            document = hashlib.sha256(b"seed").digest() * (15 * (1 << 20) // 32)
            ref = await payloads.aput(document)
            task_input = {"document": ref, "call_id": CALL_ID}
            _record(mode="start", input_bytes=len(json.dumps(task_input)), sha256=ref["sha256"])
            await summarize.run(task_id="upload-1", input=task_input)
        else:
            await asyncio.wait_for(done.wait(), timeout=60)
            await asyncio.sleep(0.5)  # let the runtime record the result
    finally:
        await manager.shutdown()
        set_task_manager(None)
        await payloads.aclose()


if __name__ == "__main__":
    asyncio.run(main())
