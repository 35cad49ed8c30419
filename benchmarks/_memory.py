"""Section 10: the LangGraph memory store (``BaseStore``) beside LangGraph's own stores.

* ``store``: one store filled to each of ``sizes`` memory items under one namespace prefix and
  as many namespaces (one item each) under another, measuring at each size the median of
  ``ops`` calls of: ``aput`` of a new key, of an existing key, of a key in a new namespace;
  ``aget``; ``asearch`` of a page of 10 under the prefix (no filter; a filter on a field the
  store can serve from tags, ``{"kind": "todo"}``; a filter it evaluates on read,
  ``{"score": {"$gte": 50}}``; the page at offset 50) and ``alist_namespaces`` of a page of 10.
  Every store runs its async face; every store gets the same items in the same order.
* ``semantic``: ``asearch(query=...)`` with an index (``dims``, ``embed``, ``fields``) on
  ``items`` items, a deterministic embedding so that runs compare: the median ms per query,
  recall@10 against exact cosine ranking of the same vectors, and (ours) store calls per query.

Subjects: ``memory`` (``InMemoryStore``), ``sqlite`` (``AsyncSqliteStore``), ``postgres``
(``AsyncPostgresStore`` on the benchmarks' local server, a fresh database per unit),
``fs-local`` (``FoundryStore()``, the embedded default) and ``fs-hosted`` (``FoundryStore`` on
the emulator). For ours, store calls per op are counted in-process (local) or by the emulator
(hosted), in the same units as the saver sections. The ``fs-local`` unit also times a bare
hand-off to a ``CallThread`` (the loop-less thread every SQLite call of the embedded store runs
on, so that no blocking call runs on an event loop) against ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ._common import LocalCounters, median, ms

__all__ = ["NAMES", "report_lines", "run_unit"]

NAMES = {
    "memory": "InMemoryStore",
    "sqlite": "AsyncSqliteStore",
    "postgres": "AsyncPostgresStore",
    "fs-local": "**FoundryStore** local (embedded SQLite, default)",
    "fs-hosted": "**FoundryStore** hosted (emulator)",
}

NOTES = ("bench", "notes", "all")  # the items searched
PREFIX = ("bench", "notes")  # the prefix searched
USERS = ("bench", "users")  # the namespaces listed: ("bench", "users", "u000001"), ...
_TAG_FIELDS = ("kind",)
_CHUNK = 100

#: The ops of the ``store`` workload, in table order: (key, column heading).
OPS: tuple[tuple[str, str], ...] = (
    ("put_new", "put, new key"),
    ("put_replace", "put, existing key"),
    ("put_new_ns", "put, new namespace"),
    ("get", "get"),
    ("search", "search page of 10"),
    ("search_tag_filter", "search, filter on a tag field"),
    ("search_read_filter", "search, filter evaluated on read"),
    ("search_offset", "search, offset 50"),
    ("list_namespaces", "list_namespaces page of 10"),
)


def _text(i: int) -> str:
    words = ("tea", "coffee", "trains", "window seat", "vegetarian", "early flights", "jazz")
    return f"note {i}: prefers {words[i % len(words)]} " + "x" * 160


def _value(i: int) -> dict[str, Any]:
    return {"text": _text(i), "kind": "todo" if i % 2 else "note", "score": i % 100}


# --------------------------------------------------------------------------- subjects


class StoreSubject:
    """One store to measure: how to open it and how its store calls are counted."""

    def __init__(
        self, key: str, workdir: Path, pg_dsn: str | None, emulator: Any, index: Any = None
    ) -> None:
        self.key = key
        self.workdir = workdir
        self.pg_dsn = pg_dsn
        self.emulator = emulator
        self.index = index
        self.local = LocalCounters()

    def skip_reason(self) -> str | None:
        """Why this store cannot run here, or None."""
        try:
            if self.key == "postgres":
                if not self.pg_dsn:
                    return "no local PostgreSQL server"
                if self.index is not None:
                    return (
                        "its index needs the pgvector extension, which the benchmarks' server "
                        "(Debian's postgresql package) does not ship"
                    )
                import psycopg  # noqa: F401
                from langgraph.store.postgres.aio import AsyncPostgresStore  # noqa: F401
            elif self.key == "sqlite":
                if self.index is not None:
                    import sqlite3

                    import sqlite_vec  # noqa: F401

                    if not hasattr(sqlite3.Connection, "enable_load_extension"):
                        return (
                            "its index needs sqlite-vec loaded as an extension, and this "
                            "Python's sqlite3 was built without extension loading"
                        )
                from langgraph.store.sqlite.aio import AsyncSqliteStore  # noqa: F401
            elif self.key.startswith("fs-"):
                from foundry_checkpoint import FoundryStore  # noqa: F401

                if self.key == "fs-hosted" and self.emulator is None:
                    return "needs the emulator"
        except ImportError as exc:
            return f"not importable: {exc}"
        return None

    @property
    def counted(self) -> bool:
        """Whether store calls are counted (ours only)."""
        return self.key.startswith("fs-")

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Any]:
        """Open the store on fresh storage and close it afterwards."""
        if self.key == "memory":
            from langgraph.store.memory import InMemoryStore

            yield InMemoryStore(index=self.index)
        elif self.key == "sqlite":
            from langgraph.store.sqlite.aio import AsyncSqliteStore

            async with AsyncSqliteStore.from_conn_string(
                str(self.workdir / "store.sqlite"), index=self.index
            ) as store:
                await store.setup()
                yield store
        elif self.key == "postgres":
            async with self._postgres() as store:
                yield store
        else:
            async with self._foundry() as store:
                yield store

    @contextlib.asynccontextmanager
    async def _postgres(self) -> AsyncIterator[Any]:
        import psycopg
        from langgraph.store.postgres.aio import AsyncPostgresStore

        assert self.pg_dsn is not None
        dbname = f"bench_store_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
        async with await psycopg.AsyncConnection.connect(self.pg_dsn, autocommit=True) as admin:
            await admin.execute(f'CREATE DATABASE "{dbname}"')
        dsn = self.pg_dsn.rsplit("/", 1)[0] + "/" + dbname
        try:
            async with AsyncPostgresStore.from_conn_string(dsn) as store:
                await store.setup()
                yield store
        finally:
            async with await psycopg.AsyncConnection.connect(self.pg_dsn, autocommit=True) as admin:
                await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')

    @contextlib.asynccontextmanager
    async def _foundry(self) -> AsyncIterator[Any]:
        from foundry_checkpoint import FoundryStore

        kwargs: dict[str, Any] = {"store_prefix": "bench-memory", "tag_fields": _TAG_FIELDS}
        if self.index is not None:
            kwargs["index"] = self.index
        if self.key == "fs-hosted":
            from foundry_checkpoint.emulator import EmulatorCredential

            kwargs.update(
                credential=EmulatorCredential("alice"),
                endpoint=self.emulator.endpoint,
                **self.emulator.client_kwargs(),
            )
        else:
            self.local.install(sdk=False)
        store = FoundryStore(**kwargs)
        try:
            yield store
        finally:
            await store.aclose()

    def reset(self) -> None:
        """Zero the store-call counts."""
        if self.key == "fs-hosted":
            self.emulator.reset()
        else:
            self.local.reset()

    def requests(self) -> dict[str, int]:
        """Store calls by type since the last reset."""
        if self.key == "fs-hosted":
            return dict(self.emulator.counts().get("requests", {}))
        return dict(self.local.snapshot()["requests"])


async def _fill(store: Any, items: Sequence[tuple[tuple[str, ...], str, dict[str, Any]]]) -> None:
    from langgraph.store.base import PutOp

    for start in range(0, len(items), _CHUNK):
        chunk = items[start : start + _CHUNK]
        await store.abatch([PutOp(ns, key, value) for ns, key, value in chunk])


async def _measure(
    subject: StoreSubject, count: int, call: Callable[[int], Awaitable[bool]]
) -> dict[str, Any]:
    """Median ms of ``count`` calls, whether every call answered right, store calls per call."""
    if subject.counted:
        subject.reset()
    samples: list[float] = []
    correct = True
    for i in range(count):
        start = time.perf_counter()
        ok = await call(i)
        samples.append(time.perf_counter() - start)
        correct = correct and ok
    out: dict[str, Any] = {"ms": ms(median(samples)), "correct": correct}
    if subject.counted:
        out["requests"] = {k: v / count for k, v in subject.requests().items() if v}
    return out


async def _handoff(count: int) -> dict[str, float]:
    """Median µs of a bare hand-off (no work) to a ``CallThread`` and to ``asyncio.to_thread``."""
    from foundry_checkpoint._store._engine_db import CallThread

    worker = CallThread("bench-handoff")

    def nothing() -> None:
        return None

    try:
        figures: dict[str, list[float]] = {"call_thread_us": [], "to_thread_us": []}
        for _ in range(count):
            start = time.perf_counter()
            await worker.call(nothing)
            mid = time.perf_counter()
            await asyncio.to_thread(nothing)
            figures["call_thread_us"].append(mid - start)
            figures["to_thread_us"].append(time.perf_counter() - mid)
    finally:
        worker.close()
    return {k: median(v) * 1e6 for k, v in figures.items()}


async def store_workload(subject: StoreSubject, scale: dict[str, Any]) -> dict[str, Any]:
    """Fill the store to each size and time every op of :data:`OPS` there."""
    ops = int(scale["ops"])
    out: dict[str, Any] = {"ops": ops, "sizes": {}, "fill_s": 0.0}
    count = 0
    async with subject.open() as store:
        for size in scale["sizes"]:
            started = time.perf_counter()
            batch: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
            for i in range(count, size):
                batch.append((NOTES, f"k{i:06d}", _value(i)))
                batch.append(((*USERS, f"u{i:06d}"), "profile", _value(i)))
            await _fill(store, batch)
            out["fill_s"] += time.perf_counter() - started
            count = size
            out["sizes"][str(size)] = await _ops_at(subject, store, size, ops)
    if subject.key == "fs-local":
        out["handoff"] = await _handoff(int(scale.get("handoff_calls", 2000)))
    return out


async def _ops_at(subject: StoreSubject, store: Any, size: int, ops: int) -> dict[str, Any]:
    def key(i: int) -> str:
        return f"k{(i * 7919) % size:06d}"

    async def put_new(i: int) -> bool:
        await store.aput(NOTES, f"new-{size}-{i:04d}", _value(i))
        return True

    async def put_replace(i: int) -> bool:
        await store.aput(NOTES, key(i), _value(i + 1))
        return True

    async def put_new_ns(i: int) -> bool:
        await store.aput((*USERS, f"new-{size}-{i:04d}"), "profile", _value(i))
        return True

    async def get(i: int) -> bool:
        item = await store.aget(NOTES, key(i))
        return item is not None and item.key == key(i)

    def page_ok(items: Sequence[Any], check: Callable[[dict[str, Any]], bool]) -> bool:
        keys = {(tuple(x.namespace), x.key) for x in items}
        return (
            len(items) == 10
            and len(keys) == 10
            and all(tuple(x.namespace[:2]) == PREFIX and check(x.value) for x in items)
        )

    async def search(i: int) -> bool:
        return page_ok(await store.asearch(PREFIX, limit=10), lambda v: True)

    async def search_tag_filter(i: int) -> bool:
        found = await store.asearch(PREFIX, filter={"kind": "todo"}, limit=10)
        return page_ok(found, lambda v: v["kind"] == "todo")

    async def search_read_filter(i: int) -> bool:
        found = await store.asearch(PREFIX, filter={"score": {"$gte": 50}}, limit=10)
        return page_ok(found, lambda v: v["score"] >= 50)

    async def search_offset(i: int) -> bool:
        return page_ok(await store.asearch(PREFIX, limit=10, offset=50), lambda v: True)

    async def list_namespaces(i: int) -> bool:
        found = await store.alist_namespaces(prefix=USERS, limit=10)
        return len(found) == 10 and all(tuple(ns[:2]) == USERS for ns in found)

    calls: dict[str, Callable[[int], Awaitable[bool]]] = {
        "put_new": put_new,
        "put_replace": put_replace,
        "put_new_ns": put_new_ns,
        "get": get,
        "search": search,
        "search_tag_filter": search_tag_filter,
        "search_read_filter": search_read_filter,
        "search_offset": search_offset,
        "list_namespaces": list_namespaces,
    }
    # One warm-up call of each, so that first-use costs (connections, caches) stay out.
    for op, call in calls.items():
        if not op.startswith("put"):
            await call(ops)
    return {op: await _measure(subject, ops, call) for op, call in calls.items()}


# --------------------------------------------------------------------------- semantic search

_DIMS = 64
_TOPICS = 50


def _unit_vector(seed: str, dims: int) -> list[float]:
    raw: list[float] = []
    counter = 0
    while len(raw) < dims:
        digest = hashlib.sha256(f"{seed}/{counter}".encode()).digest()
        raw += [(b - 127.5) / 127.5 for b in digest]
        counter += 1
    raw = raw[:dims]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def embed_text(text: str) -> list[float]:
    """A deterministic embedding: a topic's direction plus a little per-text noise.

    A text that starts with ``topic N`` lands near topic ``N``'s direction, so queries have
    meaningful nearest neighbours; everything else is a hash of the text.
    """
    topic = text.split(":", 1)[0]
    base = _unit_vector(topic, _DIMS)
    noise = _unit_vector(text, _DIMS)
    mixed = [b + 0.35 * n for b, n in zip(base, noise, strict=True)]
    norm = math.sqrt(sum(x * x for x in mixed)) or 1.0
    return [x / norm for x in mixed]


async def semantic_workload(subject: StoreSubject, scale: dict[str, Any]) -> dict[str, Any]:
    """Index ``items`` texts, then time ``queries`` queries and their recall@10."""
    import numpy as np

    total, queries = int(scale["items"]), int(scale["queries"])
    if subject.key == "fs-hosted":
        # Every indexed put rewrites its namespace's vector page (hundreds of KB at thousands
        # of vectors) through the emulator: filling 10,000 takes longer than a unit may run.
        total = int(scale.get("hosted_items", total))
    texts = [f"topic {i % _TOPICS}: memory {i} " + "y" * 40 for i in range(total)]
    keys = [f"m{i:06d}" for i in range(total)]
    matrix = np.array([embed_text(t) for t in texts])
    questions = [f"topic {(i * 7) % _TOPICS}: question {i}" for i in range(queries + 1)]
    exact = []
    for question in questions:  # the exact top 10, ranked outside the timed calls
        scores = matrix @ np.array(embed_text(question))
        exact.append({keys[j] for j in np.argsort(-scores)[:10]})
    found: dict[int, set[str]] = {}
    started = time.perf_counter()
    async with subject.open() as store:
        await _fill(store, [(NOTES, k, {"text": t}) for k, t in zip(keys, texts, strict=True)])
        fill_s = time.perf_counter() - started

        async def query(i: int) -> bool:
            items = await store.asearch(PREFIX, query=questions[i], limit=10)
            found[i] = {x.key for x in items}
            return len(items) == 10

        await query(queries)  # warm-up
        figures = await _measure(subject, queries, query)

        async def put(i: int) -> bool:
            await store.aput(NOTES, f"extra{i:04d}", {"text": f"topic {i % _TOPICS}: extra {i}"})
            return True

        figures["put"] = await _measure(subject, int(scale.get("puts", 20)), put)
    recalls = [len(found[i] & exact[i]) / 10 for i in range(queries)]
    figures.update(items=total, dims=_DIMS, fill_s=fill_s, recall_at_10=sum(recalls) / len(recalls))
    return figures


def index_config() -> dict[str, Any]:
    """The ``index`` every store of the ``semantic`` workload gets."""
    from langchain_core.embeddings import Embeddings

    class TopicEmbeddings(Embeddings):
        """:func:`embed_text` as LangChain ``Embeddings``."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [embed_text(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return embed_text(text)

    return {"dims": _DIMS, "embed": TopicEmbeddings(), "fields": ["text"]}


