"""``taxbreak report``: an HTML report folder (inline SVG and inlined script, no network) from the warehouse tables.

``collect`` reads the data (plain dicts and lists, testable without HTML); ``render_index`` and ``render_trace_page``
draw it; ``write_report`` writes ``index.html`` plus ``traces/<id>.html`` per trace, rewriting a trace's page only
when its data changed (``manifest.json`` keeps a content hash per page). Every headline figure, flag and caveat
comes from the one read model (taxbreak.read.readmodel); the GPU breakdown and stream queues from their sql/ tables.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import sys
from html import escape
from pathlib import Path
from typing import Any

import duckdb

from taxbreak.config import Paths, add_path_args
from taxbreak.features import requests
from taxbreak.read import plots, readmodel, trend_report, whatif_report
from taxbreak.read.compare import GroupError, resolve_group
from taxbreak.read.kernel_names import short_names
from taxbreak.read.plots import fmt_value
from taxbreak.store import query
from taxbreak.store.query import open_for_cli

HDBI_REF_NOTE = "reference line (ours, not the paper's)"
HDBI_LABELS = [(y, f"{y:g}: {HDBI_REF_NOTE}") for y in readmodel.HDBI_REFERENCE_LINES]
ASSETS = Path(__file__).resolve().parent / "report_assets"
SPLIT_COLORS = {"ΔFT framework": "#4e79a7", "ΔCT library": "#f28e2b", "ΔKT launch floor": "#e15759",
                "device active": "#59a14f"}
TIMELINE_MAX_KERNELS = 60_000  # kernels of a trace the interactive timeline carries (the page says when it stops)
IDLE_CAUSE_COLORS = {"launch_late": "#e15759", "sync_drain": "#76b7b2", "memcpy": "#edc948", "other": "#bab0ac"}
WORK_COLORS = {"compute": "#4e79a7", "communication exposed": "#f28e2b", "memcpy/memset exposed": "#edc948",
               "idle": "#e0e0e0"}


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or {})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


_has = query.has_relation  # a table or a view (the snapshot's) of that name


def trace_rows(con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per analysed trace, from the read model every reader shares (taxbreak.read.readmodel)."""
    return readmodel.trace_headlines(con, trace_ids)


HOST_PARTS = [("framework_ns", "framework"), ("library_ns", "library"), ("launch_host_ns", "launch calls"),
              ("sync_ns", "sync"), ("other_runtime_ns", "other runtime"), ("host_untraced_ns", "untraced"),
              ("unresolved_ns", "unresolved")]
HOST_COLORS = {"framework": "#4e79a7", "library": "#f28e2b", "launch calls": "#e15759", "sync": "#76b7b2",
               "other runtime": "#edc948", "untraced": "#bab0ac", "unresolved": "#b07aa1"}


