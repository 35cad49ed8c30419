"""RESULTS.md: machine facts, then one table per workload, ratios and counts side by side."""

from __future__ import annotations

import datetime
import math
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ._targets import before_after_lines, targets_lines

__all__ = ["machine_info", "write_report"]

_PACKAGES = (
    "foundry-checkpoint",
    "azure-ai-agentserver-core",
    "azure-core",
    "aiohttp",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "aiosqlite",
    "langgraph-checkpoint-postgres",
    "psycopg",
    "agent-framework-core",
    "agent-framework-foundry-hosting",
)

_LG_NAMES = {
    "memory": "InMemorySaver",
    "sqlite": "AsyncSqliteSaver",
    "postgres": "AsyncPostgresSaver",
    "fc-local": "**FoundryCheckpointer** local (embedded SQLite, default)",
    "fc-sdk": '**FoundryCheckpointer** local_backend="sdk"',
    "fc-hosted": "**FoundryCheckpointer** hosted (emulator)",
}
_MAF_NAMES = {
    "memory": "InMemoryCheckpointStorage",
    "file": "FileCheckpointStorage",
    "fc-local": "**FoundryCheckpointStorage** local (embedded SQLite, default)",
    "fc-sdk": '**FoundryCheckpointStorage** local_backend="sdk"',
    "fc-hosted": "**FoundryCheckpointStorage** hosted (emulator)",
    "fh-hosted": "FoundryCheckpointStore (agent-framework-foundry-hosting, emulator)",
}
_CALLS = {
    "get_store": "store",
    "create_store": "mkstore",
    "update_store": "upd",
    "delete_store": "rmstore",
    "create_item": "create",
    "put_item": "put",
    "get_item": "get",
    "delete_item": "del",
    "list_keys": "list",
    "greatest": "rank",
}


