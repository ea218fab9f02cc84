"""``make demo``: capture a real trace on this machine, add a small SYNTHETIC GPU decode, ingest, summarise.

Steps, each a small function so the pipeline (Dagster) can call them one by one:

1. ``capture_into_inbox(paths)``: profile greedy generation of the built-in dense decoder with torch.profiler on
   whatever device exists (CPU here), with ``prefill``/``decode_step#i`` markers, into ``paths.inbox``; then
   write small synthetic GPU decode traces (dense and MoE, labelled ``synthetic_*`` and ``synthetic: true``) so
   the GPU-side metrics have something to show on a machine without a GPU. ``copy_into_inbox(paths, traces)``
   adds real traces recorded elsewhere (``--trace``; ``make demo`` passes the vendored H100 Qwen1.5 trace,
   ``DEMO_TRACE`` in the Makefile).
2. ``ingest_inbox(paths)``: ingest every trace file in the inbox into the lake (content already there is skipped).
3. ``print_results(paths, results)``: the per-trace ingest summary, then the analysis summary when the analysis
   module provides one.

Paths come from ``taxbreak.config.Paths.from_env()`` (``$TAXBREAK_HOME``, default ``warehouse/``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from taxbreak.capture.profile import capture_generation
from taxbreak.capture.synthetic import SyntheticConfig, generate_synthetic
from taxbreak.cli.ingest import format_ingest_result
from taxbreak.config import Paths, ingest_limits
from taxbreak.engine import runner
from taxbreak.engine.checks import InvariantBroken
from taxbreak.ingest import IngestResult, Lake, ingest_file, iter_trace_files
from taxbreak.ingest.sidecar import sidecar_path
from taxbreak.pipeline.local import run_inbox_pipeline
from taxbreak.read import readmodel
from taxbreak.read.report import default_output
from taxbreak.store.query import exports_dir

DEMO_CAPTURE = "demo_dense_cpu.json.gz"
DEMO_MODEL = {"n_layers": 2, "hidden": 64, "n_heads": 4, "ffn_hidden": 128, "vocab": 256}
DEMO_SYNTHETIC_LAYERS = 4
DEMO_TOKENS = 8


def capture_into_inbox(paths: Paths, recapture: bool = True) -> list[Path]:
    """Write the demo's traces (and sidecars) into ``paths.inbox``; returns the trace files.

    With ``recapture=False`` an existing real capture is kept (a capture differs every run, so each new one is
    a new trace); the synthetic traces are deterministic and rewritten identically."""

    paths.inbox.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    existing = paths.inbox / DEMO_CAPTURE
    if not recapture and existing.exists() and sidecar_path(existing).exists():
        print(f"kept the earlier capture {existing} (make demo ARGS=--recapture for a new one)")
        real = existing
    else:
        real = capture_generation(
            paths.inbox / DEMO_CAPTURE, model="dense", batch_size=1, prompt_len=16, output_tokens=DEMO_TOKENS,
            model_config=DEMO_MODEL,
        )
        print(f"captured {real} ({time.monotonic() - t0:.1f} s, real torch.profiler trace, {DEMO_TOKENS} tokens)")
    written = [real]
    for kind in ("dense", "moe"):
        cfg = SyntheticConfig(model_kind=kind, n_layers=DEMO_SYNTHETIC_LAYERS, batch_size=1, prompt_len=64,
                              output_tokens=DEMO_TOKENS, seed=0)
        for path in generate_synthetic(paths.inbox, cfg, ("kineto",)):
            print(f"wrote {path} (SYNTHETIC: simulated GPU decode, not a measurement)")
            written.append(path)
    return written


def copy_into_inbox(paths: Paths, traces: list[Path]) -> list[Path]:
    """Copy each trace file, unchanged and under its own name, into ``paths.inbox``; returns the copies."""
    paths.inbox.mkdir(parents=True, exist_ok=True)
    copied = []
    for src in traces:
        dst = paths.inbox / src.name
        if src.resolve() != dst.resolve():  # a file of the inbox itself stays where it is
            shutil.copyfile(src, dst)
        print(f"copied {src} into the inbox (a real trace recorded elsewhere)")
        copied.append(dst)
    return copied


def ingest_inbox(paths: Paths, files: list[Path] | None = None) -> list[Any]:
    """Ingest ``files`` (default: every trace file in the inbox) into ``paths.lake``; returns IngestResults."""

    lake = Lake(paths.lake)
    todo = files if files is not None else iter_trace_files([paths.inbox])
    return [ingest_file(f, lake, cache_dir=paths.cache, limits=ingest_limits()) for f in todo]


def print_results(paths: Paths, results: list[Any] | None = None) -> int:
    """Print one summary per trace and the analysis summary; returns the number of failed inputs.

    ``results`` are ``ingest_inbox``'s; without them, every trace of the lake's catalogue is summarised."""

    if results is None:
        rows = sorted(Lake(paths.lake).catalogue().to_pylist(), key=lambda r: r["ingested_at_ns"])
        results = [
            IngestResult(r["file_name"], r["trace_id"], "unchanged" if r["status"] == "ingested" else r["status"],
                         r, r.get("error"))
            for r in rows
        ]
    failed = 0
    for res in results:
        if res.status == "failed":
            failed += 1
            print(f"FAILED {res.error}")
            continue
        if res.status == "not_a_trace":
            print(f"IGNORED (not a trace) {res.error}")
            continue
        synthetic = " [SYNTHETIC]" if Path(res.path).name.startswith("synthetic_") else ""
        print(format_ingest_result(paths, res, synthetic))
    print()
    _print_analysis(paths, [r.trace_id for r in results if r.status not in ("failed", "not_a_trace")])
    return failed


def _print_analysis(paths: Paths, trace_ids: list[str]) -> None:
    """The headline of every trace from the warehouse tables (built by the pipeline, or here when missing: through
    the one run every writer takes, ``taxbreak.engine.runner.run``: the writer lock, the checks, one publication, the
    marts
    and the readers' snapshot)."""

    if not paths.warehouse.exists():
        try:
            runner.run(paths)
        except InvariantBroken as exc:
            print(f"(no analysis: {exc})")
            return
    for trace_id in trace_ids:
        try:
            print(readmodel.format_summary(readmodel.summary(paths.warehouse, trace_id)))
        except LookupError as exc:
            print(f"(no analysis for trace {trace_id[:16]}: {exc})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taxbreak.demo", description="make demo: capture or generate "
                                     "example traces into the inbox, run the pipeline through Dagster, summarise.")
    parser.add_argument("--recapture", action="store_true", help="profile a new CPU trace even if one is there")
    parser.add_argument("--trace", action="append", type=Path, default=[], metavar="PATH",
                        help="also show this real trace (Kineto JSON, Nsight SQLite or .nsys-rep); repeatable")
    args = parser.parse_args(argv)
    for t in args.trace:
        if not t.is_file():
            parser.error(f"--trace {t}: no such file")
    paths = Paths.from_env()
    capture_into_inbox(paths, recapture=args.recapture)
    copy_into_inbox(paths, args.trace)

    # The bucket sensor and the runs it asks for, in this process (no daemon): ingest + tables + exports + report.
    results = run_inbox_pipeline(paths)
    failed = print_results(paths, results)
    exports = exports_dir(paths.warehouse)

    report = default_output(paths.warehouse) / "index.html"
    print(f"\nwarehouse: {paths.warehouse}   report: {report if report.exists() else '(not written)'}")
    print(f"query it: .venv/bin/taxbreak sql \"SELECT * FROM taxbreak_by_scope LIMIT 5\"  (works during runs: it reads "
          f"{exports}/snapshot.duckdb, views over the Parquet marts in {paths.warehouse.parent / 'marts'}); "
          "UI: see docs/orchestration.md (dg dev)")
    if failed:
        print(f"{failed} of {len(results)} trace(s) failed to ingest", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
