"""What every adapter object shares: its backend ``kind``, ``close``/``aclose``, ``with``."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from ._aio import AsyncClosing

if TYPE_CHECKING:
    from ._core import CheckpointCore

__all__ = ["CoreOwner"]

_S = TypeVar("_S", bound="CoreOwner")


class CoreOwner(AsyncClosing):
    """An object whose store I/O runs on a :class:`CheckpointCore`.

    ``close()``/``aclose()`` are idempotent, fine on an object never used, and the object
    reopens on its next use; ``with`` and ``async with`` close on exit. An object that shares
    another's core (``_owns_core = False``) leaves that core open.

    Example:
        >>> from foundry_checkpoint import FoundryCheckpointer
        >>> saver = FoundryCheckpointer()
        >>> saver.close(); saver.close()
        >>> with FoundryCheckpointer() as saver:
        ...     saver.kind
        'local-sqlite'
    """

    _core: CheckpointCore
    _owns_core: bool = True

    @property
    def kind(self) -> str:
        """The active backend: ``"local-sqlite"``, ``"local-sdk"`` or ``"hosted"``."""
        return self._core.kind

    @property
    def location(self) -> str:
        """Where the data lives: the SQLite file, the SDK's folder, or the hosted endpoint.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> with FoundryCheckpointer() as saver:
            ...     saver.location.endswith("state.sqlite3")
            True
        """
        return self._core.location

    @property
    def store_prefix(self) -> str:
        """The first segment of every store name this object uses (``"langgraph"``, ``"maf"``)."""
        return self._core.prefix

    @property
    def spill_location(self) -> str | None:
        """Where values over the item limit go: a folder, a blob container, or (hosted mode
        with no spill store) chunk items of each scope's own store; None when nowhere.

        Example:
            >>> from foundry_checkpoint import FoundryCheckpointer
            >>> with FoundryCheckpointer() as saver:
            ...     saver.spill_location.endswith("spill")
            True
        """
        core = self._core
        if core.spill is not None:
            return core.spill.describe
        if core.backend.chunks_in_store:
            return f"chunk items of each {core.scope_word}'s own store"
        return None

    def _reset(self) -> None:
        """Drop per-object caches that belong to the core's clients (hook)."""

    def close(self) -> None:
        """Close the store clients and stop the private loop (idempotent)."""
        self._reset()
        if self._owns_core:
            self._core.close()

    async def aclose(self) -> None:
        """Async form of :meth:`close`; never blocks the caller's loop."""
        self._reset()
        if self._owns_core:
            await self._core.aclose()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
