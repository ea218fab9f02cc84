"""``taxbreak nsys-check TRACE``: our kernel table against Nsight's own ``nsys stats`` kernel summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from taxbreak.ingest.base import IngestError
from taxbreak.ingest.nsys_rep import compare_summaries, find_nsys, lake_kernel_summary, nsys_kernel_summary


def cmd_nsys_check(args: argparse.Namespace) -> int:
    from taxbreak.config import Paths
    from taxbreak.ingest import Lake, ingest_file

    trace = Path(args.trace)
    nsys = find_nsys()
    if nsys is None:
        print("nsys-check needs the Nsight Systems CLI: no `nsys` on PATH and TAXBREAK_NSYS is not set; install "
              "Nsight Systems (nsys) or set TAXBREAK_NSYS to its path", file=sys.stderr)
        return 2
    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    res = ingest_file(trace, lake, cache_dir=paths.cache)
    if res.status == "failed":
        print(f"nsys-check: cannot ingest: {res.error}", file=sys.stderr)
        return 2
    try:
        theirs = nsys_kernel_summary(nsys, trace)
    except (IngestError, OSError) as exc:
        print(f"nsys-check: {exc}", file=sys.stderr)
        return 2
    ours = lake_kernel_summary(lake, res.trace_id)
    diffs = compare_summaries(ours, theirs)
    n_ours = sum(c for c, _ in ours.values())
    if diffs:
        print(f"MISMATCH: {len(diffs)} of {len(set(ours) | set(theirs))} kernel names differ", file=sys.stderr)
        for line in diffs[:50]:
            print("  " + line, file=sys.stderr)
        return 1
    print(f"OK: {len(ours)} kernel names, {n_ours:,} kernels, "
          f"{sum(t for _, t in ours.values()):,} ns agree with the kernel summary of nsys stats")
    return 0