async def run_unit(
    workload: str,
    subject_key: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run the ``store`` or ``semantic`` workload on one store."""
    index = index_config() if workload == "semantic" else None
    subject = StoreSubject(subject_key, workdir, pg_dsn, emulator, index)
    reason = subject.skip_reason()
    if reason is not None:
        return {"skipped": reason}
    if workload == "semantic":
        return await semantic_workload(subject, scale)
    return await store_workload(subject, scale)


# --------------------------------------------------------------------------- report


def report_lines(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    """Section 10 of RESULTS.md (the ``lg-memory`` and ``lg-memory-search`` sections)."""
    from ._report import _num, _ratio, _requests, _rss, _Section, _table

    section = _Section(results, "lg-memory", NAMES)
    if section.units:
        scale = scales["lg-memory"]
        sizes = [str(s) for s in scale["sizes"]]
        lines += [
            "## 10. LangGraph memory store (`BaseStore`): put, get, search, list_namespaces",
            "",
            "Each store filled to "
            + " / ".join(f"{int(s):,}" for s in sizes)
            + " items (~200-character JSON values) in the namespace "
            f"`{NOTES}` and as many namespaces under `{USERS}` (one item each); at each size, "
            f"the median of {scale['ops']} calls of each op, async faces. *search* pages are "
            f"`asearch({PREFIX}, limit=10)`; the tag-field filter is `{{'kind': 'todo'}}` "
            "(FoundryStore built with `tag_fields=('kind',)`: served by tags); the other filter "
            "is `{'score': {'$gte': 50}}` (evaluated on read by every store; half the items "
            "match). *put, new namespace* is a put into a namespace this process has not "
            "written before. Cells: ms (x AsyncPostgresStore); *calls* = store calls per op "
            "(hosted: counted by the emulator). ✓ = every answer was the right size and "
            "matched its filter.",
            "",
        ]
        anchor = section.result("postgres")
        memory = section.result("memory")
        ran = section.ran()
        for size in sizes:
            lines += [f"{int(size):,} items and {int(size):,} namespaces:", ""]
            rows = []
            for subject, r, unit in ran:
                cell = r["sizes"].get(size)
                if cell is None:
                    continue
                row = [section.names[subject]]
                for op, _ in OPS:
                    fig = cell[op]
                    base = (anchor or {}).get("sizes", {}).get(size, {}).get(op, {}).get("ms")
                    row.append(
                        f"{_num(fig['ms'], 3)} ({_ratio(fig['ms'], base)})"
                        + ("" if fig["correct"] else " **wrong**")
                    )
                row.append(_rss(unit))
                rows.append(row)
            lines += _table(["store", *(label for _, label in OPS), "peak RSS MB"], rows)
        counted = [(s, r) for s, r, _ in ran if s.startswith("fs-")]
        if counted:
            lines += ["Store calls per op (FoundryStore):", ""]
            rows = []
            for subject, r in counted:
                for size in sizes:
                    cell = r["sizes"].get(size)
                    if cell is None:
                        continue
                    rows.append(
                        [
                            f"{section.names[subject]}, {int(size):,}",
                            *(_requests(cell[op].get("requests")) for op, _ in OPS),
                        ]
                    )
            lines += _table(["store, items", *(label for _, label in OPS)], rows)
        if memory:
            top = sizes[-1]
            rel = []
            for subject, r, _ in ran:
                cell = r["sizes"].get(top)
                if cell is None or subject == "memory":
                    continue
                get_ratio = _ratio(cell["get"]["ms"], memory["sizes"][top]["get"]["ms"])
                search_ratio = _ratio(cell["search"]["ms"], memory["sizes"][top]["search"]["ms"])
                rel.append(f"{section.names[subject]}: get {get_ratio}, search {search_ratio}")
            if rel:
                lines += [
                    f"Against InMemoryStore at {int(top):,} items: " + "; ".join(rel) + ".",
                    "",
                ]
        fills = [f"{section.names[s]} {_num(r['fill_s'], 1)} s" for s, r, _ in ran]
        if fills:
            lines += ["Filling (batches of 100 puts): " + ", ".join(fills) + ".", ""]
        pg = (anchor or {}).get("sizes", {})
        if any(not c["search_read_filter"]["correct"] for c in pg.values()):
            lines += [
                "AsyncPostgresStore's *wrong* pages: it compares `$gt`/`$gte`/`$lt`/`$lte` as "
                "text (`value->>'score' >= '50'`), so a score of 6 passes `$gte: 50`; "
                "InMemoryStore and FoundryStore compare numbers as numbers.",
                "",
            ]
        local = section.result("fs-local")
        if local and "handoff" in local:
            hand = local["handoff"]
            lines += [
                "A bare hand-off (no work) to the embedded store's `CallThread`, the loop-less "
                "thread every SQLite call runs on so that no blocking call runs on an event "
                f"loop: {_num(hand['call_thread_us'], 0)} µs (median); `asyncio.to_thread`: "
                f"{_num(hand['to_thread_us'], 0)} µs, in the same process.",
                "",
            ]
        section.close(lines)
    _semantic_lines(results, scales, lines)


def _semantic_lines(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    from ._report import _num, _ratio, _requests, _rss, _Section, _table

    section = _Section(results, "lg-memory-search", NAMES)
    if not section.units:
        return
    scale = scales["lg-memory-search"]
    lines += [
        f"### Semantic search: `asearch(prefix, query=..., limit=10)` on {scale['items']:,} items",
        "",
        f"An index of {_DIMS} dimensions on the field `text`, with a deterministic embedding "
        f"({_TOPICS} topic directions plus per-text noise), so every run embeds the same "
        f"vectors. Median of {scale['queries']} queries; recall@10 against the exact cosine "
        "ranking of the same vectors; *calls* = store calls per query; *put* = the median "
        f"of {scale.get('puts', 20)} `aput` of a new item into the indexed namespace afterwards "
        "(embedding included)."
        + (
            f" FoundryStore hosted ran on {scale['hosted_items']:,} items: each indexed put "
            "rewrites its namespace's vector page, which makes filling 10,000 through the "
            "emulator longer than a unit may run."
            if "hosted_items" in scale
            else ""
        ),
        "",
    ]
    memory = section.result("memory")
    rows = []
    for subject, r, unit in section.ran():
        put = r.get("put", {})
        rows.append(
            [
                section.names[subject],
                f"{r['items']:,}",
                _num(r["ms"], 3),
                _ratio(r["ms"], memory["ms"] if memory else None),
                f"{r['recall_at_10']:.2f}",
                _requests(r.get("requests")),
                _num(put.get("ms"), 3),
                _requests(put.get("requests")),
                _num(r["fill_s"], 1),
                _rss(unit),
            ]
        )
    lines += _table(
        [
            "store",
            "items",
            "ms/query",
            "x InMemoryStore",
            "recall@10",
            "calls/query",
            "put ms",
            "calls/put",
            "fill s",
            "peak RSS MB",
        ],
        rows,
    )
    section.close(lines)
