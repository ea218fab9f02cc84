"""Per-request attribution at real trace sizes (issue 26): a serving run of --steps engine steps (default 10^6) with
its request lists in a streaming side file, through the whole path, each stage a process of its own whose wall time
and peak RSS are printed:

    .venv/bin/python bench/bench_request_lists.py [--steps 1000000] [--seed 0] [--workdir DIR]

SYNTHETIC (nothing measured): the continuous-batching scheduler of ``taxbreak.capture.synthetic_serving`` (chunked
prefill, every 8th step with prompts prefill-first) with its known costs and 2% lognormal noise, written as a lean
Kineto trace (one ``serve_step#N`` annotation per step, no kernels: the request lists are what grows) and
``<trace>.requests.jsonl.gz`` (one JSON object per step), both streamed as the scheduler runs. Stages:
``taxbreak ingest`` (the trace and its request list into the lake), ``taxbreak analyze`` (serving_steps and
serving_step_requests among every table), ``taxbreak requests --refit`` (the fit and the attribution SQL). Then
the fit against the known truth per step kind, and PASS/FAIL for the issue's target: every stage within 1 GB peak
RSS. ``--ingest-only`` stops after the ingest (the request list's stage alone). docs/sidecar.md has the figures.
"""

from __future__ import annotations

import argparse
import array
import gzip
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taxbreak.capture.synthetic import MONO_START_NS, _write_kineto_file  # noqa: E402
from taxbreak.capture.synthetic_serving import (  # noqa: E402
    ServingConfig,
    make_requests,
    mixed_shares,
    schedule,
    step_name,
    step_phase,
)

STEPS_PER_REQUEST = 3.0  # fewer than the ~3.2 steps per request of this workload: the run is cut at --steps
RSS_TARGET_BYTES = 1 << 30


def generate(out: Path, steps: int, seed: int) -> tuple[Path, dict[str, np.ndarray]]:
    """Stream the workload to ``out``: the trace and its request list. Returns the trace path and, per step, the
    phase, the known cost (noise-free) and the true prefill fraction."""
    cfg = ServingConfig(n_requests=max(10, int(steps / STEPS_PER_REQUEST)), policy="chunked", arrivals_per_step=0.3,
                        seed=seed, prefill_only_every=8)
    rng = random.Random(cfg.seed + 1)
    lat, cost, frac, kind = array.array("q"), array.array("d"), array.array("d"), array.array("b")
    out.mkdir(parents=True, exist_ok=True)
    trace = out / f"served_{steps}.json.gz"
    lists = trace.with_name(trace.name + ".requests.jsonl.gz")
    kinds = {"prefill": 0, "decode": 1, "mixed": 2}
    with gzip.open(lists, "wt", compresslevel=1) as fh:
        for i, batch in enumerate(schedule(make_requests(cfg), max_batch_requests=cfg.max_batch_requests,
                                           max_batch_tokens=cfg.max_batch_tokens, policy=cfg.policy,
                                           prefill_only_every=cfg.prefill_only_every)):
            if i >= steps:
                break
            costs, pre, dec = mixed_shares(cfg.truth, batch, cfg.mixed_shared_ns)
            total = sum(costs)
            lat.append(max(1, round(total * math.exp(rng.gauss(0.0, cfg.noise_sigma)))))
            cost.append(total)
            frac.append(pre / (pre + dec) if pre + dec > 0 else float("nan"))
            kind.append(kinds[step_phase(batch)])
            fh.write(json.dumps({"step": step_name(i), "requests": batch}, separators=(",", ":")) + "\n")

    def records():  # one annotation per step, 20 us apart (the records of taxbreak.capture.synthetic)
        t = MONO_START_NS + 10_000
        for i, v in enumerate(lat):
            yield ("ann", step_name(i), t, v, 100 + i)
            t += v + 20_000

    meta = {"taxbreak_meta_version": 1, "kind": "generation", "model": cfg.model_name, "gpu_name": cfg.gpu_name,
            "synthetic": True}
    _write_kineto_file(trace, meta, records(), cfg.gpu_name, seed)
    names = {v: k for k, v in kinds.items()}
    return trace, {"phase": np.array([names[k] for k in kind]), "cost": np.frombuffer(cost, dtype=np.float64),
                   "frac": np.frombuffer(frac, dtype=np.float64)}


