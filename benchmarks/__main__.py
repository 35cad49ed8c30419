"""``python -m benchmarks``: run every section, one child process per unit, write RESULTS.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ._common import peak_rss_mb

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "RESULTS.md"
#: Where ``--quick`` and ``--only`` write unless ``--out`` says otherwise: the committed
#: RESULTS.md holds full runs only.
PARTIAL_OUT = REPO_ROOT / "benchmarks" / "RESULTS-partial.md"
_UNIT_TIMEOUT_S = 600

#: Sections in run order: (module, workload, subjects).
SECTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "engine": ("_store", "engine", ("engine",)),
    "sdk-store": ("_store", "sdk", ("sdk",)),
    "lg-chat": (
        "_langgraph",
        "chat",
        ("memory", "sqlite", "postgres", "fc-local", "fc-sdk", "fc-hosted"),
    ),
    "lg-chat-800": (
        "_langgraph",
        "chat",
        ("memory", "sqlite", "postgres", "fc-local", "fc-hosted"),
    ),
    "lg-growth": ("_langgraph", "growth", ("memory", "sqlite", "fc-local", "fc-sdk", "fc-hosted")),
    "lg-read": (
        "_langgraph",
        "read",
        ("memory", "sqlite", "postgres", "fc-local", "fc-sdk", "fc-hosted"),
    ),
    "lg-big": (
        "_langgraph",
        "big",
        ("memory", "sqlite", "postgres", "fc-local", "fc-sdk", "fc-hosted"),
    ),
    "maf-run": ("_maf", "run", ("memory", "file", "fc-local", "fc-sdk", "fc-hosted", "fh-hosted")),
    "maf-latest": (
        "_maf",
        "latest",
        ("memory", "file", "fc-local", "fc-sdk", "fc-hosted", "fh-hosted"),
    ),
    "hosted-threads": ("_threads", "threads", ("fc-hosted",)),
    "lg-memory": ("_memory", "store", ("memory", "sqlite", "postgres", "fs-local", "fs-hosted")),
    "lg-memory-search": (
        "_memory",
        "semantic",
        ("memory", "sqlite", "postgres", "fs-local", "fs-hosted"),
    ),
    "peers": (
        "_peers",
        "peers",
        ("lg-fc-hosted", "lg-lc-hosted", "maf-fc-hosted", "maf-fh-hosted"),
    ),
    "load": ("_load", "load", ("fc-hosted", "lc-hosted")),
    "roundtrips": (
        "_roundtrips",
        "roundtrips",
        (
            "lg-floor",
            "lg-fc-hosted",
            "lg-lc-hosted",
            "maf-floor",
            "maf-fc-hosted",
            "maf-fh-hosted",
            "ag-floor",
            "ag-fc-hosted",
        ),
    ),
    "maf-agents": (
        "_maf_agents",
        "turns",
        ("memory", "file", "fhp-local", "fhp-hosted", "fass-hosted", "fss-hosted"),
    ),
}

FULL: dict[str, dict[str, Any]] = {
    "engine": {"sizes": [10, 100, 1_000, 100_000], "ops": 200, "value_bytes": 1024},
    "sdk-store": {"sizes": [10, 100, 1_000], "ops": 10, "value_bytes": 1024, "budget_s": 60},
    "lg-chat": {"steps": 200, "chars": 2500, "reps": 3, "sdk_reps": 1, "sdk_budget_s": 60},
    "lg-chat-800": {"steps": 200, "chars": 800, "reps": 5, "sdk_reps": 1, "sdk_budget_s": 60},
    "lg-growth": {
        "steps": 1000,
        "chars": 500,
        "reps": 3,
        "hosted_reps": 5,
        "sdk_reps": 1,
        "sdk_budget_s": 60,
    },
    "lg-read": {"sizes": [10, 100, 1_000], "reads": 30, "sdk_reads": 5, "sdk_budget_s": 60},
    "lg-big": {"bytes": 5 * 1024 * 1024, "reps": 11},
    "maf-run": {"supersteps": 100, "reps": 7, "payload": 1000},
    "maf-latest": {"sizes": [10, 100, 1_000], "reads": 10, "slow_reads": 3, "budget_s": 60},
    "hosted-threads": {"threads": 2000, "users": 20, "marks": [200, 1000, 2000]},
    "lg-memory": {"sizes": [100, 10_000], "ops": 100, "handoff_calls": 2000},
    "lg-memory-search": {"items": 10_000, "hosted_items": 2_000, "queries": 50, "puts": 20},
    "peers": {"steps": 50, "chars": 2500, "trials": 5, "burst": 20, "big_bytes": 2_000_000},
    "load": {
        "levels": [1, 10, 100, 300],
        "seconds": 15,
        "chars": 800,
        "delay_s": 0.02,
        "stall_s": 2.0,
        "stall_level": 100,
        "stall_reps": 3,
    },
    "roundtrips": {
        "delays_ms": [0, 10, 50],
        "turns": 10,
        "warmup": 2,
        "chars": 2500,
        "supersteps": 10,
        "runs": 3,
        "payload": 1000,
        "saves": 10,
    },
    "maf-agents": {
        "sizes": [10, 2_000],
        "reps": 10,
        "chars": 300,
        "grow_from_kb": 800,
        "grow_reply_chars": 48_000,
        "grow_after": 3,
        "grow_max_turns": 40,
    },
}

QUICK: dict[str, dict[str, Any]] = {
    "engine": {"sizes": [10, 100, 1_000, 10_000], "ops": 50, "value_bytes": 1024},
    "sdk-store": {"sizes": [10, 100], "ops": 5, "value_bytes": 1024, "budget_s": 10},
    "lg-chat": {"steps": 20, "chars": 2500, "reps": 1, "sdk_reps": 1, "sdk_budget_s": 10},
    "lg-chat-800": {"steps": 20, "chars": 800, "reps": 1, "sdk_reps": 1, "sdk_budget_s": 10},
    "lg-growth": {
        "steps": 100,
        "chars": 500,
        "reps": 1,
        "hosted_reps": 1,
        "sdk_reps": 1,
        "sdk_budget_s": 10,
    },
    "lg-read": {"sizes": [10, 100], "reads": 5, "sdk_reads": 2, "sdk_budget_s": 10},
    "lg-big": {"bytes": 5 * 1024 * 1024, "reps": 1},
    "maf-run": {"supersteps": 20, "reps": 1, "payload": 1000},
    "maf-latest": {"sizes": [10, 100], "reads": 3, "slow_reads": 1, "budget_s": 10},
    "hosted-threads": {"threads": 400, "users": 20, "marks": [100, 200, 400]},
    "lg-memory": {"sizes": [100, 1_000], "ops": 20, "handoff_calls": 500},
    "lg-memory-search": {"items": 1_000, "queries": 10, "puts": 5},
    "peers": {"steps": 10, "chars": 2500, "trials": 2, "burst": 10, "big_bytes": 2_000_000},
    "load": {
        "levels": [1, 10, 50],
        "seconds": 3,
        "chars": 800,
        "delay_s": 0.02,
        "stall_s": 2.0,
        "stall_level": 10,
        "stall_reps": 1,
    },
    "roundtrips": {
        "delays_ms": [0, 10, 50],
        "turns": 3,
        "warmup": 2,
        "chars": 2500,
        "supersteps": 5,
        "runs": 1,
        "payload": 1000,
        "saves": 3,
    },
    "maf-agents": {
        "sizes": [10, 200],
        "reps": 3,
        "chars": 300,
        "grow_from_kb": 800,
        "grow_reply_chars": 48_000,
        "grow_after": 1,
        "grow_max_turns": 40,
    },
}


# --------------------------------------------------------------------------- worker side


def _worker(spec_text: str, result_path: str) -> int:
    spec = json.loads(spec_text)
    module_name, workload, subject = spec["module"], spec["workload"], spec["subject"]
    import importlib

    with contextlib.ExitStack() as stack:
        emulator = None
        if subject.endswith("-hosted"):
            from ._services import RemoteEmulator

            # Started before anything imports aiohttp, so that the client can trust its CA.
            emulator = stack.enter_context(RemoteEmulator())
            emulator.trust()
        module = importlib.import_module(f"benchmarks.{module_name}")
        base = peak_rss_mb()
        start = time.perf_counter()
        result = asyncio.run(
            module.run_unit(
                workload,
                subject,
                spec["scale"],
                Path(spec["workdir"]),
                pg_dsn=spec.get("pg_dsn"),
                emulator=emulator,
            )
        )
        out = {
            "result": result,
            "wall_s": time.perf_counter() - start,
            "rss_base_mb": base,
            "rss_peak_mb": peak_rss_mb(),
        }
    Path(result_path).write_text(json.dumps(out))
    return 0


# --------------------------------------------------------------------------- parent side


def _child_env(state_root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FOUNDRY_HOSTING", "FOUNDRY_PROJECT", "FOUNDRY_CHECKPOINT_BLOB"))
    }
    env["AGENTSERVER_STATE_ROOT"] = str(state_root)
    env["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def _run_unit(
    section: str, subject: str, scale: dict[str, Any], pg_dsn: str | None, scratch: Path
) -> dict[str, Any]:
    module, workload, _ = SECTIONS[section]
    unit_dir = scratch / f"{section}-{subject}"
    unit_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "module": module,
        "workload": workload,
        "subject": subject,
        "scale": scale,
        "workdir": str(unit_dir),
        "pg_dsn": pg_dsn,
    }
    result_path = unit_dir / "result.json"
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--worker", json.dumps(spec), str(result_path)],
            cwd=REPO_ROOT,
            env=_child_env(unit_dir / "state"),
            capture_output=True,
            text=True,
            timeout=_UNIT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {_UNIT_TIMEOUT_S} s"}
    finally:
        elapsed = time.perf_counter() - started
    if done.returncode != 0 or not result_path.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail)}
    out: dict[str, Any] = json.loads(result_path.read_text())
    out["elapsed_s"] = elapsed
    shutil.rmtree(unit_dir, ignore_errors=True)
    return out


@contextlib.contextmanager
def _postgres(install: bool) -> Iterator[tuple[str | None, str]]:
    from ._postgres import LocalPostgres, PostgresUnavailable, install_postgres

    note = ""
    if install:
        note = install_postgres() + "; "
    try:
        server = LocalPostgres.start()
    except PostgresUnavailable as exc:
        yield None, note + f"AsyncPostgresSaver not measured: {exc}"
        return
    try:
        yield server.dsn, note + f"{server.version}, package defaults, on 127.0.0.1"
    finally:
        server.stop()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(SECTIONS), help="run these sections only"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the Markdown report (default: benchmarks/RESULTS.md for a full run, "
        "benchmarks/RESULTS-partial.md with --quick or --only)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="only re-render the report from figures written earlier with --json",
    )
    parser.add_argument(
        "--install-postgres",
        action="store_true",
        help="apt-get install postgresql when it is missing (root on Debian only)",
    )
    parser.add_argument("--worker", nargs=2, metavar=("SPEC", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = PARTIAL_OUT if args.quick or args.only else DEFAULT_OUT
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and write the report."""
    args = _parse(argv)
    if args.worker:
        return _worker(*args.worker)
    from ._report import machine_info, write_report

    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        write_report(args.out, saved["results"], saved["info"])
        return 0
    scales = QUICK if args.quick else FULL
    sections = [s for s in SECTIONS if not args.only or s in args.only]
    needs_pg = any("postgres" in SECTIONS[s][2] for s in sections)
    results: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()
    began = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="foundry-bench-"))
    try:
        with contextlib.ExitStack() as stack:
            pg_dsn, pg_note = (
                stack.enter_context(_postgres(args.install_postgres))
                if needs_pg
                else (None, "not needed by the sections run")
            )
            print(f"PostgreSQL: {pg_note}", file=sys.stderr)
            for section in sections:
                results[section] = {}
                for subject in SECTIONS[section][2]:
                    t0 = time.perf_counter()
                    print(
                        f"[{time.perf_counter() - began:6.0f}s] {section} / {subject} ...",
                        file=sys.stderr,
                        end="",
                        flush=True,
                    )
                    unit = _run_unit(section, subject, scales[section], pg_dsn, scratch)
                    results[section][subject] = unit
                    status = unit.get("error") or unit.get("result", {}).get("skipped") or "ok"
                    print(f" {time.perf_counter() - t0:.0f}s {status}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = time.perf_counter() - began
    info = machine_info()
    info.update(
        postgres=pg_note,
        quick=args.quick,
        total_s=total,
        scales=scales,
        load=f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after (1-minute average)",
    )
    write_report(args.out, results, info)
    if args.json:
        args.json.write_text(json.dumps({"info": info, "results": results}, indent=1))
    print(f"wrote {args.out} in {total:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
