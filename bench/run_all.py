"""Every benchmark figure as a ratio to a reference measured in the same invocation, on the same file.

    python bench/run_all.py                         # Kineto 64 MiB, Nsight 1 M rows: a few minutes on 2 cores
    python bench/run_all.py --size-mib 512          # the 500 MB targets (peers included: long, GBs of RAM)
    python bench/run_all.py --size-mib 2048 --only kineto   # memory at 2 GiB: ingest and the plain route only
    make bench / make bench ARGS="--size-mib 512"

Each measured thing runs in its own child process (``os.wait4`` gives that child's own peak RSS and CPU time),
one after the other, so that nothing measured shares the machine with another measured thing of this run;
``--repeat N`` runs every one N times, interleaved, and keeps the fastest wall time (and the highest RSS).
Absolute times move with the machine and with whatever else runs on it; the ratio to a reference run in the
same invocation is the figure.  The references:

- Kineto ingest vs the plain route: copy the ``traceEvents`` byte range out of the file, DuckDB ``read_json``
  of it into one Parquet file, DuckDB's defaults (all cores, no normalisation, no checks).
- Kineto ingest + analysis vs the peers' load + analysis on the same file: HTA (PyPI ``traceinsight``) with its
  ns rounding (the default) and without (HTA_DISABLE_NS_ROUNDING=1), and AMD TraceLens; their launch statistics
  and temporal/idle breakdown calls (bench/peers.py, run in .venv-bench: ``make bench-env``).  Skipped, with the
  reason printed, where .venv-bench or a tool is missing.
- Analysis (every table of ``taxbreak.engine.analysis.materialize``) vs the ingest of the same trace, and vs the peers'
  analysis calls alone (their load excluded).
- Nsight SQLite ingest vs a plain ADBC copy of every table of the export into Parquet, and vs ``nsys stats``
  (kernel and CUDA API summaries) where an nsys is found ($TAXBREAK_NSYS, PATH, or .venv/nsys from
  tests/ingest/setup_nsys.sh).
- ``make demo`` on a fresh clone of HEAD (no ``../shared`` beside it): the time to its first summary line vs the
  time of its own set-up, the venv and ``pip install`` of the pinned files (bench/bench_demo.py; ``--only demo``).

Ratios are "how many times the reference's time ours takes" turned so that higher is better for throughput
(reference wall / our wall); CPU ratios (reference CPU-s / our CPU-s, all threads) are printed beside them
because CPU time moves less than wall time on a shared machine.  Results also go to
bench/out/results_<size>MiB.json (a run with --only: results_<size>MiB_<sections>.json, so it never replaces a
full run's figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BENCH_VENV_PY = ROOT / ".venv-bench" / "bin" / "python"
TARGETS = {
    "kineto_vs_plain": 1.5,  # ours >= 1.5x the plain route's throughput, in wall and in CPU (issue 27)
    "kineto_rss_mb": 500.0,  # peak RSS of the Kineto ingest
    "vs_peers": 5.0,  # ingest + analysis >= 5x faster than the peers' load + analysis
    "analysis_rss_mb": 1000.0,  # peak RSS of the analysis
    "nsys_vs_plain": 2.0,  # Nsight SQLite ingest >= 2x a plain ADBC copy of every table, wall and CPU (issue 27)
}


# -- child tasks (run as `python bench/run_all.py --task NAME ARGS...`) -----------------------------------------
def _task_kineto_ingest(trace: str, work: str) -> dict:
    from taxbreak.ingest import Lake, ingest_file

    res = ingest_file(Path(trace), Lake(Path(work) / "lake"), tmp_dir=Path(work))
    row = res.row or {}
    return {"status": res.status, "error": res.error, "events": row.get("event_count")}


def _events_byte_range(path: Path) -> tuple[int, int]:
    """(offset of the traceEvents '[', offset after its ']'): the key in the head, the last ']' in the tail."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
        m = re.search(rb'"traceEvents"\s*:\s*\[', head)
        if m is None:
            raise SystemExit(f"{path}: no traceEvents key in the first MiB")
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - (1 << 20)))
        tail = fh.read()
    return m.end() - 1, size - len(tail) + tail.rindex(b"]") + 1


