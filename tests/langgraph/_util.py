"""Small helpers shared by the LangGraph saver tests."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig


def cfg(thread_id: Any, checkpoint_id: str | None = None, *, ns: str | None = "") -> RunnableConfig:
    """``{"configurable": {"thread_id", "checkpoint_ns", ["checkpoint_id"]}}``."""
    conf: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}
