"""bench/bench_spill_floor.py, the reference of issue 27's growth target, runs and prints what its README row
quotes: each operator at N and 10 N under the analysis's memory_limit and under the roomy one, with the growth."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_spill_floor.py"
_spec = importlib.util.spec_from_file_location("bench_spill_floor", BENCH)
assert _spec is not None and _spec.loader is not None
floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floor)


def test_every_operator_is_printed_at_both_limits_with_its_growth(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TAXBREAK_DUCKDB_MEMORY", "300MB")
    monkeypatch.setattr(sys, "argv", ["bench_spill_floor.py", "--kernels", "500", "--roomy", "1GB"])
    floor.main()
    out = capsys.readouterr().out
    assert "memory_limit 300MB (the analysis's) beside 1GB" in out
    rows = re.findall(r"^  (lookup join, narrow|lookup join, wide|ordered pass) +([\d,]+) +(\S+) +([\d.]+)s +"
                      r"([\d.]+)s +([\d.]+)x$", out, re.M)
    assert [(op, memory) for op, _, memory, *_ in rows] == [
        (op, memory) for op in floor.QUERY for memory in ("300MB", "1GB")]
    for op, rows_n, *_timings in rows:
        # the sweep has 5.1 rows per kernel (two per host event), the lookups one; the timings of so few rows may
        # print as 0.00s on a fast machine, so only their format is checked here (measure() is checked below)
        assert int(rows_n.replace(",", "")) == (2_550 if op == "ordered pass" else 500)


def test_measure_times_the_query_and_keeps_every_row(tmp_path: Path) -> None:
    assert floor.measure("lookup join, wide", 1000, "300MB", tmp_path, 1) > 0


def test_a_query_that_loses_rows_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(floor.QUERY, "lookup join, narrow", "SELECT a.id FROM a JOIN b ON a.id = b.id + 1")
    with pytest.raises(RuntimeError, match="lookup join, narrow: 999 rows, expected 1,000"):
        floor.measure("lookup join, narrow", 1000, None, tmp_path, 1)
