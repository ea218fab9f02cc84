"""The ``taxbreak`` command. Each subcommand has its own ``_add_*`` function with help text."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from taxbreak.config import Paths, add_path_args


class _Progress:
    """A one-line progress bar on stderr for files above ``min_bytes``."""

    def __init__(self, label: str, min_bytes: int = 32 << 20) -> None:
        self.label = label
        self.min_bytes = min_bytes
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_bytes:
            return
        now = time.monotonic()
        if now - self.last < 0.25 and done < total:
            return
        self.last = now
        self.shown = True
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r{self.label[-40:]:<40} [{bar:<30}] {frac:6.1%} {done / 1e6:,.0f}/{total / 1e6:,.0f} MB")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def format_trace_summary(row: dict) -> str:
    """One trace's ingest summary, from its catalogue row (and a few counts from the lake)."""
    counts = json.loads(row.get("event_counts_json") or "{}")
    skipped = json.loads(row.get("skipped_counts_json") or "{}")
    gpus = json.loads(row.get("gpu_names_json") or "[]")
    dur = row.get("duration_ns")
    lines = [
        f"trace {row['trace_id'][:16]}  {row['file_name']}  ({row.get('source_format')})",
        f"  events stored {row['event_count']:,}, skipped {sum(skipped.values()):,}"
        + (f" ({', '.join(f'{k} {v:,}' for k, v in skipped.items())})" if skipped else ""),
        "  per kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])),
        f"  GPUs: {len(gpus)} ({', '.join(sorted(set(gpus))) or 'none recorded'})"
        + (f"   duration {dur / 1e6:,.3f} ms" if dur is not None else ""),
    ]
    link = row.get("_links")
    if link:
        lines.append(
            f"  kernels {link['kernels']:,}, launches {link['launches']:,}, memcpys {link['memcpys']:,}; "
            f"kernels linked to a launch call {link['to_launch']:,}, to a framework op {link['to_op']:,}"
        )
    return "\n".join(lines)


def _link_counts(paths: Paths, trace_id: str) -> dict | None:
    from taxbreak.ingest.links import link_counts

    try:
        return link_counts(paths.lake, trace_id)
    except Exception:  # noqa: BLE001 - a summary must not fail an ingest that succeeded
        return None


def format_ingest_result(paths: Paths, res: Any, label: str = "") -> str:
    """``[ingested]`` or ``[already in the lake]`` (then ``label``) and the trace's summary, for a result that did
    not fail (``taxbreak ingest`` and ``make demo`` print the same lines)."""
    row = dict(res.row or {})
    row["_links"] = _link_counts(paths, res.trace_id)
    tag = "already in the lake" if res.status == "unchanged" else "ingested"
    return f"[{tag}]{label} " + format_trace_summary(row)


def cmd_ingest(args: argparse.Namespace) -> int:
    from taxbreak.ingest import Lake, ingest_file, iter_trace_files

    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    files = iter_trace_files(args.paths)
    if not files:
        print("no trace files found in: " + " ".join(args.paths), file=sys.stderr)
        return 2
    failed = 0
    for f in files:
        bar = _Progress(str(f))
        try:
            res = ingest_file(f, lake, force=args.force, cache_dir=paths.cache, progress=bar)
        finally:
            bar.close()
        if res.status == "failed":
            failed += 1
            print(f"FAILED {res.error}", file=sys.stderr)
            continue
        print(format_ingest_result(paths, res))
    if failed:
        rest = "; the others went through" if failed < len(files) else ""
        print(f"{failed} of {len(files)} file(s) failed{rest}", file=sys.stderr)
    return 1 if failed else 0


def cmd_traces(args: argparse.Namespace) -> int:
    from taxbreak.ingest import Lake

    table = Lake(Paths.from_args(args).lake).catalogue()
    rows = sorted(table.to_pylist(), key=lambda r: r["ingested_at_ns"])
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("the catalogue is empty: run `taxbreak ingest PATH`")
        return 0
    print(f"{'trace_id':<16}  {'status':<8}  {'format':<11}  {'events':>10}  {'GPUs':>4}  file / error")
    for r in rows:
        tail = r["file_name"] if r["status"] == "ingested" else f"{r['file_name']}: {r['error']}"
        print(
            f"{r['trace_id'][:16]}  {r['status']:<8}  {(r['source_format'] or '-'):<11}  "
            f"{r['event_count']:>10,}  {r['gpu_count']:>4}  {tail}"
        )
    return 0