def stage(label: str, argv: list[str]) -> tuple[float, int]:
    """Run one CLI stage as a child process; its wall time (s) and peak RSS (bytes)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "taxbreak.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    rss = usage.ru_maxrss * 1024  # kilobytes on Linux
    print(f"  {label:<22} {wall:8.1f} s   peak RSS {rss / 2**20:7.0f} MiB   (exit {proc.returncode})")
    if proc.returncode != 0:
        print("    " + "\n    ".join(out.strip().splitlines()[-8:]))
        raise SystemExit(f"{label} failed")
    return wall, rss


def pct(v: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return f"p50 {p50:6.2%} p90 {p90:6.2%} p99 {p99:6.2%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None, help="where the files go (default: a temporary folder)")
    ap.add_argument("--ingest-only", action="store_true", help="stop after the ingest (the request list's stage)")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="taxbreak-bench-lists-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"SYNTHETIC serving run of {args.steps:,} steps (known costs; nothing measured) in {work}")
    t0 = time.perf_counter()
    trace, truth = generate(work / "in", args.steps, args.seed)
    lists = trace.with_name(trace.name + ".requests.jsonl.gz")
    print(f"  generated in {time.perf_counter() - t0:.1f} s: trace {trace.stat().st_size / 2**20:.1f} MiB, request "
          f"list {lists.stat().st_size / 2**20:.1f} MiB gzip")
    lake, wh = work / "lake", work / "wh.duckdb"
    results = [stage("ingest", ["ingest", str(trace), "--lake", str(lake), "-q"])]
    if args.ingest_only:
        rows = duckdb.connect().execute("SELECT count(*), count(DISTINCT step_name) FROM read_parquet($p)",
                                        {"p": str(next((lake / "requests").glob("*/part-0.parquet")))}).fetchone()
        print(f"  in the lake: {rows[1]:,} steps, {rows[0]:,} rows of request lists")
        ok = results[0][1] <= RSS_TARGET_BYTES
        print(f"  {'PASS' if ok else 'FAIL'}: ingest of {args.steps:,} steps with request lists within "
              f"{RSS_TARGET_BYTES / 2**30:.0f} GB peak RSS")
        return 0 if ok else 1
    results += [stage("analyze", ["analyze", "--lake", str(lake), "--warehouse", str(wh), "-q"]),
                stage("requests --refit", ["requests", "--refit", "--warehouse", str(wh)])]
    con = duckdb.connect(str(wh), read_only=True)
    n_steps, n_req = con.execute("SELECT count(*), sum(batch_requests) FROM serving_steps").fetchone()
    n_rows = con.execute("SELECT count(*) FROM serving_step_requests").fetchone()[0]
    print(f"  in the warehouse: {n_steps:,} serving steps, {n_rows:,} request-steps (sum |B| {n_req:,})")
    d = con.execute("SELECT step_id, phase, predicted_ns, prefill_fraction FROM request_step_fit "
                    "ORDER BY step_id").fetchnumpy()
    con.close()
    idx = np.asarray(d["step_id"], dtype=np.int64) - 1
    pred, cost = np.asarray(d["predicted_ns"], dtype=np.float64), truth["cost"][idx]
    for ph in ("prefill", "decode", "mixed"):
        m = np.asarray(d["phase"]) == ph
        if not m.any():
            continue
        e = np.abs(pred[m] - cost[m]) / cost[m]
        r2 = 1 - np.sum((cost[m] - pred[m]) ** 2) / np.sum((cost[m] - cost[m].mean()) ** 2)
        line = f"  {ph:<8} {int(m.sum()):>9,} steps  vs truth R2 {r2:.4f}  step error {pct(e)}"
        if ph == "mixed":
            split = np.abs(np.asarray(d["prefill_fraction"], dtype=np.float64)[m] - truth["frac"][idx][m]) * 100
            line += f"  split p90 {np.percentile(split, 90):.2f} points"
        print(line)
    total = sum(w for w, _ in results)
    peak = max(r for _, r in results)
    ok = peak <= RSS_TARGET_BYTES and n_steps == args.steps and n_rows == n_req
    print(f"  total {total:.1f} s; peak RSS {peak / 2**20:.0f} MiB of the largest stage")
    print(f"  {'PASS' if ok else 'FAIL'}: {args.steps:,} steps with request lists ingested and attributed, every "
          f"stage within {RSS_TARGET_BYTES / 2**30:.0f} GB peak RSS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
