"""``taxbreak report``: one self-contained HTML file (inline SVG, no network) from the warehouse tables.

``collect`` reads the data (plain dicts and lists, testable without HTML); ``render_html`` draws it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from html import escape
from pathlib import Path
from typing import Any

import duckdb

from taxbreak import plots, readmodel
from taxbreak.config import add_path_args
from taxbreak.plots import fmt_value

HDBI_LABELS = [(0.2, "0.2: strongly host-bound"), (0.5, "0.5: host = device")]
SPLIT_COLORS = {"ΔFT framework": "#4e79a7", "ΔCT library": "#f28e2b", "ΔKT launch floor": "#e15759",
                "device active": "#59a14f"}
TIMELINE_MAX_KERNELS = 400
TIMELINE_NO_STEP_KERNELS = 150


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or {})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _has(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute(
        "SELECT count(*) FROM (SELECT table_name AS n FROM duckdb_tables() UNION ALL "
        "SELECT view_name FROM duckdb_views()) WHERE n = $n", {"n": name}).fetchone()[0])


def trace_rows(con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per analysed trace, from the read model every reader shares (taxbreak.readmodel)."""
    return readmodel.trace_headlines(con, trace_ids)


def step_rows(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[dict[str, Any]]:
    return _rows(con, """
        SELECT scope_key, step_name, phase, kernels, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_orchestrate_ns,
               t_device_active_ns, hdbi
        FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'step'
        ORDER BY try_cast(scope_key AS INTEGER) NULLS LAST
    """, {"t": trace_id})


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
    return _rows(con, """
        SELECT chain_len, chain, occurrences, proximity_score, launches_saved, host_time_saved_ns
        FROM fusion_candidates WHERE trace_id = $t ORDER BY host_time_saved_ns DESC, rank LIMIT $k
    """, {"t": trace_id, "k": k})


def choose_step(steps: list[dict[str, Any]], step_id: str | None) -> dict[str, Any] | None:
    real = [s for s in steps if s["scope_key"] != "outside_steps"]
    if step_id is not None:
        return next((s for s in real if s["scope_key"] == str(step_id)), None)
    return next((s for s in real if s["phase"] == "decode"), real[0] if real else None)


def timeline_data(con: duckdb.DuckDBPyConnection, trace_id: str, step_id: str | None) -> dict[str, Any]:
    """Framework ops, launch calls and kernels of one step (or the trace's first kernels), with the device's idle
    gaps in that window; at most TIMELINE_MAX_KERNELS kernels of a step, TIMELINE_NO_STEP_KERNELS without one."""
    limit = TIMELINE_MAX_KERNELS if step_id is not None else TIMELINE_NO_STEP_KERNELS
    ks = _rows(con, """
        SELECT l.kernel_seq, l.kernel_name, l.kernel_ts_ns, l.kernel_end_ns, l.stream_id, l.device_id,
               l.launch_name, l.launch_ts_ns, l.launch_dur_ns, l.op_name, l.op_ts_ns, l.op_end_ns
        FROM int_kernel_links l JOIN kernel_taxbreak k USING (trace_id, kernel_seq)
        WHERE l.trace_id = $t AND ($any OR CAST(k.step_id AS VARCHAR) = $s)
        ORDER BY l.kernel_seq LIMIT $n
    """, {"t": trace_id, "any": step_id is None, "s": str(step_id), "n": limit})
    if not ks:
        return {"lanes": [], "gaps": [], "kernels": 0}
    starts = [k["kernel_ts_ns"] for k in ks] + [k["launch_ts_ns"] for k in ks if k["launch_ts_ns"] is not None]
    t0, t1 = min(starts), max(k["kernel_end_ns"] for k in ks)
    ops: set[tuple] = set()  # an op launching several kernels is drawn once
    launches = []
    streams: dict[str, list] = {}
    for k in ks:
        if k["op_ts_ns"] is not None:
            ops.add((k["op_ts_ns"], k["op_end_ns"], k["op_name"], "op"))
        if k["launch_ts_ns"] is not None:
            launches.append((k["launch_ts_ns"], k["launch_ts_ns"] + (k["launch_dur_ns"] or 0),
                             k["launch_name"] or "launch", "launch call"))
        lane = f"GPU{k['device_id']} s{k['stream_id']}"
        streams.setdefault(lane, []).append((k["kernel_ts_ns"], k["kernel_end_ns"], k["kernel_name"], "kernel"))
    gaps = con.execute("""
        SELECT gap_start_ns, gap_end_ns FROM device_idle_gaps
        WHERE trace_id = $t AND gap_end_ns > $a AND gap_start_ns < $b ORDER BY gap_start_ns
    """, {"t": trace_id, "a": t0, "b": t1}).fetchall()
    lanes = [("framework ops", sorted(ops)), ("launch calls", launches)]
    lanes += [(name, boxes) for name, boxes in sorted(streams.items())]
    idle_ns = sum(min(e, t1) - max(s, t0) for s, e in gaps)
    return {"lanes": lanes, "gaps": [(max(s, t0), min(e, t1)) for s, e in gaps], "kernels": len(ks),
            "window_ns": t1 - t0, "idle_ns": idle_ns, "truncated": len(ks) == limit}


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


def assumptions(traces: list[dict[str, Any]]) -> list[str]:
    """The caveats of every trace (taxbreak.readmodel.caveats), grouped by kind: one line per kind naming the traces
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


def collect(
    con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None = None, step_id: str | None = None,
) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    for needed in ("trace_meta", "taxbreak_by_scope", "kernels_per_token", "skip_by_trace", "trace_launch_floor"):
        if not _has(con, needed):
            raise RuntimeError(f"the warehouse has no table {needed}: run `taxbreak analyze` first")
    traces = trace_rows(con, trace_ids)
    if trace_ids is not None:
        missing = sorted(set(trace_ids) - {t["trace_id"] for t in traces})
        if missing:
            raise RuntimeError(f"trace(s) not in the warehouse: {', '.join(missing)}")
    for i, t in enumerate(traces, 1):
        if len(traces) > 3:
            print(f"\rreport: trace {i}/{len(traces)} {t['file_name'][-40:]:<40}", end="", file=sys.stderr, flush=True)
        tid = t["trace_id"]
        t["steps"] = step_rows(con, tid)
        t["host_partition"] = host_partition_rows(con, tid)
        t["top_kernels"] = top_kernels(con, tid)
        t["fusion"] = fusion_rows(con, tid)
        chosen = choose_step(t["steps"], step_id)
        t["timeline_step"] = chosen
        t["timeline"] = timeline_data(con, tid, chosen["scope_key"] if chosen else None)
        t["requests"] = request_data(con, tid)
    if len(traces) > 3:
        print(file=sys.stderr)
    return {"traces": traces, "sweeps": sweep_data(con, trace_ids), "assumptions": assumptions(traces),
            "caveats": {t["file_name"]: [c["text"] for c in readmodel.caveats(t)] for t in traces}}


REQUEST_STEPS_SHOWN = 40
REQUESTS_NAMED = 8  # requests shown by name in the share plot; the others are summed


def request_data(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, Any] | None:
    """The per-request attribution of one trace (docs/method.md): fitted vs observed latency per serving step,
    and each request's share per step for the first REQUEST_STEPS_SHOWN steps that list their requests. None when
    the warehouse has no fitted model (``taxbreak requests --refit``) or the trace has no serving steps."""
    if not (_has(con, "request_step_fit") and _has(con, "request_step_shares")):
        return None
    fit = _rows(con, "SELECT step_id, phase, latency_ns, predicted_ns, baseline_predicted_ns, rel_err, "
                     "baseline_rel_err FROM request_step_fit WHERE trace_id = $t ORDER BY step_id", {"t": trace_id})
    if not fit:
        return None
    named = [r["request_id"] for r in _rows(
        con, "SELECT request_id FROM request_totals WHERE trace_id = $t ORDER BY model_share_ns DESC, request_id "
             "LIMIT $k", {"t": trace_id, "k": REQUESTS_NAMED})]
    shares = _rows(con, "SELECT step_id, request_id, model_share_ns FROM request_step_shares WHERE trace_id = $t "
                        "AND step_id IN (SELECT DISTINCT step_id FROM request_step_shares WHERE trace_id = $t "
                        "ORDER BY step_id LIMIT $n) ORDER BY step_id, request_id",
                   {"t": trace_id, "n": REQUEST_STEPS_SHOWN})
    fits = _rows(con, "SELECT phase, steps_fitted, breakpoint_tokens, r2, rel_err_p50, rel_err_p90, rel_err_p99, "
                      "baseline_r2, baseline_rel_err_p50, baseline_rel_err_p90, baseline_rel_err_p99 FROM "
                      "request_model_fit WHERE (model_name, gpu_name, phase) IN (SELECT (model_name, gpu_name, phase) "
                      "FROM serving_steps WHERE trace_id = $t) ORDER BY phase", {"t": trace_id})
    return {"fit": fit, "shares": shares, "named": named, "fits": fits}


def requests_section(d: dict[str, Any] | None) -> str:
    """HTML: fitted vs observed step latency, and the share of each request per step (the model's shares; device
    time and host orchestration split by the same fractions are in request_step_shares)."""
    if not d:
        return ""
    h = ["<h3>Per-request latency attribution (LLMVisor; docs/method.md)</h3>"]
    h.append(_table(d["fits"], [("phase", "phase", ""), ("steps_fitted", "steps fitted", ""),
                                ("breakpoint_tokens", "breakpoint Σp", ""), ("r2", "R²", "fraction"),
                                ("rel_err_p90", "p90 error", "fraction"), ("rel_err_p99", "p99 error", "fraction"),
                                ("baseline_r2", "baseline R²", "fraction"),
                                ("baseline_rel_err_p90", "baseline p90", "fraction"),
                                ("baseline_rel_err_p99", "baseline p99", "fraction")]))
    series: dict[str, list[tuple[float, float]]] = {}
    for r in d["fit"]:
        series.setdefault(f"model, {r['phase']}", []).append((r["latency_ns"], r["predicted_ns"]))
        series.setdefault(f"token baseline, {r['phase']}", []).append((r["latency_ns"], r["baseline_predicted_ns"]))
    h.append(plots.scatter(series, "observed step latency", "fitted step latency",
                           title="Fitted vs observed step latency (dashed: y = x)"))
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
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1180px;color:#222}
h1{font-size:24px}h2{font-size:19px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:36px}
h3{font-size:15px;margin-top:22px}table{border-collapse:collapse;font-size:12.5px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f4f4f4}.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;
padding:8px 12px;min-width:130px}.card b{display:block;font-size:18px}.card span{color:#666;font-size:12px}
.note{color:#555;font-size:12.5px}
td.mono{word-break:break-all;max-width:640px}.warn{background:#fff6e5;border-left:4px solid #f28e2b;padding:6px 10px}
code{background:#f4f4f4;padding:1px 4px}.mono{font-family:ui-monospace,monospace;font-size:11.5px}
"""


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str, str]]) -> str:
    """cols: (key, header, unit)."""
    if not rows:
        return "<p class='note'>none</p>"
    head = "".join(f"<th>{escape(h)}</th>" for _, h, _ in cols)
    body = []
    for r in rows:
        cells = []
        for key, _, unit in cols:
            v = r.get(key)
            if isinstance(v, list):
                v = " → ".join(str(x) for x in v)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                cells.append(f"<td class='n'>{escape(fmt_value(v, unit))}</td>")
            else:
                cells.append(f"<td class='mono'>{escape('' if v is None else str(v))[:160]}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def split_segments(r: dict[str, Any]) -> list[tuple[str, float]]:
    return [("ΔFT framework", r["delta_ft_ns"] or 0), ("ΔCT library", r["delta_ct_ns"] or 0),
            ("ΔKT launch floor", r["delta_kt_ns"] or 0), ("device active", r["t_device_active_ns"] or 0)]


def trace_label(t: dict[str, Any]) -> str:
    return t["file_name"] if len(t["file_name"]) <= 28 else t["file_name"][:25] + "..."


def _cards(t: dict[str, Any]) -> str:
    items = [
        ("HDBI", fmt_value(t["hdbi"], "fraction")),
        ("HDBI_linked", fmt_value(t["hdbi_linked"], "fraction")),
        ("HDBI_wall", fmt_value(t["hdbi_wall"], "fraction")),
        ("T_Orchestrate", fmt_value(t["t_orchestrate_ns"], "ns")),
        ("T_DeviceActive", fmt_value(t["t_device_active_ns"], "ns")),
        ("kernels / token", fmt_value(t["kpt"], "")),
        ("decode kernels / token", fmt_value(t["kpt_decode"], "")),
        ("TKLQT", fmt_value(t["tklqt_ns"], "ns")),
        ("end-to-end (IL)", fmt_value(t["il_ns"], "ns")),
        ("linked fraction", fmt_value(t["linked_fraction"], "fraction")),
        ("T_sys", f"{t['t_sys_ns']} ns ({t['t_sys_source']})"),
    ]
    return "<div class='cards'>" + "".join(
        f"<div class='card'><b>{escape(v)}</b><span>{escape(k)}</span></div>" for k, v in items) + "</div>"


def _hdbi_caveat(t: dict[str, Any]) -> str:
    parts = [readmodel.hdbi_text(t) + "."]
    parts += [c["text"] + "." for c in readmodel.caveats(t)
              if c["kind"] in ("coverage", "wall", "blocked", "outlier", "launch_floor", "no_kernels")]
    parts.append("The 0.2 / 0.5 reference lines are our reading aids, not thresholds from the paper.")
    cls = "warn" if readmodel.flags(t) or t["t_sys_is_default"] else "note"
    return f"<p class='{cls}'>{escape(' '.join(parts))}</p>"


def _kpt_section(traces: list[dict[str, Any]]) -> str:
    pts = [t for t in traces if t["kpt"] is not None]
    if not pts:
        return "<p class='note'>No trace has a token count: kernels per token unknown.</p>"
    kinds = {t["model_kind"] for t in pts}
    rows = []
    for t in pts:
        tag = f" [{t['model_kind']}]" if t["model_kind"] else ""
        rows.append((trace_label(t) + tag, [("kernels / token (paper)", float(t["kpt"]))]))
    svg = plots.stacked_hbar(rows, unit="", title="Kernels per output token"
                             + (" — dense vs MoE" if {"dense", "moe"} <= kinds else ""))
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
    return escape(f" TKLQT rule (METHOD.md §6, ours: TKLQT > 1.25 × {fmt_value(tr['baseline_tklqt_ns'], 'ns')}, "
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
                                    title=f"{model}: HDBI vs batch size", hlines=[(y, lab) for y, lab in HDBI_LABELS],
                                    vlines=v, y_unit="fraction"))
        out.append(plots.line_chart({model: [(p["batch_size"], p["tklqt_ns"] or 0) for p in pts]}, "batch size",
                                    "TKLQT", title=f"{model}: TKLQT vs batch size", vlines=v, y_unit="ns"))
        out.append(f"<p class='note'>{escape(model)}: " + (
            f"host-bound → device-bound transition (HDBI crosses 0.5) near batch size {tb:.3g}."
            if tb else "HDBI does not cross 0.5 in this sweep.") + _tklqt_rule_note(sw.get("transition") or {})
            + "</p>")
    return "".join(out)


