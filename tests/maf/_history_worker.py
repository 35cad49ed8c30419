"""One of several processes appending to one session's history at once (local or hosted mode).

Run by ``test_history_provider.py``::

    python -c "from tests.maf._history_worker import main; main()" NAME SESSION SECONDS [HOSTED]

Appends messages ``NAME-0``, ``NAME-1``... (one per ``save_messages`` call, with message ids)
until ``SECONDS`` have passed, then prints how many it appended. Without ``HOSTED`` it uses
the embedded local store of ``AGENTSERVER_STATE_ROOT``; ``HOSTED`` is a JSON object
``{"endpoint": ..., "ca_file": ..., "store_prefix": ..., "user": ...}`` naming an emulator
(``FOUNDRY_HOSTING_ENVIRONMENT`` set in the environment).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from agent_framework import Message

from foundry_checkpoint.emulator import EmulatorCredential
from foundry_checkpoint_maf import FoundryHistoryProvider


def _options(hosted: dict[str, Any] | None) -> dict[str, Any]:
    if hosted is None:
        return {}
    return {
        "store_prefix": hosted["store_prefix"],
        "credential": EmulatorCredential(hosted["user"]),
        "endpoint": hosted["endpoint"],
        "connection_verify": hosted["ca_file"],
    }


async def _run(name: str, session: str, seconds: float, hosted: dict[str, Any] | None) -> int:
    count = 0
    async with FoundryHistoryProvider(item_ttl_seconds=-1, **_options(hosted)) as history:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = f"{name}-{count}"
            await history.save_messages(session, [Message("user", [text], message_id=text)])
            count += 1
    return count


def main() -> None:
    name, session, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    hosted = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    print(asyncio.run(_run(name, session, seconds, hosted)))
