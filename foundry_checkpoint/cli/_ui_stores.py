"""What the explorer's pages share: the stores they read, a refusal and a rendered page.

The stores open lazily, on the first page that needs one, and a framework whose extra is not
installed is remembered as missing (its pages answer 404 saying so) instead of failing the whole
explorer.

Example:
    >>> stores = Stores(Options(None, False, None, None, None, None, "sqlite"), allow_writes=False)
    >>> stores.missing  # nothing tried yet: the stores open on first use
    {}
    >>> config("t-1", "", "c-1")
    {'configurable': {'thread_id': 't-1', 'checkpoint_ns': '', 'checkpoint_id': 'c-1'}}
    >>> Page("Thread t-1", "<h1>Thread t-1</h1>").title
    'Thread t-1'
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._common import Options

if TYPE_CHECKING:
    from foundry_checkpoint_autogen import AutoGenStateStore
    from foundry_checkpoint_maf import (
        FoundryCheckpointStorage,
        FoundryHistoryProvider,
        FoundrySessionStore,
    )

    from .._langgraph._saver import FoundryCheckpointer
    from .._memory import FoundryStore

__all__ = ["Page", "Refused", "Stores", "config"]


class Refused(Exception):
    """A request the explorer will not serve: an HTTP status and the message shown for it.

    Example:
        >>> Refused(404, "thread 't-1' has no checkpoints").status
        404
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Page:
    """A page's title and its body HTML (already escaped), before the frame is put around it.

    Example:
        >>> Page("Scope s", "<h1>Scope s</h1>").body
        '<h1>Scope s</h1>'
    """

    title: str
    body: str


