"""LangGraph long-term memory (``BaseStore``) on the state store: :class:`FoundryStore`.

An adapter like :mod:`foundry_checkpoint._langgraph`: it builds on
:mod:`foundry_checkpoint.adapter` and the public modules only.
"""

from __future__ import annotations

from ._store import FoundryStore

__all__ = ["FoundryStore"]
