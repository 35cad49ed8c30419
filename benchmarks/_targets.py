"""The speed-up targets judged from one run, and the figures of the run before the work began.

Every figure is computed from the results of one ``python -m benchmarks`` run, so the targets
table and the "before → after" table in RESULTS.md always agree with the section tables below
them. ``BEFORE`` holds the same figures from the last full run before the speed-up work (the
report of 2026-11-29 at commit ``c944c2a``); it is reference data and never changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["BEFORE", "FIGURES", "Figure", "before_after_lines", "figures", "targets_lines"]

Results = dict[str, Any]


def _result(results: Results, section: str, subject: str) -> dict[str, Any] | None:
    unit = results.get(section, {}).get(subject) or {}
    result = unit.get("result")
    return result if isinstance(result, dict) and "skipped" not in result else None


def _unit(results: Results, section: str, subject: str) -> dict[str, Any] | None:
    unit = results.get(section, {}).get(subject)
    return unit if isinstance(unit, dict) and _result(results, section, subject) else None


def _div(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom == 0 or math.isnan(top) or math.isnan(bottom):
        return None
    return top / bottom


def _get(section: str, subject: str, key: str) -> Callable[[Results], float | None]:
    def extract(results: Results) -> float | None:
        result = _result(results, section, subject)
        value = None if result is None else result.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    return extract


def _ratio(section: str, key: str, subject: str, anchor: str) -> Callable[[Results], float | None]:
    top, bottom = _get(section, subject, key), _get(section, anchor, key)
    return lambda results: _div(top(results), bottom(results))


def _flat(subject: str) -> Callable[[Results], float | None]:
    """Mean ms/turn of the last tenth of the turns over the first tenth (complete runs only)."""

    def extract(results: Results) -> float | None:
        result = _result(results, "lg-growth", subject)
        if result is None or result.get("capped"):
            return None
        buckets = result.get("buckets_ms") or []
        return _div(buckets[-1], buckets[0]) if len(buckets) >= 2 else None

    return extract


def _rss(subject: str) -> Callable[[Results], float | None]:
    def extract(results: Results) -> float | None:
        unit = _unit(results, "lg-growth", subject)
        return None if unit is None else unit.get("rss_peak_mb")

    return extract


def _rss_ratio(results: Results) -> float | None:
    return _div(_rss("fc-local")(results), _rss("sqlite")(results))


def _list10_listings(results: Results) -> float | None:
    """The listings of one ``alist(limit=10)``, local and hosted, when the same at every
    thread length (else infinite: the target fails)."""
    worst: float | None = None
    for subject in ("fc-local", "fc-hosted"):
        result = _result(results, "lg-read", subject)
        if result is None:
            continue
        counts = set()
        for cell in result.get("sizes", {}).values():
            requests = cell.get("list10", {}).get("requests", {})
            # The embedded store's ranking call stands in for a listing.
            listings = float(requests.get("list_keys", 0.0) + requests.get("greatest", 0.0))
            if requests.get("get_item", 0.0) > 10:
                listings = math.inf  # more reads than the page: the target fails
            counts.add(listings)
        listings = max(counts) if len(counts) == 1 else math.inf
        worst = listings if worst is None else max(worst, listings)
    return worst


def _chat_calls(subject: str) -> Callable[[Results], float | None]:
    """Store calls per chat turn (hosted: counted by the emulator)."""

    def extract(results: Results) -> float | None:
        result = _result(results, "lg-chat", subject)
        if result is None:
            return None
        requests = result.get("per_step", {}).get("requests")
        return float(sum(requests.values())) if requests else None

    return extract


def _latest_calls(results: Results) -> float | None:
    """The most store calls one hosted ``aget_tuple`` of the latest made, at any length."""
    result = _result(results, "lg-read", "fc-hosted")
    if result is None:
        return None
    counts = [
        sum(cell.get("latest", {}).get("requests", {}).values())
        for cell in result.get("sizes", {}).values()
    ]
    return float(max(counts)) if counts else None


@dataclass(frozen=True)
class Figure:
    """One figure of a run; a ``limit`` makes it a target (met when the figure is at most it)."""

    key: str
    label: str
    extract: Callable[[Results], float | None]
    unit: str = "x"
    limit: float | None = None
    target: str = ""

    def show(self, value: float | None) -> str:
        """The figure as the report prints it."""
        if value is None:
            return "-"
        if math.isinf(value):
            return "over 10 reads"
        if self.unit == "x":
            return f"{value:.2f}x"
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
        return f"{value:,.{digits}f}{self.unit}"


FIGURES: Final[tuple[Figure, ...]] = (
    Figure(
        "chat_ratio",
        "LangGraph chat (200 turns), local ms/turn ÷ AsyncSqliteSaver",
        _ratio("lg-chat", "mean_ms", "fc-local", "sqlite"),
        limit=1.0,
        target="1",
    ),
    Figure(
        "growth_ratio",
        "LangGraph thread length (1,000 turns), local ms/turn ÷ AsyncSqliteSaver",
        _ratio("lg-growth", "mean_ms", "fc-local", "sqlite"),
        limit=1.0,
        target="1",
    ),
    Figure(
        "maf_ratio",
        "Agent Framework, local ms/superstep ÷ FileCheckpointStorage",
        _ratio("maf-run", "ms_per_superstep", "fc-local", "file"),
        limit=1.0,
        target="1",
    ),
    Figure(
        "flat_local",
        "Flat in history, local: mean ms/turn of the last 100 turns ÷ the first 100",
        _flat("fc-local"),
        limit=1.15,
        target="2",
    ),
    Figure(
        "flat_hosted",
        "Flat in history, hosted: mean ms/turn of the last 100 turns ÷ the first 100",
        _flat("fc-hosted"),
        limit=1.15,
        target="2",
    ),
    Figure(
        "list10_listings",
        "`alist(limit=10)`: listings per page, the same at every thread length (local and "
        "hosted; at most 10 reads)",
        _list10_listings,
        unit="",
        limit=3.0,
        target="3",
    ),
    Figure(
        "chat_calls_hosted",
        "LangGraph chat, hosted: store calls per turn (counted by the emulator)",
        _chat_calls("fc-hosted"),
        unit="",
        limit=6.5,
        target="4",
    ),
    Figure(
        "latest_calls_hosted",
        "Latest checkpoint, hosted: most store calls per `aget_tuple` at 10, 100 and 1,000 "
        "checkpoints (the writing process; a cold one is asserted by the tests)",
        _latest_calls,
        unit="",
        limit=2.0,
        target="4",
    ),
    Figure(
        "big_get_ratio",
        "5 MB get, local ÷ AsyncSqliteSaver",
        _ratio("lg-big", "get_ms", "fc-local", "sqlite"),
        limit=1.2,
        target="5",
    ),
    Figure(
        "rss_ratio",
        "Peak RSS of the 1,000-turn run, local ÷ AsyncSqliteSaver",
        _rss_ratio,
        limit=1.1,
        target="6",
    ),
    Figure(
        "chat_local_ms",
        "LangGraph chat, local ms/turn",
        _get("lg-chat", "fc-local", "mean_ms"),
        unit=" ms",
    ),
    Figure(
        "chat_sqlite_ms",
        "LangGraph chat, AsyncSqliteSaver ms/turn",
        _get("lg-chat", "sqlite", "mean_ms"),
        unit=" ms",
    ),
    Figure(
        "chat_calls", "LangGraph chat, local store calls per turn", _chat_calls("fc-local"), unit=""
    ),
    Figure(
        "growth_local_ms",
        "Thread length, local ms/turn (all turns)",
        _get("lg-growth", "fc-local", "mean_ms"),
        unit=" ms",
    ),
    Figure(
        "growth_sqlite_ms",
        "Thread length, AsyncSqliteSaver ms/turn (all turns)",
        _get("lg-growth", "sqlite", "mean_ms"),
        unit=" ms",
    ),
    Figure(
        "maf_local_ms",
        "Agent Framework, local ms/superstep",
        _get("maf-run", "fc-local", "ms_per_superstep"),
        unit=" ms",
    ),
    Figure(
        "maf_file_ms",
        "Agent Framework, FileCheckpointStorage ms/superstep",
        _get("maf-run", "file", "ms_per_superstep"),
        unit=" ms",
    ),
    Figure(
        "big_get_local_ms", "5 MB get, local ms", _get("lg-big", "fc-local", "get_ms"), unit=" ms"
    ),
    Figure(
        "big_get_sqlite_ms",
        "5 MB get, AsyncSqliteSaver ms",
        _get("lg-big", "sqlite", "get_ms"),
        unit=" ms",
    ),
    Figure("rss_local_mb", "Peak RSS of the 1,000-turn run, local", _rss("fc-local"), unit=" MB"),
    Figure(
        "rss_sqlite_mb",
        "Peak RSS of the 1,000-turn run, AsyncSqliteSaver",
        _rss("sqlite"),
        unit=" MB",
    ),
)

#: The figures of the full run of 2026-11-29 (commit ``c944c2a``, 1-minute load 1.79 → 0.99),
#: before the speed-up work. The hosted thread-length run was not part of the suite then.
BEFORE_RUN: Final = "the full run of 2026-11-29, commit `c944c2a`"
BEFORE: Final[dict[str, float | None]] = {
    "chat_ratio": 26.9 / 23.8,
    "growth_ratio": 12.6 / 6.43,
    "maf_ratio": 1.535 / 1.309,
    "flat_local": 14.5 / 10.9,
    "flat_hosted": None,
    "list10_listings": 11.0,
    "chat_calls_hosted": 6.0,
    "latest_calls_hosted": 1.0,
    "big_get_ratio": 8.70 / 4.26,
    "rss_ratio": 93.1 / 81.7,
    "chat_local_ms": 26.9,
    "chat_sqlite_ms": 23.8,
    "chat_calls": 8.9,
    "growth_local_ms": 12.6,
    "growth_sqlite_ms": 6.43,
    "maf_local_ms": 1.535,
    "maf_file_ms": 1.309,
    "big_get_local_ms": 8.70,
    "big_get_sqlite_ms": 4.26,
    "rss_local_mb": 93.1,
    "rss_sqlite_mb": 81.7,
}


def figures(results: Results) -> dict[str, float | None]:
    """Every figure of ``FIGURES`` from one run's results (None where a unit did not run)."""
    return {figure.key: figure.extract(results) for figure in FIGURES}


