"""Peers: the other checkpoint stores on Foundry's state store, beside ours, against the emulator.

Subjects (``SUBJECTS``), each in its own process against its own emulator process:

* ``lg-fc-hosted``: ``FoundryCheckpointer`` hosted;
* ``lg-lc-hosted``: langchain-azure-ai's ``FoundryCheckpointSaver`` (the ``hosts`` dependency
  group), given the emulator's credential and endpoint. It is async-only: the chat runs through
  ``ainvoke``, and one sync ``invoke`` is tried to record what a sync caller gets;
* ``maf-fc-hosted``: ``FoundryCheckpointStorage`` hosted;
* ``maf-fh-hosted``: agent-framework-foundry-hosting's ``FoundryCheckpointStore``, pointed at the
  emulator as in the ``maf-*`` sections (client settings only).

Facts measured:

* LangGraph chat (``chat``): the chat graph of section 1 for N turns (the history grows):
  store calls, item bytes (counted by the emulator) and ms per turn;
* "latest" under same-second writes (``same_second``): a burst of checkpoints written in one
  store second (timestamps are whole seconds, and the emulator orders keys of one second at
  random, as the service may), then the latest read back; right or wrong, per trial;
* past 1 MB (``big``): one checkpoint holding an incompressible value of ``big_bytes``, over
  the 1 MB item limit, written with no blob store configured and read back: success (the value
  came back) or the error text.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ._common import hosted_saver, median, ms, sleep_to_next_second

__all__ = ["SUBJECTS", "run_unit"]

SUBJECTS: dict[str, str] = {
    "lg-fc-hosted": "FoundryCheckpointer (hosted, emulator)",
    "lg-lc-hosted": "FoundryCheckpointSaver, langchain-azure-ai (hosted, emulator)",
    "maf-fc-hosted": "FoundryCheckpointStorage (hosted, emulator)",
    "maf-fh-hosted": "FoundryCheckpointStore, agent-framework-foundry-hosting (hosted, emulator)",
}

_ERROR_CHARS = 300


def _error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    if len(text) > _ERROR_CHARS:
        text = text[: _ERROR_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {text}"


# --------------------------------------------------------------------------- LangGraph


def _lg_saver(key: str, emulator: Any, serde: Any) -> contextlib.AbstractAsyncContextManager[Any]:
    peer = key != "lg-fc-hosted"
    prefix = "bench-lc" if peer else "bench"
    return hosted_saver(peer, emulator, prefix=prefix, identity="alice", serde=serde)


async def _lg_chat(saver: Any, serde: Any, emulator: Any, scale: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from ._langgraph import _chat_graph, _Text

    graph = _chat_graph(saver, windowed=False, reply_chars=scale["chars"])
    config = {"configurable": {"thread_id": "peer-chat"}}
    user = _Text(seed=3)
    await graph.ainvoke({"messages": [HumanMessage(user(scale["chars"]))]}, config)  # opens
    emulator.reset()
    serde.bytes = serde.calls = 0
    times: list[float] = []
    calls: list[int] = []
    for _ in range(scale["steps"]):
        message = HumanMessage(user(scale["chars"]))
        start = time.perf_counter()
        await graph.ainvoke({"messages": [message]}, config)
        times.append(time.perf_counter() - start)
        calls.append(len(emulator.intervals()))
    counts = emulator.counts()
    steps = len(times)
    tail = max(1, steps // 5)
    return {
        "steps": steps,
        "mean_ms": ms(sum(times) / steps),
        "median_ms": ms(median(times)),
        "last_ms": ms(sum(times[-tail:]) / tail),
        "tail": tail,
        "calls_first": sum(calls[:tail]) / tail,
        "calls_last": sum(calls[-tail:]) / tail,
        "requests": {k: v / steps for k, v in sorted(counts["requests"].items()) if v},
        "item_bytes": counts["item_bytes"] / steps,
        "serde_bytes": serde.bytes / steps,
    }


def _lg_sync(saver: Any, scale: dict[str, Any]) -> str:
    """What a sync ``invoke`` does with this saver: ``ok`` or the error text."""
    from langchain_core.messages import HumanMessage

    from ._langgraph import _chat_graph

    graph = _chat_graph(saver, windowed=False, reply_chars=100)
    try:
        graph.invoke(
            {"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "peer-sync"}}
        )
    except Exception as exc:
        return _error(exc)
    return "ok"


def _checkpoint(saver: Any, previous: Any, value: Any) -> Any:
    """A checkpoint holding ``value``, versioned by the saver's own ``get_next_version``."""
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    version = saver.get_next_version(previous, None)
    checkpoint["channel_values"] = {"messages": value}
    checkpoint["channel_versions"] = {"messages": version}
    return checkpoint


