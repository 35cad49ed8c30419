"""Hosted mode offline: the quickstart app, unchanged, against the Foundry state-store emulator.

What it shows:
- ``FoundryEmulator`` serves the hosted state store's REST API over HTTPS on 127.0.0.1, so the
  real ``FoundryStateStore`` client runs in hosted mode without a Foundry project or network;
- the app is the one of ``quickstart.py``; only the environment changes, as in a Foundry-hosted
  agent: ``FOUNDRY_HOSTING_ENVIRONMENT`` and ``FOUNDRY_PROJECT_ENDPOINT`` are set, and the
  checkpointer gets a credential (here the emulator's test credential instead of
  ``DefaultAzureCredential``) and the emulator's CA file (``connection_verify``);
- crash and resume work exactly as locally, and the emulator counts the requests made;
- user isolation: another user does not see the thread.

Run: ``python samples/hosted_offline.py``
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

from langchain_core.runnables import RunnableConfig

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.emulator import FoundryEmulator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart import build

CONFIG: RunnableConfig = {"configurable": {"thread_id": "demo-thread"}}


def main() -> None:
    os.environ.setdefault("AGENTSERVER_STATE_ROOT", tempfile.mkdtemp(prefix="foundry-offline-"))
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    # The SDK logs every 4xx answer at WARNING, including expected ones (a store that does not
    # exist yet answers 404 before it is created); keep the sample's output readable.
    logging.getLogger("azure.ai.agentserver.core").setLevel(logging.ERROR)

    with FoundryEmulator() as emulator:
        # What the Foundry hosting platform sets for a hosted agent:
        os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "emulator"
        os.environ["FOUNDRY_PROJECT_ENDPOINT"] = emulator.endpoint
        print(f"emulator listening at {emulator.endpoint}")

        def checkpointer(user: str) -> FoundryCheckpointer:
            return FoundryCheckpointer(
                credential=emulator.credential(user=user), connection_verify=emulator.ca_file
            )

        print("1) first run as alice, which crashes before it finishes:")
        with checkpointer("alice") as saver:
            print(f"   backend: {saver.kind}")
            try:
                build(saver, crash=True).invoke({"done": []}, CONFIG)
            except RuntimeError as exc:
                print(f"   crashed: {exc}")

        print("2) a new checkpointer resumes alice's thread from the hosted store:")
        with checkpointer("alice") as saver:
            graph = build(saver, crash=False)
            print(f"   saved progress: {graph.get_state(CONFIG).values['done']}")
            result = graph.invoke(None, CONFIG)
            print(f"   finished: {result['done']}")

        print("3) bob, another end user, asks for the same thread id:")
        with checkpointer("bob") as saver:
            print(f"   bob sees a checkpoint: {saver.get_tuple(CONFIG) is not None}")

        counts = emulator.requests
        print(
            f"requests served: {sum(counts.values())} "
            f"(put_item {counts['put_item']}, get_item {counts['get_item']}, "
            f"list_keys {counts['list_keys']})"
        )


if __name__ == "__main__":
    main()
