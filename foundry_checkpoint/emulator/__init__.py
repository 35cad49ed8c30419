"""A loopback HTTPS emulator of the Foundry state-store REST API.

It lets the real ``FoundryStateStore`` client run in hosted mode on a laptop or in CI: the nine
calls of the wire contract, user isolation by per-request call id (``bind_call``, ``mint_call``),
``x-ms-user-id`` or bearer token, the documented
limits (400 naming the field), deterministic same-second ordering that is deliberately not
insertion order, seeded fault injection (status codes, ``Retry-After``, dropped connections,
delays) and request counts. For the hosts it also serves the platform's task API and the
Responses hosts' response store, so a hosted agent runs on ``agent_environment()`` unchanged.

Example:
    >>> import asyncio, os
    >>> from azure.ai.agentserver.core.storage import FoundryStateStore
    >>> from foundry_checkpoint.emulator import FoundryEmulator
    >>> os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "1"  # hosted mode, as on the platform
    >>> async def demo() -> int:
    ...     async with FoundryEmulator() as emu:
    ...         emu.inject("put_item", status=429, retry_after=0)
    ...         async with await FoundryStateStore.get_or_create(
    ...             "demo", emu.credential(user="alice"), emu.endpoint,
    ...             connection_verify=emu.ca_file,
    ...         ) as store:
    ...             await store.set_item("k", {"v": 1})      # retried once by azure-core
    ...         return emu.requests["put_item"]
    >>> asyncio.run(demo())
    2

From a shell: ``python -m foundry_checkpoint.emulator --port 8443 --data state.sqlite``.
"""

from __future__ import annotations

from ._credential import EmulatorCredential
from ._faults import CALL_TYPES, Fault
from ._server import FoundryEmulator

__all__ = ["CALL_TYPES", "EmulatorCredential", "Fault", "FoundryEmulator"]
