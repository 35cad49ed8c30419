"""docs/configuration.md states the real signatures: the constructors' and the methods' it names.

Each public constructor has a ``<!-- docs-test: signature -->`` block there. Its parameters
must be the real ones, in order, of the same kind (positional, keyword-only, ``**kwargs``), with
the stated defaults; the option table under it names only real parameters. A method written as
a call in a class's section (``prune(thread_ids, *, strategy=..., keep=1)``) names only real
parameters, as positional or keyword-only as they are, with the real defaults.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .conftest import ROOT

REFERENCE = ROOT / "docs" / "configuration.md"
_SIGNATURE_BLOCK = re.compile(r"<!-- docs-test: signature -->\n```python\n(.*?)```", re.S)
_SIGNATURE = re.compile(r"^([A-Za-z_][\w.]*)\((.*?)\)(?: -> [^\n]*)?$", re.M | re.S)
_CALL_SPAN = re.compile(r"`(?:[A-Z]\w*\.)?(\w+)\(([^`]*)\)`")
_OPTION_TABLE = re.compile(r"^\| option \| meaning \|\n\|[-|]+\|\n((?:\|.*\n)+)", re.M)
_OPTION_ROW = re.compile(r"^\| `(\*\*)?(\w+)` \|", re.M)
_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword-only",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


def _constructors() -> dict[str, Callable[..., Any]]:
    """Every public constructor the reference must state, by the name it is written with."""
    from foundry_checkpoint import AzureBlobSpill, FoundryCheckpointer, FoundryStore, LocalSpill
    from foundry_checkpoint.emulator import FoundryEmulator
    from foundry_checkpoint_autogen import AutoGenStateStore
    from foundry_checkpoint_maf import (
        FoundryCheckpointStorage,
        FoundryCheckpointStorageProvider,
        FoundryHistoryProvider,
        FoundrySessionStore,
    )

    return {
        "FoundryCheckpointer": FoundryCheckpointer,
        "FoundryStore": FoundryStore,
        "FoundryCheckpointStorage": FoundryCheckpointStorage,
        "FoundryCheckpointStorageProvider": FoundryCheckpointStorageProvider,
        "FoundryHistoryProvider": FoundryHistoryProvider,
        "FoundrySessionStore": FoundrySessionStore,
        "AutoGenStateStore": AutoGenStateStore,
        "LocalSpill": LocalSpill,
        "AzureBlobSpill": AzureBlobSpill,
        "FoundryEmulator": FoundryEmulator,
    }


@dataclass(frozen=True)
class Documented:
    """One parameter as the reference writes it."""

    name: str
    kind: str
    default: ast.expr | None


def _parameters(args: ast.arguments) -> list[Documented]:
    out: list[Documented] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    out += [Documented(a.arg, "positional", d) for a, d in zip(positional, defaults, strict=True)]
    if args.vararg is not None:
        out.append(Documented(args.vararg.arg, "*args", None))
    keyword_only = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    out += [Documented(a.arg, "keyword-only", d) for a, d in keyword_only]
    if args.kwarg is not None:
        out.append(Documented(args.kwarg.arg, "**kwargs", None))
    return out


def _as_function(name: str, params: str) -> ast.FunctionDef:
    """``name(params)`` as written in the reference, parsed as a ``def``."""
    params = re.sub(r"#[^\n]*", "", params)  # comments
    try:
        tree = ast.parse(f"def {name.replace('.', '__')}({params}): ...")
    except SyntaxError as exc:
        raise AssertionError(f"`{name}({params})` is not a signature") from exc
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _signature_blocks() -> Iterator[tuple[str, ast.FunctionDef]]:
    text = REFERENCE.read_text(encoding="utf-8")
    for block in _SIGNATURE_BLOCK.findall(text):
        for match in _SIGNATURE.finditer(block):
            yield match.group(1), _as_function(match.group(1), match.group(2))


def _sections() -> dict[str, str]:
    text = REFERENCE.read_text(encoding="utf-8")
    return {
        part.split("\n", 1)[0].strip(): part for part in re.split(r"^## ", text, flags=re.M)[1:]
    }


def _module_globals(target: Callable[..., Any]) -> dict[str, Any]:
    function = getattr(target, "__init__", target) if isinstance(target, type) else target
    module = sys.modules[getattr(function, "__module__", "") or ""]
    return vars(module)


def _check_default(where: str, doc: Documented, real: inspect.Parameter, scope: Any) -> None:
    if doc.default is None:
        assert real.default is inspect.Parameter.empty, f"{where}: the default is not stated"
        return
    assert real.default is not inspect.Parameter.empty, f"{where}: documented with a default"
    if isinstance(doc.default, ast.Constant) and doc.default.value is Ellipsis:
        return  # written as `name=...`: a default, not spelled out
    if isinstance(doc.default, ast.Name) and doc.default.id in scope:
        stated = scope[doc.default.id]  # a named constant, e.g. DEFAULT_ITEM_TTL_SECONDS
    elif isinstance(doc.default, ast.BinOp) and isinstance(doc.default.op, ast.BitOr):
        choices = [ast.literal_eval(side) for side in (doc.default.left, doc.default.right)]
        assert real.default in choices, f"{where}: default {real.default!r}, not {choices}"
        return
    else:
        stated = ast.literal_eval(doc.default)
    assert stated == real.default, f"{where}: default {real.default!r}, stated {stated!r}"


def _compare(where: str, documented: list[Documented], real: Callable[..., Any]) -> None:
    parameters = {
        name: p for name, p in inspect.signature(real).parameters.items() if name != "self"
    }
    scope = _module_globals(real)
    for doc in documented:
        assert doc.name in parameters, f"{where}: `{doc.name}` does not exist"
        param = parameters[doc.name]
        assert doc.kind == _KINDS[param.kind], (
            f"{where}: `{doc.name}` is {_KINDS[param.kind]}, written as {doc.kind}"
        )
        _check_default(f"{where}({doc.name})", doc, param, scope)


def test_every_public_constructor_is_stated_exactly() -> None:
    constructors = _constructors()
    stated = dict(_signature_blocks())
    assert set(constructors) <= set(stated), set(constructors) - set(stated)
    for name, target in constructors.items():
        documented = _parameters(stated[name].args)
        real = [p for p in inspect.signature(target).parameters if p != "self"]
        assert [d.name for d in documented] == real, f"{name}: parameters differ from the code"
        _compare(name, documented, target)


def test_every_option_row_names_a_real_parameter() -> None:
    constructors = _constructors()
    sections = _sections()
    checked = 0
    for heading, body in sections.items():
        if heading not in constructors:
            continue
        real = inspect.signature(constructors[heading]).parameters
        rows = "".join(_OPTION_TABLE.findall(body))
        for stars, name in _OPTION_ROW.findall(rows):
            assert name in real, f"{heading}: the option `{name}` does not exist"
            if stars:
                assert real[name].kind is inspect.Parameter.VAR_KEYWORD, f"{heading}: {name}"
            checked += 1
    assert checked >= 12, checked


def _methods_by_section() -> dict[str, type]:
    from foundry_checkpoint.spill import SpillStore

    classes = {k: v for k, v in _constructors().items() if isinstance(v, type)}
    return {**classes, "SpillStore": SpillStore}


def test_every_method_written_as_a_call_has_its_real_parameters() -> None:
    owners = _methods_by_section()
    sections = _sections()
    checked = 0
    for heading, body in sections.items():
        owner = owners.get(heading)
        if owner is None:
            continue
        for name, params in _CALL_SPAN.findall(body.replace("\n", " ")):
            method = getattr(owner, name, None)
            if method is None or not callable(method) or name == heading:
                continue
            function = _as_function(name, params)
            _compare(f"{heading}.{name}", _parameters(function.args), method)
            checked += 1
    assert checked >= 20, checked


def test_private_paths_are_not_given_to_users() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    private = re.findall(r"`(foundry_checkpoint\w*(?:\.\w+)*\._\w+[\w.]*)`", text)
    assert private == [], private
