"""Round trips per turn: every store request delayed, ours beside the one-call-one-trip floor.

The emulator's pure delay fault (``status=None``) holds every storage request for 10 or 50 ms
before serving it, as a network round trip would. A turn then costs about
``round trips waited x delay``; this section measures both the wall time and, better, the
**longest chain of sequential requests** in the turn: the requests are logged with their start
and end (on the emulator's side), and a chain is a sequence in which each request starts after
the one before it ended. Requests that overlap were in flight together and cost one wait.

Subjects (``SUBJECTS``):

* LangGraph chat turns (``ainvoke`` per durability mode ``"sync"``, ``"async"``, ``"exit"``):
  ``FoundryCheckpointer`` hosted, langchain-azure-ai's ``FoundryCheckpointSaver`` (async-only;
  the chat runs through ``ainvoke``), and the floor: LangGraph's ``InMemorySaver`` with one
  delay slept per saver call (``aget_tuple``, ``aput``, ``aput_writes``, ``alist``);
* MAF supersteps: ``FoundryCheckpointStorage`` hosted, agent-framework-foundry-hosting's
  ``FoundryCheckpointStore``, and the floor: ``InMemoryCheckpointStorage`` with one delay per
  call;
* AutoGen saves: ``AutoGenStateStore.asave`` hosted (``keep_versions=10``, the default, so a
  save past the tenth also trims the oldest version), and the floor: one delay per save.

The floor's chain is counted the same way, from the start and end of each slept delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from ._common import hosted_saver, median, ms

__all__ = ["SUBJECTS", "longest_chain", "run_unit"]

SUBJECTS: dict[str, str] = {
    "lg-floor": "InMemorySaver + one delay per saver call (floor)",
    "lg-fc-hosted": "FoundryCheckpointer (hosted, emulator)",
    "lg-lc-hosted": "FoundryCheckpointSaver, langchain-azure-ai (hosted, emulator)",
    "maf-floor": "InMemoryCheckpointStorage + one delay per call (floor)",
    "maf-fc-hosted": "FoundryCheckpointStorage (hosted, emulator)",
    "maf-fh-hosted": "FoundryCheckpointStore, agent-framework-foundry-hosting (hosted, emulator)",
    "ag-floor": "one delay per save (floor)",
    "ag-fc-hosted": "AutoGenStateStore (hosted, emulator)",
}

DURABILITY: tuple[str, ...] = ("sync", "async", "exit")

Interval = tuple[str, float, float]


def longest_chain(intervals: Sequence[Interval]) -> tuple[int, list[str]]:
    """The longest chain of requests each starting after the previous one ended.

    Returns its length and the call types along it, in order.

    Example:
        >>> longest_chain([("get", 0.0, 1.0), ("put", 1.5, 2.0), ("put", 1.6, 2.1)])
        (2, ['get', 'put'])
    """
    ordered = sorted(intervals, key=lambda iv: iv[2])
    best: list[int] = []
    back: list[int] = []
    for i, (_, start, _end) in enumerate(ordered):
        length, parent = 1, -1
        for j in range(i):
            if ordered[j][2] <= start and best[j] + 1 > length:
                length, parent = best[j] + 1, j
        best.append(length)
        back.append(parent)
    if not best:
        return 0, []
    at = max(range(len(best)), key=best.__getitem__)
    path: list[str] = []
    while at != -1:
        path.append(ordered[at][0])
        at = back[at]
    return max(best), path[::-1]


def waves(intervals: Sequence[Interval]) -> list[str]:
    """The requests in start order, those in flight together joined by ``∥``.

    A request joins the wave before it when it started before any request of that wave ended.

    Example:
        >>> waves([("get", 0.0, 1.0), ("put", 1.5, 2.0), ("create", 1.6, 2.1)])
        ['get', 'put ∥ create']
    """
    out: list[list[str]] = []
    wave_end = float("-inf")
    for call, start, end in sorted(intervals, key=lambda iv: iv[1]):
        if out and start < wave_end:
            out[-1].append(call)
            wave_end = min(wave_end, end)
        else:
            out.append([call])
            wave_end = end
    return [" ∥ ".join(wave) for wave in out]


class _Clock:
    """Where the requests of a subject are logged: the emulator, or the floor's own sleeps."""

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.delay_s = 0.0
        self.log: list[Interval] = []

    def set_delay(self, seconds: float) -> None:
        self.delay_s = seconds
        if self.emulator is not None:
            self.emulator.delay(seconds)

    def clear(self) -> None:
        """Forget the requests so far."""
        if self.emulator is not None:
            self.emulator.intervals()
        self.log.clear()

    def take(self) -> list[Interval]:
        """The requests since the last :meth:`clear` or :meth:`take`."""
        if self.emulator is not None:
            logged: list[Interval] = self.emulator.intervals()
            return logged
        out, self.log = self.log, []
        return out

    async def trip(self, call: str) -> None:
        """The floor's round trip: sleep one delay and log it."""
        start = time.monotonic()
        await asyncio.sleep(self.delay_s)
        self.log.append((call, start, time.monotonic()))


