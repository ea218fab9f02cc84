"""Benchmark: compute every analysis table on a synthetic trace of N kernels, and compare with ingest time.

    python bench/bench_analysis.py [--kernels 1000000] [--threads 2] [--keep DIR]
    python bench/bench_analysis.py --kernels 1000000 10000000   # issue 27's growth: 10x the kernels in <= 12x

Writes the synthetic lake partition (bench/gen_synthetic_lake.py), then times ``taxbreak.engine.analysis.materialize``
per table into a fresh DuckDB warehouse and prints the total, the peak RSS of the analysis (per table too, where
Linux lets the peak be reset), the DuckDB memory_limit in force and the figure it is compared with:
the Kineto ingest time of a trace with the same number of kernels written by bench/gen_kineto.py (measured on a
256 MiB file of it and scaled by size, or on the whole file with --full-ingest).  Without bench/gen_kineto.py the
comparison uses 150 MB/s (the low end of the Kineto adapter's 150-180 MB/s) over 330 B per event.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import duckdb  # noqa: E402
import gen_synthetic_lake  # noqa: E402

from taxbreak.engine import analysis  # noqa: E402

KINETO_MB_S = 150.0
KINETO_BYTES_PER_EVENT = 330


def _status_mb(field: str) -> float | None:
    """A /proc/self/status memory figure (VmHWM: peak RSS, VmRSS: current) in MB; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset the process's peak RSS (Linux: clear_refs 5), so that later peaks are the analysis's own."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _kineto_ingest_seconds(n_kernels: int, work: Path, full: bool) -> tuple[float, str] | None:
    """Ingest time of a Kineto trace of ``n_kernels`` kernels written by bench/gen_kineto.py: measured on the full
    file with ``full``, else measured on a 256 MiB file of the same generator and scaled by size."""
    try:
        import gen_kineto as mod  # beside this script (HERE is on sys.path)
    except ModuleNotFoundError:
        return None
    from taxbreak.ingest import Lake, ingest_file

    probe = work / "probe.pt.trace.json"
    mod.generate(probe, 4 << 20)
    with open(probe, "rb") as fh:
        probe_kernels = fh.read().count(b'"cat": "kernel"')
    bytes_per_kernel = probe.stat().st_size / max(probe_kernels, 1)
    probe.unlink()
    target = int(n_kernels * bytes_per_kernel)
    size = target if full else min(target, 256 << 20)
    path = work / "synthetic.pt.trace.json"
    mod.generate(path, size)
    actual = path.stat().st_size
    t0 = time.perf_counter()
    res = ingest_file(path, Lake(work / "kineto_lake"))
    secs = time.perf_counter() - t0
    path.unlink()
    if res.status != "ingested":
        return None
    mb_s = actual / 1e6 / secs
    if full:
        return secs, f"measured: ingest of the {actual / 1e6:,.0f} MB Kineto JSON of {n_kernels:,} kernels"
    return target / 1e6 / mb_s, (f"ingest measured at {mb_s:,.0f} MB/s on {actual / 1e6:,.0f} MB of "
                                 f"bench/gen_kineto.py output, scaled to its {target / 1e6:,.0f} MB "
                                 f"for {n_kernels:,} kernels "
                                 f"({bytes_per_kernel:,.0f} B per kernel); --full-ingest measures the whole file")


GROWTH_TARGET = 12.0  # issue 27: 10x the kernels in <= 12x the time (and within 1 GB at both sizes)


