"""Microsoft Agent Framework human-in-the-loop across processes, with ``request_info``.

What it shows:
- an executor asks a human with ``ctx.request_info(Question(...), str)``; the run stops with a
  pending request, which MAF keeps in the checkpoint saved by ``FoundryCheckpointStorage``;
- process 1 starts the workflow and exits while the question is pending;
- process 2 knows only the context id: it reads the latest checkpoint, finds the pending request
  in ``pending_request_info_events`` and resumes with ``run(checkpoint_id=..., responses=...)``;
- ``Question`` is an application class, so it is listed in ``allowed_checkpoint_types``: MAF's
  restricted unpickler refuses any class that is not allowed.

Run: ``python samples/maf_human_in_the_loop.py``
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from agent_framework import (
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorage

WORKFLOW = "expense-approval"
CONTEXT = "expense-981"


@dataclass
class Question:
    """What the human is asked (kept in the checkpoint while the request is pending)."""

    text: str


class Approver(Executor):
    @handler
    async def run(self, claim: str, ctx: WorkflowContext[str]) -> None:
        await ctx.request_info(Question(f"Approve {claim}?"), str)

    @response_handler
    async def answered(self, question: Question, answer: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(f"{question.text} -> {answer}")


class Notify(Executor):
    @handler
    async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"notified: {text}")


def build(storage: FoundryCheckpointStorage) -> Workflow:
    approver, notify = Approver(id="approver"), Notify(id="notify")
    builder = WorkflowBuilder(name=WORKFLOW, start_executor=approver, checkpoint_storage=storage)
    return builder.add_edge(approver, notify).build()


def storage() -> FoundryCheckpointStorage:
    return FoundryCheckpointStorage(context_id=CONTEXT, allowed_checkpoint_types=[Question])


async def ask() -> None:
    """Process 1: start the workflow; it stops at the pending request."""
    async with storage() as store:
        result = await build(store).run("taxi receipt, 38 EUR")
        request = result.get_request_info_events()[0]
        print(f"[process 1] waiting for a human: {request.data.text}")


async def answer(reply: str) -> None:
    """Process 2: find the pending request from the context id alone and answer it."""
    async with storage() as store:
        latest = await store.get_latest(workflow_name=WORKFLOW)
        assert latest is not None
        (request_id, event), *_ = latest.pending_request_info_events.items()
        print(f"[process 2] pending request found: {event.data.text}")
        result = await build(store).run(
            checkpoint_id=latest.checkpoint_id, responses={request_id: reply}
        )
        print(f"[process 2] {result.get_outputs()[0]}")


def main() -> None:
    os.environ.setdefault("AGENTSERVER_STATE_ROOT", tempfile.mkdtemp(prefix="foundry-maf-hitl-"))
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    if len(sys.argv) > 1 and sys.argv[1] == "ask":
        asyncio.run(ask())
    elif len(sys.argv) > 2 and sys.argv[1] == "answer":
        asyncio.run(answer(sys.argv[2]))
    else:
        subprocess.run([sys.executable, __file__, "ask"], check=True)
        subprocess.run([sys.executable, __file__, "answer", "approved"], check=True)


if __name__ == "__main__":
    main()
