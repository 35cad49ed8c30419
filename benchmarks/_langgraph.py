"""LangGraph units: the same graphs and inputs through every checkpoint saver.

Savers (``SUBJECTS``): ``InMemorySaver``, ``AsyncSqliteSaver`` (a file), ``AsyncPostgresSaver``
(a local server), and ``FoundryCheckpointer`` in local mode (embedded SQLite, the default), with
``local_backend="sdk"`` (the SDK's own local mode) and hosted against the emulator (a separate
process). Every saver gets the same counting serializer, so "serialized bytes" is measured
the same way for all of them.

Workloads:

* ``chat``: a chat graph (one ``assistant`` node, ``add_messages``) driven for N turns with
  ~2.5 KB user and ~2.5 KB assistant messages, so that the history grows to ~1 MB;
* ``growth``: the same graph with the history trimmed to the last 20 messages (~10 KB), so
  that only the number of checkpoints in the thread grows (100 and 1,000 turns);
* ``read``: the latest checkpoint (``aget_tuple``) and ``alist(limit=10)`` on threads of
  10 / 100 / 1,000 checkpoints, the ten newest written a second after the rest (and the
  largest paged right after its burst too);
* ``big``: a checkpoint holding a 5 MB incompressible value (put, then get of the latest).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from ._common import Budget, LocalCounters, median, ms, percentile, sleep_to_next_second

__all__ = ["SUBJECTS", "run_unit"]

SUBJECTS: dict[str, str] = {
    "memory": "InMemorySaver",
    "sqlite": "AsyncSqliteSaver",
    "postgres": "AsyncPostgresSaver",
    "fc-local": "FoundryCheckpointer (local, embedded SQLite)",
    "fc-sdk": 'FoundryCheckpointer (local_backend="sdk")',
    "fc-hosted": "FoundryCheckpointer (hosted, emulator)",
}

WINDOW = 20
_WORDS_SEED = 7


def _window(left: list[AnyMessage], right: Any) -> list[AnyMessage]:
    merged: list[AnyMessage] = add_messages(left, right)  # type: ignore[arg-type,assignment]
    return merged[-WINDOW:]


class ChatState(TypedDict):
    """The whole history is kept."""

    messages: Annotated[list[AnyMessage], add_messages]


class WindowState(TypedDict):
    """Only the last ``WINDOW`` messages are kept."""

    messages: Annotated[list[AnyMessage], _window]


class CountingSerde(JsonPlusSerializer):
    """LangGraph's default serializer, counting the bytes it produces."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.calls = 0

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        self.bytes += len(data)
        self.calls += 1
        return kind, data


class _Text:
    """Deterministic word salad (compresses about like English text)."""

    _vocab: ClassVar[list[str]] = []

    def __init__(self, seed: int) -> None:
        if not _Text._vocab:
            vocab_rng = random.Random(_WORDS_SEED)
            letters = "etaoinshrdlcumwfgypbvkjxqz"
            weights = [26 - i for i in range(26)]
            _Text._vocab = [
                "".join(vocab_rng.choices(letters, weights, k=vocab_rng.randint(2, 10)))
                for _ in range(5000)
            ]
        self._rng = random.Random(seed)

    def __call__(self, chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < chars:
            word = self._rng.choice(self._vocab)
            out.append(word)
            size += len(word) + 1
        return " ".join(out)[:chars]


def _chat_graph(saver: BaseCheckpointSaver[Any], *, windowed: bool, reply_chars: int) -> Any:
    text = _Text(seed=2)

    def assistant(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(text(reply_chars))]}

    builder: StateGraph[Any] = StateGraph(WindowState if windowed else ChatState)
    builder.add_node("assistant", assistant)
    builder.add_edge(START, "assistant")
    builder.add_edge("assistant", END)
    return builder.compile(checkpointer=saver)


# --------------------------------------------------------------------------- subjects