def _analyse(n_kernels: int, threads: int, work: Path, full_ingest: bool) -> dict:
    """One size: the synthetic lake written, every table computed (per-table lines printed), the ingest compared;
    returns the figures the growth line reads.  DuckDB's out-of-memory error stops the run at its table and is
    reported as such (``stopped``), not raised: the next size still runs."""
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # in a child process, so that the writer's memory is not counted in the analysis's RSS
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        trace_id, events = pool.submit(gen_synthetic_lake.write_lake, work / "lake", n_kernels).result()
    took = time.perf_counter() - t0
    print(f"synthetic trace: {n_kernels:,} kernels, {events:,} events (written in {took:.1f} s)")
    per_table = _reset_peak()  # the synthetic lake's writer is not the analysis
    if per_table:
        print(f"RSS before the analysis: {_status_mb('VmRSS') or 0:,.0f} MB")
    con = analysis.connect(work / "warehouse.duckdb")
    con.execute(f"SET threads = {int(threads)}")
    limit = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchone()
    print(f"DuckDB memory_limit {limit[0]} (env {analysis.MEMORY_ENV}), spilling to {limit[1]}")
    t0, cpu0 = time.perf_counter(), time.process_time()
    head = f"  {'table':<28} {'rows':>12} {'time':>9} {'CPU':>9}"
    print(head + (f" {'peak RSS':>11} {'RSS after':>11}" if per_table else ""))
    run_peak_mb = 0.0
    stopped = None
    current = "(prepare: run-local tables)"
    try:
        # the run's inputs and its run-local tables (stg_events, the int_* sweeps), computed into the scratch
        # database by prepare: each staged table's time on its own line ('> name'), inside prepare's total (their
        # own lines below then only count their rows)
        began: dict[str, tuple[float, float]] = {}

        def staging(name: str, done: bool) -> None:
            if not done:
                began[name] = (time.perf_counter(), time.process_time())
                return
            w, c = began.pop(name)
            staged = f"> {name}"
            print(f"  {staged:<28} {'':>12} {time.perf_counter() - w:7.2f} s {time.process_time() - c:7.2f} s",
                  flush=True)

        analysis.prepare(con, work / "lake", staging=staging)
        line = f"  {current:<28} {'':>12} {time.perf_counter() - t0:7.2f} s {time.process_time() - cpu0:7.2f} s"
        if per_table:
            peak, now = _status_mb("VmHWM") or 0.0, _status_mb("VmRSS") or 0.0
            run_peak_mb = peak
            line += f" {peak:8,.0f} MB {now:8,.0f} MB"
            _reset_peak()
        print(line)
        state = analysis._run_state(con)
        order = analysis.sql_files()
        files = {f.name: f for f in order}
        release = analysis.release_after([f.name for f in order])  # as taxbreak.engine.analysis.materialize does
        for f in order:
            current = f.name
            t1, c1 = time.perf_counter(), time.process_time()  # CPU: every thread of the process
            n = analysis._build(con, f.name, state, files)
            analysis.drop_run_local(con, release.get(f.name, []))
            line = f"  {f.name:<28} {n:>12,} {time.perf_counter() - t1:7.2f} s {time.process_time() - c1:7.2f} s"
            if per_table:
                peak, now = _status_mb("VmHWM") or 0.0, _status_mb("VmRSS") or 0.0
                run_peak_mb = max(run_peak_mb, peak)
                line += f" {peak:8,.0f} MB {now:8,.0f} MB"
                _reset_peak()
            print(line)
        con.execute("CHECKPOINT")
    except duckdb.OutOfMemoryException as exc:
        stopped = f"stopped in {current}: {str(exc).splitlines()[0]}"
        print(f"  {stopped}")
    total = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    con.close()
    if per_table:
        rss_mb = max(run_peak_mb, _status_mb("VmHWM") or 0.0)
        what = "peak RSS of the analysis"
    else:
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        what = "peak RSS of the process (synthetic lake writer included)"
    print(f"analysis (every table, {threads} threads, memory_limit {limit[0]}): {total:.1f} s "
          f"(CPU {cpu:.1f} s), {what} {rss_mb:,.0f} MB" + (f" -- {stopped}" if stopped else ""))
    measured = _kineto_ingest_seconds(n_kernels, work, full_ingest)
    if measured is not None:
        ingest_s, how = measured
    else:
        mb = events * KINETO_BYTES_PER_EVENT / 1e6
        ingest_s = mb / KINETO_MB_S
        how = (f"estimated: {events:,} events x {KINETO_BYTES_PER_EVENT} B = {mb:,.0f} MB of Kineto JSON at "
               f"{KINETO_MB_S:.0f} MB/s (no bench/gen_kineto.py to measure it)")
    print(f"ingest of the equivalent Kineto trace: {ingest_s:.1f} s ({how})")
    if stopped is None:
        verdict = "faster" if total < ingest_s else "SLOWER"
        print(f"analysis is {verdict} than ingest: {total:.1f} s vs {ingest_s:.1f} s")
    return {"kernels": n_kernels, "wall_s": total, "cpu_s": cpu, "rss_mb": rss_mb, "stopped": stopped}


def _growth(runs: list[dict]) -> None:
    """Each larger size against the smallest: time and CPU ratios beside the kernel ratio, judged by issue 27's
    target (10x the kernels in <= 12x the time, i.e. at most 1.2x linear), and the 1 GB peak RSS of every size."""
    base = runs[0]
    print(f"growth against {base['kernels']:,} kernels ({base['wall_s']:.1f} s, CPU {base['cpu_s']:.1f} s, "
          f"{base['rss_mb']:,.0f} MB):")
    for r in runs[1:]:
        x = r["kernels"] / base["kernels"]
        allowed = GROWTH_TARGET / 10 * x
        if r["stopped"] or base["stopped"]:
            print(f"  {r['kernels']:,} kernels ({x:g}x): no ratio, a run stopped "
                  f"({r['stopped'] or base['stopped']}): MISSED")
            continue
        wall, cpu = r["wall_s"] / base["wall_s"], r["cpu_s"] / base["cpu_s"]
        ok = wall <= allowed and cpu <= allowed and max(r["rss_mb"], base["rss_mb"]) <= 1000
        print(f"  {r['kernels']:,} kernels ({x:g}x): {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, "
              f"{r['rss_mb']:,.0f} MB: {wall:.1f}x the time, {cpu:.1f}x the CPU "
              f"(target <= {allowed:g}x, peak RSS <= 1,000 MB at both): {'ok' if ok else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, nargs="+", default=[1_000_000],
                    help="one or more sizes, run in turn; with several, the growth from the first is printed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", help="write lake and warehouse here and keep them (one folder per size)")
    ap.add_argument("--full-ingest", action="store_true", help="ingest the full-size Kineto JSON (GBs of disk)")
    args = ap.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="taxbreak-bench-"))
    runs = []
    try:
        for n in args.kernels:
            work = root / f"k{n}" if len(args.kernels) > 1 else root
            if len(args.kernels) == 1:
                runs.append(_analyse(n, args.threads, work, args.full_ingest))
                continue
            # each size in a fresh process: the memory an earlier size's run left in this one (240 MB after 1 M
            # kernels) would count in the next size's peak RSS
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                runs.append(pool.submit(_analyse, n, args.threads, work, args.full_ingest).result())
            sys.stdout.flush()
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        if len(runs) > 1:
            _growth(runs)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
