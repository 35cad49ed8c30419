"""The examples in the packages' docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
from pathlib import Path

import pytest

import foundry_checkpoint
import foundry_checkpoint_autogen
import foundry_checkpoint_maf


def _modules() -> list[str]:
    names = []
    for package in (foundry_checkpoint, foundry_checkpoint_maf, foundry_checkpoint_autogen):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return names


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_examples_in(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    module = importlib.import_module(name)
    saved = dict(os.environ)  # an example may set what the platform sets (hosted mode)
    try:
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert result.failed == 0


def test_public_names_have_examples() -> None:
    finder = doctest.DocTestFinder()
    for name in ("foundry_checkpoint", "foundry_checkpoint_maf", "foundry_checkpoint_autogen"):
        module = importlib.import_module(name)
        for public in module.__all__:
            obj = getattr(module, public)
            if isinstance(obj, type) and issubclass(obj, Exception):
                continue  # errors are documented by cause and fix, not by example
            tests = finder.find(obj, public, module=False)
            assert any(t.examples for t in tests), f"{name}.{public} has no docstring example"
