"""Microsoft Agent Framework: a workflow that crashes half way resumes from its checkpoint.

What it shows:
- ``FoundryCheckpointStorage(context_id=...)`` as a workflow's ``checkpoint_storage``: MAF saves
  a checkpoint after every superstep;
- a first run crashes in the ``review`` step;
- a new storage object (as a restarted process would create) finds the latest checkpoint of the
  workflow with ``get_latest`` and resumes it with ``workflow.run(checkpoint_id=...)``: the steps
  that already ran are not run again.

Local mode needs nothing (the store lives under ``AGENTSERVER_STATE_ROOT``, default
``~/.agentserver``; ``foundry-checkpoint maf contexts`` shows what it stored); inside a
Foundry-hosted agent the same code uses the hosted state store.

Run: ``python samples/maf_workflow_resume.py``
"""

from __future__ import annotations

import asyncio
import os

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorage

WORKFLOW = "report"
CONTEXT = "conv-42"


class Step(Executor):
    """Appends its name to the text; ``review`` crashes while ``crash`` is set."""

    def __init__(self, id: str, *, crash: bool = False) -> None:
        super().__init__(id=id)
        self._crash = crash

    @handler
    async def run(self, text: str, ctx: WorkflowContext[str]) -> None:
        if self._crash:
            raise RuntimeError(f"simulated crash in {self.id!r}")
        print(f"  running {self.id}")
        await ctx.send_message(f"{text} > {self.id}")


class Publish(Executor):
    @handler
    async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        print(f"  running {self.id}")
        await ctx.yield_output(f"{text} > {self.id}")


def build(storage: FoundryCheckpointStorage, *, crash: bool) -> Workflow:
    plan, draft = Step("plan"), Step("draft")
    review, publish = Step("review", crash=crash), Publish(id="publish")
    builder = WorkflowBuilder(name=WORKFLOW, start_executor=plan, checkpoint_storage=storage)
    return builder.add_edge(plan, draft).add_edge(draft, review).add_edge(review, publish).build()


async def main() -> None:
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")

    print("1) first run, which crashes before it finishes:")
    async with FoundryCheckpointStorage(context_id=CONTEXT) as storage:
        print(f"   {storage!r}")
        await storage.delete_context()  # start clean when run again
        try:
            await build(storage, crash=True).run("start")
        except RuntimeError as exc:
            print(f"   crashed: {exc}")

    print("2) a new storage object (as a restarted process would have) resumes the workflow:")
    async with FoundryCheckpointStorage(context_id=CONTEXT) as storage:
        ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
        latest = await storage.get_latest(workflow_name=WORKFLOW)
        assert latest is not None
        print(f"   {len(ids)} checkpoints saved; resuming from the latest, {latest.checkpoint_id}")
        result = await build(storage, crash=False).run(checkpoint_id=latest.checkpoint_id)
        print(f"   finished: {result.get_outputs()[0]}")
    print("3) see what is stored: foundry-checkpoint maf contexts (or maf checkpoints conv-42)")


if __name__ == "__main__":
    asyncio.run(main())
