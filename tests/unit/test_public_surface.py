"""What the three packages show their users: version, names, return types and errors."""

from __future__ import annotations

import asyncio
import re
import typing
from pathlib import Path

import pytest

import foundry_checkpoint
import foundry_checkpoint_autogen
import foundry_checkpoint_maf
from foundry_checkpoint._lru import Lru
from foundry_checkpoint._store._engine import UNSET, StateEngine, Unset
from foundry_checkpoint._store._hosted import RetrySettingsPolicy
from foundry_checkpoint.errors import (
    ConcurrentWriteError,
    FoundryCheckpointError,
    InvalidArgumentError,
    InvalidIdentifierError,
)

ROOT = Path(__file__).resolve().parents[2]


def test_one_version_for_the_three_packages() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^dynamic = \["version"\]$', pyproject, re.M)
    assert not re.search(r"^version = ", pyproject, re.M)
    assert 'path = "foundry_checkpoint/_version.py"' in pyproject
    version = foundry_checkpoint.__version__
    assert version.split(".")[0].isdigit()
    assert foundry_checkpoint_maf.__version__ == version
    assert foundry_checkpoint_autogen.__version__ == version


@pytest.mark.parametrize(
    "package", [foundry_checkpoint, foundry_checkpoint_maf, foundry_checkpoint_autogen]
)
def test_dir_lists_every_public_name_including_the_lazy_ones(package: object) -> None:
    shown = dir(package)
    missing = [name for name in package.__all__ if name not in shown]  # type: ignore[attr-defined]
    assert not missing
    assert "__version__" in shown
    assert "FoundryCheckpointer" in dir(foundry_checkpoint)
    assert "FoundryCheckpointStorageProvider" in dir(foundry_checkpoint_maf)


def test_gc_returns_a_public_type() -> None:
    from foundry_checkpoint import FoundryCheckpointer, GcReport
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    for method in (FoundryCheckpointer.gc, FoundryCheckpointer.agc, FoundryCheckpointStorage.gc):
        assert typing.get_type_hints(method)["return"] is GcReport
    assert "GcReport" in foundry_checkpoint.__all__


def test_invalid_argument_is_ours_and_a_value_error() -> None:
    assert issubclass(InvalidArgumentError, FoundryCheckpointError)
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidIdentifierError, InvalidArgumentError)
    assert foundry_checkpoint.InvalidArgumentError is InvalidArgumentError


def test_concurrent_write_is_ours_and_exported() -> None:
    assert issubclass(ConcurrentWriteError, FoundryCheckpointError)
    assert not issubclass(ConcurrentWriteError, ValueError)
    assert foundry_checkpoint.ConcurrentWriteError is ConcurrentWriteError


def test_lru_and_retry_options_refuse_with_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="bound"):
        Lru[str, int](0)
    with pytest.raises(InvalidArgumentError, match="retry_forever"):
        RetrySettingsPolicy({"retry_forever": 1})


def test_spill_configuration_conflicts_are_invalid_arguments() -> None:
    pytest.importorskip("azure.storage.blob")
    from foundry_checkpoint import AzureBlobSpill

    with pytest.raises(InvalidArgumentError, match="exactly one"):
        AzureBlobSpill()
    with pytest.raises(InvalidArgumentError, match="credential"):
        AzureBlobSpill(
            connection_string="UseDevelopmentStorage=true",
            credential="key",
        )


def test_maf_prune_keep_zero_is_an_invalid_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    async def run() -> None:
        async with FoundryCheckpointStorage(context_id="conv-1") as storage:
            with pytest.raises(InvalidArgumentError, match="keep"):
                await storage.prune(keep=0)
            with pytest.raises(ValueError):  # what callers caught before still catches it
                await storage.prune(keep=-1)

    asyncio.run(run())


def test_unset_is_an_enum_sentinel_that_keeps_the_value() -> None:
    assert isinstance(UNSET, Unset)
    engine = StateEngine()
    engine.create_store("s", user_isolation=True, item_ttl_seconds=-1, description="d")
    assert engine.update_store("s", tags={"a": "b"})["description"] == "d"
    assert engine.update_store("s", description=None)["tags"] == {"a": "b"}
    after = engine.update_store("s", description=UNSET, tags=UNSET)
    assert after.get("description") is None and after["tags"] == {"a": "b"}


def test_emulator_arguments_are_invalid_arguments() -> None:
    from foundry_checkpoint.emulator import EmulatorCredential, Fault, FoundryEmulator

    with pytest.raises(InvalidArgumentError, match="status"):
        Fault(status=200)
    with pytest.raises(InvalidArgumentError, match="probability"):
        Fault(probability=0.0)
    with pytest.raises(InvalidArgumentError, match="loopback"):
        FoundryEmulator(host="0.0.0.0")
    with pytest.raises(InvalidArgumentError, match="user"):
        EmulatorCredential("")
