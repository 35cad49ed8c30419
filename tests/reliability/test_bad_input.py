"""Damaged data: a corrupt item or blob raises CorruptPayloadError, a lost blob MissingBlobError.

The damage is done behind the saver's back, directly in the store (one character of an item's
payload flipped, tags kept) or in the spill directory (a blob deleted or one byte changed).
Reading the damaged checkpoint must raise the typed error instead of returning other data, and
every other checkpoint of the thread must read back exactly as before. Runs in both store modes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from foundry_checkpoint import (
    CorruptPayloadError,
    FoundryCheckpointer,
    FoundryCheckpointError,
    InvalidArgumentError,
    InvalidIdentifierError,
    LocalSpill,
    MissingBlobError,
)
from foundry_checkpoint._codec import encode_inline
from foundry_checkpoint._langgraph._records import (
    checkpoint_key,
    pack_checkpoint,
    unpack_checkpoint,
    writes_key,
)
from foundry_checkpoint_maf import FoundryCheckpointStorage
from foundry_checkpoint_maf._payload import _decode_value, encode_payload
from foundry_checkpoint_maf._records import checkpoint_tags, pick_latest

from ._worker import big_value


class BadState(TypedDict, total=False):
    """The state of the four-step graph."""

    n: int
    big: bytes


class _Step(Protocol):
    def __call__(self, state: BadState) -> BadState: ...


def _step(big: int | None) -> _Step:
    def step(state: BadState) -> BadState:
        out: BadState = {"n": state.get("n", 0) + 1}
        if big is not None:
            out["big"] = big_value(big)
        return out

    return step


def _build() -> StateGraph[BadState]:
    """``s1`` (big = B11) -> ``s2`` (big = B12) -> ``s3`` (small) -> ``s4`` (big = B13)."""
    builder: StateGraph[BadState] = StateGraph(BadState)
    for name, big in (("s1", 11), ("s2", 12), ("s3", None), ("s4", 13)):
        builder.add_node(name, _step(big))
    builder.add_edge(START, "s1")
    builder.add_edge("s1", "s2")
    builder.add_edge("s2", "s3")
    builder.add_edge("s3", "s4")
    builder.add_edge("s4", END)
    return builder


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _digest(data: object) -> object:
    return hashlib.sha256(data).hexdigest() if isinstance(data, bytes) else data


def _view(tup: CheckpointTuple | None) -> dict[str, Any]:
    """What a reader gets from a checkpoint, large values summarised."""
    assert tup is not None
    return {
        "values": {k: _digest(v) for k, v in sorted(tup.checkpoint["channel_values"].items())},
        "writes": [(t, c, _digest(v)) for t, c, v in tup.pending_writes or []],
        "step": tup.metadata.get("step"),
    }


@dataclass
class Thread:
    """A finished run of the graph: its saver, a reader, and every checkpoint as read back."""

    name: str
    saver: FoundryCheckpointer
    reader: FoundryCheckpointer
    ids: dict[int, str]  # step -> checkpoint id
    views: dict[str, dict[str, Any]]  # checkpoint id -> view
    tuples: dict[int, CheckpointTuple]

    def checkpoint_item(self, step: int) -> str:
        return checkpoint_key("", self.ids[step])

    def read(self, checkpoint_id: str | None) -> CheckpointTuple | None:
        return self.reader.get_tuple(_config(self.name, checkpoint_id))

    def others_unchanged(self, *damaged: int) -> None:
        """Every checkpoint but ``damaged`` (steps) reads back exactly as before."""
        for step, checkpoint_id in self.ids.items():
            if step not in damaged:
                assert _view(self.read(checkpoint_id)) == self.views[checkpoint_id], step


@pytest.fixture
def thread(store_env: Any) -> Iterator[Thread]:
    """The graph run to its end on a fresh thread; a second saver object reads."""
    spill = store_env.root / "spill"

    def make() -> FoundryCheckpointer:
        return FoundryCheckpointer(**store_env.kwargs(spill=LocalSpill(spill, fsync=False)))

    saver, reader = make(), make()
    try:
        name = "damaged"
        _build().compile(checkpointer=saver).invoke({"n": 0}, _config(name))
        tuples = {int(t.metadata["step"]): t for t in reader.list(_config(name))}
        assert sorted(tuples) == [-1, 0, 1, 2, 3, 4]
        ids = {step: t.config["configurable"]["checkpoint_id"] for step, t in tuples.items()}
        views = {ids[step]: _view(t) for step, t in tuples.items()}
        yield Thread(name, saver, reader, ids, views, tuples)
    finally:
        saver.close()
        reader.close()


def _rewrite(thread: Thread, key: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Replace item ``key``'s value by ``change(value)`` directly in the store, tags kept."""
    core = thread.saver._core

    async def go() -> None:
        scope = await core.scope(thread.name)
        item = await scope.store.get_item(key)
        assert item is not None, key
        await scope.store.set_item(key, change(dict(item.value)), tags=dict(item.tags or {}))

    core.run(go())


