"""``taxbreak trend [WORKLOAD|TRACE]``: each workload's runs over time and the change points found in them
(workload_trends, workload_changes; docs/method.md "Trends and regressions", ours).

Without an argument: the workloads, with their run count and their latest change.  With a workload id prefix or a
trace name (resolved as every command resolves TRACE, taxbreak.store.tracenames): that workload's runs in capture order,
a mark on the runs where a figure moved, and the change points with what moved with them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from typing import Any

import duckdb

from taxbreak.config import add_path_args
from taxbreak.read import readmodel
from taxbreak.store import query
from taxbreak.store.query import open_for_cli, printable
from taxbreak.store.tracenames import TraceNotFound

_RUN_COLUMNS = ("run_seq", "trace_id", "file_name", "capture_ts_ns", "capture_ts_source", "il_ns", "t_orchestrate_ns",
                "delta_ft_ns", "delta_ct_ns", "delta_kt_ns", "t_device_active_ns", "kpt", "hdbi_wall",
                "gpu_idle_share", "tklqt_per_launch_ns", "verdict")


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return readmodel._rows(con, sql, params or {})  # noqa: SLF001 - the read model's one row reader


def workloads(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every workload: id, key, program, runs, the newest run's capture time and file, and its latest change."""
    return _rows(con, """
        SELECT w.workload_id, any_value(w.workload_key) AS workload_key, any_value(w.program) AS program,
               count(*) AS runs, max(w.capture_ts_ns) AS last_capture_ts_ns,
               arg_max(w.file_name, w.run_seq) AS last_file_name,
               (SELECT arg_max(c.figure || ' ' || c.direction || ' at run ' || c.run_seq || ' ('
                               || printf('%+.1f', 100 * c.rel_change) || '%)', c.run_seq)
                FROM workload_changes c WHERE c.workload_id = w.workload_id) AS last_change
        FROM workload_trends w GROUP BY w.workload_id ORDER BY program, w.workload_id""")


