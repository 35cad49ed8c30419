"""Sync ``invoke`` and async ``ainvoke``, each LangGraph durability, for 20 users at once.

One host process (``tests/hosts/apps/variants_agent.py``) with one ``FoundryCheckpointer``;
every user writes the same thread id, each with a mode and durability of their own, then the
process is killed and a new one reads every user's thread back in the other mode.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import product
from pathlib import Path
from typing import Any

from .conftest import Host, Platform

APP = "variants_agent:app"
APPS = Path(__file__).resolve().parent / "apps"
WAYS = list(product(["sync", "async"], ["sync", "async", "exit"]))
USERS = [f"user{n:02}" for n in range(20)]


def expected(user: str, turns: int) -> list[str]:
    out: list[str] = []
    for n in range(1, turns + 1):
        out += [f"user: {user} {n}", f"agent: turn {n}", "agent: done"]
    return out


def everyone(host: Host, ways: dict[str, tuple[str, str]], turn: int | None) -> dict[str, Any]:
    """Every user at once: a new message (``turn``) or a read (None), in the user's own way."""

    def run(user: str) -> list[str]:
        mode, durability = ways[user]
        body: dict[str, Any] = {"thread_id": "main", "mode": mode, "durability": durability}
        if turn is not None:
            body["message"] = f"{user} {turn}"
        response = host.post(user, "/invocations", body)
        assert response.status_code == 200, (user, response.text)
        messages: list[str] = response.json()["messages"]
        return messages

    with ThreadPoolExecutor(len(ways)) as pool:
        return dict(zip(ways, pool.map(run, ways), strict=True))


def test_every_run_mode_and_durability_for_twenty_users(platform: Platform) -> None:
    ways = {user: WAYS[n % len(WAYS)] for n, user in enumerate(USERS)}
    host = platform.start(APP, apps=APPS)
    for turn in (1, 2):
        said = everyone(host, ways, turn)
        assert said == {user: expected(user, turn) for user in USERS}

    host.kill()
    host = platform.start(APP, apps=APPS)
    other = {user: ("async" if mode == "sync" else "sync", d) for user, (mode, d) in ways.items()}
    assert everyone(host, other, None) == {user: expected(user, 2) for user in USERS}
    assert everyone(host, other, 3) == {user: expected(user, 3) for user in USERS}
