"""A two-agent team driven by a deterministic replay model client (no network)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import sys
from collections.abc import Sequence
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.replay import ReplayChatCompletionClient

from foundry_checkpoint_autogen import AutoGenStateStore, load_team


def replies(count: int, size: int, seed: int = 0) -> list[str]:
    """``count`` incompressible replies of about ``size`` characters each."""
    rng = random.Random(seed)
    return [base64.b64encode(rng.randbytes(size * 3 // 4)).decode() for _ in range(count)]


def make_team(answers: Sequence[str]) -> RoundRobinGroupChat:
    """A writer and a critic taking turns; each run is the task and one reply of each."""
    client = ReplayChatCompletionClient(list(answers))
    writer = AssistantAgent("writer", model_client=client)
    critic = AssistantAgent("critic", model_client=client)
    return RoundRobinGroupChat(
        [writer, critic], name="review", termination_condition=MaxMessageTermination(3)
    )


async def resumed_state(conversation_id: str) -> dict[str, Any]:
    """A new team object loaded from a new store object: its ``save_state()``."""
    team = make_team([])
    with AutoGenStateStore() as store:
        assert await load_team(team, store, conversation_id)
    return dict(await team.save_state())


if __name__ == "__main__":  # a fresh process: python -m tests.autogen._teams CONV OUT
    state = asyncio.run(resumed_state(sys.argv[1]))
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump(state, out)
