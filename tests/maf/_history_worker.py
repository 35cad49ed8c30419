"""One of several processes appending to one session's history at once (local mode).

Run by ``test_history_provider.py``::

    python -c "from tests.maf._history_worker import main; main()" NAME SESSION SECONDS

Appends messages ``NAME-0``, ``NAME-1``... (one per ``save_messages`` call, with message ids)
until ``SECONDS`` have passed, then prints how many it appended.
"""

from __future__ import annotations

import asyncio
import sys
import time

from agent_framework import Message

from foundry_checkpoint_maf import FoundryHistoryProvider


async def _run(name: str, session: str, seconds: float) -> int:
    count = 0
    async with FoundryHistoryProvider(item_ttl_seconds=-1) as history:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = f"{name}-{count}"
            await history.save_messages(session, [Message("user", [text], message_id=text)])
            count += 1
    return count


def main() -> None:
    name, session, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    print(asyncio.run(_run(name, session, seconds)))
