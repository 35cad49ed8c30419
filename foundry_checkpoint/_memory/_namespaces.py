"""The namespace index behind ``FoundryStore.list_namespaces``: a sorted, paged B-link tree.

The state store lists keys only in ``(created second, id)`` order and filters only by equal
tags, so it cannot answer "the namespaces in sorted order, from the 40th on" by itself. The
index keeps every namespace that received an item, sorted, in items of the user's one memory
store (kind word ``n``, tag ``k`` = ``"n"``):

* **leaves** (``n/l/<id>``): each holds the sorted namespaces of one key range ``[lo, hi)``
  (tuple order, as ``sorted()`` and InMemoryStore order namespaces; PostgresStore orders the
  dot-joined text instead), the id of the leaf right of it (``next``)
  and tombstones (below); at most :data:`LEAF_BYTES` of JSON, so well under the item limit;
* **the root** (``n/root``): the ``lo`` bound and id of every leaf, sorted. Until the first
  split there is no root: the first leaf (``n/l/0``) covers everything. The root is a *hint*
  that finds a leaf in one step; the leaves' own ranges and ``next`` links are the truth
  (Lehman and Yao's B-link tree), so a root that is stale or full costs extra leaf reads,
  never a wrong answer. A full root (:data:`ROOT_BYTES`, some 10,000 leaves of about a
  thousand namespaces each at typical sizes) stops learning new leaves: past it, reads walk
  links.

**Writes** (:meth:`NamespaceIndex.add`): find the leaf whose range holds the namespace (the
root, then ``next`` links while the namespace is at or past the leaf's ``hi``), insert, and
write the leaf back with ``if_match`` its etag; a 412 (another writer was first) reads the
leaf again and retries, so two processes adding at once lose nothing. A leaf over
:data:`LEAF_BYTES` splits, crash-safe, in three steps: (1) the new right-hand leaves are
created (nobody links to them yet: a crash leaves orphans nobody reads, which :meth:`sweep`
deletes); (2) the old leaf is rewritten with ``if_match`` to its left part, ``hi`` the first
separator and ``next`` the first new leaf: that one conditional write is the split, so a
concurrent insert into the old leaf either came first (the split's write fails and is redone
from the new version) or sees the new range and follows the link; (3) the root learns the new
leaves (a crash before it leaves a stale root: readers follow the link). Separators are the
shortest tuples that separate the two sides, so the root stays small. A namespace this process
added or saw in the index is known for :data:`KNOWN_SECONDS`: adding it again costs nothing.
Concurrent adds in one process (a batch's puts) join the rounds of one writer per user rather
than race each other for the same leaf.

**Reads** (:meth:`NamespaceIndex.list`): one root read, then the leaf holding the start of
the walk (the literal head of the ``prefix`` condition, up to its first ``*``), then the
leaves right of it as the walk goes on. Every candidate is confirmed live before it is
listed, with the store's answer (``exact`` or ``has_items`` below: one call each, run
concurrently, at most :data:`CHECKS` at once): a namespace whose items were all deleted or
expired stays in the index until :meth:`sweep` removes it, but is never listed. With
``max_depth`` (and conditions that the truncated group alone decides: prefix conditions of at
most ``max_depth`` labels, no suffix condition) a group costs one ``has_items`` of the group's
prefix, and the walk jumps past the whole group with one root lookup (one leaf read at most),
however many namespaces the group holds.

**Costs**, in store calls, for a page of ``limit`` after ``offset``:
``1`` (root) ``+`` the leaves the page spans (usually 1) ``+`` one check per candidate
examined, that is ``offset + limit`` when every candidate is live. None of it grows with the
number of namespaces in the index (the same count at 10 and 10,000 namespaces). What does grow
with the namespaces *examined* (documented, not hidden): a ``*`` in a prefix condition (the walk
covers every namespace under the literal head), a suffix condition (namespaces that fail it are
read and skipped, 0 calls each beyond their leaves), a suffix condition with ``max_depth``
(each group's namespaces are confirmed one by one until one is live), and namespaces whose
items are gone (one check each until a sweep removes them). ``add`` of a namespace this
process does not know: the leaf read, and the conditional write when the namespace is new to
the index (plus a root read once per :data:`KNOWN_SECONDS`; plus ``n`` creations and a root
write when the leaf splits into ``n + 1``); the first namespace of a user costs 4 (the root, the
missing first leaf, its creation, the write).

**Liveness.** ``has_items(prefix)`` answers whether a live item's namespace starts with
``prefix`` (it confirms a ``max_depth`` group); ``exact(namespace)`` (optional) whether a live
item is in exactly that namespace (it confirms one namespace). Without ``exact`` a namespace is
confirmed by its prefix, so one with other indexed namespaces under it (``("a",)`` beside
``("a", "b")``) may still be listed after its own items went while a deeper one keeps items:
InMemoryStore's own behaviour for emptied namespaces.

**Sweep** (:meth:`NamespaceIndex.sweep`) walks every leaf, confirms each namespace, marks one
that has no live item with a tombstone (the epoch it was found empty) and removes it once it
is still empty :data:`TOMBSTONE_SECONDS` later (then confirms it again and puts it back if an
item arrived meanwhile). The grace outlasts :data:`KNOWN_SECONDS`, so a process that knows a
namespace and so skips adding it on its next write can never find it removed: an add that finds
a tombstone clears it. The sweep also rebuilds a stale root and deletes orphaned leaves.

**Under a store TTL** (``item_ttl_seconds`` set) leaves and the root are rewritten by adds at
least every quarter TTL, and a namespace is known for at most an eighth of it; a leaf that
expired anyway (nothing in its range was written for a TTL) is skipped by readers through the
root and recreated by the next add into its range.

Example:
    >>> separator(("users", "alice"), ("users", "bob"))
    ('users', 'b')
    >>> past(("users", "ann"))
    ('users', 'ann\\x00')
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import json
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from langgraph.store.base import ListNamespacesOp, MatchCondition

from foundry_checkpoint.adapter import (
    MAX_PAGE,
    Scope,
    StateStoreLike,
    StoredItem,
    bounded,
    create_item,
    item_key,
)
from foundry_checkpoint.errors import (
    ConcurrentWriteError,
    CorruptPayloadError,
    InvalidArgumentError,
    StoreConflictError,
    StoreNotFoundError,
    StorePreconditionError,
)

from . import _layout

__all__ = [
    "CHECKS",
    "KNOWN_SECONDS",
    "LEAF_BYTES",
    "ROOT_BYTES",
    "TOMBSTONE_SECONDS",
    "HasItems",
    "NamespaceIndex",
    "past",
    "separator",
]

Namespace = tuple[str, ...]
#: ``has_items(prefix)`` / ``exact(namespace)``: whether a live item is there.
HasItems = Callable[[Namespace], Awaitable[bool]]

#: A leaf splits when its JSON grows over this many bytes (the item limit is 1,000,000).
LEAF_BYTES: Final = 64_000
#: The root grows to at most this many bytes; past it, new leaves are reached by links alone.
ROOT_BYTES: Final = 900_000
#: A namespace this process added or saw in the index is not looked up again for this long.
KNOWN_SECONDS: Final = 300.0
#: A namespace found empty is removed by a sweep only when it is still empty this much later.
TOMBSTONE_SECONDS: Final = 900.0
#: A leaf no other leaf links to is deleted by a sweep once it is older than this.
ORPHAN_SECONDS: Final = 600.0
#: ``has_items`` calls in flight at most.
CHECKS: Final = 16
#: Conditional writes retried at most, per leaf, before giving up.
ATTEMPTS: Final = 64
#: The kind word of the index's items (first part of their keys, value of their ``k`` tag).
KIND: Final = "n"

_TAGS: Final = {_layout.KIND_TAG: KIND}
_ROOT_KEY: Final = item_key(KIND, "root")
_LEAF_PREFIX: Final = f"{KIND}/l/"
_FIRST: Final = "0"
_MAX_USERS: Final = 256
_MAX_KNOWN: Final = 16_384
_GROUP_BATCH: Final = 4
_FILL: Final = 0.75


def _wall() -> float:
    """The clock compared with the store's ``created_at``/``updated_at`` (epoch seconds)."""
    return time.time()


