"""An ``entrypoint`` whose input, output and task values are the graph's own types.

No ``from __future__ import annotations`` here: ``entrypoint`` takes the input and output types
from the function's annotations as objects (string annotations give it no types, in LangGraph's
strict mode too, and a save of such a value then fails with the ``with_allowlist`` fix).
"""

from typing import Any

from langgraph.func import entrypoint, task
from langgraph.types import interrupt

from foundry_checkpoint import FoundryCheckpointer
from tests.langgraph._typed_graph import Color, Item, Tag


def build(saver: FoundryCheckpointer) -> Any:
    """``grow`` (a task returning an :class:`Item`), an interrupt, then the grown item."""

    @task
    def grow(item: Item) -> Item:
        return Item(name=item.name + "+", tags=[Tag("t", Color.BLUE)])

    @entrypoint(checkpointer=saver)
    def flow(item: Item) -> Item:
        grown = grow(item).result()
        interrupt("more?")
        return grown

    return flow
