"""Garbage collection of spilled blobs: what no item of the caller's scopes references.

In hosted mode with no spill store configured, each scope's large values are chunk items of
its own store (:mod:`._chunks`): they are collected the same way, scope by scope.

Only namespaces attributable through the caller's own (isolated) stores are considered, and
only blobs last modified more than the grace period ago, so a blob uploaded by a write still in
flight (blob first, item second) is never taken. Namespaces under the prefix that none of the
caller's scopes claims are reported, never touched.

Example:
    >>> report = GcReport(scanned_scopes=2, referenced=5)
    >>> report.kept_recent, report.deleted
    (0, [])
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from ._store._backend import Backend
    from .spill import SpillStore

__all__ = ["Collected", "CollectedScope", "GcReport", "collect_garbage"]


class CollectedScope(Protocol):
    """What collection needs of one scope (``_core.Scope`` has it)."""

    @property
    def spill(self) -> SpillStore | None:
        """Where the scope's large values go (None: nowhere)."""
        ...

    async def namespace(self, *, create: bool) -> str | None:
        """The scope's spill namespace, if it has one."""
        ...


_S = TypeVar("_S", bound=CollectedScope)
_S_co = TypeVar("_S_co", bound=CollectedScope, covariant=True)


class Collected(Protocol[_S_co]):
    """What collection needs of a core (``_core.CheckpointCore`` has it): this module does not
    import the core, which calls it."""

    @property
    def prefix(self) -> str:
        """The store prefix (spill namespaces start with it)."""
        ...

    @property
    def spill(self) -> SpillStore | None:
        """The configured spill store, if any."""
        ...

    @property
    def backend(self) -> Backend:
        """The core's backend."""
        ...

    async def scope_ids(self) -> list[str | None]:
        """The caller's scope ids."""
        ...

    async def scope(self, scope_id: str | None, *, create: bool) -> _S_co | None:
        """The caller's scope of ``scope_id`` (None: its store does not exist)."""
        ...


@dataclass
class GcReport:
    """What a garbage collection of spilled blobs found and did.

    ``deleted`` lists ``(namespace, digest)`` pairs removed (or that would be, with
    ``dry_run``); ``kept_recent`` counts unreferenced blobs younger than the grace period;
    ``unattributed`` lists namespaces under the prefix that none of the caller's own scopes
    claims (another user's, or a deleted scope's): they are reported, never touched.

    Example:
        >>> from foundry_checkpoint import GcReport
        >>> report = GcReport(dry_run=True)
        >>> report.deleted, report.unattributed, report.dry_run
        ([], [], True)
    """

    scanned_scopes: int = 0
    referenced: int = 0
    kept_recent: int = 0
    deleted: list[tuple[str, str]] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)
    dry_run: bool = False


async def collect_garbage(
    core: Collected[_S],
    referenced: Callable[[_S], Awaitable[set[str]]],
    *,
    grace_seconds: float,
    dry_run: bool,
) -> GcReport:
    """Delete the spilled blobs of ``core``'s scopes that no live item references.

    Args:
        core: The core whose scopes (for the current user) are collected.
        referenced: Every digest a scope's live items use.
        grace_seconds: Blobs modified more recently than this are kept.
        dry_run: Report what would be deleted, delete nothing.

    Returns:
        What was found and deleted.
    """
    report = GcReport(dry_run=dry_run)
    if core.spill is None and not core.backend.chunks_in_store:
        return report
    cutoff = time.time() - grace_seconds
    owned: set[str] = set()
    for scope_id in await core.scope_ids():
        scope = await core.scope(scope_id, create=False)
        if scope is None:
            continue
        report.scanned_scopes += 1
        ns = await scope.namespace(create=False)
        spill = scope.spill
        if ns is None or spill is None:
            continue
        owned.add(ns)
        live = await referenced(scope)
        report.referenced += len(live)
        stale: list[str] = []
        for blob in await spill.list(ns):
            if blob.digest in live:
                continue
            if blob.last_modified > cutoff:
                report.kept_recent += 1
            else:
                stale.append(blob.digest)
        if stale and not dry_run:
            await spill.delete(ns, stale)
        report.deleted.extend((ns, digest) for digest in stale)
    spill = core.spill
    if spill is None:  # chunks belong to their scope's store: nothing to attribute
        return report
    mine = f"{core.prefix}/"
    report.unattributed = sorted(
        ns for ns in await spill.namespaces() if ns.startswith(mine) and ns not in owned
    )
    return report
