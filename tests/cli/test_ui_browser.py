"""``foundry-checkpoint ui`` in a real browser: Debian's Chromium driven by Playwright.

The explorer runs as its own process (``python -m foundry_checkpoint.cli ... ui``), on the store
``store_env`` prepares: the local default and hosted mode through the emulator. The browser opens
the URL the command printed, whose access token becomes a cookie; a browser without it gets 403.
A screenshot of each view goes to ``test-output/ui/<test>/`` (``FOUNDRY_TEST_OUTPUT`` moves the
folder).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from foundry_checkpoint._memory import FoundryStore
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests.maf import _workflows as wf

from .conftest import Cli, build, config

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
PAYLOAD = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


def off_loop(func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` in a worker thread: the sync Playwright API keeps an event loop running
    in this one, and the command line and the MAF seeding start their own."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(func, *args).result()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Chromium is missing: apt-get install chromium (make test installs it)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Path:
    """This test's output folder for screenshots (emptied first)."""
    base = Path(os.environ.get("FOUNDRY_TEST_OUTPUT", ROOT / "test-output"))
    folder = base / "ui" / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


@dataclass(frozen=True)
class Served:
    """A running explorer: the URL it printed (with its access token) and its process id."""

    url: str
    pid: int

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT/``: the URL without the token."""
        return self.url.split("?", 1)[0]

    @property
    def token(self) -> str:
        """The access token of the printed URL."""
        return parse_qs(urlsplit(self.url).query)["token"][0]

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port


@contextmanager
def explorer(cli: Cli, *extra: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """The explorer in its own process on a free loopback port (``env`` added to its
    environment); yields what it printed."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    }
    command = [sys.executable, "-m", "foundry_checkpoint.cli", *cli.options(), "--json"]
    server = subprocess.Popen(
        [*command, "ui", "--port", "0", *extra], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line, "the explorer exited before printing its URL"
        url = json.loads(line)["url"]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[A-Za-z0-9._~-]{32,}", url), url
        yield Served(url, server.pid)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def sign_in(page: Page, served: Served) -> str:
    """Open the printed URL as a user would: its token becomes an HttpOnly, SameSite=Strict
    cookie and leaves the address bar (a redirect). Returns the URL without the token."""
    page.goto(served.url)
    assert page.url == served.base
    (cookie,) = [  # cookies do not tell ports apart: each explorer's name carries its port
        c
        for c in page.context.cookies(served.base)
        if c["name"] == f"foundry-explorer-{served.port}"
    ]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    return served.base


def _forked(cli: Cli) -> dict[str, str | None]:
    """Thread ``f`` forked by ``update_state`` and by time travel; its parent links."""
    with cli.saver() as saver:
        graph = build(saver)
        graph.invoke({"steps": []}, config("f"))
        history = list(saver.list(config("f")))
        graph.update_state(history[2].config, {"steps": ["edited"]})
        graph.invoke(None, history[1].config)
        return {
            c.config["configurable"]["checkpoint_id"]: (c.parent_config or {})
            .get("configurable", {})
            .get("checkpoint_id")
            for c in saver.list(config("f"))
        }


async def _seed_maf(cli: Cli) -> None:
    async with FoundryCheckpointStorage("conv-a", **cli.env.kwargs()) as storage:
        await wf.pipeline(storage).run("one")
        await wf.pipeline(storage).run("two")


def test_browse_threads_tree_values_diff_and_lineage(
    cli: Cli, browser: Browser, page: Page, shots: Path
) -> None:
    parents = _forked(cli)
    with cli.saver() as saver:
        build(saver).invoke({"steps": []}, config("t1"))
    off_loop(asyncio.run, _seed_maf(cli))
    with AutoGenStateStore(**cli.env.kwargs()) as store:
        store.save("demo", "agent", "counter/ann", {"count": 1})
        store.save("demo", "agent", "counter/ann", {"count": 2, "history": ["a", "b"]})
    threads = [t["thread_id"] for t in off_loop(cli.json, "threads")["threads"]]
    contexts = off_loop(cli.json, "maf", "contexts")["contexts"]
    scopes = off_loop(cli.json, "autogen", "scopes")["scopes"]

    with explorer(cli) as served:
        url = sign_in(page, served)
        assert page.locator("table.threads a.thread").all_inner_texts() == threads
        listed = page.locator("table.contexts a.context").all_inner_texts()
        assert listed == [c["context_id"] for c in contexts]
        assert page.locator("table.scopes a.scope").all_inner_texts() == [
            s["scope"] for s in scopes
        ]
        page.screenshot(path=shots / "index.png", full_page=True)

        page.locator("table.threads a.thread", has_text="f").first.click()
        nodes = page.locator("svg g.node")
        assert nodes.count() == len(parents)  # one node per checkpoint
        drawn = {
            nodes.nth(i).get_attribute("data-checkpoint"): nodes.nth(i).get_attribute("data-parent")
            for i in range(nodes.count())
        }
        assert drawn == {k: v or "" for k, v in parents.items()}  # the right branches
        head = page.locator("svg g.node.head")
        assert head.count() == 1
        newest = next(iter(parents))  # saver.list is newest first
        assert head.get_attribute("data-checkpoint") == newest
        page.screenshot(path=shots / "thread-tree.png", full_page=True)

        head.click()
        assert "/c/" in page.url
        steps = page.locator("table.values tr", has_text="steps").inner_text()
        assert '"a"' in steps and '"b"' in steps
        assert page.locator("table.info").inner_text().count(newest) == 1
        page.screenshot(path=shots / "checkpoint.png", full_page=True)

        page.goto(f"{url}t/f")
        page.locator("form.diff button").click()
        assert "/diff?" in page.url
        diff = page.locator("table.diff").inner_text()
        assert "changed" in diff
        page.screenshot(path=shots / "diff.png", full_page=True)

        page.goto(url)
        page.locator("table.contexts a.context", has_text="conv-a").click()
        lineage = page.locator("svg g.node")
        assert lineage.count() == contexts[0]["checkpoints"]
        assert (
            page.locator("svg g.node.head").get_attribute("data-checkpoint")
            == (contexts[0]["latest"]["checkpoint_id"])
        )
        page.screenshot(path=shots / "maf-lineage.png", full_page=True)
        page.locator("table.lineage a.checkpoint").last.click()
        assert "bytes stored (inline)" in page.locator("table.info").inner_text()
        page.screenshot(path=shots / "maf-checkpoint.png", full_page=True)

        page.goto(url)
        page.locator("table.scopes a.scope", has_text="demo").click()
        page.locator("table.states a.state", has_text="counter/ann").click()
        assert '"history"' in page.locator("main pre").first.inner_text()
        assert page.locator("table.versions a.version").count() == 2
        page.screenshot(path=shots / "autogen-state.png", full_page=True)

        stranger = browser.new_context()  # the same browser, without the printed URL
        try:
            other = stranger.new_page()
            for path in ("", "t/f", "m/conv-a", "a/demo", "memory", "favicon.ico"):
                answer = other.goto(url + path)
                assert answer is not None and answer.status == 403, path
                assert "conv-a" not in other.content() and "forbidden" in other.content()
            wrong = other.goto(f"{url}?token={served.token[::-1]}")
            assert wrong is not None and wrong.status == 403
            assert stranger.cookies() == []
        finally:
            stranger.close()


def test_stored_markup_renders_as_text_and_long_values_are_cut(
    cli: Cli, page: Page, shots: Path
) -> None:
    with cli.saver() as saver:
        build(saver).invoke({"steps": [PAYLOAD, "x" * 5000]}, config("xss"))
    with explorer(cli) as served:
        url = sign_in(page, served)
        page.goto(f"{url}t/xss")
        page.locator("table.history a.checkpoint").first.click()
        values = page.locator("table.values")
        assert "<script>document.title='pwned'</script>" in values.inner_text()
        assert page.locator("main script, main img").count() == 0
        assert "pwned" not in page.title()
        assert "x" * 5000 not in values.inner_text()  # cut...
        page.screenshot(path=shots / "escaped-and-cut.png", full_page=True)
        page.locator("a.more").first.click()
        assert "x" * 5000 in page.locator("table.values").inner_text()  # ...with a way to see it
        assert "pwned" not in page.title()
        page.screenshot(path=shots / "see-more.png", full_page=True)


def test_writes_need_allow_writes_and_a_confirmation(cli: Cli, page: Page, shots: Path) -> None:
    with cli.saver() as saver:
        build(saver).invoke({"steps": []}, config("t1"))
        build(saver).invoke({"steps": []}, config("t2"))

    with explorer(cli) as served:
        url = sign_in(page, served)
        page.goto(f"{url}t/t1")
        page.locator("a.delete").click()
        assert "read-only" in page.locator("main").inner_text()
        page.screenshot(path=shots / "read-only-refuses.png", full_page=True)
        posted = page.request.post(f"{url}t/t1/delete", form={"token": "guess"})
        assert posted.status == 403
    assert "t1" in [t["thread_id"] for t in off_loop(cli.json, "threads")["threads"]]

    with explorer(cli, "--allow-writes") as served:
        url = sign_in(page, served)
        forged = page.request.post(f"{url}t/t1/delete", form={"token": "guess"})
        assert forged.status == 403  # no token from the confirmation page: refused
        page.goto(f"{url}t/t1")
        page.locator("a.delete").click()
        assert "Delete thread t1?" in page.locator("h1").inner_text()
        page.screenshot(path=shots / "confirm-delete.png", full_page=True)
        page.locator("form.confirm button").click()
        assert page.url == url
        assert page.locator("table.threads a.thread").all_inner_texts() == ["t2"]
        page.screenshot(path=shots / "after-delete.png", full_page=True)
    assert [t["thread_id"] for t in off_loop(cli.json, "threads")["threads"]] == ["t2"]


def test_browse_memory_namespaces_items_and_values(cli: Cli, page: Page, shots: Path) -> None:
    memories: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {
        (("users", "ann"), "prefs"): {"theme": "dark", "langs": ["en", "fr"]},
        (("users", "ann"), "note"): {"text": PAYLOAD},
        (("users", "a/b"), "long"): {"text": "y" * 5000},
        (("docs",), "d1"): {"title": "hello"},
    }
    with FoundryStore(**cli.env.kwargs()) as store:
        for (ns, key), value in memories.items():
            store.put(ns, key, value)
    namespaces = off_loop(cli.json, "memory", "namespaces")["namespaces"]
    assert namespaces == [["docs"], ["users", "a/b"], ["users", "ann"]]

    with explorer(cli) as served:
        url = sign_in(page, served)
        listed = page.locator("table.memory-namespaces a.namespace").all_inner_texts()
        assert listed == ["docs", "users/a%2Fb", "users/ann"]  # as the CLI takes them
        page.screenshot(path=shots / "index-memory.png", full_page=True)

        page.locator("a.memory").click()
        assert page.url == f"{url}memory"
        assert page.locator("table.memory-namespaces a.namespace").count() == 3
        page.locator("table.memory-namespaces a.namespace", has_text="users/ann").click()
        rows = page.locator("table.memory-items tbody tr")
        assert rows.count() == 2
        text = page.locator("table.memory-items").inner_text()
        assert '"theme": "dark"' in text and "<script>document.title='pwned'</script>" in text
        assert page.locator("main script, main img").count() == 0
        assert "pwned" not in page.title()
        page.screenshot(path=shots / "memory-items.png", full_page=True)

        page.locator("table.memory-items a.item", has_text="prefs").click()
        assert "/memory/item?" in page.url
        assert page.locator("table.info").inner_text().count("users/ann") == 1
        assert '"fr"' in page.locator("main pre").inner_text()
        page.screenshot(path=shots / "memory-item.png", full_page=True)

        page.goto(f"{url}memory/items?ns=users&ns=a%2Fb")  # a '/' inside a label
        assert "y" * 5000 not in page.locator("table.memory-items").inner_text()  # cut...
        page.locator("a.more").first.click()
        assert "y" * 5000 in page.locator("main pre").inner_text()  # ...the whole value there
        page.screenshot(path=shots / "memory-long-value.png", full_page=True)

        missing = page.goto(f"{url}memory/item?ns=users&ns=ann&key=nope")
        assert missing is not None and missing.status == 404
        assert "has no item 'nope'" in page.locator("main").inner_text()
        assert page.request.get(f"{url}memory/items?ns=").status == 400
