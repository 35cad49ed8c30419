"""The store layer: the item API every adapter talks to, and its implementations.

* :mod:`._protocol`: ``StateStoreLike``, the subset of ``FoundryStateStore``'s item API the
  adapters use, and the shapes of its answers;
* :mod:`._engine` (with :mod:`._engine_db`, :mod:`._engine_checks`, :mod:`._engine_rows`,
  :mod:`._engine_list`): the SQLite engine implementing the store's documented semantics;
* :mod:`._embedded`: ``EngineStore``, the embedded local default on that engine;
* :mod:`._sdk_local`: ``LockedSdkStore``, the SDK's own local mode under a file lock;
* :mod:`._hosted`: the hosted ``FoundryStateStore`` clients (one credential, one transport,
  retry settings, retried creates);
* :mod:`._listing`: paging helpers over any ``StateStoreLike`` ("newest second", every key);
* :mod:`._naming`: collision-free store names, item keys and tag values;
* :mod:`._limits`: the documented limits and the environment variables of this layer;
* :mod:`._private`: owner-only files and folders for local state.

Nothing here imports the core, the codec or an adapter.
"""