async def _lg_same_second(saver: Any, scale: dict[str, Any]) -> dict[str, Any]:
    trials: list[dict[str, Any]] = []
    for trial in range(scale["trials"]):
        thread = f"peer-burst-{trial}"
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        version: Any = None
        ids: list[str] = []
        sleep_to_next_second()
        second = int(time.time())
        for step in range(scale["burst"]):
            checkpoint = _checkpoint(saver, version, [{"role": "user", "content": f"m{step}"}])
            version = checkpoint["channel_versions"]["messages"]
            config = await saver.aput(
                config, checkpoint, {"source": "loop", "step": step}, {"messages": version}
            )
            ids.append(checkpoint["id"])
        same = int(time.time()) == second
        found = await saver.aget_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        got = found.checkpoint["id"] if found is not None else None
        trials.append({"right": got == max(ids), "one_second": same})
    return {
        "burst": scale["burst"],
        "trials": len(trials),
        "right": sum(t["right"] for t in trials),
        "one_second": sum(t["one_second"] for t in trials),
    }


async def _lg_big(saver: Any, scale: dict[str, Any]) -> dict[str, Any]:
    payload = random.Random(11).randbytes(scale["big_bytes"])
    config: Any = {"configurable": {"thread_id": "peer-big", "checkpoint_ns": ""}}
    checkpoint = _checkpoint(saver, None, payload)
    version = checkpoint["channel_versions"]["messages"]
    start = time.perf_counter()
    try:
        await saver.aput(config, checkpoint, {"source": "loop", "step": 0}, {"messages": version})
        found = await saver.aget_tuple(config)
    except Exception as exc:
        return {"bytes": len(payload), "ok": False, "outcome": _error(exc)}
    elapsed = time.perf_counter() - start
    same = found is not None and found.checkpoint["channel_values"].get("messages") == payload
    return {
        "bytes": len(payload),
        "ok": same,
        "outcome": "written and read back" if same else "written, read back different",
        "ms": ms(elapsed),
    }


async def _langgraph(key: str, scale: dict[str, Any], emulator: Any) -> dict[str, Any]:
    from ._langgraph import CountingSerde

    serde = CountingSerde()
    async with _lg_saver(key, emulator, serde) as saver:
        out: dict[str, Any] = {"chat": await _lg_chat(saver, serde, emulator, scale)}
        out["same_second"] = await _lg_same_second(saver, scale)
        out["big"] = await _lg_big(saver, scale)
    async with _lg_saver(key, emulator, serde) as saver:
        # A sync caller: invoke() from a worker thread, as a sync app would call it.
        out["sync_invoke"] = await asyncio.to_thread(_lg_sync, saver, scale)
    return out


# --------------------------------------------------------------------------- MAF


@contextlib.asynccontextmanager
async def _maf_storage(key: str, emulator: Any, context_id: str) -> AsyncIterator[Any]:
    if key == "maf-fh-hosted":
        from ._maf import _hosting_store

        yield _hosting_store(context_id, emulator)
        return
    from foundry_checkpoint.emulator import EmulatorCredential
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    storage = FoundryCheckpointStorage(
        context_id,
        store_prefix="bench",
        credential=EmulatorCredential("alice"),
        endpoint=emulator.endpoint,
        **emulator.client_kwargs(),
    )
    try:
        yield storage
    finally:
        await storage.aclose()