def _trace_section(t: dict[str, Any]) -> str:
    h = [f"<h2 id='t-{t['trace_id'][:12]}'>{escape(t['file_name'])}</h2>",
         "<p class='note'>" + escape(" · ".join(x for x in (
             f"trace {t['trace_id'][:16]}", t["source_format"], t["gpu_name"],
             t["model"] and f"model {t['model']}" + (f" ({t['model_kind']})" if t["model_kind"] else ""),
             t["batch_size"] and f"batch {t['batch_size']}",
             t["output_tokens"] and f"output tokens {t['output_tokens']}") if x)) + "</p>",
         _cards(t), _hdbi_caveat(t)]
    steps = [s for s in t["steps"] if s["scope_key"] != "outside_steps"]
    if steps:
        rows = [(f"{s['scope_key']}: {s['step_name']}", split_segments(s)) for s in steps[:40]]
        h.append(plots.stacked_hbar(rows, title="Orchestration split per step (ΔFT / ΔCT / ΔKT vs device active)",
                                    colors=SPLIT_COLORS))
    if t.get("host_partition"):
        rows = [("whole trace (all threads)" if r["scope_kind"] == "trace" else f"{r['step_id']}: {r['step_name']}",
                 host_segments(r)) for r in t["host_partition"][:41]]
        h.append(plots.stacked_hbar(rows, title="Host time partition (self time; parts add up to wall time)",
                                    colors=HOST_COLORS))
    tl = t["timeline"]
    st = t["timeline_step"]
    where = f"step {st['scope_key']} ({st['step_name']}, {st['phase']})" if st else "first kernels of the trace"
    h.append(f"<h3>Launch timeline: {escape(where)}</h3>")
    if tl["kernels"]:
        h.append(plots.timeline(tl["lanes"], tl["gaps"]))
        h.append(f"<p class='note'>{tl['kernels']} kernels over {fmt_value(tl['window_ns'], 'ns')}; GPU idle "
                 f"{fmt_value(tl['idle_ns'], 'ns')} (shaded)" + (f"; first {tl['kernels']} kernels only"
                                                                  if tl["truncated"] else "") + ".</p>")
    else:
        h.append("<p class='note'>no kernels</p>")
    h.append("<h3>Top kernels by total time</h3>")
    if t["top_kernels"]:
        bars = [(plots.short_kernel_name(k["kernel_name"], 44), k["total_dur_ns"]) for k in t["top_kernels"]]
        h.append(plots.hbar(bars, label_w=330, label_chars=44))
    h.append(_table(t["top_kernels"], [("kernel_name", "kernel", ""), ("invocations", "count", ""),
                                       ("total_dur_ns", "total", "ns"), ("akd_ns", "mean (AKD)", "ns"),
                                       ("time_share", "share", "fraction"),
                                       ("mean_launch_to_start_ns", "launch→start", "ns")]))
    h.append(requests_section(t.get("requests")))
    h.append("<h3>Fusion candidates (by host time saved)</h3>")
    h.append(_table(t["fusion"], [("chain_len", "L", ""), ("occurrences", "count", ""),
                                  ("proximity_score", "PS", "fraction"), ("launches_saved", "launches saved", ""),
                                  ("host_time_saved_ns", "host time saved", "ns"), ("chain", "chain", "")]))
    return "".join(h)


