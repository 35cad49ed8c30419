"""prune and put on one thread from two processes for a minute: no blob ever goes missing.

A put stores its spilled blob first and its item second. A prune that lists the items between
the two would, without a grace, take a blob the next item references. The writer cycles through
a few large values (each put stores or refreshes a blob, or carries one unchanged) while the
other process prunes the thread to its newest checkpoint in a loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundry_checkpoint import FoundryCheckpointer

from ._harness import REPO, scan_blobs
from ._race import POOL, _values

SECONDS = 60
THREAD = "race"


def _start(role: str, root: Path, report: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.reliability._race",
            role,
            str(root),
            THREAD,
            str(SECONDS),
            str(report),
        ],
        cwd=REPO,
        env=env,
    )


@pytest.mark.multiprocess
@pytest.mark.slow
def test_concurrent_prune_and_put_lose_no_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "state"
    reports = {role: tmp_path / f"{role}.json" for role in ("put", "prune")}
    procs = {role: _start(role, root, report) for role, report in reports.items()}
    for proc in procs.values():
        assert proc.wait(timeout=SECONDS + 240) == 0
    results = {role: json.loads(report.read_text()) for role, report in reports.items()}
    for role, result in results.items():
        assert "error" not in result, f"{role} failed:\n{result['error']}"
    assert results["put"]["rounds"] > 10 and results["prune"]["rounds"] > 10

    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(root))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    with FoundryCheckpointer() as saver:
        scan = scan_blobs(saver, THREAD)
        assert scan.items >= 1 and scan.references >= 1
        assert scan.dangling == []
        # Every checkpoint left reads back whole, its large value intact.
        values = set(_values())
        listed = list(saver.list({"configurable": {"thread_id": THREAD}}))
        assert listed
        for tup in listed:
            assert tup.checkpoint["channel_values"]["big"] in values
        latest = saver.get_tuple({"configurable": {"thread_id": THREAD}})
        assert latest is not None
        assert latest.checkpoint["channel_values"]["n"] == results["put"]["rounds"] - 1
        # Nothing was lost for good either: gc with no grace finds at most the pool's blobs.
        assert len(saver.gc(grace_seconds=0).deleted) <= POOL
        assert scan_blobs(saver, THREAD).dangling == []
