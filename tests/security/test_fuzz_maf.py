"""Seeded fuzzing of the MAF checkpoint decoder with hostile pickles, under an audit hook.

:data:`FUZZ_CASES` streams come from a seeded generator: calls of dangerous globals
(``builtins``, ``os``, ``subprocess``, ``shutil``, ``copyreg``, ``functools``, ``operator``,
``importlib``, pydantic's metaclass, framework classes and functions), ``getattr`` chains,
``NEWOBJ``/``NEWOBJ_EX``/``INST``/``OBJ`` around admitted classes, ``type()`` of a model
class, ``BUILD`` on classes, enum members and values, memo and frame tricks, marks and stack
underflows, persistent ids, the extension registry, protocol-5 out-of-band buffers, modules
never imported, nesting around the limit, truncated streams and random mutations of valid
pickles. For every case the
audit hook must see no import, ``exec``, ``compile``, ``os.*``, ``subprocess.*``, ``shutil.*``,
file write or ``pickle.find_class``; the decoder must return a value or raise one of its
typed refusals; no class may change; the traced memory peak stays bounded. The counts are
printed past pytest's output capture, so every run shows them.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import pickle
import random
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from agent_framework import FileCheckpointStorage, Message, WorkflowCheckpoint

from foundry_checkpoint_maf import CheckpointTamperedError, CheckpointTypeBlockedError
from foundry_checkpoint_maf._payload import CheckpointDecodeError, decode_payload, encode_payload
from foundry_checkpoint_maf._unpickle import Refusal, loads

from ._audit import watching
from ._gadgets import pickle_envelope, touch_expression

FUZZ_CASES: Final = 12_000
FUZZ_SEED: Final = 20_251_201
# a sample of the cases also goes through the public decoder (typed public errors)
PUBLIC_EVERY: Final = 40
MEMORY_LIMIT: Final = 64 * 2**20

pytestmark = pytest.mark.slow


class Shade(enum.Enum):
    """An enum of the application's own (allowed)."""

    DARK = 1
    LIGHT = "light"


@dataclass
class Mine:
    """A dataclass of the application's own (allowed)."""

    n: int
    tags: list[str]


_ALLOWED: Final = frozenset(
    f"{c.__module__}:{c.__qualname__}" for c in (Shade, Mine)
)  # what the fuzzed storage was told about