def _add_ingest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ingest",
        help="ingest trace files or folders into the Parquet lake",
        description="Ingest Kineto JSON(.gz), Nsight Systems SQLite exports and .nsys-rep reports. "
        "Content already in the lake is skipped; a failed file is reported and the rest still go through. "
        "Exit status 1 if any input failed.",
    )
    p.add_argument("paths", nargs="+", help="trace files or folders (searched recursively)")
    p.add_argument("--force", action="store_true", help="re-ingest content already in the lake or failed before")
    add_path_args(p)
    p.set_defaults(func=cmd_ingest)


def _add_traces(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "traces", help="list the trace catalogue", description="List every trace in the catalogue with its outcome."
    )
    p.add_argument("--json", action="store_true", help="print the catalogue rows as JSON")
    add_path_args(p)
    p.set_defaults(func=cmd_traces)


def _add_capture(sub: argparse._SubParsersAction) -> None:
    from taxbreak.capture.cli import add_capture_parser

    add_capture_parser(sub)


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="(re)compute the analysis tables (sql/*.sql) in the DuckDB warehouse",
        description="Compute the TaxBreak decomposition, host-time partition, kernels per token, SKIP metrics and "
        "fusion candidates for all ingested traces, or only the selected ones (their rows are replaced).",
    )
    p.add_argument("--trace", action="append", help="trace id prefix or file name (repeatable; default: all)")
    p.add_argument("--table", action="append", help="only this table and what it reads (repeatable)")
    add_path_args(p)

    def run(args: argparse.Namespace) -> int:
        from taxbreak.analysis import cmd_analyze

        return cmd_analyze(args)

    p.set_defaults(func=run)


def _add_summary(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "summary",
        help="print the headline figures of one analysed trace",
        description="HDBI, T_Orchestrate split into dFT/dCT/dKT, T_DeviceActive, kernels per token, TKLQT, GPU idle, "
        "top kernels, top fusion candidates, and which defaults were assumed.",
    )
    p.add_argument("trace", help="trace id prefix or file name")
    p.add_argument("--top", type=int, default=5, help="how many top kernels / fusion candidates (default 5)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_path_args(p)

    def run(args: argparse.Namespace) -> int:
        from taxbreak.analysis import cmd_summary

        return cmd_summary(args)

    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taxbreak",
        description="Where the host-side time of GPU LLM inference goes (TaxBreak decomposition, HDBI, "
        "kernels per token, SKIP metrics) from Nsight Systems and PyTorch profiler traces.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in ADDERS:
        add(sub)
    return parser


def _add_nsys_check(sub: argparse._SubParsersAction) -> None:
    from taxbreak.ingest.nsys_check import cmd_nsys_check

    p = sub.add_parser(
        "nsys-check",
        help="compare our kernel counts and times with Nsight's own `nsys stats` kernel summary",
        description="Ingest TRACE (an .nsys-rep or Nsight SQLite export) if needed, run `nsys stats --report "
        "cuda_gpu_kern_sum` (`gpukernsum` before nsys 2023) on it and compare per-kernel instance counts and "
        "total ns with the lake. "
        "Exit 0 when they agree, 1 on a mismatch, 2 when nsys is not installed or TRACE cannot be ingested.",
    )
    p.add_argument("trace", help="the .nsys-rep or .sqlite file")
    add_path_args(p)
    p.set_defaults(func=cmd_nsys_check)


def _add_retry(sub: argparse._SubParsersAction) -> None:
    from taxbreak.pipeline.retry import cmd_retry

    p = sub.add_parser(
        "retry",
        help="re-ingest failed traces from their recorded source and rebuild their tables",
        description="A failed file is retried automatically only when its content changes; this forces it. "
        "Re-reads each matching failed trace from the source path (or s3:// URL) in its catalogue row, then "
        "rebuilds the warehouse tables for the traces that now ingest. Exit 1 if any still fails.",
    )
    p.add_argument("prefix", nargs="?", help="trace id prefix (as `taxbreak traces` prints it)")
    p.add_argument("--all-failed", action="store_true", help="retry every failed trace")
    p.add_argument("--no-tables", action="store_true", help="re-ingest only; leave the warehouse tables")
    add_path_args(p)
    p.set_defaults(func=cmd_retry)


def _add_report(sub: argparse._SubParsersAction) -> None:
    from taxbreak.report import add_report_parser

    add_report_parser(sub)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    from taxbreak.compare import add_compare_parser

    add_compare_parser(sub)


def _add_sql(sub: argparse._SubParsersAction) -> None:
    from taxbreak.query import add_sql_parser

    add_sql_parser(sub)


ADDERS = [_add_ingest, _add_traces, _add_capture, _add_nsys_check, _add_retry, _add_report, _add_compare, _add_sql,
          _add_analyze, _add_summary]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
