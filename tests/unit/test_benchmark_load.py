"""The load section's figures and report: what counts as a turn of the window, the stall
comparison, and the fault rules it arms."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks import _load
from benchmarks.__main__ import FULL, QUICK, SECTIONS
from foundry_checkpoint.emulator import Fault
from foundry_checkpoint.emulator._faults import FaultPlan


def test_the_section_is_registered_with_both_savers_and_both_scales() -> None:
    assert SECTIONS["load"] == ("_load", "load", ("fc-hosted", "lc-hosted"))
    assert FULL["load"]["levels"] == [1, 10, 100, 300] and FULL["load"]["stall_level"] == 100
    assert FULL["load"]["delay_s"] == 0.02 and FULL["load"]["stall_s"] == 2.0
    assert set(QUICK["load"]) == set(FULL["load"])


def test_the_stall_rule_is_tried_before_everyone_elses_delay() -> None:
    plan = FaultPlan()
    for rule in _load._rules(0.02, 2.0, stall_user="u-0"):
        plan.add(Fault(**rule))
    held, other = plan.take("put_item", user="u-0"), plan.take("put_item", user="u-1")
    assert held is not None and held.delay == 2.0 and held.status is None
    assert other is not None and other.delay == 0.02 and other.status is None
    assert [r.get("user") for r in _load._rules(0.02, 2.0)] == [None]


def _run(turns: list[list[tuple[float, float]]], stalled: int | None = None) -> Any:
    async def make() -> Any:  # the run's events need a loop
        return _load._Run(
            None,
            None,
            label="t",
            conversations=len(turns),
            seconds=10.0,
            chars=10,
            delay_s=0.02,
            stall_s=2.0,
            stalled=stalled,
        )

    run = asyncio.run(make())
    run.turns = turns
    run.start, run.deadline = 100.0, 110.0
    return run


def test_turns_of_the_window_and_latencies_of_the_others() -> None:
    run = _run(
        [
            [(99.0, 100.5), (100.5, 101.0), (109.5, 111.0)],  # ends in, in, after the window
            [(100.0, 100.2), (100.2, 100.4)],
            [(100.0, 105.0)],  # the stalled conversation
        ],
        stalled=2,
    )
    out = run._figures(window=10.0, cpu=0.5, warm_s=1.0)
    # Ended in the window: 100.5, 101.0, 100.2, 100.4 and the stalled one's 105.0.
    assert out["turns"] == 5 and out["turns_per_s"] == pytest.approx(0.5)
    # Started in the window, the stalled conversation's left out: 0.5, 1.5, 0.2, 0.2 s.
    assert out["latency_turns"] == 4
    assert out["p50_ms"] == pytest.approx(350.0) and out["max_ms"] == pytest.approx(1500.0)
    assert out["cpu_ms_per_turn"] == pytest.approx(100.0)
    assert out["stalled_turns"] == 1


def _level(turns_per_s: float, p50: float, p99: float) -> dict[str, Any]:
    return {
        "turns": 10,
        "turns_per_s": turns_per_s,
        "p50_ms": p50,
        "p99_ms": p99,
        "cpu_ms_per_turn": 9.0,
        "client_cores": 0.5,
        "thread_cores": {"caller loop": 0.1, "store loop": 0.4},
        "runq_cores": 0.2,
        "emulator_cores": 0.3,
        "emulator_runq_cores": 0.1,
        "peak_sockets": 104,
        "pool_peak_waiting": 3,
        "rss_mb": 150.0,
    }


def test_the_report_compares_the_medians_of_the_stalled_and_plain_runs() -> None:
    result = {
        "delay_s": 0.02,
        "stall_s": 2.0,
        "seconds": 15.0,
        "chars": 800,
        "levels": {"1": _level(9.0, 100.0, 130.0), "100": _level(57.0, 1700.0, 2600.0)},
        "stall": {
            "level": 100,
            "base": [_level(50.0, 1000.0, 2000.0), _level(50.0, 1000.0, 4000.0)],
            "stalled": [_level(50.0, 1000.0, 1000.0), _level(50.0, 1000.0, 2000.0)],
        },
    }
    results = {"load": {"fc-hosted": {"result": result}, "lc-hosted": {"error": "exit 1: boom"}}}
    lines: list[str] = []
    _load.report_lines(results, {}, lines, 14)
    text = "\n".join(lines)
    assert lines[0] == "## 14. Many conversations in one hosted process"
    assert "| FoundryCheckpointer (hosted, emulator) | 100 | 57.0 | 1,700 | 2,600 | 1.53 |" in text
    assert "0.50 (0.10 / 0.40)" in text and "104 / 3" in text
    assert "**0.50x**" in text  # medians 1,500 / 3,000
    assert "- langchain-azure-ai FoundryCheckpointSaver (hosted, emulator): exit 1: boom" in text


def test_thread_figures_name_the_caller_and_store_loops() -> None:
    before = {1: ("caller loop", 1.0, 0.0), 2: ("foundry-checkpoint-load", 2.0, 0.5)}
    after = {
        1: ("caller loop", 2.0, 1.0),
        2: ("foundry-checkpoint-load", 6.0, 1.5),
        3: ("asyncio_0", 0.5, 0.0),
    }
    out = _load._thread_figures(before, after, 10.0)
    assert out["thread_cores"] == pytest.approx(
        {"caller loop": 0.1, "store loop": 0.4, "other threads": 0.05}
    )
    assert out["runq_cores"] == pytest.approx(0.2)
    assert _load._threads()  # this process's own threads, read from /proc
