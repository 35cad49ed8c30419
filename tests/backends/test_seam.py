"""Nothing above the store layer asks which backend it has: no comparison with a backend name.

The core, the adapters and the tools read what they need from the ``Backend`` object (its
location, caller rule, compression, spill folder, first listing page), so that a new backend
changes no file above ``foundry_checkpoint/_store/``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("foundry_checkpoint", "foundry_checkpoint_maf", "foundry_checkpoint_autogen")
NAMES = r"hosted|local-sqlite|local-sdk|sqlite|sdk"
#: ``x == "hosted"``, ``"sdk" != x``, ``x in ("sqlite", ...)``.
COMPARISON = re.compile(
    rf"""(==|!=|\bin\s*[(\[{{])\s*["']({NAMES})["']|["']({NAMES})["']\s*(==|!=)"""
)
#: A backend chosen by name: ``local_backend="sdk" if ... else ...``, ``kwargs["local_backend"]
#: = "sdk"``, ``{"local_backend": "sqlite"}``, ``choose_backend("sdk", ...)``. A signature's
#: default (``local_backend: LocalBackend = "sqlite"``) is what the user is told, not a choice,
#: and so is a docstring's literal (in double backticks).
CHOICE = re.compile(
    rf"""((?<!`)\blocal_backend\s*=(?!=)|["']local_backend["']\s*(\]\s*=(?!=)|:)"""
    rf"""|\b(choose_backend|check_backend_choice)\()[^#]*?["']({NAMES})["']"""
)
#: What a backend name never is: a URI scheme the CLI's copy command reads.
NOT_A_BACKEND = re.compile(r"""\.scheme\s*==\s*["']sqlite["']""")


def _code_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` with their numbers, less docstring examples (``>>>``, ``...``)."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.strip()
        if not code.startswith((">>>", "... ")) and code != "...":
            yield number, code


def test_no_backend_name_is_compared_above_the_store_layer() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "foundry_checkpoint" / "_store"):
                continue
            for number, code in _code_lines(path):
                if (COMPARISON.search(code) or CHOICE.search(code)) and not NOT_A_BACKEND.search(
                    code
                ):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {code}")
    assert found == [], "ask the backend object (or the store layer) instead:\n" + "\n".join(found)


def test_the_check_finds_a_comparison() -> None:
    assert COMPARISON.search('if core.kind == "hosted":')
    assert COMPARISON.search("compress=kind != 'local-sqlite',")
    assert COMPARISON.search('if local_backend in ("sqlite", "sdk"):')
    assert not COMPARISON.search("compress=scope.core.backend.compresses,")


def test_the_check_finds_a_backend_chosen_by_name() -> None:
    assert CHOICE.search('local_backend="sqlite" if hosted() else "sdk",')
    assert CHOICE.search("StoreOptions(store_prefix='x', local_backend='sdk')")
    assert CHOICE.search('kwargs["local_backend"] = "sdk"')
    assert CHOICE.search('{"store_prefix": "x", "local_backend": "sqlite"}')
    assert CHOICE.search('backend = choose_backend("sqlite", options)')
    assert not CHOICE.search('local_backend: LocalBackend = "sqlite",')  # a default shown
    assert not CHOICE.search('"local_backend": sdk_client_backend(),  # not "sdk" by name')
    assert not CHOICE.search("kwargs['local_backend'] = self.local_backend")
    assert not CHOICE.search('if local_backend == other:  # "sdk"')
    assert not CHOICE.search('(``local_backend="sdk"``, the local mode of the SDK)')


def test_the_adapter_contract_forbids_every_private_module() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the backport
        import tomli as tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}
    contract = contracts["adapters-use-the-interface"]
    assert contract["source_modules"] == ["foundry_checkpoint_maf", "foundry_checkpoint_autogen"]
    package = ROOT / "foundry_checkpoint"
    private = {
        f"foundry_checkpoint.{path.stem if path.suffix == '.py' else path.name}"
        for path in package.iterdir()
        if path.name.startswith("_")
        and not path.name.startswith("__")
        and (path.suffix == ".py" or (path / "__init__.py").is_file())
    }
    assert private <= set(contract["forbidden_modules"])
    assert "foundry_checkpoint.spill.*" in contract["forbidden_modules"]
    langgraph = contracts["langgraph-uses-the-interface"]
    assert langgraph["source_modules"] == ["foundry_checkpoint._langgraph"]
    assert private - {"foundry_checkpoint._langgraph"} <= set(langgraph["forbidden_modules"])


def test_every_adapter_builds_its_core_one_way() -> None:
    """The common keyword arguments reach the core through ``adapter.new_core`` alone: no
    adapter spells out ``CheckpointCore(StoreOptions(...))`` itself."""
    package = ROOT / "foundry_checkpoint"
    adapters = [
        package / "_langgraph",
        package / "_memory",
        package / "payloads.py",
        package / "migrate.py",
        ROOT / "foundry_checkpoint_maf",
        ROOT / "foundry_checkpoint_autogen",
    ]
    built = []
    for place in adapters:
        for path in [place] if place.is_file() else sorted(place.rglob("*.py")):
            for number, code in _code_lines(path):  # a docstring example may build one by hand
                if re.search(r"\b(CheckpointCore|StoreOptions)\(", code):
                    built.append(f"{path.relative_to(ROOT)}:{number}: {code}")
                if "new_core(" in code:
                    built.append(f"new_core: {path.relative_to(ROOT)}")
    assert [b for b in built if not b.startswith("new_core")] == []
    # the saver and the memory store; the payload store; the migration source of
    # langchain-azure-ai's saver; MAF's storage, its two hosting providers (checkpoints and
    # sessions), history and sessions; AutoGen's state store
    assert sorted(built) == [
        "new_core: foundry_checkpoint/_langgraph/_saver.py",
        "new_core: foundry_checkpoint/_memory/_store.py",
        "new_core: foundry_checkpoint/migrate.py",
        "new_core: foundry_checkpoint/payloads.py",
        "new_core: foundry_checkpoint_autogen/_store.py",
        "new_core: foundry_checkpoint_maf/_history.py",
        "new_core: foundry_checkpoint_maf/_hosting.py",
        "new_core: foundry_checkpoint_maf/_hosting.py",
        "new_core: foundry_checkpoint_maf/_sessions.py",
        "new_core: foundry_checkpoint_maf/_storage.py",
    ]
