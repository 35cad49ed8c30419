"""LangGraph with large state: a 3 MB channel value spills over to a blob store.

What it shows:
- the state store keeps at most 1 MB per item, yet a graph can hold a 3 MB value (a document,
  an image): ``FoundryCheckpointer`` writes the value to the spill store first and the
  checkpoint item keeps only its sha256;
- in local mode the spill store is ``LocalSpill`` under ``AGENTSERVER_STATE_ROOT`` by default
  (no configuration); in a hosted agent you would set ``FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL``;
- the value is read back intact (checked by sha256) by a new checkpointer;
- an unchanged value is stored once per thread, however many checkpoints reference it (the
  node's pending write of the value, kept until the next checkpoint, is a second blob);
- ``delete_thread`` removes the thread's blobs too.

Run: ``python samples/langgraph_large_state.py``
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
from pathlib import Path
from typing import TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from foundry_checkpoint import FoundryCheckpointer

THREAD: RunnableConfig = {"configurable": {"thread_id": "scan-7"}}
SIZE = 3 * 1024 * 1024


class State(TypedDict, total=False):
    document: bytes
    pages: int
    summary: str


def load(state: State) -> State:
    # Random bytes do not compress: this really is 3 MB to store.
    return {"document": random.Random(7).randbytes(SIZE)}


def count_pages(state: State) -> State:
    return {"pages": len(state["document"]) // 4096}


def summarize(state: State) -> State:
    return {"summary": f"{state['pages']} pages"}


def build(saver: FoundryCheckpointer) -> CompiledStateGraph[State, None, State, State]:
    builder = StateGraph(State)
    for name, node in (("load", load), ("count_pages", count_pages), ("summarize", summarize)):
        builder.add_node(name, node)
    builder.add_edge(START, "load")
    builder.add_edge("load", "count_pages")
    builder.add_edge("count_pages", "summarize")
    builder.add_edge("summarize", END)
    return builder.compile(checkpointer=saver)


def blobs(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def main() -> None:
    root = Path(
        os.environ.setdefault("AGENTSERVER_STATE_ROOT", tempfile.mkdtemp(prefix="foundry-big-"))
    )
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    spill_folder = root / "foundry_checkpoint" / "spill"

    with FoundryCheckpointer() as saver:
        print(f"{saver!r}")
        result = build(saver).invoke({}, THREAD)
        print(f"graph finished: {result['summary']}")
        checkpoints = len(list(saver.list(THREAD)))
    files = blobs(spill_folder)
    stored = sum(p.stat().st_size for p in files)
    print(f"checkpoints written: {checkpoints}")
    print(f"blobs in the local spill folder: {len(files)} ({stored:,} bytes)")

    with FoundryCheckpointer() as saver:  # a new checkpointer, as another process would
        document = build(saver).get_state(THREAD).values["document"]
        expected = hashlib.sha256(random.Random(7).randbytes(SIZE)).hexdigest()
        intact = hashlib.sha256(document).hexdigest() == expected
        print(f"read back: {len(document):,} bytes, intact: {intact}")
        saver.delete_thread("scan-7")
    print(f"after delete_thread: {len(blobs(spill_folder))} blobs")


if __name__ == "__main__":
    main()
