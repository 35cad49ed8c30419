"""A plain ``pip install`` of any extra stays on stable releases of the agentserver packages.

agent-framework-foundry-hosting is a pre-release whose own requirement
(``azure-ai-agentserver-responses>=2.2.0b1``) lets pip pick pre-releases of the hosts: without
bounds, ``pip install ".[all]"`` resolved azure-ai-agentserver-responses 2.4.0b1 and
azure-ai-agentserver-core 2.3.0b2. Every extra that brings the hosting package must bound both
so that those pre-releases are out even when pip admits pre-releases.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "foundry-checkpoint"
# package -> (a pre-release that leaked in, the stable release the suite is measured on)
BOUNDED = {
    "azure-ai-agentserver-responses": ("2.4.0b1", "2.3.0"),
    "azure-ai-agentserver-core": ("2.3.0b2", "2.2.0"),
}


def _project() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(data["project"])


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