def _flip(value: dict[str, Any]) -> dict[str, Any]:
    """One character of the inline payload changed (in the middle: every bit there counts)."""
    text = value["d"]
    assert isinstance(text, str) and len(text) > 8
    i = len(text) // 2
    return {**value, "d": text[:i] + ("A" if text[i] != "A" else "B") + text[i + 1 :]}


def _blob(thread: Thread, step: int) -> tuple[str, str]:
    """The spill namespace and the digest of checkpoint ``step``'s ``big`` channel blob."""
    core = thread.saver._core
    key = thread.checkpoint_item(step)

    async def go() -> tuple[str, str]:
        scope = await core.scope(thread.name)
        item = await scope.store.get_item(key)
        assert item is not None
        record = unpack_checkpoint(await scope.decode(item.value, key=key), where=key)
        digest = record.channels["big"].digest
        namespace = await scope.namespace(create=False)
        assert digest is not None and namespace is not None
        return namespace, digest

    return core.run(go())


def test_corrupt_checkpoint_item(thread: Thread) -> None:
    _rewrite(thread, thread.checkpoint_item(3), _flip)
    with pytest.raises(CorruptPayloadError):
        thread.read(thread.ids[3])
    thread.others_unchanged(3)
    # the newest checkpoint damaged: reading "latest" raises, it does not fall back silently
    _rewrite(thread, thread.checkpoint_item(4), _flip)
    with pytest.raises(CorruptPayloadError):
        thread.read(None)
    thread.others_unchanged(3, 4)


def test_corrupt_middle_checkpoint_leaves_the_thread_usable(thread: Thread) -> None:
    _rewrite(thread, thread.checkpoint_item(2), _flip)
    assert _view(thread.read(None)) == thread.views[thread.ids[4]]
    out = _build().compile(checkpointer=thread.saver).invoke({"n": 100}, _config(thread.name))
    assert out["n"] == 104 and _digest(out["big"]) == _digest(big_value(13))
    with pytest.raises(CorruptPayloadError):
        thread.read(thread.ids[2])
    thread.others_unchanged(2)


def test_corrupt_writes_item(thread: Thread) -> None:
    pending = thread.tuples[2].pending_writes
    assert pending
    task = pending[0][0]  # s3's writes on checkpoint 2 (inline)
    _rewrite(thread, writes_key("", thread.ids[2], task), _flip)
    with pytest.raises(CorruptPayloadError):
        thread.read(thread.ids[2])
    thread.others_unchanged(2)


def test_missing_channel_blob(thread: Thread) -> None:
    namespace, digest = _blob(thread, 1)  # B11: referenced by checkpoint 1 only
    spill = thread.saver._core.spill
    assert spill is not None
    thread.saver._core.run(spill.delete(namespace, [digest]))
    with pytest.raises(MissingBlobError):
        thread.read(thread.ids[1])
    thread.others_unchanged(1)


def test_missing_writes_blob(thread: Thread, store_env: Any) -> None:
    # s2's writes on checkpoint 1 hold B12 and are over 1 MB: the writes item itself is spilled
    blobs = {p.name: p for p in Path(store_env.root / "spill").rglob("*") if p.is_file()}
    _, b12 = _blob(thread, 2)
    _, b11 = _blob(thread, 1)
    _, b13 = _blob(thread, 4)
    spilled_items = sorted(set(blobs) - {b11, b12, b13})
    assert len(spilled_items) == 3  # the writes of s1, s2 and s4
    for name in spilled_items:
        blobs[name].unlink()
    for step in (0, 1, 3):  # the checkpoints those writes are pending on
        with pytest.raises(MissingBlobError):
            thread.read(thread.ids[step])
    thread.others_unchanged(0, 1, 3)


