"""Small MAF workflows for the end-to-end tests (importable by a subprocess too).

``python -c "from tests.maf._workflows import main; main()" '<json>'`` runs the two-executor
workflow once with a ``FoundryCheckpointStorage`` built from the JSON options and prints the
outputs. (Not ``-m``: the executors' module name is part of the graph signature.)
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

from agent_framework import (
    CheckpointStorage,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorage

PIPELINE = "e2e-pipeline"
APPROVAL = "e2e-approval"


class Upper(Executor):
    """Upper-cases its input and passes it on."""

    calls: ClassVar[int] = 0

    @handler
    async def run(self, text: str, ctx: WorkflowContext[str]) -> None:
        Upper.calls += 1
        await ctx.send_message(text.upper())


class Exclaim(Executor):
    """Yields its input with a ``!``."""

    calls: ClassVar[int] = 0

    @handler
    async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        Exclaim.calls += 1
        await ctx.yield_output(text + "!")


@dataclass
class Question:
    """A request for a human answer (an application type: must be allowed to be restored)."""

    text: str


class Asker(Executor):
    """Asks a human before passing its input on."""

    @handler
    async def run(self, text: str, ctx: WorkflowContext[str]) -> None:
        await ctx.request_info(Question(f"send {text}?"), str)

    @response_handler
    async def answered(self, question: Question, answer: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(f"{question.text} {answer}")


def pipeline(storage: CheckpointStorage | None) -> Workflow:
    """``Upper -> Exclaim`` named :data:`PIPELINE`."""
    upper, exclaim = Upper(id="upper"), Exclaim(id="exclaim")
    builder = WorkflowBuilder(name=PIPELINE, start_executor=upper, checkpoint_storage=storage)
    return builder.add_edge(upper, exclaim).build()


def approval(storage: CheckpointStorage | None) -> Workflow:
    """``Asker -> Exclaim`` named :data:`APPROVAL` (human in the loop)."""
    asker, exclaim = Asker(id="asker"), Exclaim(id="exclaim")
    builder = WorkflowBuilder(name=APPROVAL, start_executor=asker, checkpoint_storage=storage)
    return builder.add_edge(asker, exclaim).build()


def storage_from(options: dict[str, Any]) -> FoundryCheckpointStorage:
    """A storage from JSON-able options (``credential_user`` becomes an emulator credential)."""
    options = dict(options)
    user = options.pop("credential_user", None)
    if user is not None:
        from foundry_checkpoint.emulator import EmulatorCredential

        options["credential"] = EmulatorCredential(user)
    return FoundryCheckpointStorage(options.pop("context_id"), **options)


async def _main(options: dict[str, Any]) -> None:
    async with storage_from(options) as storage:
        result = await pipeline(storage).run(options.get("input", "hello"))
        print(json.dumps(result.get_outputs()))


def main() -> None:
    """Entry point of the subprocess: options as JSON in ``sys.argv[1]``."""
    asyncio.run(_main(json.loads(sys.argv[1])))