class Subject:
    """One saver to measure: how to open it and what it counts."""

    def __init__(self, key: str, workdir: Path, pg_dsn: str | None) -> None:
        self.key = key
        self.workdir = workdir
        self.pg_dsn = pg_dsn
        self.serde = CountingSerde()
        self.local = LocalCounters()
        self.emulator: Any = None
        self._sqlite_path = workdir / "anchor.sqlite"
        self._pg_conn: Any = None
        self.notes: list[str] = []

    def skip_reason(self) -> str | None:
        """Why this saver cannot run here, or None."""
        if self.key == "postgres":
            if not self.pg_dsn:
                return "no local PostgreSQL server"
            try:
                import psycopg  # noqa: F401
                from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # noqa: F401
            except ImportError as exc:
                return f"langgraph-checkpoint-postgres / psycopg not installed: {exc}"
        if self.key == "sqlite":
            try:
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver  # noqa: F401
            except ImportError as exc:
                return f"langgraph-checkpoint-sqlite not installed: {exc}"
        if self.key.startswith("fc-"):
            try:
                from foundry_checkpoint import FoundryCheckpointer  # noqa: F401
            except ImportError as exc:
                return f"FoundryCheckpointer not importable: {exc}"
        return None

    @contextlib.asynccontextmanager
    async def open(self, *, spill: Any = None) -> AsyncIterator[Any]:
        """Open the saver (fresh storage) and close it afterwards."""
        if self.key == "memory":
            yield InMemorySaver(serde=self.serde)
        elif self.key == "sqlite":
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with aiosqlite.connect(self._sqlite_path) as conn:
                saver = AsyncSqliteSaver(conn, serde=self.serde)
                await saver.setup()
                yield saver
        elif self.key == "postgres":
            async with self._postgres() as saver:
                yield saver
        else:
            async with self._foundry(spill) as saver:
                yield saver

    @contextlib.asynccontextmanager
    async def _postgres(self) -> AsyncIterator[Any]:
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        assert self.pg_dsn is not None
        dbname = f"bench_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
        async with await psycopg.AsyncConnection.connect(self.pg_dsn, autocommit=True) as admin:
            await admin.execute(f'CREATE DATABASE "{dbname}"')
        dsn = self.pg_dsn.rsplit("/", 1)[0] + "/" + dbname
        try:
            async with AsyncPostgresSaver.from_conn_string(dsn, serde=self.serde) as saver:
                await saver.setup()
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe:
                    self._pg_conn = probe
                    yield saver
                    self._pg_conn = None
        finally:
            async with await psycopg.AsyncConnection.connect(self.pg_dsn, autocommit=True) as admin:
                await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')

    @contextlib.asynccontextmanager
    async def _foundry(self, spill: Any) -> AsyncIterator[Any]:
        from foundry_checkpoint import FoundryCheckpointer

        kwargs: dict[str, Any] = {"store_prefix": "bench", "serde": self.serde}
        if spill is not None:
            kwargs["spill"] = spill
        if self.key == "fc-sdk":
            kwargs["local_backend"] = "sdk"
        if self.key == "fc-hosted":
            from foundry_checkpoint.emulator import EmulatorCredential

            assert self.emulator is not None
            kwargs.update(
                credential=EmulatorCredential("alice"),
                endpoint=self.emulator.endpoint,
                **self.emulator.client_kwargs(),
            )
        self.local.install(sdk=self.key == "fc-sdk")
        saver = FoundryCheckpointer(**kwargs)
        try:
            yield saver
        finally:
            closer = getattr(saver, "aclose", None)
            if closer is not None:
                await closer()

    def reset(self) -> None:
        """Zero every counter."""
        self.serde.bytes = self.serde.calls = 0
        self.local.reset()
        if self.emulator is not None:
            self.emulator.reset()

    async def counts(self) -> dict[str, Any]:
        """Counters since the last reset, plus the anchors' storage size now."""
        out: dict[str, Any] = {"serde_bytes": self.serde.bytes, "serde_calls": self.serde.calls}
        if self.key == "fc-hosted":
            local = self.local.snapshot()
            out.update(self.emulator.counts())
            out.update(spill_puts=local["spill_puts"], spill_bytes=local["spill_bytes"])
        elif self.key.startswith("fc-"):
            out.update(self.local.snapshot())
        elif self.key == "sqlite":
            out["db_bytes"] = _file_sizes(self._sqlite_path, ("", "-wal"))
        elif self.key == "postgres" and self._pg_conn is not None:
            cur = await self._pg_conn.execute("SELECT pg_database_size(current_database())")
            row = await cur.fetchone()
            out["db_bytes"] = int(row[0])
        return out


