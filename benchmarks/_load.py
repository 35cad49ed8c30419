"""Section "load": one hosted process serving many chat conversations at once.

A Foundry-hosted agent is one process with one checkpointer serving every conversation of
the replica. This unit runs that process: one saver in hosted mode against the emulator (a
process of its own) with every storage request delayed (``delay_s``, the emulator's pure-delay
fault, standing in for the network round trip), and ``levels`` concurrent conversations. Each
conversation is its own LangGraph thread and its own end user: every turn runs in a request
context carrying a platform call id the emulator resolves to that user, and the user id, as
the hosts set it (``azure.ai.agentserver.core.set_request_context``). The graph is the chat
graph of the LangGraph section (one ``assistant`` node, the history windowed to 20
messages), messages of ``chars`` characters, ``graph.ainvoke`` with LangGraph's default
durability (``"async"``).

The graph is driven in-process rather than through langchain-azure-ai's
``ResponsesHostServer`` over HTTP: on two shared cores an HTTP driver for 300 concurrent
conversations would be a third process competing for the same CPU as the host and the
emulator, and the host's own work per turn (its HTTP handling and response-store calls,
which are not the saver's) would set the ceiling being measured. The saver's work, its
store calls and its identity handling are the same in both.

Per level, every conversation runs turns back to back from its first one (which opens its
thread's store) on; the window opens once every conversation has finished its first turn, so
that they are not in step, and lasts ``seconds``. Figures over that window: turns per second
(turns that ended in it), p50 / p99 turn latency (turns that started in it), client CPU per
turn (this process's CPU time, every thread included, over the turns), cores used by the
caller's loop and by the saver's store-loop thread, the run-queue delay of this process's
threads (CPU they were ready to use while the machine's other work held the cores), the
emulator process's CPU and run-queue delay, the most sockets this process held open
(``/proc/self/fd``) and the most requests waiting for a connection of the savers' aiohttp
pools (read from the connectors, every 100 ms), and resident memory at the end.

The stalled-conversation case: at ``stall_level`` conversations, the requests of one
conversation's user are held ``stall_s`` each (a user-scoped delay fault armed before the
catch-all one) while the others run; the others' p99 is set beside the same run without the
stall, the two alternating ``stall_reps`` times.

Subjects: ``fc-hosted`` (``FoundryCheckpointer``) and ``lc-hosted`` (langchain-azure-ai's
``FoundryCheckpointSaver``, async-only: ``ainvoke`` is what this workload calls anyway), each
with the same credential, endpoint and emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

from ._common import hosted_saver, median, ms, percentile

__all__ = ["NAMES", "report_lines", "run_unit"]

NAMES = {
    "fc-hosted": "FoundryCheckpointer (hosted, emulator)",
    "lc-hosted": "langchain-azure-ai FoundryCheckpointSaver (hosted, emulator)",
}
#: Call ids minted per conversation and used in turn (each turn gets the next).
_CALLS_PER_CONVERSATION = 8
_SAMPLE_S = 0.1


def _sockets() -> int | None:
    """Sockets this process holds open (``/proc/self/fd``), or None off Linux."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    count = 0
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
    return count


def _rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _cpu_of(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``), or None."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rules(delay_s: float, stall_s: float, stall_user: str | None = None) -> list[dict[str, Any]]:
    """The emulator's fault rules: ``stall_user``'s requests held first, then everyone's delay."""
    rules: list[dict[str, Any]] = []
    if stall_user is not None:
        rules.append({"status": None, "delay": stall_s, "times": None, "user": stall_user})
    rules.append({"status": None, "delay": delay_s, "times": None})
    return rules


def _saver(subject: str, emulator: Any) -> contextlib.AbstractAsyncContextManager[Any]:
    # The container's own identity; each request's call id names its end user.
    return hosted_saver(subject != "fc-hosted", emulator, prefix="load", identity="agent")


