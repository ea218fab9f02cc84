"""Issue 12's figures: the cost of one more trace stays flat, traces dropped together run in parallel, and queries
over the per-trace marts stay close to the same queries over one DuckDB table.

    python bench/bench_marts.py [--traces 1000] [--small 10] [--kernels 1000] [--repeat 3] [--batch 8]
                                [--republish 100] [--lock-kernels 50000] [--out DIR]
                                [--skip one,backlog,lock,batch,queries]

1. **One more trace** through the Dagster path (sensor tick: hash, partition, ``trace_job`` in-process: ingest,
   tables, blocking checks, marts, snapshot, what-if) into a warehouse that already holds ``--small`` traces, and
   into one that holds ``--traces`` (synthetic traces of ``--kernels`` kernels written into the lake, analysed
   once and their partitions registered in the Dagster instance, before the clock starts), ``--repeat`` times
   each, alternating, so that load from other processes falls on both.  Target: the median of the second at most
   1.5x the median of the first.  **backlog**: the same once more right after a whole rewrite of each home's
   marts that replaced a layout of loose partitions only (what the first write after an upgrade from the layout
   of one file per trace and table leaves), with every replaced file due for deletion.
2. **``--batch`` traces dropped at once**: serially (one sensor run each, in-process) vs the batch job under the
   multiprocess executor (one ingest step per trace in parallel processes) followed by one analysis run over the
   batch (tag ``taxbreak/trace_ids``).  Target: at most 0.6x on 2 cores.  Then the sensor's runs themselves,
   ``--workers`` at a time in worker processes: their tables compute outside the writer lock, only the
   publications queue (no batching).
3. **lock**: how long one run for one trace (``--lock-kernels``) holds the warehouse's writer lock when it computes
   under it (a run over every trace still does) vs when it computes in its own file first
   (``taxbreak.engine.analysis.compute_run``) and holds the lock only to publish; ``--repeat`` times each, alternating.
4. **The documented queries** (``docs/queries/*.sql``) over the snapshot's views of the marts of ``--traces``
   traces vs the same queries on the DuckDB warehouse file (one table holding the same rows); best of 3 each.
   Target: at most 2x.  Measured on two layouts of the marts (``taxbreak.store.marts``): as a whole rewrite leaves them
   (one segment per table), and after ``--republish`` traces were published again one write each (the segment's
   rows of those traces superseded, tiers of compacted segments, loose partitions); the seconds of those writes
   (first and last tenth, the slowest: a compaction) and of a write with no traces of its own (the
   ``warehouse_exports`` step's work: pending markers, marts, snapshot, partition counts) with ``--small`` and
   ``--traces`` traces are printed too.

Every figure is printed beside its reference, measured in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))


def synthetic_traces(lake_root: Path, n: int, kernels: int) -> list[str]:
    """``n`` distinct synthetic traces (bench/gen_synthetic_lake.py's events, one trace id each) in the lake."""
    from gen_synthetic_lake import batches

    from taxbreak.ingest.base import TraceInfo
    from taxbreak.ingest.lake import Lake

    lake = Lake(lake_root)
    ids = []
    for i in range(n):
        tid = hashlib.sha256(f"bench-marts-{kernels}-{i}".encode()).hexdigest()
        steps = max(kernels // 1000, 1)
        meta = {"taxbreak_meta_version": 1, "model": f"synthetic-{i % 7}", "model_kind": "dense",
                "batch_size": 1 << (i % 4), "output_tokens": steps, "synthetic": True, "kind": "generation"}
        info = TraceInfo(source_format="kineto", gpu_names=["NVIDIA H100 80GB HBM3"], host_name="synthetic",
                         metadata={"taxbreak": meta})
        lake.write_events(tid, batches(tid, kernels), info, file_name=f"synthetic_{i}.json", source_path="",
                          file_bytes=0)
        ids.append(tid)
    return ids


def kineto_file(path: Path, n_kernels: int, seed: int) -> Path:
    from pipeline.conftest import write_kineto

    return write_kineto(path, n_kernels, base_us=1000.0 + seed)


def home_with(root: Path, n: int, kernels: int) -> dict[str, Path]:
    """A home whose warehouse holds ``n`` analysed synthetic traces (marts and snapshot published), their
    partitions registered in its Dagster instance as the sensor would have."""
    from taxbreak.engine.analysis import materialize
    from taxbreak.store.warehouse import writer

    paths = {"inbox": root / "inbox", "lake": root / "lake", "warehouse": root / "wh" / "taxbreak.duckdb",
             "cache": root / "cache", "dagster": root / "dagster_home"}
    for p in (paths["inbox"], paths["dagster"]):
        p.mkdir(parents=True, exist_ok=True)
    (paths["dagster"] / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    from taxbreak.ingest import Lake

    if Lake(paths["lake"]).catalogue().num_rows < n:  # a kept --out folder: the lake is already there
        synthetic_traces(paths["lake"], n, kernels)
    if not (paths["warehouse"].parent / "exports" / "snapshot.duckdb").exists():  # (a kept --out folder: analysed)
        with writer(paths["warehouse"]) as con:
            materialize(paths["warehouse"], paths["lake"], con=con)
    report = paths["warehouse"].parent / "reports" / "index.html"
    if not report.exists():  # the report the earlier runs' report steps wrote (one page per trace)
        import duckdb

        from taxbreak.read.report import write_report

        con = duckdb.connect(str(paths["warehouse"].parent / "exports" / "snapshot.duckdb"), read_only=True)
        try:
            write_report(con, report)
        finally:
            con.close()
    register_partitions(paths)
    return paths


def register_partitions(paths: dict[str, Path]) -> None:
    """The ``traces`` partition of every synthetic trace in the home's Dagster instance (what the sensor registers
    for each file), so the runs see as many partitions as traces."""
    import dagster as dg

    from taxbreak.ingest import Lake
    from taxbreak.pipeline.defs.ingest_assets import TRACES, partition_key_for

    use(paths)
    keys = [partition_key_for(r["file_name"], r["trace_id"]) for r in Lake(paths["lake"]).catalogue().to_pylist()
            if r["file_name"].startswith("synthetic_")]
    with dg.DagsterInstance.get() as instance:
        known = set(instance.get_dynamic_partitions(TRACES.name))
        if set(keys) - known:
            instance.add_dynamic_partitions(TRACES.name, sorted(set(keys) - known))


def use(paths: dict[str, Path]) -> None:
    os.environ.update({"TAXBREAK_INBOX": str(paths["inbox"]), "TAXBREAK_LAKE": str(paths["lake"]),
                       "TAXBREAK_WAREHOUSE": str(paths["warehouse"]), "TAXBREAK_CACHE": str(paths["cache"]),
                       "TAXBREAK_SETTLE_S": "0", "DAGSTER_HOME": str(paths["dagster"])})
    os.environ.pop("TAXBREAK_BUCKET", None)


def one_more_trace(paths: dict[str, Path], kernels: int) -> tuple[float, float, dict[str, float]]:
    """Seconds for one sensor evaluation and the ``trace_job`` run it asks for (in-process) that ingests and
    analyses one new trace, the CPU seconds of this process meanwhile (every thread: DuckDB's too; less disturbed
    by other processes' load than the wall time), and the seconds of each step, the report's included (it reads
    and redraws the new trace's page and the index)."""
    import dagster as dg

    from taxbreak.pipeline.defs.ingest_assets import TRACE_ID_TAG
    from taxbreak.pipeline.local import evaluate_sensor, load_defs

    use(paths)
    n = len(os.listdir(paths["inbox"]))
    kineto_file(paths["inbox"] / f"new-{n}.json", kernels, seed=n)
    defs = load_defs()
    job = defs.resolve_job_def("trace_job")
    with dg.DagsterInstance.get() as instance:
        t0, c0 = time.perf_counter(), time.process_time()
        data = evaluate_sensor(defs, instance)
        for req in data.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        (request,) = data.run_requests
        quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
        result = job.execute_in_process(run_config={**dict(request.run_config or {}), **quiet}, instance=instance,
                                        partition_key=request.partition_key, tags=dict(request.tags))
        took, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert result.success, "the run failed"
        from taxbreak.ingest import Lake

        # a file that fails to ingest is not a failed run (the tables stay as they are): that would time nothing
        tid = dict(request.tags).get(TRACE_ID_TAG)
        row = Lake(paths["lake"]).catalogue_row(tid) if tid else None
        assert row is not None and row["status"] == "ingested", f"not ingested: {row and row['error']}"
        starts: dict[str, float] = {}
        steps: dict[str, float] = {}
        for rec in instance.all_logs(result.run_id):
            ev = rec.dagster_event
            if ev is not None and ev.is_step_start:
                starts[ev.step_key] = rec.timestamp
            elif ev is not None and ev.is_step_success:
                steps[ev.step_key] = rec.timestamp - starts[ev.step_key]
    return took, cpu, steps


def batch_serial(paths: dict[str, Path], files: list[Path]) -> float:
    import dagster as dg

    from taxbreak.pipeline.local import load_defs, tick

    use(paths)
    for f in files:
        shutil.copyfile(f, paths["inbox"] / f.name)
    defs = load_defs()
    with dg.DagsterInstance.get() as instance:
        t0 = time.perf_counter()
        result = tick(defs, instance)
        took = time.perf_counter() - t0
    assert len(result.runs) == len(files) and all(r.success for r in result.runs)
    return took


def batch_parallel(paths: dict[str, Path], files: list[Path], workers: int) -> float:
    import dagster as dg

    from taxbreak.ingest import Lake
    from taxbreak.pipeline import local
    from taxbreak.pipeline.defs.analysis_assets import TRACES_TAG, range_tags
    from taxbreak.pipeline.defs.ingest_assets import key_matches

    use(paths)
    for f in files:
        shutil.copyfile(f, paths["inbox"] / f.name)
    before = {r["trace_id"] for r in Lake(paths["lake"]).catalogue().to_pylist()}  # the home's analysed traces
    with dg.DagsterInstance.get() as instance:
        t0 = time.perf_counter()
        with dg.execute_job(dg.reconstructable(local.ingest_batch_job), instance=instance, run_config={
                "execution": {"config": {"max_concurrent": workers, "start_method": {
                    "forkserver": {"preload_modules": ["taxbreak.pipeline.preload"]}}}}}) as ingest:
            assert ingest.success
        # the batch's traces only (the home's others were analysed before, as the serial home's were)
        ids = [r["trace_id"] for r in Lake(paths["lake"]).catalogue().to_pylist() if r["trace_id"] not in before]
        assert len(ids) == len(files), (len(ids), len(files))
        # the tables are `traces` partitions: the run spans the batch's keys (registered together, one range)
        keys = [k for k in instance.get_dynamic_partitions("traces") if any(key_matches(k, t) for t in ids)]
        with dg.execute_job(dg.reconstructable(local.refresh_job), instance=instance,
                            tags={TRACES_TAG: ",".join(ids), **range_tags(keys)}, run_config={"execution": {"config": {
                                "max_concurrent": workers, "start_method": {
                                    "forkserver": {"preload_modules": ["taxbreak.pipeline.preload"]}}}}}) as tables:
            assert tables.success
        took = time.perf_counter() - t0
    return took


def _warm(paths: dict[str, Path]) -> None:
    """A worker process's start: the home's environment and the job definitions loaded (as the serial run's are)."""
    from taxbreak.pipeline.local import load_defs

    use(paths)
    load_defs()


def _execute(requests: list[tuple[str, dict[str, str], dict]]) -> list[bool]:
    """In a worker process: the sensor's runs ``(partition key, tags, run config)``, one after the other."""
    import dagster as dg

    from taxbreak.pipeline.local import execute_request, load_defs

    defs = load_defs()
    with dg.DagsterInstance.get() as instance:
        return [execute_request(defs, instance, dg.RunRequest(partition_key=key, tags=tags, run_config=config)).success
                for key, tags, config in requests]


def batch_concurrent(paths: dict[str, Path], files: list[Path], workers: int) -> float:
    """The sensor's one ``trace_job`` run per file, ``workers`` runs at a time (each worker process started and
    its definitions loaded before the clock starts, as the serial reference's are): each run's tables are
    computed outside the writer lock (taxbreak.engine.analysis.compute_run), so only their publications queue."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import dagster as dg

    from taxbreak.pipeline.local import evaluate_sensor, load_defs

    use(paths)
    for f in files:
        shutil.copyfile(f, paths["inbox"] / f.name)
    defs = load_defs()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_warm, initargs=(paths,)) as pool:
        list(pool.map(_warm, [paths] * workers))  # every worker started and warm
        with dg.DagsterInstance.get() as instance:
            t0 = time.perf_counter()
            data = evaluate_sensor(defs, instance)
            for req in data.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            requests = [(r.partition_key, dict(r.tags), dict(r.run_config or {})) for r in data.run_requests or []]
            shares = [requests[i::workers] for i in range(workers)]
            done = [ok for part in pool.map(_execute, shares) for ok in part]
            took = time.perf_counter() - t0
    assert len(done) == len(files) and all(done), done
    return took


def lock_held(paths: dict[str, Path], kernels: int, repeat: int) -> list[tuple[float, float, float]]:
    """One trace of ``kernels`` kernels re-analysed ``repeat`` times each way, alternating: (seconds the warehouse's
    writer lock is held when the run computes under it, as a run over every trace still does and a run for some
    traces did before; seconds a run computes outside it, ``compute_run``; seconds its publication then holds it,
    ``publish_run``), each including the marts and snapshot of that trace."""
    from taxbreak.engine.analysis import compute_run, materialize, publish_run
    from taxbreak.ingest.lake import Lake
    from taxbreak.store.warehouse import writer

    tid = hashlib.sha256(f"bench-marts-{kernels}-0".encode()).hexdigest()  # synthetic_traces' first id
    if Lake(paths["lake"]).catalogue_row(tid) is None:  # (a kept --out folder: already there)
        synthetic_traces(paths["lake"], 1, kernels)
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        with writer(paths["warehouse"], traces=[tid]) as con:
            materialize(paths["warehouse"], paths["lake"], trace_ids=[tid], con=con)
        under = time.perf_counter() - t0
        t0 = time.perf_counter()
        with compute_run(paths["warehouse"], paths["lake"], [tid]) as run:
            t1 = time.perf_counter()
            with writer(paths["warehouse"], traces=run.trace_ids) as con:
                publish_run(con, run)
            t2 = time.perf_counter()
        out.append((under, t1 - t0, t2 - t1))
    return out


def whole_rewrite_over_loose(paths: dict[str, Path]) -> int:
    """Lay the home's marts out as loose partitions only (a whole rewrite that may not compact), then rewrite them
    whole into one segment (which replaces every one of those partitions); returns how many files the layout
    replaced."""
    from taxbreak.store.marts import load_manifest, marts_dir
    from taxbreak.store.warehouse import writer

    os.environ["TAXBREAK_MARTS_COMPACT_LOOSE"] = str(1 << 30)
    try:
        with writer(paths["warehouse"]):
            pass
    finally:
        del os.environ["TAXBREAK_MARTS_COMPACT_LOOSE"]
    with writer(paths["warehouse"]):
        pass
    return len(load_manifest(marts_dir(paths["warehouse"])).replaced)


def median(xs: list[float]) -> float:
    ys = sorted(xs)
    return (ys[(len(ys) - 1) // 2] + ys[len(ys) // 2]) / 2


def empty_write(paths: dict[str, Path]) -> float:
    """Seconds of the ``warehouse_exports`` step's work: a write with no traces of its own (pending markers, marts,
    snapshot, replaced files) and the count of every table's traces, best of 3."""
    from taxbreak.store.marts import marts_dir, partitions
    from taxbreak.store.warehouse import writer

    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        with writer(paths["warehouse"], traces=[]):
            pass
        root = marts_dir(paths["warehouse"])
        _counts = {d.name: len(partitions(d)) for d in sorted(root.iterdir()) if d.is_dir() and d.name[0] not in "._"}
        best = min(best, time.perf_counter() - t0)
    return best


def republish(paths: dict[str, Path], n: int) -> list[float]:
    """Seconds of each of ``n`` writes that publish one trace again (its marts, compaction when due, snapshot)."""
    import duckdb

    from taxbreak.store.warehouse import writer

    with duckdb.connect(str(paths["warehouse"]), read_only=True) as con:
        ids = [r[0] for r in con.execute("SELECT trace_id FROM trace_meta ORDER BY trace_id LIMIT $n", {"n": n})
               .fetchall()]
    took = []
    for tid in ids:
        t0 = time.perf_counter()
        with writer(paths["warehouse"], traces=[tid]):
            pass
        took.append(time.perf_counter() - t0)
    return took


def layout(paths: dict[str, Path]) -> str:
    from taxbreak.store.marts import load_manifest, marts_dir

    m = load_manifest(marts_dir(paths["warehouse"]))
    tiers: dict[int, int] = {}
    for s in m.segments.values():
        tiers[s["tier"]] = tiers.get(s["tier"], 0) + 1
    superseded = sum(len(m.superseded(sid)) for sid in m.segments)
    return (f"{len(m.segments)} segment(s) per table (by tier: {dict(sorted(tiers.items()))}), {superseded} "
            f"superseded trace(s) left out, {len(m.loose())} loose partition(s)")


def queries(paths: dict[str, Path]) -> tuple[float, float, int]:
    """Best-of-3 seconds of every docs/queries/*.sql on the snapshot (views over the marts) and on the warehouse
    file (one table each), and the number of queries; the results are compared row for row."""
    import duckdb

    from taxbreak.store.warehouse import snapshot_path

    texts = [p.read_text() for p in sorted((REPO / "docs" / "queries").glob("*.sql"))]
    timings = {}
    results = {}
    for label, db in (("marts", snapshot_path(paths["warehouse"])), ("table", paths["warehouse"])):
        con = duckdb.connect(str(db), read_only=True)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            out = [sorted(map(repr, con.execute(q).fetchall())) for q in texts]
            best = min(best, time.perf_counter() - t0)
        timings[label] = best
        results[label] = out
        con.close()
    # the same row counts (the queries' LIMITs cut through ties between identical synthetic traces, so the rows
    # kept may differ), and every table holds exactly the same rows and types in both
    assert [len(r) for r in results["marts"]] == [len(r) for r in results["table"]]
    con = duckdb.connect()
    con.execute(f"ATTACH '{snapshot_path(paths['warehouse'])}' AS s (READ_ONLY)")
    con.execute(f"ATTACH '{paths['warehouse']}' AS w (READ_ONLY)")
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'w'").fetchall()]
    for t in tables:
        types = "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = $d AND table_name = $t " \
                "ORDER BY column_index"
        assert con.execute(types, {"d": "s", "t": t}).fetchall() == con.execute(types, {"d": "w", "t": t}).fetchall()
        diff = con.execute(f'SELECT (SELECT count(*) FROM (FROM s."{t}" EXCEPT ALL FROM w."{t}")) + '
                           f'(SELECT count(*) FROM (FROM w."{t}" EXCEPT ALL FROM s."{t}"))').fetchone()[0]
        assert diff == 0, f"{t}: the marts and the table disagree on {diff} rows"
    con.close()
    return timings["marts"], timings["table"], len(texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=1000)
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--kernels", type=int, default=1000, help="kernels per synthetic trace")
    ap.add_argument("--repeat", type=int, default=3, help="one-more-trace runs per home (alternating)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one, removed)")
    ap.add_argument("--republish", type=int, default=100, help="traces published again one by one (queries part)")
    ap.add_argument("--lock-kernels", type=int, default=50_000, help="kernels of the trace the lock part re-analyses")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: one,backlog,lock,batch,queries")
    args = ap.parse_args()
    # the full analysis of every synthetic trace at once (the setup) needs more than the 512MB default
    os.environ.setdefault("TAXBREAK_DUCKDB_MEMORY", "4GB")
    skip = set(args.skip.split(","))
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-marts-"))
    try:
        t0 = time.perf_counter()
        small = home_with(work / "small", args.small, args.kernels)
        big = home_with(work / "big", args.traces, args.kernels)
        print(f"setup: {args.small} and {args.traces} synthetic traces of {args.kernels:,} kernels analysed in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        if "one" not in skip:
            runs: dict[str, list[tuple[float, float, dict[str, float]]]] = {"small": [], "big": []}
            for i in range(args.repeat):  # alternating (and which goes first): other processes' load falls on both
                for k in ("small", "big") if i % 2 == 0 else ("big", "small"):
                    runs[k].append(one_more_trace(small if k == "small" else big, 2000))
            s, b = (median([t for t, _, _ in runs[k]]) for k in ("small", "big"))
            s_cpu, b_cpu = (median([c for _, c, _ in runs[k]]) for k in ("small", "big"))
            print(f"one more trace (2,000 kernels) through the Dagster path (sensor, ingest, tables, checks, marts, "
                  f"snapshot, what-if, report), median of {args.repeat}: {s:.2f} s with {args.small} "
                  f"traces, {b:.2f} s with {args.traces} traces: {b / s:.2f}x (target <= 1.5x); CPU {s_cpu:.2f} s "
                  f"vs {b_cpu:.2f} s: {b_cpu / s_cpu:.2f}x; the runs: "
                  + ", ".join(f"{x[0]:.2f} vs {y[0]:.2f} s" for x, y in zip(runs["small"], runs["big"], strict=True)),
                  flush=True)
            for step in runs["small"][0][2]:
                sm, bm = (median([st.get(step, float("nan")) for _, _, st in runs[k]]) for k in ("small", "big"))
                print(f"  step {step:<40} {sm:6.2f} s  {bm:6.2f} s (medians)")
        if "backlog" not in skip:
            from taxbreak.store.marts import COLLECT_PER_WRITE

            due = {k: whole_rewrite_over_loose(h) for k, h in (("small", small), ("big", big))}
            os.environ["TAXBREAK_MARTS_KEEP_REPLACED_S"] = "0"  # every replaced file due for deletion
            try:
                s, s_cpu, s_steps = one_more_trace(small, 2000)
                b, b_cpu, b_steps = one_more_trace(big, 2000)
            finally:
                del os.environ["TAXBREAK_MARTS_KEEP_REPLACED_S"]
            print(f"one more trace right after a whole rewrite that replaced a layout of loose partitions only "
                  f"({due['small']:,} and {due['big']:,} replaced files due for deletion): {s:.2f} s with "
                  f"{args.small} traces, {b:.2f} s with {args.traces} traces: {b / s:.2f}x; CPU {s_cpu:.2f} s vs "
                  f"{b_cpu:.2f} s: {b_cpu / s_cpu:.2f}x (a write for some traces deletes at most "
                  f"{COLLECT_PER_WRITE} of them)", flush=True)
            for step in s_steps:
                print(f"  step {step:<40} {s_steps[step]:6.2f} s  {b_steps.get(step, float('nan')):6.2f} s")
        if "queries" not in skip:
            from taxbreak.store.warehouse import writer

            t0 = time.perf_counter()
            with writer(big["warehouse"]):  # a whole rewrite: every trace, one segment per table
                pass
            print(f"whole rewrite of the marts of {args.traces} traces: {time.perf_counter() - t0:.2f} s; "
                  f"{layout(big)}", flush=True)
            m, t, n = queries(big)
            print(f"docs/queries ({n} queries, best of 3) over {args.traces} traces: marts {m:.3f} s, one DuckDB "
                  f"table each {t:.3f} s: {m / t:.2f}x (target <= 2x)", flush=True)
            took = republish(big, args.republish)
            tenth = max(len(took) // 10, 1)
            print(f"{len(took)} traces published again, one write each: first {tenth} {sum(took[:tenth]) / tenth:.2f} "
                  f"s each, last {tenth} {sum(took[-tenth:]) / tenth:.2f} s each, mean {sum(took) / len(took):.2f} s, "
                  f"slowest {max(took):.2f} s; {layout(big)}", flush=True)
            m, t, n = queries(big)
            print(f"docs/queries over that layout: marts {m:.3f} s, one DuckDB table each {t:.3f} s: {m / t:.2f}x "
                  "(target <= 2x)", flush=True)
            s_w, b_w = empty_write(small), empty_write(big)
            print(f"a write with no traces of its own (warehouse_exports: marts, snapshot, partition counts): "
                  f"{s_w:.2f} s with {args.small} traces, {b_w:.2f} s with {args.traces}: {b_w / s_w:.2f}x",
                  flush=True)
        if "lock" not in skip:
            held = lock_held(small, args.lock_kernels, args.repeat)
            under, outside, publish = (median([h[i] for h in held]) for i in range(3))
            print(f"one trace of {args.lock_kernels:,} kernels re-analysed, median of {args.repeat}: the writer lock "
                  f"held {under:.2f} s when the run computes under it, {publish:.2f} s when it computes outside it "
                  f"({outside:.2f} s, no lock) and only publishes under it: {publish / under:.2f}x; the runs: "
                  + ", ".join(f"{u:.2f} vs {o:.2f} + {p:.2f} s" for u, o, p in held), flush=True)
        if "batch" not in skip:
            files = [kineto_file(work / "drop" / f"t{i}.json", 2000, seed=10_000 + i) for i in range(args.batch)]
            ser = batch_serial(home_with(work / "serial", args.small, args.kernels), files)
            par = batch_parallel(home_with(work / "parallel", args.small, args.kernels), files, args.workers)
            print(f"{args.batch} traces dropped at once: serial {ser:.2f} s, multiprocess batch ({args.workers} "
                  f"workers, {os.cpu_count()} cores) {par:.2f} s: {par / ser:.2f}x (target <= 0.6x)", flush=True)
            con = batch_concurrent(home_with(work / "concurrent", args.small, args.kernels), files, args.workers)
            print(f"{args.batch} traces dropped at once as one run each, {args.workers} runs at a time (their tables "
                  f"computed outside the writer lock): {con:.2f} s: {con / ser:.2f}x the serial runs", flush=True)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