def separator(left: Namespace, right: Namespace) -> Namespace:
    """The shortest tuple ``s`` with ``left < s <= right`` (``left < right``), for bounds.

    Example:
        >>> separator(("a",), ("a", "b", "c"))
        ('a', '')
        >>> separator(("a", "xy1"), ("a", "xz"))
        ('a', 'xz')
    """
    for i, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            # a < b: the shortest prefix of b past a
            j = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
            return (*right[:i], b[: j + 1])
    return (*right[: len(left)], "")  # left is a prefix of right


def past(group: Namespace) -> Namespace | None:
    """The least tuple after every tuple that starts with ``group`` (None: after everything).

    Example:
        >>> past(("a", "b")) > ("a", "b", "zz") and past(("a", "b")) <= ("a", "b!")
        True
        >>> past(()) is None
        True
    """
    if not group:
        return None
    return (*group[:-1], group[-1] + "\x00")


def _corrupt(what: str) -> CorruptPayloadError:
    return CorruptPayloadError(
        f"the namespace index's {what} was changed outside foundry-checkpoint and cannot be "
        "read; delete the memory store's items whose keys start with 'n/' (the index) and "
        "write into each namespace again to rebuild it"
    )


def _labels(raw: object, what: str) -> Namespace:
    if not isinstance(raw, list) or not all(isinstance(label, str) for label in raw):
        raise _corrupt(what)
    return tuple(raw)


def _size(value: Mapping[str, Any]) -> int:
    """The bytes of ``json.dumps(value)`` (ASCII-escaped: never fewer than UTF-8's)."""
    return len(json.dumps(value))


@dataclass(frozen=True, slots=True)
class _Leaf:
    """One leaf: the sorted namespaces of ``[lo, hi)``, the next leaf's id, tombstones."""

    id: str
    lo: Namespace
    hi: Namespace | None
    next: str | None
    entries: tuple[Namespace, ...]
    dead: Mapping[Namespace, float]
    etag: str | None = None
    updated: int = 0

    def holds(self, key: Namespace) -> bool:
        return self.lo <= key and (self.hi is None or key < self.hi)

    def value(self) -> dict[str, Any]:
        return {
            "lo": list(self.lo),
            "hi": None if self.hi is None else list(self.hi),
            "next": self.next,
            "ns": [
                [list(ns), self.dead[ns]] if ns in self.dead else [list(ns)] for ns in self.entries
            ],
        }


def _leaf_key(leaf_id: str) -> str:
    return item_key(KIND, "l", leaf_id)


