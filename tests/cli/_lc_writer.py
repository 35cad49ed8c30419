"""Writes threads with langchain-azure-ai's own ``FoundryCheckpointSaver``, as an app would.

Run as ``python -m tests.cli._lc_writer USER PREFIX [CALL_ID]``: in hosted mode
(``FOUNDRY_HOSTING_ENVIRONMENT`` set, ``SSL_CERT_FILE`` trusting the emulator) against
``FOUNDRY_PROJECT_ENDPOINT`` as the emulator user ``USER``, else on the SDK's local files.
Thread ``lc-asked`` ends in an interrupt, ``lc-done`` ran twice; each thread's checkpoint ids
(newest first) are printed as JSON. With ``CALL_ID`` the saver runs inside a request with that
platform call id, as in a hosted agent: the service puts the threads in the partition of the
user the call id names.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from langchain_azure_ai.agents.hosting._foundry_checkpoint_saver import FoundryCheckpointSaver

from tests.cli.conftest import build, config


async def main(user: str, prefix: str, call_id: str | None = None) -> dict[str, list[str]]:
    if call_id:
        from azure.ai.agentserver.core import FoundryAgentRequestContext, set_request_context

        set_request_context(FoundryAgentRequestContext(call_id=call_id))
    credential: Any = None
    if os.environ.get("FOUNDRY_HOSTING_ENVIRONMENT"):
        from foundry_checkpoint.emulator import EmulatorCredential

        credential = EmulatorCredential(user)
    saver = FoundryCheckpointSaver(credential=credential, store_name_prefix=prefix)
    async with saver:
        await build(saver, ask=True).ainvoke({"steps": []}, config("lc-asked"))
        graph = build(saver)
        await graph.ainvoke({"steps": []}, config("lc-done"))
        await graph.ainvoke({"steps": ["again"]}, config("lc-done"))
        ids: dict[str, list[str]] = {}
        for thread in ("lc-asked", "lc-done"):
            ids[thread] = [
                c.config["configurable"]["checkpoint_id"] async for c in saver.alist(config(thread))
            ]
        return ids


if __name__ == "__main__":
    call = sys.argv[3] if len(sys.argv) > 3 else None
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], call))))