async def _maf(key: str, scale: dict[str, Any], emulator: Any) -> dict[str, Any]:
    from agent_framework import WorkflowCheckpoint

    from ._maf import WORKFLOW

    def checkpoint(index: int, previous: str | None, state: dict[str, Any]) -> Any:
        return WorkflowCheckpoint(
            workflow_name=WORKFLOW,
            graph_signature_hash="bench",
            previous_checkpoint_id=previous,
            state=state,
            iteration_count=index,
        )

    trials: list[dict[str, Any]] = []
    for trial in range(scale["trials"]):
        async with _maf_storage(key, emulator, f"peer-burst-{trial}") as storage:
            await storage.save(checkpoint(0, None, {"i": -1}))  # opens the context's store
            sleep_to_next_second()
            second = int(time.time())
            last: str | None = None
            for index in range(scale["burst"]):
                last = await storage.save(checkpoint(index, last, {"i": index}))
            same = int(time.time()) == second
            found = await storage.get_latest(workflow_name=WORKFLOW)
            trials.append({"right": found is not None and found.checkpoint_id == last, "one": same})
    out: dict[str, Any] = {
        "same_second": {
            "burst": scale["burst"],
            "trials": len(trials),
            "right": sum(t["right"] for t in trials),
            "one_second": sum(t["one"] for t in trials),
        }
    }
    # Random base64 text: compression cannot take it under the limit (6 bits of 8 carry).
    text = base64.b64encode(random.Random(12).randbytes(scale["big_bytes"]))[
        : scale["big_bytes"]
    ].decode("ascii")
    async with _maf_storage(key, emulator, "peer-big") as storage:
        start = time.perf_counter()
        try:
            saved = await storage.save(checkpoint(0, None, {"blob": text}))
            back = await storage.load(saved)
        except Exception as exc:
            out["big"] = {"bytes": len(text), "ok": False, "outcome": _error(exc)}
        else:
            same = back.state.get("blob") == text
            out["big"] = {
                "bytes": len(text),
                "ok": same,
                "outcome": "saved and loaded back" if same else "saved, loaded back different",
                "ms": ms(time.perf_counter() - start),
            }
    return out


async def run_unit(
    workload: str,
    subject_key: str,
    scale: dict[str, Any],
    workdir: Path,
    *,
    pg_dsn: str | None = None,
    emulator: Any = None,
) -> dict[str, Any]:
    """Run one peer's measurements in this process; returns its figures."""
    del workload, workdir, pg_dsn
    if subject_key.startswith("lg-"):
        return await _langgraph(subject_key, scale, emulator)
    return await _maf(subject_key, scale, emulator)


# --------------------------------------------------------------------------- report

NAMES: dict[str, str] = {
    "lg-fc-hosted": "**FoundryCheckpointer** hosted",
    "lg-lc-hosted": "FoundryCheckpointSaver (langchain-azure-ai)",
    "maf-fc-hosted": "**FoundryCheckpointStorage** hosted",
    "maf-fh-hosted": "FoundryCheckpointStore (agent-framework-foundry-hosting)",
}


def _latest_cell(fig: dict[str, Any]) -> str:
    verdict = "right" if fig["right"] == fig["trials"] else "**wrong**"
    return (
        f"{verdict}: {fig['right']} of {fig['trials']} "
        f"(bursts of {fig['burst']}, {fig['one_second']} within one second)"
    )


def _big_cell(fig: dict[str, Any]) -> str:
    size = f"{fig['bytes'] / 1e6:.1f} MB: "
    if fig["ok"]:
        return size + f"{fig['outcome']} ({fig['ms']:.0f} ms)"
    return size + f"`{fig['outcome']}`"


