"""A file engine checkpoints its write-ahead log on a thread of its own, not in a commit."""

from __future__ import annotations

import gc
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint._store._engine_checks import compact_json
from foundry_checkpoint._store._engine_db import (
    CHECKPOINT_EVERY,
    FALLBACK_AUTOCHECKPOINT,
    WalCheckpointer,
)

S = "store"
VALUE = {"v": 1, "c": "raw", "d": "A" * 3000, "k": "12345678", "cid": "c", "wf": "w"}
TAGS = {"kind": "maf.checkpoint", "wf": "w"}


def _running(checkpointer: WalCheckpointer | None) -> bool:
    thread = None if checkpointer is None else checkpointer._thread
    return thread is not None and thread.is_alive()


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return 0 if not wal.exists() else max(0, (wal.stat().st_size - 32) // (4096 + 24))


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_commits_leave_the_checkpoint_to_the_background(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    eng = StateEngine(path)
    with eng._transaction(write=False) as conn:
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == FALLBACK_AUTOCHECKPOINT
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    checkpointer = eng._checkpointer
    assert isinstance(checkpointer, WalCheckpointer)
    for i in range(CHECKPOINT_EVERY - 2):  # the store's creation was one write
        eng.put_item(S, f"k{i}", VALUE, TAGS, user="u", if_match=None)
    assert checkpointer.checkpoints == 0 and not _running(checkpointer)  # not asked yet
    eng.put_item(S, "last", VALUE, TAGS, user="u", if_match=None)
    assert _wait_for(lambda: checkpointer.checkpoints >= 1)
    # Everything in the log was copied into the database: a checkpoint now has nothing to do.
    with sqlite3.connect(path) as probe:
        busy, log, done = probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and log == done
    thread = checkpointer._thread
    eng.close()
    assert thread is not None and not thread.is_alive() and not _running(checkpointer)
    reopened = StateEngine(path)
    page = reopened.list_keys(S, user="u", tags=TAGS, limit=100)
    assert len(page["data"]) == CHECKPOINT_EVERY - 1
    reopened.close()


def test_the_log_stays_bounded_under_sustained_writes(tmp_path: Path) -> None:
    """Writes never wait for a checkpoint, yet the log does not grow without bound: the
    background checkpoints let it restart, and the committing connection's own threshold is
    the fallback."""
    path = tmp_path / "state.sqlite3"
    eng = StateEngine(path)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    for i in range(20 * CHECKPOINT_EVERY):
        eng.put_item(S, f"k{i % 300}", VALUE, {**TAGS, "id": f"{i:06d}"}, user="u", if_match=None)
    # Past the fallback threshold the writer checkpoints and the log restarts, unless a
    # background checkpoint holds the checkpoint lock: then the writes made meanwhile (this
    # loop does not pause between them) come on top, once.
    frames = _wal_frames(path)
    assert frames <= 3 * FALLBACK_AUTOCHECKPOINT, frames
    assert eng._checkpointer is not None and eng._checkpointer.checkpoints >= 1
    eng.close()
    reopened = StateEngine(path)
    assert len(reopened.list_keys(S, user="u", tags=TAGS, limit=100)["data"]) == 100
    reopened.close()


def test_memory_engines_and_closed_checkpointers_start_no_thread(tmp_path: Path) -> None:
    eng = StateEngine()
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    for i in range(CHECKPOINT_EVERY + 1):
        eng.put_item(S, f"k{i}", VALUE, None, user="u", if_match=None)
    assert eng._checkpointer is None
    eng.close()
    checkpointer = WalCheckpointer(tmp_path / "absent.sqlite3")
    checkpointer.close()
    checkpointer.poke()  # after close: nothing starts
    assert not _running(checkpointer)
    failing = WalCheckpointer(tmp_path / "no-such-dir" / "db.sqlite3")
    failing.poke()  # cannot open: ignored, the thread waits for the next poke
    time.sleep(0.05)
    assert failing.checkpoints == 0
    assert _running(failing)
    failing.close()
    assert not _running(failing)


def test_compact_json_of_a_small_value_is_the_encoders_output() -> None:
    for value in (VALUE, {"a": [1, None], "é": "ü"}, {}, {"big": "x" * 5000, "n": 1}):
        assert compact_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_a_removed_database_is_not_created_again(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    eng = StateEngine(path)
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    checkpointer = eng._checkpointer
    assert checkpointer is not None
    eng.close()
    for leftover in tmp_path.iterdir():
        leftover.unlink()
    late = WalCheckpointer(path)
    late.poke()
    time.sleep(0.05)
    late.close()
    assert late.checkpoints == 0 and not path.exists()


def test_an_engine_dropped_without_close_stops_its_checkpoint_thread(tmp_path: Path) -> None:
    eng = StateEngine(tmp_path / "state.sqlite3")
    eng.create_store(S, user_isolation=True, item_ttl_seconds=-1)
    for i in range(CHECKPOINT_EVERY):
        eng.put_item(S, f"k{i}", VALUE, TAGS, user="u", if_match=None)
    checkpointer = eng._checkpointer
    assert checkpointer is not None and _wait_for(lambda: checkpointer.checkpoints >= 1)
    thread = checkpointer._thread
    del eng
    gc.collect()
    assert thread is not None and _wait_for(lambda: not thread.is_alive())