def _threads() -> dict[int, tuple[str, float, float]]:
    """Per thread of this process: ``(name, CPU seconds, seconds runnable but not running)``.

    The second figure is the kernel's run-queue delay (``/proc/self/task/*/schedstat``): time
    a thread was ready to run and waited for a core (a thread waiting for the GIL sleeps, so
    it is not counted). Above zero, the machine's other work took CPU this process wanted.
    """
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    main = threading.main_thread().native_id
    out: dict[int, tuple[str, float, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid_text in tids:
        tid = int(tid_text)
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            sched = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        name = "caller loop" if tid == main else names.get(tid, "other")
        out[tid] = (name, (int(stat[11]) + int(stat[12])) / tick, int(sched[1]) / 1e9)
    return out


def _thread_figures(
    before: dict[int, tuple[str, float, float]],
    after: dict[int, tuple[str, float, float]],
    window: float,
) -> dict[str, Any]:
    """Cores used per named thread (the busiest ones) and cores' worth of run-queue wait."""
    used: dict[str, float] = {}
    waited = 0.0
    for tid, (name, cpu, wait) in after.items():
        cpu0, wait0 = before.get(tid, (name, 0.0, 0.0))[1:]
        key = "store loop" if name.startswith("foundry") else name
        if key not in ("caller loop", "store loop"):
            key = "other threads"
        used[key] = used.get(key, 0.0) + (cpu - cpu0) / window
        waited += (wait - wait0) / window
    return {"thread_cores": used, "runq_cores": waited}


def _emulator_runq(pid: int | None) -> float | None:
    """Seconds the emulator process's threads waited on the run queue so far, or None."""
    if pid is None:
        return None
    total = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1]) / 1e9
    except OSError:
        return None
    return total


def _pools() -> list[Any]:
    """The aiohttp connectors alive in this process (the savers' connection pools)."""
    try:
        import aiohttp
    except ImportError:
        return []
    return [o for o in gc.get_objects() if isinstance(o, aiohttp.BaseConnector)]


def _pool_state(pools: list[Any]) -> tuple[int, int]:
    """``(connections in use, requests waiting for one)`` over ``pools`` (aiohttp internals,
    read only; 0 when a version names them otherwise)."""
    used = waiting = 0
    for pool in pools:
        used += len(getattr(pool, "_acquired", ()))
        waiters = getattr(pool, "_waiters", {})
        with contextlib.suppress(AttributeError, TypeError):
            waiting += sum(len(queue) for queue in waiters.values())
    return used, waiting


