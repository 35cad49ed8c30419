"""What every ``foundry-checkpoint`` command group shares: global options, one-line errors,
escaped tables and strict JSON output."""

from __future__ import annotations

import contextlib
import logging
import ssl
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from ..adapter import backend_names
from ..errors import FoundryCheckpointError
from ._format import cell, mask_secrets, strict_json, visible

if TYPE_CHECKING:
    from .._gc import GcReport
    from .._lifecycle import CoreOwner

JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON document instead of tables")]
DryRunFlag = Annotated[
    bool, typer.Option("--dry-run", help="report what would be deleted, delete nothing")
]
GraceOption = Annotated[
    float,
    typer.Option(
        "--grace",
        min=0,
        help="seconds: only blobs not modified for this long are taken (default one day)",
    ),
]
"""The ``--json`` flag every command accepts after its name (as well as before it)."""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _click_error_base() -> type[Exception]:
    """The ``ClickException`` class typer uses (its own copy of click, or click itself)."""
    for klass in typer.BadParameter.__mro__:
        if klass.__name__ == "ClickException" and issubclass(klass, Exception):
            return klass
    return Exception  # pragma: no cover - every typer release has one


_ClickError = _click_error_base()


class OneLineErrors(TyperGroup):
    """A command group whose usage errors are one ``error: ...`` line (exit 2)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            result = super().main(
                args,
                prog_name or "foundry-checkpoint",
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except _ClickError as exc:
            message = exc.format_message()  # type: ignore[attr-defined]
            typer.echo(f"error: {visible(mask_secrets(message))}", err=True)
            code = int(getattr(exc, "exit_code", EXIT_USAGE))
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            code = EXIT_FAILED
        else:
            code = result if isinstance(result, int) else EXIT_OK
        if standalone_mode:
            raise SystemExit(code)
        return code


def local_backend_option(value: str) -> str:
    """``--local-backend``: the name of a backend registered when the command line is parsed.

    The names come from the registry (``foundry_checkpoint.adapter.backend_names``), not from a
    list of the CLI's own, so a backend registered (``register_backend``) before ``main()``
    runs is a choice as well.

    Args:
        value: The name given.

    Returns:
        ``value``.

    Raises:
        typer.BadParameter: No backend is registered under ``value`` (a usage error, exit 2).

    Example:
        >>> local_backend_option("sdk")
        'sdk'
        >>> try:
        ...     local_backend_option("nope")
        ... except typer.BadParameter as exc:
        ...     print(exc)
        'nope' is not a registered backend: choose 'sqlite', 'sdk'...
    """
    names = backend_names()
    if value not in names:
        raise typer.BadParameter(
            f"{value!r} is not a registered backend: choose " + ", ".join(map(repr, names))
        )
    return value


def local_backend_names(incomplete: str) -> list[str]:
    """The registered backend names starting with ``incomplete`` (shell completion).

    Example:
        >>> local_backend_names("s")
        ['sqlite', 'sdk']
    """
    return [name for name in backend_names() if name.startswith(incomplete)]


LocalBackendOption = Annotated[
    str,
    typer.Option(
        "--local-backend",
        metavar="NAME",
        parser=local_backend_option,
        autocompletion=local_backend_names,
        help="local mode: 'sqlite' (embedded store, default), 'sdk' (the SDK's files) or "
        "another registered backend",
    ),
]
"""The ``--local-backend`` option of the root command (see :func:`local_backend_option`)."""


@dataclass
class Options:
    """The global options (before the command); ``prefix`` None means the group's default."""

    prefix: str | None
    json: bool
    endpoint: str | None
    ca_file: Path | None
    user_id: str | None
    emulator_user: str | None
    local_backend: str
    trusted_delegation: bool = False

    def store_kwargs(self, prefix: str) -> dict[str, Any]:
        """The keyword arguments of a checkpointer or storage for these options."""
        kwargs: dict[str, Any] = {"store_prefix": prefix}
        if self.endpoint:
            kwargs["endpoint"] = self.endpoint
        if self.user_id:
            kwargs["user_id"] = self.user_id
            kwargs["trusted_delegation"] = self.trusted_delegation
        if self.ca_file is not None:
            kwargs["connection_verify"] = str(self.ca_file)
        if self.emulator_user:
            from ..emulator import EmulatorCredential

            kwargs["credential"] = EmulatorCredential(self.emulator_user)
        kwargs["local_backend"] = self.local_backend
        return kwargs


