"""``python -m benchmarks``: a smoke or partial run never overwrites the committed RESULTS.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.__main__ import DEFAULT_OUT, PARTIAL_OUT, _parse


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        ([], DEFAULT_OUT),
        (["--quick"], PARTIAL_OUT),
        (["--only", "lg-read", "maf-latest"], PARTIAL_OUT),
        (["--quick", "--out", "x.md"], Path("x.md")),
        (["--out", "benchmarks/RESULTS.md", "--quick"], Path("benchmarks/RESULTS.md")),
    ],
)
def test_where_the_report_goes(argv: list[str], out: Path) -> None:
    assert _parse(argv).out == out
    assert DEFAULT_OUT.name == "RESULTS.md" and PARTIAL_OUT != DEFAULT_OUT
