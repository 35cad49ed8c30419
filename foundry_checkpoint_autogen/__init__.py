"""foundry-checkpoint for AutoGen: durable agent, runtime and team state on Foundry's state store.

Example::

    from foundry_checkpoint_autogen import AutoGenStateStore

    store = AutoGenStateStore()                       # local by default, hosted inside Foundry
    await store.asave("conv-42", "agent", "counter/default", await agent.save_state())
    await agent.load_state(await store.aload("conv-42", "agent", "counter/default"))
"""

from __future__ import annotations

from ._agent import DurableAgent, durable_factory
from ._store import AutoGenStateStore, StateVersion

__all__ = ["AutoGenStateStore", "DurableAgent", "StateVersion", "durable_factory"]
