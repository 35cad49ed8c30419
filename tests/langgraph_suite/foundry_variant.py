"""A pytest plugin that adds ``FoundryCheckpointer`` to LangGraph's own test suite.

LangGraph's ``tests/conftest.py`` (in the sdist of every release) parametrizes two fixtures
by checkpointer name: ``sync_checkpointer`` (``memory``, ``sqlite``, ``sqlite_aes``, and
Postgres variants unless ``NO_DOCKER=true``) and ``async_checkpointer`` (``memory``,
``sqlite_aio``, ...). Loaded with ``-p foundry_variant``, this plugin replaces both fixtures,
before pytest reads that conftest, by ones whose parameters are ``LG_SUITE_VARIANTS`` (a comma
list, default ``memory,foundry``): ``foundry`` is a ``FoundryCheckpointer`` with default
settings on a fresh embedded store per test, every other name is LangGraph's own fixture code.

``tests/langgraph_suite/run.py`` (``make test-langgraph-suite``) downloads the sdist, loads
this plugin and reports the counts per variant.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import ModuleType
from typing import Any

import pytest

VARIANTS = [v for v in os.environ.get("LG_SUITE_VARIANTS", "memory,foundry").split(",") if v]
ASYNC_VARIANTS = [{"sqlite": "sqlite_aio"}.get(v, v) for v in VARIANTS if v != "sqlite_aes"]


def _foundry() -> Iterator[Any]:
    from foundry_checkpoint import FoundryCheckpointer

    root = tempfile.mkdtemp(prefix="lg-suite-")
    saved = os.environ.get("AGENTSERVER_STATE_ROOT")
    os.environ["AGENTSERVER_STATE_ROOT"] = root
    os.environ.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    os.environ["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    try:
        with FoundryCheckpointer() as saver:
            yield saver
    finally:
        if saved is None:
            os.environ.pop("AGENTSERVER_STATE_ROOT", None)
        else:
            os.environ["AGENTSERVER_STATE_ROOT"] = saved
        shutil.rmtree(root, ignore_errors=True)


def _langgraph_fixtures() -> ModuleType:
    """LangGraph's own fixture code: the ``tests`` package of its checkout, not this one."""
    return importlib.import_module("tests.conftest_checkpointer")


def _langgraph_sync(name: str) -> AbstractContextManager[Any]:
    manager: AbstractContextManager[Any] = getattr(_langgraph_fixtures(), f"_checkpointer_{name}")()
    return manager


def _langgraph_async(name: str) -> AbstractAsyncContextManager[Any] | AbstractContextManager[Any]:
    manager: AbstractAsyncContextManager[Any] | AbstractContextManager[Any] = getattr(
        _langgraph_fixtures(), f"_checkpointer_{name}"
    )()
    return manager


@pytest.fixture(params=VARIANTS)
def sync_checkpointer(request: pytest.FixtureRequest) -> Iterator[Any]:
    """LangGraph's ``sync_checkpointer`` with a ``foundry`` variant."""
    if request.param == "foundry":
        yield from _foundry()
        return
    with _langgraph_sync(request.param) as saver:
        yield saver


@pytest.fixture(params=ASYNC_VARIANTS)
async def async_checkpointer(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """LangGraph's ``async_checkpointer`` with a ``foundry`` variant."""
    if request.param == "foundry":
        for saver in _foundry():
            yield saver
        return
    manager = _langgraph_async(request.param)
    if isinstance(manager, AbstractAsyncContextManager):
        async with manager as saver:
            yield saver
    else:
        with manager as saver:
            yield saver


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    """Put this plugin's fixtures in LangGraph's conftest before pytest parses it."""
    if getattr(plugin, "__name__", "") == "tests.conftest" and hasattr(plugin, "sync_checkpointer"):
        plugin.sync_checkpointer = sync_checkpointer
        plugin.async_checkpointer = async_checkpointer  # type: ignore[attr-defined]


_CHECKPOINTER_FIXTURES = ("sync_checkpointer", "async_checkpointer")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Record each test's checkpointer variant, and what it is the same test as in the other
    variants, as JUnit properties (``checkpointer``, ``case``) for the runner's counts."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        variant = next((params[f] for f in _CHECKPOINTER_FIXTURES if f in params), None)
        if variant is None:
            continue
        others = sorted((k, repr(v)) for k, v in params.items() if k not in _CHECKPOINTER_FIXTURES)
        base = item.nodeid.split("[", 1)[0]
        item.user_properties.append(("checkpointer", str(variant)))
        item.user_properties.append(("case", f"{base}{others}"))
