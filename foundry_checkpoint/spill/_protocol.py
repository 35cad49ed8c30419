"""The spill-store contract: the :class:`SpillStore` protocol, :class:`BlobInfo`, and the
namespace and digest rules every implementation applies before any I/O.

Example:
    >>> check_namespace("lg/3f2a")
    'lg/3f2a'
"""

from __future__ import annotations

import builtins
import hashlib
import re
from collections.abc import Iterable
from typing import Final, NamedTuple, Protocol, runtime_checkable

from .._offload import offload
from ..errors import (
    CorruptPayloadError,
    InvalidArgumentError,
    InvalidIdentifierError,
    MissingBlobError,
)

__all__ = [
    "DIGEST_RE",
    "NAMESPACE_RE",
    "BlobInfo",
    "SpillStore",
    "blob_bytes",
    "check_digest",
    "check_namespace",
    "corrupt_blob",
    "missing_blob",
    "sha256_hex",
    "verified",
]

NAMESPACE_RE: Final = re.compile(r"[A-Za-z0-9_.\-/]{1,200}")
DIGEST_RE: Final = re.compile(r"[0-9a-f]{64}")


class BlobInfo(NamedTuple):
    """One stored blob, as :meth:`SpillStore.list` reports it.

    Example:
        >>> BlobInfo(digest="ab" * 32, size=3, last_modified=1700000000.0).size
        3
    """

    digest: str
    """The blob's sha256 (64 lowercase hex characters), which is also its name."""
    size: int
    """Stored size in bytes."""
    last_modified: float
    """Last write (or refresh by :meth:`SpillStore.put`) in epoch seconds."""


@runtime_checkable
class SpillStore(Protocol):
    """A content-addressed blob store, partitioned into namespaces.

    Every method validates ``namespace`` (see the module docstring) and each ``digest`` (64
    lowercase hex characters) and raises :class:`~foundry_checkpoint.errors.InvalidIdentifierError`
    for a bad one before doing any I/O.

    Example:
        >>> import tempfile
        >>> from foundry_checkpoint.spill import LocalSpill
        >>> isinstance(LocalSpill(tempfile.gettempdir()), SpillStore)
        True
    """

    async def put(self, namespace: str, data: bytes) -> str:
        """Store ``data`` under its sha256 and return that digest (64 lowercase hex characters).

        The store computes the digest itself: callers never hash what they store. Idempotent:
        when the blob exists already it is not uploaded again, but its last-modified time is
        refreshed.

        Args:
            namespace: The namespace to store the blob in.
            data: The blob's bytes.

        Returns:
            The sha256 of ``data``, which names the blob.

        Raises:
            InvalidIdentifierError: ``namespace`` is invalid.
            InvalidArgumentError: ``data`` is not bytes.
        """
        ...

    async def get(self, namespace: str, digest: str) -> bytes:
        """The blob's bytes, verified against ``digest``.

        The store is the one layer that verifies a blob: callers (the codec among them) trust
        what it returns.

        Args:
            namespace: The namespace the blob was stored in.
            digest: The digest :meth:`put` returned.

        Returns:
            The blob's bytes.

        Raises:
            InvalidIdentifierError: ``namespace`` or ``digest`` is invalid.
            MissingBlobError: The blob does not exist.
            CorruptPayloadError: The blob's sha256 differs from ``digest``.
        """
        ...

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Delete the given blobs of ``namespace``; returns how many existed and were removed."""
        ...

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every blob of ``namespace`` (not of nested namespaces); returns the count."""
        ...

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        """Every blob of ``namespace``, sorted by digest."""
        ...

    async def namespaces(self) -> builtins.list[str]:
        """Every namespace that holds at least one blob, sorted."""
        ...

    async def aclose(self) -> None:
        """Release clients and connections. Idempotent; the store may be used again after it."""
        ...

    @property
    def describe(self) -> str:
        """Where the blobs live, for messages and logs (``local:<dir>``, ``azure:<a>/<c>/<p>``)."""
        ...


def check_namespace(namespace: object) -> str:
    """Return ``namespace`` when valid, else raise InvalidIdentifierError saying why."""
    if not isinstance(namespace, str):
        raise InvalidIdentifierError(
            f"spill namespace must be a str, got {type(namespace).__name__}"
        )
    if not NAMESPACE_RE.fullmatch(namespace):
        raise InvalidIdentifierError(
            f"invalid spill namespace {namespace!r}: use 1-200 characters of [A-Za-z0-9_.-/]"
        )
    segments = namespace.split("/")
    if any(segment in ("", ".", "..") for segment in segments) or ".." in namespace:
        raise InvalidIdentifierError(
            f"invalid spill namespace {namespace!r}: no leading, trailing or doubled '/', "
            "no '.' or '..' segments and no '..' anywhere"
        )
    return namespace


def check_digest(digest: object) -> str:
    """Return ``digest`` when it is 64 lowercase hex characters, else raise."""
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise InvalidIdentifierError(
            f"invalid blob digest {digest!r}: expected a sha256 as 64 lowercase hex characters"
        )
    return digest


def blob_bytes(data: object) -> bytes:
    """``data`` as bytes when it is bytes-like, else raise InvalidArgumentError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"blob data must be bytes, got {type(data).__name__}")
    return bytes(data)


async def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` as hex, off the event loop for large inputs (see ``_offload``)."""
    return await offload(len(data), lambda: hashlib.sha256(data).hexdigest())


async def verified(namespace: str, digest: str, data: bytes, where: str) -> bytes:
    """``data`` when it hashes to ``digest``, else the CorruptPayloadError for the blob."""
    actual = await sha256_hex(data)
    if actual != digest:
        raise corrupt_blob(namespace, digest, actual, where)
    return data


def missing_blob(namespace: str, digest: str, where: str) -> MissingBlobError:
    """The error for a blob that is not in the store ``where`` describes."""
    return MissingBlobError(
        f"spilled blob {digest} of namespace {namespace!r} is missing from {where}. It was "
        "deleted outside foundry-checkpoint (for example by a retention or lifecycle rule "
        "shorter than the state store's item TTL), or the spill store points at another "
        "directory, container or prefix than the one the checkpoint was written with."
    )


def corrupt_blob(namespace: str, digest: str, actual: str, where: str) -> CorruptPayloadError:
    """The error for a blob whose content hashes to ``actual`` instead of ``digest``."""
    return CorruptPayloadError(
        f"spilled blob {digest} of namespace {namespace!r} in {where} is corrupt: its content "
        f"hashes to {actual}. It was changed or damaged outside foundry-checkpoint."
    )
