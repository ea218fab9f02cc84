"""Ingest throughput of the Nsight SQLite adapter on a synthetic export (rows/s and peak RSS).

    python bench/bench_nsys_ingest.py [--launches N] [--keep PATH]

Generates the export (bench/gen_nsys_sqlite.py) unless it exists, then ingests it into a fresh lake in a child
process and prints rows, wall seconds, rows/s and the child's peak RSS (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = r"""
import json, sys, time, resource
from pathlib import Path
from taxbreak.ingest import Lake, ingest_file
t0 = time.perf_counter()
res = ingest_file(Path(sys.argv[1]), Lake(Path(sys.argv[2])))
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"status": res.status, "error": res.error, "rows": (res.row or {}).get("event_count"),
                  "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_mb": ru.ru_maxrss / 1024}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=2_500_000, help="launches (2 rows each); default 2.5 M")
    ap.add_argument("--keep", type=Path, help="export path to reuse/keep (default: a temp file)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="taxbreak-bench-") as tmp:
        export = a.keep or Path(tmp) / "synthetic.sqlite"
        if not export.exists():
            subprocess.run([sys.executable, str(HERE / "gen_nsys_sqlite.py"), str(export), "--launches",
                            str(a.launches)], check=True)
        out = subprocess.run([sys.executable, "-c", CHILD, str(export), str(Path(tmp) / "lake")], check=True,
                             capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["status"] != "ingested":
        print(f"ingest failed: {r['error']}", file=sys.stderr)
        return 1
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"rows {r['rows']:,}  wall {r['wall_s']:.2f} s  {r['rows'] / r['wall_s']:,.0f} rows/s  "
          f"peak RSS {r['maxrss_mb']:,.0f} MB (children max {child_rss:,.0f} MB)  "
          f"CPU {r['cpu_s']:.2f} s (all threads, imports included; {r['rows'] / r['cpu_s']:,.0f} rows per CPU-s)  "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
