"""One place that knows every backend: it opens and binds isolated store clients by kind.

``kind`` is ``"local-sqlite"`` (:class:`~._embedded.EngineStore`, the embedded default),
``"local-sdk"`` (:class:`~._sdk_local.LockedSdkStore`, the SDK's local mode under a file
lock) or ``"hosted"`` (the SDK's ``FoundryStateStore`` through :class:`~._hosted.HostedClients`).
Every store is opened with ``user_isolation=True``; an existing store without it is refused.

Example:
    >>> import asyncio, os, tempfile
    >>> from unittest import mock
    >>> async def demo() -> bool:
    ...     factory = StoreFactory("local-sqlite", item_ttl_seconds=-1, hosted=None)
    ...     missing = await factory.open("s", "ann", create=False)
    ...     store = await factory.open("s", "ann", create=True)
    ...     return missing is None and (await store.get()).user_isolation
    >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(
    ...         os.environ, {"AGENTSERVER_STATE_ROOT": tmp}):
    ...     asyncio.run(demo())
    True
"""

from __future__ import annotations

from typing import Literal

from azure.ai.agentserver.core.storage import FoundryStorageNotFoundError

from foundry_checkpoint.errors import InvalidArgumentError, IsolationRefusedError

from ._hosted import HostedClients
from ._protocol import StateStoreLike

__all__ = ["BackendKind", "LocalBackend", "StoreFactory"]

#: The ``local_backend=`` option of the adapters.
LocalBackend = Literal["sqlite", "sdk"]
#: The backend a core runs on.
BackendKind = Literal["local-sqlite", "local-sdk", "hosted"]


class StoreFactory:
    """Opens (``open``) and binds (``bind``) isolated clients of one backend kind.

    Args:
        kind: The backend.
        item_ttl_seconds: The TTL of the stores it creates.
        hosted: The hosted clients (required for ``"hosted"``; else unused).

    Raises:
        InvalidArgumentError: ``kind`` is ``"hosted"`` and ``hosted`` is None.
    """

    def __init__(
        self, kind: BackendKind, *, item_ttl_seconds: int, hosted: HostedClients | None
    ) -> None:
        if kind == "hosted" and hosted is None:
            raise InvalidArgumentError("the hosted backend needs its HostedClients")
        self.kind = kind
        self.hosted = hosted
        self._ttl = item_ttl_seconds

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A checked client of the store ``name``.

        Args:
            name: The store name.
            partition: The embedded store's user partition (ignored by the other kinds).
            create: Create the store (isolated) when it does not exist; else only look.

        Returns:
            The client, or None when ``create`` is False and the store does not exist.

        Raises:
            IsolationRefusedError: The store exists without ``user_isolation``.
        """
        store = await self._open_raw(name, partition, create=create)
        if store is None:
            return None
        try:
            try:
                descriptor = await store.get()
            except FoundryStorageNotFoundError:
                if create:
                    raise
                await store.aclose()
                return None
            if not descriptor.user_isolation:
                raise IsolationRefusedError(
                    f"store {name!r} exists without user_isolation, so every end user could read "
                    "every other user's checkpoints; it is refused. Use another store_prefix, or "
                    "move its data and delete the store so that it is re-created isolated."
                )
        except BaseException:
            await store.aclose()
            raise
        return store

    def bind(self, name: str, partition: str) -> StateStoreLike:
        """A client of a store already opened and checked; no I/O.

        Args:
            name: The store name.
            partition: The embedded store's user partition (ignored by the other kinds).

        Returns:
            The client.
        """
        if self.kind == "local-sqlite":
            from ._embedded import EngineStore, default_engine

            return EngineStore(default_engine(), name, user=partition)
        if self.kind == "local-sdk":
            from ._sdk_local import LockedSdkStore

            return LockedSdkStore.bind(name, user_isolation=True, item_ttl_seconds=self._ttl)
        return self._hosted_clients().client(name)

    async def aclose(self) -> None:
        """Close what the hosted clients share (nothing for the local kinds); idempotent."""
        if self.hosted is not None:
            await self.hosted.aclose()

    async def _open_raw(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        """A client of ``name``; created first only when ``create`` (else checked by GET)."""
        if self.kind == "local-sqlite":
            from ._embedded import EngineStore, shared_engine

            engine = await shared_engine()  # opened off the loop on first use
            if not create:
                return EngineStore(engine, name, user=partition)
            return await EngineStore.get_or_create(
                engine,
                name,
                user_isolation=True,
                item_ttl_seconds=self._ttl,
                user=partition,
            )
        if self.kind == "local-sdk":
            from ._sdk_local import LockedSdkStore

            return await LockedSdkStore.open(
                name, user_isolation=True, item_ttl_seconds=self._ttl, create=create
            )
        if not create:
            return self._hosted_clients().client(name)
        return await self._hosted_clients().get_or_create(name)

    def _hosted_clients(self) -> HostedClients:
        assert self.hosted is not None  # checked in __init__
        return self.hosted
