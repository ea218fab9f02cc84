"""``taxbreak whatif``: replay one analysed trace under a scenario (taxbreak.features.whatif; docs/method.md
"What-if replay") and print each scope's figures beside the trace's own; ``--save`` publishes the rows."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import duckdb

from taxbreak.config import Paths, add_path_args
from taxbreak.engine import runner
from taxbreak.features.whatif import (
    CP_PARTS,
    SWEEP_SPEEDUPS,
    Scenario,
    build_graph,
    graph_selection_problem,
    run_scenarios,
    write_tables,
)
from taxbreak.read.readmodel import TKLQT_IS_A_SUM
from taxbreak.store.query import WarehouseUnavailable, open_readonly
from taxbreak.store.tracenames import resolve_for_cli
from taxbreak.store.warehouse import WarehouseBusy


def scenario_from_args(args: Any) -> Scenario:
    fuse = 0
    if args.fuse:
        m = re.fullmatch(r"top:(\d+)", args.fuse)
        if not m:
            raise ValueError(f"--fuse {args.fuse!r}: use top:N")
        fuse = int(m.group(1))
    return Scenario(name=args.name or "cli", host_speedup=args.host_speedup, t_sys_ns=args.t_sys_ns,
                    t_sys_scale=args.t_sys_scale, gpu_speedup=args.gpu_speedup, cuda_graph=args.cuda_graph,
                    graph_keep_framework=not args.graph_drop_framework, graph_gap_ns=args.graph_gap_ns,
                    fuse_top=fuse, host_delay_ns=args.host_delay_ns)


def _fmt_ratio(a: float | None) -> str:
    return "n/a" if a is None else f"{a:.3f}"


def format_result(res: dict[str, Any], steps: str | None = None) -> str:
    sc = res["scenario"]
    lines = [f"trace {res['trace_id'][:16]}  scenario {sc.name}: host x{sc.host_speedup:g}, T_sys "
             f"{'x' + format(sc.t_sys_scale, 'g') if sc.t_sys_ns is None else str(sc.t_sys_ns) + ' ns'}, GPU "
             f"x{sc.gpu_speedup:g}" + (f", CUDA graphs for {sc.cuda_graph}" if sc.cuda_graph else "")
             + (f", fuse top {sc.fuse_top}" if sc.fuse_top else "") + f"   (replay {res['replay_s'] * 1000:.1f} ms)"]
    lines.append(f"  {'scope':<16} {'IL own ms':>11} {'IL replay':>11} {'ratio':>7} {'HDBI':>13} {'HDBI_wall':>13} "
                 f"{'GPU idle ms':>17} {'TKLQT ms':>17}  CP host share")
    want = None if steps is None else set(steps.split(","))
    for s in res["scopes"]:
        if s["scope_kind"] == "step" and (want is None or s["scope_key"] not in want):  # steps only when asked
            continue
        o, r, cp = s["own"], s["replay"], s["critical_path"]
        lines.append(
            f"  {s['scope_kind'] + ' ' + s['scope_key'] if s['scope_kind'] != 'trace' else 'trace':<16} "
            f"{o['il_ns'] / 1e6:>11.3f} {r['il_ns'] / 1e6:>11.3f} {r['il_ns'] / o['il_ns'] if o['il_ns'] else 0:>7.3f} "
            f"{_fmt_ratio(o['hdbi'])}->{_fmt_ratio(r['hdbi'])} {_fmt_ratio(o['hdbi_wall'])}->"
            f"{_fmt_ratio(r['hdbi_wall'])} {o['gpu_idle_ns'] / 1e6:>8.3f}->{r['gpu_idle_ns'] / 1e6:<8.3f} "
            f"{o['tklqt_ns'] / 1e6:>8.3f}->{r['tklqt_ns'] / 1e6:<8.3f}  {_fmt_ratio(cp.get('cp_host_share'))}")
    tr = res["scopes"][0]["critical_path"] if res["scopes"] else {}
    if tr:
        parts = ", ".join(f"{p} {tr[f'cp_{p}_ns'] / 1e6:.3f}" for p in CP_PARTS if tr[f"cp_{p}_ns"])
        lines.append(f"  critical path of the trace (ms): {parts}")
    lines.append(f"  TKLQT: {TKLQT_IS_A_SUM}")
    return "\n".join(lines)


def cmd_whatif(args: Any) -> int:
    paths = Paths.from_args(args)
    if not Path(paths.warehouse).exists():
        print(f"whatif: no warehouse at {paths.warehouse}: run `taxbreak ingest` and `taxbreak analyze` first",
              file=sys.stderr)
        return 2
    try:
        sc = scenario_from_args(args)
        con = open_readonly(Path(paths.warehouse)).con  # the readers' one opener: never blocks a writer
    except (ValueError, duckdb.Error, WarehouseUnavailable) as exc:
        print(f"whatif: {exc}", file=sys.stderr)
        return 2
    try:
        tid = resolve_for_cli(con, args.trace, "whatif", paths)
        if tid is None:
            return 2
        g = build_graph(con, paths.lake, tid)
        if not (g.d_kind == 0).any():
            print(f"whatif: trace {tid[:16]} has no kernels: nothing to replay", file=sys.stderr)
            return 2
        problem = graph_selection_problem(g, sc)
        if problem:
            print(f"whatif: {problem}", file=sys.stderr)
            return 2
        scs = [sc]
        if args.sweep:
            scs += [replace(sc, name=f"{sc.name}_host_x{s:g}", host_speedup=s) for s in SWEEP_SPEEDUPS]
        results = run_scenarios(g, scs)
    except (LookupError, duckdb.Error) as exc:
        print(f"whatif: {exc}", file=sys.stderr)
        return 2
    finally:
        con.close()
    if args.save:  # the one publisher (taxbreak.engine.runner.publish): the writer lock, one publication, the snapshot
        try:
            runner.publish(paths, lambda wcon: write_tables(wcon, results), traces=[tid], label="whatif")
        except WarehouseBusy as exc:
            print(f"whatif: {exc}", file=sys.stderr)
            return 3
    if args.json:
        out = []
        for r in results:
            out.append({**{k: v for k, v in r.items() if k != "scenario"}, "scenario": asdict(r["scenario"])})
        print(json.dumps(out, indent=2, default=str))
    else:
        for r in results:
            print(format_result(r, args.step))
    return 0


def add_whatif_parser(sub: Any) -> None:
    p = sub.add_parser(
        "whatif", help="replay an analysed trace under a faster host, another launch floor, CUDA graphs or fusion",
        description="Build the trace's dependency graph (host threads, launches, stream order, waiting syncs), "
        "replay it under the scenario and print IL, HDBI, HDBI_wall, GPU idle and TKLQT per scope beside the "
        "trace's own values, and the critical path's host share (docs/method.md, 'What-if replay').")
    p.add_argument("trace", help="trace id prefix, file name, its stem or a unique substring")
    p.add_argument("--host-speedup", type=float, default=1.0, help="every host duration / S (default 1)")
    p.add_argument("--t-sys-ns", type=int, default=None, help="a new launch floor T_sys' in ns")
    p.add_argument("--t-sys-scale", type=float, default=1.0, help="or scale the launch path by this factor")
    p.add_argument("--gpu-speedup", type=float, default=1.0, help="kernel durations / G (default 1)")
    p.add_argument("--cuda-graph", default=None, metavar="PHASE|all|step:N,M",
                   help="replay a phase (e.g. decode), all steps or the listed steps as one graph launch per step")
    p.add_argument("--graph-drop-framework", action="store_true",
                   help="with --cuda-graph: drop the framework/library/untraced host time of those steps too")
    p.add_argument("--graph-gap-ns", type=int, default=None,
                   help="with --cuda-graph: GPU gap between graph kernels (default: the stream's smallest gap)")
    p.add_argument("--fuse", default=None, metavar="top:N", help="fuse the top N fusion candidates")
    p.add_argument("--host-delay-ns", type=int, default=0,
                   help="add this host delay to every outermost framework op (after the speed-up)")
    p.add_argument("--step", default=None, help="also print these step ids (comma-separated; default: trace and "
                   "phases only)")
    p.add_argument("--sweep", action="store_true", help="also sweep the host speed-up over 1x..4x")
    p.add_argument("--name", default=None, help="scenario name (default 'cli')")
    p.add_argument("--save", action="store_true", help="write the results into whatif_results / critical_path")
    p.add_argument("--json", action="store_true", help="print the results as JSON")

    add_path_args(p)
    p.set_defaults(func=cmd_whatif)