def _key(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


def _framework_classes() -> list[type]:
    from agent_framework import Content, WorkflowEvent, WorkflowRunState
    from agent_framework._workflows._runner_context import WorkflowMessage
    from agent_framework.security import InspectVariableInput

    return [
        FileCheckpointStorage, Message, Content, WorkflowEvent, WorkflowRunState,
        WorkflowCheckpoint, WorkflowMessage, InspectVariableInput,
    ]  # fmt: skip


# (module, name) pairs a hostile stream names: callables, classes, metaclasses, modules never
# imported, dotted paths, re-exports
_HOSTILE: Final = [
    ("builtins", "eval"), ("builtins", "exec"), ("builtins", "compile"), ("builtins", "open"),
    ("builtins", "__import__"), ("builtins", "getattr"), ("builtins", "setattr"),
    ("builtins", "type"), ("builtins", "object"), ("builtins", "vars"), ("builtins", "globals"),
    ("builtins", "print"), ("builtins", "list"), ("builtins", "dict"), ("builtins", "str"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"),
    ("builtins", "bytes"), ("builtins", "complex"), ("builtins", "range"), ("builtins", "slice"),
    ("builtins", "memoryview"), ("builtins", "super"), ("builtins", "property"),
    ("builtins", "object.__subclasses__"), ("__builtin__", "eval"), ("__builtin__", "getattr"),
    ("os", "system"), ("os", "popen"), ("os", "mkdir"), ("os", "remove"), ("os", "path.join"),
    ("posix", "system"), ("subprocess", "Popen"), ("subprocess", "getoutput"),
    ("subprocess", "run"), ("shutil", "rmtree"), ("importlib", "import_module"),
    ("copyreg", "_reconstructor"), ("copyreg", "__newobj__"), ("copyreg", "__newobj_ex__"),
    ("copyreg", "_reduce_ex"), ("copy_reg", "_reconstructor"), ("functools", "partial"),
    ("functools", "reduce"), ("operator", "attrgetter"), ("operator", "methodcaller"),
    ("operator", "itemgetter"), ("pickle", "loads"), ("codecs", "decode"),
    ("_codecs", "encode"), ("types", "FunctionType"), ("types", "CodeType"),
    ("sys", "modules"), ("pydantic", "TypeAdapter"), ("pydantic.type_adapter", "TypeAdapter"),
    ("pydantic._internal._model_construction", "ModelMetaclass"), ("pydantic.main", "BaseModel"),
    ("enum", "EnumMeta"), ("enum", "Enum"), ("abc", "ABCMeta"), ("typing", "_ProtocolMeta"),
    ("agent_framework._tools", "TypeAdapter"), ("agent_framework", "Message"),
    ("agent_framework._workflows._checkpoint_encoding", "decode_checkpoint_value"),
    ("agent_framework._workflows._checkpoint_encoding", "_RestrictedUnpickler"),
    ("agent_framework._workflows._checkpoint_encoding", "pickle"),
    ("agent_framework._workflows._events", "WorkflowEvent.__init__"),
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "deque"),
    ("collections", "Counter"), ("datetime", "datetime"), ("datetime", "timezone"),
    ("datetime", "timedelta"), ("decimal", "Decimal"), ("uuid", "UUID"),
    ("this", "s"), ("fuzz_never_imported", "Thing"), ("agent_framework.not_a_module", "X"),
    ("openai.types.chat", "ChatCompletion"), ("tests.security.test_fuzz_maf", "Shade"),
    ("tests.security.test_fuzz_maf", "Mine"), ("tests.security.test_fuzz_maf", "_key"),
]  # fmt: skip
_NAMES: Final = [
    "__subclasses__", "__init__", "__globals__", "__builtins__", "mro", "__class__", "__base__",
    "__dict__", "system", "IDLE", "DARK", "EXECUTOR", "model_validate", "from_dict",
    "__reduce_ex__", "__setstate__", "__new__", "_value2member_map_", "x", "",
]  # fmt: skip


class _Emit:
    """Opcodes as bytes (the subset an attacker needs, plus the raw byte of any opcode)."""

    @staticmethod
    def text(value: str) -> bytes:
        data = value.encode("utf-8", "surrogatepass")
        if len(data) < 256:
            return b"\x8c" + bytes([len(data)]) + data
        return b"X" + len(data).to_bytes(4, "little") + data

    @staticmethod
    def integer(value: int) -> bytes:
        if 0 <= value < 256:
            return b"K" + bytes([value])
        if -(2**31) <= value < 2**31:
            return b"J" + value.to_bytes(4, "little", signed=True)
        data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        return b"\x8a" + bytes([len(data)]) + data

    @staticmethod
    def global_(module: str, name: str, stacked: bool) -> bytes:
        if stacked:
            return _Emit.text(module) + _Emit.text(name) + b"\x93"
        return f"c{module}\n{name}\n".encode("utf-8", "surrogatepass")


class HostileGenerator:
    """Seeded streams: each strategy returns a complete (or deliberately broken) pickle."""

    def __init__(self, seed: int, marker: Path) -> None:
        self.rng = random.Random(seed)
        self.marker = marker
        self.classes = [*_framework_classes(), Shade, Mine]
        self.pool = _HOSTILE + [_key(c) for c in self.classes]
        self.valid = [pickle.dumps(v, p) for v in _legit_values() for p in range(2, 6)]
        self.strategies: list[Callable[[], bytes]] = [
            self.call, self.call, self.getattr_chain, self.build_on, self.metaclass,
            self.memo_trick, self.frame_trick, self.buffers_and_ids, self.truncated,
            self.mutated, self.mutated, self.soup, self.stack_trick, self.deep,
        ]  # fmt: skip

    def head(self) -> bytes:
        proto = self.rng.choice([0, 2, 3, 4, 5])
        return b"" if proto == 0 else b"\x80" + bytes([proto])

    def global_(self) -> bytes:
        module, name = self.rng.choice(self.pool)
        return _Emit.global_(module, name, self.rng.random() < 0.5)

    def arg(self, depth: int = 0) -> bytes:
        rng = self.rng
        pick = rng.randrange(12 if depth < 2 else 8)
        if pick == 0:
            return _Emit.text(rng.choice([str(self.marker), f"touch {self.marker}", "x"]))
        if pick == 1:
            return _Emit.text(touch_expression(self.marker) + rng.choice(["", " or int"]))
        if pick == 2:
            return _Emit.text(rng.choice(_NAMES))
        if pick == 3:
            return _Emit.integer(rng.choice([0, 1, -1, 7, 2**31, 2**64, -(2**70)]))
        if pick == 4:
            return b"N"
        if pick == 5:
            return b"C\x03abc" if rng.random() < 0.5 else b"\x96\x01\x00\x00\x00\x00\x00\x00\x00z"
        if pick == 6:
            return b"}" if rng.random() < 0.5 else b")"
        if pick == 7:
            return self.global_()
        if pick == 8:
            return b"(" + b"".join(self.arg(depth + 1) for _ in range(rng.randrange(4))) + b"t"
        if pick == 9:
            items = b"".join(self.arg(depth + 1) + self.arg(depth + 1) for _ in range(2))
            return b"}(" + items + b"u"
        if pick == 10:
            return b"](" + b"".join(self.arg(depth + 1) for _ in range(3)) + b"e"
        return self.call_expr(depth + 1)

    def args_tuple(self) -> bytes:
        count = self.rng.randrange(4)
        return b"(" + b"".join(self.arg(1) for _ in range(count)) + b"t"

    def call_expr(self, depth: int = 0) -> bytes:
        rng = self.rng
        how = rng.randrange(6)
        if how == 0:
            return self.global_() + self.args_tuple() + b"R"
        if how == 1:
            return self.global_() + self.args_tuple() + b"\x81"
        if how == 2:
            return self.global_() + self.args_tuple() + self.arg(depth + 1) + b"\x92"
        if how == 3:
            module, name = rng.choice(self.pool)
            return b"(" + self.arg(depth + 1) + f"i{module}\n{name}\n".encode()
        if how == 4:
            return b"(" + self.global_() + self.arg(depth + 1) + b"o"
        return self.global_()

    def call(self) -> bytes:
        body = self.call_expr()
        if self.rng.random() < 0.4:
            body += self.arg() + b"b"
        if self.rng.random() < 0.3:
            body += self.args_tuple() + b"R"
        return self.head() + body + b"."

    def getattr_chain(self) -> bytes:
        rng = self.rng
        stacked = rng.random() < 0.5
        owner = _Emit.global_(*rng.choice(self.pool), stacked)
        for _ in range(rng.randrange(1, 4)):
            owner = (
                _Emit.global_("builtins", "getattr", stacked)
                + owner
                + _Emit.text(rng.choice(_NAMES))
                + b"\x86R"
            )
        if rng.random() < 0.6:
            owner += self.args_tuple() + b"R"
        return self.head() + owner + b"."

    def build_on(self) -> bytes:
        rng = self.rng
        target = rng.choice(
            [
                self.global_(),
                _Emit.global_("builtins", "getattr", True)
                + _Emit.global_(*_key(Shade), True)
                + _Emit.text("DARK")
                + b"\x86R",
                b"}",
                b"]",
                _Emit.text("text"),
                self.call_expr(),
            ]
        )
        attr = _Emit.text(rng.choice([*_NAMES, "planted"]))
        state = b"}" + attr + self.arg(1) + b"s"
        if rng.random() < 0.5:
            state = rng.choice([b"N", b"}"]) + state + b"\x86"
        tail = b"0}" + _Emit.text("n") + b"K\x01s" if rng.random() < 0.5 else b""
        return self.head() + target + state + b"b" + tail + b"."

    def metaclass(self) -> bytes:
        rng = self.rng
        model = _Emit.global_(*_key(rng.choice(self.classes)), True)
        meta = rng.choice(
            [
                _Emit.global_("builtins", "type", True) + model + b"\x85R",
                _Emit.global_("pydantic._internal._model_construction", "ModelMetaclass", True),
                _Emit.global_("enum", "EnumMeta", True),
                _Emit.global_("abc", "ABCMeta", True),
            ]
        )
        body = b"}" + _Emit.text("__annotations__") + b"}" + _Emit.text("x")
        body += _Emit.text(touch_expression(self.marker) + " or int") + b"ss"
        args = _Emit.text("Planted") + model + b"\x85" + body + b"\x87"
        call = rng.choice([b"\x81", b"R", b"}\x92"])
        return self.head() + meta + args + call + b"."

    def memo_trick(self) -> bytes:
        rng = self.rng
        out = self.head() + b"]"
        for _ in range(rng.randrange(1, 6)):
            index = rng.choice([0, 1, 2, 255, 2**16, 2**26, 2**32 - 1])
            op = rng.randrange(5)
            if op == 0:
                out += b"r" + index.to_bytes(4, "little")
            elif op == 1 and index < 256:
                out += b"q" + bytes([index])
            elif op == 2:
                out += b"j" + index.to_bytes(4, "little")
            elif op == 3:
                out += b"p" + str(index).encode() + b"\n"
            else:
                out += b"\x94" if rng.random() < 0.5 else b"g" + str(index).encode() + b"\n"
        return out + rng.choice([b".", b"0.", b"a."])

    def frame_trick(self) -> bytes:
        rng = self.rng
        valid = rng.choice(self.valid)
        size = rng.choice([0, 1, 8, len(valid), 2**40, 2**63 - 1])
        frame = b"\x95" + size.to_bytes(8, "little")
        cut = rng.randrange(2, max(3, len(valid)))
        where = rng.choice([2, cut])
        return valid[:where] + frame + valid[where:]

    def buffers_and_ids(self) -> bytes:
        rng = self.rng
        op = rng.choice(
            [b"\x97", b"C\x01x\x98", b"\x97\x98", b"P1\n", b"N" + b"Q", b"\x82\x01",
             b"\x83\x01\x00", b"\x84\x01\x00\x00\x00", b"\x96\x01\x00\x00\x00\x00\x00\x00\x00z\x98"]
        )  # fmt: skip
        return b"\x80\x05" + op + b"."

    def truncated(self) -> bytes:
        valid = self.rng.choice(self.valid)
        return valid[: self.rng.randrange(len(valid))]

    def mutated(self) -> bytes:
        rng = self.rng
        data = bytearray(rng.choice(self.valid))
        for _ in range(rng.randrange(1, 5)):
            where = rng.randrange(len(data))
            choice = rng.randrange(4)
            if choice == 0:
                data[where] = rng.randrange(256)
            elif choice == 1:
                del data[where]
            elif choice == 2:
                data[where:where] = bytes([rng.randrange(256)])
            else:
                data[where:where] = rng.choice(
                    [self.call_expr(), self.global_(), b"b", b"R", b"\x81", b"0", b"(", b"t"]
                )
            if not data:
                break
        return bytes(data)

    def soup(self) -> bytes:
        rng = self.rng
        parts = [self.head()]
        for _ in range(rng.randrange(1, 30)):
            parts.append(
                rng.choice(
                    [self.arg(1), b"(", b"t", b"R", b"\x81", b"b", b"s", b"u", b"a", b"e",
                     b"l", b"d", b"0", b"1", b"2", b"\x94", b"\x85", b"\x86", b"\x87",
                     b"\x8f", b"\x90", b"\x91", b"\x92", b"\x93", self.global_()]
                )
            )  # fmt: skip
        parts.append(b".")
        return b"".join(parts)

    def stack_trick(self) -> bytes:
        return self.head() + self.rng.choice(
            [b"1", b"0", b"2", b"t", b"u", b"e", b"(.", b"N(.", b"NN.", b"(N\x91}(u\x8f(\x90.",
             b"N]Na.", b"}N(u.", b"\x8f(N\x90\x91.", b"]\x85(a.", b"}(K\x01d.", b")(\x85e.",
             b"N(\x90.", b"(}K\x01s.", self.global_() + b"(K\x01a.", self.global_() + b"}(u."]
        ) + b"."  # fmt: skip

    def deep(self) -> bytes:
        """Nesting around the limit: lists in lists, tuples in tuples, chains through the memo."""
        rng = self.rng
        depth = rng.randrange(150, 300)
        kind = rng.randrange(3)
        if kind == 0:
            return self.head() + b"]" * depth + b"a" * (depth - 1) + b"."
        if kind == 1:
            return self.head() + b"(" * depth + b"t" * depth + b"."
        links = b"".join(b"]r" + i.to_bytes(4, "little") for i in range(depth))
        joins = b"".join(
            b"j" + i.to_bytes(4, "little") + b"j" + (i + 1).to_bytes(4, "little") + b"a0"
            for i in range(depth - 1)
        )
        return self.head() + links + b"0" * (depth - 1) + joins + b"."

    def case(self) -> bytes:
        return self.rng.choice(self.strategies)()


def _legit_values() -> list[Any]:
    return [
        {"a": [1, 2.5, None, True], "b": (b"x", "y")},
        Message(role="user", contents=["hi"]),
        Shade.DARK,
        Mine(3, ["x"]),
        collections.OrderedDict(a=1),
        collections.deque([1, 2], maxlen=4),
        collections.defaultdict(list, k=[1]),
        collections.Counter("aab"),
        datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        uuid.UUID(int=12345),
        decimal.Decimal("1.25"),
        frozenset({1, 2}),
        {1, 2, 3},  # ints: the same order whatever the hash seed
        bytearray(b"zz"),
        complex(1, 2),
    ]


def _snapshot(classes: list[type]) -> dict[str, dict[str, int]]:
    return {c.__qualname__: {k: id(v) for k, v in vars(c).items()} for c in classes}


def _report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Print ``line`` past pytest's capture, so the counts show in every run's output."""
    with capsys.disabled():
        print(f"\n{line}")


def test_hostile_pickles_never_run_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    generator = HostileGenerator(FUZZ_SEED, marker)
    classes = [*generator.classes, type(Message), FileCheckpointStorage]
    before = _snapshot(classes)
    modules_before = set(sys.modules)
    outcomes: collections.Counter[str] = collections.Counter()
    public: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    checkpoint = WorkflowCheckpoint(workflow_name="fuzz", graph_signature_hash="h")
    document = encode_payload(checkpoint).decode()
    started = time.perf_counter()
    tracemalloc.start()
    try:
        with watching() as seen:
            for number in range(FUZZ_CASES):
                data = generator.case()
                try:
                    loads(data, _ALLOWED)
                    outcomes["value"] += 1
                except Refusal as exc:
                    outcomes[type(exc).__name__] += 1
                except Exception as exc:  # never: every refusal is typed
                    failures.append(f"case {number}: {type(exc).__name__}: {exc} {data!r}")
                if number % PUBLIC_EVERY == 0:
                    public[_public_outcome(document, data, checkpoint.checkpoint_id)] += 1
                if seen:
                    failures.append(f"case {number} raised audit events {seen} for {data!r}")
                    seen.clear()
                if len(failures) > 5:
                    break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert failures == []
    assert not marker.exists()
    assert _snapshot(classes) == before  # no class gained, lost or replaced an attribute
    assert set(sys.modules) == modules_before
    assert peak < MEMORY_LIMIT, peak
    assert sum(outcomes.values()) == FUZZ_CASES
    # every kind of outcome happens: the generator reaches values and each kind of refusal
    assert {"value", "Tampered", "Blocked", "Damaged"} <= set(outcomes), outcomes
    _report(
        capsys,
        f"MAF decoder fuzz: {FUZZ_CASES} cases (seed {FUZZ_SEED}) in {elapsed:.1f} s, "
        f"peak {peak / 2**20:.1f} MiB: {outcomes['value']} values, refusals "
        + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if k != "value")
        + f"; through decode_payload: {dict(sorted(public.items()))}",
    )


def _public_outcome(document: str, data: bytes, checkpoint_id: str) -> str:
    """The public error class (or "value") of a checkpoint whose state holds ``data``."""
    import json

    doc = json.loads(document)
    doc["state"] = {"loot": pickle_envelope(data, "builtins:object")}
    payload = json.dumps(doc).encode()
    try:
        decode_payload(payload, allowed=_ALLOWED, checkpoint_id=checkpoint_id)
    except (CheckpointTamperedError, CheckpointTypeBlockedError, CheckpointDecodeError) as exc:
        return type(exc).__name__
    return "value"


def test_the_audit_hook_sees_what_a_decoder_must_not_do(tmp_path: Path) -> None:
    """The harness can fail: ``pickle.loads`` of a gadget is seen (and so is its import)."""
    from ._gadgets import global_call_pickle

    marker = tmp_path / "ran"
    with watching() as seen:
        pickle.loads(global_call_pickle("os", "system", f"touch {marker}"))
    events = {event for event, _ in seen}
    assert {"pickle.find_class", "os.system"} <= events, events
    ours = tmp_path / "ours"
    with watching() as seen, pytest.raises(Refusal):
        loads(global_call_pickle("os", "system", f"touch {ours}"), _ALLOWED)
    assert seen == [] and not ours.exists()
