"""``foundry-lc:``: langchain-azure-ai's ``FoundryCheckpointSaver`` layout, read as a copy source.

langchain-azure-ai (1.2, ``langchain_azure_ai.agents.hosting``) ships a saver of its own on the
same state store. Its layout, read from its source:

* one store per thread, ``{store_name_prefix}/{thread_id}`` (default prefix
  ``langchain_azure_ai.agents.hosting.FoundryCheckpointSaver``; a name over 128 characters
  becomes ``{prefix[:63]}/{sha256 of the name}``), created with ``user_isolation=True`` by
  default;
* a checkpoint is the item ``{checkpoint_ns}/{checkpoint_id}``, tagged ``kind=checkpoint``,
  ``ns`` (and ``source``, ``step``), whose value holds ``checkpoint_id``, ``checkpoint_ns``,
  ``parent_checkpoint_id`` and the ``checkpoint`` and ``metadata`` as ``{"type", "data"}``
  (LangGraph's typed serialization, base64);
* a pending write is the item ``{checkpoint_ns}/writes/{checkpoint_id}/{task_id}/{index}``,
  tagged ``kind=write``, ``ns``, ``ckpt``, whose value holds ``task_id``, ``index``, ``channel``
  and the ``value`` in the same form.

That saver is async-only, and its reads create the thread's store when it is missing (and
refuse a store whose TTL differs from its argument), so :class:`LangchainAzureSource` reads the
layout itself: a read-only, synchronous ``BaseCheckpointSaver`` whose I/O runs on a private
loop of a :class:`~foundry_checkpoint._core.CheckpointCore` (hosted mode: the service, with the
CLI's connection options and identity; local mode: the SDK's own local files, which is where
that saver keeps them), decoding with :class:`~foundry_checkpoint.StrictSerializer`. The store
keeps no list of its threads, so a copy names them (``--thread``).

Example:
    >>> lc_store_name("langchain_azure_ai.agents.hosting.FoundryCheckpointSaver", "t1")
    'langchain_azure_ai.agents.hosting.FoundryCheckpointSaver/t1'
    >>> len(lc_store_name("p", "x" * 200))
    66
"""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from .._core import CheckpointCore
from .._options import StoreOptions
from .._serde import StrictSerializer
from .._store._hosted import hosted
from .._store._listing import all_keys
from .._store._protocol import StateStoreLike
from ..errors import CorruptPayloadError, InvalidArgumentError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

__all__ = ["LC_DEFAULT_PREFIX", "LangchainAzureSource", "lc_store_name"]

LC_DEFAULT_PREFIX: Final = "langchain_azure_ai.agents.hosting.FoundryCheckpointSaver"
"""langchain-azure-ai's ``DEFAULT_STORE_NAME_PREFIX``."""

_MAX_NAME: Final = 128
_CHECKPOINT_TAGS: Final = {"kind": "checkpoint"}


def lc_store_name(prefix: str, thread_id: str) -> str:
    """The store name that saver gives ``thread_id`` (its ``_store_name``).

    Example:
        >>> lc_store_name("agents/", "t1")
        'agents/t1'
    """
    prefix = prefix.rstrip("/")
    name = f"{prefix}/{thread_id}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()
    return f"{prefix[: _MAX_NAME - len(digest) - 1]}/{digest}"


