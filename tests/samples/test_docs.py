"""The user guide builds with ``mkdocs build --strict`` and names only real APIs."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

DOCS = ROOT / "docs"


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("material", reason="mkdocs-material (the docs group) is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


#: The public modules; each has a generated API reference page.
PUBLIC_MODULES = (
    "foundry_checkpoint",
    "foundry_checkpoint.errors",
    "foundry_checkpoint.spill",
    "foundry_checkpoint.payloads",
    "foundry_checkpoint.migrate",
    "foundry_checkpoint.langgraph_server",
    "foundry_checkpoint.emulator",
    "foundry_checkpoint_maf",
    "foundry_checkpoint_autogen",
    "foundry_checkpoint.adapter",
)


def test_every_public_module_has_a_generated_api_page_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {
        page.relative_to(DOCS).as_posix(): page.read_text(encoding="utf-8")
        for page in (DOCS / "api").glob("*.md")
    }
    for module in PUBLIC_MODULES:
        found = [name for name, text in pages.items() if f"\n::: {module}\n" in f"\n{text}"]
        assert len(found) == 1, f"{module}: {found}"
        assert f": {found[0]}\n" in nav, f"{found[0]} is not in the nav"


def _documented() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))


def test_every_public_option_is_in_the_reference() -> None:
    from foundry_checkpoint import FoundryCheckpointer, FoundryStore
    from foundry_checkpoint_autogen import AutoGenStateStore
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    reference = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for cls in (FoundryCheckpointer, FoundryStore, FoundryCheckpointStorage, AutoGenStateStore):
        for name in inspect.signature(cls).parameters:
            shown = f"**{name}" if name == "client_kwargs" else f"`{name}`"
            assert shown in reference, f"{cls.__name__}({name}) is not documented"


def test_every_public_class_and_error_is_documented() -> None:
    import foundry_checkpoint
    import foundry_checkpoint.emulator
    import foundry_checkpoint_autogen
    import foundry_checkpoint_maf
    from foundry_checkpoint import errors

    text = _documented()
    names = [
        *foundry_checkpoint.__all__,
        *foundry_checkpoint_maf.__all__,
        *foundry_checkpoint_autogen.__all__,
    ]
    names += foundry_checkpoint.emulator.__all__
    for name in names:
        assert name in text, name
    troubleshooting = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    for name in errors.__all__:
        assert f"## {name}" in troubleshooting, name


def test_every_environment_variable_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    sources = "\n".join(
        p.read_text(encoding="utf-8")
        for p in [
            *(ROOT / "foundry_checkpoint").rglob("*.py"),
            *(ROOT / "foundry_checkpoint_maf").rglob("*.py"),
            *(ROOT / "foundry_checkpoint_autogen").rglob("*.py"),
        ]
    )
    used = set(re.findall(r"\b((?:FOUNDRY|AGENTSERVER|AZURE_AI_AGENTSERVER)_[A-Z_]+)\b", sources))
    used -= {"FOUNDRY_CHECKPOINT_BLOB_"}
    assert used, "no environment variables found"
    for name in sorted(used):
        assert f"`{name}`" in text, name
