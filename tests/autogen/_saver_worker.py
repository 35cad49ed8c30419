"""Saves one agent's state over and over until killed: ``python -m tests.autogen._saver_worker``.

Arguments: the store prefix, then ``local`` or ``hosted ENDPOINT CA_FILE``. Each save's count is
printed (flushed) once ``asave`` returned; the state root comes from the environment.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from foundry_checkpoint_autogen import AutoGenStateStore

KEEP = 3
AGENT = "counter/killed"


async def main(prefix: str, mode: str, *hosted: str) -> None:
    kwargs: dict[str, Any] = {"store_prefix": prefix, "keep_versions": KEEP}
    if mode == "hosted":
        from foundry_checkpoint.emulator import EmulatorCredential

        endpoint, ca_file = hosted
        kwargs.update(
            credential=EmulatorCredential("alice"), endpoint=endpoint, connection_verify=ca_file
        )
    store = AutoGenStateStore(**kwargs)
    latest = await store.aload("conv", "agent", AGENT)
    count = int(latest["count"]) if latest else 0
    while True:
        count += 1
        await store.asave("conv", "agent", AGENT, {"count": count, "pad": "x" * 500})
        print(count, flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