class LangchainAzureSource(BaseCheckpointSaver[str]):
    """langchain-azure-ai's ``FoundryCheckpointSaver`` stores, read-only and synchronous.

    Args:
        prefix: That saver's ``store_name_prefix`` (default: its default).
        **store_kwargs: What a ``FoundryCheckpointer`` takes to reach the store (``endpoint``,
            ``credential``, ``user_id``, ``trusted_delegation``, client options); in local mode
            the SDK's own local files are read.

    Example:
        >>> with LangchainAzureSource() as source:
        ...     list(source.list({"configurable": {"thread_id": "never-written"}}))
        []
    """

    def __init__(self, prefix: str = LC_DEFAULT_PREFIX, **store_kwargs: Any) -> None:
        super().__init__(serde=StrictSerializer())
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise InvalidArgumentError(
                f"foundry-lc: needs a non-empty store prefix, got {prefix!r}"
            )
        self.prefix = prefix.rstrip("/")
        kwargs = dict(store_kwargs)
        kwargs.pop("store_prefix", None)
        kwargs.pop("local_backend", None)
        options: dict[str, Any] = {
            name: kwargs.pop(name)
            for name in ("credential", "endpoint", "user_id", "trusted_delegation")
            if name in kwargs
        }
        self._core = CheckpointCore(
            StoreOptions(
                store_prefix="langgraph",  # names none of the stores read here
                local_backend="sqlite" if hosted() else "sdk",
                client_kwargs=kwargs,
                **options,
            ),
            scope_word="thread",
        )

    def __enter__(self) -> LangchainAzureSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store clients and stop the private loop (idempotent)."""
        self._core.close()

    # -- what the copy reads -----------------------------------------------------------------
    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """A thread's checkpoints, newest first (``config`` must name the thread)."""
        if config is None or not (config.get("configurable") or {}).get("thread_id"):
            raise InvalidArgumentError(
                "langchain-azure-ai's FoundryCheckpointSaver keeps no list of its threads: "
                "name each thread to copy (--thread ID)"
            )
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns")
        before_id = (before or {}).get("configurable", {}).get("checkpoint_id")
        found = self._core.run(self._list(str(conf["thread_id"]), ns, before_id))
        yielded = 0
        for item in found:
            if filter and not all(item.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None and yielded >= limit:
                return
            yielded += 1
            yield item

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the thread's newest."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if not thread_id:
            raise InvalidArgumentError("config has no thread_id")
        checkpoint_id = conf.get("checkpoint_id")
        ns = str(conf.get("checkpoint_ns", ""))
        if not checkpoint_id:
            newest = [*self.list(config, limit=1)]
            return newest[0] if newest else None
        return self._core.run(self._one(str(thread_id), ns, str(checkpoint_id)))

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        """Refused: ``foundry-lc:`` is a copy source only."""
        raise InvalidArgumentError("foundry-lc: is read-only: use it as --from, never as --to")

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        """Refused: ``foundry-lc:`` is a copy source only."""
        raise InvalidArgumentError("foundry-lc: is read-only: use it as --from, never as --to")

    # -- on the core's loop --------------------------------------------------------------------
    async def _store(self, thread_id: str) -> StateStoreLike | None:
        return await self._core.open(lc_store_name(self.prefix, thread_id), create=False)

    async def _list(
        self, thread_id: str, ns: str | None, before_id: str | None
    ) -> builtins.list[CheckpointTuple]:
        store = await self._store(thread_id)
        if store is None:
            return []
        tags = dict(_CHECKPOINT_TAGS)
        if ns is not None:
            tags["ns"] = ns
        ids: builtins.list[tuple[str, str]] = []
        for key in await all_keys(store, tags):
            item_ns, sep, item_id = key.key.rpartition("/")
            if not sep or not item_id or (ns is not None and item_ns != ns):
                continue
            if before_id is not None and item_id >= before_id:
                continue
            ids.append((item_id, item_ns))
        out = []
        for item_id, item_ns in sorted(ids, reverse=True):
            found = await self._read(store, thread_id, item_ns, item_id)
            if found is not None:
                out.append(found)
        return out

    async def _one(self, thread_id: str, ns: str, checkpoint_id: str) -> CheckpointTuple | None:
        store = await self._store(thread_id)
        if store is None:
            return None
        return await self._read(store, thread_id, ns, checkpoint_id)

    async def _read(
        self, store: StateStoreLike, thread_id: str, ns: str, checkpoint_id: str
    ) -> CheckpointTuple | None:
        key = f"{ns}/{checkpoint_id}"
        item = await store.get_item(key)
        if item is None:
            return None
        where = f"checkpoint {checkpoint_id!r} of thread {thread_id!r} (store {store.name!r})"
        value = item.value
        checkpoint = cast("Checkpoint", self._decode(value.get("checkpoint"), where))
        metadata = cast("CheckpointMetadata", self._decode(value.get("metadata"), where))
        parent = value.get("parent_checkpoint_id") or ""
        writes: builtins.list[tuple[str, str, Any]] = []
        records: builtins.list[tuple[str, int, str, object, str]] = []
        write_tags = {"kind": "write", "ns": ns, "ckpt": checkpoint_id}
        for wkey in await all_keys(store, write_tags):
            witem = await store.get_item(wkey.key)
            if witem is None:
                continue
            record = witem.value
            task_id, index, channel = (
                record.get("task_id"),
                record.get("index"),
                record.get("channel"),
            )
            if not isinstance(task_id, str) or not isinstance(channel, str):
                raise CorruptPayloadError(f"pending write {wkey.key!r} of {where} is malformed")
            if not isinstance(index, int):
                raise CorruptPayloadError(f"pending write {wkey.key!r} of {where} has no index")
            records.append((task_id, index, channel, record.get("value"), wkey.key))
        for task_id, _, channel, raw, wkey_text in sorted(records, key=lambda r: (r[0], r[1])):
            writes.append((task_id, channel, self._decode(raw, f"write {wkey_text!r} of {where}")))
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=_config(thread_id, ns, str(parent)) if parent else None,
            pending_writes=writes,
        )

    def _decode(self, raw: object, where: str) -> Any:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
            raise CorruptPayloadError(f"{where} holds no serialized value")
        data = raw.get("data")
        if not isinstance(data, str):
            raise CorruptPayloadError(f"{where} holds no base64 data")
        try:
            payload = base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
            raise CorruptPayloadError(f"{where} has bad base64: {exc}") from None
        return self.serde.loads_typed((raw["type"], payload))


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }
