"""The extras and dependency groups: what a user's ``pip install`` pulls in, and what not.

A plain ``pip install`` of any extra stays on stable releases of the agentserver packages.

agent-framework-foundry-hosting is a pre-release whose own requirement
(``azure-ai-agentserver-responses>=2.2.0b1``) lets pip pick pre-releases of the hosts: without
bounds, ``pip install ".[all]"`` resolved azure-ai-agentserver-responses 2.4.0b1 and
azure-ai-agentserver-core 2.3.0b2. Every extra that brings the hosting package must bound both
so that those pre-releases are out even when pip admits pre-releases.

The contributors' tools are PEP 735 dependency groups, not extras, and only the emulator needs
``cryptography`` (the ``emulator`` extra, in ``all``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "foundry-checkpoint"
# package -> (a pre-release that leaked in, the stable release the suite is measured on)
BOUNDED = {
    "azure-ai-agentserver-responses": ("2.4.0b1", "2.3.0"),
    "azure-ai-agentserver-core": ("2.3.0b2", "2.2.0"),
}


def _pyproject() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def _project() -> dict[str, Any]:
    return dict(_pyproject()["project"])


def _expand(extra: str, extras: dict[str, list[str]], seen: set[str]) -> list[Requirement]:
    """The requirements of ``extra``, following ``foundry-checkpoint[...]`` references."""
    out: list[Requirement] = []
    for text in extras[extra]:
        req = Requirement(text)
        if req.name == PROJECT:
            for inner in sorted(req.extras - seen):
                seen.add(inner)
                out += _expand(inner, extras, seen)
        else:
            out.append(req)
    return out


def test_every_extra_with_the_hosting_package_bounds_the_hosts() -> None:
    project = _project()
    base = [Requirement(text) for text in project["dependencies"]]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    checked = []
    for extra in extras:
        reqs = base + _expand(extra, extras, {extra})
        if not any(r.name == "agent-framework-foundry-hosting" for r in reqs):
            continue
        checked.append(extra)
        for name, (leaked, stable) in BOUNDED.items():
            spec = SpecifierSet()
            for req in reqs:
                if req.name == name:
                    spec &= req.specifier
            assert not spec.contains(leaked, prereleases=True), (extra, name, str(spec))
            assert spec.contains(stable), (extra, name, str(spec))
    assert {"maf-hosting", "all", "bench"} <= set(checked)


def test_the_makefile_can_test_the_newest_pre_releases() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^test-pre:.*?(?=^\S)", makefile, re.M | re.S)
    assert target is not None, "make test-pre is missing"
    assert "--pre" in target.group(0) and "pytest" in target.group(0)
    packages = re.search(r"^PRE_PACKAGES :=(.*?)(?=^\S)", makefile, re.M | re.S)
    assert packages is not None
    for name in [*BOUNDED, "agent-framework-foundry-hosting"]:
        assert name in packages.group(1), name


def _group(groups: dict[str, list[Any]], name: str) -> set[str]:
    """The package names of dependency group ``name``, following ``include-group``."""
    names: set[str] = set()
    for entry in groups[name]:
        if isinstance(entry, dict):
            names |= _group(groups, entry["include-group"])
        else:
            names.add(Requirement(entry).name)
    return names


def test_the_contributor_tools_are_dependency_groups_not_extras() -> None:
    data = _pyproject()
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    assert not {"test", "docs", "dev", "lint"} & set(extras), sorted(extras)
    tools = {"pytest", "hypothesis", "mypy", "ruff", "playwright", "build", "twine", "nbclient"}
    for extra in extras:
        names = {r.name for r in _expand(extra, extras, {extra})}
        assert not tools & names, (extra, tools & names)
    groups: dict[str, list[Any]] = data["dependency-groups"]
    assert tools | {"mkdocs-material", "pytest-asyncio"} <= _group(groups, "dev")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = re.findall(r"pip install .*-e '\.\[([\w,-]+)\]'(.*)$", makefile, re.M)
    for extras_named, _rest in installs:
        assert set(extras_named.split(",")) <= set(extras)
    # make install and make test-pre install every extra and the tools (make bench adds to it)
    full = [rest for named, rest in installs if named == "all,autogen"]
    assert len(full) == 2 and all("--group dev" in rest for rest in full), installs


def test_only_the_emulator_extra_brings_cryptography() -> None:
    project = _project()
    extras: dict[str, list[str]] = project["optional-dependencies"]
    assert all(Requirement(r).name != "cryptography" for r in project["dependencies"])
    assert [Requirement(r).name for r in extras["emulator"]] == ["cryptography"]
    assert "cryptography" in {r.name for r in _expand("all", extras, {"all"})}


_HIDDEN = """
import sys
sys.modules["cryptography"] = None  # as if the emulator extra were not installed
from foundry_checkpoint.errors import MissingDependencyError
try:
    import foundry_checkpoint.emulator
except MissingDependencyError as exc:
    print(str(exc))
else:
    print("imported")
sys.argv = ["foundry-checkpoint", "emulator", "--port", "0"]
from foundry_checkpoint.cli import main
main()
"""


def test_the_emulator_without_cryptography_says_what_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HIDDEN],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    hint = "pip install 'foundry-checkpoint[emulator]'"
    assert done.stdout.startswith("foundry_checkpoint.emulator needs the cryptography package")
    assert hint in done.stdout
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and hint in done.stderr
    assert "Traceback" not in done.stderr
