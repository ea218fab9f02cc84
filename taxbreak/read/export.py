"""``taxbreak export TRACE --format chrome``: an analysed trace as an annotated Chrome / Perfetto trace.

The file is Chrome trace-event JSON (``{"traceEvents": [...]}``, times in µs with ns precision) that
ui.perfetto.dev and chrome://tracing open, in PyTorch-profiler (Kineto) conventions so that taxbreak's own Kineto
adapter reads it back: framework ops (``cpu_op``), launch calls (``cuda_runtime``), kernels (``kernel``, args
``device``, ``stream``, ``correlation``), launch -> kernel flows (``ac2g``, flow id = correlation id), steps
(``user_annotation``). Added for deep dives, read from the warehouse (docs/method.md):

- every kernel's TaxBreak decomposition in ``args.taxbreak`` (ΔFT, ΔCT, ΔKT, t_py, t_dispatch, t_launch_obs
  = queueing from launch call to kernel start, I_lib, step and phase);
- each GPU's idle gaps as slices named by their cause on a track "GPU idle gaps" of the GPU's process (tid
  IDLE_TRACK_TID)
  (category ``taxbreak_idle_gap``, read back as kind 'other', never as device work).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import duckdb

from taxbreak.config import Paths, add_path_args
from taxbreak.ingest.oserrors import classify
from taxbreak.store.query import open_for_cli
from taxbreak.store.tracenames import resolve_for_cli

FORMATS = ("chrome",)
IDLE_TRACK = "GPU idle gaps"
IDLE_TRACK_TID = 2_000_000_000  # the idle-gap track of each GPU's process (an int: Perfetto names int tids)
_KERNEL_SQL = """
SELECT l.kernel_seq, l.pid, l.device_id, l.stream_id, l.kernel_name, l.kernel_ts_ns, l.kernel_dur_ns,
       l.correlation_id, l.external_id, l.launch_name, l.launch_kind, l.launch_tid, l.launch_ts_ns, l.launch_dur_ns,
       l.is_charged_launch, l.op_name, l.op_ts_ns, l.op_end_ns,
       k.step_id, k.step_name, k.phase, k.i_lib, k.t_py_ns, k.t_dispatch_ns, k.t_launch_obs_ns, k.delta_ft_ns,
       k.delta_ct_ns, k.delta_kt_ns, k.t_dispatch_blocked_ns, k.is_linked
FROM int_kernel_links l LEFT JOIN kernel_taxbreak k USING (trace_id, kernel_seq)
WHERE l.trace_id = $t ORDER BY l.kernel_seq
"""


def _id(v: Any) -> Any:
    """A pid / tid as the int Perfetto and chrome://tracing expect when it is one, else its text."""
    if v is None:
        return 0
    t = str(v)
    return int(t) if t.lstrip("-").isdigit() and abs(int(t)) < 2**31 else t