def _parse_leaf(leaf_id: str, item: StoredItem) -> _Leaf:
    what = f"leaf {leaf_id!r}"
    value = item.value
    if not isinstance(value, Mapping) or set(value) != {"lo", "hi", "next", "ns"}:
        raise _corrupt(what)
    lo = _labels(value["lo"], what)
    hi = None if value["hi"] is None else _labels(value["hi"], what)
    nxt = value["next"]
    if not (nxt is None or isinstance(nxt, str)) or (hi is None) != (nxt is None):
        raise _corrupt(what)
    raw = value["ns"]
    if not isinstance(raw, list):
        raise _corrupt(what)
    entries: list[Namespace] = []
    dead: dict[Namespace, float] = {}
    for entry in raw:
        if not isinstance(entry, list) or len(entry) not in (1, 2):
            raise _corrupt(what)
        ns = _labels(entry[0], what)
        if len(entry) == 2 and (
            isinstance(entry[1], bool) or not isinstance(entry[1], int | float)
        ):
            raise _corrupt(what)
        if lo <= ns and (hi is None or ns < hi):  # clipped to the leaf's own range
            entries.append(ns)
            if len(entry) == 2:
                dead[ns] = float(entry[1])
    entries.sort()
    return _Leaf(
        leaf_id, lo, hi, nxt, tuple(entries), dead, etag=item.etag, updated=item.updated_at
    )


@dataclass(frozen=True, slots=True)
class _Root:
    """The root's hint: every leaf's ``lo`` and id, sorted (``etag`` None: no root item)."""

    los: tuple[Namespace, ...]
    ids: tuple[str, ...]
    etag: str | None = None
    updated: int = 0

    def route(self, key: Namespace) -> int:
        """The position of the last leaf whose ``lo`` is at or before ``key``."""
        return bisect.bisect_right(self.los, key) - 1

    def value(self) -> dict[str, Any]:
        return {
            "leaves": [[list(lo), leaf_id] for lo, leaf_id in zip(self.los, self.ids, strict=True)]
        }

    def merged(self, leaves: Iterable[tuple[Namespace, str]]) -> _Root:
        """This root with ``leaves`` (``(lo, id)``) added or replacing the entry of their lo."""
        table = dict(zip(self.los, self.ids, strict=True))
        table.update(leaves)
        los = tuple(sorted(table))
        return replace(self, los=los, ids=tuple(table[lo] for lo in los))


_IMPLICIT_ROOT: Final = _Root(((),), (_FIRST,))


def _parse_root(item: StoredItem) -> _Root:
    value = item.value
    if not isinstance(value, Mapping) or set(value) != {"leaves"}:
        raise _corrupt("root")
    raw = value["leaves"]
    if not isinstance(raw, list) or not raw:
        raise _corrupt("root")
    los: list[Namespace] = []
    ids: list[str] = []
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], str):
            raise _corrupt("root")
        lo = _labels(entry[0], "root")
        if los and lo <= los[-1]:
            raise _corrupt("root")
        los.append(lo)
        ids.append(entry[1])
    if los[0] != () or ids[0] != _FIRST:
        raise _corrupt("root")
    return _Root(tuple(los), tuple(ids), etag=item.etag, updated=item.updated_at)


class _Conflict(Exception):
    """A conditional write lost to another writer (or its item went): read again, retry."""


class _User:
    """What one index remembers of one user: the root hint and the namespaces known."""

    def __init__(self) -> None:
        self.root: _Root | None = None
        self.root_at = 0.0
        self.known: OrderedDict[Namespace, float] = OrderedDict()
        self.writing = False
        self.pending: list[tuple[set[Namespace], asyncio.Future[None]]] = []

    def knows(self, ns: Namespace, at: float, lifetime: float) -> bool:
        seen = self.known.get(ns)
        return seen is not None and at - seen < lifetime

    def learn(self, ns: Namespace, at: float) -> None:
        self.known[ns] = at
        self.known.move_to_end(ns)
        while len(self.known) > _MAX_KNOWN:
            self.known.popitem(last=False)


def _fail(waiter: asyncio.Future[None], exc: BaseException) -> None:
    """Pass the writer's failure on to a waiting add."""
    if waiter.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        waiter.cancel()
    else:
        waiter.set_exception(exc)


class _Reader:
    """Leaves of one store read at most once per walk, found through a root hint."""

    def __init__(self, store: StateStoreLike, root: _Root) -> None:
        self.store = store
        self.root = root
        self._leaves: dict[str, _Leaf | None] = {}
        #: links followed to a leaf that is gone (expired under a store TTL)
        self.gaps = 0

    async def leaf(self, leaf_id: str) -> _Leaf | None:
        if leaf_id not in self._leaves:
            item = await self.store.get_item(_leaf_key(leaf_id))
            self._leaves[leaf_id] = None if item is None else _parse_leaf(leaf_id, item)
        return self._leaves[leaf_id]

    def forget(self, leaf_id: str) -> None:
        self._leaves.pop(leaf_id, None)

    async def find(self, key: Namespace) -> _Leaf | None:
        """The leaf whose range holds ``key``; None when it is gone (or the index is empty)."""
        i = self.root.route(key)
        leaf: _Leaf | None = None
        while i >= 0 and leaf is None:
            leaf = await self.leaf(self.root.ids[i])
            i -= 1
        while leaf is not None and not leaf.holds(key):
            if key < leaf.lo:  # past a leaf that is gone: its range is held by none
                return None
            leaf = await self.after(leaf)
        return leaf

    async def after(self, leaf: _Leaf) -> _Leaf | None:
        """The leaf right of ``leaf`` (None at the end)."""
        if leaf.hi is None:
            return None
        if leaf.next is not None:
            nxt = await self.leaf(leaf.next)
            if nxt is not None and nxt.lo == leaf.hi:
                return nxt
            self.gaps += 1
        return await self.first_from(leaf.hi)

    async def first_from(self, bound: Namespace) -> _Leaf | None:
        """The first leaf the root knows whose ``lo`` is at or after ``bound`` and that exists."""
        for leaf_id in self.root.ids[bisect.bisect_left(self.root.los, bound) :]:
            found = await self.leaf(leaf_id)
            if found is not None and found.lo >= bound:
                return found
        return None


