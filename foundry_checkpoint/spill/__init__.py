"""Spill stores: where payloads too large for one state-store item go.

The state store limits a serialized item value to 1 MB. A checkpoint larger than that is written
as a *blob* to a spill store first, and the item then holds only a small reference (its sha256,
size and codec, see :mod:`foundry_checkpoint._codec`). Two implementations are provided:

* :class:`LocalSpill` keeps blobs as files under a directory (the default in local mode).
* :class:`AzureBlobSpill` keeps them in an Azure Blob Storage container (hosted mode); it needs
  the ``foundry-checkpoint[blob]`` extra. Create it Azure-SDK style with
  :meth:`AzureBlobSpill.from_connection_string`, :meth:`AzureBlobSpill.from_container_client`
  or :meth:`AzureBlobSpill.from_env`.

Both work as ``async with`` blocks, which close what the store opened on exit.

Both implement the :class:`SpillStore` protocol. Blobs are **content-addressed**: a blob's name
is the sha256 of its bytes, computed by the store's ``put`` (which returns it), so writing the
same content twice stores it once; ``get`` verifies what it read against that name. Every blob
lives in a **namespace**, an opaque string chosen by the caller (the checkpointers use a random
value kept in the user's own isolated store, so that one user's cleanup can never reach another
user's blobs). Namespaces are 1-200 characters of
``[A-Za-z0-9_.-/]`` made of non-empty ``/``-separated segments, none of them ``.`` or ``..``.
A namespace does not contain the blobs of the namespaces nested below it: ``"a"`` and ``"a/b"``
are unrelated.

Writing an existing blob again does not upload it again but refreshes its last-modified time, so
a retention rule of the form "delete blobs not modified for N days" never removes a blob that
deduplication keeps reusing (keep N longer than the state store's item TTL).

Example:
    >>> import asyncio, tempfile
    >>> from foundry_checkpoint.spill import LocalSpill
    >>> async def demo(directory: str) -> bytes:
    ...     spill = LocalSpill(directory)
    ...     digest = await spill.put("lg/3f2a", b"a large checkpoint")
    ...     return await spill.get("lg/3f2a", digest)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     asyncio.run(demo(d))
    b'a large checkpoint'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._local import LocalSpill
from ._protocol import BlobInfo, SpillStore

if TYPE_CHECKING:
    from ._azure import AzureBlobSpill

__all__ = ["AzureBlobSpill", "BlobInfo", "LocalSpill", "SpillStore"]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    # AzureBlobSpill is imported on first use: local mode never loads the blob client code.
    if name == "AzureBlobSpill":
        from ._azure import AzureBlobSpill

        return AzureBlobSpill
    raise AttributeError(f"module 'foundry_checkpoint.spill' has no attribute {name!r}")