class Stores:
    """The stores the explorer reads, opened on first use, and whether it offers writes.

    Args:
        opts: the global options (prefix, backend, identity) every store is opened with.
        allow_writes: whether pages offer delete and prune.

    Example:
        >>> stores = Stores(Options(None, False, None, None, None, None, "sqlite"),
        ...                 allow_writes=True)
        >>> stores.allow_writes
        True
    """

    def __init__(self, opts: Options, *, allow_writes: bool) -> None:
        self._opts = opts
        self.allow_writes = allow_writes
        self.missing: dict[str, str] = {}
        """Framework name -> why its support could not be imported."""
        self._saver: FoundryCheckpointer | None = None
        self._maf: FoundryCheckpointStorage | None = None
        self._autogen: AutoGenStateStore | None = None
        self._memory: FoundryStore | None = None
        self._history: FoundryHistoryProvider | None = None
        self._sessions: FoundrySessionStore | None = None

    def saver(self) -> FoundryCheckpointer | None:
        """The LangGraph checkpointer (None when the ``langgraph`` extra is missing)."""
        if self._saver is None and "langgraph" not in self.missing:
            try:
                from .._langgraph._saver import FoundryCheckpointer
            except ImportError as exc:
                self.missing["langgraph"] = str(exc)
                return None
            prefix = self._opts.prefix or "langgraph"
            self._saver = FoundryCheckpointer(**self._opts.store_kwargs(prefix))
        return self._saver

    def maf(self) -> FoundryCheckpointStorage | None:
        """The MAF storage of the default context (None when the ``maf`` extra is missing)."""
        if self._maf is None and "maf" not in self.missing:
            try:
                from foundry_checkpoint_maf import FoundryCheckpointStorage
            except ImportError as exc:
                self.missing["maf"] = str(exc)
                return None
            prefix = self._opts.prefix or "maf"
            self._maf = FoundryCheckpointStorage(**self._opts.store_kwargs(prefix))
        return self._maf

    def autogen(self) -> AutoGenStateStore | None:
        """The AutoGen state store (None when the ``autogen`` extra is missing)."""
        if self._autogen is None and "autogen" not in self.missing:
            try:
                from foundry_checkpoint_autogen import AutoGenStateStore
            except ImportError as exc:
                self.missing["autogen"] = str(exc)
                return None
            prefix = self._opts.prefix or "autogen"
            self._autogen = AutoGenStateStore(**self._opts.store_kwargs(prefix), keep_versions=None)
        return self._autogen

    def memory(self) -> FoundryStore | None:
        """The LangGraph memory store (None when the ``langgraph`` extra is missing)."""
        if self._memory is None and "memory" not in self.missing:
            try:
                from .._memory import FoundryStore
            except ImportError as exc:
                self.missing["memory"] = str(exc)
                return None
            prefix = self._opts.prefix or "langgraph-store"
            self._memory = FoundryStore(**self._opts.store_kwargs(prefix))
        return self._memory

    def history(self) -> FoundryHistoryProvider | None:
        """The MAF agents' history provider (None when the ``maf`` extra is missing)."""
        if self._history is None and "maf" not in self.missing:
            try:
                from foundry_checkpoint_maf import FoundryHistoryProvider
            except ImportError as exc:
                self.missing["maf"] = str(exc)
                return None
            prefix = self._opts.prefix or "maf-history"
            self._history = FoundryHistoryProvider(**self._opts.store_kwargs(prefix))
        return self._history

    def session_store(self) -> FoundrySessionStore | None:
        """The MAF agents' session store (None when the ``maf`` extra is missing)."""
        if self._sessions is None and "maf" not in self.missing:
            try:
                with warnings.catch_warnings():  # MAF marks SessionStore experimental
                    warnings.filterwarnings("ignore", message=r"\[SESSION_STORE\]")
                    from foundry_checkpoint_maf import FoundrySessionStore
            except ImportError as exc:
                self.missing["maf"] = str(exc)
                return None
            prefix = self._opts.prefix or "maf-sessions"
            self._sessions = FoundrySessionStore(**self._opts.store_kwargs(prefix))
        return self._sessions

    def need_history(self) -> FoundryHistoryProvider:
        """The MAF agents' history provider.

        Raises:
            Refused: 404 when the ``maf`` extra is not installed.
        """
        provider = self.history()
        if provider is None:
            raise Refused(404, f"Agent Framework support is not installed: {self.missing['maf']}")
        return provider

    def need_memory(self) -> FoundryStore:
        """The LangGraph memory store.

        Raises:
            Refused: 404 when the ``langgraph`` extra is not installed.
        """
        store = self.memory()
        if store is None:
            raise Refused(404, f"LangGraph memory is not available: {self.missing['memory']}")
        return store

    def need_saver(self) -> FoundryCheckpointer:
        """The LangGraph checkpointer.

        Raises:
            Refused: 404 when the ``langgraph`` extra is not installed.
        """
        saver = self.saver()
        if saver is None:
            raise Refused(404, f"LangGraph support is not installed: {self.missing['langgraph']}")
        return saver

    def need_maf(self) -> FoundryCheckpointStorage:
        """The MAF storage of the default context.

        Raises:
            Refused: 404 when the ``maf`` extra is not installed.
        """
        storage = self.maf()
        if storage is None:
            raise Refused(404, f"Agent Framework support is not installed: {self.missing['maf']}")
        return storage

    def need_autogen(self) -> AutoGenStateStore:
        """The AutoGen state store.

        Raises:
            Refused: 404 when the ``autogen`` extra is not installed.
        """
        store = self.autogen()
        if store is None:
            raise Refused(404, f"AutoGen support is not installed: {self.missing['autogen']}")
        return store

    def backend_line(self) -> str:
        """The header line naming the backend and where its data lives."""
        owner = self.saver() or self.maf()
        if owner is None:
            return "no framework extra installed"
        return f"backend {owner.kind} · data {owner.location}"

    async def aclose(self) -> None:
        """Close the stores that were opened (idempotent)."""
        if self._autogen is not None:
            await self._autogen.aclose()
        if self._saver is not None:
            await self._saver.aclose()
        if self._maf is not None:
            await self._maf.aclose()
        if self._memory is not None:
            await self._memory.aclose()
        if self._history is not None:
            await self._history.aclose()
        if self._sessions is not None:
            await self._sessions.aclose()


def config(thread: str, ns: str | None = None, checkpoint: str | None = None) -> Any:
    """The LangGraph config of a thread, optionally one namespace and one checkpoint of it."""
    conf: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint is not None:
        conf["checkpoint_id"] = checkpoint
    return {"configurable": conf}