def _summary(
    walls: list[float], chains: list[int], calls: list[int], delay_s: float
) -> dict[str, Any]:
    return {
        "ms": ms(median(walls)),
        "waited": median(walls) / delay_s if delay_s else None,
        "chain": median(chains),
        "chain_max": max(chains),
        "calls": median(calls),
    }


# --------------------------------------------------------------------------- LangGraph


def _floor_saver(clock: _Clock) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    class DelayedInMemorySaver(InMemorySaver):
        """``InMemorySaver`` that waits one round trip per saver call."""

        async def aget_tuple(self, config: Any) -> Any:
            await clock.trip("aget_tuple")
            return self.get_tuple(config)

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            await clock.trip("aput")
            return self.put(config, checkpoint, metadata, new_versions)

        async def aput_writes(
            self, config: Any, writes: Any, task_id: str, task_path: str = ""
        ) -> None:
            await clock.trip("aput_writes")
            self.put_writes(config, writes, task_id, task_path)

        async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
            await clock.trip("alist")
            for item in self.list(config, **kwargs):
                yield item

    return DelayedInMemorySaver()


def _lg_saver(key: str, emulator: Any) -> contextlib.AbstractAsyncContextManager[Any]:
    peer = key != "lg-fc-hosted"
    return hosted_saver(peer, emulator, prefix="bench-lc" if peer else "bench", identity="alice")


async def _langgraph(key: str, scale: dict[str, Any], clock: _Clock) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from ._langgraph import _chat_graph, _Text

    out: dict[str, Any] = {"turns": scale["turns"], "delays": {}}
    async with contextlib.AsyncExitStack() as stack:
        if key == "lg-floor":
            saver = _floor_saver(clock)
        else:
            saver = await stack.enter_async_context(_lg_saver(key, clock.emulator))
        graph = _chat_graph(saver, windowed=False, reply_chars=scale["chars"])
        user = _Text(seed=3)
        sequences: dict[str, list[str]] = {}
        for delay_ms in scale["delays_ms"]:
            clock.set_delay(delay_ms / 1000)
            per_mode: dict[str, Any] = {}
            for mode in DURABILITY:
                config = {"configurable": {"thread_id": f"rt-{delay_ms}-{mode}"}}
                walls: list[float] = []
                chains: list[int] = []
                calls: list[int] = []
                for turn in range(scale["warmup"] + scale["turns"]):
                    message = HumanMessage(user(scale["chars"]))
                    clock.clear()
                    start = time.perf_counter()
                    await graph.ainvoke({"messages": [message]}, config, durability=mode)
                    wall = time.perf_counter() - start
                    log = clock.take()
                    if turn == 0:  # a new thread: its first turn opens (creates) its store
                        first = longest_chain(log)
                        per_mode.setdefault("open", {})[mode] = {
                            "chain": first[0],
                            "calls": len(log),
                            "ms": ms(wall),
                        }
                        if mode == "sync":
                            sequences["first turn of a new thread (sync)"] = waves(log)
                    if turn < scale["warmup"]:
                        continue
                    chain, _ = longest_chain(log)
                    walls.append(wall)
                    chains.append(chain)
                    calls.append(len(log))
                    if turn == scale["warmup"] + scale["turns"] - 1:
                        sequences[mode] = waves(log)
                per_mode[mode] = _summary(walls, chains, calls, clock.delay_s)
            out["delays"][str(delay_ms)] = per_mode
        clock.set_delay(0)
        out["sequences"] = sequences
    return out


