"""A test host for kill tests: a MAF workflow of slow steps on a resilient ResponsesHostServer.

agent-framework-foundry-hosting's ``ResponsesHostServer(resilient_background=True)`` runs a
chain of ``STEPS`` executors; each is one superstep (one checkpoint through
``FoundryCheckpointStorageProvider``). A step journals ``start`` when it begins, sleeps, journals
``effect`` (its side effect, not idempotent), sleeps again (the window between a step's side
effect and its checkpoint), journals ``done`` and hands the text on. The first step also keeps
a value over the state store's item limit in the workflow state when the input asks for it
(``big:`` prefix), so its checkpoint is written as several chunk items in hosted mode (a spill
in local mode).

The journal is the file named by ``KILL_JOURNAL``, one JSON line per event, appended with
``O_APPEND`` so a line written before a SIGKILL is never lost. Nothing is configured for the
platform: the task runtime and the response store are the platform's (the emulator's) in
hosted mode, the local files under ``AGENTSERVER_STATE_ROOT`` in local mode.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import hashlib
import json
import os
import random

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler
from agent_framework_foundry_hosting import HostedResponseRequest, ResponsesHostServer, WorkflowTurn
from azure.ai.agentserver.responses import ResponsesServerOptions
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorageProvider

STEPS = 4
#: Seconds before a step's side effect, and between the side effect and the step's end.
WORK = float(os.environ.get("KILL_STEP_SECONDS", "0.5"))
SETTLE = float(os.environ.get("KILL_SETTLE_SECONDS", "0.3"))
BIG = 1_400_000  # random bytes: over the 1 MB item limit after compression and base64


def journal(run: str, step: int, event: str) -> None:
    line = json.dumps({"run": run, "step": step, "event": event, "pid": os.getpid()}) + "\n"
    fd = os.open(os.environ["KILL_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def big_value() -> str:
    """A large, incompressible value: the same for every run, tagged with the process id.

    The tag makes a killed attempt's chunks differ from those the recovering process writes,
    so a kill while they are written leaves orphans for ``gc`` to find; the digest the output
    shows leaves the tag out.
    """
    return base64.b64encode(random.Random(7).randbytes(BIG)).decode() + f"#{os.getpid()}"


class Step(Executor):
    def __init__(self, index: int) -> None:
        super().__init__(id=f"step{index}")
        self.index = index

    @handler
    async def run(self, text: str, ctx: WorkflowContext[str]) -> None:
        run = text.split("|", 1)[0]
        journal(run, self.index, "start")
        await asyncio.sleep(WORK)
        journal(run, self.index, "effect")
        if self.index == 0 and run.startswith("big:"):
            ctx.set_state("blob", big_value())
        await asyncio.sleep(SETTLE)
        journal(run, self.index, "done")  # the step's work is over: it only hands the text on
        await ctx.send_message(f"{text}|s{self.index}")


class Finish(Executor):
    @handler
    async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        blob = ctx.get_state("blob", "")
        same = blob.rsplit("#", 1)[0]
        digest = hashlib.sha256(same.encode()).hexdigest()[:12] if blob else "-"
        await ctx.yield_output(f"done: {text} blob={digest}")


def build(request: HostedResponseRequest) -> Workflow:
    steps = [Step(n) for n in range(STEPS)]
    finish = Finish(id="finish")
    builder = WorkflowBuilder(name="killable", start_executor=steps[0])
    for first, second in zip(steps, [*steps[1:], finish], strict=True):
        builder = builder.add_edge(first, second)
    return builder.build()


async def parse(request: HostedResponseRequest) -> WorkflowTurn[str]:
    return WorkflowTurn(input=await request.get_input_text() or "")


provider = FoundryCheckpointStorageProvider(store_prefix="killable")
app = ResponsesHostServer(
    workflow=build,
    parse_response=parse,
    checkpoint_store_provider=provider,
    options=ResponsesServerOptions(resilient_background=True),
)
atexit.register(provider.close)
