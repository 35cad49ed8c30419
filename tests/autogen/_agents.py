"""Agents and messages the AutoGen tests share (importable by the gRPC workers too)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from autogen_core import MessageContext, RoutedAgent, message_handler

from foundry_checkpoint_autogen import DurableAgent


@dataclass
class Add:
    """Add ``n`` to the counter and remember ``note``."""

    n: int
    note: str = ""


@dataclass
class Fail:
    """Make the handler raise after changing the in-memory state."""

    reason: str


@dataclass
class Count:
    """The counter's reply: the count and the notes seen so far."""

    count: int
    history: list[str]


class Counter(DurableAgent, RoutedAgent):
    """Counts; its state is the count and the history of notes."""

    instances: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__("counts what it is sent")
        type(self).instances += 1
        self.count = 0
        self.history: list[str] = []

    @message_handler
    async def add(self, message: Add, ctx: MessageContext) -> Count:
        await asyncio.sleep(0)  # let concurrent messages interleave
        self.count += message.n
        self.history.append(message.note)
        return Count(self.count, list(self.history))

    @message_handler
    async def fail(self, message: Fail, ctx: MessageContext) -> Count:
        self.count += 1000
        raise RuntimeError(message.reason)

    async def save_state(self) -> Mapping[str, Any]:
        return {"count": self.count, "history": list(self.history)}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        self.count = state["count"]
        self.history = list(state["history"])


class Leaky(Counter):
    """A counter whose state is not JSON."""

    async def save_state(self) -> Mapping[str, Any]:
        return {"count": self.count, "raw": b"bytes"}
