"""Bounded resources: one hosted-mode process serving 2,000 threads with the default credential.

A Foundry-hosted agent is one long-lived process. Its checkpointer must not grow with the
threads it has served: one credential (``DefaultAzureCredential`` when none is passed, made
once), one HTTP session for every store client, a bounded number of open clients. The worker
(``_resources_worker.py``) runs in its own process so that its descriptors and memory are its
own; the emulator it talks to runs here. Figures are in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundry_checkpoint.emulator import FoundryEmulator

ROOT = Path(__file__).resolve().parents[2]
THREADS = 2000
USERS = 20
#: Descriptors the process may open between thread 200 and thread 2,000 (connections the
#: shared pool may still add; a client per store added one per thread).
MAX_FD_GROWTH = 4
#: Resident memory it may add between thread 200 and thread 2,000: the bounded caches filling
#: up (at most 256 open store clients, 2,048 per-(user, thread) entries). Measured: ~4 MB; a
#: client kept per thread added ~40 MB.
MAX_RSS_GROWTH_KIB = 16 * 1024


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_two_thousand_threads_one_credential_flat_descriptors_and_memory(
    emulator: FoundryEmulator, tmp_path: Path
) -> None:
    calls = [[emulator.mint_call(f"user-{i % USERS}"), f"user-{i % USERS}"] for i in range(THREADS)]
    calls_file = tmp_path / "calls.json"
    calls_file.write_text(json.dumps(calls))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "FOUNDRY_HOSTING_ENVIRONMENT": "emulator",
        "FOUNDRY_PROJECT_ENDPOINT": emulator.endpoint,
        "FOUNDRY_CHECKPOINT_TEST_CA": emulator.ca_file,
        "AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING": "true",
        "AGENTSERVER_STATE_ROOT": str(tmp_path / "state"),
    }
    env.pop("FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING", None)
    env.pop("FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL", None)
    emulator.reset_counts()
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests.multiuser._resources_worker import main; main()",
            str(calls_file),
            str(THREADS),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    figures: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    requests = emulator.requests
    print(
        f"\n2,000 threads: {json.dumps(figures)}; requests {sum(requests.values())} "
        f"({dict(requests)})"
    )
    assert figures["credentials_made"] == 1
    assert figures["credentials_closed"] == 1
    at_200, at_2000 = figures["marks"]["200"], figures["marks"]["2000"]
    assert at_2000["fds"] - at_200["fds"] <= MAX_FD_GROWTH
    assert at_2000["rss_kib"] - at_200["rss_kib"] <= MAX_RSS_GROWTH_KIB
    assert figures["fds_after_close"] <= at_200["fds"]
    # every thread's store was created once, and looked up once more to check its isolation
    assert requests["create_store"] == THREADS + 1  # + the index store
    assert requests["get_store"] <= 2 * (THREADS + 1) + 2 * USERS
