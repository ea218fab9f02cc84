"""Reference for issue 27's growth target: how DuckDB's own operators grow from N to 10 N rows at the analysis's
memory_limit, beside the same operators with memory to spare, in one invocation.

    python bench/bench_spill_floor.py                      # rows shaped like 1 M and 10 M kernels (about 4 min)
    python bench/bench_spill_floor.py --kernels 100000     # 100 k and 1 M: a quick look

bench/bench_analysis.py measures the analysis at 1 M and 10 M kernels against the target "10 M in <= 12x the
time of 1 M".  Nothing of taxbreak's SQL runs here: plain tables of random-order keys, on connections made by
``taxbreak.engine.analysis.connect`` (the analysis's settings: memory_limit, spill folder, no insertion order) with
2 threads, one fresh database file per measurement.  The three operators are the shapes the analysis spends its
time in at those sizes (bench_analysis' per-table lines; the DuckDB profiles in issue 27's notes):

- ``lookup join, narrow``: N rows (id, value) LEFT JOIN N rows (id, value), like a per-kernel lookup on ids only;
- ``lookup join, wide``: N kernel-like rows (ids, times, two names) LEFT JOIN N rows (id, name, time, id), like
  int_kernel_links' per-kernel lookups on whole rows;
- ``ordered pass``: a running sum and a lead over 5.1 N rows ordered by (thread, time, ...), like
  int_host_segments' nesting sweep (two rows per host event, 5.1 M events at 1 M kernels).

Each is timed at N and 10 N under the analysis's memory_limit ($TAXBREAK_DUCKDB_MEMORY, default 512MB) and under
``--roomy`` (default 8GB, where neither size spills); the growth 10 N / N is printed for both.  Growth well above
10x under the limit and near 10x in the roomy run is the cost of spilling, which a statement of the analysis
pays at 10 M and not at 1 M once its working set passes the limit.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from taxbreak.engine import analysis  # noqa: E402

# the rows of each operator, per kernel: one lookup row per kernel; two sweep rows per host event, 2.55 host
# events per kernel in bench/gen_synthetic_lake.py (5,102,999 host segments at 1 M kernels)
SWEEP_ROWS_PER_KERNEL = 5.1

SETUP = {
    "lookup join, narrow": (
        "CREATE TABLE a AS SELECT (i * 7919) % $n AS id, i AS x FROM range($n) t(i);"
        "CREATE TABLE b AS SELECT i AS id, i * 3 AS z FROM range($n) t(i)"
    ),
    "lookup join, wide": (
        "CREATE TABLE a AS SELECT (i * 7919) % $n AS id, i AS ts_ns, i + 5 AS end_ns, i % 7 AS device_id, "
        "i % 64 AS stream_id, i AS correlation_id, 'sm90_xmma_gemm_bf16bf16_bf16f32_kernel_' || (i % 20) AS name, "
        "'cudaLaunchKernel' AS launch_name FROM range($n) t(i);"
        "CREATE TABLE b AS SELECT i AS id, 'aten::linear_python_function_' || (i % 50) AS op_name, i * 3 AS op_ts_ns, "
        "i + 1 AS op_event_id FROM range($n) t(i)"
    ),
    "ordered pass": (
        "CREATE TABLE a AS SELECT i % 4 AS pk, (i * 7919) % $n AS t, (i % 2)::UTINYINT AS ord, -i AS ord2, "
        "(1 - 2 * (i % 2))::TINYINT AS delta, i AS event_id FROM range($n) t(i)"
    ),
}
QUERY = {
    "lookup join, narrow": "SELECT a.id, a.x, b.z FROM a LEFT JOIN b ON a.id = b.id",
    "lookup join, wide": "SELECT a.*, b.op_name, b.op_ts_ns, b.op_event_id FROM a LEFT JOIN b ON a.id = b.id",
    "ordered pass": (
        "SELECT pk, t, CAST(sum(delta) OVER w AS INTEGER) AS depth, lead(t) OVER w AS next_t FROM a "
        "WINDOW w AS (ORDER BY pk, t, ord, ord2, event_id ROWS UNBOUNDED PRECEDING)"
    ),
}


def measure(op: str, rows: int, memory: str | None, work: Path, threads: int) -> float:
    """Seconds of ``CREATE TABLE r AS <op's query>`` over ``rows`` rows in a fresh database (setup not timed)."""
    folder = Path(tempfile.mkdtemp(dir=work))
    try:
        con = analysis.connect(folder / "floor.duckdb")
        con.execute(f"SET threads = {int(threads)}")
        if memory is not None:
            con.execute("SET memory_limit = $m", {"m": memory})
        for statement in SETUP[op].split(";"):
            con.execute(statement, {"n": rows})
        t0 = time.perf_counter()
        con.execute(f"CREATE TABLE r AS {QUERY[op]}")
        took = time.perf_counter() - t0
        got = con.execute("SELECT count(*) FROM r").fetchone()[0]
        con.close()
        if got != rows:
            raise RuntimeError(f"{op}: {got:,} rows, expected {rows:,}")
        return took
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=1_000_000, help="N: the smaller size in kernels (10 N the other)")
    ap.add_argument("--roomy", default="8GB", help="memory_limit of the reference run, where nothing spills")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="taxbreak-floor-"))
    limit = analysis.memory_limit()
    print(f"DuckDB's operators at {args.kernels:,} and {10 * args.kernels:,} kernels' rows, {args.threads} threads: "
          f"memory_limit {limit} (the analysis's) beside {args.roomy}")
    print(f"  {'operator':<22} {'rows (N)':>12} {'memory':>8} {'N':>8} {'10 N':>9} {'growth':>7}")
    try:
        for op in QUERY:
            rows = int(args.kernels * (SWEEP_ROWS_PER_KERNEL if op == "ordered pass" else 1))
            for label, memory in ((limit, None), (args.roomy, args.roomy)):
                small = measure(op, rows, memory, work, args.threads)
                large = measure(op, 10 * rows, memory, work, args.threads)
                print(f"  {op:<22} {rows:>12,} {label:>8} {small:7.2f}s {large:8.2f}s {large / small:6.1f}x",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