# --------------------------------------------------------------------------- MAF


def _maf_floor(clock: _Clock) -> Any:
    from agent_framework import InMemoryCheckpointStorage

    class DelayedInMemoryCheckpointStorage(InMemoryCheckpointStorage):
        """``InMemoryCheckpointStorage`` that waits one round trip per call."""

    for name in ("save", "load", "list_checkpoints", "delete", "get_latest", "list_checkpoint_ids"):
        original: Callable[..., Any] = getattr(InMemoryCheckpointStorage, name)

        def delayed(original: Callable[..., Any], name: str) -> Callable[..., Any]:
            async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
                await clock.trip(name)
                return await original(self, *args, **kwargs)

            return call

        setattr(DelayedInMemoryCheckpointStorage, name, delayed(original, name))
    return DelayedInMemoryCheckpointStorage()


@contextlib.asynccontextmanager
async def _maf_storage(key: str, clock: _Clock, context_id: str) -> AsyncIterator[Any]:
    if key == "maf-floor":
        yield _maf_floor(clock)
    elif key == "maf-fh-hosted":
        from ._maf import _hosting_store

        yield _hosting_store(context_id, clock.emulator)
    else:
        from foundry_checkpoint.emulator import EmulatorCredential
        from foundry_checkpoint_maf import FoundryCheckpointStorage

        storage = FoundryCheckpointStorage(
            context_id,
            store_prefix="bench",
            credential=EmulatorCredential("alice"),
            endpoint=clock.emulator.endpoint,
            **clock.emulator.client_kwargs(),
        )
        try:
            yield storage
        finally:
            await storage.aclose()


async def _maf(key: str, scale: dict[str, Any], clock: _Clock) -> dict[str, Any]:
    """Workflow runs on one context: the first opens it (store creation), the rest are timed."""
    from ._maf import loop_workflow

    supersteps = scale["supersteps"]
    out: dict[str, Any] = {"supersteps": supersteps, "runs": scale["runs"], "delays": {}}
    sequences: dict[str, list[str]] = {}
    for delay_ms in scale["delays_ms"]:
        walls: list[float] = []
        chains: list[int] = []
        calls: list[int] = []
        async with _maf_storage(key, clock, f"rt-{delay_ms}") as storage:
            clock.set_delay(delay_ms / 1000)
            for run in range(scale["runs"] + 1):
                workflow = loop_workflow(supersteps, storage)
                clock.clear()
                start = time.perf_counter()
                await workflow.run({"i": 0, "note": "x" * scale["payload"]})
                wall = time.perf_counter() - start
                log = clock.take()
                chain, _ = longest_chain(log)
                if run == 0:  # the first save of a new context opens (creates) its store
                    out["delays"].setdefault("open", {})[str(delay_ms)] = {
                        "chain": chain,
                        "calls": len(log),
                        "ms": ms(wall),
                    }
                    sequences["first run of a new context (first 8 waves)"] = waves(log)[:8]
                    continue
                walls.append(wall / supersteps)
                chains.append(chain)
                calls.append(len(log))
                sequences["a later run (first 4 waves)"] = waves(log)[:4]
            clock.set_delay(0)
        summary = _summary(walls, chains, calls, delay_ms / 1000)
        for name in ("chain", "chain_max", "calls"):
            summary[name] = summary[name] / supersteps
        out["delays"][str(delay_ms)] = summary
    out["sequences"] = sequences
    return out


# --------------------------------------------------------------------------- AutoGen


