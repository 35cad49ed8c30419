"""The memory store benchmarks (``lg-memory``, ``lg-memory-search``) run as ``make bench`` runs
them, one worker process per unit, and section 10 of the report shows what they measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import SECTIONS, _run_unit
from benchmarks._memory import OPS, embed_text
from benchmarks._report import write_report

_STORE_SCALE = {"sizes": [200], "ops": 2, "handoff_calls": 10}
_SEARCH_SCALE = {"items": 60, "hosted_items": 40, "queries": 2, "puts": 2}


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


def test_the_sections_name_every_store() -> None:
    for section in ("lg-memory", "lg-memory-search"):
        module, _, subjects = SECTIONS[section]
        assert module == "_memory"
        assert set(subjects) == {"memory", "sqlite", "postgres", "fs-local", "fs-hosted"}


def test_the_embedding_is_deterministic_and_groups_topics() -> None:
    a, b = embed_text("topic 3: one"), embed_text("topic 3: two")
    other = embed_text("topic 4: one")
    assert a == embed_text("topic 3: one") and len(a) == 64
    assert sum(x * x for x in a) == pytest.approx(1.0)
    same = sum(x * y for x, y in zip(a, b, strict=True))
    apart = sum(x * y for x, y in zip(a, other, strict=True))
    assert same > 0.8 > apart


def test_units_run_in_workers_and_section_10_reports_them(tmp_path: Path) -> None:
    results: dict[str, dict[str, Any]] = {"lg-memory": {}, "lg-memory-search": {}}
    for subject in ("memory", "fs-local", "postgres"):
        results["lg-memory"][subject] = _run_unit(
            "lg-memory", subject, _STORE_SCALE, None, tmp_path / "scratch"
        )
    for subject in ("memory", "fs-local"):
        results["lg-memory-search"][subject] = _run_unit(
            "lg-memory-search", subject, _SEARCH_SCALE, None, tmp_path / "scratch"
        )

    ours = results["lg-memory"]["fs-local"]["result"]["sizes"]["200"]
    anchor = results["lg-memory"]["memory"]["result"]["sizes"]["200"]
    assert set(ours) == set(anchor) == {op for op, _ in OPS}
    assert [op for op, cell in [*ours.items(), *anchor.items()] if not cell["correct"]] == []
    assert ours["get"]["requests"] == {"get_item": 1.0}
    assert ours["put_replace"]["requests"] == {"put_item": 1.0}
    assert ours["search"]["requests"] == {"list_keys": 1.0, "get_item": 10.0}
    assert ours["search_offset"]["requests"] == ours["search"]["requests"]
    assert "requests" not in anchor["get"]  # only ours are counted
    assert results["lg-memory"]["postgres"]["result"] == {"skipped": "no local PostgreSQL server"}
    hand = results["lg-memory"]["fs-local"]["result"]["handoff"]
    assert hand["call_thread_us"] > 0 and hand["to_thread_us"] > 0

    semantic = results["lg-memory-search"]
    for subject in ("memory", "fs-local"):
        figures = semantic[subject]["result"]
        assert figures["recall_at_10"] == 1.0 and figures["correct"] and figures["items"] == 60
    assert semantic["fs-local"]["result"]["requests"]["list_keys"] == 1.0

    out = tmp_path / "RESULTS.md"
    write_report(
        out, results, _info({"lg-memory": _STORE_SCALE, "lg-memory-search": _SEARCH_SCALE})
    )
    text = out.read_text()
    section = text[text.index("## 10. LangGraph memory store") :]
    assert "| **FoundryStore** local (embedded SQLite, default) |" in section
    assert "| **FoundryStore** local (embedded SQLite, default), 200 | 1.0 (put 1.0) |" in section
    assert "11.0 (list 1.0, get 10.0)" in section
    assert "AsyncPostgresStore: not measured: no local PostgreSQL server" in section
    assert "`CallThread`" in section
    assert "### Semantic search" in section and "| InMemoryStore | 60 |" in section
