"""Helpers shared by the benchmark units: statistics, memory, clocks and local store counters."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

__all__ = [
    "Budget",
    "LocalCounters",
    "median",
    "ms",
    "peak_rss_mb",
    "percentile",
    "sleep_to_next_second",
]


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile by nearest rank, or NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[rank]


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1000.0


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (``ru_maxrss``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if os.uname().sysname == "Darwin" else peak / 1024


def sleep_to_next_second() -> None:
    """Sleep until just after the next whole epoch second (store timestamps are seconds)."""
    now = time.time()
    time.sleep(1.0 - (now % 1.0) + 0.02)


class Budget:
    """A wall-clock allowance: ``spent`` once ``seconds`` have passed since creation."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._start = time.perf_counter()

    @property
    def spent(self) -> bool:
        """Whether the allowance is used up."""
        return time.perf_counter() - self._start >= self.seconds


class LocalCounters:
    """Counts store calls, item values written and their bytes in this process.

    Installs thin wrappers on the embedded engine's store face (``EngineStore``), on the SDK
    local-mode face (``LockedSdkStore``) and on the SDK's file writer, so local modes report the
    same figures the emulator reports for hosted mode:

    * ``requests``: store protocol calls by name (``set_item`` is ``put_item``, as on the wire);
    * ``items`` / ``item_bytes``: values written and the bytes of their compact JSON (for the
      embedded engine taken from the text it stores; for the SDK measured with ``json.dumps``);
    * ``file_bytes``: bytes of store files the SDK's local mode rewrote (it rewrites the whole
      file on every write);
    * ``spill_puts`` / ``spill_bytes``: payloads written to a spill store (``LocalSpill`` or
      ``AzureBlobSpill``), in every mode (the spill client runs in this process).
    """

    _WIRE: ClassVar[dict[str, str]] = {
        "get": "get_store",
        "create_item": "create_item",
        "set_item": "put_item",
        "put_soon": "put_item",  # the embedded store's write started from the caller's loop
        "get_item": "get_item",
        "delete_item": "delete_item",
        "list_keys": "list_keys",
        "greatest": "greatest",
        "delete": "delete_store",
    }

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.items = 0
        self.item_bytes = 0
        self.file_bytes = 0
        self.spill_puts = 0
        self.spill_bytes = 0
        self._installed = False
        self._sdk_installed = False
        self._blob_installed = False

    def snapshot(self) -> dict[str, Any]:
        """The counts so far."""
        return {
            "requests": dict(self.requests),
            "items": self.items,
            "item_bytes": self.item_bytes,
            "file_bytes": self.file_bytes,
            "spill_puts": self.spill_puts,
            "spill_bytes": self.spill_bytes,
        }

    def reset(self) -> None:
        """Zero the counts."""
        self.requests.clear()
        self.items = self.item_bytes = self.file_bytes = 0
        self.spill_puts = self.spill_bytes = 0

    def install(self, *, sdk: bool) -> LocalCounters:
        """Install the wrappers (once per process); the SDK local mode's only when ``sdk``.

        The SDK's wrappers import its local-mode modules, which the embedded default never
        loads: installing them for every run would add their memory to every run's peak RSS.
        ``AzureBlobSpill`` is wrapped once a run has imported it, for the same reason.
        """
        if not self._installed:
            self._installed = True
            self._install_engine()
        if sdk and not self._sdk_installed:
            self._sdk_installed = True
            self._install_sdk()
        azure_spill = sys.modules.get("foundry_checkpoint.spill._azure")
        if azure_spill is not None and not self._blob_installed:
            # Only once a run has loaded it (hosted spill, FOUNDRY_CHECKPOINT_BLOB_*).
            self._blob_installed = True
            self._wrap_spill(azure_spill.AzureBlobSpill)
        return self

    def _install_engine(self) -> None:
        import foundry_checkpoint._store._engine as engine_module

        original_validate = engine_module.validate_value  # type: ignore[attr-defined]

        def counting_validate(value: object) -> str:
            text = original_validate(value)
            self.items += 1
            self.item_bytes += len(text.encode("utf-8"))
            return text

        setattr(engine_module, "validate_value", counting_validate)  # noqa: B010
        from foundry_checkpoint._store._embedded import EngineStore

        self._wrap_class(EngineStore, sdk=False)
        from foundry_checkpoint.spill import LocalSpill

        self._wrap_spill(LocalSpill)

    def _install_sdk(self) -> None:
        try:
            from foundry_checkpoint._store._sdk_local import LockedSdkStore
        except ImportError:  # pragma: no cover - depends on the tree
            pass
        else:
            self._wrap_class(LockedSdkStore, sdk=True)
        from azure.ai.agentserver.core.storage import _local_state

        backend = _local_state.LocalStateStoreBackend
        original_write: Callable[..., None] = backend._write

        def counting_write(backend_self: Any, document: dict[str, Any]) -> None:
            original_write(backend_self, document)
            self.file_bytes += os.path.getsize(backend_self._path)

        setattr(backend, "_write", counting_write)  # noqa: B010

    def _wrap_spill(self, cls: type) -> None:
        original: Callable[..., Any] = getattr(cls, "put")  # noqa: B009
        counters = self

        async def put(spill: Any, namespace: str, data: bytes) -> Any:
            counters.spill_puts += 1
            counters.spill_bytes += len(data)
            return await original(spill, namespace, data)

        setattr(cls, "put", put)  # noqa: B010

    def _wrap_class(self, cls: type, *, sdk: bool) -> None:
        for method, wire in self._WIRE.items():
            original = getattr(cls, method, None)
            if original is None:
                continue
            setattr(cls, method, self._wrapper(original, wire, sdk=sdk))

    def _wrapper(self, original: Callable[..., Any], wire: str, *, sdk: bool) -> Callable[..., Any]:
        counters = self
        measure = sdk and wire in ("put_item", "create_item")
        if not inspect.iscoroutinefunction(original):  # put_soon: starts the write when called

            def started(store: Any, *args: Any, **kwargs: Any) -> Any:
                counters.requests[wire] += 1
                return original(store, *args, **kwargs)

            return started

        async def wrapped(store: Any, *args: Any, **kwargs: Any) -> Any:
            counters.requests[wire] += 1
            if measure:
                value = args[1] if len(args) > 1 else kwargs.get("value")
                counters.items += 1
                counters.item_bytes += len(
                    json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
                )
            return await original(store, *args, **kwargs)

        wrapped.__name__ = getattr(original, "__name__", wire)
        return wrapped


@contextlib.asynccontextmanager
async def hosted_saver(
    peer: bool, emulator: Any, *, prefix: str, identity: str, serde: Any = None
) -> AsyncIterator[Any]:
    """``FoundryCheckpointer`` (or, with ``peer``, langchain-azure-ai's ``FoundryCheckpointSaver``)
    on ``emulator``, as ``identity``, closed on exit."""
    from foundry_checkpoint.emulator import EmulatorCredential

    credential = EmulatorCredential(identity)
    if not peer:
        from foundry_checkpoint import FoundryCheckpointer

        saver = FoundryCheckpointer(
            store_prefix=prefix,
            serde=serde,
            credential=credential,
            endpoint=emulator.endpoint,
            **emulator.client_kwargs(),
        )
        try:
            yield saver
        finally:
            await saver.aclose()
    else:
        from langchain_azure_ai.agents.hosting import FoundryCheckpointSaver

        async with FoundryCheckpointSaver(
            credential=credential, endpoint=emulator.endpoint, store_name_prefix=prefix, serde=serde
        ) as other:
            yield other