class _Cursor:
    """A position in the index's sorted namespaces."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.leaf: _Leaf | None = None
        self.pos = 0

    async def seek(self, key: Namespace | None) -> None:
        """Move to the first namespace at or after ``key`` (None: past the end)."""
        if key is None:
            self.leaf = None
            return
        if self.leaf is None or not self.leaf.holds(key):
            self.leaf = await self.reader.find(key) or await self.reader.first_from(key)
        if self.leaf is not None:
            self.pos = bisect.bisect_left(self.leaf.entries, key)

    async def peek(self) -> Namespace | None:
        while self.leaf is not None and self.pos >= len(self.leaf.entries):
            self.leaf = await self.reader.after(self.leaf)
            self.pos = 0
        return None if self.leaf is None else self.leaf.entries[self.pos]

    def advance(self) -> None:
        self.pos += 1


@dataclass(frozen=True, slots=True)
class _Check:
    """One liveness question: a prefix, or (``exact``) exactly one namespace."""

    ns: Namespace
    exact: bool


@dataclass(frozen=True, slots=True)
class _Unit:
    """One candidate result: listed when any of its checks finds a live item."""

    group: Namespace
    checks: tuple[_Check, ...]


def _does_match(condition: MatchCondition, ns: Namespace) -> bool:
    """InMemoryStore's ``_does_match`` (``*`` matches any one label)."""
    path = tuple(condition.path)
    if len(ns) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(ns, path, strict=False)
    else:
        pairs = zip(reversed(ns), reversed(path), strict=False)
    return all(p == "*" or n == p for n, p in pairs)


class _Query:
    """A ``ListNamespacesOp``'s conditions, checked once."""

    def __init__(self, op: ListNamespacesOp) -> None:
        conditions = tuple(op.match_conditions or ())
        for condition in conditions:
            if condition.match_type not in ("prefix", "suffix"):
                raise ValueError(f"Unsupported match type: {condition.match_type}")
        self.conditions = conditions
        self.depth = op.max_depth
        heads = []
        for condition in conditions:
            if condition.match_type == "prefix":
                path = tuple(condition.path)
                heads.append(path[: path.index("*")] if "*" in path else path)
        #: every listed namespace starts with it: the walk starts there and ends past it
        self.head: Namespace = max(heads, key=len, default=())

    def matches(self, ns: Namespace) -> bool:
        return all(_does_match(condition, ns) for condition in self.conditions)

    def decided_by_group(self, depth: int) -> bool:
        """Whether a namespace of ``depth`` labels or more matches as its first ``depth`` do."""
        for condition in self.conditions:
            path = tuple(condition.path)
            if len(path) > depth:
                return False
            if condition.match_type == "suffix" and any(label != "*" for label in path):
                return False
        return True


class _Walk:
    """The candidates of one listing, in order, from a cursor."""

    def __init__(self, cursor: _Cursor, query: _Query, exact: bool) -> None:
        self.cursor = cursor
        self.query = query
        self.exact = exact

    def _check(self, ns: Namespace) -> _Check:
        """The check of one namespace: exactly it, when the store can tell."""
        return _Check(ns, exact=self.exact)

    async def next(self) -> _Unit | None:
        head = self.query.head
        depth = self.query.depth
        while True:
            ns = await self.cursor.peek()
            if ns is None or ns[: len(head)] != head:
                return None
            if depth is None or len(ns) < depth:
                self.cursor.advance()
                if self.query.matches(ns):
                    return _Unit(ns, (self._check(ns),))
                continue
            group = ns[:depth]
            if self.query.decided_by_group(depth):
                matched = self.query.matches(ns)
                await self.cursor.seek(past(group))  # one root lookup past the whole group
                if matched:
                    return _Unit(group, (_Check(group, exact=False),))
                continue
            checks: list[_Check] = []
            member: Namespace | None = ns
            while member is not None and member[:depth] == group:
                self.cursor.advance()
                if self.query.matches(member):
                    checks.append(self._check(member))
                member = await self.cursor.peek()
            if checks:
                return _Unit(group, tuple(checks))


@dataclass(frozen=True, slots=True)
class _Split:
    """A split planned from one leaf version: ``old`` its left part (written with ``if_match``
    the version's etag), ``new`` the leaves right of it (created first)."""

    old: _Leaf
    new: tuple[_Leaf, ...]


def _entry_size(ns: Namespace) -> int:
    return len(json.dumps(list(ns))) + 24


