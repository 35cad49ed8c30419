"""The explorer's Agent Framework agent pages in a real browser (Chromium driven by Playwright):
the sessions a ``FoundryHistoryProvider`` keeps, a session's history a page at a time, one
message whole, stored markup shown as text. Local mode and hosted mode through the emulator;
screenshots go to ``test-output/ui/<test>/`` as the other explorer tests' do."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

from agent_framework import AgentSession, Content, Message
from playwright.sync_api import Browser, Page

from foundry_checkpoint_maf import FoundryHistoryProvider

from .conftest import Cli
from .test_ui_browser import PAYLOAD, browser, explorer, off_loop, page, shots, sign_in

__all__ = ["browser", "page", "shots"]  # the fixtures, shared with the other explorer tests


async def _seed(cli: Cli) -> None:
    call = Content.from_function_call("call-1", "search", arguments={"q": "<b>maf</b>"})
    async with FoundryHistoryProvider(**cli.env.kwargs()) as history:
        await history.save_messages(
            "chat-a",
            [
                Message("user", [PAYLOAD], author_name="ann"),
                Message("assistant", [call]),
                Message("tool", [Content.from_function_result("call-1", result="y" * 5000)]),
                Message("assistant", ["found it"]),
            ],
        )
        await history.save_messages("long", [Message("user", [f"m{i}"]) for i in range(60)])
        await history.save_messages(None, [Message("user", ["the default session"])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MAF marks SessionStore experimental
        from foundry_checkpoint_maf import FoundrySessionStore
    async with FoundrySessionStore(**cli.env.kwargs()) as sessions:
        for session_id in ("chat-a", "state-only"):
            await sessions.set(session_id, AgentSession(session_id=session_id))


def test_browse_agent_sessions_histories_and_messages(
    cli: Cli, browser: Browser, page: Page, shots: Path
) -> None:
    off_loop(asyncio.run, _seed(cli))
    listed = off_loop(cli.json, "maf", "sessions")["sessions"]
    shown = ["(default: '')" if r["session_id"] is None else r["session_id"] for r in listed]
    assert shown == ["(default: '')", "chat-a", "long", "state-only"]

    with explorer(cli) as served:
        url = sign_in(page, served)
        assert page.locator("table.sessions a.session").all_inner_texts() == shown
        page.screenshot(path=shots / "index-sessions.png", full_page=True)

        page.locator("a.sessions").click()
        assert page.url == f"{url}agents"
        rows = page.locator("table.sessions tbody tr")
        assert rows.count() == 4
        assert "60" in rows.nth(2).inner_text() and "0..59" in rows.nth(2).inner_text()
        cells = rows.nth(1).locator("td")  # chat-a: a history and a stored session state
        assert cells.nth(1).inner_text() == "4" and cells.nth(3).inner_text().endswith(" B")
        cells = rows.nth(3).locator("td")  # state-only: no history
        assert cells.nth(1).inner_text() == "-" and cells.nth(3).inner_text().endswith(" B")
        assert rows.nth(2).locator("td").nth(3).inner_text() == "-"  # long: no stored state

        page.locator("table.sessions a.session", has_text="chat-a").click()
        assert "/agents/history?session=chat-a" in page.url
        messages = page.locator("table.messages tbody tr")
        assert messages.count() == 4
        text = page.locator("table.messages").inner_text()
        assert PAYLOAD in text  # the stored markup, shown as text
        assert 'call search({"q": "<b>maf</b>"})' in text
        assert page.locator("main script, main img, main b").count() == 0
        assert "pwned" not in page.title()
        info = page.locator("table.info").inner_text()
        assert "4" in info and " B · written " in info  # the history and the stored session
        page.screenshot(path=shots / "history.png", full_page=True)

        page.locator("table.messages a.message", has_text="2").click()
        assert "/agents/message?" in page.url and "seq=2" in page.url
        assert "tool" in page.locator("table.info").inner_text()
        assert "y" * 5000 not in page.locator("main pre").inner_text()  # cut...
        page.locator("a.more").click()
        assert "y" * 5000 in page.locator("main pre").inner_text()  # ...the whole message there
        page.screenshot(path=shots / "message.png", full_page=True)

        page.goto(f"{url}agents/history?session=long")
        assert page.locator("table.messages tbody tr").count() == 50
        assert page.locator("table.messages tbody tr").first.inner_text().startswith("0")
        page.locator("a.next").click()
        later = page.locator("table.messages tbody tr")
        assert later.count() == 10 and later.last.inner_text().startswith("59")
        page.locator("a.prev").click()
        page.locator("a.newest").click()
        newest = page.locator("table.messages tbody tr")
        assert newest.count() == 50 and newest.first.inner_text().startswith("10")
        page.screenshot(path=shots / "history-newest.png", full_page=True)

        page.goto(url + "agents")
        page.locator("table.sessions a.session", has_text="state-only").click()
        assert "no history: only its AgentSession is stored" in page.locator("main").inner_text()
        assert " B · written " in page.locator("table.info").inner_text()

        page.goto(f"{url}agents/history?session=")
        assert "the default session" in page.locator("table.messages").inner_text()

        missing = page.goto(f"{url}agents/history?session=nope")
        assert missing is not None and missing.status == 404
        assert "has no history" in page.locator("main").inner_text()
        assert page.request.get(f"{url}agents/history").status == 400
        assert page.request.get(f"{url}agents/message?session=chat-a&seq=99").status == 404
        assert page.request.get(f"{url}agents/history?session=long&offset=-1").status == 400

        stranger = browser.new_context()  # the same browser, without the printed URL
        try:
            other = stranger.new_page()
            for path in ("agents", "agents/history?session=chat-a", "agents/message?session=x"):
                answer = other.goto(url + path)
                assert answer is not None and answer.status == 403, path
                assert "chat-a" not in other.content()
        finally:
            stranger.close()