def test_corrupt_blob(thread: Thread, store_env: Any) -> None:
    _, digest = _blob(thread, 4)  # B13: checkpoint 4 only
    (path,) = [p for p in Path(store_env.root / "spill").rglob(digest) if p.is_file()]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptPayloadError):
        thread.read(thread.ids[4])
    with pytest.raises(CorruptPayloadError):
        thread.read(None)
    thread.others_unchanged(4)


# -- bad input, early: every case a typed error ---------------------------------------------
_LONE = "\ud800"  # a lone surrogate: not encodable as UTF-8


def _saver(env: Any, **options: Any) -> FoundryCheckpointer:
    return FoundryCheckpointer(**env.kwargs(**options))


def _one_checkpoint(saver: FoundryCheckpointer, thread: str = "t1") -> RunnableConfig:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": 1}
    checkpoint["channel_versions"] = {"n": 1}
    return saver.put(_config(thread), checkpoint, {"source": "loop", "step": 1}, {"n": 1})


def _replace_record(saver: FoundryCheckpointer, config: RunnableConfig, **fields: Any) -> None:
    """Rewrite the checkpoint item of ``config`` with ``fields`` changed in its record."""
    conf = config["configurable"]
    key = checkpoint_key(conf["checkpoint_ns"], conf["checkpoint_id"])

    async def go() -> None:
        scope = await saver._core.scope(conf["thread_id"])
        item = await scope.store.get_item(key)
        assert item is not None
        payload = await scope.decode(item.value, key=key)
        record = unpack_checkpoint(payload, where=key)
        changed = dataclasses.replace(record, **fields)
        value = encode_inline(pack_checkpoint(changed))
        await scope.store.set_item(key, value, tags=dict(item.tags or {}))

    saver._core.run(go())


_CONSTRUCTION_CASES: dict[str, dict[str, Any]] = {
    "user_id with CR LF": {"user_id": "a\r\nX: y"},
    "user_id with a NUL": {"user_id": "a\x00b"},
    "user_id with an escape": {"user_id": "\x1b[2Jbob"},
    "user_id with a trailing space": {"user_id": "alice "},
    "user_id with a leading tab": {"user_id": "\talice"},
    "user_id with a lone surrogate": {"user_id": f"al{_LONE}ice"},
    "store_prefix '..'": {"store_prefix": ".."},
    "store_prefix '.'": {"store_prefix": "."},
    "store_prefix with a '..' segment": {"store_prefix": "a/../b"},
    "store_prefix with a '.' segment": {"store_prefix": "a/."},
}


@pytest.mark.parametrize("case", list(_CONSTRUCTION_CASES))
def test_bad_options_are_refused_at_construction(case: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidIdentifierError):
        FoundryCheckpointer(**_CONSTRUCTION_CASES[case])
    with pytest.raises(InvalidIdentifierError):
        FoundryCheckpointStorage("c", **_CONSTRUCTION_CASES[case])
    assert not any(tmp_path.iterdir())  # nothing was created


def _autogen_prune(keep: int) -> object:
    from foundry_checkpoint_autogen import AutoGenStateStore

    with AutoGenStateStore() as store:
        return store.prune("scope", "agent", "a", keep=keep)


def _autogen_store(**options: Any) -> object:
    from foundry_checkpoint_autogen import AutoGenStateStore

    return AutoGenStateStore(**options)


def _copy_uri(uri: str) -> object:
    from foundry_checkpoint.cli._copy import parse_uri

    return parse_uri(uri)


def _copy_missing_source(tmp_path: Path) -> object:
    from foundry_checkpoint.cli._copy import SaverUri, open_saver

    def no_foundry(prefix: str | None) -> Any:
        raise AssertionError("not a foundry URI")

    missing = SaverUri("sqlite", str(tmp_path / "missing.db"))
    with open_saver(missing, role="source", foundry=no_foundry):
        return None