class NamespaceIndex:
    """The sorted index of one memory store's namespaces (see the module docstring).

    One per ``FoundryStore``; what it remembers (the root hint, the namespaces known) is kept
    per :attr:`Scope.user <foundry_checkpoint.adapter.Scope>`, so one index serves many users.

    Args:
        leaf_bytes: a leaf splits past this many bytes of JSON (tests make it small).

    Example:
        >>> import asyncio
        >>> from langgraph.store.base import ListNamespacesOp, MatchCondition
        >>> from foundry_checkpoint.adapter import new_core
        >>> core = new_core(
        ...     {"store_prefix": "docs-ns", "credential": None, "endpoint": None,
        ...      "user_id": None, "trusted_delegation": False, "item_ttl_seconds": -1,
        ...      "spill": None, "local_backend": "sqlite", "client_kwargs": {}},
        ...     scope_word="memory")
        >>> index = NamespaceIndex()
        >>> async def has_items(prefix: tuple[str, ...]) -> bool:
        ...     return prefix != ("users", "cy")  # cy's items were deleted
        >>> async def demo() -> list[tuple[str, ...]]:
        ...     scope = await core.scope(None)
        ...     for ns in [("users", "bo", "notes"), ("users", "ann"), ("users", "cy")]:
        ...         await index.add(scope, ns)
        ...     prefix = (MatchCondition("prefix", ("users",)),)
        ...     return await index.list(scope, ListNamespacesOp(prefix, max_depth=2), has_items)
        >>> core.run(demo())
        [('users', 'ann'), ('users', 'bo')]
        >>> core.close()
    """

    def __init__(self, *, leaf_bytes: int = LEAF_BYTES) -> None:
        if leaf_bytes < 256:
            raise InvalidArgumentError(f"leaf_bytes must be at least 256, got {leaf_bytes}")
        self.leaf_bytes = leaf_bytes
        self._users: OrderedDict[str, _User] = OrderedDict()

    # -- per-user memory -------------------------------------------------------------------
    def _user(self, scope: Scope) -> _User:
        user = self._users.get(scope.user)
        if user is None:
            user = self._users[scope.user] = _User()
            while len(self._users) > _MAX_USERS:
                self._users.popitem(last=False)
        self._users.move_to_end(scope.user)
        return user

    def forget(self, scope: Scope) -> None:
        """Drop what this index remembers of ``scope``'s user (after its store was emptied)."""
        self._users.pop(scope.user, None)

    @staticmethod
    def _ttl(scope: Scope) -> float:
        """The store's item TTL in seconds, or infinity."""
        ttl = scope.core.item_ttl_seconds
        return math.inf if ttl == -1 else float(ttl)

    # -- the root ---------------------------------------------------------------------------
    @staticmethod
    async def _read_root(store: StateStoreLike) -> _Root:
        item = await store.get_item(_ROOT_KEY)
        return _IMPLICIT_ROOT if item is None else _parse_root(item)

    async def _write_root(self, scope: Scope) -> _Root:
        """The root hint for a write: remembered, read again now and then, kept fresh under a
        store TTL."""
        user = self._user(scope)
        ttl = self._ttl(scope)
        clock = time.monotonic()
        if user.root is not None and clock - user.root_at < min(KNOWN_SECONDS, ttl / 8):
            return user.root
        root = await self._read_root(scope.store)
        if root.etag is not None and root.updated < _wall() - ttl / 4:
            try:
                ref = await scope.store.set_item(
                    _ROOT_KEY, root.value(), tags=_TAGS, if_match=root.etag
                )
                root = replace(root, etag=ref.etag, updated=ref.updated_at)
            except (StorePreconditionError, StoreNotFoundError):
                root = await self._read_root(scope.store)
        user.root, user.root_at = root, clock
        return root

    async def _publish(self, scope: Scope, leaves: Sequence[tuple[Namespace, str]]) -> None:
        """Step 3 of a split: the root learns ``leaves`` (``(lo, id)``); a hint, so a full root
        or a lost race after many attempts only costs readers a link."""
        user = self._user(scope)
        for _ in range(ATTEMPTS):
            root = await self._read_root(scope.store)
            merged = root.merged(leaves)
            if merged == root or _size(merged.value()) > ROOT_BYTES:
                user.root, user.root_at = root, time.monotonic()
                return
            try:
                if root.etag is None:
                    if not await create_item(scope.store, _ROOT_KEY, merged.value(), tags=_TAGS):
                        continue  # another writer's root (or this call's first attempt)
                    user.root = None
                    return
                ref = await scope.store.set_item(
                    _ROOT_KEY, merged.value(), tags=_TAGS, if_match=root.etag
                )
            except (StorePreconditionError, StoreNotFoundError):
                continue
            user.root = replace(merged, etag=ref.etag, updated=ref.updated_at)
            user.root_at = time.monotonic()
            return
        user.root = None

    # -- writes -------------------------------------------------------------------------------
    async def add(self, scope: Scope, namespace: tuple[str, ...]) -> None:
        """Record that ``namespace`` holds items (idempotent; no call when it is known).

        Args:
            scope: the user's memory store scope.
            namespace: the namespace an item was written into.

        Raises:
            ConcurrentWriteError: other writers changed the leaf :data:`ATTEMPTS` times in a
                row (nothing of this namespace was lost: retry the call).
        """
        await self.add_many(scope, (namespace,))

    async def add_many(self, scope: Scope, namespaces: Iterable[tuple[str, ...]]) -> None:
        """Record several namespaces: one conditional write per leaf they fall in.

        Args:
            scope: the user's memory store scope.
            namespaces: the namespaces items were written into.

        Raises:
            ConcurrentWriteError: as :meth:`add`.
        """
        user = self._user(scope)
        lifetime = min(KNOWN_SECONDS, self._ttl(scope) / 8)
        clock = time.monotonic()
        todo = {tuple(ns) for ns in namespaces if not user.knows(tuple(ns), clock, lifetime)}
        if not todo:
            return
        # One writer per user and process: concurrent adds (a batch's puts) join the next
        # round of the one in flight instead of racing each other for the same leaf.
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        user.pending.append((todo, waiter))
        if not user.writing:
            user.writing = True
            try:
                while user.pending:
                    batch, user.pending = user.pending, []
                    try:
                        await self._write(scope, user, set().union(*(t for t, _ in batch)))
                    except BaseException as exc:
                        for _, each in [*batch, *user.pending]:
                            if each is not waiter:  # this call raises it itself
                                _fail(each, exc)
                        user.pending = []
                        raise
                    for _, each in batch:
                        if not each.done():
                            each.set_result(None)
            finally:
                user.writing = False
        await waiter

    async def _write(self, scope: Scope, user: _User, namespaces: set[Namespace]) -> None:
        """Insert ``namespaces`` leaf by leaf, each with conditional writes (retried)."""
        ttl = self._ttl(scope)
        clock = time.monotonic()
        todo = sorted(namespaces)
        attempts = 0
        while todo:
            reader = _Reader(scope.store, await self._write_root(scope))
            leaf = await reader.find(todo[0]) or await self._recreate(scope, reader, todo[0])
            if leaf is None:
                user.root = None  # read it again: the leaves changed under this one
            else:
                end = len(todo) if leaf.hi is None else bisect.bisect_left(todo, leaf.hi)
                part = todo[:end]
                try:
                    await self._insert(scope, leaf, part, ttl)
                except _Conflict:
                    pass  # another writer changed the leaf: read it again
                else:
                    for ns in part:
                        user.learn(ns, clock)
                    todo = todo[end:]
                    attempts = 0
                    continue
            attempts += 1
            if attempts >= ATTEMPTS:
                raise ConcurrentWriteError(
                    "the namespace index kept changing under this write (other writers split "
                    f"or rewrote its leaves {ATTEMPTS} times in a row); the memory items were "
                    "written: retry the call so that their namespaces are listed"
                )

    async def _insert(
        self, scope: Scope, leaf: _Leaf, part: Sequence[Namespace], ttl: float
    ) -> None:
        """Insert ``part`` (all in ``leaf``'s range) into this version of ``leaf``.

        Raises:
            _Conflict: the leaf changed since it was read.
        """
        held = set(leaf.entries)
        new = [ns for ns in part if ns not in held]
        revived = [ns for ns in part if ns in leaf.dead]
        stale = leaf.updated < _wall() - ttl / 4
        if not new and not revived and not stale:
            return
        dead = {ns: at for ns, at in leaf.dead.items() if ns not in revived}
        grown = replace(leaf, entries=tuple(sorted(held.union(new))), dead=dead)
        if len(grown.entries) < 2 or _size(grown.value()) <= self.leaf_bytes:
            await self._cas(scope.store, grown)
            return
        plan = self.plan_split(grown)
        await self.create_leaves(scope, plan)
        await self.link(scope, plan)
        await self._publish(scope, [(new_leaf.lo, new_leaf.id) for new_leaf in plan.new])

    @staticmethod
    async def _cas(store: StateStoreLike, leaf: _Leaf) -> None:
        try:
            await store.set_item(_leaf_key(leaf.id), leaf.value(), tags=_TAGS, if_match=leaf.etag)
        except (StorePreconditionError, StoreNotFoundError) as exc:
            raise _Conflict from exc

    def plan_split(self, leaf: _Leaf) -> _Split:
        """Cut ``leaf`` (over :data:`LEAF_BYTES`) into pieces of about three quarters of it."""
        sizes = [_entry_size(ns) for ns in leaf.entries]
        total = sum(sizes)
        pieces = max(2, min(len(sizes), math.ceil(total / (self.leaf_bytes * _FILL))))
        cuts: list[int] = []
        running = 0
        for i, size in enumerate(sizes[:-1]):
            running += size
            if running >= total * (len(cuts) + 1) / pieces and (not cuts or cuts[-1] < i + 1):
                cuts.append(i + 1)
                if len(cuts) == pieces - 1:
                    break
        bounds = [0, *cuts, len(sizes)]
        seps = [separator(leaf.entries[c - 1], leaf.entries[c]) for c in cuts]
        ids = [uuid.uuid4().hex for _ in cuts]

        def dead_of(entries: Sequence[Namespace]) -> dict[Namespace, float]:
            return {ns: leaf.dead[ns] for ns in entries if ns in leaf.dead}

        new = []
        for k, leaf_id in enumerate(ids):
            entries = leaf.entries[bounds[k + 1] : bounds[k + 2]]
            last = k == len(ids) - 1
            new.append(
                _Leaf(
                    leaf_id,
                    seps[k],
                    leaf.hi if last else seps[k + 1],
                    leaf.next if last else ids[k + 1],
                    entries,
                    dead_of(entries),
                )
            )
        left = leaf.entries[: bounds[1]]
        old = replace(leaf, hi=seps[0], next=ids[0], entries=left, dead=dead_of(left))
        return _Split(old, tuple(new))

    async def create_leaves(self, scope: Scope, plan: _Split) -> None:
        """Split step 1: create the new leaves (nothing links to them yet)."""
        await bounded(
            create_item(scope.store, _leaf_key(leaf.id), leaf.value(), tags=_TAGS)
            for leaf in plan.new
        )

    async def link(self, scope: Scope, plan: _Split) -> None:
        """Split step 2: the old leaf keeps its left part and links to the new ones (one
        conditional write: the split). A lost race deletes the new leaves again.

        Raises:
            _Conflict: the old leaf changed since it was read.
        """
        try:
            await self._cas(scope.store, plan.old)
        except _Conflict:
            now = await scope.store.get_item(_leaf_key(plan.old.id))
            if now is not None and now.value.get("next") == plan.new[0].id:
                return  # this write went through (a retried request found it done)
            await bounded(scope.store.delete_item(_leaf_key(leaf.id)) for leaf in plan.new)
            raise

    async def _recreate(self, scope: Scope, reader: _Reader, key: Namespace) -> _Leaf | None:
        """Create the leaf of ``key``'s range: the first one, or one that expired under a store
        TTL. None when another writer did first (read again)."""
        root = reader.root
        left: _Leaf | None = None
        for leaf_id in reversed(root.ids[: root.route(key) + 1]):
            left = await reader.leaf(leaf_id)
            if left is not None:
                break
        while left is not None and (nxt := await reader.after(left)) is not None and nxt.lo <= key:
            left = nxt
        right = await reader.after(left) if left is not None else await reader.first_from(key)
        lo: Namespace
        if left is None:
            leaf_id, lo = _FIRST, ()
        else:
            assert left.hi is not None  # it does not hold key, which is past it
            leaf_id, lo = (left.next or uuid.uuid4().hex), left.hi
        leaf = _Leaf(
            leaf_id,
            lo,
            None if right is None else right.lo,
            None if right is None else right.id,
            (),
            {},
        )
        try:
            ref = await scope.store.create_item(_leaf_key(leaf_id), leaf.value(), tags=_TAGS)
        except StoreConflictError:
            return None  # another writer's (or this call's own retried first attempt)
        if left is not None and left.next != leaf_id:
            try:
                await self._cas(scope.store, replace(left, next=leaf_id))
            except _Conflict:
                return None
        if leaf_id != _FIRST:
            await self._publish(scope, [(lo, leaf_id)])
        return replace(leaf, etag=ref.etag, updated=ref.updated_at)

    # -- reads --------------------------------------------------------------------------------
    async def list(
        self,
        scope: Scope,
        op: ListNamespacesOp,
        has_items: HasItems,
        *,
        exact: HasItems | None = None,
    ) -> list[tuple[str, ...]]:
        """The answer to ``op``: sorted, distinct, live namespaces (truncated to ``max_depth``).

        Args:
            scope: the user's memory store scope.
            op: the listing (conditions with ``*`` wildcards, ``max_depth``, ``limit``,
                ``offset``).
            has_items: whether a live item's namespace starts with a prefix.
            exact: whether a live item is in exactly a namespace (None: ``has_items``).

        Returns:
            At most ``op.limit`` namespaces, after the first ``op.offset``.

        Raises:
            InvalidArgumentError: a negative ``limit``, ``offset`` or ``max_depth``.
            ValueError: a condition of another match type than prefix or suffix.
        """
        for name in ("limit", "offset", "max_depth"):
            number = getattr(op, name)
            if number is not None and number < 0:
                raise InvalidArgumentError(f"{name} must not be negative, got {number}")
        query = _Query(op)
        need = op.offset + op.limit
        if op.limit == 0:
            return []
        root = await self._read_root(scope.store)
        user = self._user(scope)
        user.root, user.root_at = root, time.monotonic()
        cursor = _Cursor(_Reader(scope.store, root))
        await cursor.seek(query.head)
        walk = _Walk(cursor, query, exact is not None)

        async def probe(check: _Check) -> bool:
            if check.exact and exact is not None:
                return await exact(check.ns)
            return await has_items(check.ns)

        async def live(unit: _Unit) -> bool:
            for start in range(0, len(unit.checks), _GROUP_BATCH):
                batch = unit.checks[start : start + _GROUP_BATCH]
                if any(await bounded(probe(check) for check in batch)):
                    return True
            return False

        found: list[Namespace] = []
        exhausted = False
        while len(found) < need and not exhausted:
            units: list[_Unit] = []
            while len(units) < min(need - len(found), CHECKS):
                unit = await walk.next()
                if unit is None:
                    exhausted = True
                    break
                units.append(unit)
            answers = await bounded((live(unit) for unit in units), CHECKS)
            found.extend(unit.group for unit, ok in zip(units, answers, strict=True) if ok)
        return found[op.offset : need]

    # -- maintenance --------------------------------------------------------------------------
    async def sweep(
        self,
        scope: Scope,
        has_items: HasItems,
        *,
        exact: HasItems | None = None,
        grace_seconds: float = TOMBSTONE_SECONDS,
        orphan_seconds: float = ORPHAN_SECONDS,
    ) -> int:
        """Remove namespaces that hold no live item any more; repair the root; drop orphans.

        A namespace found empty is marked, and removed by a sweep that finds it still empty
        ``grace_seconds`` later (0: at once). Cost: every leaf read once, one ``has_items``
        per namespace (concurrently), one write per leaf that changed, one listing of the
        index's keys.

        Args:
            scope: the user's memory store scope.
            has_items: as in :meth:`list`.
            exact: as in :meth:`list`.
            grace_seconds: how long a namespace stays marked before it is removed.
            orphan_seconds: how old a leaf nothing links to must be to be deleted.

        Returns:
            How many namespaces were removed.
        """
        store = scope.store
        root = await self._read_root(store)
        reader = _Reader(store, root)
        leaves: builtins.list[_Leaf] = []
        leaf = await reader.find(()) or await reader.first_from(())
        while leaf is not None:
            leaves.append(leaf)
            leaf = await reader.after(leaf)
        entries = [ns for each in leaves for ns in each.entries]
        checks = [_Check(ns, exact=exact is not None) for ns in entries]

        async def probe(check: _Check) -> bool:
            if check.exact and exact is not None:
                return await exact(check.ns)
            return await has_items(check.ns)

        answers = await bounded((probe(check) for check in checks), CHECKS)
        verdict = {check.ns: ok for check, ok in zip(checks, answers, strict=True)}
        by_ns = {check.ns: check for check in checks}
        removed = 0
        for each in leaves:
            gone = await self._sweep_leaf(scope, reader, each, verdict, grace_seconds)
            if gone:
                user = self._user(scope)
                for ns in gone:
                    user.known.pop(ns, None)
                again = await bounded((probe(by_ns[ns]) for ns in gone), CHECKS)
                back = [ns for ns, ok in zip(gone, again, strict=True) if ok]
                if back:  # an item arrived while it was being removed
                    await self.add_many(scope, back)
                removed += len(gone) - len(back)
        if not reader.gaps:  # a gone leaf may hide linked ones: leave the root and keys be
            await self._repair_root(scope, root, leaves)
            await self._drop_orphans(scope, {each.id for each in leaves}, orphan_seconds)
        return removed

    async def _sweep_leaf(
        self,
        scope: Scope,
        reader: _Reader,
        leaf: _Leaf,
        verdict: Mapping[Namespace, bool],
        grace: float,
    ) -> builtins.list[Namespace]:
        """Mark, unmark and remove in one leaf by ``verdict``; the namespaces removed."""
        for _ in range(ATTEMPTS):
            at = _layout.now()
            keep: builtins.list[Namespace] = []
            gone: builtins.list[Namespace] = []
            dead: dict[Namespace, float] = {}
            for ns in leaf.entries:
                live = verdict.get(ns)
                if live is None:  # added after the walk: left as it is
                    keep.append(ns)
                    if ns in leaf.dead:
                        dead[ns] = leaf.dead[ns]
                elif live:
                    keep.append(ns)
                elif grace <= 0 or (ns in leaf.dead and at - leaf.dead[ns] >= grace):
                    gone.append(ns)
                else:
                    keep.append(ns)
                    dead[ns] = leaf.dead.get(ns, at)
            swept = replace(leaf, entries=tuple(keep), dead=dead)
            if swept.entries == leaf.entries and dict(swept.dead) == dict(leaf.dead):
                return []
            try:
                await self._cas(scope.store, swept)
            except _Conflict:
                reader.forget(leaf.id)
                fresh = await reader.leaf(leaf.id)
                if fresh is None:
                    return []
                leaf = fresh
                continue
            return gone
        raise ConcurrentWriteError(
            f"the namespace index kept changing under its sweep ({ATTEMPTS} attempts on one "
            "leaf); nothing was lost: run the sweep again"
        )

    async def _repair_root(self, scope: Scope, root: _Root, leaves: Sequence[_Leaf]) -> None:
        """Make the root list exactly the leaves walked, unless it changed meanwhile."""
        if not leaves or leaves[0].id != _FIRST:
            return
        chain = _Root(tuple(leaf.lo for leaf in leaves), tuple(leaf.id for leaf in leaves))
        if (chain.los, chain.ids) == (root.los, root.ids) or _size(chain.value()) > ROOT_BYTES:
            return
        try:
            if root.etag is None:
                await create_item(scope.store, _ROOT_KEY, chain.value(), tags=_TAGS)
            else:
                await scope.store.set_item(_ROOT_KEY, chain.value(), tags=_TAGS, if_match=root.etag)
        except (StorePreconditionError, StoreNotFoundError):
            pass  # a split updated it meanwhile: it stays a good hint
        self._user(scope).root = None

    @staticmethod
    async def _drop_orphans(scope: Scope, linked: set[str], orphan_seconds: float) -> None:
        """Delete leaves nothing links to (a split that crashed or lost its race)."""
        store = scope.store
        cutoff = _wall() - orphan_seconds
        orphans: builtins.list[str] = []
        after: str | None = None
        while True:
            page = await store.list_keys(tags=_TAGS, limit=MAX_PAGE, after=after, order="desc")
            for key in page.keys:
                if (
                    key.key.startswith(_LEAF_PREFIX)
                    and key.key[len(_LEAF_PREFIX) :] not in linked
                    and key.created_at <= cutoff
                ):
                    orphans.append(key.key)
            if not page.has_more or not page.last_id:
                break
            after = page.last_id
        await bounded(store.delete_item(key) for key in orphans)
