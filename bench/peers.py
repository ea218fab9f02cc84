"""The peers' load + analysis of one Kineto trace, run in the optional bench environment (.venv-bench).

    .venv-bench/bin/python bench/peers.py hta TRACE.json          # HTA (PyPI traceinsight), ns rounding on
    HTA_DISABLE_NS_ROUNDING=1 .venv-bench/bin/python bench/peers.py hta TRACE.json
    .venv-bench/bin/python bench/peers.py tracelens TRACE.json    # AMD TraceLens

Prints one JSON line: load_s (parse the file into the tool's frames/tree), analysis_s (the calls a user makes for
launch statistics and the temporal/idle breakdown) and what they found (kernels, rows), so that the caller can
check that the tool really read the trace.  bench/run_all.py runs this in a child process and takes its peak RSS.
Never imported by the package or the tests.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path


def _hta(trace: Path) -> dict:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory(prefix="bench-hta-") as d:  # HTA loads every trace of a folder
        link = Path(d) / "rank-0.pt.trace.json"
        link.symlink_to(trace.resolve())
        t0 = time.perf_counter()
        analyzer = TraceAnalysis(trace_dir=d)
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        launch = analyzer.get_cuda_kernel_launch_stats(visualize=False)
        temporal = analyzer.get_temporal_breakdown(visualize=False)
        idle = analyzer.get_idle_time_breakdown(visualize=False)
        analysis_s = time.perf_counter() - t1
    rows = sum(len(df) for df in launch.values())
    return {"load_s": load_s, "analysis_s": analysis_s, "launch_rows": rows, "temporal_rows": len(temporal),
            "idle_rows": len(idle[0]), "ns_rounding": os.environ.get("HTA_DISABLE_NS_ROUNDING", "0") != "1"}


def _tracelens(trace: Path) -> dict:
    from TraceLens import TreePerfAnalyzer

    t0 = time.perf_counter()
    analyzer = TreePerfAnalyzer.from_file(str(trace))
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    launchers = analyzer.get_df_kernel_launchers()
    summary = TreePerfAnalyzer.get_df_kernel_launchers_summary(launchers)
    timeline = analyzer.get_df_gpu_timeline()
    analysis_s = time.perf_counter() - t1
    return {"load_s": load_s, "analysis_s": analysis_s, "launch_rows": len(launchers),
            "summary_rows": len(summary), "timeline_rows": len(timeline)}


def main(argv: list[str]) -> int:
    tool, trace = argv[0], Path(argv[1])
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    out = {"hta": _hta, "tracelens": _tracelens}[tool](trace)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