def options(ctx: typer.Context, json_out: bool = False) -> Options:
    """The global options, with ``--json`` also set when given after the command."""
    found = ctx.find_object(Options)
    if found is None:  # pragma: no cover - the root callback always sets it
        raise RuntimeError("internal: global options missing")
    if json_out:
        found.json = True
    return found


#: ``--verbose``: library log lines stay on and a failure prints its traceback first.
_verbose = False

#: An error message longer than this is cut (the rest is behind ``--verbose``).
MAX_ERROR_CHARS = 300


class SafeLogLines(logging.Handler):
    """Log lines on stderr as the CLI prints its own: every line escaped (a stored id in a
    message, or a traceback quoting a stored value, never drives the terminal) and with DSN
    passwords masked. The CLI installs it on the root logger when nothing else handles logging,
    so warnings of this package (a checkpoint refused as tampered names it) and ``--verbose``'s
    library lines and their tracebacks go through it instead of Python's bare last resort.

    Example:
        >>> record = logging.LogRecord(
        ...     "x", logging.WARNING, "f", 1, "id %s", ("t\x1b]0;owned\x07",), None)
        >>> SafeLogLines().format(record)
        'WARNING x: id t\\\\x1b]0;owned\\\\x07'
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return "\n".join(visible(mask_secrets(line)) for line in text.splitlines())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")  # the stderr of now (tests swap it)
        except Exception:  # a log line must never fail the command
            self.handleError(record)


def configure_output(verbose: bool) -> None:
    """Keep stderr to the command's own lines unless ``--verbose``; log lines escaped.

    The SDK logs expected 404/409 answers at WARNING and transport failures with their
    tracebacks at ERROR, and azure-identity logs every credential it tried: the command reports
    a real failure itself, on one line. ``--verbose`` leaves the libraries' logging as it is
    and prints the traceback of a failure before its ``error:`` line. Whatever is logged goes
    through :class:`SafeLogLines` unless the process configured logging itself.

    Example:
        >>> configure_output(verbose=False)
        >>> logging.getLogger("azure").level == logging.CRITICAL
        True
    """
    global _verbose
    _verbose = verbose
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(SafeLogLines())
    level = logging.WARNING if verbose else logging.CRITICAL
    logging.getLogger("azure").setLevel(level)
    if not verbose:
        logging.getLogger("azure.ai.agentserver.core").setLevel(logging.CRITICAL)


def describe(exc: BaseException) -> str:
    """What to print for an unexpected failure: what went wrong and what to do, in one line.

    Example:
        >>> describe(RuntimeError("first line\\nsecond line"))
        'RuntimeError: first line second line'
    """
    from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError

    text = " ".join(str(exc).split()) or "(no message)"
    if isinstance(exc, ClientAuthenticationError):
        first = text.split(". ")[0].rstrip(".")
        return (
            f"ClientAuthenticationError: {first}. Sign in (az login), run with a managed "
            "identity, or pass --emulator-user against the emulator; --verbose shows what "
            "each credential said"
        )
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, ServiceRequestError) and (
        any(isinstance(e, ssl.SSLCertVerificationError) for e in chain)
        or "CERTIFICATE_VERIFY_FAILED" in text
    ):
        messages = [getattr(e, "verify_message", None) for e in chain]
        reason = next((m for m in messages if isinstance(m, str) and m), "verify failed")
        return (
            "ServiceRequestError: the endpoint's TLS certificate is not trusted "
            f"(certificate {reason}); "
            "pass --ca-file with the CA that signed it (the emulator prints its ca_file)"
        )
    message = f"{type(exc).__name__}: {text}"
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "… (--verbose shows all)"
    return message


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print one ``error: ...`` line (escaped, secrets masked) on stderr and exit."""
    typer.echo(f"error: {visible(mask_secrets(message))}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def failures(install_hint: str = "cli,langgraph") -> Iterator[None]:
    """Turn every failure into one ``error:`` line and exit status 1."""
    try:
        yield
    except (typer.Exit, typer.Abort, _ClickError):
        raise
    except FoundryCheckpointError as exc:
        fail(str(exc))
    except ImportError as exc:
        fail(f"{exc} (install 'foundry-checkpoint[{install_hint}]')")
    except Exception as exc:
        if _verbose:
            for line in traceback_lines(exc):
                typer.echo(line, err=True)
        fail(describe(exc))


def traceback_lines(exc: BaseException) -> list[str]:
    """The traceback of ``exc`` as ``--verbose`` prints it: each line escaped (a stored value
    quoted in a message never drives the terminal) and with DSN passwords masked, like the
    ``error:`` line.

    Example:
        >>> try:
        ...     raise ValueError("postgresql://app:s3cret@db/x \x1b]0;owned\x07")
        ... except ValueError as exc:
        ...     traceback_lines(exc)[-1]
        'ValueError: postgresql://app:***@db/x \\\\x1b]0;owned\\\\x07'
    """
    text = "".join(traceback.format_exception(exc))
    return [visible(mask_secrets(line)) for line in text.splitlines()]


def backend(owner: CoreOwner) -> dict[str, Any]:
    """The ``backend`` object of every JSON document: kind, location, prefix, spill."""
    return {
        "kind": owner.kind,
        "location": owner.location,
        "store_prefix": owner.store_prefix,
        "spill": owner.spill_location,
    }


def console() -> Console:
    """A console for human output (wide when piped: ids are never cut)."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = max(out.width, 200)
    return out


def header(out: Console, info: dict[str, Any]) -> None:
    """The first line of human output: which backend, where its data lives."""
    spill = info["spill"] or "none"
    line = (
        f"backend {info['kind']} · data {info['location']} · "
        f"prefix {info['store_prefix']} · spill {spill}"
    )
    out.print(cell(line), style="dim", soft_wrap=True)


def say(out: Console, text: str) -> None:
    """Print one line that may hold stored data: escaped, never read as markup."""
    out.print(cell(text), soft_wrap=True)


def row(table: Table, *values: object) -> None:
    """Add a row whose every cell is escaped text (stored data never drives the terminal)."""
    table.add_row(*(cell(value) for value in values))


_ID_COLUMNS = frozenset(
    {"thread", "checkpoint", "latest checkpoint", "parent", "previous", "task", "ts", "context"}
)


def table(*columns: str, title: object = None) -> Table:
    """A table whose id columns never wrap; its ``title`` (which may hold stored data, such as
    a workflow or state name) is shown like a cell: escaped, never read as markup."""
    out = Table(title=None if title is None else Text(visible(title), style="table.title"))
    for column in columns:
        out.add_column(column, no_wrap=column in _ID_COLUMNS)
    return out


def gc_report(
    opts: Options, info: dict[str, Any], report: GcReport, *, scope: str, grace: float
) -> None:
    """Print what ``gc`` did (JSON with ``--json``); ``scope`` names the scopes it scanned
    (``"thread"``, ``"context"``)."""
    data = {
        "backend": info,
        "dry_run": report.dry_run,
        f"scanned_{scope}s": report.scanned_scopes,
        "referenced": report.referenced,
        "kept_recent": report.kept_recent,
        "deleted": [{"namespace": ns, "digest": digest} for ns, digest in report.deleted],
        "unattributed": report.unattributed,
    }
    if opts.json:
        emit_json(data)
        return
    out = console()
    header(out, info)
    if info["spill"] is None:
        out.print("no spill store is configured: nothing to collect")
        return
    verb = "would delete" if report.dry_run else "deleted"
    out.print(
        f"{verb} {len(report.deleted)} orphaned blob(s) in {report.scanned_scopes} {scope}(s); "
        f"{report.referenced} referenced, {report.kept_recent} kept (younger than {grace:g} s)"
    )
    for ns, digest in report.deleted:
        say(out, f"  {ns}/{digest}")
    if report.unattributed:
        out.print(
            f"{len(report.unattributed)} namespace(s) under the prefix belong to no {scope} of "
            f"yours (another user's, or a deleted {scope}'s); left alone"
        )


def emit_json(data: Any) -> None:
    """Print ``data`` as strict JSON (no NaN or infinities)."""
    typer.echo(strict_json(data))
