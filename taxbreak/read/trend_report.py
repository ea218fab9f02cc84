"""The report's workloads: the index lists every workload with its latest change, and a workload of two or more
runs gets ``workloads/<id>.html`` with its figures over the runs and the change points marked (issue 28;
docs/method.md "Trends and regressions").  Data from taxbreak.read.trend, the one read of
workload_trends/_changes."""

from __future__ import annotations

from html import escape
from typing import Any

import duckdb

from taxbreak.read import plots, readmodel, trend
from taxbreak.store import query

# (figure, label, unit) drawn per workload page, in this order
FIGURES = (("il_ns", "IL", "ns"), ("t_orchestrate_ns", "T_Orchestrate", "ns"), ("delta_ft_ns", "ΔFT", "ns"),
           ("delta_ct_ns", "ΔCT", "ns"), ("delta_kt_ns", "ΔKT", "ns"), ("t_device_active_ns", "T_DeviceActive", "ns"),
           ("hdbi_wall", "HDBI_wall", "fraction"), ("kpt", "kernels per token", ""),
           ("gpu_idle_share", "GPU idle share of IL", "fraction"), ("tklqt_per_launch_ns", "TKLQT per launch", "ns"))


def workload_data(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every workload (trend.workloads), with its runs and change points where it has two runs or more."""
    if not query.has_relation(con, "workload_trends") or not readmodel.has_relation(con, "workload_changes"):
        return []
    out = []
    for w in trend.workloads(con):
        w = {**w, "run_count": w["runs"], "runs": []}  # the count; ``runs`` the rows, where drawn
        if w["run_count"] > 1:
            w.update(trend.trend(con, w["workload_id"]))
        out.append(w)
    return out


def page_name(w: dict[str, Any]) -> str:
    return f"workloads/{w['workload_id']}.html"


def index_section(ws: list[dict[str, Any]]) -> str:
    """The index's table of workloads: program, runs, newest capture, latest change, a link where it has a page."""
    if not ws:
        return "<p class='note'>no workloads yet</p>"
    rows = []
    for w in ws:
        name = escape(str(w["program"]))
        link = f"<a href='{page_name(w)}'>{name}</a>" if w["run_count"] > 1 else name
        change = escape(w["last_change"] or "none")
        rows.append(f"<tr><td>{link}</td><td>{escape(w['workload_id'])}</td><td>{w['run_count']}</td>"
                    f"<td>{escape(w['last_file_name'] or '')}</td><td>{change}</td></tr>")
    return ("<p class='note'>Runs sharing a workload key (setting trends.workload_key) are one workload; a change is "
            "a run where a figure moved beyond the workload's run-to-run spread (docs/method.md \"Trends and "
            "regressions\").</p><div class='tw'><table><tr><th>workload</th><th>id</th><th>runs</th>"
            "<th>newest run</th><th>latest change</th></tr>" + "".join(rows) + "</table></div>")


def render_workload_page(w: dict[str, Any], page: Any, index_href: str = "../index.html") -> str:
    """One workload: its key, a chart per figure over the runs with the change points marked, the change list.
    ``page``: the report's page wrapper (report._page)."""
    body = [f"<p><a href='{index_href}'>← all traces</a></p>",
            f"<h1>Workload {escape(str(w['program']))} <span class='note'>{escape(w['workload_id'])}</span></h1>",
            f"<p class='note'>key: {escape(str(w['workload_key']))} · {len(w['runs'])} runs in capture order</p>"]
    by_fig: dict[str, list[dict[str, Any]]] = {}
    for c in w["changes"]:
        by_fig.setdefault(c["figure"], []).append(c)
    for fig, label, unit in FIGURES:
        pts = [(float(r["run_seq"]), float(r[fig])) for r in w["runs"] if r.get(fig) is not None]
        if not pts:
            continue
        marks = [(float(c["run_seq"]), f"{c['direction']} {100 * c['rel_change']:+.1f}%") for c in by_fig.get(fig, [])]
        body.append(plots.line_chart({label: pts}, "run", label, title=f"{label} per run", log_x=False, vlines=marks,
                                     y_unit=unit, width=720, height=260))
    body.append("<h2>Change points</h2>")
    if not w["changes"]:
        body.append("<p class='note'>none: every figure stayed within the run-to-run spread (or too few runs)</p>")
    else:
        items = []
        for c in w["changes"]:
            extra = []
            if c["components_moved"]:
                extra.append("moved with it: " + ", ".join(c["components_moved"]))
            if c["top_ops"]:
                extra.append("ops: " + ", ".join(f"{readmodel.target_text(o['op'])} {o['change_ns'] / 1e6:+.3f} ms"
                                                 for o in c["top_ops"]))
            items.append(f"<li><b>run {c['run_seq']}</b>: {escape(c['figure'])} {escape(c['direction'])} "
                         f"({escape(c['status'])}) {100 * c['rel_change']:+.1f}% vs the median of "
                         f"{c['baseline_runs']} runs" + "".join(f"<br><span class='note'>{escape(x)}</span>"
                                                               for x in extra) + "</li>")
        body.append("<ul>" + "".join(items) + "</ul>")
    return page(f"workload {w['program']}", body)