def render_html(data: dict[str, Any], title: str = "TaxBreak report") -> str:
    traces = data["traces"]
    body = [f"<h1>{escape(title)}</h1>",
            f"<p class='note'>{len(traces)} trace(s) · generated {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC · "
            "TaxBreak decomposition (METHOD.md): T_Orchestrate = ΔFT + ΔCT + ΔKT; HDBI near 0 = host-bound, "
            "near 1 = device-bound.</p>"]
    if traces:
        body.append("<h2>Across traces</h2>")
        body.append(plots.stacked_hbar([(trace_label(t), split_segments(t)) for t in traces],
                                       title="Orchestration split: ΔFT / ΔCT / ΔKT vs device-active time",
                                       colors=SPLIT_COLORS))
        hd = [(trace_label(t), float(t["hdbi"])) for t in traces if t["hdbi"] is not None]
        if hd:
            body.append(plots.hbar(hd, unit="fraction", title="HDBI per trace (coverage and T_sys caveats below)"))
        body.append(_table(traces, [
            ("file_name", "trace", ""), ("model", "model", ""), ("batch_size", "bs", ""), ("kernels", "kernels", ""),
            ("linked_fraction", "linked", "fraction"), ("t_orchestrate_ns", "T_Orchestrate", "ns"),
            ("t_device_active_ns", "T_DeviceActive", "ns"), ("hdbi", "HDBI", "fraction"),
            ("kpt", "kernels/token", ""), ("tklqt_ns", "TKLQT", "ns"), ("il_ns", "end-to-end", "ns"),
            ("t_sys_source", "T_sys", "")]))
        body.append("<h3>Kernels per token</h3>" + _kpt_section(traces))
        body.append("<h3>Batch-size sweeps</h3>" + _sweep_section(data["sweeps"]))
    body.append("<h2>Assumptions</h2>")
    body.append("<ul>" + "".join(f"<li>{escape(a)}</li>" for a in data["assumptions"]) + "</ul>"
                if data["assumptions"] else "<p class='note'>none: every floor measured, every count known.</p>")
    body.extend(_trace_section(t) for t in traces)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>{CSS}</style>"
        "<script>window.onerror=function(m){document.title='JSERROR: '+m;};</script></head><body>"
        + "".join(body)
        + "<script>document.body.setAttribute('data-rendered', document.querySelectorAll('svg').length);</script>"
        "</body></html>\n"
    )


