"""The kill test's MAF workflow host, with the checkpoint storage's calls in the journal.

The same workflow, parser and host options as ``kill_maf_workflow`` (four slow steps, each one
superstep). The storage the provider hands the host journals what the host asked of it, so a
SIGTERM test can tell apart what the storage did from what the host did:

- ``saving`` when the host hands it a checkpoint (before the write), ``saved`` when the write
  is acknowledged to the host, ``save cancelled`` when the host stopped waiting for it (the
  write itself goes on: the storage shields it);
- ``loaded`` for every checkpoint read back (the first one a recovering process reads is the
  checkpoint the host's own record of the run names).

Each line carries the checkpoint id, its superstep (``iteration_count``; the checkpoint taken
after step ``n`` is superstep ``n + 1``), the storage's context and the process id. Lines have
``run`` ``"storage"`` and ``step`` ``-1``, so the kill journal's other readers skip them.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
from typing import Any

from agent_framework import WorkflowCheckpoint
from agent_framework_foundry_hosting import ResponsesHostServer
from azure.ai.agentserver.core import AgentConfig, FoundryAgentRequestContext
from azure.ai.agentserver.responses import ResponsesServerOptions

from foundry_checkpoint_maf import FoundryCheckpointStorage, FoundryCheckpointStorageProvider
from tests.hosts.apps.kill_maf_workflow import build, parse


def note(event: str, storage: FoundryCheckpointStorage, checkpoint: WorkflowCheckpoint) -> None:
    line: dict[str, Any] = {
        "run": "storage",
        "step": -1,
        "event": event,
        "checkpoint": checkpoint.checkpoint_id,
        "superstep": checkpoint.iteration_count,
        "context": storage.context_id,
        "pid": os.getpid(),
    }
    fd = os.open(os.environ["KILL_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


class WitnessedStorage(FoundryCheckpointStorage):
    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        note("saving", self, checkpoint)
        try:
            checkpoint_id = await super().save(checkpoint)
        except asyncio.CancelledError:
            note("save cancelled", self, checkpoint)
            raise
        note("saved", self, checkpoint)
        return checkpoint_id

    async def load_with_hash(self, checkpoint_id: str) -> tuple[WorkflowCheckpoint, str]:
        checkpoint, digest = await super().load_with_hash(checkpoint_id)
        note("loaded", self, checkpoint)
        return checkpoint, digest


class WitnessedProvider(FoundryCheckpointStorageProvider):
    def get_store(
        self,
        *,
        config: AgentConfig,
        context_id: str,
        platform_context: FoundryAgentRequestContext,
    ) -> FoundryCheckpointStorage:
        super().get_store(config=config, context_id=context_id, platform_context=platform_context)
        return WitnessedStorage._on_core(
            self._core, context_id, allowed=self._allowed, request_context=platform_context
        )


provider = WitnessedProvider(store_prefix="killable")
app = ResponsesHostServer(
    workflow=build,
    parse_response=parse,
    checkpoint_store_provider=provider,
    options=ResponsesServerOptions(resilient_background=True),
)
atexit.register(provider.close)