def _file_sizes(path: Path, suffixes: tuple[str, ...]) -> int:
    total = 0
    for suffix in suffixes:
        candidate = Path(str(path) + suffix)
        if candidate.exists():
            total += candidate.stat().st_size
    return total


def _per_step(counts: dict[str, Any], before: dict[str, Any], steps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in (
        "serde_bytes",
        "serde_calls",
        "items",
        "item_bytes",
        "file_bytes",
        "spill_puts",
        "spill_bytes",
    ):
        if name in counts:
            out[name] = counts[name] / steps
    if "db_bytes" in counts:
        out["db_bytes"] = (counts["db_bytes"] - before.get("db_bytes", 0)) / steps
    if "requests" in counts:
        out["requests"] = {k: v / steps for k, v in sorted(counts["requests"].items()) if v}
    return out


# --------------------------------------------------------------------------- workloads


async def _drive_chat(
    subject: Subject,
    *,
    steps: int,
    chars: int,
    windowed: bool,
    thread: str,
    budget: Budget | None,
) -> dict[str, Any]:
    async with subject.open() as saver:
        graph = _chat_graph(saver, windowed=windowed, reply_chars=chars)
        config = {"configurable": {"thread_id": thread}}
        user = _Text(seed=3)
        subject.reset()
        before = await subject.counts()
        times: list[float] = []
        state: dict[str, Any] = {}
        for _ in range(steps):
            message = HumanMessage(user(chars))
            start = time.perf_counter()
            state = await graph.ainvoke({"messages": [message]}, config)
            times.append(time.perf_counter() - start)
            if budget is not None and budget.spent:
                break
        counts = await subject.counts()
        history = len(JsonPlusSerializer().dumps_typed(state.get("messages", []))[1])
    done = len(times)
    bucket = max(1, steps // 10)
    return {
        "steps": done,
        "capped": done < steps,
        "total_s": sum(times),
        "mean_ms": ms(sum(times) / done),
        "first100_ms": ms(sum(times[:100]) / min(done, 100)),
        "at100_ms": ms(median(times[80:100])) if done >= 100 else None,
        "last20_ms": ms(median(times[-20:])),
        "p90_ms": ms(percentile(times, 90)),
        "max_ms": ms(max(times)),
        "buckets_ms": [
            ms(sum(times[i : i + bucket]) / len(times[i : i + bucket]))
            for i in range(0, done, bucket)
        ],
        "history_bytes": history,
        "per_step": _per_step(counts, before, done),
    }


def _summarise_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return median(values) if values else None

    first = runs[0]
    return {
        "reps": len(runs),
        "steps": first["steps"],
        "capped": first["capped"],
        "mean_ms": med("mean_ms"),
        "first100_ms": med("first100_ms"),
        "at100_ms": med("at100_ms"),
        "last20_ms": med("last20_ms"),
        "total_s": med("total_s"),
        "p90_ms": med("p90_ms"),
        "max_ms": med("max_ms"),
        "buckets_ms": [
            median([r["buckets_ms"][i] for r in runs if len(r["buckets_ms"]) > i])
            for i in range(max(len(r["buckets_ms"]) for r in runs))
        ],
        "history_bytes": first["history_bytes"],
        "per_step": first["per_step"],
        "rep_mean_ms": [r["mean_ms"] for r in runs],
    }


async def _repeated_chat(
    subject: Subject, scale: dict[str, Any], *, windowed: bool, label: str
) -> dict[str, Any]:
    """The chat graph, repeated on fresh threads (SDK backend, hosted: fewer runs; SDK capped)."""
    sdk = subject.key == "fc-sdk"
    reps = scale["sdk_reps"] if sdk else scale["reps"]
    if subject.key == "fc-hosted":
        reps = scale.get("hosted_reps", reps)
    budget_s = scale["sdk_budget_s"] if sdk else None
    runs = []
    for rep in range(reps):
        runs.append(
            await _drive_chat(
                subject,
                steps=scale["steps"],
                chars=scale["chars"],
                windowed=windowed,
                thread=f"{label}-{rep}",
                budget=Budget(budget_s) if budget_s else None,
            )
        )
    return _summarise_runs(runs)


async def chat(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """Workload 1: a chat thread whose history grows to ~1 MB."""
    return await _repeated_chat(subject, scale, windowed=False, label="chat")


async def growth(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """Workload 2: per-step cost as the thread grows to 100 and 1,000 checkpoints."""
    return await _repeated_chat(subject, scale, windowed=True, label="growth")


def _checkpoint(saver: BaseCheckpointSaver[Any], previous: str | None, value: Any) -> Checkpoint:
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(previous, None)
    checkpoint["channel_values"] = {"messages": value}
    checkpoint["channel_versions"] = {"messages": version}
    return checkpoint


@dataclass
class _History:
    """A thread being written: its config for the next ``aput`` and the ids written so far."""

    config: RunnableConfig
    version: str | None = None
    ids: list[str] = field(default_factory=list)

    def newest(self, count: int) -> list[str]:
        """The ``count`` greatest checkpoint ids, greatest first (what a page must return)."""
        return sorted(self.ids, reverse=True)[:count]


async def _extend(
    saver: BaseCheckpointSaver[Any],
    history: _History,
    count: int,
    text: _Text,
    budget: Budget | None,
) -> None:
    """Write ``count`` more checkpoints to ``history``, one after the other, as fast as they go."""
    for _ in range(count):
        if budget is not None and budget.spent:
            break
        checkpoint = _checkpoint(saver, history.version, [{"role": "user", "content": text(1000)}])
        history.version = str(checkpoint["channel_versions"]["messages"])
        history.config = await saver.aput(
            history.config,
            checkpoint,
            {"source": "loop", "step": len(history.ids), "parents": {}},
            {"messages": history.version},
        )
        history.ids.append(checkpoint["id"])


async def _timed(
    subject: Subject, reps: int, call: Callable[[], Awaitable[bool]]
) -> dict[str, Any]:
    await call()  # warm-up (opens stores and caches on first use)
    subject.reset()
    times: list[float] = []
    correct = True
    for _ in range(reps):
        start = time.perf_counter()
        ok = await call()
        times.append(time.perf_counter() - start)
        correct = correct and ok
    counts = await subject.counts()
    requests = {k: v / reps for k, v in sorted(counts.get("requests", {}).items()) if v}
    return {"ms": ms(median(times)), "correct": correct, "requests": requests}


def _reads(
    saver: BaseCheckpointSaver[Any], history: _History
) -> tuple[Callable[[], Awaitable[bool]], Callable[[], Awaitable[bool]]]:
    """The latest read and the ``alist(limit=10)`` page of ``history``, each checking its answer."""
    thread_id = history.config["configurable"]["thread_id"]
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}

    async def get_latest() -> bool:
        found = await saver.aget_tuple(config)
        return found is not None and found.checkpoint["id"] == history.newest(1)[0]

    async def list10() -> bool:
        listed = [t.checkpoint["id"] async for t in saver.alist(config, limit=10)]
        return listed == history.newest(10)

    return get_latest, list10


async def read(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """Workloads 3 and 4: latest checkpoint and ``alist(limit=10)`` by thread length.

    Each thread's older history is written in one burst; the ten newest checkpoints follow in
    a store second of their own, so the sizes differ in history length only. The largest
    thread is also paged right after its burst (``burst``): its newest checkpoints then share
    a store second with hundreds of others, which a listing of the service must read whole.
    """
    sdk = subject.key == "fc-sdk"
    reps = scale["sdk_reads"] if sdk else scale["reads"]
    budget = Budget(scale["sdk_budget_s"]) if sdk else None
    text = _Text(seed=4)
    out: dict[str, Any] = {"sizes": {}}

    async with subject.open() as saver:
        threads: dict[int, _History] = {}
        for size in scale["sizes"]:
            config: RunnableConfig = {
                "configurable": {"thread_id": f"read-{size}", "checkpoint_ns": ""}
            }
            threads[size] = _History(config)
            await _extend(saver, threads[size], size - 10, text, budget)
        largest = threads[max(scale["sizes"])]
        if largest.ids:
            out["burst"] = await _timed(subject, reps, _reads(saver, largest)[1])
        sleep_to_next_second()
        for history in threads.values():
            await _extend(saver, history, 10, text, None)
        for size, history in threads.items():
            get_latest, list10 = _reads(saver, history)
            out["sizes"][str(size)] = {
                "checkpoints": len(history.ids),
                "latest": await _timed(subject, reps, get_latest),
                "list10": await _timed(subject, reps, list10),
            }
    out["capped"] = any(v["checkpoints"] < int(k) for k, v in out["sizes"].items())
    return out


async def big(subject: Subject, scale: dict[str, Any]) -> dict[str, Any]:
    """Workload 5: put and get a checkpoint holding a 5 MB incompressible value."""
    size = scale["bytes"]
    spill: Any = None
    spill_kind = None
    put_times: list[float] = []
    get_times: list[float] = []
    correct = True
    async with contextlib.AsyncExitStack() as stack:
        if subject.key == "fc-hosted":
            spill, spill_kind = _hosted_spill(stack, subject)
        saver = await stack.enter_async_context(subject.open(spill=spill))
        config: RunnableConfig = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
        version: str | None = None
        # Warm-up with a small checkpoint: stores are opened on first use.
        checkpoint = _checkpoint(saver, version, b"warm")
        version = str(checkpoint["channel_versions"]["messages"])
        config = await saver.aput(config, checkpoint, {"step": -1}, {"messages": version})
        subject.reset()
        for step in range(scale["reps"]):
            payload = random.Random(100 + step).randbytes(size)
            checkpoint = _checkpoint(saver, version, payload)
            version = str(checkpoint["channel_versions"]["messages"])
            start = time.perf_counter()
            config = await saver.aput(config, checkpoint, {"step": step}, {"messages": version})
            put_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            found = await saver.aget_tuple(
                {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
            )
            get_times.append(time.perf_counter() - start)
            correct = (
                correct
                and found is not None
                and (found.checkpoint["channel_values"].get("messages") == payload)
            )
        counts = await subject.counts()
    result: dict[str, Any] = {
        "bytes": size,
        "reps": scale["reps"],
        "put_ms": ms(median(put_times)),
        "get_ms": ms(median(get_times)),
        "correct": correct,
        "per_put": _per_step(counts, {}, scale["reps"]),
    }
    if spill_kind:
        result["spill"] = spill_kind
    return result


def _hosted_spill(stack: contextlib.AsyncExitStack, subject: Subject) -> tuple[Any, str]:
    """Hosted mode needs a spill store for > 1 MB: Azurite when installed, else a directory."""
    from foundry_checkpoint import AzureBlobSpill, LocalSpill

    from ._services import azurite_connection_string, running_azurite

    port = stack.enter_context(running_azurite())
    if port is None:
        return LocalSpill(subject.workdir / "spill"), "LocalSpill (Azurite is not installed)"
    spill = AzureBlobSpill(
        connection_string=azurite_connection_string(port), container="bench-spill"
    )
    return spill, "AzureBlobSpill on Azurite (loopback)"


WORKLOADS: dict[str, Callable[[Subject, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "chat": chat,
    "growth": growth,
    "read": read,
    "big": big,
}


async def run_unit(
    workload: str,
    subject_key: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run one workload for one saver in this process; returns its figures."""
    subject = Subject(subject_key, workdir, pg_dsn)
    subject.emulator = emulator
    reason = subject.skip_reason()
    if reason is not None:
        return {"skipped": reason}
    return await WORKLOADS[workload](subject, scale)