def host_partition_rows(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[dict[str, Any]]:
    """The exact host-time partition (METHOD.md section 3) of the trace and of each step, parts in ns."""
    if not _has(con, "host_partition"):
        return []
    cols = ", ".join(c for c, _ in HOST_PARTS)
    return _rows(con, f"""
        SELECT h.scope_kind, h.step_id, s.step_name, h.wall_ns, {cols}
        FROM host_partition h LEFT JOIN int_steps s ON s.trace_id = h.trace_id AND s.step_id = h.step_id
        WHERE h.trace_id = $t AND h.scope_kind IN ('trace', 'step')
        ORDER BY h.scope_kind DESC, h.step_id
    """, {"t": trace_id})


def host_segments(r: dict[str, Any]) -> list[tuple[str, float]]:
    return [(label, float(r[col] or 0)) for col, label in HOST_PARTS]


def top_kernels(con: duckdb.DuckDBPyConnection, trace_id: str, k: int = 10) -> list[dict[str, Any]]:
    return _rows(con, """
        SELECT kernel_name, invocations, total_dur_ns, akd_ns, time_share, mean_launch_to_start_ns
        FROM skip_by_kernel WHERE trace_id = $t AND rank_by_time <= $k ORDER BY rank_by_time
    """, {"t": trace_id, "k": k})


def fusion_rows(con: duckdb.DuckDBPyConnection, trace_id: str, k: int = 8) -> list[dict[str, Any]]:
    """The trace's listed fusion chains (maximal, non-overlapping: fusion_candidates.is_listed), by rank = host time
    saved, each with its whole chain."""
    return _rows(con, """
        SELECT rank, chain_len, chain, occurrences, proximity_score, launches_saved, host_time_saved_ns
        FROM fusion_candidates WHERE trace_id = $t AND is_listed ORDER BY rank LIMIT $k
    """, {"t": trace_id, "k": k})


def choose_step(steps: list[dict[str, Any]], step_id: str | None) -> dict[str, Any] | None:
    real = [s for s in steps if s["scope_key"] != "outside_steps"]
    if step_id is not None:
        return next((s for s in real if s["scope_key"] == str(step_id)), None)
    return next((s for s in real if s["phase"] == "decode"), real[0] if real else None)


def step_title(s: dict[str, Any]) -> str:
    """'step 3: decode_step#1 (decode)'; no phase printed when it is unknown."""
    return f"step {s['scope_key']}: {s['step_name']}" + (f" ({s['phase']})" if s.get("phase") else "")


def timeline_data(con: duckdb.DuckDBPyConnection, trace_id: str, step_id: str | None,
                  step_scopes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the interactive timeline draws, JSON-ready: every kernel of the trace (up to TIMELINE_MAX_KERNELS)
    on a lane per GPU stream with its launch call, framework op and TaxBreak terms (kernel_taxbreak), each GPU's idle
    gaps by cause (device_idle_gaps) on a lane of their own, and the step windows to pick from (``step_id``, the
    first decode step by default, opens; without steps the whole trace)."""
    ks = _rows(con, """
        SELECT l.kernel_seq, l.kernel_name, l.kernel_ts_ns, l.kernel_dur_ns, l.stream_id, l.device_id,
               l.launch_ts_ns, l.launch_dur_ns, l.op_name, l.op_ts_ns, l.op_end_ns, k.step_id,
               k.delta_ft_ns, k.delta_ct_ns, k.delta_kt_ns, k.t_launch_obs_ns, k.t_dispatch_ns
        FROM int_kernel_links l JOIN kernel_taxbreak k USING (trace_id, kernel_seq)
        WHERE l.trace_id = $t ORDER BY l.kernel_seq LIMIT $n
    """, {"t": trace_id, "n": TIMELINE_MAX_KERNELS})
    total = con.execute("SELECT count(*) FROM int_kernel_links WHERE trace_id = $t", {"t": trace_id}).fetchone()[0]
    if not ks:
        return {"kernels": 0, "total_kernels": total}
    t0 = min([k["kernel_ts_ns"] for k in ks] + [k["launch_ts_ns"] for k in ks if k["launch_ts_ns"] is not None])
    t1 = max(k["kernel_ts_ns"] + k["kernel_dur_ns"] for k in ks)
    names: dict[str, int] = {"": 0}

    def name_ix(n: str | None) -> int:
        return names.setdefault(n or "", len(names)) if n else 0

    devices = sorted({k["device_id"] for k in ks}, key=lambda d: (d is None, d))
    lanes = ["framework ops", "launch calls"]
    lane_of: dict[Any, int] = {}
    for d in devices:
        lane_of[("idle", d)] = len(lanes)
        lanes.append(f"GPU {d} idle gaps")
        for st in sorted({k["stream_id"] for k in ks if k["device_id"] == d}, key=lambda x: (x is None, x)):
            lane_of[(d, st)] = len(lanes)
            lanes.append(f"GPU {d} stream {st}")
    ops: dict[tuple, list] = {}
    kern = []
    for k in ks:
        if k["op_ts_ns"] is not None:
            ops.setdefault((k["op_ts_ns"], k["op_end_ns"], k["op_name"]),
                           [k["op_ts_ns"], k["op_end_ns"] - k["op_ts_ns"], name_ix(k["op_name"])])
        kern.append([lane_of[(k["device_id"], k["stream_id"])], k["kernel_ts_ns"], k["kernel_dur_ns"],
                     name_ix(k["kernel_name"]), name_ix(k["kernel_name"]), k["launch_ts_ns"], k["launch_dur_ns"] or 0,
                     k["delta_ft_ns"], k["delta_ct_ns"], k["delta_kt_ns"], k["t_launch_obs_ns"], k["t_dispatch_ns"],
                     name_ix(k["op_name"])])
    gaps = [[lane_of[("idle", g["device_id"])], g["gap_start_ns"], g["gap_ns"], g["cause"]] for g in _rows(con, """
        SELECT device_id, gap_start_ns, gap_ns, cause FROM device_idle_gaps
        WHERE trace_id = $t AND ($all OR (gap_end_ns > $a AND gap_start_ns < $b)) ORDER BY device_id, gap_start_ns
    """, {"t": trace_id, "a": t0, "b": t1, "all": total == len(ks)}) if ("idle", g["device_id"]) in lane_of]
    if gaps:  # every gap of the GPUs when every kernel is shown (copies may open or close the device's span)
        t0, t1 = min(t0, min(g[1] for g in gaps)), max(t1, max(g[1] + g[2] for g in gaps))
    if step_scopes is None:  # the trace's step scopes (index_data reads them for every trace at once)
        step_scopes = step_rows(con, [trace_id]).get(trace_id, [])
    steps = [s for s in step_scopes if s["scope_key"] != "outside_steps"]
    win = _rows(con, "SELECT step_id, step_ts_ns, step_end_ns FROM int_steps WHERE trace_id = $t", {"t": trace_id})
    win_of = {str(w["step_id"]): w for w in win}
    kspan: dict[str, list[int]] = {}
    for k in ks:  # a step's window also holds its kernels, which may end after the annotation
        if k["step_id"] is not None:
            sp = kspan.setdefault(str(k["step_id"]), [k["kernel_ts_ns"], k["kernel_ts_ns"] + k["kernel_dur_ns"]])
            sp[0] = min(sp[0], k["kernel_ts_ns"], k["launch_ts_ns"] if k["launch_ts_ns"] is not None else sp[0])
            sp[1] = max(sp[1], k["kernel_ts_ns"] + k["kernel_dur_ns"])
    windows = [{"label": f"whole trace ({len(ks):,} kernels)", "start": t0, "end": t1, "key": None}]
    for s in steps:
        w = win_of.get(s["scope_key"])
        if w is None:
            continue
        a, b = w["step_ts_ns"], w["step_end_ns"]
        if s["scope_key"] in kspan:
            a, b = min(a, kspan[s["scope_key"]][0]), max(b, kspan[s["scope_key"]][1])
        windows.append({"label": step_title(s) + f", {s['kernels']:,} kernels", "start": a, "end": b,
                        "key": s["scope_key"]})
    initial = next((i for i, w in enumerate(windows) if step_id is not None and w["key"] == str(step_id)), 0)
    idle_ns = sum(g[2] for g in gaps)
    return {"kernels": len(ks), "total_kernels": total, "truncated": total > len(ks), "lanes": lanes,
            "k": kern, "ops": sorted(ops.values()), "gaps": gaps, "names": list(names), "steps": windows,
            "initial_step": initial, "window_ns": t1 - t0, "idle_ns": idle_ns,
            "cause_colors": IDLE_CAUSE_COLORS, "colors": plots.PALETTE}


def work_segments(g: dict[str, Any]) -> list[tuple[str, float]]:
    return [("compute", g["t_compute_ns"]), ("communication exposed", g["t_comm_exposed_ns"]),
            ("memcpy/memset exposed", g["t_memory_exposed_ns"]), ("idle", g["t_idle_ns"])]


def device_label(g: dict[str, Any]) -> str:
    return (f"rank {g['rank']} " if g.get("rank") is not None else "") + f"GPU {g['device_id']}"


QUEUE_POINTS = 4000  # queue-length changes drawn per stream


def queue_data(con: duckdb.DuckDBPyConnection, trace_id: str, window: tuple[int, int] | None) -> dict[str, Any]:
    """stream_queue_summary rows of the trace, and each stream's queue length (stream_queue_length) in ``window``."""
    if not (_has(con, "stream_queue_summary") and _has(con, "stream_queue_length")):
        return {"summary": [], "series": {}, "window": window}
    summary = _rows(con, "SELECT * FROM stream_queue_summary WHERE trace_id = $t ORDER BY device_id, stream_id",
                    {"t": trace_id})
    series: dict[str, list[tuple[int, int]]] = {}
    if window is not None:
        for r in _rows(con, """
            SELECT device_id, stream_id, ts_ns, queue_length FROM (
                SELECT *, row_number() OVER (PARTITION BY device_id, stream_id ORDER BY ts_ns) AS n
                FROM stream_queue_length WHERE trace_id = $t AND ts_ns + held_ns >= $a AND ts_ns <= $b)
            WHERE n <= $k ORDER BY device_id, stream_id, ts_ns
        """, {"t": trace_id, "a": window[0], "b": window[1], "k": QUEUE_POINTS}):
            series.setdefault(f"GPU {r['device_id']} stream {r['stream_id']}", []).append(
                (r["ts_ns"], r["queue_length"]))
    return {"summary": summary, "series": series, "window": window}


def idle_segments(r: dict[str, Any]) -> list[tuple[str, float]]:
    return [("launch_late", r["idle_launch_late_ns"]), ("sync_drain", r["idle_sync_drain_ns"]),
            ("memcpy", r["idle_memcpy_ns"]), ("other", r["idle_other_ns"])]


def _durations(log2_counts: list[tuple[int, int]], p: tuple) -> dict[str, Any]:
    """Kernel durations of a trace: counts in power-of-two bins (ns) from (floor(log2 ns), kernels) in order, and
    p10 / p50 / p90 / max."""
    bins = [(int(2 ** b), int(2 ** (b + 1)), n) for b, n in log2_counts]
    if bins:  # empty bins between the first and the last are shown as zero
        have = {lo: n for lo, _, n in bins}
        lo_b, hi_b = int(math.log2(bins[0][0])), int(math.log2(bins[-1][0]))
        bins = [(2 ** b, 2 ** (b + 1), have.get(2 ** b, 0)) for b in range(lo_b, hi_b + 1)]
    return {"bins": bins, "p10_ns": p[0], "p50_ns": p[1], "p90_ns": p[2], "max_ns": p[3]}


def sweep_data(con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Per sweep (the warehouse's sweep_points / sweep_transition: one definition, in sql/), its points in batch-size
    order and where HDBI crosses 0.5 (``transition_bs``); only sweeps with a selected trace, points with an HDBI."""
    if not (_has(con, "sweep_points") and _has(con, "sweep_transition")):
        return {}
    points = _rows(con, """
        SELECT * FROM sweep_points
        WHERE hdbi IS NOT NULL AND sweep_key IN (SELECT sweep_key FROM sweep_points
                                                 WHERE $all OR trace_id IN (SELECT unnest($ids::VARCHAR[])))
        ORDER BY sweep_key, batch_size, file_name
    """, {"all": trace_ids is None, "ids": trace_ids or []})
    trans = {r["sweep_key"]: r for r in _rows(con, "SELECT * FROM sweep_transition")}
    out: dict[str, dict[str, Any]] = {}
    for p in points:
        out.setdefault(p["sweep_key"], {"points": []})["points"].append(p)
    for key, sw in out.items():
        tr = trans.get(key) or {}
        sw["transition"] = tr
        sw["transition_bs"] = tr.get("hdbi_crossing_batch_size")
    return out


def assumption_groups(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The caveats of every trace (taxbreak.read.readmodel.caveats) grouped by kind: per kind the traces it concerns
    (their labels) and the distinct wordings with the traces each applies to."""
    by_kind: dict[str, dict[str, Any]] = {}
    for t in traces:
        for c in readmodel.caveats(t):
            g = by_kind.setdefault(c["kind"], {"kind": c["kind"], "traces": [], "texts": {}})
            g["traces"].append(trace_label(t))
            g["texts"].setdefault(c["text"], []).append(trace_label(t))
    return list(by_kind.values())


def assumptions(traces: list[dict[str, Any]]) -> list[str]:
    """The caveats of every trace (taxbreak.read.readmodel.caveats), grouped by kind: one line per kind naming the
    traces
    it concerns, the first trace's wording as the example."""
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for t in traces:
        for c in readmodel.caveats(t):
            by_kind.setdefault(c["kind"], []).append((t["file_name"], c["text"]))
    out = []
    for kind, items in by_kind.items():
        names = ", ".join(n for n, _ in items[:6]) + (f" and {len(items) - 6} more" if len(items) > 6 else "")
        out.append(f"{kind} ({len(items)} trace(s): {names}): {items[0][1]}")
    return out


def _ids_param(traces: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {"ids": [t["trace_id"] for t in traces]}


def _grouped(con: duckdb.DuckDBPyConnection, sql: str, traces: list[dict[str, Any]],
             drop_id: bool = False) -> dict[str, list[dict[str, Any]]]:
    """``sql``'s rows (it filters ``trace_id IN (SELECT unnest($ids))``) by trace, in the statement's order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in _rows(con, sql, _ids_param(traces)):
        tid = r.pop("trace_id") if drop_id else r["trace_id"]
        out.setdefault(tid, []).append(r)
    return out


_IDS = "trace_id IN (SELECT unnest($ids::VARCHAR[]))"  # the traces of a batched statement (``_grouped``)


def step_rows(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The step scopes of ``trace_ids`` (taxbreak_by_scope, scope_kind 'step') by trace, in step order."""
    return _grouped(con, f"""
        SELECT trace_id, scope_key, step_name, phase, kernels, delta_ft_ns, delta_ct_ns, delta_kt_ns,
               t_orchestrate_ns, t_device_active_ns, hdbi
        FROM taxbreak_by_scope WHERE {_IDS} AND scope_kind = 'step'
        ORDER BY trace_id, try_cast(scope_key AS INTEGER) NULLS LAST""", [{"trace_id": t} for t in trace_ids],
        drop_id=True)


def index_data(con: duckdb.DuckDBPyConnection, traces: list[dict[str, Any]]) -> None:
    """The per-trace figures the index draws across traces (step scopes, GPU breakdown, idle gaps by cause, kernel
    durations, prefill vs decode), for every trace at once: one statement per figure, not one per trace (over the
    snapshot's marts a statement per trace cost ~0.05 s each, every trace on every run)."""
    ids = _IDS
    steps = step_rows(con, [t["trace_id"] for t in traces])  # its page draws them; the caveats read if there are any
    gpu = _grouped(con, f"SELECT * FROM gpu_time_breakdown WHERE {ids} ORDER BY trace_id, rank NULLS LAST, device_id",
                   traces) if _has(con, "gpu_time_breakdown") else {}
    idle = _grouped(con, f"SELECT * FROM device_busy WHERE {ids} ORDER BY trace_id, device_id", traces)
    phases = _grouped(con, f"""
        SELECT trace_id, scope_key AS phase, kernels, linked_fraction, low_coverage, t_orchestrate_ns,
               t_device_active_ns, hdbi, hdbi_linked, hdbi_wall
        FROM taxbreak_by_scope WHERE {ids} AND scope_kind = 'phase' AND scope_key IN ('prefill', 'decode')
        ORDER BY trace_id, scope_key DESC""", traces, drop_id=True)
    bins: dict[str, list[tuple[int, int]]] = {}
    for tid, b, n in con.execute(f"""
            SELECT trace_id, floor(log2(greatest(kernel_dur_ns, 1)))::INTEGER AS b, count(*) FROM int_kernel_links
            WHERE {ids} GROUP BY trace_id, b ORDER BY trace_id, b""", _ids_param(traces)).fetchall():
        bins.setdefault(tid, []).append((b, n))
    pct = {r[0]: r[1:] for r in con.execute(f"""
            SELECT trace_id, quantile_disc(kernel_dur_ns, 0.1), quantile_disc(kernel_dur_ns, 0.5),
                   quantile_disc(kernel_dur_ns, 0.9), max(kernel_dur_ns)
            FROM int_kernel_links WHERE {ids} GROUP BY trace_id""", _ids_param(traces)).fetchall()}
    verdicts = readmodel.verdicts(con, [t["trace_id"] for t in traces])
    for t in traces:
        tid = t["trace_id"]
        t["verdict"] = verdicts.get(tid)
        t["steps"] = steps.get(tid, [])
        t["gpu_breakdown"] = gpu.get(tid, [])
        t["idle"] = idle.get(tid, [])
        t["phases"] = phases.get(tid, [])
        t["durations"] = _durations(bins.get(tid, []), pct.get(tid, (None, None, None, None)))


def trace_details(con: duckdb.DuckDBPyConnection, t: dict[str, Any], step_id: str | None = None) -> None:
    """What only the trace's own page shows (host partition, top kernels, fusion candidates, timeline,
    stream queues, requests, what-if), into ``t``."""
    tid = t["trace_id"]
    t["host_partition"] = host_partition_rows(con, tid)
    t["top_kernels"] = top_kernels(con, tid)
    t["fusion"] = fusion_rows(con, tid)
    chosen = choose_step(t["steps"], step_id)
    t["timeline_step"] = chosen
    t["timeline"] = timeline_data(con, tid, chosen["scope_key"] if chosen else None, t["steps"])
    tl = t["timeline"]
    window = ((tl["steps"][tl["initial_step"]]["start"], tl["steps"][tl["initial_step"]]["end"])
              if tl["kernels"] else None)
    t["queues"] = queue_data(con, tid, window)
    t["requests"] = request_data(con, tid)
    t["whatif"] = whatif_report.whatif_data(con, tid)
    t["details"] = True


def collect(
    con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None = None, step_id: str | None = None,
    details: list[str] | None = None,
) -> dict[str, Any]:
    """Everything the report shows, as plain data.  ``details``: the traces whose own page data is read (None:
    every trace); the others carry only what the index draws (``t["details"]`` False) and ``write_report`` keeps
    their pages as they are, unless they must be redrawn (then it reads their details itself)."""
    for needed in ("trace_meta", "taxbreak_by_scope", "kernels_per_token", "skip_by_trace", "trace_launch_floor"):
        if not _has(con, needed):
            raise RuntimeError(f"the warehouse has no table {needed}: run `taxbreak analyze` first")
    traces = trace_rows(con, trace_ids)
    if trace_ids is not None:
        missing = sorted(set(trace_ids) - {t["trace_id"] for t in traces})
        if missing:
            raise RuntimeError(f"trace(s) not in the warehouse: {', '.join(missing)}")
    index_data(con, traces)
    wanted = None if details is None else set(details)
    todo = [t for t in traces if wanted is None or t["trace_id"] in wanted]
    show = len(todo) > 3 and sys.stderr.isatty()
    for t in traces:
        t["page"] = page_name(t)
        t["details"] = False
    for i, t in enumerate(todo, 1):
        if show:
            print(f"\rreport: trace {i}/{len(todo)} {t['file_name'][-40:]:<40}", end="", file=sys.stderr, flush=True)
        trace_details(con, t, step_id)
    if show:
        print(file=sys.stderr)
    return {"traces": traces, "sweeps": sweep_data(con, trace_ids), "assumptions": assumptions(traces),
            "assumption_groups": assumption_groups(traces), "step_id": step_id,
            "caveats": {t["file_name"]: [c["text"] for c in readmodel.caveats(t)] for t in traces},
            "workloads": trend_report.workload_data(con) if trace_ids is None else []}


REQUEST_STEPS_SHOWN = 40
REQUESTS_NAMED = 8  # requests shown by name in the share plot; the others are summed


def request_data(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, Any] | None:
    """The per-request attribution of one trace (docs/method.md): fitted vs observed latency per serving step,
    and each request's share per step for the first REQUEST_STEPS_SHOWN steps that list their requests. None when
    the warehouse has no fitted model (``taxbreak requests --refit``) or the trace has no serving steps."""
    unattributed = requests.unattributed_steps(con, trace_id)
    if not (_has(con, "request_step_fit") and _has(con, "request_step_shares")):
        return {"fit": [], "shares": [], "named": [], "fits": [], "split": [],
                "unattributed": unattributed} if unattributed else None
    fit = _rows(con, "SELECT step_id, phase, batch_requests, latency_ns, predicted_ns, baseline_predicted_ns, "
                     "rel_err, baseline_rel_err FROM request_step_fit WHERE trace_id = $t ORDER BY step_id",
                {"t": trace_id})
    if not fit and not unattributed:
        return None
    named = [r["request_id"] for r in _rows(
        con, "SELECT request_id FROM request_totals WHERE trace_id = $t "
             "ORDER BY model_share_ns DESC NULLS LAST, request_id LIMIT $k", {"t": trace_id, "k": REQUESTS_NAMED})]
    shares = _rows(con, "SELECT step_id, request_id, model_share_ns FROM request_step_shares WHERE trace_id = $t "
                        "AND step_id IN (SELECT DISTINCT step_id FROM request_step_shares WHERE trace_id = $t "
                        "ORDER BY step_id LIMIT $n) ORDER BY step_id, request_id",
                   {"t": trace_id, "n": REQUEST_STEPS_SHOWN})
    fits = _rows(con, "SELECT phase, fit_basis, steps_fitted, breakpoint_tokens, shared_ns, r2, rel_err_p50, "
                      "rel_err_p90, rel_err_p99, baseline_r2, baseline_rel_err_p50, baseline_rel_err_p90, "
                      "baseline_rel_err_p99, few_steps, fit_note FROM request_model_fit f WHERE "
                      f"{requests.TRACE_FITS} ORDER BY phase", {"t": trace_id})
    for f in fits:
        f["fit_note"] = ("warning: " if f["few_steps"] else "") + (f["fit_note"] or "")
    return {"fit": fit, "shares": shares, "named": named, "fits": fits,
            "split": requests.step_split(con, trace_id), "unattributed": unattributed}


REQUEST_FIT_COLUMNS = [
    ("phase", "phase", ""), ("fit_basis", "fitted on", ""), ("steps_fitted", "steps fitted", ""),
    ("breakpoint_tokens", "breakpoint Σp", ""), ("shared_ns", "shared δ", "ns"), ("r2", "R²", "fraction"),
    ("rel_err_p50", "p50 error", "fraction"), ("rel_err_p90", "p90 error", "fraction"),
    ("rel_err_p99", "p99 error", "fraction"), ("baseline_r2", "baseline R²", "fraction"),
    ("baseline_rel_err_p50", "baseline p50", "fraction"), ("baseline_rel_err_p90", "baseline p90", "fraction"),
    ("baseline_rel_err_p99", "baseline p99", "fraction"), ("fit_note", "note", ""),
]


def requests_section(d: dict[str, Any] | None) -> str:
    """HTML: fitted vs observed step latency, and the share of each request per step (the model's shares; device
    time and host orchestration split by the same fractions are in request_step_shares)."""
    if not d:
        return ""
    h = ["<h3>Per-request latency attribution (LLMVisor; docs/method.md)</h3>"]
    if d["fits"]:
        h.append(_table(d["fits"], REQUEST_FIT_COLUMNS))
    if d.get("unattributed"):
        h.append("<p class='note'>Serving steps without attribution, and why (per step kind and annotation "
                 "source; docs/method.md §8 says what each source carries):</p>")
        h.append(_table(d["unattributed"], [("phase", "steps of kind", ""), ("composition_source", "source", ""),
                                            ("steps", "steps", ""), ("reason", "why", "")]))
    if d.get("split"):
        h.append("<p class='note'>The prediction of this trace's steps split into its prefill and decode parts (a "
                 "mixed step's shared constant δ spread over the two in proportion; docs/method.md §8).</p>")
        h.append(_table(d["split"], [("phase", "steps of kind", ""), ("steps", "steps", ""),
                                     ("predicted_ns", "predicted", "ns"), ("prefill_part_ns", "prefill part", "ns"),
                                     ("decode_part_ns", "decode part", "ns"), ("shared_ns", "shared δ in total", "ns"),
                                     ("prefill_fraction", "prefill fraction", "fraction")]))
    if not d["fit"]:
        return "".join(h)
    series: dict[str, list[tuple[float, float]]] = {}
    errors: dict[str, list[tuple[float, float]]] = {}
    for r in d["fit"]:
        series.setdefault(f"model, {r['phase']}", []).append((r["latency_ns"], r["predicted_ns"]))
        if r["baseline_predicted_ns"] is not None:  # NULL: the phase has no baseline (a joint fit without pure steps)
            series.setdefault(f"token baseline, {r['phase']}", []).append((r["latency_ns"],
                                                                            r["baseline_predicted_ns"]))
        errors.setdefault(f"model, {r['phase']}", []).append(
            (r["batch_requests"], (r["predicted_ns"] - r["latency_ns"]) / r["latency_ns"]))
    h.append(plots.scatter(series, "observed step latency", "fitted step latency",
                           title="Fitted vs observed step latency (dashed: y = x)"))
    h.append(plots.scatter(errors, "requests in the step |B|", "(fitted - observed) / observed",
                           title="Step error against batch size (dashed: 0)", unit="fraction", x_unit="requests"))
    if d["shares"]:
        named = set(d["named"])
        by_step: dict[int, dict[str, float]] = {}
        for r in d["shares"]:
            key = r["request_id"] if r["request_id"] in named else "other requests"
            seg = by_step.setdefault(r["step_id"], {})
            seg[key] = seg.get(key, 0.0) + r["model_share_ns"]
        order = [*d["named"], "other requests"]
        rows = [(f"step {sid}", [(k, v[k]) for k in order if k in v]) for sid, v in by_step.items()]
        h.append(plots.stacked_hbar(rows, title=f"Share of each request per step (first {len(rows)} steps; the "
                                    f"{len(d['named'])} largest requests by name)"))
    else:
        h.append("<p class='note'>no per-request shares: this trace's steps give per-step sums only (no request "
                 "ids).</p>")
    return "".join(h)


# --- rendering ---------------------------------------------------------------------------------------------
CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1240px;padding:0 16px;
color:#222}h1{font-size:24px}h2{font-size:19px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:36px}
h3{font-size:15px;margin-top:22px}table{border-collapse:collapse;font-size:12.5px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}th{background:#f4f4f4}
.tw{overflow-x:auto;max-width:100%}td.link{min-width:240px;overflow-wrap:anywhere}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;
min-width:130px}.card b{display:block;font-size:18px;white-space:nowrap}.card span{color:#666;font-size:12px}
.card small{display:block;color:#666;font-size:11.5px}.note{color:#555;font-size:12.5px}
td.mono{overflow-wrap:anywhere;min-width:220px}td.nowrap{white-space:nowrap}
.warn{background:#fff6e5;border-left:4px solid #f28e2b;padding:6px 10px}
code{background:#f4f4f4;padding:1px 4px}.mono{font-family:ui-monospace,monospace;font-size:11.5px}
svg{max-width:100%;height:auto;display:block;margin:6px 0}
#timeline{position:relative;border:1px solid #ddd;padding:4px;user-select:none}
#timeline canvas{display:block;cursor:grab}.tl-bar{font-size:12.5px;margin:2px 0 6px}
.tl-tip{position:absolute;background:#fff;border:1px solid #999;padding:6px 8px;font-size:12px;max-width:370px;
box-shadow:0 2px 6px rgba(0,0,0,.2);pointer-events:none;z-index:2;overflow-wrap:anywhere}
.chain{margin:0;padding-left:18px}.chain li{overflow-wrap:anywhere}
.tw.index{max-height:70vh;overflow:auto;border:1px solid #eee}.tw.index table{margin:0}
.tw.index td:first-child,.tw.index th:first-child{position:sticky;left:0;background:#fff;z-index:1;min-width:200px;
max-width:280px}.tw.index th{position:sticky;top:0;z-index:2}.tw.index th:first-child{z-index:3;background:#f4f4f4}
.banner ul{margin:4px 0;padding-left:20px}.banner p{margin:2px 0}
"""


def _cell(v: Any, unit: str) -> str:
    if isinstance(v, list):
        if not v:
            return "<td></td>"
        return "<td class='mono'><ol class='chain'>" + "".join(f"<li>{escape(str(x))}</li>" for x in v) + "</ol></td>"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"<td class='n'>{escape(fmt_value(v, unit))}</td>"
    if isinstance(v, _Html):
        return f"<td class='{v.cls}'>{v}</td>"
    return f"<td class='mono'>{escape('' if v is None else str(v))}</td>"


class _Html(str):
    """A table cell's ready-made HTML (``cls``: its CSS class)."""

    cls = "nowrap"


class _Link(_Html):
    cls = "link"


class _Chain(_Html):
    cls = "mono"


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str, str]], box: str = "") -> str:
    """cols: (key, header, unit); the unit is printed with every value (µs, ms, ...). Nothing is cut: long names
    wrap, lists (a fusion chain) are shown whole, one item per line. A wide table scrolls inside its own box
    (``div.tw``; ``box``: an extra class of that box)."""
    if not rows:
        return "<p class='note'>none</p>"
    head = "".join(f"<th>{escape(h)}</th>" for _, h, _ in cols)
    body = ["<tr>" + "".join(_cell(r.get(key), unit) for key, _, unit in cols) + "</tr>" for r in rows]
    return f"<div class='tw{' ' + box if box else ''}'><table><tr>{head}</tr>{''.join(body)}</table></div>"


# the index's table of traces, in reading order
INDEX_COLUMNS = [
    ("link", "trace (GPU · id · file)", ""), ("verdict", "verdict (top lever)", ""), ("hdbi", "HDBI", "fraction"),
    ("hdbi_linked", "HDBI_linked", "fraction"), ("hdbi_wall", "HDBI_wall", "fraction"), ("flags", "flags", ""),
    ("t_orchestrate_ns", "T_Orchestrate", "ns"), ("t_device_active_ns", "T_DeviceActive", "ns"),
    ("kernels", "kernels", ""), ("linked_fraction", "linked", "fraction"), ("kpt", "kernels/token", ""),
    ("tklqt", "TKLQT", ""), ("il_ns", "end-to-end", "ns"), ("model", "model", ""), ("batch_size", "bs", ""),
    ("tsys", "T_sys", ""),
]


def split_segments(r: dict[str, Any]) -> list[tuple[str, float]]:
    return [("ΔFT framework", r["delta_ft_ns"] or 0), ("ΔCT library", r["delta_ct_ns"] or 0),
            ("ΔKT launch floor", r["delta_kt_ns"] or 0), ("device active", r["t_device_active_ns"] or 0)]


def gpu_short(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3', 'AMD Instinct MI300X VF' -> 'MI300X VF'; 'GPU ?' when unknown."""
    if not name:
        return "GPU ?"
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "AMD Instinct ", "AMD Radeon ", "AMD "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def gpu_label(t: dict[str, Any]) -> str:
    """A trace's GPU as labels show it: the model (``gpu_short``); where the trace records none (an Nsight export
    without TARGET_INFO_GPU) the GPUs that ran its kernels, counted from the trace (``gpus_with_kernels``), rather
    than a bare 'GPU ?'."""
    if t.get("gpu_name"):
        return gpu_short(t["gpu_name"])
    n = t.get("gpus_with_kernels") or 0
    return f"{n} GPUs, model not recorded" if n > 1 else "GPU model not recorded" if n == 1 else "no GPU kernels"


def trace_label(t: dict[str, Any]) -> str:
    """A trace's label on every chart: its GPU, a short id and its file name, so two same-named files differ."""
    return f"{gpu_label(t)} · {t['trace_id'][:6]} · {t['file_name']}"


def page_name(t: dict[str, Any]) -> str:
    return f"traces/{t['trace_id'][:12]}.html"


def _t_sys(t: dict[str, Any]) -> str:
    return f"{fmt_value(t['t_sys_ns'], 'ns')} ({t['t_sys_source']})" if t.get("t_sys_ns") is not None else "n/a"


def _tklqt_total(t: dict[str, Any]) -> str:
    """'1.401 s total': the sum; readmodel.tklqt_note says what it is, beside it or in a note under the table."""
    return f"{fmt_value(t.get('tklqt_ns'), 'ns')} total"


def _cards(t: dict[str, Any]) -> str:
    items = [
        ("HDBI", fmt_value(t["hdbi"], "fraction"), ""),
        ("HDBI_linked", fmt_value(t["hdbi_linked"], "fraction"), ""),
        ("HDBI_wall", fmt_value(t["hdbi_wall"], "fraction"), ""),
        ("linked fraction", fmt_value(t["linked_fraction"], "fraction"),
         "low coverage" if "low_coverage" in readmodel.flags(t) else ""),
        ("T_Orchestrate", fmt_value(t["t_orchestrate_ns"], "ns"), "ΔFT + ΔCT + ΔKT, summed per kernel"),
        ("T_DeviceActive", fmt_value(t["t_device_active_ns"], "ns"), "sum of kernel durations"),
        ("TKLQT", _tklqt_total(t), readmodel.tklqt_note(t)),
        ("end-to-end (IL)", fmt_value(t["il_ns"], "ns"), ""),
        ("kernels / token", fmt_value(t["kpt"], ""), f"decode only {fmt_value(t['kpt_decode'], '')}"),
        ("T_sys (launch floor)", fmt_value(t["t_sys_ns"], "ns"), str(t["t_sys_source"] or "")),
    ]
    return "<div class='cards'>" + "".join(
        f"<div class='card'><b>{escape(v)}</b><span>{escape(k)}</span>" + (f"<small>{escape(sub)}</small>" if sub
                                                                             else "") + "</div>"
        for k, v, sub in items) + "</div>"


def _hdbi_caveat(t: dict[str, Any]) -> str:
    """The banner under the cards: the HDBI reading, then each caveat that bears on it as an item of its own (one
    dense paragraph was hard to read), then what the reference lines are."""
    items = [f"<li><b>{escape(c['kind'])}</b>: {escape(c['text'])}</li>" for c in readmodel.caveats(t)
             if c["kind"] in ("coverage", "wall", "blocked", "outlier", "launch_floor", "no_kernels")]
    ref = (f"The {' / '.join(f'{y:g}' for y in readmodel.HDBI_REFERENCE_LINES)} reference lines are our reading "
           "aids, not thresholds from the paper.")
    cls = "warn" if readmodel.flags(t) or t["t_sys_is_default"] else "note"
    return (f"<div class='{cls} banner'><p>{escape(readmodel.hdbi_text(t))}.</p>"
            + (f"<ul>{''.join(items)}</ul>" if items else "") + f"<p class='note'>{escape(ref)}</p></div>")


def _low_mark(t: dict[str, Any]) -> str | None:
    if "low_coverage" not in readmodel.flags(t) or t.get("linked_fraction") is None:
        return None
    return f"⚠ low coverage: {t['linked_fraction']:.1%} linked"


def hdbi_chart(traces: list[dict[str, Any]], title: str) -> tuple[str, list[dict[str, Any]]]:
    """HDBI, HDBI_linked and HDBI_wall of the traces on a 0..1 axis, null-kernel calibration traces left out (they
    are returned, for the note that says so)."""
    calib = [t for t in traces if t.get("is_null_kernel")]
    rows = [(trace_label(t), {"HDBI": t["hdbi"], "HDBI_linked": t["hdbi_linked"], "HDBI_wall": t["hdbi_wall"]},
             _low_mark(t)) for t in traces if not t.get("is_null_kernel") and t["hdbi"] is not None]
    if not rows:
        return "", calib
    return plots.hdbi_bars(rows, readmodel.HDBI_REFERENCE_LINES, "reference (ours, not the paper's)",
                           title=title), calib


def _kpt_section(traces: list[dict[str, Any]]) -> str:
    pts = [t for t in traces if t["kpt"] is not None]
    if not pts:
        return "<p class='note'>No trace has a token count: kernels per token unknown.</p>"
    kinds = {t["model_kind"] for t in pts}
    rows = []
    for t in pts:
        tag = f" [{t['model_kind']}]" if t["model_kind"] else ""
        rows.append((trace_label(t) + tag, float(t["kpt"])))
    svg = plots.hbar(rows, unit="", title="Kernels per output token" + (" — dense vs MoE" if {"dense", "moe"} <= kinds
                                                                        else "") + " (log scale)", log=True)
    by_kind = ""
    if {"dense", "moe"} <= kinds:
        agg = []
        for kind in ("dense", "moe"):
            ks = [t for t in pts if t["model_kind"] == kind]
            agg.append({"model_kind": kind, "traces": len(ks),
                        "kpt_mean": sum(t["kpt"] for t in ks) / len(ks),
                        "kpt_decode_mean": (sum(t["kpt_decode"] for t in ks if t["kpt_decode"] is not None)
                                            / max(1, sum(1 for t in ks if t["kpt_decode"] is not None)))})
        by_kind = _table(agg, [("model_kind", "model kind", ""), ("traces", "traces", ""),
                               ("kpt_mean", "mean kernels/token", ""), ("kpt_decode_mean", "mean decode k/t", "")])
    return svg + by_kind


def _tklqt_rule_note(tr: dict[str, Any]) -> str:
    if tr.get("baseline_tklqt_ns") is None:
        return ""
    b = tr["tklqt_transition_batch_size"]
    return escape(f" TKLQT rule (docs/method.md §6, ours: TKLQT > 1.25 × {fmt_value(tr['baseline_tklqt_ns'], 'ns')}, "
                  "the median of the two smallest batches): " + (f"transition at batch size {b}" if b is not None
                  else "no transition") + ("; agrees with HDBI ≥ 0.5." if tr["transitions_agree"]
                                           else "; HDBI ≥ 0.5 first at batch size "
                                           f"{tr['hdbi_transition_batch_size'] or 'none'}."))


def _sweep_section(sweeps: dict[str, Any]) -> str:
    if not sweeps:
        return "<p class='note'>No batch-size sweep in the selection (a model traced at two or more batch sizes).</p>"
    out = []
    for model, sw in sweeps.items():
        pts = sw["points"]
        tb = sw["transition_bs"]
        v = [(tb, f"HDBI 0.5 at bs ≈ {tb:.3g}")] if tb else []
        out.append(plots.line_chart({model: [(p["batch_size"], p["hdbi"]) for p in pts]}, "batch size", "HDBI",
                                    title=f"{model}: HDBI vs batch size", hlines=HDBI_LABELS,
                                    vlines=v, y_unit="fraction", y_max=1.0))
        out.append(plots.line_chart({model: [(p["batch_size"], p["tklqt_ns"] or 0) for p in pts]}, "batch size",
                                    "TKLQT", title=f"{model}: TKLQT vs batch size", vlines=v, y_unit="ns"))
        out.append(f"<p class='note'>{escape(model)}: " + (
            f"host-bound → device-bound transition (HDBI crosses 0.5) near batch size {tb:.3g}."
            if tb else "HDBI does not cross 0.5 in this sweep.") + _tklqt_rule_note(sw.get("transition") or {})
            + f" TKLQT: {escape(readmodel.TKLQT_IS_A_SUM)}.</p>")
    return "".join(out)


def _phase_section(traces: list[dict[str, Any]]) -> str:
    rows, tab = [], []
    for t in traces:
        for ph in t.get("phases") or []:
            label = f"{trace_label(t)} · {ph['phase']}"
            if ph["hdbi"] is not None:
                mark = (f"⚠ low coverage: {ph['linked_fraction']:.1%} linked" if ph["low_coverage"]
                        and ph["linked_fraction"] is not None else None)
                rows.append((label, {"HDBI": ph["hdbi"], "HDBI_linked": ph["hdbi_linked"],
                                     "HDBI_wall": ph["hdbi_wall"]}, mark))
            tab.append({"trace": trace_label(t), **ph})
    if not rows:
        return "<p class='note'>No trace has prefill or decode steps.</p>"
    return (plots.hdbi_bars(rows, readmodel.HDBI_REFERENCE_LINES, "reference (ours, not the paper's)",
                            title="Prefill vs decode: HDBI, HDBI_linked, HDBI_wall per phase")
            + _table(tab, [("trace", "trace", ""), ("phase", "phase", ""), ("kernels", "kernels", ""),
                           ("t_orchestrate_ns", "T_Orchestrate", "ns"), ("t_device_active_ns", "T_DeviceActive", "ns"),
                           ("hdbi", "HDBI", "fraction"), ("hdbi_linked", "HDBI_linked", "fraction"),
                           ("hdbi_wall", "HDBI_wall", "fraction")]))


def _idle_section(traces: list[dict[str, Any]]) -> str:
    rows = []
    for t in traces:
        tot = {c: 0 for c in IDLE_CAUSE_COLORS}
        for r in t.get("idle") or []:
            for c, v in idle_segments(r):
                tot[c] += v
        if sum(tot.values()) > 0:
            rows.append((trace_label(t), list(tot.items())))
    if not rows:
        return "<p class='note'>No GPU idle gaps.</p>"
    return plots.stacked_hbar(rows, title="GPU idle time by cause (device_idle_gaps; every GPU of the trace)",
                              colors=IDLE_CAUSE_COLORS, normalize=True)


def _gpu_section(traces: list[dict[str, Any]]) -> str:
    rows, notes = [], {}
    for t in traces:
        for g in t.get("gpu_breakdown") or []:
            label = f"{trace_label(t)} · {device_label(g)}"
            rows.append((label, work_segments(g)))
            if g["comm_busy_ns"]:
                notes[label] = f"comm overlapped {g['comm_overlap_fraction']:.0%}"
    if not rows:
        return "<p class='note'>No GPU breakdown (run `taxbreak analyze` to build gpu_time_breakdown).</p>"
    return plots.stacked_hbar(rows, title="GPU time by work class, per rank and device (compute > communication > "
                              "memcpy/memset > idle)", colors=WORK_COLORS, normalize=True, notes=notes)


def _durations_section(traces: list[dict[str, Any]]) -> str:
    rows = [(trace_label(t), d["p10_ns"], d["p50_ns"], d["p90_ns"], d["max_ns"]) for t in traces
            if (d := t.get("durations")) and d["p50_ns"] is not None]
    if not rows:
        return "<p class='note'>No kernels.</p>"
    return plots.range_hbar(rows, title="Kernel durations per trace")


def _assumption_section(groups: list[dict[str, Any]]) -> str:
    if not groups:
        return "<p class='note'>none: every floor measured, every count known.</p>"
    h = ["<table><tr><th>kind</th><th>traces</th><th>what it means (wording from the read model)</th></tr>"]
    for g in groups:
        texts = list(g["texts"].items())
        lines = []
        for text, who in texts[:4]:
            lines.append(f"<li>{escape(text)}" + (f" <span class='note'>({len(who)} trace(s): "
                                                  f"{escape(', '.join(who[:3]))}"
                                                  f"{' …' if len(who) > 3 else ''})</span>" if len(texts) > 1 else "")
                         + "</li>")
        more = (f"<li class='note'>and {len(texts) - 4} other wording(s) on the trace pages</li>"
                if len(texts) > 4 else "")
        h.append(f"<tr><td class='nowrap'>{escape(g['kind'])}</td><td class='n'>{len(g['traces'])}</td>"
                 f"<td><ul class='chain'>{''.join(lines)}{more}</ul></td></tr>")
    return "".join(h) + "</table>"


# The page checks its own layout once drawn and says so on <body> (the browser tests read it): data-rendered = the
# number of plots, data-clipped = SVG texts that stick out of their plot, data-overflow = 1 when the page is wider
# than the window (something would be cut off at the right).
LAYOUT_CHECK = """(function(){var svgs=document.querySelectorAll('svg'),bad=[];
svgs.forEach(function(s){var r=s.getBoundingClientRect();s.querySelectorAll('text').forEach(function(t){
var b=t.getBoundingClientRect();if(b.width>0&&(b.left<r.left-0.5||b.right>r.right+0.5||b.top<r.top-0.5||
b.bottom>r.bottom+0.5)){bad.push(t.textContent);}});});
document.body.setAttribute('data-clipped',bad.length);document.body.setAttribute('data-clipped-texts',
bad.slice(0,5).join(' | '));document.body.setAttribute('data-overflow',
document.documentElement.scrollWidth>window.innerWidth+1?1:0);
document.body.setAttribute('data-rendered',svgs.length);})();"""


def _page(title: str, body: list[str], script: str = "") -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{CSS}</style>"
        "<script>window.onerror=function(m){document.title='JSERROR: '+m;};</script></head><body>"
        + "".join(body) + script
        + "<script>" + LAYOUT_CHECK + "</script>"
        "</body></html>\n"
    )


def _timeline_script() -> str:
    return (ASSETS / "timeline.js").read_text(encoding="utf-8")


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _json_for_script(obj: Any) -> str:
    """``obj`` as JSON that stays data inside ``<script type='application/json'>``: every ``<``, ``>``, ``&`` and
    U+2028/2029 written as a \\u escape (the same value for JSON.parse), so no kernel name can close the block or
    open an HTML comment in it (issue 30: ``x<!--<script>`` left the page's timeline undrawn)."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return "".join(_SCRIPT_UNSAFE.get(c, c) for c in text) if any(c in text for c in _SCRIPT_UNSAFE) else text


def _kernel_names(t: dict[str, Any]) -> dict[str, str]:
    """Full name -> label of every kernel the trace page lists (top kernels, fusion chains): the one short-name rule
    (taxbreak.read.kernel_names.short_names) over all of them, as ``taxbreak summary`` labels them."""
    return short_names([k["kernel_name"] for k in t["top_kernels"]] + [n for f in t["fusion"] for n in f["chain"]])


def _chain_cell(chain: list[str], names: dict[str, str]) -> _Html:
    """A fusion chain in order, one kernel a line by its short name, the full name on hover."""
    return _Chain("<ol class='chain'>" + "".join(f"<li title='{escape(n, quote=True)}'>{escape(names[n])}</li>"
                                                 for n in chain) + "</ol>")


def _verdict_cell(t: dict[str, Any]) -> Any:
    """The index's verdict column: bound, confidence and the top lever with its replayed gain."""
    v = t.get("verdict")
    if not v:
        return _Html("<span class='note'>n/a</span>")
    top = readmodel.top_levers(v, 1)
    lever = (f"<br><span class='note'>{escape(top[0]['label'])}: {top[0]['il_change_pct']:+.1f}% IL</span>"
             if top else "")
    return _Html(f"<b>{escape(v['bound'])}</b> <span class='note'>({escape(v['confidence'])})</span>{lever}")


def verdict_section(t: dict[str, Any]) -> str:
    """The block each trace page opens with: the verdict, its evidence and the levers (readmodel wording)."""
    lines = readmodel.format_verdict(t.get("verdict"), readmodel.caveats(t))
    head, rest = lines[0].strip(), [x.strip() for x in lines[1:]]
    items = "".join(f"<li>{escape(x)}</li>" for x in rest)
    return f"<div class='verdict'><h2>{escape(head)}</h2><ul>{items}</ul></div>"


def render_trace_page(t: dict[str, Any], index_href: str = "../index.html") -> str:
    """One trace's page: headline cards and caveats, the step split, host partition, the interactive timeline, GPU
    breakdown and stream queues, idle gaps, kernel durations, top kernels, requests, fusion candidates."""
    h = [f"<p class='note'><a href='{escape(index_href)}'>← all traces</a></p>",
         f"<h1>{escape(t['file_name'])}</h1>",
         "<p class='note'>" + escape(" · ".join(str(x) for x in (
             f"trace {t['trace_id'][:16]}", t["source_format"], t["gpu_name"],
             t["model"] and f"model {t['model']}" + (f" ({t['model_kind']})" if t["model_kind"] else ""),
             t["batch_size"] and f"batch {t['batch_size']}",
             t["output_tokens"] and f"output tokens {t['output_tokens']}",
             t.get("is_null_kernel") and "null-kernel calibration trace") if x)) + "</p>",
         verdict_section(t), _cards(t), _hdbi_caveat(t)]
    steps = [s for s in t["steps"] if s["scope_key"] != "outside_steps"]
    if steps:
        rows = [(step_title(s), split_segments(s)) for s in steps[:60]]
        h.append(plots.stacked_hbar(rows, title="Per step: host orchestration (ΔFT / ΔCT / ΔKT) and device-active "
                                    "time, summed — not a wall time", colors=SPLIT_COLORS, normalize=True))
        if len(steps) > 60:
            h.append(f"<p class='note'>first 60 of {len(steps)} steps.</p>")
    if t.get("host_partition"):
        rows = [("whole trace (all threads)" if r["scope_kind"] == "trace" else
                 f"step {r['step_id']}: {r['step_name']}", host_segments(r)) for r in t["host_partition"][:61]]
        h.append(plots.stacked_hbar(rows, title="Host time partition (self time; parts add up to wall time)",
                                    colors=HOST_COLORS))
    tl = t["timeline"]
    h.append("<h2>Timeline</h2>")
    script = ""
    if tl["kernels"]:
        h.append("<p class='note'>Every kernel" + (f" (the first {tl['kernels']:,} of {tl['total_kernels']:,})"
                                                   if tl["truncated"] else "")
                 + " on a lane per GPU stream, its launch call and framework op above; GPU idle gaps coloured by "
                 "cause (" + ", ".join(f"<span style='color:{c}'>■</span> {escape(k)}"
                                       for k, c in IDLE_CAUSE_COLORS.items())
                 + "). Wheel: zoom; drag: pan; double-click: the whole window; hover: ΔFT/ΔCT/ΔKT, t_dispatch and "
                 "queueing; lines: launch → kernel. In the opening window the GPU is idle "
                 f"{fmt_value(tl['idle_ns'], 'ns')} of the trace's kernel span {fmt_value(tl['window_ns'], 'ns')}."
                 "</p>")
        h.append("<div id='timeline'></div>")
        script = (f"<script type='application/json' id='tl-data'>{_json_for_script(tl)}</script>"
                  f"<script>{_timeline_script()}</script>")
    else:
        h.append("<p class='note'>no kernels</p>")
    h.append("<h2>GPUs: work classes, communication overlap, idle gaps, stream queues</h2>")
    if t.get("gpu_breakdown"):
        h.append(plots.stacked_hbar([(device_label(g), work_segments(g)) for g in t["gpu_breakdown"]],
                                    title="GPU time by work class (compute > communication > memcpy/memset > idle)",
                                    colors=WORK_COLORS))
        h.append(_table(t["gpu_breakdown"], [
            ("rank", "rank", ""), ("device_id", "GPU", ""), ("kernels", "kernels", ""),
            ("comm_kernels", "comm kernels", ""), ("span_ns", "span", "ns"), ("t_compute_ns", "compute", "ns"),
            ("t_comm_exposed_ns", "comm exposed", "ns"), ("t_memory_exposed_ns", "memory exposed", "ns"),
            ("t_idle_ns", "idle", "ns"), ("comm_busy_ns", "comm busy", "ns"),
            ("comm_compute_overlap_ns", "comm ∩ compute", "ns"), ("comm_overlap_fraction", "comm overlapped",
                                                                 "fraction")]))
    if t.get("idle"):
        h.append(plots.stacked_hbar([(f"GPU {r['device_id']}", idle_segments(r)) for r in t["idle"]],
                                    title="GPU idle time by cause", colors=IDLE_CAUSE_COLORS))
    q = t.get("queues") or {}
    if q.get("summary"):
        h.append(_table(q["summary"], [("device_id", "GPU", ""), ("stream_id", "stream", ""),
                                       ("kernels_queued", "kernels queued", ""), ("max_queue_length", "max queue", ""),
                                       ("mean_queue_length", "mean queue", ""),
                                       ("nonempty_ns", "time non-empty", "ns"), ("queue_span_ns", "span", "ns")]))
        if q.get("series") and q.get("window"):
            h.append(plots.step_chart(q["series"], q["window"][0], q["window"][1], y_label="kernels",
                                      title="Stream queue length (launched, not yet finished) in the timeline's "
                                      "opening window"))
    d = t.get("durations") or {}
    if d.get("bins"):
        h.append(plots.log_histogram(d["bins"], title="Kernel durations (power-of-two bins)"))
    h.append("<h2>Top kernels by total time</h2>")
    names = _kernel_names(t)
    if t["top_kernels"]:
        bars = [(names[k["kernel_name"]], k["total_dur_ns"]) for k in t["top_kernels"]]
        h.append(plots.hbar(bars))
        rows = [{**k, "short": names[k["kernel_name"]]} for k in t["top_kernels"]]
        h.append(_table(rows, [("short", "kernel", ""), ("invocations", "count", ""), ("total_dur_ns", "total", "ns"),
                               ("akd_ns", "mean (AKD)", "ns"), ("time_share", "share", "fraction"),
                               ("mean_launch_to_start_ns", "launch→start", "ns"), ("kernel_name", "full name", "")]))
    h.append(requests_section(t.get("requests")))
    h.append(whatif_report.whatif_section(t.get("whatif")))
    h.append("<h2>Fusion candidates (listed chains, by host time saved)</h2>")
    fusion = [{**f, "chain": _chain_cell(f["chain"], names)} for f in t["fusion"]]
    h.append(_table(fusion, [("rank", "rank", ""), ("chain_len", "L", ""), ("occurrences", "count", ""),
                                  ("proximity_score", "PS", "fraction"), ("launches_saved", "launches saved", ""),
                                  ("host_time_saved_ns", "host time saved", "ns"), ("chain", "chain (in order)", "")]))
    h.append("<h2>Caveats</h2>")
    cav = readmodel.caveats(t)
    h.append("<ul>" + "".join(f"<li><b>{escape(c['kind'])}</b>: {escape(c['text'])}</li>" for c in cav) + "</ul>"
             if cav else "<p class='note'>none</p>")
    return _page(f"TaxBreak: {t['file_name']}", h, script)


def render_index(data: dict[str, Any], title: str = "TaxBreak report") -> str:
    traces = data["traces"]
    body = [f"<h1>{escape(title)}</h1>",
            f"<p class='note'>{len(traces)} trace(s) · generated {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC · "
            "TaxBreak decomposition (docs/method.md): T_Orchestrate = ΔFT + ΔCT + ΔKT; HDBI near 0 = host-bound, "
            "near 1 = device-bound. One page per trace: follow its name in the table.</p>"]
    if traces:
        body.append("<h2>Across traces</h2>")
        # what a reader looks for first (the verdict, HDBI, the flags) comes first, so it shows without scrolling at
        # 1400 px; the rest scrolls inside the table's own box, the trace column staying in view (CSS .tw.index)
        body.append(_table([{**t, "link": _Link(f"<a href='{escape(t['page'])}'>{escape(trace_label(t))}</a>"),
                             "tsys": _Html(escape(_t_sys(t))),
                             "tklqt": _Html(escape(_tklqt_total(t))
                                            + "<br><span class='note'>" + escape(readmodel.tklqt_mean_text(t))
                                            + "</span>"),
                             "verdict": _verdict_cell(t),
                             "flags": ", ".join(readmodel.flags(t))} for t in traces], INDEX_COLUMNS, box="index"))
        body.append(f"<p class='note'>TKLQT: {escape(readmodel.TKLQT_IS_A_SUM)}; compare the per-launch mean.</p>")
        body.append(plots.stacked_hbar([(trace_label(t), split_segments(t)) for t in traces],
                                       title="Orchestration split: ΔFT / ΔCT / ΔKT vs device-active time, as shares "
                                       "(host and device time summed — not a wall time)",
                                       colors=SPLIT_COLORS, normalize=True))
        il = [(trace_label(t), float(t["il_ns"])) for t in traces if t["il_ns"]]
        if il:
            body.append(plots.hbar(il, title="End-to-end time (IL) per trace (log scale)", log=True))
        svg, calib = hdbi_chart(traces, "HDBI, HDBI_linked and HDBI_wall per trace (0 = host-bound, 1 = device-bound)")
        body.append(svg)
        if calib:
            body.append("<p class='note'>Left out of the HDBI chart: null-kernel calibration trace(s) "
                        + escape(", ".join(trace_label(t) for t in calib)) + " (they measure the launch floor).</p>")
        body.append("<h3>Prefill vs decode</h3>" + _phase_section(traces))
        body.append("<h3>GPU time by work class and rank</h3>" + _gpu_section(traces))
        body.append("<h3>GPU idle gaps by cause</h3>" + _idle_section(traces))
        body.append("<h3>Kernel durations</h3>" + _durations_section(traces))
        body.append("<h3>Kernels per token</h3>" + _kpt_section(traces))
        body.append("<h3>Batch-size sweeps</h3>" + _sweep_section(data["sweeps"]))
        if data.get("workloads"):
            body.append("<h3>Workloads over time</h3>" + trend_report.index_section(data["workloads"]))
    body.append("<h2>Assumptions, grouped by kind</h2>")
    body.append(_assumption_section(data.get("assumption_groups") or assumption_groups(traces)))
    return _page(title, body)


def render_html(data: dict[str, Any], title: str = "TaxBreak report") -> str:
    """The index and every trace page in one document (for tests and quick looks; ``write_report`` writes pages)."""
    parts = [render_index(data, title)] + [render_trace_page(t, "#") for t in data["traces"]]
    return "".join(parts)


def markdown_summary(data: dict[str, Any]) -> str:
    """The across-traces table as markdown (for Dagster materialisation metadata)."""
    lines = ["| trace | verdict | top lever | HDBI | HDBI_linked | coverage | HDBI_wall | flags | T_Orchestrate (ns) "
             "| host wall (ns) | ΔFT (ns) | ΔCT (ns) | ΔKT (ns) | T_DeviceActive (ns) | kernels/token |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for t in data["traces"]:
        v = t.get("verdict")
        top = readmodel.top_levers(v, 1) if v else []
        bound = f"{v['bound']} ({v['confidence']})" if v else "n/a"
        lever = readmodel.lever_text(top[0]).replace("|", "/") if top else "-"
        lines.append(f"| {t['file_name']} | {bound} | {lever} | {fmt_value(t['hdbi'], 'fraction')} | "
                     f"{fmt_value(t['hdbi_linked'], 'fraction')} | {fmt_value(t['linked_fraction'], 'fraction')} | "
                     f"{fmt_value(t['hdbi_wall'], 'fraction')} | {', '.join(readmodel.flags(t)) or '-'} | "
                     f"{t['t_orchestrate_ns']} | {t['host_wall_ns']} | {t['delta_ft_ns']} | {t['delta_ct_ns']} | "
                     f"{t['delta_kt_ns']} | {t['t_device_active_ns']} | {fmt_value(t['kpt'], '')} |")
    return "\n".join(lines)


MANIFEST = "manifest.json"


def _render_version() -> str:
    """Changes when the code that draws a page changes, so every page is redrawn then."""
    h = hashlib.sha256()
    for f in (Path(__file__), Path(plots.__file__), Path(readmodel.__file__), Path(whatif_report.__file__),
              Path(trend_report.__file__), ASSETS / "timeline.js"):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _content_hash(t: dict[str, Any], version: str) -> str:
    return hashlib.sha256((version + json.dumps(t, sort_keys=True, default=str)).encode()).hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:  # (a full disk): no half-written page, and the error names the page, not its .tmp
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    finally:
        tmp.unlink(missing_ok=True)


def write_report(
    con: duckdb.DuckDBPyConnection, out_path: str | Path, trace_ids: list[str] | None = None,
    step_id: str | None = None, data: dict[str, Any] | None = None,
) -> Path:
    """Write the report folder; returns the index file. ``out_path`` ending in .html names the index file (its
    folder holds ``traces/``), else it is the folder (``index.html`` in it). A trace page is rewritten only when its
    data (or the drawing code) changed since the last run, per ``manifest.json``; pages of traces no longer in the
    report are removed.  With ``data`` from ``collect(..., details=[...])`` only those traces' pages are read and
    redrawn (the others are kept as they are; a trace without a page yet, or every trace after the drawing code
    changed, is read here): what a run for one trace does, whatever the traces in the warehouse."""
    out = Path(out_path)
    index = out if out.suffix == ".html" else out / "index.html"
    folder = index.parent
    data = data or collect(con, trace_ids, step_id)
    folder.mkdir(parents=True, exist_ok=True)
    man_path = folder / MANIFEST
    try:
        manifest = json.loads(man_path.read_text(encoding="utf-8"))
        old, old_version = manifest.get("pages", {}), manifest.get("version")
    except (OSError, ValueError, AttributeError):
        old, old_version = {}, None
    version = _render_version()
    same_version = old_version == version
    pages: dict[str, str] = {}
    written = 0
    for t in data["traces"]:
        if not t.get("details", True):
            if same_version and t["page"] in old and (folder / t["page"]).exists():
                pages[t["page"]] = old[t["page"]]  # not read this run (collect's details): its page stays
                continue
            trace_details(con, t, data.get("step_id"))  # new to the folder, or drawn by older code
        digest = _content_hash(t, version)
        pages[t["page"]] = digest
        if old.get(t["page"]) != digest or not (folder / t["page"]).exists():
            _write_atomic(folder / t["page"], render_trace_page(t))
            written += 1
    for stale in set(old) - set(pages):
        p = folder / stale
        if p.parent == folder / "traces" and p.exists():
            p.unlink()
    if data.get("workloads") is not None and trace_ids is None:
        # a page per workload of two runs or more (trend_report); small, drawn every run, the others removed
        drawn = set()
        for w in data["workloads"]:
            if w["run_count"] > 1:
                drawn.add(trend_report.page_name(w))
                _write_atomic(folder / trend_report.page_name(w), trend_report.render_workload_page(w, _page))
        for p in (folder / "workloads").glob("*.html") if (folder / "workloads").is_dir() else []:
            if f"workloads/{p.name}" not in drawn:
                p.unlink()
    _write_atomic(index, render_index(data))
    _write_atomic(man_path, json.dumps({"version": version, "pages": pages, "pages_written_last_run": written},
                                       indent=1, sort_keys=True))
    return index


def default_output(warehouse: str | os.PathLike[str]) -> Path:
    """The report folder beside the warehouse file (``warehouse/reports``): the one place ``taxbreak report``,
    ``make demo`` and the Dagster report asset write it, and ``make clean-warehouse`` removes."""
    return Path(warehouse).parent / "reports"


def cmd_report(args: argparse.Namespace) -> int:
    opened = open_for_cli(args, "report")
    if opened is None:
        return 2
    try:
        ids = None
        if args.trace:
            try:
                ids = resolve_group(opened.con, ",".join(args.trace))
            except GroupError as exc:
                print(f"taxbreak report: {exc}", file=sys.stderr)
                return 2
        out = write_report(opened.con, args.output or default_output(Paths.from_args(args).warehouse), ids,
                           args.step)
    except RuntimeError as exc:
        print(f"taxbreak report: {exc}", file=sys.stderr)
        return 2
    finally:
        opened.con.close()
    try:
        man = json.loads((out.parent / MANIFEST).read_text(encoding="utf-8"))
        pages = f"; {man['pages_written_last_run']} of {len(man['pages'])} trace page(s) rewritten"
    except (OSError, ValueError, KeyError):
        pages = ""
    print(f"wrote {out}{pages} (from the {opened.source} {opened.path})")
    return 0


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report (index.html + one page per trace) from the warehouse",
        description="A folder of self-contained HTML pages, no network needed: index.html across traces "
        "(orchestration split, HDBI / HDBI_linked / HDBI_wall, prefill vs decode, GPU work classes, idle gaps by "
        "cause, kernel durations, kernels per token, sweeps, assumptions) and traces/<id>.html per trace (step "
        "split, interactive timeline, GPU breakdown and stream queues, top kernels, fusion candidates). A trace's "
        "page is rewritten only when its data changed.",
    )
    p.add_argument("--trace", action="append", help="trace-id prefix, file glob, model:NAME ... (repeatable; "
                   "default every analysed trace)")
    p.add_argument("--step", help="step_id the timeline opens on (default: the first decode step)")
    p.add_argument("-o", "--output", default=None,
                   help="output folder, or the index file's path when it ends in .html (default: reports/ beside "
                   "the warehouse file, where `make demo` and the pipeline write it)")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_report)