# --------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def machine_info() -> dict[str, Any]:
    """Machine, interpreter and package versions, and the date."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    memory = _memory_gib()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory": f"{memory:.1f} GiB" if memory else "unknown",
        "os": platform.platform(),
        "python": platform.python_version(),
        "commit": _commit(),
        "packages": versions,
    }


# --------------------------------------------------------------------------- formatting


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}f}"


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0 or math.isnan(value) or math.isnan(base):
        return "-"
    return f"{value / base:.2f}x"


def _kb(value: float | None) -> str:
    return "-" if value is None else _num(value / 1024, 1)


def _requests(requests: dict[str, float] | None) -> str:
    if not requests:
        return "-"
    total = sum(requests.values())
    parts = ", ".join(f"{_CALLS.get(k, k)} {_num(v, 1)}" for k, v in requests.items())
    return f"{_num(total, 1)} ({parts})"


def _table(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


class _Section:
    """The units of one section, with helpers to skip what did not run."""

    def __init__(
        self, results: dict[str, dict[str, Any]], name: str, names: dict[str, str]
    ) -> None:
        self.units = results.get(name, {})
        self.names = names
        self.notes: list[str] = []

    def ran(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """``(subject, result, unit)`` for each unit that produced figures; notes the rest."""
        out = []
        for subject, unit in self.units.items():
            label = self.names.get(subject, subject).replace("**", "")
            if "error" in unit:
                self.notes.append(f"{label}: failed: {unit['error']}")
                continue
            result = unit.get("result", {})
            if "skipped" in result:
                self.notes.append(f"{label}: not measured: {result['skipped']}")
                continue
            out.append((subject, result, unit))
        return out

    def result(self, subject: str) -> dict[str, Any] | None:
        unit = self.units.get(subject) or {}
        result = unit.get("result")
        if not isinstance(result, dict) or "skipped" in result:
            return None
        return result

    def close(self, lines: list[str]) -> None:
        for note in self.notes:
            lines.append(f"- {note}")
        if self.notes:
            lines.append("")


def _stored(per: dict[str, Any]) -> str:
    """Item (or database) bytes, plus spilled bytes when there were any."""
    base = per.get("item_bytes", per.get("db_bytes"))
    spill = per.get("spill_bytes")
    if base is None:
        return "-"
    if spill:
        return f"{_kb(base + spill)} (spilled {_kb(spill)})"
    return _kb(base)


def _spread(values: Sequence[float]) -> str:
    if len(values) < 2:
        return "-"
    mid = sorted(values)[len(values) // 2]
    return f"±{(max(values) - min(values)) / 2 / mid * 100:.0f}%" if mid else "-"


def _rss(unit: dict[str, Any]) -> str:
    peak, base = unit.get("rss_peak_mb"), unit.get("rss_base_mb")
    if peak is None or base is None:
        return "-"
    return f"{_num(peak, 0)} (+{_num(peak - base, 0)})"


# --------------------------------------------------------------------------- sections


def _lg_chat(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    _chat_section(results, scales, lines, "lg-chat", "1.")


def _lg_chat_800(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    """The chat with short (800-character) messages: per-call overhead, not bytes, dominates."""
    _chat_section(results, scales, lines, "lg-chat-800", "1b.")


def _chat_section(
    results: dict[str, Any], scales: dict[str, Any], lines: list[str], key: str, number: str
) -> None:
    section = _Section(results, key, _LG_NAMES)
    if not section.units:
        return
    scale = scales[key]
    mem, sql = section.result("memory"), section.result("sqlite")
    mem_ms = mem["mean_ms"] if mem else None
    sql_ms = sql["mean_ms"] if sql else None
    history = next((r["history_bytes"] for _, r, _ in section.ran()), None)
    lines += [
        f"## {number} LangGraph chat thread, {scale['chars']:,}-character messages: "
        f"{scale['steps']} turns, history grows to {_kb(history)} KB",
        "",
        f"One `assistant` node (`add_messages`); each turn = one `ainvoke` with a "
        f"{scale['chars']}-character user message, answered by a {scale['chars']}-character "
        f"assistant message; 3 checkpoints and 2 `put_writes` per turn. Median of "
        f"{scale['reps']} runs"
        + (
            f" (the SDK backend: {scale['sdk_reps']}, stopped after {scale['sdk_budget_s']} s)"
            if section.result("fc-sdk")
            else ""
        )
        + ". *serialized* = bytes the saver asked LangGraph's "
        "serializer for; *stored* = item value bytes written (Foundry), database growth "
        "(SQLite file, PostgreSQL `pg_database_size`, after TOAST compression).",
        "",
    ]
    rows = []
    for subject, r, unit in section.ran():
        per = r["per_step"]
        steps = f"{r['steps']}" + (" (capped)" if r["capped"] else "")
        rows.append(
            [
                section.names[subject],
                steps,
                _num(r["mean_ms"]),
                _spread(r.get("rep_mean_ms", [])),
                _num(r["last20_ms"]),
                _ratio(r["mean_ms"], mem_ms),
                _ratio(r["mean_ms"], sql_ms),
                _kb(per.get("serde_bytes")),
                _stored(per),
                _num(per.get("items"), 1) if "items" in per else "-",
                _requests(per.get("requests")),
                _rss(unit),
            ]
        )
    lines += _table(
        [
            "saver",
            "turns",
            "ms/turn",
            "run spread",
            "ms/turn, last 20",
            "x InMemory",
            "x AsyncSqlite",
            "serialized KB/turn",
            "stored KB/turn",
            "items/turn",
            "store calls/turn",
            "peak RSS MB (+workload)",
        ],
        rows,
    )
    section.close(lines)


def _lg_growth(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    section = _Section(results, "lg-growth", _LG_NAMES)
    if not section.units:
        return
    scale = scales["lg-growth"]
    sql = section.result("sqlite")
    lines += [
        f"## 2. Thread length: per-turn cost up to {scale['steps']:,} turns",
        "",
        f"The same graph with the history trimmed to the last 20 messages "
        f"({scale['chars']}-character messages, ~{20 * scale['chars'] // 1000} KB of state), "
        "so only the number of checkpoints in the thread grows (3 per turn). *first 100* = "
        "mean over turns 1-100 (a 100-turn thread); *at 100* = median of turns 81-100; "
        "*all* = mean over every turn run; *last 20* = median of the last 20 turns run. "
        f"Median of {scale['reps']} runs; hosted mode ran {scale.get('hosted_reps', 1)} "
        f"time(s), the SDK backend once, stopped after {scale['sdk_budget_s']} s.",
        "",
    ]
    rows = []
    for subject, r, unit in section.ran():
        steps = f"{r['steps']}" + (" (capped)" if r["capped"] else "")
        base = sql or {}
        rows.append(
            [
                section.names[subject],
                steps,
                _num(r["first100_ms"]),
                _ratio(r["first100_ms"], base.get("first100_ms")),
                _num(r["at100_ms"]),
                _ratio(r["at100_ms"], base.get("at100_ms")),
                _num(r["mean_ms"]),
                _ratio(r["mean_ms"], base.get("mean_ms")) if not r["capped"] else "-",
                _num(r["last20_ms"]),
                _ratio(r["last20_ms"], base.get("last20_ms")) if not r["capped"] else "-",
                _spread(r.get("rep_mean_ms", [])),
                _requests(r["per_step"].get("requests")),
                _rss(unit),
            ]
        )
    lines += _table(
        [
            "saver",
            "turns",
            "first 100 ms/turn",
            "x Sqlite",
            "at 100 ms/turn",
            "x Sqlite",
            "all ms/turn",
            "x Sqlite",
            "last 20 ms/turn",
            "x Sqlite",
            "run spread",
            "store calls/turn",
            "peak RSS MB (+workload)",
        ],
        rows,
    )
    ran = section.ran()
    if ran:
        bucket = max(1, scale["steps"] // 10)
        lines += [
            f"Mean ms/turn per block of {bucket} turns (turns 1-{bucket}, "
            f"{bucket + 1}-{2 * bucket}, …), p90 and worst turn:",
            "",
        ]
        for subject, r, _ in ran:
            blocks = " · ".join(_num(b, 1) for b in r.get("buckets_ms", []))
            lines.append(
                f"- {section.names[subject]}: {blocks}; p90 {_num(r.get('p90_ms'))}, "
                f"worst {_num(r.get('max_ms'))}"
            )
        lines.append("")
    section.close(lines)


def _lg_read(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    section = _Section(results, "lg-read", _LG_NAMES)
    if not section.units:
        return
    scale = scales["lg-read"]
    sizes = [str(s) for s in scale["sizes"]]
    lines += [
        "## 3. Latest state (`aget_tuple` without a checkpoint id) by thread length",
        "",
        "Threads of " + " / ".join(f"{int(s):,}" for s in sizes) + " checkpoints (~1 KB "
        "each): the older ones written in one burst, the ten newest a second after them "
        "(store timestamps are whole seconds), so the threads differ in length only. "
        f"Median of {scale['reads']} reads (SDK backend: {scale['sdk_reads']}); "
        "*calls* = store requests per read (hosted: counted by the emulator). ✓ = every read "
        "returned the newest checkpoint.",
        "",
    ]
    for key, title in (("latest", None), ("list10", "## 4. `alist(limit=10)` by thread length")):
        if title:
            lines += [title, "", "Same threads; ✓ = the 10 newest, newest first.", ""]
        sql = section.result("sqlite")
        rows = []
        for subject, r, _unit in section.ran():
            row = [section.names[subject]]
            for size in sizes:
                cell = r["sizes"].get(size)
                if cell is None:
                    row += ["-", "-"]
                    continue
                base = (sql or {}).get("sizes", {}).get(size, {}).get(key, {}).get("ms")
                fig = cell[key]
                count = cell["checkpoints"]
                capped = f" ({count} written)" if count < int(size) else ""
                row.append(
                    f"{_num(fig['ms'], 3)} ({_ratio(fig['ms'], base)}){capped}"
                    + ("" if fig["correct"] else " **wrong**")
                )
                row.append(_requests(fig.get("requests")))
            row.append("✓" if all(c[key]["correct"] for c in r["sizes"].values()) else "**no**")
            rows.append(row)
        header = ["saver"]
        for size in sizes:
            header += [f"{int(size):,}: ms (x Sqlite)", f"{int(size):,}: calls"]
        lines += _table([*header, "correct"], rows)
    _burst_lines(section, sizes[-1], lines)
    section.close(lines)


def _burst_lines(section: _Section, size: str, lines: list[str]) -> None:
    """The page of the largest thread read right after its burst, before its ten newest."""
    rows = []
    base = (section.result("sqlite") or {}).get("burst", {}).get("ms")
    for subject, r, _unit in section.ran():
        fig = r.get("burst")
        if fig:
            rows.append(
                [
                    section.names[subject],
                    f"{_num(fig['ms'], 3)} ({_ratio(fig['ms'], base)})",
                    _requests(fig.get("requests")),
                    "✓" if fig["correct"] else "**no**",
                ]
            )
    if not rows:
        return
    lines += [
        f"The {int(size):,}-checkpoint thread paged right after its burst, before the ten "
        "newest were added: its ten newest then share a store second with every checkpoint "
        "written in that second, and a listing of the service orders a second by item id, "
        "not by time, so it reads every key of that second (about one listing per 100 keys); "
        "the embedded store ranks by checkpoint id in one call.",
        "",
        *_table(["saver", "ms (x Sqlite)", "calls", "correct"], rows),
    ]


def _lg_big(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    section = _Section(results, "lg-big", _LG_NAMES)
    if not section.units:
        return
    scale = scales["lg-big"]
    sql = section.result("sqlite") or {}
    lines += [
        f"## 5. A {scale['bytes'] / 2**20:.0f} MB state: put, then get of the latest",
        "",
        f"One channel holding {scale['bytes'] / 2**20:.0f} MB of random (incompressible) "
        f"bytes; median of {scale['reps']} put/get pairs, each a new version. Foundry items "
        "are limited to 1 MB, so our saver spills the payload (blob first) and stores a "
        "reference; hosted mode used the spill store named below.",
        "",
    ]
    rows = []
    for subject, r, unit in section.ran():
        per = r["per_put"]
        rows.append(
            [
                section.names[subject],
                _num(r["put_ms"]),
                _ratio(r["put_ms"], sql.get("put_ms")),
                _num(r["get_ms"]),
                _ratio(r["get_ms"], sql.get("get_ms")),
                _stored(per),
                _requests(per.get("requests")),
                r.get("spill", "-" if not subject.startswith("fc-") else "LocalSpill (default)"),
                "✓" if r["correct"] else "**no**",
                _rss(unit),
            ]
        )
    lines += _table(
        [
            "saver",
            "put ms",
            "x Sqlite",
            "get ms",
            "x Sqlite",
            "stored KB/put",
            "store calls/put+get",
            "spill",
            "round trip",
            "peak RSS MB (+workload)",
        ],
        rows,
    )
    section.close(lines)


def _store(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    eng = _Section(results, "engine", {"engine": "StateEngine"})
    sdk = _Section(results, "sdk-store", {"sdk": "FoundryStateStore local mode"})
    if not eng.units and not sdk.units:
        return
    lines += [
        "## 6. The store itself: embedded engine vs the SDK's local mode",
        "",
    ]
    engine_ran = eng.ran()
    if engine_ran:
        _, r, unit = engine_ran[0]
        lines += [
            f"`StateEngine` (the embedded default and the emulator's engine) on one file, one "
            f"store, items of ~{r['value_bytes']:,} bytes (JSON), median of {r['ops']} calls "
            f"at each size (µs). *latest page* = `list_keys(tags, order=desc, limit=100)`, "
            'the lookup behind "latest"; *latest 1* = the same with `limit=1`; '
            "*EngineStore.set_item* = the async face the adapters call (one worker-thread "
            f"hop). Filling took {r['fill_s']:.0f} s; the database ended at "
            f"{r['db_mb']:.0f} MB. Peak RSS {_rss(unit)} MB.",
            "",
        ]
        sizes = list(r["sizes"])
        small = r["sizes"][sizes[0]]
        rows = []
        for size in sizes:
            c = r["sizes"][size]
            rows.append(
                [
                    f"{int(size):,}",
                    _num(c["put_new_us"], 0) + f" ({_ratio(c['put_new_us'], small['put_new_us'])})",
                    _num(c["put_replace_us"], 0),
                    _num(c["get_us"], 0),
                    _num(c["latest_page_us"], 0),
                    _num(c["latest_one_us"], 0),
                    _num(c["face_set_us"], 0),
                ]
            )
        lines += _table(
            [
                "items in store",
                "put_item, new key (x at 10)",
                "put_item, replace",
                "get_item",
                "latest page",
                "latest 1",
                "EngineStore.set_item",
            ],
            rows,
        )
    sdk_ran = sdk.ran()
    if sdk_ran:
        _, s, unit = sdk_ran[0]
        engine_sizes = engine_ran[0][1]["sizes"] if engine_ran else {}
        lines += [
            f'`FoundryStateStore` local mode (`local_backend="sdk"` without our lock), the '
            f"same items, median of {s['ops']} calls (µs). It rewrites its whole JSON file on "
            "every write and re-reads it on every call."
            + (f" {s['cap_note']}." if s.get("capped") else "")
            + f" Peak RSS {_rss(unit)} MB.",
            "",
        ]
        rows = []
        for size, c in s["sizes"].items():
            eng_put = engine_sizes.get(size, {}).get("face_set_us")
            rows.append(
                [
                    f"{int(size):,}",
                    _num(c["put_new_us"], 0),
                    _ratio(c["put_new_us"], eng_put) if eng_put else "-",
                    _num(c["get_us"], 0),
                    _num(c["latest_page_us"], 0),
                    _num(c["file_mb"], 2),
                ]
            )
        lines += _table(
            [
                "items in store",
                "set_item",
                "x EngineStore.set_item",
                "get_item",
                "latest page",
                "file MB",
            ],
            rows,
        )
    eng.close(lines)
    sdk.close(lines)


def _maf_run(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    section = _Section(results, "maf-run", _MAF_NAMES)
    if not section.units:
        return
    scale = scales["maf-run"]
    mem, fil = section.result("memory"), section.result("file")
    lines += [
        f"## 7. Agent Framework workflow: {scale['supersteps']} supersteps",
        "",
        f"One executor sends itself a ~{scale['payload']:,}-character message for "
        f"{scale['supersteps']} supersteps (one checkpoint each); each run on a fresh "
        f"context. Median of {scale['reps']} runs after a warm-up run.",
        "",
    ]
    rows = []
    for subject, r, unit in section.ran():
        per = r["per_superstep"]
        rows.append(
            [
                section.names[subject],
                _num(r["ms_per_superstep"], 3),
                _ratio(r["ms_per_superstep"], mem["ms_per_superstep"] if mem else None),
                _ratio(r["ms_per_superstep"], fil["ms_per_superstep"] if fil else None),
                str(r["checkpoints"]),
                _kb(per.get("item_bytes")),
                _requests(per.get("requests")),
                _rss(unit),
            ]
        )
    lines += _table(
        [
            "storage",
            "ms/superstep",
            "x InMemory",
            "x File",
            "checkpoints",
            "stored KB/superstep",
            "store calls/superstep",
            "peak RSS MB (+workload)",
        ],
        rows,
    )
    section.close(lines)


def _maf_latest(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    section = _Section(results, "maf-latest", _MAF_NAMES)
    if not section.units:
        return
    scale = scales["maf-latest"]
    sizes = [str(s) for s in scale["sizes"]]
    fil = section.result("file") or {}
    lines += [
        "## 8. Agent Framework `get_latest` by history length",
        "",
        "A lineage of " + " / ".join(f"{int(s):,}" for s in sizes) + " checkpoints (~1 KB "
        "state each), the newest saved a second after the rest. Median of "
        f"{scale['reads']} calls ({scale['slow_reads']} at 1,000); *calls* = store requests "
        "per `get_latest`. ✓ = the newest checkpoint every time.",
        "",
    ]
    rows = []
    for subject, r, unit in section.ran():
        row = [section.names[subject]]
        for size in sizes:
            cell = r["sizes"].get(size)
            if cell is None:
                row += ["-", "-"]
                continue
            base = fil.get("sizes", {}).get(size, {}).get("ms")
            capped = f" ({cell['checkpoints']} saved)" if cell["checkpoints"] < int(size) else ""
            row.append(f"{_num(cell['ms'], 3)} ({_ratio(cell['ms'], base)}){capped}")
            row.append(_requests(cell.get("requests")))
        row.append("✓" if all(c["correct"] for c in r["sizes"].values()) else "**no**")
        row.append(_rss(unit))
        rows.append(row)
    header = ["storage"]
    for size in sizes:
        header += [f"{int(size):,}: ms (x File)", f"{int(size):,}: calls"]
    lines += _table([*header, "correct", "peak RSS MB (+workload)"], rows)
    section.close(lines)


def _hosted_threads(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    unit = results.get("hosted-threads", {}).get("fc-hosted") or {}
    r = unit.get("result")
    if not isinstance(r, dict) or "skipped" in r:
        return
    marks = sorted(r["marks"], key=int)
    first, last = r["marks"][marks[0]], r["marks"][marks[-1]]
    calls = sum(r["requests"].values())
    lines += [
        f"## 9. One hosted process serving {r['threads']:,} threads",
        "",
        f"`FoundryCheckpointer()` with no credential (the default, `DefaultAzureCredential`; "
        "its class replaced by one that counts constructions and signs emulator tokens) against "
        f"the emulator; each thread served in its own request context for one of {r['users']} "
        "users, one checkpoint written and read back. Descriptors and resident memory of the "
        "process after each mark (`/proc/self`).",
        "",
    ]
    rows = [
        [
            f"{int(m):,}",
            str(r["marks"][m]["fds"]),
            _num(r["marks"][m]["rss_mb"], 1),
            _num(r["marks"][m]["s"], 1),
        ]
        for m in marks
    ]
    lines += _table(["threads served", "open descriptors", "RSS MB", "elapsed s"], rows)
    lines += [
        f"Credentials constructed: {r['credentials']}. From thread {int(marks[0]):,} to "
        f"{int(marks[-1]):,}: descriptors {first['fds']} → {last['fds']}, RSS "
        f"{last['rss_mb'] - first['rss_mb']:+.1f} MB. Store calls: {calls:,} "
        f"(per thread: {_requests({k: v / r['threads'] for k, v in r['requests'].items()})}). "
        "Before the "
        "client cache was shared and bounded, 600 threads took 601 credentials and 593 "
        "descriptors, RSS 108 → 264 MB.",
        "",
    ]


def _memory_store(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    from ._memory import report_lines  # imported here: it uses this module's helpers

    report_lines(results, scales, lines)


def _load_section(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    from ._load import report_lines  # imported here: it uses this module's helpers

    report_lines(results, scales, lines, 14)


def _peers(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    from ._peers import report_lines  # imported here: it uses this module's helpers

    report_lines(results, scales, lines, 11)


def _roundtrips(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    from ._roundtrips import report_lines  # imported here: it uses this module's helpers

    report_lines(results, scales, lines, 12)


def _maf_agents(results: dict[str, Any], scales: dict[str, Any], lines: list[str]) -> None:
    from ._maf_agents import report_lines  # imported here: it uses this module's helpers

    report_lines(results, scales, lines, 13)


_SECTIONS: tuple[Callable[[dict[str, Any], dict[str, Any], list[str]], None], ...] = (
    _lg_chat,
    _lg_chat_800,
    _lg_growth,
    _lg_read,
    _lg_big,
    _store,
    _maf_run,
    _maf_latest,
    _hosted_threads,
    _memory_store,
    _peers,
    _roundtrips,
    _maf_agents,
    _load_section,
)


def _headline(results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    growth = results.get("lg-growth", {})

    def res(section: dict[str, Any], subject: str) -> dict[str, Any] | None:
        unit = section.get(subject) or {}
        result = unit.get("result")
        return result if isinstance(result, dict) and "skipped" not in result else None

    ours, sql, sdk = res(growth, "fc-local"), res(growth, "sqlite"), res(growth, "fc-sdk")
    if ours and sql:
        at100 = ours["first100_ms"] / sql["first100_ms"]
        full = ours["mean_ms"] / sql["mean_ms"]
        out.append(
            f"- Thread length: FoundryCheckpointer local is {at100:.2f}x AsyncSqliteSaver at "
            f"100 turns and {full:.2f}x over {ours['steps']:,} turns "
            f"(last 20 turns: {ours['last20_ms'] / sql['last20_ms']:.2f}x)."
        )
    if sdk and sql:
        out.append(
            f"- The SDK backend: {sdk['first100_ms'] / sql['first100_ms']:.2f}x at 100 turns, "
            f"{sdk['last20_ms'] / sql['last20_ms']:.2f}x per turn by turn {sdk['steps']:,}"
            + (" (stopped there by its time budget)." if sdk["capped"] else ".")
        )
    read = results.get("lg-read", {})
    for subject, label in (("fc-hosted", "hosted"), ("fc-local", "local")):
        r = res(read, subject)
        if r:
            calls = [sum(c["latest"]["requests"].values()) for c in r["sizes"].values()]
            sizes = ", ".join(f"{int(s):,}" for s in r["sizes"])
            out.append(
                f"- Latest checkpoint ({label}): "
                + " / ".join(_num(c, 1) for c in calls)
                + f" store calls per read at {sizes} checkpoints."
            )
    engine = res(results.get("engine", {}), "engine")
    sdk_store = res(results.get("sdk-store", {}), "sdk")
    if engine:
        cells = list(engine["sizes"].values())
        out.append(
            "- Engine put_item: "
            + " / ".join(_num(c["put_new_us"], 0) for c in cells)
            + " µs at "
            + " / ".join(f"{int(s):,}" for s in engine["sizes"])
            + " items (flat)"
            + (
                "; the SDK's local set_item: "
                + " / ".join(_num(c["put_new_us"], 0) for c in sdk_store["sizes"].values())
                + " µs at "
                + " / ".join(f"{int(s):,}" for s in sdk_store["sizes"])
                + " items."
                if sdk_store
                else "."
            )
        )
    latest = results.get("maf-latest", {})
    fc, fh = res(latest, "fc-hosted"), res(latest, "fh-hosted")
    if fc and fh:
        top = max(fc["sizes"], key=int)
        if top in fh["sizes"]:
            out.append(
                f"- MAF get_latest at {int(top):,} checkpoints, hosted: "
                f"{sum(fc['sizes'][top].get('requests', {}).values()):.0f} store calls "
                f"({fc['sizes'][top]['ms']:.1f} ms) vs "
                f"{sum(fh['sizes'][top].get('requests', {}).values()):.0f} "
                f"({fh['sizes'][top]['ms']:.1f} ms) for agent-framework-foundry-hosting's "
                "FoundryCheckpointStore."
            )
    threads = res(results.get("hosted-threads", {}), "fc-hosted")
    if threads:
        marks = sorted(threads["marks"], key=int)
        first, last = threads["marks"][marks[0]], threads["marks"][marks[-1]]
        out.append(
            f"- One hosted process, {threads['threads']:,} threads, default credential: "
            f"{threads['credentials']} credential constructed; descriptors {first['fds']} → "
            f"{last['fds']} and RSS {last['rss_mb'] - first['rss_mb']:+.1f} MB from thread "
            f"{int(marks[0]):,} to {int(marks[-1]):,}."
        )
    return [*out, ""] if out else []


def write_report(path: Path, results: dict[str, Any], info: dict[str, Any]) -> None:
    """Render every section that ran into ``path``."""
    scales = info["scales"]
    packages = ", ".join(f"{k} {v}" for k, v in info["packages"].items())
    lines = [
        "# foundry-checkpoint benchmarks",
        "",
        f"Written by `python -m benchmarks` (`make bench`) on {info['date']}"
        + (f" at commit `{info['commit']}`" if info.get("commit") else "")
        + f"; the whole run took {info['total_s'] / 60:.1f} minutes."
        + (
            " **Quick mode: small sizes, one repetition; not for quoting.**"
            if info.get("quick")
            else ""
        ),
        "",
        "## Machine",
        "",
        f"- CPU: {info['cpu']}, {info['cores']} cores; memory {info['memory']}",
        f"- OS: {info['os']}; Python {info['python']}",
        f"- Packages: {packages}",
        f"- PostgreSQL: {info['postgres']}",
        f"- Load average: {info.get('load', 'unknown')}",
        "",
        "## How to read these tables",
        "",
        "- Every unit (one workload on one backend) ran in a fresh process; times are medians "
        "of repetitions, ratios divide by the anchor named in the column (below 1x = faster).",
        "- Counts (store calls, items, bytes) are deterministic. Store calls of the hosted "
        "mode were counted by the emulator; local modes count the same protocol calls "
        "in-process (`put` = `set_item`, `list` = `list_keys`, `store` = store GET; `rank` = "
        "the embedded store's one-call latest lookup, which the service does not have).",
        "- Hosted mode ran against the loopback HTTPS emulator in a separate process on the "
        "same cores: its times are client plus emulator CPU, with no network latency. On the "
        "real service each call adds a network round trip, so the call counts are the "
        "figures that carry over. The client trusted the emulator's CA through "
        "`SSL_CERT_FILE`, keeping its default TLS settings (connections are reused); passing "
        "`connection_verify=<CA file>` instead makes azure-core build a new SSL context, and "
        "so open a new TLS connection, for every request.",
        "- Peak RSS is the unit process's `ru_maxrss` (interpreter and imports included); "
        "the workload's own share is in parentheses.",
        "- A load average above the core count means other work shared the CPU during the "
        "run: compare the ratios within one table (its rows ran minutes apart), and rerun "
        "on an idle machine before quoting absolute times.",
        "",
        "## Headline",
        "",
        *_headline(results),
        *targets_lines(results),
        *before_after_lines(results),
    ]
    for render in _SECTIONS:
        render(results, scales, lines)
    path.write_text("\n".join(lines).rstrip() + "\n")
