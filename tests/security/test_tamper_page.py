"""The explorer page never runs a planted gadget: each view answers with a refusal instead.

An attacker plants a LangGraph gadget (a msgpack constructor of ``os.system``, ``eval`` or
``subprocess``, or a ``pickle`` value) in a thread and a MAF gadget (``TypeAdapter`` through a
re-exporting ``agent_framework`` module, ``os.system``) in a context; ``foundry-checkpoint ui``
then serves every page that decodes them, in its own process, locally and through the emulator,
to a client that opened the URL it printed (its access token is then a cookie).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests.cli.conftest import Cli
from tests.cli.test_ui_browser import explorer

from ._gadgets import langgraph_gadgets
from .test_tamper_langgraph import _plant as plant_langgraph
from .test_tamper_maf import _gadgets as maf_gadgets
from .test_tamper_maf import _plant as plant_maf


def _get(client: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    """Status and body of a GET by ``client``, error statuses included."""
    try:
        with client.open(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(
    ("langgraph", "maf"),
    [
        ("os_system", "type_adapter_tools"),
        ("eval", "os_system"),
        ("pickle", "type_adapter_types"),
        ("os_system", "metaclass"),
        ("eval", "reconstructor"),
    ],
)
async def test_every_page_refuses_a_planted_gadget(
    store_env: Any, tmp_path: Path, langgraph: str, maf: str
) -> None:
    marker = tmp_path / "ran"
    checkpoint_id = plant_langgraph(
        store_env, "t1", langgraph_gadgets(marker)[langgraph], as_write=False
    )
    async with FoundryCheckpointStorage("conv", **store_env.kwargs()) as attacker:
        maf_id = await plant_maf(attacker, maf_gadgets(marker)[maf])

    with explorer(Cli(store_env, CliRunner())) as served:
        url = served.base
        client = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        index_status, index = _get(client, served.url)  # the printed URL: a cookie, the index
        assert index_status == 200, index[-1500:]  # one bad thread does not hide the others
        assert "t1" in index and "conv" in index
        assert "refused" in index
        status, body = _get(client, f"{url}t/t1/c/{checkpoint_id}")
        assert status == 422, (status, body[-1500:])
        assert "nothing was called" in body.lower(), body[-1500:]
        status, body = _get(client, f"{url}m/conv/c/{maf_id}")  # what is known, and why no state
        assert status == 200, (status, body[-1500:])
        assert "cannot be decoded here" in body and maf_id in body, body[-1500:]
        for page in ("t/t1", "m/conv", f"t/t1/diff?a={checkpoint_id}&b={checkpoint_id}"):
            _get(client, url + page)  # whatever each answers, it must run nothing
    assert not marker.exists()