def _task_kineto_plain(trace: str, work: str) -> dict:
    """The plain route: the events array's bytes copied out, DuckDB read_json -> Parquet, DuckDB's defaults."""
    import duckdb

    start, end = _events_byte_range(Path(trace))
    events = Path(work) / "events.json"
    with open(trace, "rb") as src, open(events, "wb") as out:
        pos = start
        while pos < end:
            n = os.copy_file_range(src.fileno(), out.fileno(), end - pos, pos)
            if n == 0:
                break
            pos += n
    con = duckdb.connect()
    con.execute("SET temp_directory = $t", {"t": str(Path(work) / "duckdb_tmp")})
    con.execute("COPY (SELECT * FROM read_json($p, format = 'array')) TO '" + str(Path(work) / "events.parquet")
                + "' (FORMAT parquet)", {"p": str(events)})
    rows = con.execute("SELECT count(*) FROM read_parquet($p)", {"p": str(Path(work) / "events.parquet")}).fetchone()
    return {"status": "ingested", "events": rows[0], "threads": con.execute(
        "SELECT current_setting('threads')").fetchone()[0]}


def _vm_hwm_mb() -> float | None:
    """This process's peak RSS so far (Linux /proc/self/status VmHWM) in MB; None elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        return None
    return None


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux clear_refs 5), so that the next peak is the next table's own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _task_analysis(lake: str, warehouse: str) -> dict:
    from taxbreak.engine import analysis

    peaks: dict[str, float] = {"(start)": _vm_hwm_mb() or 0.0}  # resetting VmHWM resets ru_maxrss too

    cpu_s: dict[str, float] = {}
    started = [time.process_time()]

    def progress(name: str, index: int, total: int, rows: int | None) -> None:
        if rows is None:
            if index == 1:  # prepare (index 0) has no end call: it ends where the first table starts
                cpu_s["prepare (run-local tables)"] = time.process_time() - started[0]
                peak = _vm_hwm_mb()
                if peak is not None:
                    peaks["prepare (run-local tables)"] = peak
            _reset_peak()
            started[0] = time.process_time()
            return
        cpu_s[name] = time.process_time() - started[0]  # all threads of the process
        peak = _vm_hwm_mb()
        if peak is not None:
            peaks[name] = peak

    con = analysis.connect(warehouse)
    try:
        settings = con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()
        rows = analysis.materialize(None, lake, con=con, progress=progress)
        kernels = con.execute("SELECT count(*) FROM events WHERE kind = 'kernel'").fetchone()[0]
    finally:
        con.close()
    return {"status": "ok", "tables": len(rows), "kernels": kernels,
            "memory_limit": settings[0], "threads": settings[1],
            "peak_rss_mb": max(peaks.values()),
            "peak_rss_mb_by_table": dict(sorted(peaks.items(), key=lambda kv: -kv[1])[:5]),
            "cpu_s_by_table": dict(sorted(cpu_s.items(), key=lambda kv: -kv[1])[:5])}


def _task_nsys_ingest(export: str, work: str) -> dict:
    return _task_kineto_ingest(export, work)


def _task_nsys_plain(export: str, work: str) -> dict:
    """The plain route: every table of the export, as ADBC reads it, into one Parquet file per table."""
    import adbc_driver_sqlite.dbapi as adbc
    import pyarrow.parquet as pq

    rows = 0
    uri = Path(export).resolve().as_uri() + "?mode=ro"
    with adbc.connect(uri) as con, con.cursor() as cur:
        cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = [r[0] for r in cur.fetchall()]
        for t in tables:
            cur.execute(f'SELECT * FROM "{t}"')
            reader = cur.fetch_record_batch()
            with pq.ParquetWriter(str(Path(work) / f"{t}.parquet"), reader.schema) as w:
                for batch in reader:
                    w.write_batch(batch)
                    rows += batch.num_rows
    return {"status": "ingested", "events": rows, "tables": len(tables)}


TASKS = {"kineto-ingest": _task_kineto_ingest, "kineto-plain": _task_kineto_plain, "analysis": _task_analysis,
         "nsys-ingest": _task_nsys_ingest, "nsys-plain": _task_nsys_plain}


# -- measuring ------------------------------------------------------------------------------------------------
@dataclass
class Run:
    name: str
    wall_s: float = float("inf")
    cpu_s: float = float("inf")
    rss_mb: float = 0.0
    info: dict = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.wall_s != float("inf")


def measure(name: str, cmd: list[str], env: dict[str, str] | None = None, timeout_s: float | None = None) -> Run:
    """Run ``cmd`` in a child; wall time, the child's own CPU time and peak RSS (wait4), its last JSON line."""
    run = Run(name)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, **(env or {})}, cwd=ROOT)
        deadline = None if timeout_s is None else t0 + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                run.error = f"timed out after {timeout_s:.0f} s"
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    run.rss_mb = usage.ru_maxrss * 1024 / 1e6  # Linux: KiB; the child's own peak (and its waited-for children's)
    if run.error is not None:
        return run
    if proc.returncode != 0:
        run.error = f"exit {proc.returncode}: {(stderr or stdout).strip().splitlines()[-1:] or ''}"
        return run
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    run.info = json.loads(lines[-1]) if lines else {}
    run.rss_mb = max(run.rss_mb, run.info.get("peak_rss_mb") or 0.0)  # a child that reset its own peak says it
    if run.info.get("status") not in (None, "ingested", "ok"):
        run.error = f"{run.info.get('status')}: {run.info.get('error')}"
        return run
    run.wall_s, run.cpu_s = wall, usage.ru_utime + usage.ru_stime
    return run


def best(runs: list[Run]) -> Run:
    """The fastest successful run (its wall and CPU time), with the highest peak RSS of all of them."""
    ok = [r for r in runs if r.ok]
    if not ok:
        return runs[-1]
    fastest = min(ok, key=lambda r: r.wall_s)
    return Run(fastest.name, fastest.wall_s, min(r.cpu_s for r in ok), max(r.rss_mb for r in ok), fastest.info)


def _self(task: str, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--task", task, *args]


def find_nsys() -> str | None:
    env = os.environ.get("TAXBREAK_NSYS")
    if env and Path(env).exists():
        return env
    found = shutil.which("nsys")
    if found:
        return found
    local = sorted((ROOT / ".venv" / "nsys").glob("usr/bin/nsys"))
    return str(local[0]) if local else None


def _nsys_stats_cmd(nsys: str, export: Path, out_dir: Path) -> list[str]:
    version = subprocess.run([nsys, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"(\d{4})\.(\d+)", version)
    old = m is not None and (int(m.group(1)), int(m.group(2))) < (2023, 3)  # report names before 2023.3
    reports = ["gpukernsum", "cudaapisum"] if old else ["cuda_gpu_kern_sum", "cuda_api_sum"]
    cmd = [nsys, "stats", "--force-export=false", "--format", "csv", "--output", str(out_dir / "stats")]
    for r in reports:
        cmd += ["--report", r]
    return cmd + [str(export)]


# -- the table ------------------------------------------------------------------------------------------------
@dataclass
class Row:
    figure: str
    ours: Run
    ref: Run
    ratio: float | None
    ratio_cpu: float | None
    target: str
    met: bool | None
    ours_text: str
    ref_text: str
    note: str = ""


def _fmt_s(s: float) -> str:
    return f"{s:,.1f} s" if s != float("inf") else "-"


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    return (f"{model or platform.processor()}, {os.cpu_count()} cores, {mem_gb:,.0f} GB RAM, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


def print_table(rows: list[Row], head: list[str]) -> str:
    cols = ["figure", "ours", "reference", "ratio (wall)", "ratio (CPU)", "target", "peak RSS ours", "peak RSS ref"]
    data = []
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        ratio_cpu = "-" if r.ratio_cpu is None else f"{r.ratio_cpu:.2f}x"
        tgt = r.target + ("" if r.met is None else (" ok" if r.met else " MISSED"))
        data.append([r.figure, r.ours_text, r.ref_text + (f" ({r.note})" if r.note else ""), ratio, ratio_cpu, tgt,
                     f"{r.ours.rss_mb:,.0f} MB" if r.ours.rss_mb else "-",
                     f"{r.ref.rss_mb:,.0f} MB" if r.ref.rss_mb else "-"])
    lines = [*head, "", "| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    lines += ["| " + " | ".join(d) + " |" for d in data]
    text = "\n".join(lines)
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--size-mib", type=int, default=64, help="Kineto trace size (MiB of JSON); default 64")
    ap.add_argument("--launches", type=int, default=500_000, help="Nsight export launches (2 rows each); 500 k")
    ap.add_argument("--only", nargs="+", choices=("kineto", "peers", "analysis", "nsys", "demo"),
                    help="sections to run (default: all; peers and analysis need kineto's ingest)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measured thing (fastest kept)")
    ap.add_argument("--peer-timeout-s", type=float, default=3600, help="give up a peer's run after this long")
    ap.add_argument("--out-dir", type=Path, default=HERE / "out", help="where the generated traces are kept")
    args = ap.parse_args(argv)
    if args.task:
        print(json.dumps(TASKS[args.task[0]](*args.task[1:])))
        return 0

    sections = set(args.only or ("kineto", "peers", "analysis", "nsys", "demo"))
    if sections & {"peers", "analysis"}:
        sections.add("kineto")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    load0 = os.getloadavg()[0]
    rows: list[Row] = []
    results: dict = {"machine": machine(), "size_mib": args.size_mib, "launches": args.launches}

    if "kineto" in sections:
        trace = args.out_dir / f"kineto_synth_{args.size_mib}MiB.json"
        if not trace.exists():
            from gen_kineto import generate

            print(f"generating {trace.name} ...", file=sys.stderr)
            generate(trace, args.size_mib << 20)
        mb = trace.stat().st_size / 1e6
        ingest_runs, plain_runs, analysis_runs = [], [], []
        peer_runs: dict[str, list[Run]] = {}
        peers = {"HTA (ns rounding)": ("hta", {}), "HTA (no ns rounding)": ("hta", {"HTA_DISABLE_NS_ROUNDING": "1"}),
                 "TraceLens": ("tracelens", {})}
        peer_skip: dict[str, str] = {}
        if "peers" in sections:
            if not BENCH_VENV_PY.exists():
                peer_skip = {k: "no .venv-bench (make bench-env)" for k in peers}
            else:
                for label, (tool, _) in peers.items():
                    mod = "hta" if tool == "hta" else "TraceLens"
                    probe = subprocess.run([str(BENCH_VENV_PY), "-c", f"import {mod}"], capture_output=True,
                                           check=False)
                    if probe.returncode != 0:
                        peer_skip[label] = f"{mod} not installed in .venv-bench"
        for i in range(args.repeat):
            print(f"[{i + 1}/{args.repeat}] Kineto {mb:,.0f} MB: ingest, plain route"
                  + (", analysis" if "analysis" in sections else "")
                  + (", peers" if "peers" in sections else ""), file=sys.stderr)
            with tempfile.TemporaryDirectory(prefix="bench-", dir=args.out_dir) as work:
                ingest_runs.append(measure("ingest", _self("kineto-ingest", str(trace), work)))
                if "analysis" in sections and ingest_runs[-1].ok:
                    analysis_runs.append(measure("analysis", _self("analysis", str(Path(work) / "lake"),
                                                                   str(Path(work) / "warehouse.duckdb"))))
            with tempfile.TemporaryDirectory(prefix="bench-", dir=args.out_dir) as work:
                plain_runs.append(measure("plain", _self("kineto-plain", str(trace), work)))
            if "peers" in sections:
                for label, (tool, env) in peers.items():
                    if label in peer_skip:
                        continue
                    cmd = [str(BENCH_VENV_PY), str(HERE / "peers.py"), tool, str(trace)]
                    peer_runs.setdefault(label, []).append(measure(label, cmd, env, args.peer_timeout_s))
        ing, plain = best(ingest_runs), best(plain_runs)
        for r in (ing, plain):
            if not r.ok:
                print(f"{r.name} failed: {r.error}", file=sys.stderr)
        if ing.ok and plain.ok:
            rows.append(Row(
                f"Kineto ingest, {mb:,.0f} MB", ing, plain, plain.wall_s / ing.wall_s, plain.cpu_s / ing.cpu_s,
                f">= {TARGETS['kineto_vs_plain']}x wall and CPU",
                min(plain.wall_s / ing.wall_s, plain.cpu_s / ing.cpu_s) >= TARGETS["kineto_vs_plain"],
                f"{mb / ing.wall_s:,.1f} MB/s ({_fmt_s(ing.wall_s)}, CPU {_fmt_s(ing.cpu_s)})",
                f"plain route {mb / plain.wall_s:,.1f} MB/s ({_fmt_s(plain.wall_s)}, CPU {_fmt_s(plain.cpu_s)}, "
                f"{plain.info.get('threads')} threads)"))
            rows.append(Row(
                f"Kineto ingest peak RSS, {mb:,.0f} MB", ing, plain, None, None,
                f"<= {TARGETS['kineto_rss_mb']:.0f} MB", ing.rss_mb <= TARGETS["kineto_rss_mb"],
                f"{ing.rss_mb:,.0f} MB", f"plain route {plain.rss_mb:,.0f} MB"))
        results["kineto"] = {"mb": mb, "ingest": ing.__dict__, "plain": plain.__dict__}
        an = best(analysis_runs) if analysis_runs else None
        if an is not None:
            results["analysis"] = an.__dict__
            if not an.ok:
                print(f"analysis failed: {an.error}", file=sys.stderr)
            elif ing.ok:
                rows.append(Row(
                    f"Analysis (all tables, {an.info.get('kernels') or 0:,} kernels) vs the ingest of that trace",
                    an, ing, ing.wall_s / an.wall_s, ing.cpu_s / an.cpu_s, "> 1x (faster than the ingest)",
                    an.wall_s < ing.wall_s,
                    f"{_fmt_s(an.wall_s)} (CPU {_fmt_s(an.cpu_s)}, memory_limit {an.info.get('memory_limit')})",
                    f"ingest {_fmt_s(ing.wall_s)}"))
                rows.append(Row(
                    "Analysis peak RSS", an, ing, None, None, f"<= {TARGETS['analysis_rss_mb']:.0f} MB",
                    an.rss_mb <= TARGETS["analysis_rss_mb"], f"{an.rss_mb:,.0f} MB", f"ingest {ing.rss_mb:,.0f} MB"))
        for label in peers:
            if label in peer_skip:
                print(f"{label}: skipped ({peer_skip[label]})", file=sys.stderr)
                continue
            if label not in peer_runs:
                continue
            p = best(peer_runs[label])
            results.setdefault("peers", {})[label] = p.__dict__
            if not p.ok:
                print(f"{label} failed: {p.error}", file=sys.stderr)
                continue
            if ing.ok and an is not None and an.ok:
                ours = Run("ingest + analysis", ing.wall_s + an.wall_s, ing.cpu_s + an.cpu_s,
                           max(ing.rss_mb, an.rss_mb))
                ratio = p.wall_s / ours.wall_s
                rows.append(Row(
                    f"Kineto ingest + analysis vs {label} load + analysis", ours, p, ratio, p.cpu_s / ours.cpu_s,
                    f">= {TARGETS['vs_peers']:.0f}x", ratio >= TARGETS["vs_peers"],
                    f"{_fmt_s(ours.wall_s)} (CPU {_fmt_s(ours.cpu_s)})",
                    f"{label} {_fmt_s(p.wall_s)} (CPU {_fmt_s(p.cpu_s)}; load {_fmt_s(p.info['load_s'])})"))
                peer_an = Run(label, p.info["analysis_s"])
                peer_an.rss_mb = p.rss_mb
                rows.append(Row(
                    f"Analysis vs {label}'s launch stats + temporal/idle breakdown calls", an, peer_an,
                    peer_an.wall_s / an.wall_s, None, "-", None, _fmt_s(an.wall_s),
                    f"{label} {_fmt_s(peer_an.wall_s)} (after its load)"))

    if "nsys" in sections:
        export = args.out_dir / f"nsys_synth_{args.launches}.sqlite"
        if not export.exists():
            print(f"generating {export.name} ...", file=sys.stderr)
            subprocess.run([sys.executable, str(HERE / "gen_nsys_sqlite.py"), str(export), "--launches",
                            str(args.launches)], check=True, stdout=subprocess.DEVNULL)
        nsys = find_nsys()
        ours_runs, plain_runs, stats_runs = [], [], []
        for i in range(args.repeat):
            print(f"[{i + 1}/{args.repeat}] Nsight {2 * args.launches:,} rows: ingest, ADBC copy"
                  + (", nsys stats" if nsys else ""), file=sys.stderr)
            with tempfile.TemporaryDirectory(prefix="bench-", dir=args.out_dir) as work:
                ours_runs.append(measure("nsys ingest", _self("nsys-ingest", str(export), work)))
            with tempfile.TemporaryDirectory(prefix="bench-", dir=args.out_dir) as work:
                plain_runs.append(measure("ADBC copy", _self("nsys-plain", str(export), work)))
            if nsys:
                with tempfile.TemporaryDirectory(prefix="bench-", dir=args.out_dir) as work:
                    stats_runs.append(measure("nsys stats", _nsys_stats_cmd(nsys, export, Path(work))))
        ours, plain = best(ours_runs), best(plain_runs)
        results["nsys"] = {"ingest": ours.__dict__, "plain": plain.__dict__}
        if ours.ok and plain.ok:
            rows_n = ours.info.get("events") or 0
            rows.append(Row(
                f"Nsight SQLite ingest, {rows_n:,} rows", ours, plain, plain.wall_s / ours.wall_s,
                plain.cpu_s / ours.cpu_s, f">= {TARGETS['nsys_vs_plain']}x wall and CPU",
                min(plain.wall_s / ours.wall_s, plain.cpu_s / ours.cpu_s) >= TARGETS["nsys_vs_plain"],
                f"{rows_n / ours.wall_s / 1e6:,.2f} M rows/s ({_fmt_s(ours.wall_s)}, CPU {_fmt_s(ours.cpu_s)})",
                f"ADBC copy of every table into Parquet {_fmt_s(plain.wall_s)} (CPU {_fmt_s(plain.cpu_s)})"))
        else:
            print(f"nsys ingest: {ours.error}; ADBC copy: {plain.error}", file=sys.stderr)
        if stats_runs:
            st = best(stats_runs)
            results["nsys"]["stats"] = st.__dict__
            if st.ok and ours.ok:
                rows.append(Row(
                    "Nsight SQLite ingest vs nsys stats (kernel + CUDA API summaries)", ours, st,
                    st.wall_s / ours.wall_s, st.cpu_s / ours.cpu_s, "-", None, _fmt_s(ours.wall_s),
                    f"nsys stats {_fmt_s(st.wall_s)} (CPU {_fmt_s(st.cpu_s)})"))
            elif not st.ok:
                print(f"nsys stats failed: {st.error}", file=sys.stderr)
        else:
            print("nsys stats: skipped (no nsys: tests/ingest/setup_nsys.sh installs one into .venv/nsys)",
                  file=sys.stderr)

    if "demo" in sections:
        # issue 27: a newcomer's first minute, `make demo` on a fresh clone beside its own set-up (bench_demo.py)
        from bench_demo import FIRST_SUMMARY_MARK, measure_demo

        d = measure_demo()
        setup = Run("set-up", d["setup"]["wall_s"], d["setup"]["cpu_s"])
        first = Run("make demo", d["demo"]["first_s"], d["demo"]["cpu_s"])
        results["demo"] = d
        rows.append(Row(
            f"make demo on a fresh clone of {d['commit']}: time to its first summary line ({FIRST_SUMMARY_MARK})",
            first, setup, setup.wall_s / first.wall_s, None, "-", None,
            f"{first.wall_s:,.1f} s (the whole demo {d['demo']['wall_s']:,.1f} s, CPU {d['demo']['cpu_s']:,.1f} s)",
            f"its set-up, venv + pip install (warm pip cache) {_fmt_s(setup.wall_s)} (CPU {_fmt_s(setup.cpu_s)})"))

    load1 = os.getloadavg()[0]
    head = [f"machine: {machine()}",
            f"load average {load0:.1f} before, {load1:.1f} after (other work on the machine slows wall times; "
            "ratios are to references run in between)",
            f"runs per figure: {args.repeat} (fastest kept)"]
    an_info = (results.get("analysis") or {}).get("info") or {}
    if an_info.get("peak_rss_mb_by_table"):
        tables = ", ".join(f"{k} {v:,.0f} MB" for k, v in an_info["peak_rss_mb_by_table"].items())
        rows_note = f"analysis peak RSS by table (highest first): {tables}"
        cpu = ", ".join(f"{k} {v:,.1f} s" for k, v in (an_info.get("cpu_s_by_table") or {}).items())
        rows_note += f"\nanalysis CPU time by table (highest first): {cpu}"
    else:
        rows_note = ""
    text = print_table(rows, head) + ("\n\n" + rows_note if rows_note else "")
    if rows_note:
        print("\n" + rows_note)
    results["table"] = text
    # a run of some sections keeps its own file: it must not replace a full run's figures (its peers, its analysis)
    part = "" if not args.only else "_" + "-".join(sorted(set(args.only)))
    (args.out_dir / f"results_{args.size_mib}MiB{part}.json").write_text(json.dumps(results, indent=1, default=str))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
