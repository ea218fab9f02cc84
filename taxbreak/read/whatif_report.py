"""The what-if part of the HTML report (self-contained: taxbreak.read.report calls ``whatif_data`` and
``whatif_section``): per trace, the curve "IL vs host speed" of the default sweep and the critical-path split of the
trace and its phases, from the warehouse tables whatif_results and critical_path (taxbreak.features.whatif)."""

from __future__ import annotations

from html import escape
from typing import Any

import duckdb

from taxbreak.read import plots
from taxbreak.store.query import has_relation

CP_COLORS = {"framework": "#4e79a7", "library": "#59a14f", "launch": "#f28e2b", "launch_path": "#ffbe7d",
             "sync": "#b07aa1", "other_runtime": "#9c755f", "untraced": "#bab0ac", "kernel": "#e15759",
             "memcpy": "#76b7b2", "memset": "#edc948", "gpu_gap": "#d3d3d3"}


def whatif_data(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, Any] | None:
    """The trace's host-speed sweep, other scenarios and identity critical paths; None without what-if rows."""
    if not (has_relation(con, "whatif_results") and has_relation(con, "critical_path")):  # the snapshot: views
        return None
    cur = con.execute(
        "SELECT scenario, host_speedup, gpu_speedup, scenario_json, il_own_ns, il_replay_ns, il_ratio, hdbi_own, "
        "hdbi_replay, hdbi_wall_own, hdbi_wall_replay FROM whatif_results WHERE trace_id = $t AND scope_kind = "
        "'trace' ORDER BY host_speedup, scenario", {"t": trace_id})
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    if not rows:
        return None
    cur = con.execute("SELECT * FROM critical_path WHERE trace_id = $t AND scenario = 'identity' AND scope_kind IN "
                      "('trace', 'phase') ORDER BY scope_kind DESC, scope_key", {"t": trace_id})
    cols = [d[0] for d in cur.description]
    cps = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    sweep = [r for r in rows if r["scenario"] == "identity" or r["scenario"].startswith("host_x")]
    other = [r for r in rows if r not in sweep]
    return {"sweep": sweep, "other": other, "critical_path": cps}


def whatif_section(d: dict[str, Any] | None) -> str:
    """HTML: the IL-vs-host-speed curve, the other scenarios, the critical-path split (host vs device)."""
    if not d:
        return ""
    h = ["<h3>What-if replay: latency vs host speed, critical path (docs/method.md, ours)</h3>"]
    pts = [(r["host_speedup"], r["il_replay_ns"]) for r in d["sweep"]]
    own = d["sweep"][0]["il_own_ns"] if d["sweep"] else None
    h.append(plots.line_chart({"IL (replayed)": pts}, "host speed-up factor s", "IL", log_x=False, y_unit="ns",
                              hlines=[(own, "IL of the trace")] if own else None,
                              title="End-to-end latency vs host speed (replay of this trace)"))
    if d["other"]:
        h.append("<table><tr><th>scenario</th><th>IL own</th><th>IL replayed</th><th>ratio</th><th>HDBI</th>"
                 "<th>HDBI_wall</th></tr>")
        for r in d["other"]:
            h.append(f"<tr><td>{escape(r['scenario'])}</td><td class='n'>{plots.fmt_value(r['il_own_ns'], 'ns')}</td>"
                     f"<td class='n'>{plots.fmt_value(r['il_replay_ns'], 'ns')}</td>"
                     f"<td class='n'>{r['il_ratio']:.3f}</td>"
                     f"<td class='n'>{_f(r['hdbi_own'])} → {_f(r['hdbi_replay'])}</td>"
                     f"<td class='n'>{_f(r['hdbi_wall_own'])} → {_f(r['hdbi_wall_replay'])}</td></tr>")
        h.append("</table>")
    if d["critical_path"]:
        rows = []
        notes = {}
        for c in d["critical_path"]:
            label = "whole trace" if c["scope_kind"] == "trace" else f"phase {c['scope_key']}"
            rows.append((label, [(p, c[f"cp_{p}_ns"] or 0) for p in CP_COLORS if c.get(f"cp_{p}_ns")]))
            if c.get("cp_host_share") is not None:
                notes[label] = f"host {c['cp_host_share']:.0%}"
        h.append(plots.stacked_hbar(rows, title="Critical path split: host (framework, library, launch, launch path, "
                                    "sync, other, untraced) vs device (kernel, copies, GPU gaps)",
                                    colors=CP_COLORS, normalize=True, notes=notes))
    return "".join(h)


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"
