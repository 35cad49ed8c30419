"""``python -m benchmarks``: where the report goes, and its targets and before → after tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import DEFAULT_OUT, PARTIAL_OUT, _parse
from benchmarks._report import write_report
from benchmarks._targets import BEFORE, FIGURES, before_after_lines, figures, targets_lines


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        ([], DEFAULT_OUT),
        (["--quick"], PARTIAL_OUT),
        (["--only", "lg-read", "maf-latest"], PARTIAL_OUT),
        (["--quick", "--out", "x.md"], Path("x.md")),
        (["--out", "benchmarks/RESULTS.md", "--quick"], Path("benchmarks/RESULTS.md")),
    ],
)
def test_where_the_report_goes(argv: list[str], out: Path) -> None:
    assert _parse(argv).out == out
    assert DEFAULT_OUT.name == "RESULTS.md" and PARTIAL_OUT != DEFAULT_OUT


def _unit(result: dict[str, Any], rss: float = 100.0) -> dict[str, Any]:
    return {"result": result, "rss_base_mb": 50.0, "rss_peak_mb": rss}


def test_targets_are_judged_from_the_run() -> None:
    results = {
        "lg-chat": {"sqlite": _unit({"mean_ms": 20.0}), "fc-local": _unit({"mean_ms": 10.0})},
        "lg-growth": {
            "sqlite": _unit({"mean_ms": 5.0, "capped": False, "buckets_ms": [5.0] * 10}, 80.0),
            "fc-local": _unit(
                {"mean_ms": 6.0, "capped": False, "buckets_ms": [5.0] * 9 + [10.0]}, 84.0
            ),
            "fc-hosted": {"error": "exit 1"},
        },
    }
    values = figures(results)
    assert values["chat_ratio"] == pytest.approx(0.5)
    assert values["growth_ratio"] == pytest.approx(1.2)
    assert values["flat_local"] == pytest.approx(2.0)
    assert values["rss_ratio"] == pytest.approx(1.05)
    assert values["flat_hosted"] is None and values["big_get_ratio"] is None
    rows = {
        line.split(" | ")[1]: line.rstrip(" |").split(" | ")[-1]
        for line in targets_lines(results)
        if line.startswith("| ") and not line.startswith("| #")
    }
    targets = [f for f in FIGURES if f.limit is not None]
    assert len(rows) == len(targets)
    by_key = {f.key: rows[f.label] for f in targets}
    assert by_key["chat_ratio"] == "met"
    assert by_key["growth_ratio"] == "**not met**"
    assert by_key["flat_local"] == "**not met**"
    assert by_key["rss_ratio"] == "met"
    assert by_key["flat_hosted"] == by_key["big_get_ratio"] == "not measured"


def test_report_has_the_targets_and_before_after_tables(tmp_path: Path) -> None:
    info = {
        "date": "2026-12-01 00:00 UTC",
        "cpu": "cpu",
        "cores": 2,
        "memory": "1 GiB",
        "os": "os",
        "python": "3.11",
        "commit": None,
        "packages": {},
        "postgres": "-",
        "total_s": 60.0,
        "scales": {},
    }
    out = tmp_path / "RESULTS.md"
    results: dict[str, Any] = {"lg-chat": {}, "maf-run": {}}
    write_report(out, results, info)
    text = out.read_text()
    assert "## Targets" in text and "## Before → after" in text
    table = before_after_lines(results)
    for figure in FIGURES:
        row = next(line for line in table if line.startswith(f"| {figure.label} |"))
        before = figure.show(BEFORE[figure.key])
        assert row == f"| {figure.label} | {before} | - | - |"
    assert BEFORE["chat_ratio"] == pytest.approx(26.9 / 23.8)
