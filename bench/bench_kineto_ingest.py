"""Kineto ingest in detail: MB/s of JSON, events/s and peak RSS of the ingesting process (no reference run).

The figures with their references (the plain DuckDB route, the peers) are ``bench/run_all.py``'s; this script
shows one ingest's parts.

Generates (or reuses) a synthetic decoder trace under ``bench/out/`` with ``bench/gen_kineto.py``, then
ingests it through ``taxbreak.ingest.ingest_file`` into a temporary lake in a child process, so that the
generator's memory does not count.  Peak RSS is the child's ``ru_maxrss``.

    python bench/bench_kineto_ingest.py --size-mib 512
    python bench/bench_kineto_ingest.py --size-mib 2048
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_RSS_MB = 500.0


def _child(path: Path, tmp_root: Path) -> None:
    from taxbreak.ingest import Lake, ingest_file

    with tempfile.TemporaryDirectory(dir=tmp_root, prefix="bench-lake-") as lake_dir:
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        res = ingest_file(path, Lake(lake_dir), tmp_dir=tmp_root)
        wall_s = time.perf_counter() - t0
        cpu_s = time.process_time() - cpu0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss_mb = usage.ru_maxrss / 1024  # Linux: KiB
    row = res.row or {}
    print(json.dumps({
        "status": res.status, "error": res.error, "wall_s": wall_s, "cpu_s": cpu_s, "peak_rss_mb": rss_mb,
        "events": row.get("event_count"), "source_events": row.get("source_event_count"),
        "counts": row.get("event_counts_json"),
    }))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=512, help="size of the synthetic trace (MiB of JSON)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "out", help="where the trace is generated and kept")
    ap.add_argument("--regenerate", action="store_true", help="write the trace again even if it exists")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.child:
        _child(args.child, args.out_dir)
        return 0

    trace = args.out_dir / f"kineto_synth_{args.size_mib}MiB.json"
    if args.regenerate or not trace.exists():
        sys.path.insert(0, str(HERE))
        from gen_kineto import generate

        t0 = time.perf_counter()
        n = generate(trace, args.size_mib << 20)
        print(f"generated {trace} ({trace.stat().st_size / 1e6:,.0f} MB, {n:,} events) "
              f"in {time.perf_counter() - t0:.1f} s")
    size_bytes = trace.stat().st_size
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(trace), "--out-dir", str(args.out_dir)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        return 1
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["status"] != "ingested":
        print(f"ingest failed: {res['error']}", file=sys.stderr)
        return 1
    mb_s = size_bytes / 1e6 / res["wall_s"]
    print(f"file            {trace.name}: {size_bytes / 1e6:,.0f} MB of JSON, {res['source_events']:,} events")
    print(f"wall            {res['wall_s']:.2f} s  (CPU {res['cpu_s']:.2f} s, all threads of the process)")
    print(f"throughput      {mb_s:,.1f} MB/s  (bench/run_all.py sets it beside the plain route's)")
    print(f"per CPU-second  {size_bytes / 1e6 / res['cpu_s']:,.1f} MB/s  (wall figure is lower when other work "
          "shares the cores)")
    print(f"events/s        {res['events'] / res['wall_s']:,.0f}")
    print(f"peak RSS        {res['peak_rss_mb']:,.0f} MB  (target <= {TARGET_RSS_MB:.0f} MB)")
    print(f"per kind        {res['counts']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