class _Run:
    """One level: ``conversations`` concurrent conversations, measured for ``seconds``.

    Each conversation runs turns back to back from its first (warm-up) turn on; the window
    opens once every conversation has finished its first turn (so the conversations are not
    in step) and closes ``seconds`` later; then each finishes the turn it is in and stops.
    """

    def __init__(
        self,
        graph: Any,
        emulator: Any,
        *,
        label: str,
        conversations: int,
        seconds: float,
        chars: int,
        delay_s: float,
        stall_s: float,
        stalled: int | None = None,
    ) -> None:
        self.graph = graph
        self.emulator = emulator
        self.label = label
        self.conversations = conversations
        self.seconds = seconds
        self.chars = chars
        self.stalled = stalled
        self.delay_s, self.stall_s = delay_s, stall_s
        self.start = self.deadline = float("inf")
        self.stop = False
        self.turns: list[list[tuple[float, float]]] = [[] for _ in range(conversations)]
        self.warmed = 0
        self.all_warm = asyncio.Event()
        self.errors: list[str] = []

    def user(self, i: int) -> str:
        return f"{self.label}-user-{i}"

    async def _conversation(self, i: int, calls: list[str]) -> None:
        from azure.ai.agentserver.core import (
            FoundryAgentRequestContext,
            reset_request_context,
            set_request_context,
        )
        from langchain_core.messages import HumanMessage

        from ._langgraph import _Text

        text = _Text(seed=1000 + i)
        config = {"configurable": {"thread_id": f"{self.label}-thread-{i}"}}
        turn = 0
        while not self.stop:
            context = FoundryAgentRequestContext(
                call_id=calls[turn % len(calls)],
                user_id=self.user(i),
                session_id=f"{self.label}-session-{i}",
            )
            message = HumanMessage(text(self.chars))
            token = set_request_context(context)
            began = time.perf_counter()
            try:
                state = await self.graph.ainvoke({"messages": [message]}, config)
            except Exception as exc:  # a failed turn is reported, not hidden
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                return
            finally:
                reset_request_context(token)
            ended = time.perf_counter()
            if state["messages"][-2].content != message.content:
                self.errors.append(f"conversation {i} read back another history")
                return
            turn += 1
            if turn == 1:
                self.warmed += 1
                if self.warmed == self.conversations:
                    self.all_warm.set()
            else:
                self.turns[i].append((began, ended))
            if ended >= self.deadline:
                return

    async def run(self) -> dict[str, Any]:
        users = [self.user(i) for i in range(self.conversations)]
        minted = self.emulator.mint_calls(users, _CALLS_PER_CONVERSATION)
        tasks = [
            asyncio.create_task(self._conversation(i, minted[users[i]]))
            for i in range(self.conversations)
        ]
        warm_began = time.perf_counter()
        waiter = asyncio.create_task(self.all_warm.wait())
        await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if not self.all_warm.is_set():  # a conversation failed before warming up
            waiter.cancel()
            self.stop = True
            await asyncio.gather(*tasks, return_exceptions=True)
            return {"errors": self.errors[:5]}
        warm_s = time.perf_counter() - warm_began
        if self.stalled is not None:
            self.emulator.set_faults(
                _rules(self.delay_s, self.stall_s, stall_user=self.user(self.stalled))
            )
        pools = _pools()
        threads0 = _threads()
        emulator_cpu0 = _cpu_of(self.emulator.pid)
        emulator_wait0 = _emulator_runq(self.emulator.pid)
        cpu0 = time.process_time()
        self.start = time.perf_counter()
        self.deadline = self.start + self.seconds
        peak_sockets = peak_used = peak_waiting = 0
        waiting_samples: list[int] = []
        while time.perf_counter() < self.deadline:
            await asyncio.sleep(_SAMPLE_S)
            peak_sockets = max(peak_sockets, _sockets() or 0)
            used, waiting = _pool_state(pools)
            peak_used, peak_waiting = max(peak_used, used), max(peak_waiting, waiting)
            waiting_samples.append(waiting)
        cpu = time.process_time() - cpu0
        threads1 = _threads()
        emulator_cpu1 = _cpu_of(self.emulator.pid)
        emulator_wait1 = _emulator_runq(self.emulator.pid)
        window = time.perf_counter() - self.start
        self.stop = True
        if self.stalled is not None:
            # Release the held conversation so that its last turn ends soon.
            self.emulator.set_faults(_rules(self.delay_s, self.stall_s))
        sockets_end = _sockets()
        await asyncio.gather(*tasks)
        out = self._figures(window=window, cpu=cpu, warm_s=warm_s)
        out.update(
            _thread_figures(threads0, threads1, window),
            emulator_cores=(
                None
                if emulator_cpu0 is None or emulator_cpu1 is None
                else (emulator_cpu1 - emulator_cpu0) / window
            ),
            emulator_runq_cores=(
                None
                if emulator_wait0 is None or emulator_wait1 is None
                else (emulator_wait1 - emulator_wait0) / window
            ),
            peak_sockets=peak_sockets,
            sockets_end=sockets_end,
            pool_peak_in_use=peak_used,
            pool_peak_waiting=peak_waiting,
            pool_mean_waiting=(
                sum(waiting_samples) / len(waiting_samples) if waiting_samples else 0.0
            ),
            rss_mb=_rss_mb(),
        )
        return out

    def _figures(self, *, window: float, cpu: float, warm_s: float) -> dict[str, Any]:
        others = [i for i in range(self.conversations) if i != self.stalled]
        ended = [
            e
            for i in range(self.conversations)
            for _, e in self.turns[i]
            if self.start <= e <= self.deadline
        ]
        latencies = [
            e - b for i in others for b, e in self.turns[i] if self.start <= b < self.deadline
        ]
        turns = len(ended)
        out: dict[str, Any] = {
            "conversations": self.conversations,
            "window_s": window,
            "warm_s": warm_s,
            "turns": turns,
            "turns_per_s": turns / window,
            "latency_turns": len(latencies),
            "p50_ms": ms(median(latencies)),
            "p99_ms": ms(percentile(latencies, 99)),
            "max_ms": ms(max(latencies)) if latencies else None,
            "cpu_ms_per_turn": ms(cpu / turns) if turns else None,
            "client_cores": cpu / window,
            "errors": self.errors[:5],
        }
        if self.stalled is not None:
            stalled = self.turns[self.stalled]
            out["stalled_turns"] = len([1 for b, _ in stalled if self.start <= b < self.deadline])
        return out