def _status(value: float | None, limit: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= limit else "**not met**"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


def targets_lines(results: Results) -> list[str]:
    """The targets section: each target's figure from this run, its limit and met / not met."""
    values = figures(results)
    rows = [
        [
            f.target,
            f.label,
            f.show(values[f.key]),
            f"≤ {f.show(f.limit)}",
            _status(values[f.key], f.limit),
        ]
        for f in FIGURES
        if f.limit is not None
    ]
    met = sum(1 for row in rows if row[-1] == "met")
    return [
        "## Targets",
        "",
        "The speed-up targets, each judged from this run alone (ratios of medians measured in "
        "the same run). Durability is not traded for them: every write commits before it "
        "returns, several processes may share the store, and older item formats stay readable "
        "(the test suite checks these).",
        "",
        *_table(["#", "target", "this run", "limit", "status"], rows),
        f"{met} of {len(rows)} met. Target 3 is read from section 4, whose threads differ in "
        "length only (the ten newest checkpoints a store second after the rest, as "
        "`tests/langgraph` asserts the counts). Paged right after a burst of hundreds of "
        "checkpoints a second, a page on the service lists every key of the newest second "
        "(the ordering rule in `docs/concepts/latest.md`); section 4 shows that case too.",
        "",
    ]


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None or before == 0 or math.isinf(before + after):
        return "-"
    return f"{(after - before) / before * 100:+.0f}%"


def before_after_lines(results: Results) -> list[str]:
    """The before → after table: ``BEFORE`` next to the same figures of this run."""
    values = figures(results)
    rows = [
        [
            f.label,
            f.show(BEFORE.get(f.key)),
            f.show(values[f.key]),
            _change(BEFORE.get(f.key), values[f.key]),
        ]
        for f in FIGURES
    ]
    return [
        "## Before → after",
        "",
        f"*before* = {BEFORE_RUN}, before the speed-up work (fixed reference figures kept in "
        "`benchmarks/_targets.py`); *after* = this run. The runs were on the same 2-core "
        "machine, days apart: compare ratios rather than milliseconds.",
        "",
        *_table(["figure", "before", "after", "change"], rows),
    ]
