"""AutoGenStateStore under kill -9 mid-save (both modes): a worker saves one agent's state in a
loop and is killed at varying moments; each restart continues from the latest saved count, a
save that ``asave`` confirmed is never lost, and no more than ``keep_versions + 1`` versions are
left (the one a kill between the write and its trim leaves over), trimmed by the next save.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint_autogen import AutoGenStateStore

from ._saver_worker import AGENT, KEEP

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 6


def _start(store_env: Any) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "tests.autogen._saver_worker", store_env.prefix, store_env.mode]
    if store_env.mode == "hosted":
        args += [store_env.emulator.endpoint, store_env.emulator.ca_file]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _kill_after(proc: subprocess.Popen[str], saves: int, offset_s: float) -> int:
    """Kill ``proc`` ``offset_s`` after it confirmed ``saves`` saves; the last count it printed."""
    assert proc.stdout is not None
    last = 0
    seen = 0
    while seen < saves:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the worker exited: {proc.stderr.read() if proc.stderr else ''}")
        last, seen = int(line), seen + 1
    time.sleep(offset_s)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    for line in out.split():
        last = int(line)
    return last


@pytest.mark.multiprocess
async def test_kill_mid_save_loses_no_confirmed_save_and_keeps_the_versions_bounded(
    store_env: Any, make_store: Any
) -> None:
    confirmed = 0
    for round_ in range(ROUNDS):
        proc = _start(store_env)
        try:
            confirmed = max(confirmed, _kill_after(proc, 4 + round_, 0.002 * round_))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        reader = make_store(keep_versions=KEEP, store_prefix=store_env.prefix)
        latest = await reader.aload("conv", "agent", AGENT)
        assert latest is not None and latest["count"] >= confirmed, (round_, latest, confirmed)
        versions = await reader.aversions("conv", "agent", AGENT)
        assert KEEP <= len(versions) <= KEEP + 1, (round_, len(versions))
        await reader.aclose()
    store: AutoGenStateStore = make_store(keep_versions=KEEP, store_prefix=store_env.prefix)
    after = await store.aload("conv", "agent", AGENT)
    assert after is not None
    await store.asave("conv", "agent", AGENT, {"count": after["count"] + 1})
    assert len(await store.aversions("conv", "agent", AGENT)) == KEEP
    assert await store.aload("conv", "agent", AGENT) == {"count": after["count"] + 1}
