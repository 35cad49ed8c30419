"""The interface for framework adapters: everything an adapter builds on, in one module.

An adapter (``foundry_checkpoint_maf``, ``foundry_checkpoint_autogen``, the LangGraph saver in
``foundry_checkpoint._langgraph``, the next one) imports this module and the public ones
(``foundry_checkpoint``, ``foundry_checkpoint.errors``, ``foundry_checkpoint.spill``) and
nothing else of the package (the LangGraph saver also its serializer); ``make lint`` enforces
it (the ``adapters-use-the-interface`` and ``langgraph-uses-the-interface`` contracts in
``pyproject.toml``). What it offers:

* **the core**: :class:`CheckpointCore` (one per adapter object, or shared by a provider), built
  from the adapter's keyword arguments by :func:`new_core`, the one constructor path;
  :class:`Scope`, one scope's store, spill namespace and codec; :class:`Caller`, who a call is
  for, and :class:`Call`, that and the request context it came from, captured once per call at
  the adapter's public method (``CheckpointCore.capture``; pass it to ``run``/``arun`` as
  ``call=`` when one public call makes several, or when the adapter was handed the request
  context rather than running in it); :class:`StoreOptions`, the common keyword arguments
  checked once;
* **the lifecycle base**: :class:`CoreOwner` (``kind``, ``location``, ``close``/``aclose``,
  ``with``);
* **reading**: :func:`newest_item` ("latest" by tags and the newest second),
  :func:`read_newest` (its find-then-read loop, for a listing of one's own), :func:`bounded`
  (at most n awaitables at once), :func:`create_item` (a create that tolerates its own retried
  first attempt), the shapes of the store's answers (:class:`ItemKey`, :class:`StoredItem`,
  :class:`StateStoreLike`, :class:`RanksByTag`: a store that finds the greatest tag value in
  one call) and :data:`MAX_PAGE` (keys per listing page at most);
* **values**: :func:`spilled_digest` (the blob an item value refers to, if it spilled) and
  :data:`INLINE_BUDGET` (the bytes one item value may take inline);
* **naming**: :func:`item_key`, :func:`tag_value`, :func:`unescape`, :func:`check_identifier`,
  :func:`check_text` (collision-free keys and tags within the documented limits);
* **backends**: :func:`register_backend` (make ``local_backend="<name>"`` choose a backend of
  one's own, a class satisfying :class:`Backend`, built from the adapter's
  :class:`BackendSettings`, whose ``caller`` may apply one of the two built-in rules,
  :func:`local_caller` and :func:`hosted_caller`) and :func:`backend_names` (the names
  registered now);
* **the version** (``__version__``, the distribution's, which the adapters report as theirs);
* **defaults**: :data:`DEFAULT_ITEM_TTL_SECONDS`, :data:`DEFAULT_GC_GRACE_SECONDS`,
  :class:`GcReport`, :data:`LocalBackend`.

It is public for adapter authors, not for applications: names may change between minor
versions, with the adapters in this distribution changed alongside.

Example:
    >>> from foundry_checkpoint.adapter import new_core
    >>> def __init__(store_prefix="docs", credential=None, endpoint=None, user_id=None,
    ...              trusted_delegation=False, item_ttl_seconds=-1, spill=None,
    ...              local_backend="sqlite", **client_kwargs):
    ...     return new_core(locals(), scope_word="session")
    >>> core = __init__()
    >>> core.prefix, core.kind, core.scope_word
    ('docs', 'local-sqlite', 'session')
    >>> core.close()
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Final

from ._aio import bounded, read_newest
from ._codec import INLINE_BUDGET, spilled_digest
from ._core import (
    DEFAULT_GC_GRACE_SECONDS,
    Call,
    Caller,
    CheckpointCore,
    GcReport,
    LocalBackend,
    Scope,
    newest_item,
)
from ._lifecycle import CoreOwner
from ._options import StoreOptions
from ._store._backend import Backend, BackendSettings, hosted_caller, local_caller
from ._store._backends import backend_names, register_backend
from ._store._limits import DEFAULT_ITEM_TTL_SECONDS, MAX_PAGE
from ._store._listing import create_item
from ._store._naming import check_identifier, check_text, item_key, tag_value, unescape
from ._store._protocol import ItemKey, RanksByTag, StateStoreLike, StoredItem
from ._version import __version__ as __version__

__all__ = [
    "COMMON_ARGUMENTS",
    "DEFAULT_GC_GRACE_SECONDS",
    "DEFAULT_ITEM_TTL_SECONDS",
    "INLINE_BUDGET",
    "MAX_PAGE",
    "Backend",
    "BackendSettings",
    "Call",
    "Caller",
    "CheckpointCore",
    "CoreOwner",
    "GcReport",
    "ItemKey",
    "LocalBackend",
    "RanksByTag",
    "Scope",
    "StateStoreLike",
    "StoreOptions",
    "StoredItem",
    "backend_names",
    "bounded",
    "check_identifier",
    "check_text",
    "create_item",
    "hosted_caller",
    "item_key",
    "local_caller",
    "new_core",
    "newest_item",
    "read_newest",
    "register_backend",
    "spilled_digest",
    "tag_value",
    "unescape",
]

#: The keyword arguments every adapter takes (``**client_kwargs`` collects the client options).
COMMON_ARGUMENTS: Final = tuple(f.name for f in fields(StoreOptions))


def new_core(arguments: Mapping[str, Any], *, scope_word: str) -> CheckpointCore:
    """The :class:`CheckpointCore` of an adapter object, from its constructor's arguments.

    Adapters keep their common keyword arguments explicit in their own signatures (so users
    see them in signatures and docs) and pass ``locals()`` here: the names of
    :data:`COMMON_ARGUMENTS` are taken from it and checked once by :class:`StoreOptions`.

    Args:
        arguments: the constructor's arguments by name (``locals()``), with every name of
            :data:`COMMON_ARGUMENTS` (``client_kwargs`` is the ``**client_kwargs`` mapping).
        scope_word: what the adapter calls a scope in messages (``"thread"``, ``"context"``).

    Returns:
        The core (building one sends nothing).

    Raises:
        TypeError: ``arguments`` lacks a common argument (the adapter's signature does).

    Example:
        >>> core = new_core(
        ...     {"store_prefix": "docs-core", "credential": None, "endpoint": None,
        ...      "user_id": "ann", "trusted_delegation": False, "item_ttl_seconds": -1,
        ...      "spill": None, "local_backend": "sqlite", "client_kwargs": {}},
        ...     scope_word="scope")
        >>> core.options.user_id
        'ann'
        >>> new_core({"store_prefix": "x"}, scope_word="scope")
        Traceback (most recent call last):
        ...
        TypeError: an adapter must take every common keyword argument; missing: credential, ...
    """
    missing = [name for name in COMMON_ARGUMENTS if name not in arguments]
    if missing:
        raise TypeError(
            "an adapter must take every common keyword argument; missing: " + ", ".join(missing)
        )
    options = StoreOptions(**{name: arguments[name] for name in COMMON_ARGUMENTS})
    return CheckpointCore(options, scope_word=scope_word)
