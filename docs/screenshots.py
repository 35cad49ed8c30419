"""Regenerate the explorer screenshots of ``docs/cli.md`` (``docs/images/ui-*.png``).

It runs the quickstart's graph, the MAF sample's workflow and an agent's conversation
(``FoundryHistoryProvider``) into a fresh local store, forks a
thread (``update_state`` and time travel), starts ``foundry-checkpoint ui`` on a free loopback
port, opens the URL it prints (its access token becomes the browser's cookie) and photographs
each view with Debian's Chromium through Playwright. Nothing is drawn by hand: run it again after
changing the page.

Run: ``python docs/screenshots.py`` (needs the ``test`` extra and ``apt-get install chromium``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images"


def _seed(root: Path) -> None:
    """Store a forked LangGraph thread and a MAF context under ``root``."""
    os.environ["AGENTSERVER_STATE_ROOT"] = str(root)
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "samples"))
    import maf_workflow_resume
    import quickstart

    from foundry_checkpoint import FoundryCheckpointer

    config = {"configurable": {"thread_id": "demo-thread"}}
    with FoundryCheckpointer() as saver:
        graph = quickstart.build(saver, crash=False)
        graph.invoke({"done": []}, config)
        history = list(saver.list(config))
        graph.update_state(history[3].config, {"done": ["edited by hand"]})
        graph.invoke(None, history[2].config)
    asyncio.run(maf_workflow_resume.main())
    asyncio.run(_seed_agent())


async def _seed_agent() -> None:
    """An agent's conversation in ``FoundryHistoryProvider``: a question, a tool call and its
    result, the answer."""
    from agent_framework import Content, Message

    from foundry_checkpoint_maf import FoundryHistoryProvider

    call = Content.from_function_call("call-1", "track_order", arguments={"order": 1042})
    result = Content.from_function_result("call-1", result={"status": "shipped", "eta": "Fri"})
    async with FoundryHistoryProvider() as history:
        await history.save_messages(
            "support-7",
            [
                Message("user", ["Where is my order 1042?"], author_name="ann"),
                Message("assistant", [call]),
                Message("tool", [result]),
                Message("assistant", ["It shipped yesterday and arrives on Friday."]),
            ],
        )
        await history.save_messages("billing-3", [Message("user", ["Refund, please"])])


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: Chromium is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="foundry-shots-"))
    env = {
        **os.environ,
        "AGENTSERVER_STATE_ROOT": str(root),
        "AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING": "true",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
         "from docs.screenshots import _seed; from pathlib import Path; "
         f"_seed(Path({str(root)!r}))"],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "foundry_checkpoint.cli", "--json", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        assert server.stdout is not None
        printed = json.loads(server.stdout.readline())["url"]  # http://127.0.0.1:PORT/?token=...
        url = printed.split("?", 1)[0]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 760})
            page.goto(printed)  # sets the cookie and lands on the index, without the token
            assert page.url == url, page.url
            page.screenshot(path=OUT / "ui-index.png")
            page.goto(f"{url}t/demo-thread")
            page.locator("svg").screenshot(path=OUT / "ui-tree.png")
            page.locator("svg g.node.head").click()
            page.screenshot(path=OUT / "ui-checkpoint.png")
            page.goto(f"{url}t/demo-thread")
            page.locator("form.diff button").click()
            page.screenshot(path=OUT / "ui-diff.png")
            page.goto(f"{url}m/conv-42")
            page.screenshot(path=OUT / "ui-maf.png")
            page.goto(f"{url}agents/history?session=support-7")
            page.screenshot(path=OUT / "ui-agent-history.png")
            browser.close()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    for path in sorted(OUT.glob("ui-*.png")):
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