async def load(subject: str, emulator: Any, scale: dict[str, Any]) -> dict[str, Any]:
    """Every level, then the stall pairs; figures per run."""
    from ._langgraph import _chat_graph

    delay_s, stall_s = float(scale["delay_s"]), float(scale["stall_s"])
    seconds, chars = float(scale["seconds"]), int(scale["chars"])
    out: dict[str, Any] = {
        "delay_s": delay_s,
        "stall_s": stall_s,
        "seconds": seconds,
        "chars": chars,
        "levels": {},
        "stall": {"level": int(scale["stall_level"]), "base": [], "stalled": []},
    }
    emulator.set_faults(_rules(delay_s, stall_s))
    async with _saver(subject, emulator) as saver:
        graph = _chat_graph(saver, windowed=True, reply_chars=chars)
        emulator.reset()
        for level in scale["levels"]:
            run = _Run(
                graph,
                emulator,
                label=f"l{level}",
                conversations=int(level),
                seconds=seconds,
                chars=chars,
                delay_s=delay_s,
                stall_s=stall_s,
            )
            out["levels"][str(level)] = await run.run()
        out["requests"] = emulator.counts().get("requests", {})
        level = int(scale["stall_level"])
        for rep in range(int(scale["stall_reps"])):
            for kind in ("base", "stalled"):
                run = _Run(
                    graph,
                    emulator,
                    label=f"s{rep}{kind[0]}",
                    conversations=level,
                    seconds=seconds,
                    chars=chars,
                    delay_s=delay_s,
                    stall_s=stall_s,
                    stalled=0 if kind == "stalled" else None,
                )
                out["stall"][kind].append(await run.run())
    emulator.set_faults([])
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
    """Run the load workload for one saver (hosted only)."""
    if emulator is None:
        return {"skipped": "needs the emulator"}
    if subject_key == "lc-hosted":
        try:
            import langchain_azure_ai.agents.hosting  # noqa: F401
        except ImportError as exc:
            return {"skipped": f"langchain-azure-ai[hosting] not installed: {exc}"}
    return await load(subject_key, emulator, scale)


# --------------------------------------------------------------------------- report


def _cores(f: dict[str, Any]) -> str:
    """``total (caller loop / store loop)`` cores of the client process."""
    from ._report import _num

    threads = f.get("thread_cores") or {}
    total = _num(f.get("client_cores"))
    if "store loop" in threads:
        return f"{total} ({_num(threads.get('caller loop'))} / {_num(threads.get('store loop'))})"
    return total


