"""A MAF workflow on ResponsesHostServer, checkpointed by FoundryCheckpointStorageProvider.

What it shows:
- ``ResponsesHostServer(workflow=..., parse_response=..., checkpoint_store_provider=...)`` hosts
  a native workflow on the Responses protocol (``POST /responses``). ``workflow=`` is a
  **factory** called for every request: the host needs a fresh, unrun graph per turn to continue
  a conversation, resume a pause or recover (a built ``Workflow`` only serves one-shot turns).
  ``parse_response`` turns each request into a ``WorkflowTurn``: new input, or the replies to
  the pending requests (``request.get_workflow_responses()``);
- **one** ``FoundryCheckpointStorageProvider`` for the whole process: the host asks it for the
  checkpoint storage of each conversation with the request's platform context, and every
  storage it hands out shares one loop and one set of store clients and forwards that request's
  ``x-agent-foundry-call-id``, so each user's checkpoints land in that user's partition;
- human in the loop: the workflow asks with ``ctx.request_info(Question(...), str)``, the
  response carries a ``function_call`` item, and a later request answers it with a
  ``function_call_output`` item, in the same process or after a restart;
- ``Question`` is an application class kept in checkpoints, so it is listed in
  ``allowed_checkpoint_types``.

In a Foundry-hosted agent the platform runs this module (``python maf_agent.py`` serves on
``$PORT``) and the host keeps response objects in Foundry's response store;
``samples/hosted_agents_offline.py`` runs it unchanged against the emulator, which serves that
response store too.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass

from agent_framework import (
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)
from agent_framework_foundry_hosting import HostedResponseRequest, ResponsesHostServer, WorkflowTurn
from typing_extensions import Never

from foundry_checkpoint_maf import FoundryCheckpointStorageProvider

WORKFLOW = "expense-approval"


@dataclass
class Question:
    """What the human is asked (kept in the checkpoint while the request is pending)."""

    text: str


class Approver(Executor):
    """Counts the conversation's claims (workflow state) and asks a human about each."""

    @handler
    async def run(self, claim: str, ctx: WorkflowContext[str]) -> None:
        claims = [*ctx.get_state("claims", []), claim]
        ctx.set_state("claims", claims)
        await ctx.request_info(Question(f"Approve {claim} (claim {len(claims)})?"), str)

    @response_handler
    async def answered(self, question: Question, answer: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(f"{question.text} -> {answer}")


class Notify(Executor):
    @handler
    async def run(self, text: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"notified: {text}")


def build(request: HostedResponseRequest) -> Workflow:
    """A fresh, unrun graph for every request, with a stable name and executor ids."""
    approver, notify = Approver(id="approver"), Notify(id="notify")
    return (
        WorkflowBuilder(name=WORKFLOW, start_executor=approver).add_edge(approver, notify).build()
    )


async def parse(request: HostedResponseRequest) -> WorkflowTurn[str]:
    """Replies to pending requests resume the workflow; text starts a new claim."""
    items = [dict(item) for item in await request.get_input_items()]
    if any(item.get("type") == "function_call_output" for item in items):
        return WorkflowTurn(responses=await request.get_workflow_responses())
    text = await request.get_input_text()
    if not text:
        raise ValueError("Send a claim as text, or answer the pending question.")
    return WorkflowTurn(input=text)


# Once per process: the provider owns the loop and the store clients of every conversation.
provider = FoundryCheckpointStorageProvider(
    store_prefix="expenses", allowed_checkpoint_types=[Question]
)
app = ResponsesHostServer(
    workflow=build,
    parse_response=parse,
    checkpoint_store_provider=provider,
)


# The host's own shutdown handler stays in place; close the provider when the process exits.
atexit.register(provider.close)
# azure-ai-agentserver-core 2.3+ may snapshot the process and restore it with a new environment:
# close the clients first; the next request reopens them and reads the environment again.
if hasattr(app, "before_snapshot_handler"):
    app.before_snapshot_handler(provider.aclose)


if __name__ == "__main__":
    app.run()
