"""Every code block of README.md and docs/ runs, or is marked as what it is (see _doc_blocks).

Each page runs in a process of its own, in a scratch directory, on the local default under a
temporary ``AGENTSERVER_STATE_ROOT`` (or the emulator where the page is about hosted mode).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ._doc_blocks import NOT_RUN, PAGES, ROOT, blocks

#: Counts of the blocks by kind, over the pages run in this session (printed at the end).
TALLY: Counter[str] = Counter()
_WITH_BLOCKS = [page for page in PAGES if blocks(page)]
#: What in a page's text starts the emulator (a block, a background command or a setup).
_EMULATOR_WORDS = ("FoundryEmulator", "foundry_checkpoint.emulator", "setup=emulator")


def _page(page: Path) -> object:
    text = page.read_text(encoding="utf-8")
    uses_emulator = any(word in text for word in _EMULATOR_WORDS)
    marks = [pytest.mark.emulator] if uses_emulator else []
    return pytest.param(page, marks=marks, id=str(page.relative_to(ROOT)))


@pytest.mark.parametrize("page", [_page(page) for page in _WITH_BLOCKS])
def test_page_blocks(page: Path, sample_env: dict[str, str], tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "samples").symlink_to(ROOT / "samples")
    env = {**sample_env, "HOME": str(tmp_path / "home"), "NO_COLOR": "1", "COLUMNS": "200"}
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    results = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.samples._doc_runner", str(page), str(results)],
        cwd=work,
        env={**env, "PYTHONPATH": os.pathsep.join((str(ROOT), env["PYTHONPATH"]))},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and results.is_file(), done.stdout + done.stderr
    records = json.loads(results.read_text(encoding="utf-8"))
    TALLY.update(r["kind"] for r in records)
    failed = [f"{r['where']} ({r['kind']}):\n{r['error']}" for r in records if not r["ok"]]
    assert not failed, "\n\n".join(failed)


def test_markers_are_known() -> None:
    known = {"setup", "output", "output-of", "json-output", "background", "signature", *NOT_RUN}
    for page in PAGES:
        for block in blocks(page):
            assert set(block.options) <= known, f"{block.where}: {block.options}"
            assert block.kind != "unmarked", f"{block.where}: a block with no language"
