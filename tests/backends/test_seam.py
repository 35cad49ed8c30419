"""Nothing above the store layer asks which backend it has: no comparison with a backend name.

The core, the adapters and the tools read what they need from the ``Backend`` object (its
location, caller rule, compression, spill folder, first listing page), so that a new backend
changes no file above ``foundry_checkpoint/_store/``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("foundry_checkpoint", "foundry_checkpoint_maf", "foundry_checkpoint_autogen")
NAMES = r"hosted|local-sqlite|local-sdk|sqlite|sdk"
#: ``x == "hosted"``, ``"sdk" != x``, ``x in ("sqlite", ...)``.
COMPARISON = re.compile(
    rf"""(==|!=|\bin\s*[(\[{{])\s*["']({NAMES})["']|["']({NAMES})["']\s*(==|!=)"""
)
#: What a backend name never is: a URI scheme the CLI's copy command reads.
NOT_A_BACKEND = re.compile(r"""\.scheme\s*==\s*["']sqlite["']""")


def test_no_backend_name_is_compared_above_the_store_layer() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "foundry_checkpoint" / "_store"):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if COMPARISON.search(line) and not NOT_A_BACKEND.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "ask the backend object instead:\n" + "\n".join(found)


def test_the_check_finds_a_comparison() -> None:
    assert COMPARISON.search('if core.kind == "hosted":')
    assert COMPARISON.search("compress=kind != 'local-sqlite',")
    assert COMPARISON.search('if local_backend in ("sqlite", "sdk"):')
    assert not COMPARISON.search("compress=scope.core.backend.compresses,")


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
    adapters = [
        ROOT / "foundry_checkpoint" / "_langgraph",
        ROOT / "foundry_checkpoint" / "_memory",
        ROOT / "foundry_checkpoint_maf",
        ROOT / "foundry_checkpoint_autogen",
    ]
    built = []
    for folder in adapters:
        for path in sorted(folder.rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.strip()
                if code.startswith(">>>"):
                    continue  # a docstring example may build one by hand
                if re.search(r"\b(CheckpointCore|StoreOptions)\(", code):
                    built.append(f"{path.relative_to(ROOT)}:{number}: {code}")
                if "new_core(" in code:
                    built.append("new_core")
    assert [b for b in built if b != "new_core"] == []
    # the saver and the memory store; MAF's storage, provider, history and sessions; AutoGen's
    assert built.count("new_core") == 7
