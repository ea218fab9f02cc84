"""bench/bench_memory_floor.py runs the whole analysis once per memory_limit, each in a process of its own, and
names the table where a limit too small for it stopped; the floor is the smallest limit that finished."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from taxbreak.engine.plan import plan_tables

BENCH = Path(__file__).resolve().parents[1] / "bench"
_spec = importlib.util.spec_from_file_location("bench_memory_floor", BENCH / "bench_memory_floor.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_memory_floor"] = bench  # the spawned runs import it by name
_spec.loader.exec_module(bench)


@pytest.mark.slow
def test_the_floor_is_the_smallest_limit_that_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = tmp_path / "lake"
    bench.gen_synthetic_lake.write_lake(lake, 2_000)
    results, lowest = bench.floor(str(lake), tmp_path, ["512MB", "1MB", "256MB"])
    assert [r["limit"] for r in results] == ["512MB", "1MB"]  # it stops at the first limit that does not finish
    ok, stopped = results
    assert ok["finished"] and ok["tables"] == len(plan_tables(None))
    assert ok["wall_s"] > 0 and ok["cpu_s"] > 0 and ok["rss_mb"] > 50
    assert not stopped["finished"]
    assert stopped["table"] == "prepare" or stopped["table"] in plan_tables(None)
    assert stopped["detail"].startswith("Out of Memory Error")
    assert lowest == "512MB"
    out = capsys.readouterr().out
    assert "     512MB  finished" in out and f"       1MB  stopped in {stopped['table']} after" in out
    assert not (tmp_path / "warehouse.duckdb").exists()  # each run's warehouse is removed


def test_no_limit_finished_is_no_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = iter([{"limit": "2MB", "finished": False, "table": "prepare", "detail": "Out of Memory Error: x",
                  "wall_s": 0.1}])

    class Pool:  # the child process stands in: floor's own logic only
        def __init__(self, *_a: object, **_k: object) -> None:
            pass

        def __enter__(self) -> Pool:
            return self

        def __exit__(self, *_a: object) -> None:
            return None

        def submit(self, *_a: object) -> object:
            return type("Done", (), {"result": lambda _self: next(runs)})()

    monkeypatch.setattr(bench, "ProcessPoolExecutor", Pool)
    results, lowest = bench.floor("lake", tmp_path, ["2MB"])
    assert lowest is None and len(results) == 1
