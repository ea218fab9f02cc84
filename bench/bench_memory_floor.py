"""Benchmark: the smallest DuckDB memory_limit under which the whole analysis of N synthetic kernels finishes, and the
table where each smaller one stopped.

    python bench/bench_memory_floor.py [--kernels 1000000] [--limits 400MB 300MB 250MB 200MB 150MB] [--all]

Why (issue 27): the 10 M-kernel analysis must finish under the default memory_limit (512MB), and a statement whose
memory need is close to that limit stops it there first (`kernel_taxbreak` did on 2026-12-07).  Running 10 M kernels
takes a quarter of an hour; the floor at 1 M takes minutes and ranks the statements by the memory they need, so the
margin is measured where it is cheap.  The synthetic lake is written once (bench/gen_synthetic_lake.py); the whole
analysis (``taxbreak.engine.analysis.materialize`` into a fresh warehouse) runs once per limit, largest first, each
in a process of its own with ``TAXBREAK_DUCKDB_MEMORY`` set to the limit.  Each prints "finished" with its time, CPU
and the peak RSS of its process, or the table ``AnalysisOutOfMemory`` named.  It stops at the first limit that does
not finish (``--all``: tries every one).  The floor is the smallest limit that finished, with every larger one.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gen_synthetic_lake  # noqa: E402

from taxbreak.engine import analysis  # noqa: E402

DEFAULT_LIMITS = ["400MB", "300MB", "250MB", "200MB", "150MB"]


def run_at(lake: str, warehouse: str, limit: str) -> dict:
    """The whole analysis of ``lake`` into a fresh ``warehouse`` under memory_limit ``limit`` (in the calling process:
    run it in a process of its own); its figures, or the table where DuckDB ran out of memory."""
    os.environ[analysis.MEMORY_ENV] = limit
    with contextlib.suppress(FileNotFoundError):
        os.remove(warehouse)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        rows = analysis.materialize(warehouse, lake)
    except analysis.AnalysisOutOfMemory as exc:
        return {"limit": limit, "finished": False, "table": exc.table, "detail": exc.detail,
                "wall_s": time.perf_counter() - t0}
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(warehouse)
    return {"limit": limit, "finished": True, "tables": len(rows), "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def floor(lake: str, work: Path, limits: list[str], every: bool = False) -> tuple[list[dict], str | None]:
    """Run the analysis at each limit (a fresh process each); the results and the floor (None: none finished)."""
    results: list[dict] = []
    ctx = multiprocessing.get_context("spawn")
    for limit in limits:
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            r = pool.submit(run_at, lake, str(work / "warehouse.duckdb"), limit).result()
        results.append(r)
        if r["finished"]:
            print(f"  {limit:>8}  finished  {r['wall_s']:7.1f} s  CPU {r['cpu_s']:7.1f} s  "
                  f"peak RSS {r['rss_mb']:6,.0f} MB", flush=True)
        else:
            print(f"  {limit:>8}  stopped in {r['table']} after {r['wall_s']:.1f} s: {r['detail']}", flush=True)
            if not every:
                break
    lowest = None
    for r in results:
        if not r["finished"]:
            break
        lowest = r["limit"]
    return results, lowest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--limits", nargs="+", default=DEFAULT_LIMITS, help="memory_limit values, largest first")
    ap.add_argument("--all", action="store_true", help="try every limit, not only down to the first that stops")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="taxbreak-floor-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            _, events = pool.submit(gen_synthetic_lake.write_lake, work / "lake", args.kernels).result()
        print(f"synthetic trace: {args.kernels:,} kernels, {events:,} events (written in "
              f"{time.perf_counter() - t0:.1f} s); the whole analysis per memory_limit:")
        _, lowest = floor(str(work / "lake"), work, args.limits, args.all)
    print(f"memory floor at {args.kernels:,} kernels: " + (
        f"{lowest} (the smallest limit tried that finished, with every larger one)" if lowest else
        "none of the limits tried finished"))


if __name__ == "__main__":
    main()
