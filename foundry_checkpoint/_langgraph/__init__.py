"""The LangGraph saver, by operation.

:mod:`._saver` holds ``FoundryCheckpointer`` (its constructor and the sync and async faces);
the operations are module-level coroutines over a :class:`._context.Context` (the core, the
serializer, the caches): :mod:`._read` (latest, one checkpoint, pending writes),
:mod:`._list` (``list``), :mod:`._history` (``DeltaChannel`` history), :mod:`._write`
(``put``, ``put_writes``), :mod:`._maintenance` (delete, prune, copy, count, gc). The item
layout is :mod:`._records`; the deletion rules are :mod:`._prune`.
"""
