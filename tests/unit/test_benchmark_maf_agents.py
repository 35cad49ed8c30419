"""The Agent Framework agents benchmark (``maf-agents``) runs as ``make bench`` runs it, one
worker process per unit, and section 13 of the report shows what it measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.__main__ import FULL, QUICK, SECTIONS, _run_unit
from benchmarks._maf_agents import NAMES, OPS, _text
from benchmarks._report import write_report

_SCALE = {
    "sizes": [10, 60],
    "reps": 2,
    "chars": 120,
    "grow_from_kb": 800,
    "grow_reply_chars": 48_000,
    "grow_after": 1,
    "grow_max_turns": 40,
}


def _info(scales: dict[str, Any]) -> dict[str, Any]:
    return {
        "date": "2026-12-02 00:00 UTC",
        "cpu": "cpu",
        "cores": 2,
        "memory": "1 GiB",
        "os": "os",
        "python": "3.11",
        "commit": None,
        "packages": {},
        "postgres": "-",
        "total_s": 60.0,
        "scales": scales,
    }


def test_the_section_names_every_subject_and_both_scales() -> None:
    module, workload, subjects = SECTIONS["maf-agents"]
    assert (module, workload) == ("_maf_agents", "turns")
    assert set(subjects) == set(NAMES)
    assert FULL["maf-agents"]["sizes"] == [10, 2_000]
    assert set(FULL["maf-agents"]) == set(QUICK["maf-agents"]) == set(_SCALE)


def test_filler_text_is_deterministic_and_sized() -> None:
    assert _text(7, 300) == _text(7, 300) != _text(8, 300)
    assert len(_text(7, 300)) == 300 and _text(7, 300).startswith("message 7: ")


def test_local_units_run_in_workers_and_section_13_reports_them(tmp_path: Path) -> None:
    results: dict[str, dict[str, Any]] = {"maf-agents": {}}
    for subject in ("memory", "file", "fhp-local"):
        results["maf-agents"][subject] = _run_unit(
            "maf-agents", subject, _SCALE, None, tmp_path / "scratch"
        )
    for subject, unit in results["maf-agents"].items():
        assert "error" not in unit, (subject, unit)
        for cell in unit["result"]["sizes"].values():
            assert cell["history_ok"] and all(cell[op]["correct"] for op, _ in OPS), subject

    ours = results["maf-agents"]["fhp-local"]["result"]["sizes"]
    # appending a turn and reading the last 20 cost the same at both lengths
    assert ours["10"]["append"]["requests"] == ours["60"]["append"]["requests"]
    assert ours["10"]["append"]["requests"] == {"get_item": 3.0, "put_item": 3.0}
    assert ours["60"]["last20"]["requests"] == {"get_item": 21.0}
    # an agent turn loads the whole history: the 50 messages more at the longer length are one
    # sealed page, one read
    agent = {size: sum(ours[size]["agent"]["requests"].values()) for size in ours}
    assert agent["60"] - agent["10"] == 1
    assert "requests" not in results["maf-agents"]["file"]["result"]["sizes"]["60"]["append"]

    # the session stores' growth table, from figures shaped as a hosted unit writes them
    failed = {
        "turn": 3,
        "before_kb": 942.0,
        "after_kb": 942.0,
        "ms": 181.0,
        "spilled": False,
        "requests": {"get_item": 1.0, "put_item": 1.0},
        "bytes_written": 0.0,
        "error": "FoundryStorageBadRequestError: value is 1040604 bytes serialized",
        "stored": False,
    }
    fine = {**failed, "turn": 0, "after_kb": 990.0, "bytes_written": 990.0 * 1024}
    del fine["error"], fine["stored"]
    results["maf-agents"]["fass-hosted"] = {
        "result": {"sizes": {}, "grow": {"from_messages": 1900, "rows": [fine, failed]}}
    }
    out = tmp_path / "RESULTS.md"
    write_report(out, results, _info({"maf-agents": _SCALE}))
    text = out.read_text()
    section = text[text.index("## 13. Agent Framework agents") :]
    assert "| **FoundryHistoryProvider** local (embedded SQLite, default) |" in section
    assert "6.0 (get 3.0, put 3.0)" in section and "21.0 (get 21.0)" in section
    assert "FileHistoryProvider reads its whole file" in section
    assert "### 13.1 Past the 1 MB item limit" in section
    assert "**failed**: FoundryStorageBadRequestError" in section
    assert "(the turn is lost: nothing stored)" in section
