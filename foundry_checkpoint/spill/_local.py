"""The local-directory spill store, :class:`LocalSpill`: one file per blob.

Example:
    >>> import asyncio, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     asyncio.run(LocalSpill(d, fsync=False).list("lg/3f2a"))
    []
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from .._aio import AsyncClosing
from .._store._private import private_dir
from ..errors import CorruptPayloadError, InvalidArgumentError
from ._protocol import (
    DIGEST_RE,
    NAMESPACE_RE,
    BlobInfo,
    blob_bytes,
    check_digest,
    check_namespace,
    corrupt_blob,
    missing_blob,
    sha256_hex,
)

__all__ = ["LocalSpill"]


class LocalSpill(AsyncClosing):
    """A spill store in a local directory: one file per blob at ``<dir>/<namespace>/<digest>``.

    Writes are atomic (a private temporary file in the same directory, then :func:`os.replace`),
    so a reader never sees a partial blob, and several processes may share the directory: two
    writers of one digest write identical bytes, and a namespace removed by one process while
    another writes into it is re-created by the writer. With ``fsync=True`` (the default) file
    data and the directory entry are flushed to disk before :meth:`put` returns, so a blob
    survives a crash of the machine once the item that references it has been written.
    Blocking file I/O runs in worker threads, never on the calling event loop: that includes
    resolving symbolic links to check a path, and creating folders on first use, so a loop
    checked for blocking calls (``langgraph dev``'s blockbuster) never sees any.

    Files are created readable by their owner only (mode 0600, directories 0700). The store
    holds nothing open between calls; ``async with`` works as for every spill store.

    Example:
        >>> import asyncio, tempfile
        >>> async def demo(directory: str) -> list[str]:
        ...     async with LocalSpill(directory, fsync=False) as spill:
        ...         await spill.put("lg/3f2a", b"a large value")
        ...         return await spill.namespaces()
        >>> with tempfile.TemporaryDirectory() as d:
        ...     asyncio.run(demo(d))
        ['lg/3f2a']
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = True) -> None:
        """Use ``directory`` (created on the first write) for blobs; see the class docstring.

        Args:
            directory: The folder holding the blobs (made absolute; created on first write).
            fsync: Flush each new blob and its directory entry to disk before :meth:`put`
                returns.

        Raises:
            InvalidArgumentError: ``directory`` is not a path.

        Example:
            >>> LocalSpill("/var/spill").describe
            'local:/var/spill'
        """
        if not isinstance(directory, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"LocalSpill needs a directory path, got {type(directory).__name__}"
            )
        given = os.fspath(directory)
        self._given = given
        # A relative directory is made absolute on first use (in a worker thread when that is
        # a blob operation): that reads the working directory, a call an event loop checked
        # for blocking calls (langgraph dev's blockbuster) refuses.
        self._root: Path | None = Path(os.path.abspath(given)) if os.path.isabs(given) else None
        self._fsync = fsync

    def _absolute(self) -> Path:
        root = self._root
        if root is None:
            root = self._root = Path(os.path.abspath(self._given))
        return root

    @property
    def directory(self) -> Path:
        """The absolute directory holding the blobs."""
        return self._absolute()

    @property
    def describe(self) -> str:
        """``local:<absolute directory>``."""
        return f"local:{self._absolute()}"

    def __str__(self) -> str:
        return self.describe

    def __repr__(self) -> str:
        return f"LocalSpill({str(self._absolute())!r}, fsync={self._fsync!r})"

    def _path(self, namespace: str, digest: str | None = None) -> Path:
        """The path of a namespace or blob, names checked and checked by :meth:`_inside` to lead
        under the root (call it in the worker thread: it resolves links)."""
        folder = self._absolute().joinpath(*check_namespace(namespace).split("/"))
        path = folder if digest is None else folder / check_digest(digest)
        self._inside(path)
        return path

    def _inside(self, path: Path) -> None:
        """Raise unless ``path``, with every symbolic link resolved, lies under the root.

        A symlinked namespace folder or blob (a tampered spill directory) could otherwise make
        a read, a listing or a delete reach files outside the spill store.
        """
        root = os.path.realpath(self._absolute())
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            raise CorruptPayloadError(
                f"{path} resolves to {real}, outside the spill directory {root} (a symbolic "
                "link was placed in it); nothing was read or deleted there"
            )

    async def put(self, namespace: str, data: bytes) -> str:
        """Write the blob unless present (refresh its modification time when it is).

        Args:
            namespace: The namespace to store the blob in.
            data: The blob's bytes.

        Returns:
            The blob's sha256 (its name), as 64 lowercase hex characters.

        Raises:
            InvalidIdentifierError: ``namespace`` is not a valid namespace.
            InvalidArgumentError: ``data`` is not bytes.

        Example:
            >>> import asyncio, hashlib, tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     digest = asyncio.run(LocalSpill(d, fsync=False).put("lg/3f2a", b"blob"))
            >>> digest == hashlib.sha256(b"blob").hexdigest()
            True
        """
        check_namespace(namespace)
        blob = blob_bytes(data)
        digest = await sha256_hex(blob)
        await asyncio.to_thread(self._put_sync, namespace, digest, blob)
        return digest

    def _put_sync(self, namespace: str, digest: str, data: bytes) -> None:
        path = self._path(namespace, digest)
        for _ in range(5):
            try:
                os.utime(path)  # present: refresh mtime, do not rewrite
                return
            except FileNotFoundError:
                pass
            try:
                self._write_blob(path, data)
                return
            except FileNotFoundError:
                # Another process removed the (empty) namespace directory between our mkdir and
                # our write; try again from the start.
                continue
        raise OSError(f"could not write blob {path} (its directory kept disappearing)")

    def _write_blob(self, path: Path, data: bytes) -> None:
        """Create ``path`` atomically with ``data`` (temporary file + os.replace)."""
        private_dir(path.parent)
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if self._fsync:
                    os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if self._fsync:
            _fsync_directory(path.parent)

    async def get(self, namespace: str, digest: str) -> bytes:
        """Read and verify the blob."""
        check_namespace(namespace)
        check_digest(digest)
        try:
            data, actual = await asyncio.to_thread(self._read_hashed, namespace, digest)
        except (FileNotFoundError, NotADirectoryError):
            raise missing_blob(namespace, digest, self.describe) from None
        if actual != digest:
            raise corrupt_blob(namespace, digest, actual, self.describe)
        return data

    async def delete(self, namespace: str, digests: Iterable[str]) -> int:
        """Remove the given blobs; returns how many were removed."""
        check_namespace(namespace)
        names = [check_digest(digest) for digest in digests]
        return await asyncio.to_thread(self._delete_sync, namespace, names)

    def _delete_sync(self, namespace: str, digests: builtins.list[str]) -> int:
        folder = self._path(namespace)  # first: a linked folder is refused before any blob
        paths = [self._path(namespace, digest) for digest in digests]
        removed = 0
        for path in paths:
            try:
                os.unlink(path)
                removed += 1
            except (FileNotFoundError, NotADirectoryError):
                pass
        self._prune(folder)
        return removed

    async def delete_namespace(self, namespace: str) -> int:
        """Remove every blob of ``namespace`` (and stale temporary files); returns the count."""
        check_namespace(namespace)
        return await asyncio.to_thread(self._delete_namespace_sync, namespace)

    def _delete_namespace_sync(self, namespace: str) -> int:
        folder = self._path(namespace)
        removed = 0
        for entry in _scan(folder):
            if not entry.is_file(follow_symlinks=False):
                continue
            if DIGEST_RE.fullmatch(entry.name) or _is_temp_name(entry.name):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    continue
                if DIGEST_RE.fullmatch(entry.name):
                    removed += 1
        self._prune(folder)
        return removed

    def _prune(self, folder: Path) -> None:
        """Remove ``folder`` and its parents up to the root while they are empty."""
        root = self._absolute()
        while folder != root and root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty, already gone, or in use by another process
                return
            folder = folder.parent

    async def list(self, namespace: str) -> builtins.list[BlobInfo]:
        """Every blob of ``namespace`` with its size and modification time."""
        check_namespace(namespace)
        return await asyncio.to_thread(self._list_sync, namespace)

    def _list_sync(self, namespace: str) -> builtins.list[BlobInfo]:
        folder = self._path(namespace)
        infos: builtins.list[BlobInfo] = []
        for entry in _scan(folder):
            if not DIGEST_RE.fullmatch(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                infos.append(BlobInfo(entry.name, st.st_size, st.st_mtime))
        return sorted(infos)

    async def namespaces(self) -> builtins.list[str]:
        """Every namespace directory that holds at least one blob."""
        return await asyncio.to_thread(self._namespaces_sync)

    def _namespaces_sync(self) -> builtins.list[str]:
        found: builtins.list[str] = []
        root = self._absolute()
        for dirpath, _dirnames, filenames in os.walk(root):
            if any(DIGEST_RE.fullmatch(name) for name in filenames):
                relative = Path(dirpath).relative_to(root).as_posix()
                if relative != "." and NAMESPACE_RE.fullmatch(relative):
                    found.append(relative)
        return sorted(found)

    async def aclose(self) -> None:
        """Nothing to release (no file stays open between calls); present for the protocol."""

    def _read_hashed(self, namespace: str, digest: str) -> tuple[bytes, str]:
        """The blob's bytes and their sha256: one worker-thread hop for the check of the path,
        the read and the hash."""
        path = self._path(namespace, digest)
        data = path.read_bytes()
        return data, hashlib.sha256(data).hexdigest()


def _scan(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _is_temp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp") and DIGEST_RE.match(name[1:]) is not None


def _fsync_directory(folder: Path) -> None:
    """Flush a directory entry to disk (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
