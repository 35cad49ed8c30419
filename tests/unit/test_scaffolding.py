"""The contributor files agree with the tree: license, make targets, the layer map's modules."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_the_one_pyproject_declares() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "MIT"$', pyproject, re.M)
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    assert "the foundry-checkpoint authors" in license_text


def test_every_make_target_contributing_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", contributing))
    assert {"unit", "format", "lint", "test"} <= named
    assert named <= targets, named - targets


def test_every_module_in_the_layer_map_exists() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Layer map", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:foundry_checkpoint\w*/)?[\w/]+\.py|[\w/]+/)`", section))
    assert len(named) >= 15
    for name in named:
        candidates = [ROOT / name, ROOT / "foundry_checkpoint" / name]
        assert any(p.exists() for p in candidates), name


def test_every_module_of_the_core_package_is_in_the_layer_map() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Layer map", 1)[1].split("\n## ", 1)[0]
    for path in sorted((ROOT / "foundry_checkpoint").iterdir()):
        if path.suffix == ".py" and path.name not in ("__init__.py", "errors.py", "_version.py"):
            assert f"`{path.name}`" in section or f"/{path.name}`" in section, path.name
        elif path.is_dir() and not path.name.startswith("__"):
            assert f"foundry_checkpoint/{path.name}/" in section, path.name


def test_make_unit_deselects_every_registered_marker() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[tool.pytest.ini_options]", 1)[1].split("\n[", 1)[0]
    assert "--strict-markers" in section
    registered = set(re.findall(r'^\s+"(\w+): ', section, re.M))
    assert registered == {"emulator", "azurite", "multiprocess", "notebooks", "slow"}
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    selection = re.search(r"^UNIT_MARKERS := (.*)$", makefile, re.M)
    assert selection is not None
    assert set(re.findall(r"not (\w+)", selection.group(1))) == registered
    assert '-m "$(UNIT_MARKERS)"' in makefile
