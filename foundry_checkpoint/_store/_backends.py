"""The registry of backends: the one place that knows every backend, and chooses one, once.

A backend (:class:`~._backend.Backend`) is registered under its ``local_backend=`` name:
``"sqlite"`` (:class:`~._embedded.EmbeddedBackend`, the embedded default) and ``"sdk"``
(:class:`~._sdk_local.SdkLocalBackend`, the SDK's local mode under a file lock); with
``FOUNDRY_HOSTING_ENVIRONMENT`` set the choice is always :class:`~._hosted.HostedBackend` (the
service), and naming another backend is an error. A new backend is one module with its class
plus one :func:`register_backend` call; nothing above the store layer changes, and nothing above
it names a backend either: the adapters pass the ``local_backend=`` value they were given, the
CLI offers :func:`backend_names`, and a tool that reads the SDK's own stores asks
:func:`sdk_client_backend`.

Every store is opened with ``user_isolation=True``, and :func:`open_isolated` refuses an
existing store without it, whatever the backend. Every client a chosen backend hands out
raises typed errors (:mod:`._typed`: the SDK's ``FoundryStorage*Error`` as
``foundry_checkpoint.errors.StoreError`` subclasses, the SDK's error kept as ``__cause__``).

Example:
    >>> import asyncio, os, tempfile
    >>> from unittest import mock
    >>> from foundry_checkpoint._options import StoreOptions
    >>> async def demo() -> bool:
    ...     backend = choose_backend("sqlite", StoreOptions(store_prefix="x"))
    ...     missing = await open_isolated(backend, "s", "ann", create=False)
    ...     store = await open_isolated(backend, "s", "ann", create=True)
    ...     return missing is None and (await store.get()).user_isolation
    >>> with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(
    ...         os.environ, {"AGENTSERVER_STATE_ROOT": tmp}):
    ...     asyncio.run(demo())
    True
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal, TypeAlias

from azure.ai.agentserver.core.storage import FoundryStorageError, FoundryStorageNotFoundError

from foundry_checkpoint.errors import InvalidArgumentError, IsolationRefusedError, StoreError

from ._backend import Backend, BackendSettings
from ._embedded import EmbeddedBackend
from ._hosted import HostedBackend, hosted
from ._limits import HOSTING_ENV
from ._protocol import Described, StateStoreLike
from ._typed import typed, typed_error

__all__ = [
    "DEFAULT_BACKEND",
    "BackendFactory",
    "LocalBackend",
    "backend_names",
    "check_backend_choice",
    "choose_backend",
    "open_isolated",
    "register_backend",
    "sdk_client_backend",
]

#: The ``local_backend=`` option of the adapters: a built-in name (which editors offer) or the
#: name of any backend registered with :func:`register_backend`, checked against the registry
#: when the adapter is built (:func:`check_backend_choice`), not by the type.
LocalBackend: TypeAlias = Literal["sqlite", "sdk"] | str
#: Builds a backend from the adapter's options (a backend class is one).
BackendFactory = Callable[[BackendSettings], Backend]
#: The backend of local mode when none is named.
DEFAULT_BACKEND: Final = "sqlite"


def _sdk_local(settings: BackendSettings) -> Backend:
    """The SDK's local mode, imported only when chosen (it loads ``filelock``)."""
    from ._sdk_local import SdkLocalBackend

    return SdkLocalBackend(settings)


