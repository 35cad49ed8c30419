"""A test host: a MAF workflow on ResponsesHostServer with ``resilient_background=True``.

Nothing is configured for the platform: no task backend override and no response store, so in
hosted mode the host keeps its background tasks in the platform's task API and its responses
in Foundry's response store, both at ``FOUNDRY_PROJECT_ENDPOINT`` (the emulator in the tests).
"""

from __future__ import annotations

import atexit

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler
from agent_framework_foundry_hosting import HostedResponseRequest, ResponsesHostServer, WorkflowTurn
from azure.ai.agentserver.responses import ResponsesServerOptions
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorageProvider


class Shout(Executor):
    @handler
    async def run(self, text: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(text.upper())


class Reply(Executor):
    @handler
    async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"done: {text}")


def build(request: HostedResponseRequest) -> Workflow:
    shout, reply = Shout(id="shout"), Reply(id="reply")
    return WorkflowBuilder(name="resilient", start_executor=shout).add_edge(shout, reply).build()


async def parse(request: HostedResponseRequest) -> WorkflowTurn[str]:
    return WorkflowTurn(input=await request.get_input_text() or "")


provider = FoundryCheckpointStorageProvider(store_prefix="resilient")
app = ResponsesHostServer(
    workflow=build,
    parse_response=parse,
    checkpoint_store_provider=provider,
    options=ResponsesServerOptions(resilient_background=True),
)
atexit.register(provider.close)