def report_lines(
    results: dict[str, Any], scales: dict[str, Any], lines: list[str], number: int
) -> None:
    """The ``peers`` section of RESULTS.md."""
    from ._report import _kb, _num, _ratio, _requests, _rss, _Section, _table

    section = _Section(results, "peers", NAMES)
    if not section.units:
        return
    scale = scales["peers"]
    ran = section.ran()
    ours = section.result("lg-fc-hosted") or {}
    ours_ms = ours.get("chat", {}).get("mean_ms")
    lines += [
        f"## {number}. Peers on the same state store: langchain-azure-ai and "
        "agent-framework-foundry-hosting",
        "",
        "Every row against the emulator in a process of its own (no delay), with the "
        "emulator's credential and endpoint; the peers are otherwise unchanged. *Chat*: the "
        f"graph of section 1 for {scale['steps']} turns after one warm-up turn "
        f"({scale['chars']}-character messages, the history grows), through `ainvoke`: "
        "langchain-azure-ai's `FoundryCheckpointSaver` is async-only (its sync methods raise "
        "`NotImplementedError`, see *sync invoke*), so a sync app cannot use it. *stored* = "
        "item value bytes the emulator accepted; *serialized* = bytes asked of LangGraph's "
        "serializer. *Latest under same-second writes*: "
        f"{scale['trials']} bursts of {scale['burst']} checkpoints written back to back inside "
        "one store second (store timestamps are whole seconds and the emulator returns the keys "
        "of one second in random order, as the service may), then the latest read back; right "
        "= the newest checkpoint every time. *Past 1 MB*: one checkpoint holding an "
        f"incompressible value of {scale['big_bytes'] / 1e6:.1f} MB (over the 1 MB item "
        "limit), no blob store configured, written then read back.",
        "",
    ]
    rows = []
    for subject, r, unit in ran:
        if not subject.startswith("lg-"):
            continue
        chat = r["chat"]
        calls = (
            f"{_num(chat['calls_first'], 1)} → {_num(chat['calls_last'], 1)}"
            if chat["calls_first"] != chat["calls_last"]
            else _num(chat["calls_last"], 1)
        )
        rows.append(
            [
                section.names[subject],
                _num(chat["mean_ms"]),
                _ratio(chat["mean_ms"], ours_ms),
                _num(chat["last_ms"]),
                _requests(chat["requests"]),
                calls,
                _kb(chat["item_bytes"]),
                _kb(chat["serde_bytes"]),
                _latest_cell(r["same_second"]),
                _big_cell(r["big"]),
                "works" if r["sync_invoke"] == "ok" else f"`{r['sync_invoke']}`",
                _rss(unit),
            ]
        )
    if rows:
        tail = ours.get("chat", {}).get("tail", 1)
        lines += _table(
            [
                "saver",
                "ms/turn",
                "x ours",
                f"ms/turn, last {tail}",
                "store calls/turn",
                f"calls/turn, first {tail} → last {tail}",
                "stored KB/turn",
                "serialized KB/turn",
                "latest under same-second writes",
                "past 1 MB",
                "sync invoke",
                "peak RSS MB (+workload)",
            ],
            rows,
        )
    rows = [
        [
            section.names[subject],
            _latest_cell(r["same_second"]),
            _big_cell(r["big"]),
        ]
        for subject, r, _ in ran
        if subject.startswith("maf-")
    ]
    if rows:
        lines += [
            "Agent Framework: the same two facts (`save` in a burst, then `get_latest`; one "
            "`save` of a checkpoint whose state holds a random base64 string of "
            f"{scale['big_bytes'] / 1e6:.1f} MB, then `load`). Store calls and ms per "
            "superstep and `get_latest` by history length of both stores are in sections 7 "
            "and 8.",
            "",
        ]
        lines += _table(["storage", "latest under same-second writes", "past 1 MB"], rows)
    section.close(lines)
