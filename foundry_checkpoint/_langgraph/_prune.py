"""What ``prune`` and ``delete_for_runs`` remove from a LangGraph thread, decided on plain values.

The saver lists a thread's checkpoint keys, turns each into a :class:`Entry` (from tags; items
are read only where a tag cannot say), picks the checkpoints to delete, and asks :func:`plan`
for the rest of the rules, the same as PostgresSaver's:

* **A subgraph call's namespace goes with the checkpoint it started from.** A namespace with a
  task id in it (``"child:<task id>"``, nested ``"a:<id>|b:<id>"``) holds one call of a
  subgraph; its checkpoints name the caller's checkpoint in ``metadata["parents"]``. When that
  checkpoint is deleted (or already gone), the whole namespace is deleted too. A
  ``checkpointer=True`` subgraph keeps one history per thread under a namespace without task
  ids (``"child"``): it is pruned like the root namespace, never dropped with it.
* **A kept checkpoint whose parent is deleted (or gone) becomes a root:** its parent is cleared,
  so ``parent_config`` is ``None``, and the saver first copies into it the history its
  ``DeltaChannel`` values are rebuilt from (see ``FoundryCheckpointer.prune``).

Example:
    >>> a = Entry("a1", "", "1", None, None)
    >>> b = Entry("b1", "", "2", "1", None)
    >>> call = Entry("c1", "child:t", "3", None, "1")
    >>> result = plan([a, b, call], doomed={"a1"})
    >>> sorted(result.doomed), [e.checkpoint_id for e in result.orphans]
    (['a1', 'c1'], ['2'])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Entry", "Plan", "call_owner", "is_call_namespace", "newest", "plan"]

NS_SEP: Final = "|"
NS_END: Final = ":"


def is_call_namespace(ns: str) -> bool:
    """True for the namespace of one subgraph call (a part carries ``:<task id>``).

    Example:
        >>> is_call_namespace("child:1f0a"), is_call_namespace("child"), is_call_namespace("")
        (True, False, False)
    """
    return any(NS_END in part for part in ns.split(NS_SEP))


def _depth(ns: str) -> int:
    return 0 if not ns else ns.count(NS_SEP) + 1


def call_owner(parents: object) -> str | None:
    """The caller's checkpoint a subgraph call started from: the deepest ``parents`` entry.

    Example:
        >>> call_owner({"": "root-cp", "a:1": "a-cp"})
        'a-cp'
        >>> call_owner({}) is None
        True
    """
    if not isinstance(parents, Mapping) or not parents:
        return None
    ns = max((k for k in parents if isinstance(k, str)), key=_depth, default=None)
    owner = parents.get(ns) if ns is not None else None
    return owner if isinstance(owner, str) and owner else None


@dataclass(frozen=True)
class Entry:
    """One checkpoint of a thread, as far as deletion rules need it.

    ``key`` identifies it to the caller (an item key); ``owner`` is the caller's checkpoint of a
    subgraph call's namespace (None when unknown or not a call namespace).
    """

    key: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    owner: str | None


@dataclass
class Plan:
    """The checkpoints to delete (by key) and the survivors whose parent goes (or is gone)."""

    doomed: set[str] = field(default_factory=set)
    orphans: list[Entry] = field(default_factory=list)


def newest(entries: Iterable[Entry], keep: int, order: Mapping[str, tuple[int, str]]) -> set[str]:
    """The keys of the ``keep`` newest entries of each namespace; ``order[key]`` sorts them.

    Example:
        >>> es = [Entry(k, "", k, None, None) for k in ("x", "y", "z")]
        >>> sorted(newest(es, 2, {"x": (1, "x"), "y": (3, "y"), "z": (2, "z")}))
        ['y', 'z']
    """
    by_ns: dict[str, list[Entry]] = {}
    for entry in entries:
        by_ns.setdefault(entry.ns, []).append(entry)
    kept: set[str] = set()
    for group in by_ns.values():
        group.sort(key=lambda e: order[e.key], reverse=True)
        kept.update(e.key for e in group[:keep])
    return kept


def plan(entries: Sequence[Entry], doomed: Iterable[str]) -> Plan:
    """Extend ``doomed`` (keys) by the subgraph calls it ends, and find the orphaned survivors.

    Call namespaces are decided shallowest first, so a nested call goes with a call its caller's
    namespace lost. A call namespace whose owner is unknown is kept (it is pruned like any other
    namespace by the caller's choice of ``doomed``).
    """
    result = Plan(doomed=set(doomed))
    by_ns: dict[str, list[Entry]] = {}
    for entry in entries:
        by_ns.setdefault(entry.ns, []).append(entry)
    live = {e.checkpoint_id for e in entries if e.key not in result.doomed}
    for ns in sorted(by_ns, key=_depth):
        if not is_call_namespace(ns):
            continue
        owners = {e.owner for e in by_ns[ns]}
        if None in owners or not owners.isdisjoint(live):
            continue
        for entry in by_ns[ns]:
            result.doomed.add(entry.key)
            live.discard(entry.checkpoint_id)
    alive = {(e.ns, e.checkpoint_id) for e in entries if e.key not in result.doomed}
    result.orphans = [
        e
        for e in entries
        if e.key not in result.doomed and e.parent_id and (e.ns, e.parent_id) not in alive
    ]
    return result
