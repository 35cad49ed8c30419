"""Hosted agents, offline: a LangGraph graph, a MAF workflow and a MAF chat agent, as on Foundry.

What it shows:
- ``samples/hosted_agents/langgraph_agent.py`` (azure-ai-agentserver-invocations),
  ``samples/hosted_agents/maf_agent.py`` and ``samples/hosted_agents/maf_chat_agent.py``
  (agent-framework-foundry-hosting's ``ResponsesHostServer``, a workflow and an ``Agent``) run
  unchanged, each in its own process, in **hosted mode** against the
  state-store emulator: ``FoundryEmulator.agent_environment()`` gives them what the platform
  gives a hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT``, ``FOUNDRY_PROJECT_ENDPOINT``, a managed
  identity for ``DefaultAzureCredential``, trust in the emulator's certificate);
- requests arrive over HTTP on 127.0.0.1 as the platform sends them: each carries a fresh
  ``x-agent-foundry-call-id`` that the emulator resolves to its user, and ``x-agent-user-id``;
- one checkpointer (one provider) per process serves every user: Alice and Bob use the **same**
  thread id and the same conversation id and never see each other's state;
- a server is killed while a question is pending; a new process answers it from the store;
- the chat agent's history (``FoundryHistoryProvider``) and sessions
  (``FoundrySessionStoreProvider``) go on in a new process after a kill, each user's own.

Run: ``python samples/hosted_agents_offline.py``
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from foundry_checkpoint.emulator import FoundryEmulator

APPS = Path(__file__).resolve().parent / "hosted_agents"


class Agent:
    """One agent process serving ``module:app`` on a loopback socket opened here."""

    def __init__(self, target: str, env: dict[str, str], emulator: FoundryEmulator) -> None:
        self.target, self.env, self.emulator = target, env, emulator
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> Agent:
        with socket.socket() as listener:  # 127.0.0.1, a port the OS picks
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
            fd = listener.fileno()
            command = [sys.executable, "-m", "hypercorn", "--workers", "0"]
            self.process = subprocess.Popen(
                [*command, "--bind", f"fd://{fd}", self.target],
                cwd=APPS,
                env=self.env,
                pass_fds=[fd],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/readiness", timeout=2):
                    return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.target} exited early") from None
                time.sleep(0.2)
        raise RuntimeError(f"{self.target} did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def post(self, user: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """What the platform does for each request: a new call id for the user, two headers."""
        headers = {
            "Content-Type": "application/json",
            "x-agent-foundry-call-id": self.emulator.mint_call(user),
            "x-agent-user-id": user,
        }
        request = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer


def langgraph(env: dict[str, str], emulator: FoundryEmulator) -> None:
    print("LangGraph graph on the Invocations protocol:")
    agent = Agent("langgraph_agent:app", env, emulator).start()
    try:

        def say(user: str, body: dict[str, Any]) -> dict[str, Any]:
            return agent.post(user, "/invocations", {"thread_id": "main", **body})

        for user in ("alice", "bob"):
            said = say(user, {"message": f"hello, I am {user}"})
            print(f"  [{user}] thread 'main': {said['messages'][-1]}")
        paused = say("alice", {"message": "refund order 17"})
        print(f"  [alice] paused: {paused['pending'][0]}")
        agent.kill()
        print("  server killed; a new process starts")
        agent.start()
        print(f"  [alice] still pending: {say('alice', {'action': 'state'})['pending'][0]}")
        print(f"  [alice] resumed: {say('alice', {'resume': 'yes'})['messages'][-1]}")
        print(f"  [bob] thread 'main': {say('bob', {'action': 'state'})['messages']}")
    finally:
        agent.kill()


def pending_question(response: dict[str, Any]) -> tuple[str, str]:
    """A paused turn's ``function_call`` item: its call id and the question asked."""
    call = next(item for item in response["output"] if item["type"] == "function_call")
    return call["call_id"], json.loads(call["arguments"])["request"]["text"]


def maf(env: dict[str, str], emulator: FoundryEmulator) -> None:
    print("MAF workflow on ResponsesHostServer:")
    agent = Agent("maf_agent:app", env, emulator).start()
    try:

        def respond(user: str, input_: Any) -> dict[str, Any]:
            body = {"input": input_, "conversation": "conv_expenses", "store": True}
            return agent.post(user, "/responses", body)

        calls = {}
        for user, claim in (("alice", "taxi 38 EUR"), ("bob", "hotel 120 EUR")):
            calls[user], question = pending_question(respond(user, claim))
            print(f"  [{user}] conversation 'conv_expenses' waits for a human: {question}")
        agent.kill()
        print("  server killed; a new process starts")
        agent.start()
        for user, reply in (("alice", "approved"), ("bob", "rejected")):
            answer = [{"type": "function_call_output", "call_id": calls[user], "output": reply}]
            done = respond(user, answer)
            print(f"  [{user}] answered: {done['output'][0]['content'][0]['text']}")
        print(f"  [alice] next: {pending_question(respond('alice', 'train 20 EUR'))[1]}")
    finally:
        agent.kill()


def maf_chat(env: dict[str, str], emulator: FoundryEmulator) -> None:
    print("MAF chat agent on ResponsesHostServer:")
    agent = Agent("maf_chat_agent:app", env, emulator).start()
    try:

        def say(user: str, text: str) -> str:
            body = {"input": text, "conversation": "conv_notes", "store": True}
            response = agent.post(user, "/responses", body)
            return str(response["output"][0]["content"][0]["text"])

        for user, text in (("alice", "buy milk"), ("bob", "call the bank")):
            print(f"  [{user}] conversation 'conv_notes': {say(user, text)}")
        agent.kill()
        print("  server killed; a new process starts")
        agent.start()
        for user, text in (("alice", "book a table"), ("bob", "pay rent")):
            print(f"  [{user}] conversation 'conv_notes': {say(user, text)}")
    finally:
        agent.kill()


def main() -> None:
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    root = os.environ.get("AGENTSERVER_STATE_ROOT") or tempfile.mkdtemp(prefix="hosted-agents-")
    with FoundryEmulator() as emulator:
        env = {
            **os.environ,
            **emulator.agent_environment(session_id="offline-session"),
            "AGENTSERVER_STATE_ROOT": root,  # the Responses host's local files (offline only)
        }
        langgraph(env, emulator)
        maf(env, emulator)
        maf_chat(env, emulator)
        print(f"state-store requests served: {sum(emulator.requests.values())}")


if __name__ == "__main__":
    main()