def _explorer_host(host: str) -> object:
    from foundry_checkpoint.cli._ui import check_host

    check_host(host, allow_remote=False)
    return None


def _emulator_bind(pair: str) -> object:
    from foundry_checkpoint.emulator.__main__ import _bindings

    return _bindings([pair])


_NESTED: Any = []
for _ in range(300):
    _NESTED = [_NESTED]

# Every public call's bad input: the call, and every type its error must be (the first one is
# what ``pytest.raises`` waits for). Each error is a FoundryCheckpointError; an
# InvalidArgumentError is also a ValueError, so code catching ValueError keeps working.
_ARGUMENT_CASES: dict[str, tuple[Callable[[Path], object], tuple[type[BaseException], ...]]] = {
    "LangGraph item_ttl_seconds 0": (
        lambda _: FoundryCheckpointer(item_ttl_seconds=0),
        (InvalidArgumentError,),
    ),
    "MAF item_ttl_seconds too large": (
        lambda _: FoundryCheckpointStorage("c", item_ttl_seconds=2**31),
        (InvalidArgumentError,),
    ),
    "local_backend unknown": (
        lambda _: FoundryCheckpointer(local_backend="postgres"),
        (InvalidArgumentError,),
    ),
    "AutoGen keep_versions 0": (
        lambda _: _autogen_store(keep_versions=0),
        (InvalidArgumentError,),
    ),
    "AutoGen prune keep -1": (lambda _: _autogen_prune(-1), (InvalidArgumentError,)),
    "allowed_checkpoint_types string without ':'": (
        lambda _: FoundryCheckpointStorage("c", allowed_checkpoint_types=["nocolon"]),
        (InvalidArgumentError,),
    ),
    "allowed_checkpoint_types entry neither class nor string": (
        lambda _: FoundryCheckpointStorage("c", allowed_checkpoint_types=[3.5]),  # type: ignore[list-item]
        (InvalidArgumentError, TypeError),
    ),
    "copy URI with an unknown scheme": (lambda _: _copy_uri("mysql:db"), (InvalidArgumentError,)),
    "copy URI without a target": (lambda _: _copy_uri("sqlite:"), (InvalidArgumentError,)),
    "copy from a SQLite file that does not exist": (
        _copy_missing_source,
        (InvalidArgumentError,),
    ),
    "explorer on a non-loopback host": (
        lambda _: _explorer_host("0.0.0.0"),
        (InvalidArgumentError,),
    ),
    "emulator --bind without '='": (lambda _: _emulator_bind("call-1"), (InvalidArgumentError,)),
    "MAF latest of no candidates": (lambda _: pick_latest([]), (InvalidArgumentError,)),
    "MAF pickle envelope that is not base64": (
        lambda _: _decode_value({"__pickled__": "!!", "__type__": "builtins:int"}, frozenset()),
        (CorruptPayloadError,),
    ),
    "MAF pickle envelope with non-string fields": (
        lambda _: _decode_value({"__pickled__": 1, "__type__": 2}, frozenset()),
        (CorruptPayloadError,),
    ),
    "MAF values nested too deep": (
        lambda _: _decode_value(_NESTED, frozenset()),
        (CorruptPayloadError,),
    ),
}


