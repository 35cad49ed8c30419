"""Run the code blocks of one page as a reader would, in order, in one process.

``python -m tests.samples._doc_runner PAGE RESULTS`` runs in a scratch directory (with a
``samples`` link to the repository's) and writes one JSON record per block to ``RESULTS``.
Python blocks share one namespace (a reader's session), with top-level ``await`` allowed; shell
blocks run in bash with the environment the page's ``export`` lines built; see _doc_blocks for
the markers.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport
    import tomli as tomllib

from . import _doc_setups
from ._doc_blocks import ROOT, Block, blocks, json_output, normalize, same_output

_MODULES = (
    "foundry_checkpoint",
    "foundry_checkpoint_maf",
    "foundry_checkpoint_autogen",
    "foundry_checkpoint.emulator",
    "foundry_checkpoint.spill",
)


class BlockFailed(Exception):
    """The block ran, but did not do or print what the page shows."""


class Page:
    """The state of a reader working through one page."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.env = dict(os.environ)
        self.last_output = ""
        self.substitutions: dict[str, str] = {}
        self.background: list[subprocess.Popen[str]] = []

    def text(self, block: Block) -> str:
        source = block.source
        for example, real in self.substitutions.items():
            source = source.replace(example, real)
        return source

    # --- python ---------------------------------------------------------------------------

    async def python(self, block: Block) -> None:
        for name in block.setups:
            done = getattr(_doc_setups, name.replace("-", "_"))(self.namespace)
            if inspect.isawaitable(done):
                await done
        code = compile(self.text(block), block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = eval(code, self.namespace)
            if inspect.isawaitable(result):
                await result
        self.last_output = out.getvalue()

    # --- shell ----------------------------------------------------------------------------

    def _bash(self, script: str) -> str:
        with tempfile.NamedTemporaryFile(suffix=".env", delete=False) as handle:
            env_file = handle.name
        try:
            done = subprocess.run(
                ["bash", "-c", f"set -eo pipefail\n{script}\nenv -0 > {shlex.quote(env_file)}"],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if done.returncode != 0:
                raise BlockFailed(f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}")
            raw = Path(env_file).read_bytes().decode()
            self.env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
            return done.stdout
        finally:
            os.unlink(env_file)

    async def shell(self, block: Block) -> None:
        for name in block.setups:
            done = getattr(_doc_setups, name.replace("-", "_"))(self.namespace)
            if inspect.isawaitable(done):
                await done
        text = self.text(block)
        if block.lang != "console":
            self.last_output = self._bash(text)
            return
        for command, expected in _console(text):
            actual = self._bash(command)
            self.last_output = actual
            if expected.strip() and not same_output(expected, actual):
                raise BlockFailed(_diff(command, expected, actual))

    def start(self, block: Block) -> None:
        """A console block that starts a server: compare what it prints, keep it running."""
        ((command, expected),) = _console(self.text(block))
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            env={**self.env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.background.append(process)
        wanted = expected.strip().splitlines()
        got: list[str] = []
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while len(got) < len(wanted) and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            got.append(line.rstrip("\n"))
        actual = "\n".join(got)
        if not same_output(expected, actual):
            raise BlockFailed(_diff(command, expected, actual))
        for shown, real in zip(wanted, got, strict=True):
            if ": " in shown and ": " in real:
                self.substitutions[shown.split(": ", 1)[1]] = real.split(": ", 1)[1]

    def stop(self) -> None:
        for process in self.background:
            process.terminate()
            process.wait(timeout=30)

    # --- expected outputs -----------------------------------------------------------------

    def output(self, block: Block) -> None:
        actual, expected = self.last_output, self.text(block)
        if block.kind == "output-of":
            actual = self._bash(block.options["output-of"])
        if block.lang == "console":
            ((command, expected),) = _console(expected)
            actual = self._bash(command)
        if block.kind == "json-output":
            problems = json_output(expected, actual)
            if problems:
                raise BlockFailed("\n".join(problems) + "\n" + actual)
        elif not same_output(expected, actual):
            raise BlockFailed(_diff(block.options.get("output-of", "above"), expected, actual))


def _console(text: str) -> list[tuple[str, str]]:
    """``$ command`` lines of a console block, each with the output lines shown below it."""
    pairs: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
        elif line.strip():
            raise BlockFailed(f"output before any $ command: {line!r}")
    return [(command, "\n".join(lines)) for command, lines in pairs]


def _diff(command: str, expected: str, actual: str) -> str:
    return (
        f"output of {command!r} differs\n--- page (normalized)\n{normalize(expected)}"
        f"--- real (normalized)\n{normalize(actual)}"
    )


# --- blocks that are checked, not run ---------------------------------------------------------


def check_signature(block: Block) -> None:
    """The page's signature has the real names, kinds and defaults, in order."""
    text = block.source
    name = text[: text.index("(")].strip()
    depth, end = 0, len(text)
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ")" and depth == 0:
            end = index
            break
    params = text[text.index("(") + 1 : end]
    shown = ast.parse(f"def f({params}): pass").body[0]
    assert isinstance(shown, ast.FunctionDef)
    target = next(
        getattr(module, name)
        for module in map(importlib.import_module, _MODULES)
        if hasattr(module, name)
    )
    real = inspect.signature(target)
    arguments = shown.args
    page: list[tuple[str, str, Any]] = []
    positional = arguments.posonlyargs + arguments.args
    for i, arg in enumerate(positional):
        default = (
            arguments.defaults[i - len(positional) + len(arguments.defaults)]
            if (i >= len(positional) - len(arguments.defaults))
            else None
        )
        page.append((arg.arg, "POSITIONAL_OR_KEYWORD", default))
    for arg, kw_default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        page.append((arg.arg, "KEYWORD_ONLY", kw_default))
    if arguments.kwarg is not None:
        page.append((arguments.kwarg.arg, "VAR_KEYWORD", None))
    names = [(p.name, p.kind.name) for p in real.parameters.values()]
    if [(n, k) for n, k, _ in page] != names:
        raise BlockFailed(f"{name}: the page shows {[n for n, _, _ in page]}, real {names}")
    module = vars(importlib.import_module(target.__module__))
    for param_name, _, default in page:
        if default is None:
            continue
        shown_value = eval(compile(ast.Expression(default), block.where, "eval"), module)
        real_value = real.parameters[param_name].default
        if shown_value != real_value:
            raise BlockFailed(f"{name}({param_name}=): page {shown_value!r}, real {real_value!r}")


def check_install(block: Block) -> None:
    """``pip install`` names real extras, ``make`` real targets; nothing else is in the block."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.MULTILINE))
    for raw in block.source.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        if words[:2] == ["pip", "install"]:
            for word in words[2:]:
                # the package by name, from a clone (".") or as the built wheel
                match = re.fullmatch(r"(?:foundry-checkpoint|\.|\S+\.whl)\[([\w,-]+)\]", word)
                for extra in match.group(1).split(",") if match else []:
                    if extra not in extras:
                        raise BlockFailed(f"no extra {extra!r} in pyproject.toml: {line}")
        elif words[0] == "make":
            for target in words[1:]:
                if target not in targets:
                    raise BlockFailed(f"no make target {target!r}: {line}")
        else:
            raise BlockFailed(f"not an install line (run it in a block of its own): {line}")


def check_syntax(block: Block) -> None:
    """A block that is not run still parses."""
    if block.lang in ("python", "py"):
        compile(block.source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return
    done = subprocess.run(
        ["bash", "-n"], input=block.source, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BlockFailed(done.stderr)


async def run_page(page: Path) -> list[dict[str, Any]]:
    """Every block of ``page``, in order: one record each (where, kind, ok, error)."""
    reader = Page()
    records: list[dict[str, Any]] = []
    try:
        for block in blocks(page):
            kind = block.kind
            record: dict[str, Any] = {"where": block.where, "kind": kind, "ok": True}
            records.append(record)
            started = time.perf_counter()
            try:
                if kind == "python":
                    await reader.python(block)
                elif kind == "shell":
                    await reader.shell(block)
                elif kind == "background":
                    reader.start(block)
                elif kind in ("output", "output-of", "json-output"):
                    reader.output(block)
                elif kind == "signature":
                    check_signature(block)
                elif kind == "install":
                    check_install(block)
                elif kind in ("slow", "azure", "requires"):
                    check_syntax(block)
                else:
                    raise BlockFailed(
                        f"a {block.lang or 'plain'} block with no docs-test marker: run it, "
                        "or mark what it is (see tests/samples/_doc_blocks.py)"
                    )
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                record["ok"] = False
                record["error"] = (
                    str(exc) if isinstance(exc, BlockFailed) else traceback.format_exc(limit=-8)
                )
            record["seconds"] = round(time.perf_counter() - started, 2)
    finally:
        reader.stop()
        await _doc_setups.close(reader.namespace)
    return records


def main() -> None:
    """``python -m tests.samples._doc_runner PAGE RESULTS``."""
    page, results = Path(sys.argv[1]), Path(sys.argv[2])
    records = asyncio.run(run_page(page))
    results.write_text(json.dumps(records), encoding="utf-8")


if __name__ == "__main__":
    main()