def markdown_summary(data: dict[str, Any]) -> str:
    """The across-traces table as markdown (for Dagster materialisation metadata)."""
    lines = ["| trace | HDBI | HDBI_linked | coverage | HDBI_wall | flags | T_Orchestrate (ns) | host wall (ns) "
             "| ΔFT (ns) | ΔCT (ns) | ΔKT (ns) | T_DeviceActive (ns) | kernels/token |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for t in data["traces"]:
        lines.append(f"| {t['file_name']} | {fmt_value(t['hdbi'], 'fraction')} | "
                     f"{fmt_value(t['hdbi_linked'], 'fraction')} | {fmt_value(t['linked_fraction'], 'fraction')} | "
                     f"{fmt_value(t['hdbi_wall'], 'fraction')} | {', '.join(readmodel.flags(t)) or '-'} | "
                     f"{t['t_orchestrate_ns']} | {t['host_wall_ns']} | {t['delta_ft_ns']} | {t['delta_ct_ns']} | "
                     f"{t['delta_kt_ns']} | {t['t_device_active_ns']} | {fmt_value(t['kpt'], '')} |")
    return "\n".join(lines)


def write_report(
    con: duckdb.DuckDBPyConnection, out_path: str | Path, trace_ids: list[str] | None = None,
    step_id: str | None = None,
) -> Path:
    out = Path(out_path)
    data = collect(con, trace_ids, step_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(out)
    return out


def cmd_report(args: argparse.Namespace) -> int:
    from taxbreak.query import open_for_cli

    opened = open_for_cli(args, "report")
    if opened is None:
        return 2
    try:
        ids = None
        if args.trace:
            from taxbreak.compare import GroupError, resolve_group

            try:
                ids = resolve_group(opened.con, ",".join(args.trace))
            except GroupError as exc:
                print(f"taxbreak report: {exc}", file=sys.stderr)
                return 2
        out = write_report(opened.con, args.output, ids, args.step)
    except RuntimeError as exc:
        print(f"taxbreak report: {exc}", file=sys.stderr)
        return 2
    finally:
        opened.con.close()
    print(f"wrote {out} (from the {opened.source} {opened.path})")
    return 0


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report (plots as inline SVG) from the warehouse",
        description="One HTML file, no network needed: across-traces orchestration split, HDBI with caveats, "
        "kernels per token, batch-size sweeps, assumptions, then per trace a step split, the launch timeline of a "
        "step, top kernels and fusion candidates.",
    )
    p.add_argument("--trace", action="append", help="trace-id prefix, file glob, model:NAME ... (repeatable; "
                   "default every analysed trace)")
    p.add_argument("--step", help="step_id whose launch timeline to draw (default: the first decode step)")
    p.add_argument("-o", "--output", default="warehouse/report.html", help="output file (default %(default)s)")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_report)