def _us(ns: int | float) -> float:
    """ns -> µs for the JSON: the shortest float text of ns / 1000 is exact to the ns (at most three decimals)."""
    return round(ns / 1000, 3)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def chrome_trace(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, Any]:
    """The annotated Chrome trace of one analysed trace, as a JSON-ready dict."""
    meta = _rows(con, "SELECT file_name, gpu_name, meta_json FROM trace_meta WHERE trace_id = $t", {"t": trace_id})
    if not meta:
        raise LookupError(f"trace {trace_id} is not in the warehouse: run `taxbreak analyze` first")
    m = meta[0]
    kernels = _rows(con, _KERNEL_SQL, {"t": trace_id})
    gaps = _rows(con, "SELECT device_id, gap_seq, gap_start_ns, gap_ns, cause, next_kind, next_name "
                      "FROM device_idle_gaps WHERE trace_id = $t ORDER BY device_id, gap_seq", {"t": trace_id})
    steps = _rows(con, "SELECT step_id, step_name, phase, pid, tid, step_ts_ns, step_dur_ns FROM int_steps "
                       "WHERE trace_id = $t ORDER BY step_id", {"t": trace_id})
    ev: list[dict[str, Any]] = []
    devices = sorted({k["device_id"] for k in kernels if k["device_id"] is not None}
                     | {g["device_id"] for g in gaps if g["device_id"] is not None})
    host_pids = sorted({_id(k["pid"]) for k in kernels if k["pid"] is not None} | {_id(s["pid"]) for s in steps},
                       key=str)
    for pid in host_pids:
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"host process {pid}"}})
    for d in devices:
        ev.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0, "args": {"name": f"GPU {d}"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": d, "tid": 0, "args": {"sort_index": 1000 + d}})
    for s in steps:
        ev.append({"ph": "X", "cat": "user_annotation", "name": s["step_name"], "pid": _id(s["pid"]),
                   "tid": _id(s["tid"]), "ts": _us(s["step_ts_ns"]), "dur": _us(s["step_dur_ns"]),
                   "args": {"taxbreak": {"step_id": s["step_id"], "phase": s["phase"]}}})
    ops_seen: set[tuple] = set()
    launches_seen: set[tuple] = set()
    for k in kernels:
        pid = _id(k["pid"])
        ltid = _id(k["launch_tid"])
        if k["op_ts_ns"] is not None and (pid, ltid, k["op_ts_ns"], k["op_name"]) not in ops_seen:
            ops_seen.add((pid, ltid, k["op_ts_ns"], k["op_name"]))
            op = {"ph": "X", "cat": "cpu_op", "name": k["op_name"], "pid": pid, "tid": ltid, "ts": _us(k["op_ts_ns"]),
                  "dur": _us(k["op_end_ns"] - k["op_ts_ns"]), "args": {}}
            if k["external_id"] is not None:
                op["args"]["External id"] = k["external_id"]
            ev.append(op)
        corr = k["correlation_id"]
        has_launch = k["launch_ts_ns"] is not None and corr is not None
        if has_launch and (pid, corr) not in launches_seen:
            launches_seen.add((pid, corr))
            cat = "cuda_driver" if k["launch_kind"] == "driver_api" else "cuda_runtime"
            ev.append({"ph": "X", "cat": cat, "name": k["launch_name"] or "cudaLaunchKernel", "pid": pid,
                       "tid": ltid, "ts": _us(k["launch_ts_ns"]), "dur": _us(k["launch_dur_ns"] or 0),
                       "args": {"correlation": corr, **({"External id": k["external_id"]}
                                                       if k["external_id"] is not None else {})}})
            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": pid, "tid": ltid,
                       "ts": _us(k["launch_ts_ns"])})
        decomposition = {key: k[key] for key in (
            "kernel_seq", "step_id", "step_name", "phase", "i_lib", "t_py_ns", "t_dispatch_ns", "t_launch_obs_ns",
            "delta_ft_ns", "delta_ct_ns", "delta_kt_ns", "t_dispatch_blocked_ns", "is_linked")}
        decomposition["t_orchestrate_ns"] = (None if k["delta_ft_ns"] is None else
                                             k["delta_ft_ns"] + k["delta_ct_ns"] + k["delta_kt_ns"])
        args: dict[str, Any] = {"device": k["device_id"], "stream": k["stream_id"], "taxbreak": decomposition}
        if corr is not None:
            args["correlation"] = corr
        if k["external_id"] is not None:
            args["External id"] = k["external_id"]
        dev = _id(k["device_id"])
        ev.append({"ph": "X", "cat": "kernel", "name": k["kernel_name"], "pid": dev, "tid": k["stream_id"],
                   "ts": _us(k["kernel_ts_ns"]), "dur": _us(k["kernel_dur_ns"]), "args": args})
        if has_launch:
            ev.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": dev,
                       "tid": k["stream_id"], "ts": _us(k["kernel_ts_ns"])})
    for d in devices:
        ev.append({"ph": "M", "name": "thread_name", "pid": d, "tid": IDLE_TRACK_TID, "args": {"name": IDLE_TRACK}})
    for g in gaps:
        ev.append({"ph": "X", "cat": "taxbreak_idle_gap", "name": f"GPU idle: {g['cause']}", "pid": g["device_id"],
                   "tid": IDLE_TRACK_TID, "ts": _us(g["gap_start_ns"]), "dur": _us(g["gap_ns"]),
                   "args": {"cause": g["cause"], "gap_seq": g["gap_seq"], "gap_ns": g["gap_ns"],
                            "ended_by": g["next_kind"], "ended_by_name": g["next_name"]}})
    out: dict[str, Any] = {
        "schemaVersion": 1,
        "traceName": m["file_name"],
        "displayTimeUnit": "ns",
        "deviceProperties": [{"id": d, "name": m["gpu_name"]} for d in devices] if m["gpu_name"] else [],
        "taxbreak_export": {"trace_id": trace_id, "file_name": m["file_name"],
                            "note": "annotated by taxbreak export: args.taxbreak holds each kernel's TaxBreak "
                                    "decomposition (ns); slices of category taxbreak_idle_gap are GPU idle gaps"},
        "traceEvents": ev,
    }
    if m["meta_json"]:
        try:
            out["taxbreak"] = json.loads(m["meta_json"])
        except ValueError:
            pass
    return out


def write_chrome(con: duckdb.DuckDBPyConnection, trace_id: str, out_path: str | os.PathLike[str]) -> Path:
    """Write the annotated trace to ``out_path`` (all or nothing: a temporary file renamed into place)."""
    out = Path(out_path)
    doc = chrome_trace(con, trace_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, separators=(",", ":"), allow_nan=False)
        tmp.replace(out)
    except OSError as exc:  # (a full disk): no half-written file, and the error names the file asked for
        raise OSError(exc.errno, exc.strerror, str(out.absolute())) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return out


def cmd_export(args: argparse.Namespace) -> int:
    opened = open_for_cli(args, "export")
    if opened is None:
        return 2
    try:
        tid = resolve_for_cli(opened.con, args.trace, "export", Paths.from_args(args))
        if tid is None:
            return 2
        out = write_chrome(opened.con, tid, args.output or f"{tid[:12]}.chrome.json")
    except (OSError, duckdb.Error) as exc:
        if classify(exc) is not None:  # no space, read-only, permission: the one line of taxbreak.cli.main
            raise
        print(f"taxbreak export: {exc}", file=sys.stderr)
        return 2
    finally:
        opened.con.close()
    if not getattr(args, "quiet", False):
        print(f"wrote {out}: open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write an analysed trace as an annotated Chrome/Perfetto trace (ui.perfetto.dev opens it)",
        description="Chrome trace-event JSON in PyTorch-profiler conventions: framework ops, launch calls, kernels "
        "with their TaxBreak decomposition in args.taxbreak, launch->kernel flows and each GPU's idle gaps as "
        "slices named by cause.",
    )
    p.add_argument("trace", help="trace id prefix, file name, its stem or a unique substring (as `taxbreak "
                   "traces` prints them)")
    p.add_argument("--format", choices=FORMATS, default="chrome", help="output format (default %(default)s)")
    p.add_argument("-o", "--output", help="output file (default <trace id>.chrome.json)")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_export)
