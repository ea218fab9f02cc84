"""Benchmark and validation figures of the what-if replay (taxbreak.features.whatif; docs/method.md "What-if replay").

    python bench/bench_whatif.py [--kernels 1000000] [--model dense] [--skip-public] [--skip-truth] [--keep DIR]

Prints three things:
1. identity: on every public trace with launches (../shared/traces/public, when present), the replay's IL and
   kernel starts against the trace's own (IL error %, largest start error in ns);
2. ground truth: the synthetic generator writes one workload at host speed 1.0, 1.5 and 3.0, at half the launch
   latency and with CUDA graphs for decode; the replay of the 1.0 trace predicts the others' IL (error %);
3. real captures (torch on this machine, CPU when no GPU): ``taxbreak capture generate`` of a small model without
   and with --host-delay-us; the replay of the undelayed capture with that delay per outermost framework op
   predicts the delayed capture's IL (GPU) or host timeline (CPU-only: first step start to last step end);
4. speed: a synthetic trace of --kernels kernels is written as Kineto JSON and ingested (timed: the reference),
   its analysis tables computed (timed), then the graph built and replayed (timed), printed beside the ingest
   time as a ratio. Target: replay faster than the ingest of the same trace.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from taxbreak.capture.synthetic import Dist, SyntheticConfig, kernels_per_step, write_kineto
from taxbreak.engine import analysis
from taxbreak.features import whatif
from taxbreak.ingest import ingest_file
from taxbreak.ingest.lake import Lake

HERE = Path(__file__).resolve().parent
PUBLIC = HERE.parent.parent / "shared" / "traces" / "public"
TABLES = ["int_kernel_links", "kernel_taxbreak", "int_steps", "trace_launch_floor", "skip_by_trace",
          "fusion_candidates", "taxbreak_by_scope", "trace_meta"]


def _il(con, tid: str) -> int:  # noqa: ANN001 - DuckDB connection
    return con.execute("SELECT il_ns FROM skip_by_trace WHERE trace_id = $t", {"t": tid}).fetchone()[0]


def _trace_scope(res: dict) -> dict:
    return next(s for s in res["scopes"] if s["scope_kind"] == "trace")


def identity(work: Path) -> None:
    print("== identity replay on the public traces (target: IL within 1%, kernel starts within 1 us)")
    if not PUBLIC.is_dir():
        print(f"   skipped: {PUBLIC} is absent")
        return
    files = sorted(p for p in PUBLIC.rglob("*") if p.suffix in (".gz", ".sqlite") and p.is_file())
    lake = Lake(work / "public_lake")
    ids = {}
    for p in files:
        r = ingest_file(p, lake)
        if r.trace_id:
            ids[p.relative_to(PUBLIC)] = r.trace_id
    con = analysis.connect(None)
    analysis.materialize(None, work / "public_lake", con=con, tables=TABLES)
    print(f"   {'trace':<72} {'kernels':>8} {'IL own ms':>11} {'IL replay':>11} {'err %':>7} {'max start err ns':>17}")
    for rel, tid in ids.items():
        try:
            g = whatif.build_graph(con, work / "public_lake", tid)
        except LookupError:
            continue
        if not (g.d_launch_seg >= 0).any():
            print(f"   {str(rel)[:72]:<72} {int((g.d_kind == 0).sum()):>8} (no launches: not replayed)")
            continue
        x = whatif.replay(g)
        tr = _trace_scope(whatif.run_scenario(g, whatif.Scenario()))
        il, rep = _il(con, tid), tr["replay"]["il_ns"]
        err = int(abs(x.d_start - g.d_ts).max())
        print(f"   {str(rel)[:72]:<72} {int((g.d_kind == 0).sum()):>8} {il / 1e6:>11.3f} {rep / 1e6:>11.3f} "
              f"{100 * (rep - il) / il:>7.3f} {err:>17}")


def ground_truth(work: Path) -> None:
    print("== ground truth: synthetic workloads generated at another host speed / launch floor / with graphs "
          "(target: IL within 3%)")
    for kind in ("dense", "moe"):
        base = SyntheticConfig(model_kind=kind, n_layers=4, output_tokens=8, seed=11)
        variants = {"host 1.5x": (replace(base, host_speed=1.5), whatif.Scenario(host_speedup=1.5)),
                    "host 3x": (replace(base, host_speed=3.0), whatif.Scenario(host_speedup=3.0)),
                    "T_sys / 2": (replace(base, launch_latency=Dist("lognormal", 2300, 0.15)),
                                  whatif.Scenario(t_sys_scale=0.5)),
                    "graphs (decode)": (replace(base, cuda_graphs=True),
                                        whatif.Scenario(cuda_graph="decode", graph_keep_framework=False,
                                                        graph_gap_ns=800))}
        root = work / f"truth_{kind}"
        lake = Lake(root / "lake")
        base_id = ingest_file(write_kineto(base, root / "base.json.gz"), lake).trace_id
        ids = {k: ingest_file(write_kineto(c, root / f"v{i}.json.gz"), lake).trace_id
               for i, (k, (c, _)) in enumerate(variants.items())}
        con = analysis.connect(None)
        analysis.materialize(None, root / "lake", con=con, tables=TABLES)
        g = whatif.build_graph(con, root / "lake", base_id)
        print(f"   {kind}: base IL {_il(con, base_id) / 1e6:.3f} ms ({int((g.d_kind == 0).sum()):,} kernels)")
        for k, (_c, sc) in variants.items():
            truth = _il(con, ids[k])
            pred = _trace_scope(whatif.run_scenario(g, sc))["replay"]["il_ns"]
            note = "  (the generator's MoE graph steps drop the per-expert syncs a real graph keeps)" if (
                kind == "moe" and k.startswith("graphs")) else ""
            print(f"     {k:<16} predicted {pred / 1e6:9.3f} ms  generated {truth / 1e6:9.3f} ms  "
                  f"error {100 * (pred - truth) / truth:+6.2f}%{note}")


def real_capture(work: Path, delay_us: float) -> None:
    print(f"== real captures: --host-delay-us 0.001 vs {delay_us:g} (replay of the first capture with the "
          "delay per outermost framework op)")
    try:
        import torch  # noqa: F401

        from taxbreak.capture.profile import capture_generation
    except ImportError:
        print("   skipped: torch is not installed")
        return
    root = work / "real"
    lake = Lake(root / "lake")
    delay_ns = round(delay_us * 1000)
    # the baseline runs the same dispatch mode with a 1 ns delay: both captures carry the mode's own per-op cost
    a = capture_generation(root / "base.json.gz", output_tokens=6, warmup_runs=2, host_delay_ns=1)
    b = capture_generation(root / "delayed.json.gz", output_tokens=6, warmup_runs=2, host_delay_ns=delay_ns)
    ia, ib = ingest_file(a, lake).trace_id, ingest_file(b, lake).trace_id
    con = analysis.connect(None)
    analysis.materialize(None, root / "lake", con=con, tables=TABLES)
    ga, gb = whatif.build_graph(con, root / "lake", ia), whatif.build_graph(con, root / "lake", ib)
    sc = whatif.Scenario(host_delay_ns=delay_ns)
    if (ga.d_kind == 0).any() and (gb.d_kind == 0).any():
        pred = _trace_scope(whatif.run_scenario(ga, sc))["replay"]["il_ns"]
        own_a, own_b, what = _il(con, ia), _il(con, ib), "IL"
    else:
        pred = whatif.host_span(ga, whatif.replay(ga, sc))
        own_a, own_b = whatif.host_span(ga, whatif.observed(ga)), whatif.host_span(gb, whatif.observed(gb))
        what = "host timeline (CPU only: first step start to last step end)"
    print(f"   {what}: undelayed {own_a / 1e6:.3f} ms ({int(ga.h_leaf_ops.sum())} outermost ops), delayed "
          f"{own_b / 1e6:.3f} ms, predicted {pred / 1e6:.3f} ms, error {100 * (pred - own_b) / own_b:+.2f}%")


def speed(work: Path, n_kernels: int, model: str) -> None:
    print(f"== speed: replay of a {n_kernels:,}-kernel trace vs its ingest (target: replay faster)")
    probe = SyntheticConfig(model_kind=model)
    per_decode = kernels_per_step(probe, "decode")
    tokens = max(2, round(n_kernels / per_decode))
    cfg = replace(probe, output_tokens=tokens, seed=1)
    t0 = time.perf_counter()
    path = write_kineto(cfg, work / "big.json.gz")
    gen_s = time.perf_counter() - t0
    lake = Lake(work / "big_lake")
    t0 = time.perf_counter()
    tid = ingest_file(path, lake).trace_id
    ingest_s = time.perf_counter() - t0
    con = analysis.connect(None)
    t0 = time.perf_counter()
    analysis.materialize(None, work / "big_lake", con=con, tables=TABLES)
    analysis_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    g = whatif.build_graph(con, work / "big_lake", tid)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    whatif.replay(g)
    replay_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = whatif.run_scenario(g, whatif.Scenario(host_speedup=1.5))
    scenario_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sweep = whatif.run_scenarios(g, whatif.default_scenarios())
    sweep_s = time.perf_counter() - t0
    n_k = int((g.d_kind == 0).sum())
    print(f"   trace: {model}, {n_k:,} kernels, {g.n_host:,} host segments, {g.n_dev:,} device ops, "
          f"{int((g.h_await >= 0).sum()):,} waiting syncs; file {path.stat().st_size / 2**20:,.0f} MiB "
          f"(generated in {gen_s:.1f} s)")
    print(f"   ingest (reference)          {ingest_s:8.2f} s")
    print(f"   analysis tables it reads    {analysis_s:8.2f} s")
    print(f"   graph build (DuckDB)        {build_s:8.2f} s   ratio to ingest {build_s / ingest_s:.3f}")
    print(f"   replay, identity (numpy)    {replay_s:8.2f} s   ratio to ingest {replay_s / ingest_s:.3f}")
    print(f"   scenario host 1.5x (replay + figures + critical paths of {len(res['scopes']):,} scopes) "
          f"{scenario_s:.2f} s   ratio {scenario_s / ingest_s:.3f}")
    print(f"   default scenarios ({len(sweep)}) {sweep_s:.2f} s   ratio {sweep_s / ingest_s:.3f}")
    print(f"   build + identity replay     {build_s + replay_s:8.2f} s   ratio to ingest "
          f"{(build_s + replay_s) / ingest_s:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--model", choices=("dense", "moe"), default="dense")
    ap.add_argument("--skip-public", action="store_true")
    ap.add_argument("--skip-truth", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-capture", action="store_true")
    ap.add_argument("--host-delay-us", type=float, default=50.0, help="delay per op of the real capture check")
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_whatif_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if not args.skip_public:
            identity(work)
        if not args.skip_truth:
            ground_truth(work)
        if not args.skip_capture:
            real_capture(work, args.host_delay_us)
        if not args.skip_speed:
            speed(work, args.kernels, args.model)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