@pytest.mark.parametrize("case", list(_ARGUMENT_CASES))
def test_bad_arguments_raise_typed_errors(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSERVER_STATE_ROOT", str(tmp_path / "state"))
    monkeypatch.delenv("FOUNDRY_HOSTING_ENVIRONMENT", raising=False)
    monkeypatch.setenv("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    call, types = _ARGUMENT_CASES[case]
    with pytest.raises(types[0]) as caught:
        call(tmp_path)
    assert isinstance(caught.value, FoundryCheckpointError)
    for expected in types:
        assert isinstance(caught.value, expected), expected
    if isinstance(caught.value, InvalidArgumentError):
        assert isinstance(caught.value, ValueError)
    assert str(caught.value)


@pytest.mark.parametrize("option", [{"item_ttl_seconds": 0}, {"local_backend": "nope"}])
def test_option_values_are_arguments_not_identifiers(option: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        FoundryCheckpointer(**option)
    assert not isinstance(caught.value, InvalidIdentifierError)


def test_an_ordinary_user_id_with_inner_spaces_is_fine(store_env: Any) -> None:
    delegation = {"trusted_delegation": True} if store_env.mode == "hosted" else {}
    with _saver(store_env, user_id="Alice Smith", **delegation) as saver:
        _one_checkpoint(saver)
        assert saver.get_tuple(_config("t1")) is not None


_IDENTIFIER_CASES: dict[str, Callable[[FoundryCheckpointer], object]] = {
    "thread id, get_tuple": lambda s: s.get_tuple(_config(f"t{_LONE}")),
    "thread id, put": lambda s: _one_checkpoint(s, f"t{_LONE}"),
    "thread id, list": lambda s: list(s.list(_config(f"t{_LONE}"))),
    "thread id, delete_thread": lambda s: s.delete_thread(f"t{_LONE}"),
    "checkpoint id, get_tuple": lambda s: s.get_tuple(_config("t1", f"c{_LONE}")),
    "namespace, get_tuple": lambda s: s.get_tuple(
        {"configurable": {"thread_id": "t1", "checkpoint_ns": f"n{_LONE}"}}
    ),
    "namespace, put": lambda s: s.put(
        {"configurable": {"thread_id": "t1", "checkpoint_ns": f"n{_LONE}"}},
        empty_checkpoint(),
        {"source": "loop", "step": 1},
        {},
    ),
    "task id, put_writes": lambda s: s.put_writes(_one_checkpoint(s), [("n", 2)], f"k{_LONE}"),
}


@pytest.mark.parametrize("case", list(_IDENTIFIER_CASES))
def test_identifiers_with_lone_surrogates_are_refused(store_env: Any, case: str) -> None:
    with _saver(store_env) as saver, pytest.raises(InvalidIdentifierError):
        _IDENTIFIER_CASES[case](saver)


async def test_maf_context_id_with_a_lone_surrogate_is_refused(store_env: Any) -> None:
    with pytest.raises(InvalidIdentifierError):
        FoundryCheckpointStorage(f"c{_LONE}", **store_env.kwargs())


_RECORD_CASES: dict[str, dict[str, Any]] = {
    "checkpoint that is not a mapping": {"checkpoint": ("msgpack", b"\x93\x01\x02\x03")},
    "metadata that is not a mapping": {"metadata": ("msgpack", b"\xa3abc")},
    "malformed msgpack": {"checkpoint": ("msgpack", b"\xc1\xc1")},
    "unknown serializer type": {"metadata": ("yaml", b"a: 1")},
    "pickle value (no pickle fallback)": {"checkpoint": ("pickle", b"\x80\x04N.")},
    "truncated msgpack": {"metadata": ("msgpack", b"\x85\xa1a")},
}


@pytest.mark.parametrize("case", list(_RECORD_CASES))
def test_bad_records_are_corrupt_payloads(store_env: Any, case: str) -> None:
    with _saver(store_env) as saver:
        config = _one_checkpoint(saver)
        _replace_record(saver, config, **_RECORD_CASES[case])
        with pytest.raises(CorruptPayloadError):
            saver.get_tuple(config)
        with pytest.raises(CorruptPayloadError):
            saver.get_tuple(_config("t1"))
        with pytest.raises(CorruptPayloadError):
            list(saver.list(_config("t1")))


async def test_maf_nesting_too_deep_is_a_corrupt_payload(store_env: Any) -> None:
    from agent_framework import WorkflowCheckpoint

    async with FoundryCheckpointStorage("c", **store_env.kwargs()) as storage:
        checkpoint = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h")
        cid = checkpoint.checkpoint_id
        tags, extra = checkpoint_tags(cid, "wf", checkpoint.timestamp, None)
        deep = encode_payload(checkpoint).replace(
            b'"state":{}', b'"state":' + b"[" * 100_000 + b"]" * 100_000
        )
        assert deep != encode_payload(checkpoint)
        await storage._run(storage._items.write(cid, deep, tags, extra))
        with pytest.raises(CorruptPayloadError):
            await storage.load(cid)
        with pytest.raises(CorruptPayloadError):
            await storage.load_with_hash(cid)