_LOCAL: dict[str, BackendFactory] = {"sqlite": EmbeddedBackend, "sdk": _sdk_local}
_HOSTED: Final[BackendFactory] = HostedBackend


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``local_backend=name`` choose the backend ``factory`` builds (local mode).

    Registering the same factory again is a no-op.

    Args:
        name: The ``local_backend=`` value that selects it.
        factory: Builds the backend from the adapter's options (its class will do).

    Raises:
        InvalidArgumentError: ``name`` is taken by another backend.

    Example:
        >>> register_backend("sqlite", EmbeddedBackend)  # already so: nothing changes
        >>> register_backend("sqlite", HostedBackend)
        Traceback (most recent call last):
        ...
        foundry_checkpoint.errors.InvalidArgumentError: local_backend 'sqlite' is taken ...
    """
    known = _LOCAL.get(name)
    if known is not None and known is not factory:
        raise InvalidArgumentError(
            f"local_backend {name!r} is taken by {known!r}; register the backend under "
            "another name."
        )
    _LOCAL[name] = factory


def backend_names() -> tuple[str, ...]:
    """The ``local_backend=`` names registered now, the built-in ones first.

    Returns:
        The names, in registration order (what the CLI's ``--local-backend`` accepts).

    Example:
        >>> backend_names()[:2]
        ('sqlite', 'sdk')
    """
    return tuple(_LOCAL)


def sdk_client_backend() -> str:
    """The ``local_backend=`` value whose stores are those ``FoundryStateStore``'s own client
    uses: the SDK's local files in local mode, the service in hosted mode.

    For a tool that reads what another user of the SDK's client wrote (the migration source of
    langchain-azure-ai's saver), so that it names no backend itself.

    Returns:
        ``"sdk"`` in local mode; in hosted mode, where the service is the only backend, the
        default name (the only one accepted there).

    Example:
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ):
        ...     _ = os.environ.pop(HOSTING_ENV, None)
        ...     local = sdk_client_backend()
        ...     os.environ[HOSTING_ENV] = "1"
        ...     local, sdk_client_backend()
        ('sdk', 'sqlite')
    """
    return DEFAULT_BACKEND if hosted() else "sdk"


def check_backend_choice(name: str) -> None:
    """Check a ``local_backend=`` value before anything opens.

    Args:
        name: The value given.

    Raises:
        InvalidArgumentError: an unknown name, or a backend other than the default named in
            hosted mode (where the service is always the backend).

    Example:
        >>> check_backend_choice("sdk")
        >>> check_backend_choice("nope")
        Traceback (most recent call last):
        ...
        foundry_checkpoint.errors.InvalidArgumentError: local_backend must be ... got 'nope'
    """
    if not isinstance(name, str) or name not in _LOCAL:
        names = [repr(known) for known in _LOCAL]
        listed = ", ".join(names[:-1]) + f" or {names[-1]}"
        raise InvalidArgumentError(f"local_backend must be {listed}, got {name!r}")
    if name != DEFAULT_BACKEND and hosted():
        raise InvalidArgumentError(
            f"local_backend={name!r} was asked for, but {HOSTING_ENV} is set "
            "(hosted mode); the SDK's local backend is only available when it is unset. "
            f"Drop local_backend={name!r}, or unset the variable for local runs."
            if name == "sdk"
            else f"local_backend={name!r} was asked for, but {HOSTING_ENV} is set "
            "(hosted mode), where the service is the backend; a local backend is only "
            f"available when it is unset. Drop local_backend={name!r}, or unset the "
            "variable for local runs."
        )


def choose_backend(name: str, settings: BackendSettings) -> Backend:
    """The backend of one adapter object: the service in hosted mode, else ``name``'s.

    Args:
        name: The ``local_backend=`` value (checked by :func:`check_backend_choice`).
        settings: The adapter's options.

    Returns:
        The backend, built (building one sends nothing).

    Example:
        >>> from foundry_checkpoint._options import StoreOptions
        >>> choose_backend("sdk", StoreOptions(store_prefix="x")).kind
        'local-sdk'
    """
    check_backend_choice(name)
    return _Seam(_HOSTED(settings) if hosted() else _LOCAL[name](settings))


class _Seam:
    """A chosen backend whose clients raise typed errors (the store seam)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.location = inner.location
        self.compresses = inner.compresses
        self.chunks_in_store = inner.chunks_in_store
        self.spill_root: Path | None = inner.spill_root
        self.first_page = inner.first_page
        self.caller = inner.caller

    async def open(self, name: str, partition: str, *, create: bool) -> StateStoreLike | None:
        try:
            store = await self.inner.open(name, partition, create=create)
        except StoreError:
            raise
        except FoundryStorageError as exc:
            raise typed_error(exc, name) from exc
        return None if store is None else typed(store)

    def bind(self, name: str, partition: str) -> StateStoreLike:
        return typed(self.inner.bind(name, partition))

    async def aclose(self) -> None:
        await self.inner.aclose()


async def open_isolated(
    backend: Backend, name: str, partition: str, *, create: bool
) -> StateStoreLike | None:
    """A checked client of the store ``name``.

    Args:
        backend: The backend to open it on.
        name: The store name.
        partition: The caller's partition (see :meth:`~._backend.Backend.caller`).
        create: Create the store (isolated) when it does not exist; else only look.

    The descriptor checked is the one the open answered with when the client holds it
    (:class:`~._protocol.Described`: the hosted and the embedded opens read or create the
    store, and a create answers with the descriptor), else one ``get()``.

    Returns:
        The client, or None when ``create`` is False and the store does not exist.

    Raises:
        IsolationRefusedError: The store exists without ``user_isolation``.
    """
    store = await backend.open(name, partition, create=create)
    if store is None:
        return None
    try:
        try:
            # The open already read (or created) the store: its answer is checked.
            known = store.opened_descriptor if isinstance(store, Described) else None
            descriptor = known if known is not None else await store.get()
        except FoundryStorageNotFoundError:
            if create:
                raise
            await store.aclose()
            return None
        if not descriptor.user_isolation:
            raise IsolationRefusedError(
                f"store {name!r} exists without user_isolation, so every end user could read "
                "every other user's checkpoints; it is refused. Use another store_prefix, or "
                "move its data and delete the store so that it is re-created isolated."
            )
    except BaseException:
        await store.aclose()
        raise
    return store
