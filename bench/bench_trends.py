"""The cost of the trend tables as the warehouse grows (issue 28; docs/method.md "Trends and regressions").

    python bench/bench_trends.py                      # 10 vs 1,000 runs in 20 workloads, trend query over 10,000
    python bench/bench_trends.py --repeat 5

workload_changes is a cross-trace table partitioned by workload (``-- partition_by: workload_id``): a run that
publishes a trace recomputes only that trace's workload (``taxbreak.engine.analysis.build_cross_trace`` with the
run's traces, as the publication calls it).  The script times that on series of 10 and of 1,000 runs spread over
20 workloads with 2% noise (each series built here, the same generator as tests/sql/test_trends.py), and prints
the ratio: the target is <= 1.5x; beside it the whole table's recompute (what every run did before), and the
`taxbreak trend WORKLOAD` queries over 10,000 runs.  Timings are the fastest of --repeat runs; both sizes run in
this invocation, one after the other.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def series(runs: int, workloads: int = 20, seed: int = 1) -> tuple[list[dict], list[dict], list[dict]]:
    """workload_trends, run_spec and op rows: ``runs`` runs spread over ``workloads`` workloads, a +8% ΔFT shift
    two thirds into each."""
    from taxbreak.engine.rules import RunConfig

    cfg, rnd = RunConfig(), random.Random(seed)
    trends, spec, ops = [], [], []
    per = max(1, runs // workloads)
    for w in range(workloads):
        n = per if w < workloads - 1 else runs - per * (workloads - 1)
        for i in range(1, n + 1):
            tid = f"{w:04d}{i:06d}".ljust(64, "0")
            ft = 1_000_000 * (1 + rnd.gauss(0, 0.02)) * (1.08 if i > 2 * n // 3 else 1)
            row = {"workload_id": f"w{w:03d}", "workload_key": f"program=p{w}", "program": f"p{w}", "run_seq": i,
                   "runs_in_workload": n, "trace_id": tid, "file_name": f"r{i}.json", "capture_ts_ns": i,
                   "capture_ts_source": "trace", "verdict": "host-bound"}
            for k, v in (("il_ns", 2e7), ("delta_ct_ns", 2e5), ("delta_kt_ns", 1e5), ("t_device_active_ns", 5e6),
                         ("kernels", 1000), ("kpt", 100.0), ("hdbi_wall", 0.6), ("gpu_idle_share", 0.3),
                         ("tklqt_per_launch_ns", 2e4)):
                row[k] = v * (1 + rnd.gauss(0, 0.02))
            row["delta_ft_ns"] = ft
            row["t_orchestrate_ns"] = ft + row["delta_ct_ns"] + row["delta_kt_ns"]
            trends.append(row)
            spec.append({"workload_id": row["workload_id"], "trace_id": tid, "capture_ts_ns": i,
                         "workload_key": row["workload_key"], "program": row["program"],
                         "trends_window_runs": cfg.trends_window_runs, "trends_min_runs": cfg.trends_min_runs,
                         "trends_mad_k": cfg.trends_mad_k, "trends_min_rel_change": cfg.trends_min_rel_change,
                         "trends_confirm_runs": cfg.trends_confirm_runs})
            ops.append({"trace_id": tid, "scope_kind": "op", "scope_key": "aten::mm", "delta_ft_ns": int(ft),
                        "delta_ct_ns": 0, "t_device_active_ns": 0})
    return trends, spec, ops


def load(runs: int):  # noqa: ANN201 - a DuckDB connection
    import duckdb
    import pyarrow as pa

    con = duckdb.connect(config={"threads": 2})
    for name, rows in zip(("workload_trends", "run_spec", "taxbreak_by_scope"), series(runs), strict=True):
        con.register("_t", pa.Table.from_pylist(rows))
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _t")
        con.unregister("_t")
    return con


def best(fn, repeat: int) -> float:  # noqa: ANN001
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--large", type=int, default=1000)
    ap.add_argument("--query-runs", type=int, default=10_000)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from taxbreak.engine import analysis
    from taxbreak.engine.plan import sql_files
    from taxbreak.read import trend

    changes_sql = next(f for f in sql_files() if f.name == "workload_changes").text
    times, whole = {}, {}
    for n in (args.small, args.large):
        con = load(n)
        whole[n] = best(lambda c=con: c.execute(f"CREATE OR REPLACE TABLE workload_changes AS {changes_sql}"),
                        args.repeat)
        # one more trace as a run publishes it: only its workload's rows (-- partition_by: workload_id)
        newest = con.execute("SELECT arg_max(trace_id, run_seq) FROM workload_trends WHERE workload_id = 'w000'"
                             ).fetchone()[0]
        times[n] = best(lambda c=con, t=newest: analysis.build_cross_trace(c, "workload_changes", [t], {}),
                        args.repeat)
        flagged = con.execute("SELECT count(*) FROM workload_changes WHERE figure = 'delta_ft_ns'").fetchone()[0]
        print(f"workload_changes over {n:>6,} runs in 20 workloads: one more trace {times[n] * 1000:8.1f} ms "
              f"(its workload recomputed); the whole table {whole[n] * 1000:8.1f} ms ({flagged} ΔFT change points)")
        con.close()
    print(f"one more trace: {times[args.large] / times[args.small]:.2f}x the cost at {args.large:,} runs as at "
          f"{args.small} (target <= 1.5x); the whole table's recompute: {whole[args.large] / whole[args.small]:.2f}x")
    con = load(args.query_runs)
    con.execute(f"CREATE TABLE workload_changes AS {changes_sql}")
    t_build = best(lambda: con.execute(f"CREATE OR REPLACE TABLE workload_changes AS {changes_sql}"), 1)
    t_list = best(lambda: trend.workloads(con), args.repeat)
    t_one = best(lambda: trend.trend(con, "w007"), args.repeat)
    print(f"{args.query_runs:,} runs: workload_changes {t_build * 1000:.1f} ms; `taxbreak trend` (workload list) "
          f"{t_list * 1000:.1f} ms; `taxbreak trend WORKLOAD` ({args.query_runs // 20} runs) {t_one * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