def resolve_workload(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The workload ``name`` names: a workload id prefix, else the workload of the trace it names."""
    ids = [r[0] for r in con.execute("SELECT DISTINCT workload_id FROM run_spec WHERE workload_id LIKE $p || '%'",
                                     {"p": name.lower()}).fetchall()]
    if len(ids) == 1:
        return ids[0]

    try:
        tid = readmodel.resolve_trace(con, name)  # TraceAmbiguous lists the candidates
    except TraceNotFound:
        raise LookupError(f"no workload id or trace matches {name!r} (`taxbreak trend` lists the workloads)") from None
    return con.execute("SELECT workload_id FROM run_spec WHERE trace_id = $t", {"t": tid}).fetchone()[0]


def trend(con: duckdb.DuckDBPyConnection, workload_id: str) -> dict[str, Any]:
    """One workload: its key, runs in capture order (workload_trends) and change points (workload_changes)."""
    runs = _rows(con, f"SELECT {', '.join(_RUN_COLUMNS)} FROM workload_trends WHERE workload_id = $w ORDER BY run_seq",
                 {"w": workload_id})
    changes = _rows(con, """SELECT run_seq, trace_id, figure, direction, status, value, baseline_median, baseline_sigma,
                                   baseline_runs, rel_change, robust_z, components_moved, top_ops, top_kernels
                            FROM workload_changes WHERE workload_id = $w ORDER BY run_seq, figure""",
                    {"w": workload_id})
    key = con.execute("SELECT any_value(workload_key), any_value(program) FROM run_spec WHERE workload_id = $w",
                      {"w": workload_id}).fetchone()
    return {"workload_id": workload_id, "workload_key": key[0], "program": key[1], "runs": runs, "changes": changes}


def regressions_in(con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None) -> list[dict[str, Any]]:
    """The regressions (workload_changes, direction 'regression') a landing run takes part in: those of its workload
    whose change point is the run itself or one of the trends.confirm_runs - 1 runs before it, whose confirming
    median it is part of (the Dagster warning on each new trace; ours).  ``trace_ids`` None: the newest run of
    every workload."""
    if trace_ids is not None and not trace_ids:
        return []
    wanted = ("SELECT workload_id, run_seq FROM workload_trends WHERE list_contains($t, trace_id)"
              if trace_ids is not None else
              "SELECT workload_id, max(run_seq) AS run_seq FROM workload_trends GROUP BY workload_id")
    return _rows(con, f"""
        WITH landed AS ({wanted}),
        confirm AS (SELECT workload_id, arg_max(trends_confirm_runs, capture_ts_ns) AS runs FROM run_spec
                    GROUP BY workload_id)
        SELECT DISTINCT c.workload_id, c.program, c.trace_id, c.file_name, c.run_seq, c.figure, c.value,
               c.baseline_median, c.baseline_runs, c.confirm_median, c.rel_change, c.robust_z, c.status,
               c.components_moved, c.top_ops, c.top_kernels
        FROM workload_changes c JOIN landed l USING (workload_id) JOIN confirm f USING (workload_id)
        WHERE c.direction = 'regression' AND c.run_seq BETWEEN l.run_seq - f.runs + 1 AND l.run_seq
        ORDER BY c.workload_id, c.run_seq, c.figure""", {"t": list(trace_ids)} if trace_ids is not None else {})


def format_regression(c: dict[str, Any]) -> str:
    """One regression in a line: workload, run, figure, change against the baseline."""
    z = "n/a" if c["robust_z"] is None else f"{c['robust_z']:.1f}"
    moved = f"; moved with it: {', '.join(c['components_moved'])}" if c["components_moved"] else ""
    return (f"workload {c['workload_id']} ({c['program']}) run {c['run_seq']} {c['file_name']}: {c['figure']} "
            f"{100 * c['rel_change']:+.1f}% ({c['status']}) vs the median {c['baseline_median']:,.0f} of "
            f"{c['baseline_runs']} runs, z {z}{moved}")


def _ms(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:,.3f}"


def _when(ns: int | None) -> str:
    if ns is None:
        return "?"
    return _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M")


def format_workloads(ws: list[dict[str, Any]]) -> str:
    if not ws:
        return "no workloads: analyse traces first (`taxbreak analyze`)"
    lines = [f"{'workload':<13} {'program':<32} {'runs':>5}  {'last capture':<16}  last change"]
    for w in ws:
        lines.append(f"{w['workload_id']:<13} {str(w['program'])[:32]:<32} {w['runs']:>5}  "
                     f"{_when(w['last_capture_ts_ns']):<16}  {w['last_change'] or 'none'}")
    return "\n".join(lines)


def format_trend(t: dict[str, Any]) -> str:
    marks: dict[int, list[str]] = {}
    for c in t["changes"]:
        marks.setdefault(c["run_seq"], []).append(f"{c['figure']} {c['direction']}")
    lines = [f"workload {t['workload_id']}  {t['program']}  ({len(t['runs'])} runs)", f"  key: {t['workload_key']}",
             "", f"{'run':>4} {'captured':<16} {'IL ms':>10} {'T_Orch ms':>10} {'ΔFT ms':>9} {'ΔCT ms':>9} "
             f"{'ΔKT ms':>9} {'HDBI_w':>7} {'kpt':>7}  verdict / change"]
    for r in t["runs"]:
        kpt = "n/a" if r["kpt"] is None else f"{r['kpt']:.1f}"
        hw = "n/a" if r["hdbi_wall"] is None else f"{r['hdbi_wall']:.3f}"
        mark = ("  <- " + ", ".join(marks[r["run_seq"]])) if r["run_seq"] in marks else ""
        lines.append(f"{r['run_seq']:>4} {_when(r['capture_ts_ns']):<16} {_ms(r['il_ns']):>10} "
                     f"{_ms(r['t_orchestrate_ns']):>10} {_ms(r['delta_ft_ns']):>9} {_ms(r['delta_ct_ns']):>9} "
                     f"{_ms(r['delta_kt_ns']):>9} {hw:>7} {kpt:>7}  {r['verdict'] or '-'}{mark}")
    if t["changes"]:
        lines += ["", "change points (docs/method.md \"Trends and regressions\"):"]
        for c in t["changes"]:
            z = "n/a" if c["robust_z"] is None else f"{c['robust_z']:.1f}"
            lines.append(f"  run {c['run_seq']}: {c['figure']} {c['direction']} ({c['status']}) "
                         f"{100 * c['rel_change']:+.1f}% vs the median of {c['baseline_runs']} runs (z {z})")
            if c["components_moved"]:
                lines.append(f"    moved with it: {', '.join(c['components_moved'])}")
            if c["top_ops"]:
                lines.append("    ops: " + ", ".join(f"{readmodel.target_text(o['op'])} {o['change_ns'] / 1e6:+.3f} ms"
                                                    for o in c["top_ops"]))
            if c["top_kernels"]:
                lines.append("    kernels: " + ", ".join(f"{readmodel.target_text(k['kernel'])} "
                                                        f"{k['change_ns'] / 1e6:+.3f} ms" for k in c["top_kernels"]))
    else:
        lines += ["", "no change point: every figure stayed within the run-to-run spread (or too few runs yet)"]
    return "\n".join(lines)


def cmd_trend(args: argparse.Namespace) -> int:
    opened = open_for_cli(args, "trend")
    if opened is None:
        return 2
    try:
        if not query.has_relation(opened.con, "workload_trends"):
            print("taxbreak trend: this warehouse has no workload_trends yet: run `taxbreak analyze`", file=sys.stderr)
            return 2
        if args.workload is None:
            ws = workloads(opened.con)
            print(json.dumps(ws, indent=2, default=str) if args.json else printable(format_workloads(ws)))
            return 0
        try:
            wid = resolve_workload(opened.con, args.workload)
        except LookupError as exc:
            print(printable(f"taxbreak trend: {exc}"), file=sys.stderr)
            return 2
        t = trend(opened.con, wid)
        print(json.dumps(t, indent=2, default=str) if args.json else printable(format_trend(t)))
        return 0
    finally:
        opened.con.close()


def add_trend_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trend", help="a workload's runs over time and its regressions / improvements beyond noise",
        description="Without WORKLOAD: every workload (runs sharing the workload key, setting trends.workload_key) "
        "with its latest change. With a workload id prefix or a trace name: its runs in capture order with the "
        "headline figures, and the change points (robust baseline of the previous runs, confirmed over the next "
        "ones; docs/method.md 'Trends and regressions').",
    )
    p.add_argument("workload", nargs="?", help="workload id prefix, or a trace name (id prefix, file name, stem, "
                   "unique substring) whose workload to show")
    p.add_argument("--json", action="store_true", help="print as JSON")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_trend)
