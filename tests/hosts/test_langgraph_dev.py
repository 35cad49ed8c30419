"""``langgraph dev`` (without ``--allow-blocking``) serving a graph on ``FoundryCheckpointer``.

The LangGraph server's in-memory runtime arms blockbuster unless ``--allow-blocking`` is given;
a blocking call made on any event loop (the server's, or the saver's private one) then ends the
run in ``error``. These tests run the real server: a ``langgraph-sdk`` client creates a thread,
runs it to an interrupt, the server is restarted, and the client reads the state back, resumes
the run and reads the thread's history, all from the embedded local store. The sample project
``samples/langgraph_server`` (its own files, copied to a temporary folder because the server
writes its records there) adds ``FoundryStore``: the server's store API (put, get, search with a
filter, list_namespaces, delete) across a restart, the memory the graph wrote read through the
server and with ``FoundryStore`` itself; the same sample in a hosted agent's environment on
the emulator; and semantic search with an index from ``langgraph.json``'s store section.

The server (langgraph-cli with the in-memory runtime, Elastic-2.0 licensed) cannot share the
test environment: it needs protobuf 6 and grpcio 1.81, AutoGen's gRPC runtime protobuf 5.29 and
grpcio 1.70. So the first run builds a venv of its own, ``.venv-langgraph-dev`` (this package
with the ``langgraph`` extra, editable, and ``langgraph-cli[inmem]``; ~45 s), rebuilt when
``pyproject.toml`` or ``constraints.txt`` change.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from filelock import FileLock
from langgraph_sdk import get_sync_client

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "apps" / "langgraph_dev"
VENV = ROOT / ".venv-langgraph-dev"
SERVER = "langgraph-cli[inmem]>=0.4.40"
_READY_SECONDS = 90.0
_STOP_SECONDS = 20.0


def _wanted() -> str:
    material = b"".join(
        (ROOT / name).read_bytes() for name in ("pyproject.toml", "constraints.txt")
    )
    return hashlib.sha256(material + SERVER.encode()).hexdigest()


@pytest.fixture(scope="module")
def langgraph_cli() -> Path:
    """The ``langgraph`` command of the server's own venv (built on first use)."""
    stamp = VENV / ".installed"
    with FileLock(str(VENV) + ".lock"):
        wanted = _wanted()  # before installing: the files may change while pip runs
        if not stamp.is_file() or stamp.read_text() != wanted:
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            python = str(VENV / "bin" / "python")
            pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            subprocess.run(
                [*pip, "-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[langgraph]", SERVER],
                check=True,
                cwd=ROOT,
            )
            stamp.write_text(wanted)
    return VENV / "bin" / "langgraph"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevServer:
    """One ``langgraph dev`` process serving ``project`` on a loopback port."""

    def __init__(self, cli: Path, project: Path, env: dict[str, str], log: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.log = log
        port = self.url.rsplit(":", 1)[1]
        command = [str(cli), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [*command, "--port", port],
                cwd=project,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + _READY_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"langgraph dev exited early:\n{self.text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"langgraph dev not ready in {_READY_SECONDS}s:\n{self.text()}")

    def stop(self) -> None:
        """SIGTERM to the server's process group; SIGKILL when it does not stop in time."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(_STOP_SECONDS)

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def serve(langgraph_cli: Path, tmp_path: Path) -> Iterator[Any]:
    """Start ``langgraph dev`` on a project (``serve()`` again: a restart), with ``extra``
    environment variables (a hosted agent's, say).

    The project's files are copied once into ``tmp_path`` (the server keeps its own records of
    threads and runs, and its default store, in the folder it runs in: ``.langgraph_api``).
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FOUNDRY_", "LANGSMITH_", "LANGCHAIN_", "AZURE_", "PYTHON"))
    }
    env.update(
        AGENTSERVER_STATE_ROOT=str(tmp_path / "state"),
        AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING="true",
        LANGSMITH_TRACING="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
    )
    servers: list[DevServer] = []

    def start(source: Path = PROJECT, extra: Mapping[str, str] | None = None) -> DevServer:
        project = tmp_path / "project"
        if not project.exists():
            shutil.copytree(source, project, ignore=shutil.ignore_patterns("__pycache__"))
        server = DevServer(
            langgraph_cli, project, {**env, **(extra or {})}, tmp_path / "server.log"
        )
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_langgraph_dev_serves_threads_on_our_saver_across_a_restart(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    client = get_sync_client(url=server.url)
    thread = client.threads.create()
    thread_id = thread["thread_id"]
    paused = client.runs.wait(thread_id, "agent", input={"notes": []})
    assert isinstance(paused, dict), paused
    assert paused["notes"] == ["draft"]
    assert paused["__interrupt__"][0]["value"] == "approve the draft?"
    assert client.threads.get_state(thread_id)["next"] == ["review"]

    server.stop()
    server = serve()  # a new process: the thread's checkpoints come back from the store
    client = get_sync_client(url=server.url)
    state = client.threads.get_state(thread_id)
    assert state["next"] == ["review"]
    assert state["values"] == {"notes": ["draft"]}
    done = client.runs.wait(thread_id, "agent", command={"resume": "ok"})
    assert done == {"notes": ["draft", "review:ok"]}
    history = client.threads.get_history(thread_id)
    assert len(history) >= 4
    assert history[0]["values"] == {"notes": ["draft", "review:ok"]}
    assert history[0]["next"] == []
    server.stop()

    log = server.text()
    assert "Using custom checkpointer: FoundryCheckpointer" in log
    assert "BlockingError" not in log and "Blocking call" not in log
    assert "--allow-blocking, which allows" not in log  # the check was armed
    assert (tmp_path / "state" / "foundry_checkpoint" / "state.sqlite3").is_file()


SAMPLE = ROOT / "samples" / "langgraph_server"


def test_langgraph_dev_serves_the_sample_on_our_saver_and_store(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sample's ``langgraph.json`` unchanged: threads on our saver, memories in our store."""
    server = serve(SAMPLE)
    client = get_sync_client(url=server.url)
    thread_id = client.threads.create()["thread_id"]
    paused = client.runs.wait(thread_id, "agent", input={"topic": "tea"})
    assert isinstance(paused, dict), paused
    assert paused["notes"] == ["draft 1 on tea"]
    assert paused["__interrupt__"][0]["value"] == "approve the draft?"
    # The server's store API, on our store.
    client.store.put_item(["prefs", "alice"], "drink", {"likes": "tea", "cups": 3})
    client.store.put_item(["prefs", "alice"], "food", {"likes": "rice", "cups": 0})
    client.store.put_item(["prefs", "bob"], "drink", {"likes": "coffee", "cups": 1})
    assert client.store.get_item(["prefs", "alice"], "drink")["value"]["likes"] == "tea"
    found = client.store.search_items(["prefs"], filter={"cups": {"$gte": 1}})["items"]
    assert sorted(i["namespace"][1] + "/" + i["key"] for i in found) == [
        "alice/drink",
        "bob/drink",
    ]
    spaces = client.store.list_namespaces(prefix=["prefs"])["namespaces"]
    assert sorted(spaces) == [["prefs", "alice"], ["prefs", "bob"]]
    client.store.delete_item(["prefs", "alice"], "food")

    server.stop()
    # The server's own default store lives in its folder; drop it: ours must not need it.
    for pickle in (tmp_path / "project" / ".langgraph_api").glob("store*.pckl"):
        pickle.unlink()
    server = serve(SAMPLE)  # a new process: checkpoints and memories come back from our stores
    client = get_sync_client(url=server.url)
    assert client.threads.get_state(thread_id)["next"] == ["review"]
    done = client.runs.wait(thread_id, "agent", command={"resume": "ok"})
    assert done == {"topic": "tea", "notes": ["draft 1 on tea", "review:ok"]}
    history = client.threads.get_history(thread_id)
    assert len(history) >= 4
    assert history[0]["values"] == {"topic": "tea", "notes": ["draft 1 on tea", "review:ok"]}
    assert history[0]["next"] == []
    # The memory the graph wrote (get_store() in a sync node), read through the server.
    memory = client.store.get_item(["approved", "tea"], thread_id)
    assert memory["value"] == {"draft": "draft 1 on tea", "verdict": "ok"}
    assert [i["key"] for i in client.store.search_items(["approved"])["items"]] == [thread_id]
    assert client.store.list_namespaces(prefix=["approved"])["namespaces"] == [["approved", "tea"]]
    # What the API wrote before the restart, still there (and the delete stayed done).
    assert client.store.get_item(["prefs", "alice"], "drink")["value"]["cups"] == 3
    left = client.store.search_items(["prefs", "alice"])["items"]
    assert [i["key"] for i in left] == ["drink"]
    # A new thread's draft reads the first thread's approval (runtime.store in an async node).
    second = client.threads.create()["thread_id"]
    again = client.runs.wait(second, "agent", input={"topic": "tea"})
    assert isinstance(again, dict), again
    assert again["notes"] == ["draft 2 on tea"]
    # Copy a thread (our acopy_thread) and delete one (our adelete_thread).
    client.threads.copy(second)
    known = {thread_id, second}
    (copy,) = [
        t["thread_id"] for t in client.threads.search(limit=100) if t["thread_id"] not in known
    ]
    assert client.threads.get_state(copy)["values"] == client.threads.get_state(second)["values"]
    client.threads.delete(second)
    server.stop()

    log = server.text()
    assert "Using custom checkpointer: FoundryCheckpointer" in log
    assert "Using custom store: FoundryStore(" in log
    assert "Using custom store. Skipping store TTL sweeper." in log
    assert "BlockingError" not in log and "Blocking call" not in log
    assert "--allow-blocking, which allows" not in log  # the check was armed

    # Checkpoints and memories are in our stores: read them directly, the server stopped.
    from foundry_checkpoint import FoundryCheckpointer, FoundryStore

    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    with FoundryCheckpointer() as saver:

        def latest(thread: str) -> Any:
            return saver.get_tuple({"configurable": {"thread_id": thread}})

        assert latest(thread_id) is not None
        assert latest(copy) is not None
        assert latest(second) is None  # deleted through the server
    with FoundryStore() as store:
        item = store.get(("approved", "tea"), thread_id)
        assert item is not None
        assert item.value == {"draft": "draft 1 on tea", "verdict": "ok"}
        assert store.get(("prefs", "alice"), "food") is None
        assert sorted(store.list_namespaces(prefix=("prefs",))) == [
            ("prefs", "alice"),
            ("prefs", "bob"),
        ]


@pytest.mark.emulator
def test_langgraph_dev_serves_the_sample_in_hosted_mode(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sample in a hosted agent's environment (the emulator): nothing is kept locally;
    the server, outside any Foundry request, runs as the agent's own identity."""
    from foundry_checkpoint import FoundryStore
    from foundry_checkpoint.emulator import FoundryEmulator
    from foundry_checkpoint.emulator._platform import AGENT_IDENTITY

    with FoundryEmulator() as emu:
        hosted = emu.agent_environment(session_id="langgraph-dev")
        server = serve(SAMPLE, hosted)
        client = get_sync_client(url=server.url)
        thread_id = client.threads.create()["thread_id"]
        paused = client.runs.wait(thread_id, "agent", input={"topic": "tea"})
        assert isinstance(paused, dict), paused
        assert paused["__interrupt__"][0]["value"] == "approve the draft?"
        client.store.put_item(["prefs", "alice"], "drink", {"likes": "tea"})
        server.stop()

        server = serve(SAMPLE, hosted)
        client = get_sync_client(url=server.url)
        done = client.runs.wait(thread_id, "agent", command={"resume": "ok"})
        assert done == {"topic": "tea", "notes": ["draft 1 on tea", "review:ok"]}
        assert client.threads.get_history(thread_id)[0]["next"] == []
        memory = client.store.get_item(["approved", "tea"], thread_id)
        assert memory["value"] == {"draft": "draft 1 on tea", "verdict": "ok"}
        assert client.store.get_item(["prefs", "alice"], "drink")["value"] == {"likes": "tea"}
        server.stop()

        log = server.text()
        assert "backend='hosted'" in log
        assert "BlockingError" not in log and "Blocking call" not in log
        assert not (tmp_path / "state" / "foundry_checkpoint").exists()  # nothing local
        monkeypatch.setenv("FOUNDRY_HOSTING_ENVIRONMENT", "emulator")
        for user, expected in (
            (AGENT_IDENTITY, {"draft": "draft 1 on tea", "verdict": "ok"}),
            ("someone-else", None),
        ):
            with FoundryStore(
                endpoint=emu.endpoint,
                credential=emu.credential(user=user),
                connection_verify=emu.ca_file,
            ) as store:
                item = store.get(("approved", "tea"), thread_id)
                assert (None if item is None else item.value) == expected, user


#: A deterministic embedding for the index variant: letter counts (no model, no network).
EMBEDDINGS = """def embed(texts):
    return [[text.count(c) + 0.01 for c in "aeioustr"] for text in texts]
"""


def test_langgraph_dev_semantic_search_from_the_store_section(serve: Any, tmp_path: Path) -> None:
    """The sample with an ``"index"`` in ``langgraph.json``'s store section (an embed file of
    the project): ``search_items(query=...)`` through the server, before and after a restart."""
    project = tmp_path / "project"
    shutil.copytree(SAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    config = json.loads((project / "langgraph.json").read_text(encoding="utf-8"))
    config["store"]["index"] = {"dims": 8, "embed": "./embeddings.py:embed", "fields": ["likes"]}
    config["store"]["ttl"] = {"default_ttl": 60, "sweep_interval_minutes": 30}
    (project / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    (project / "embeddings.py").write_text(EMBEDDINGS, encoding="utf-8")

    server = serve()
    client = get_sync_client(url=server.url)
    for key, likes in (("a", "coffee"), ("b", "tea"), ("c", "rice")):
        client.store.put_item(["prefs", "ann"], key, {"likes": likes})
    found = client.store.search_items(["prefs"], query="tea", limit=2)["items"]
    assert [i["key"] for i in found] == ["b", "a"]
    assert found[0]["score"] == pytest.approx(1.0)
    server.stop()

    server = serve()
    client = get_sync_client(url=server.url)
    again = client.store.search_items(["prefs"], query="tea", limit=2)["items"]
    assert [(i["key"], i["score"]) for i in again] == [(i["key"], i["score"]) for i in found]
    server.stop()
    log = server.text()
    assert "Using custom store: FoundryStore(" in log
    assert "BlockingError" not in log and "Blocking call" not in log


def test_langgraph_dev_refuses_the_colon_form_of_a_module_path(serve: Any, tmp_path: Path) -> None:
    """What docs/langgraph-server.md says: ``module:name`` does not load, ``module.name`` does
    (langgraph-api splits a path without ``/`` or ``.py:`` at its last dot)."""
    project = tmp_path / "project"
    shutil.copytree(SAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    config = json.loads((project / "langgraph.json").read_text(encoding="utf-8"))
    config["checkpointer"]["path"] = "foundry_checkpoint.langgraph_server:checkpointer"
    (project / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(AssertionError, match="exited early") as failed:
        serve()
    assert "Could not find checkpointer" in str(failed.value)