async def _autogen(key: str, scale: dict[str, Any], clock: _Clock) -> dict[str, Any]:
    out: dict[str, Any] = {"saves": scale["saves"], "delays": {}}
    saved: dict[str, Any] = {}

    async def floor_save(scope: str, kind: str, name: str, state: dict[str, Any]) -> str:
        await clock.trip("save")
        saved[f"{scope}/{kind}/{name}"] = dict(state)
        return str(len(saved))

    async with contextlib.AsyncExitStack() as stack:
        save: Callable[..., Any]
        if key == "ag-floor":
            save = floor_save
        else:
            from foundry_checkpoint.emulator import EmulatorCredential
            from foundry_checkpoint_autogen import AutoGenStateStore

            store = AutoGenStateStore(
                store_prefix="bench",
                credential=EmulatorCredential("alice"),
                endpoint=clock.emulator.endpoint,
                **clock.emulator.client_kwargs(),
            )
            stack.push_async_callback(store.aclose)
            save = store.asave
        sequences: dict[str, list[str]] = {}
        for delay_ms in scale["delays_ms"]:
            name = f"counter/rt-{delay_ms}"
            phases: dict[str, tuple[list[float], list[int], list[int]]] = {
                "first 10": ([], [], []),
                "past 10": ([], [], []),
            }
            for i in range(1 + 10 + scale["saves"]):
                clock.set_delay(0 if i == 0 else delay_ms / 1000)
                clock.clear()
                start = time.perf_counter()
                await save("conv", "agent", name, {"count": i, "note": "z" * scale["payload"]})
                wall = time.perf_counter() - start
                log = clock.take()
                if i == 0:
                    continue  # opens the store
                phase = "first 10" if i < 10 else "past 10"
                chain, _ = longest_chain(log)
                walls, chains, calls = phases[phase]
                walls.append(wall)
                chains.append(chain)
                calls.append(len(log))
                sequences[phase] = waves(log)
            clock.set_delay(0)
            out["delays"][str(delay_ms)] = {
                phase: _summary(w, c, n, delay_ms / 1000) for phase, (w, c, n) in phases.items()
            }
        out["sequences"] = sequences
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
    """Run one subject's round-trip measurements in this process; returns its figures."""
    del workload, workdir, pg_dsn
    clock = _Clock(emulator)
    if subject_key.startswith("lg-"):
        return await _langgraph(subject_key, scale, clock)
    if subject_key.startswith("maf-"):
        return await _maf(subject_key, scale, clock)
    return await _autogen(subject_key, scale, clock)


# --------------------------------------------------------------------------- report

NAMES: dict[str, str] = {
    "lg-floor": "floor: InMemorySaver + one delay per saver call",
    "lg-fc-hosted": "**FoundryCheckpointer** hosted",
    "lg-lc-hosted": "FoundryCheckpointSaver (langchain-azure-ai)",
    "maf-floor": "floor: InMemoryCheckpointStorage + one delay per call",
    "maf-fc-hosted": "**FoundryCheckpointStorage** hosted",
    "maf-fh-hosted": "FoundryCheckpointStore (agent-framework-foundry-hosting)",
    "ag-floor": "floor: one delay per save",
    "ag-fc-hosted": "**AutoGenStateStore** hosted",
}


