"""A MAF workflow on a resilient ResponsesHostServer: background turns that survive a crash.

What it shows:
- ``ResponsesHostServer(..., options=ResponsesServerOptions(resilient_background=True))`` runs
  every ``background=true, store=true`` request as a task of the platform's resilient task
  runtime (azure-ai-agentserver-core's ``tasks``): the task is created with a lease before the
  workflow starts and removed once the response is complete;
- ``FoundryCheckpointStorageProvider`` checkpoints the workflow after every superstep, in the
  user's own partition of the state store;
- when the process dies mid-workflow (a crash, an eviction), the next process finds the stale
  task at start-up, re-enters the request, and the host resumes the workflow from its last
  checkpoint: the steps already checkpointed do not run again, only the one in flight does.
  The client polls ``GET /responses/{id}`` and sees one completed response;
- nothing is configured for the platform: no ``AGENTSERVER_TASKS_BACKEND`` and no response
  store. In a Foundry-hosted agent the host keeps its tasks in the platform's task API and
  its responses in Foundry's response store; off the platform (no
  ``FOUNDRY_HOSTING_ENVIRONMENT``) it keeps both under ``AGENTSERVER_STATE_ROOT``, beside the
  checkpoints.

The workflow is deterministic (no model): a claim is checked, priced and filed, one executor
per superstep. In a Foundry-hosted agent the platform runs this module (``python
maf_resilient_workflow.py`` serves on ``$PORT``); a test runs it unchanged against the emulator
with ``FoundryEmulator.agent_environment()``.

Request: ``POST /responses`` with ``{"input": "taxi 38 EUR", "background": true, "store":
true}``, then ``GET /responses/{id}`` until the status is ``completed``.
"""

from __future__ import annotations

import atexit

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler
from agent_framework_foundry_hosting import HostedResponseRequest, ResponsesHostServer, WorkflowTurn
from azure.ai.agentserver.responses import ResponsesServerOptions
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorageProvider

WORKFLOW = "claim-filing"


class Check(Executor):
    """Keeps the claim in the workflow state (checkpointed with the superstep)."""

    @handler
    async def run(self, claim: str, ctx: WorkflowContext[str]) -> None:
        ctx.set_state("claim", claim.strip())
        await ctx.send_message(claim.strip())


class Price(Executor):
    """Reads the amount: the number before the currency."""

    @handler
    async def run(self, claim: str, ctx: WorkflowContext[str]) -> None:
        amounts = [word for word in claim.split() if word.replace(".", "", 1).isdigit()]
        await ctx.send_message(f"{claim} -> {amounts[-1] if amounts else 'no amount'}")


class File(Executor):
    @handler
    async def run(self, priced: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"filed: {priced}")


def build(request: HostedResponseRequest) -> Workflow:
    """A fresh, unrun graph for every request (recovery builds it again in the new process)."""
    check, price, file = Check(id="check"), Price(id="price"), File(id="file")
    return (
        WorkflowBuilder(name=WORKFLOW, start_executor=check)
        .add_edge(check, price)
        .add_edge(price, file)
        .build()
    )


async def parse(request: HostedResponseRequest) -> WorkflowTurn[str]:
    text = await request.get_input_text()
    if not text:
        raise ValueError("Send the claim as text, for example 'taxi 38 EUR'.")
    return WorkflowTurn(input=text)


# Once per process: the provider owns the loop and the store clients of every conversation.
provider = FoundryCheckpointStorageProvider(store_prefix="claims")
app = ResponsesHostServer(
    workflow=build,
    parse_response=parse,
    checkpoint_store_provider=provider,
    options=ResponsesServerOptions(resilient_background=True),
)
atexit.register(provider.close)


if __name__ == "__main__":
    app.run()
