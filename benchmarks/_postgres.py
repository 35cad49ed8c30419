"""A throw-away local PostgreSQL server for the AsyncPostgresSaver anchor.

The server is Debian's ``postgresql`` package (``initdb``/``pg_ctl``), started in a fresh
temporary data directory, listening on 127.0.0.1 only at a free port with ``trust``
authentication, and stopped (and its directory removed) when the context exits. PostgreSQL
refuses to run as root, so as root it runs as the ``postgres`` system user through
``runuser``. Settings are the package defaults (``fsync=on``, ``synchronous_commit=on``).

Example:
    >>> with LocalPostgres.start() as pg:  # doctest: +SKIP
    ...     print(pg.dsn)
    postgresql://postgres@127.0.0.1:54321/postgres
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["LocalPostgres", "PostgresUnavailable", "find_bin_dir", "install_postgres"]

_START_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """No local PostgreSQL server could be had; the message says why."""


def find_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (PATH first, then Debian's layout)."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(os.path.realpath(initdb)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def install_postgres() -> str:
    """Install Debian's ``postgresql`` with apt-get (root only); returns what happened."""
    if find_bin_dir() is not None:
        return "already installed"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "not installed (apt-get as root is not available here)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "postgresql"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"apt-get failed: {' '.join(cmd)}: {done.stderr.strip()[-300:]}"
    return "installed with apt-get"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LocalPostgres:
    """A PostgreSQL server in a temporary directory; use :meth:`start` as a context manager."""

    def __init__(self, bin_dir: Path, workdir: Path, port: int, run_as: str | None) -> None:
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.port = port
        self.run_as = run_as
        self.version = ""

    @property
    def datadir(self) -> Path:
        """The cluster's data directory."""
        return self.workdir / "data"

    @property
    def dsn(self) -> str:
        """A libpq connection string for the ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls) -> LocalPostgres:
        """Create a cluster and start it; raises :class:`PostgresUnavailable` when it cannot."""
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise PostgresUnavailable(
                "PostgreSQL is not installed (no initdb/pg_ctl); on Debian: apt-get install -y "
                "postgresql, or run the benchmarks with --install-postgres"
            )
        run_as: str | None = None
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root without runuser to drop privileges")
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresUnavailable("running as root and no 'postgres' user exists") from exc
            run_as = "postgres"
        workdir = Path(tempfile.mkdtemp(prefix="foundry-bench-pg-"))
        server = cls(bin_dir, workdir, _free_port(), run_as)
        try:
            server._init_and_start()
        except BaseException:
            server.stop()
            raise
        return server

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as is None:
            return list(args)
        return ["runuser", "-u", self.run_as, "--", *args]

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            self._cmd(*args), capture_output=True, text=True, check=False, cwd=self.workdir
        )
        if done.returncode != 0:
            raise PostgresUnavailable(
                f"{Path(args[0]).name} failed ({done.returncode}): {done.stderr.strip()[-400:]}"
            )
        return done.stdout

    def _init_and_start(self) -> None:
        if self.run_as is not None:
            shutil.chown(self.workdir, user=self.run_as, group=None)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.workdir}"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.workdir / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            str(_START_TIMEOUT_S),
            "start",
        )
        self.version = self._run(str(self.bin_dir / "pg_ctl"), "--version").strip()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise PostgresUnavailable("the server did not accept connections") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory; safe to call twice."""
        if self.datadir.exists() and (self.datadir / "postmaster.pid").exists():
            subprocess.run(
                self._cmd(
                    str(self.bin_dir / "pg_ctl"),
                    "-D",
                    str(self.datadir),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ),
                capture_output=True,
                check=False,
                cwd=self.workdir,
            )
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