def _x(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def _net(fig: dict[str, Any] | None, idle: dict[str, Any] | None, delay_ms: float) -> float | None:
    """Round trips waited, net of the CPU: (ms - ms with no delay) / delay."""
    if not fig or not idle or not delay_ms:
        return None
    return float((fig["ms"] - idle["ms"]) / delay_ms)


def _cell(
    fig: dict[str, Any] | None,
    floor: dict[str, Any] | None,
    net: float | None,
    floor_net: float | None,
) -> list[str]:
    """ms, round trips waited net of CPU (x floor), longest chain (x floor)."""
    from ._report import _num

    if not fig:
        return ["-", "-", "-"]
    base = floor or {}
    return [
        _num(fig["ms"], 1),
        "-" if net is None else f"{net:.2f} ({_x(net, floor_net)})",
        f"{_num(fig['chain'], 1)} ({_x(fig['chain'], base.get('chain'))})",
    ]


def ratios(results: dict[str, Any]) -> dict[str, dict[str, tuple[float, float | None]]]:
    """Ours ÷ floor per delay and durability mode: ``(chain ratio, net waited ratio)``."""
    units = results.get("roundtrips", {})
    ours = (units.get("lg-fc-hosted") or {}).get("result") or {}
    floor = (units.get("lg-floor") or {}).get("result") or {}
    out: dict[str, dict[str, tuple[float, float | None]]] = {}
    for delay, modes in ours.get("delays", {}).items():
        base = floor.get("delays", {}).get(delay, {})
        if delay == "0":
            continue
        for mode in DURABILITY:
            if mode in modes and mode in base:
                net = _net(modes[mode], ours["delays"].get("0", {}).get(mode), float(delay))
                floor_net = _net(base[mode], floor["delays"].get("0", {}).get(mode), float(delay))
                out.setdefault(delay, {})[mode] = (
                    modes[mode]["chain"] / base[mode]["chain"],
                    net / floor_net if net is not None and floor_net else None,
                )
    return out


def _sequence_lines(section: Any, keys: Sequence[str], lines: list[str]) -> None:
    for subject in keys:
        r = section.result(subject)
        if not r:
            continue
        for label, calls in r.get("sequences", {}).items():
            if calls:
                lines.append(f"- {section.names[subject]}, {label}: " + " → ".join(calls))
    lines.append("")


def report_lines(
    results: dict[str, Any], scales: dict[str, Any], lines: list[str], number: int
) -> None:
    """The ``roundtrips`` section of RESULTS.md."""
    from ._report import _num, _Section, _table

    section = _Section(results, "roundtrips", NAMES)
    if not section.units:
        return
    scale = scales["roundtrips"]
    delays = [str(d) for d in scale["delays_ms"] if d]
    ran = section.ran()
    lines += [
        f"## {number}. Round trips per turn: every store request delayed",
        "",
        "The emulator's pure delay fault holds every storage request "
        + " or ".join(f"{d} ms" for d in delays)
        + " before serving it, as a network round trip would (the emulator in a process of "
        "its own; no other latency); each subject also ran with no delay, for its CPU time. "
        "*chain* = the longest chain of sequential requests, counted from each request's "
        "start and end on the emulator's side (the next request of a chain starts after the "
        "previous one ended; requests in flight together cost one wait): the round trips "
        "waited, counted. *net waited* = (ms - ms with no delay) ÷ delay: the same figure "
        "from the wall clock, net of client and emulator CPU (both share the machine's "
        "cores). The floor is the framework's own in-memory store with one delay slept per "
        "call, its chain counted from the sleeps the same way. Ratios divide by the floor at "
        "the same delay.",
        "",
        f"### {number}a. LangGraph chat turns by durability mode",
        "",
        f"The chat graph of section 1 ({scale['chars']}-character messages), one thread per "
        f"mode and delay, `ainvoke(..., durability=mode)`; the median of {scale['turns']} "
        f"turns after {scale['warmup']} warm-up turns (the first turn of a new thread, which "
        "creates its store, is shown apart below).",
        "",
    ]
    floor = section.result("lg-floor") or {}
    for delay in delays:
        rows = []
        for subject, r, _ in ran:
            if not subject.startswith("lg-"):
                continue
            modes = r["delays"].get(delay, {})
            idle = r["delays"].get("0", {})
            base = floor.get("delays", {}).get(delay, {})
            base_idle = floor.get("delays", {}).get("0", {})
            row = [section.names[subject]]
            for mode in DURABILITY:
                row += _cell(
                    modes.get(mode),
                    base.get(mode),
                    _net(modes.get(mode), idle.get(mode), float(delay)),
                    _net(base.get(mode), base_idle.get(mode), float(delay)),
                )
            rows.append(row)
        header = ["saver"]
        for mode in DURABILITY:
            header += [
                f"{mode}: ms/turn",
                f"{mode}: net waited (x floor)",
                f"{mode}: chain (x floor)",
            ]
        lines += [f"Delay {delay} ms:", ""]
        lines += _table(header, rows)
    summary = ratios(results)
    if summary:
        parts = []
        for delay, modes in summary.items():
            cells = ", ".join(
                f"{mode} {chain:.2f}x" + ("" if net is None else f" ({net:.2f}x net waited)")
                for mode, (chain, net) in modes.items()
            )
            parts.append(f"at {delay} ms: {cells}")
        worst = max(c for modes in summary.values() for c, _ in modes.values())
        nets = [n for modes in summary.values() for _, n in modes.values() if n is not None]
        lines += [
            "**FoundryCheckpointer hosted ÷ floor, round trips waited per chat turn** (chain "
            "counted; in parentheses the net waited from the wall clock, which also carries "
            "the scheduling delays of a loaded machine): "
            + "; ".join(parts)
            + f". Highest counted: {worst:.2f}x (limit 1.10x: "
            + ("met" if worst <= 1.10 else "**not met**")
            + ")"
            + (f"; net waited {min(nets):.2f}x-{max(nets):.2f}x." if nets else "."),
            "",
        ]
    idle_cells = []
    for subject, r, _ in ran:
        idle = r["delays"].get("0")
        if subject.startswith("lg-") and idle:
            idle_cells.append(
                f"{section.names[subject]} "
                + " / ".join(_num(idle[m]["ms"], 1) for m in DURABILITY if m in idle)
            )
    if idle_cells:
        lines += ["ms/turn with no delay (sync / async / exit): " + "; ".join(idle_cells) + ".", ""]
    rows = []
    for subject, r, _ in ran:
        if subject.startswith("lg-"):
            opened = r["delays"].get(delays[0], {}).get("open", {})
            rows.append(
                [section.names[subject]]
                + [
                    f"{opened[m]['chain']} ({opened[m]['calls']} calls)" if m in opened else "-"
                    for m in DURABILITY
                ]
            )
    lines += [f"First turn of a new thread (delay {delays[0]} ms): chain (requests):", ""]
    lines += _table(["saver", *DURABILITY], rows)
    lines += [
        "Requests of a turn at the largest delay in start order (→: one after the other; "
        "∥: in flight together):",
        "",
    ]
    _sequence_lines(section, ("lg-floor", "lg-fc-hosted", "lg-lc-hosted"), lines)

    lines += [
        f"### {number}b. Agent Framework supersteps",
        "",
        f"The workflow of section 7 ({scale['supersteps']} supersteps, one checkpoint each, "
        f"~{scale['payload']:,}-character message); {scale['runs']} runs on one context after "
        "a first run that opens it; per superstep: the median run's wall time ÷ supersteps, "
        "its chain ÷ supersteps.",
        "",
    ]
    floor = section.result("maf-floor") or {}
    rows = []
    for subject, r, _ in ran:
        if not subject.startswith("maf-"):
            continue
        row = [section.names[subject]]
        base_all = floor.get("delays", {})
        for delay in delays:
            fig = r["delays"].get(delay)
            row += _cell(
                fig,
                base_all.get(delay),
                _net(fig, r["delays"].get("0"), float(delay)),
                _net(base_all.get(delay), base_all.get("0"), float(delay)),
            )
            row.append(_num((fig or {}).get("calls"), 2))
        opened = r["delays"].get("open", {}).get(delays[0])
        row.append(f"{opened['chain']} ({opened['calls']} calls)" if opened else "-")
        rows.append(row)
    header = ["storage"]
    for delay in delays:
        header += [
            f"{delay} ms: ms/superstep",
            f"{delay} ms: net waited (x floor)",
            f"{delay} ms: chain (x floor)",
            f"{delay} ms: calls",
        ]
    lines += _table([*header, f"first run of a new context, {delays[0]} ms: chain"], rows)
    _sequence_lines(section, ("maf-fc-hosted", "maf-fh-hosted"), lines)

    lines += [
        f"### {number}c. AutoGen saves",
        "",
        "`AutoGenStateStore.asave` of one agent's state (~"
        f"{scale['payload']:,} characters) with `keep_versions=10` (the default): saves 2 to "
        f"10, then {scale['saves']} more, each of which also deletes the oldest version; the "
        "median save.",
        "",
    ]
    floor = section.result("ag-floor") or {}
    rows = []
    for subject, r, _ in ran:
        if not subject.startswith("ag-"):
            continue
        for delay in delays:
            phases = r["delays"].get(delay, {})
            idle = r["delays"].get("0", {})
            base = floor.get("delays", {}).get(delay, {})
            base_idle = floor.get("delays", {}).get("0", {})
            row = [section.names[subject], delay]
            for phase in ("first 10", "past 10"):
                row += _cell(
                    phases.get(phase),
                    base.get(phase),
                    _net(phases.get(phase), idle.get(phase), float(delay)),
                    _net(base.get(phase), base_idle.get(phase), float(delay)),
                )
            rows.append(row)
    lines += _table(
        [
            "store",
            "delay ms",
            "saves 2-10: ms",
            "net waited (x floor)",
            "chain (x floor)",
            "past 10: ms",
            "net waited (x floor)",
            "chain (x floor)",
        ],
        rows,
    )
    _sequence_lines(section, ("ag-fc-hosted",), lines)
    section.close(lines)