def report_lines(
    results: dict[str, Any], scales: dict[str, Any], lines: list[str], number: int
) -> None:
    """Render the section as number ``number`` (nothing when it did not run)."""
    from ._report import _num, _table

    units = results.get("load", {})
    ran = {
        s: u["result"]
        for s, u in units.items()
        if isinstance(u.get("result"), dict) and "levels" in u["result"]
    }
    notes = [
        f"{NAMES.get(s, s)}: " + (u.get("error") or u.get("result", {}).get("skipped", "?"))
        for s, u in units.items()
        if s not in ran
    ]
    if not ran and not notes:
        return
    first: dict[str, Any] = next(iter(ran.values()), {})
    lines += [
        f"## {number}. Many conversations in one hosted process",
        "",
        "One process, one saver in hosted mode against the emulator (another process) with "
        f"every storage request delayed {_num(ms(first.get('delay_s', 0)), 0)} ms; N "
        "concurrent LangGraph chat conversations, each its own thread and its own end user "
        "(a platform call id per turn, resolved by the emulator, and the user id, in the "
        "request context as the hosts set it), turns back to back; figures over a "
        f"{_num(first.get('seconds'), 0)} s window that opens once every conversation has "
        f"run its first turn. Messages of {first.get('chars')} characters, history windowed "
        "to 20 messages, `ainvoke` with the default durability. Cores are CPU seconds per "
        "second of the window: the client process (its caller loop / the saver's store "
        "loop thread), and the emulator; *waited* is the run-queue delay of the process's "
        "threads in cores (ready to run, no core free: CPU the machine's other work took); "
        "sockets and the pool's waiting requests are the most seen in 100 ms samples.",
        "",
    ]
    rows = []
    for subject, r in ran.items():
        for level, f in r["levels"].items():
            name = NAMES.get(subject, subject)
            if "turns" not in f:
                rows.append([name, level, "failed: " + "; ".join(f.get("errors", []))])
                continue
            rows.append(
                [
                    name,
                    level,
                    _num(f["turns_per_s"], 1),
                    _num(f["p50_ms"], 0),
                    _num(f["p99_ms"], 0),
                    _num(f["p99_ms"] / f["p50_ms"] if f["p50_ms"] else None),
                    _num(f["cpu_ms_per_turn"], 1),
                    _cores(f),
                    _num(f.get("runq_cores")),
                    _num(f.get("emulator_cores")),
                    _num(f.get("emulator_runq_cores")),
                    f"{f['peak_sockets']} / {f.get('pool_peak_waiting', '-')}",
                    _num(f["rss_mb"], 0),
                ]
            )
    lines += _table(
        [
            "saver",
            "conversations",
            "turns/s",
            "p50 ms",
            "p99 ms",
            "p99/p50",
            "client CPU ms/turn",
            "client cores (caller / store loop)",
            "client waited",
            "emulator cores",
            "emulator waited",
            "sockets / pool waiting (max)",
            "RSS MB",
        ],
        rows,
    )
    stall_rows = []
    for subject, r in ran.items():
        st = r["stall"]
        name = NAMES.get(subject, subject)
        for kind in ("base", "stalled"):
            for rep, f in enumerate(st[kind]):
                if "turns" not in f:
                    stall_rows.append([name, f"{kind} #{rep + 1}", "failed", "", "", "", ""])
                    continue
                stall_rows.append(
                    [
                        name,
                        ("without the stall" if kind == "base" else "one stalled") + f" #{rep + 1}",
                        _num(f["turns_per_s"], 1),
                        _num(f["p50_ms"], 0),
                        _num(f["p99_ms"], 0),
                        _num(f.get("runq_cores")),
                        str(f.get("stalled_turns", "-")),
                    ]
                )
        base = [f["p99_ms"] for f in st["base"] if "p99_ms" in f]
        held = [f["p99_ms"] for f in st["stalled"] if "p99_ms" in f]
        if base and held:
            stall_rows.append(
                [
                    name,
                    "**others' p99: stalled / not (medians)**",
                    "",
                    "",
                    f"**{median(held) / median(base):.2f}x**",
                    "",
                    "",
                ]
            )
    if stall_rows:
        level = first["stall"]["level"]
        lines += [
            f"Stalled conversation: {level} conversations; in the stalled runs the requests of "
            f"one of them are held {_num(first['stall_s'], 0)} s each (a delay fault scoped to "
            f"its user, armed as the window opens) while the {level - 1} others run. Runs "
            "without and with the stall alternate; p50 / p99 are the others' turns.",
            "",
        ]
        lines += _table(
            [
                "saver",
                "run",
                "turns/s",
                "p50 ms",
                "p99 ms",
                "client waited",
                "stalled conversation's turns",
            ],
            stall_rows,
        )
    for note in notes:
        lines.append(f"- {note}")
    if notes:
        lines.append("")
