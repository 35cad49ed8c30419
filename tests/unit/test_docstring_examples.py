"""The examples in the packages' docstrings run and print what they show.

Every public name (and every method of a public class) that shows an example shows one that
runs: an example skipped on every line (``# doctest: +SKIP``), or one whose only running lines
import or define something, does not count.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
from collections.abc import Iterator
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


#: The public modules: their own docstrings and every name in their ``__all__``.
PUBLIC = (
    "foundry_checkpoint",
    "foundry_checkpoint.spill",
    "foundry_checkpoint.emulator",
    "foundry_checkpoint_maf",
    "foundry_checkpoint_autogen",
)


#: Examples that only import or define something run nothing by themselves.
_NOT_RUN = ("import ", "from ", "def ", "async def ", "class ", "@")


def _runs(example: doctest.Example) -> bool:
    """Whether ``example`` runs something: not skipped, not only an import or a definition."""
    if example.options.get(doctest.SKIP, False):
        return False
    return not example.source.lstrip().startswith(_NOT_RUN)


def _public_doctests() -> Iterator[tuple[str, doctest.DocTest]]:
    finder = doctest.DocTestFinder()
    own = doctest.DocTestFinder(recurse=False)
    for name in PUBLIC:
        module = importlib.import_module(name)
        yield from ((name, t) for t in own.find(module, name))
        for public in module.__all__:
            obj = getattr(module, public)
            if not isinstance(obj, type) and not callable(obj):
                continue  # a constant: described in the module's docstring
            for test in finder.find(obj, f"{name}.{public}", module=False):
                yield f"{name}.{public}", test


def test_no_public_example_is_only_skipped() -> None:
    shown = [(owner, t) for owner, t in _public_doctests() if t.examples]
    assert len(shown) >= 40
    only_skipped = sorted(t.name for _, t in shown if not any(_runs(e) for e in t.examples))
    assert only_skipped == [], f"examples that never run: {only_skipped}"


def test_a_skipped_example_is_caught() -> None:
    def documented() -> None:
        """Example:
        >>> import os
        >>> os.getcwd()  # doctest: +SKIP
        '/'
        """

    (test,) = doctest.DocTestFinder().find(documented, "documented", module=False)
    assert [_runs(e) for e in test.examples] == [False, False]
