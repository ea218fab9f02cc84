"""The read model: the headline figures, flags and caveats of analysed traces, derived once for every reader.

``taxbreak summary``, ``taxbreak report`` and ``taxbreak compare`` all read ``trace_headlines`` and word their notes
with ``caveats``, so a figure or a caveat cannot differ between them (docs/method.md sections 2 and 3: HDBI is shown
beside HDBI_linked, coverage and HDBI_wall, with the flags that say when the paper's T_Orchestrate outgrows the
launching threads' wall time).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from taxbreak.engine.rules import RunConfig
from taxbreak.ingest import Lake
from taxbreak.read.kernel_names import short_name, short_names
from taxbreak.read.plots import fmt_value
from taxbreak.store.query import has_relation, open_readonly
from taxbreak.store.tracenames import resolve

# HDBI reading aids; not thresholds from the paper (docs/method.md section 2).
HDBI_REFERENCE_LINES = (0.2, 0.5)

_HEADLINE_SQL = """
SELECT m.trace_id, m.file_name, m.source_format, m.gpu_name, m.model, m.model_kind, m.batch_size,
       m.output_tokens, m.trace_kind, m.is_null_kernel, m.meta_source, m.meta_note, m.side_file_errors,
       t.kernels, t.linked_kernels, t.orphan_kernels, t.linked_launches, t.linked_fraction, t.low_coverage,
       t.lib_kernels, t.py_missing_kernels, t.t_dispatch_base_ns, t.t_dispatch_base_samples,
       t.dispatch_base_unstable,
       t.delta_ft_ns, t.delta_ct_ns, t.delta_kt_ns, t.delta_kt_excess_ns, t.t_orchestrate_ns, t.t_device_active_ns,
       t.t_device_active_linked_ns, t.hdbi, t.hdbi_linked, t.hdbi_wall, t.t_dispatch_blocked_ns,
       t.dispatch_blocked_flag, t.host_threads, t.host_wall_ns, t.host_launch_ns, t.host_launch_blocked_ns,
       t.host_library_ns, t.host_framework_ns, t.host_sync_ns, t.host_other_runtime_ns, t.host_untraced_ns,
       t.orchestrate_exceeds_wall, t.top_orchestrate_kernels, t.is_outlier_step AS has_outlier_steps,
       t.shared_correlation_kernels, t.impossible_duration_kernels, t.max_kernel_dur_ns,
       x.hdbi AS excl_outliers_hdbi, x.hdbi_wall AS excl_outliers_hdbi_wall,
       x.t_orchestrate_ns AS excl_outliers_t_orchestrate_ns, x.kernels AS excl_outliers_kernels,
       o.threads AS other_threads, o.wall_ns AS other_threads_wall_ns,
       (SELECT list(step_name ORDER BY step_id) FROM int_steps st WHERE st.trace_id = m.trace_id AND st.is_outlier_step)
           AS outlier_steps,
       f.t_sys_ns, f.t_sys_source, f.t_sys_rule, f.t_sys_is_default, f.inferred_gpu_name, f.inferred_gpu_rule,
       k.kpt, k.kernels AS kpt_kernels, k.kpt_decode, k.unique_kernels, k.kernel_diversity, k.kpt_null_reason,
       k.kpt_decode_null_reason,
       k.tokens_source,
       s.tklqt_ns, s.launch_samples, s.mean_launch_to_start_ns, s.negative_samples, s.negative_sum_ns, s.il_ns,
       s.il_start_basis, s.gpu_idle_merged_ns, s.gpu_idle_sum_ns, s.akd_ns, s.no_kernels_reason,
       (SELECT count(*) FROM int_steps st WHERE st.trace_id = m.trace_id) AS steps,
       (SELECT sum(kernels) FROM taxbreak_by_scope z WHERE z.trace_id = m.trace_id AND z.scope_kind = 'step'
          AND z.scope_key = 'outside_steps') AS kernels_outside_steps,
       (SELECT count(DISTINCT device_id) FROM device_busy d WHERE d.trace_id = m.trace_id AND d.kernels > 0)
           AS gpus_with_kernels
FROM trace_meta m
LEFT JOIN taxbreak_by_scope t ON t.trace_id = m.trace_id AND t.scope_kind = 'trace'
LEFT JOIN taxbreak_by_scope x ON x.trace_id = m.trace_id AND x.scope_kind = 'trace_excl_outliers'
LEFT JOIN host_partition o ON o.trace_id = m.trace_id AND o.scope_kind = 'other_threads'
LEFT JOIN trace_launch_floor f ON f.trace_id = m.trace_id
LEFT JOIN kernels_per_token k ON k.trace_id = m.trace_id
LEFT JOIN skip_by_trace s ON s.trace_id = m.trace_id
WHERE $all OR m.trace_id IN (SELECT unnest($ids::VARCHAR[]))
ORDER BY m.model NULLS LAST, m.batch_size NULLS LAST, m.file_name
"""


# What TKLQT is, said wherever it is printed (docs/method.md §6): the launch-to-start waits of all launches added up.
# Queued launches wait at the same time, so the sum can exceed the trace's length; the per-launch mean is the figure
# to compare across traces.
TKLQT_IS_A_SUM = "a sum of overlapping queue waits, so it can exceed the trace's length"


def tklqt_mean_text(h: dict[str, Any]) -> str:
    """TKLQT's per-launch mean as every reader prints it: 'mean 1.36 ms per launch over 1,029 launches' (the mean
    and the count over the non-negative samples, those TKLQT sums; the duration in plots.fmt_value's one format)."""
    counted = (h.get("launch_samples") or 0) - (h.get("negative_samples") or 0)
    return f"mean {fmt_value(h.get('mean_launch_to_start_ns'), 'ns')} per launch over {counted:,} launches"


def tklqt_note(h: dict[str, Any]) -> str:
    """What every reader says beside the TKLQT total: its per-launch mean and that the total sums overlapping waits."""
    return f"{tklqt_mean_text(h)}; {TKLQT_IS_A_SUM}"

def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def trace_headlines(con: duckdb.DuckDBPyConnection, trace_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per analysed trace: metadata, trace-scope TaxBreak with HDBI_wall and its flags, the trace without
    its outlier steps, SKIP, kernels per token and the launch floor."""
    return _rows(con, _HEADLINE_SQL, {"all": trace_ids is None, "ids": trace_ids or []})


def _ms(ns: float | int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:,.3f} ms"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def _frac(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def hdbi_text(h: dict[str, Any]) -> str:
    """HDBI, HDBI_linked, coverage and HDBI_wall side by side, as every reader prints them."""
    cov = "n/a" if h.get("linked_fraction") is None else f"{h['linked_fraction']:.1%}"
    low = " (low)" if h.get("low_coverage") else ""
    return (f"HDBI {_frac(h.get('hdbi'))} | HDBI_linked {_frac(h.get('hdbi_linked'))} | coverage {cov}{low} | "
            f"HDBI_wall {_frac(h.get('hdbi_wall'))}")


# (column of a trace or scope row, the flag's short name), in the order readers list them
_FLAGS = (("low_coverage", "low_coverage"), ("orchestrate_exceeds_wall", "orchestrate_exceeds_wall"),
          ("dispatch_blocked_flag", "dispatch_blocked"), ("has_outlier_steps", "outlier_steps"),
          ("dispatch_base_unstable", "dispatch_base_unstable"),
          ("shared_correlation_kernels", "shared_correlation_ids"),
          ("impossible_duration_kernels", "impossible_kernel_durations"))


def flags(h: dict[str, Any]) -> list[str]:
    """The short flag names of a trace (or scope) row."""
    return [name for column, name in _FLAGS if h.get(column)]


def _contributors(h: dict[str, Any]) -> str:
    parts = []
    for k in h.get("top_orchestrate_kernels") or []:
        where = k.get("py_name") or k.get("op_name") or "?"
        parts.append(f"kernel #{k['kernel_seq']} {str(k['kernel_name'])[:50]} under {str(where)[:50]} "
                     f"({_ms(k['orchestrate_ns'])})")
    return "; ".join(parts)


def caveats(h: dict[str, Any]) -> list[dict[str, str]]:
    """What a reader must know to read a trace's figures, as ``{'kind': ..., 'text': ...}``; the one place their
    wording is written (summary, report and compare show these)."""
    out: list[dict[str, str]] = []

    def add(kind: str, text: str) -> None:
        out.append({"kind": kind, "text": text})

    if h.get("no_kernels_reason"):
        add("no_kernels", h["no_kernels_reason"])
    if h.get("side_file_errors"):  # refused at ingest: what they carried (request lists, metadata) is missing
        add("side_files", h["side_file_errors"])
    if h.get("impossible_duration_kernels"):
        add("impossible_durations", f"{h['impossible_duration_kernels']:,} kernel(s) last longer than "
                                    f"{RunConfig.kernel_wall_factor:g}x the "
                                    f"launching threads' wall time {_ms(h.get('host_wall_ns'))} (the longest "
                                    f"{_ms(h.get('max_kernel_dur_ns'))}): corrupt durations; they are in "
                                    "T_DeviceActive, so HDBI and AKD are not to be read")
    if h.get("shared_correlation_kernels"):
        add("shared_correlation", f"{h['shared_correlation_kernels']:,} kernel(s) share their correlation id with "
                                  "two or more launch calls of their process: which launch fed them is unknown, so "
                                  "they are left unlinked (orphans, no T_Orchestrate)")
    if h.get("t_sys_is_default"):
        gpu = h.get("gpu_name") or (f"{h['inferred_gpu_name']} (inferred from its kernel names, "
                                    f"{h['inferred_gpu_rule']}: the trace names no GPU)"
                                    if h.get("inferred_gpu_name") else "unknown")
        add("launch_floor", f"T_sys = {h['t_sys_ns'] / 1000:.2f} µs is the documented default ({h['t_sys_rule']}) for "
                            f"GPU {gpu}, not measured: run `taxbreak capture null-kernel` on this GPU and host")
    elif h.get("t_sys_source") == "user_setting":
        add("launch_floor", f"T_sys = {h['t_sys_ns'] / 1000:.2f} µs was set by the user")
    if h.get("low_coverage"):
        add("coverage", f"only {h['linked_fraction']:.1%} of kernels are linked (< 90%): orphans add device time but "
                        "no T_Orchestrate, so HDBI is inflated; read HDBI_linked")
    if h.get("orchestrate_exceeds_wall"):
        add("wall", f"T_Orchestrate {_ms(h['t_orchestrate_ns'])} exceeds the {h['host_threads']} launching thread(s)' "
                    f"host wall time {_ms(h['host_wall_ns'])}: the paper's per-kernel prefixes count shared host time "
                    f"more than once; HDBI_wall {_frac(h.get('hdbi_wall'))} does not. Largest contributors: "
                    + _contributors(h))
    if h.get("dispatch_blocked_flag"):
        add("blocked", f"{_ms(h['t_dispatch_blocked_ns'])} of the dispatch terms (ΔFT + ΔCT "
                       f"{_ms((h['delta_ft_ns'] or 0) + (h['delta_ct_ns'] or 0))}) is time inside other launch or "
                       "sync calls that waited, not translation work")
    if h.get("has_outlier_steps"):
        names = ", ".join(str(n) for n in (h.get("outlier_steps") or [])[:4])
        add("outlier", f"outlier step(s) {names} (> 5x the median of the other steps) dominate the trace; without "
                       f"them: HDBI {_frac(h.get('excl_outliers_hdbi'))}, HDBI_wall "
                       f"{_frac(h.get('excl_outliers_hdbi_wall'))}, T_Orchestrate "
                       f"{_ms(h.get('excl_outliers_t_orchestrate_ns'))} over {h.get('excl_outliers_kernels') or 0:,} "
                       "kernels")
    if h.get("other_threads"):
        add("threads", f"{h['other_threads']} thread(s) launch no kernels ({_ms(h['other_threads_wall_ns'])} of host "
                       "time): reported apart, never in HDBI_wall")
    if h.get("linked_kernels") and h.get("py_missing_kernels"):
        add("python_op", f"{h['py_missing_kernels']:,} linked kernels have no Python-level op: t_py = 0 for them")
    if h.get("linked_launches") and h.get("t_dispatch_base_ns") is None:
        add("dispatch_base", "no framework-native dispatch sample > 100 ns: T_dispatch_base unknown, library "
                             "kernels charged their full dispatch as framework translation")
    elif h.get("dispatch_base_unstable"):
        add("dispatch_base", f"T_dispatch_base {h['t_dispatch_base_ns']} ns is the median of only "
                             f"{h['t_dispatch_base_samples']} sample(s): unstable, one mis-ruled kernel moves "
                             "ΔFT/ΔCT")
    if h.get("negative_samples"):
        add("tklqt", f"{h['negative_samples']:,} launch-to-start samples are negative: left out of TKLQT and "
                     f"counted apart (sum {_ms(h['negative_sum_ns'])})")
    if h.get("kernels") and h.get("kpt") is None and h.get("kpt_null_reason"):
        add("kernels_per_token", "kernels per token unknown: " + h["kpt_null_reason"])
    if not h.get("steps"):
        add("steps", "no step annotations: trace-level figures cover the whole trace")
    elif h.get("kernels_outside_steps"):
        add("steps", f"{h['kernels_outside_steps']:,} kernels lie outside every step (warm-up leftovers?): "
                     "trace-level figures include them, per-step figures do not")
    return out


# The catalogue status of a file that is no trace at all (a stray config.json in an ingested folder): recorded, so
# that the next ingest of its folder skips it and a name can be explained, but not listed unless asked for.
NOT_A_TRACE = "not_a_trace"


def catalogue(lake: str | os.PathLike[str], all: bool = False) -> tuple[pa.Table, int]:  # `all`: as `traces --all`
    """The catalogue as every reader lists it (``taxbreak traces``, ``Warehouse.traces()``): oldest first, files
    that are no trace at all left out unless ``all``; with how many were left out. Failed traces are always listed
    (``taxbreak retry`` takes them)."""

    every = Lake(lake).catalogue().sort_by("ingested_at_ns")
    listed = every if all else every.filter(pc.fill_null(pc.not_equal(every["status"], NOT_A_TRACE), True))
    return listed, every.num_rows - listed.num_rows


def resolve_trace(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The one analysed trace ``name`` names (id prefix, file name, stem or unique substring: taxbreak.store.tracenames,
    the one resolver of every command); LookupError (TraceNotFound / TraceAmbiguous) saying why not."""

    cands = con.execute("SELECT trace_id, file_name FROM trace_meta").fetchall()
    return resolve(cands, name, "analysed trace")


# The caveat a verdict block shows when no disagreement or HDBI note comes first: the most consequential present.
_CAVEAT_PRIORITY = ("no_kernels", "impossible_durations", "shared_correlation", "outlier", "wall", "coverage",
                    "blocked", "steps", "launch_floor", "dispatch_base",
                    "python_op", "threads", "tklqt", "kernels_per_token", "library_rule")
VERDICT_TOP_LEVERS = 3


def verdicts(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The verdicts of several traces at once (one statement per table, for the report's index): trace id ->
    the trace-scope ``diagnosis`` row (bound, confidence, reason, evidence, disagreement, HDBI note) with its
    phases' bounds (``phases``), its steps counted by bound (``steps_by_bound``) and the ranked ``levers`` with their
    replayed gain (``levers`` for the trace, ``phase_levers``; None when the what-if replay has not run for it);
    docs/method.md "The verdict". Traces without a diagnosis row (an older analysis) are absent."""
    if not trace_ids or not has_relation(con, "diagnosis"):
        return {}
    p = {"ids": list(trace_ids)}
    ids = "trace_id IN (SELECT unnest($ids::VARCHAR[]))"
    out: dict[str, dict[str, Any]] = {}
    for r in _rows(con, f"SELECT * FROM diagnosis WHERE {ids} AND scope_kind = 'trace'", p):
        out[r["trace_id"]] = {**r, "phases": [], "steps_by_bound": {}, "levers": None, "phase_levers": None}
    for r in _rows(con, "SELECT trace_id, scope_key AS phase, bound, confidence, reason, busy_share, host_idle_share, "
                        f"hdbi, hdbi_wall, hdbi_disagrees FROM diagnosis WHERE {ids} AND scope_kind = 'phase' "
                        "ORDER BY trace_id, scope_key", p):
        if r["trace_id"] in out:
            out[r["trace_id"]]["phases"].append(r)
    for r in _rows(con, f"SELECT trace_id, bound, count(*) AS steps FROM diagnosis WHERE {ids} AND "
                        "scope_kind = 'step' GROUP BY ALL ORDER BY trace_id, steps DESC, bound", p):
        if r["trace_id"] in out:
            out[r["trace_id"]]["steps_by_bound"][r["bound"]] = r["steps"]
    if has_relation(con, "levers"):
        for r in _rows(con, f"SELECT * FROM levers WHERE {ids} ORDER BY trace_id, scope_kind DESC, scope_key, "
                            "lever_rank", p):
            v = out.get(r["trace_id"])
            if v is None:
                continue
            key = "levers" if r["scope_kind"] == "trace" else "phase_levers"
            v[key] = (v[key] or []) + [r]
        for v in out.values():
            if v["levers"] is not None and v["phase_levers"] is None:
                v["phase_levers"] = []
    if has_relation(con, "critical_path"):
        for r in _rows(con, f"SELECT * FROM critical_path WHERE {ids} AND scenario = 'identity' AND "
                            "scope_kind = 'trace'", p):
            if r["trace_id"] in out:
                out[r["trace_id"]]["critical_path"] = r
    return out


CP_LABELS = {"framework": "framework", "library": "library calls", "launch": "launch calls",
             "launch_path": "launch path", "sync": "syncs", "other_runtime": "other runtime calls",
             "untraced": "untraced host time", "kernel": "kernels", "memcpy": "memcpys", "memset": "memsets",
             "gpu_gap": "GPU-side gaps", "unattributed": "unattributed"}


def critical_path_text(cp: dict[str, Any] | None, parts: int = 3) -> str | None:
    """Where the trace's own critical path goes (critical_path, scenario identity): its largest parts as shares."""
    if not cp or not cp.get("cp_total_ns"):
        return None
    total = cp["cp_total_ns"]
    shares = sorted(((cp.get(f"cp_{k}_ns") or 0, k) for k in CP_LABELS), reverse=True)
    top = [f"{CP_LABELS[k]} {100 * ns / total:.1f}%" for ns, k in shares[:parts] if ns > 0]
    return (f"critical path {_ms(total)}: host {100 * (cp['cp_host_ns'] or 0) / total:.1f}%, device "
            f"{100 * (cp['cp_device_ns'] or 0) / total:.1f}%; largest parts " + ", ".join(top))


def verdict(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, Any] | None:
    """The verdict of one trace (``verdicts``); None when the warehouse has none for it."""
    return verdicts(con, [trace_id]).get(trace_id)


def top_levers(v: dict[str, Any], n: int = VERDICT_TOP_LEVERS) -> list[dict[str, Any]]:
    """The first ``n`` levers of the trace that the replay says cut latency (il_change_ns < 0), best first."""
    return [lv for lv in (v.get("levers") or []) if (lv.get("il_change_ns") or 0) < 0][:n]


def main_caveat(v: dict[str, Any] | None, cav: list[dict[str, str]]) -> str | None:
    """The one caveat that matters most beside the verdict: the HDBI disagreement, else why HDBI is not the figure
    to read, else the most consequential caveat of the trace."""
    if v and v.get("disagreement"):
        return v["disagreement"]
    if v and v.get("hdbi_note"):
        return v["hdbi_note"]
    by_kind = {c["kind"]: c["text"] for c in cav}
    return next((by_kind[k] for k in _CAVEAT_PRIORITY if k in by_kind), cav[0]["text"] if cav else None)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def lever_text(lv: dict[str, Any]) -> str:
    """One lever as every reader words it: label, predicted IL change in ms and %, and its first targets."""
    change = lv.get("il_change_ns") or 0
    out = f"{lv['label']}: IL {'-' if change < 0 else '+'}{_ms(abs(change))} ({lv['il_change_pct']:+.1f}%)"
    targets = lv.get("targets") or []
    if targets:
        out += "; where: " + ", ".join(f"{target_text(str(t['name']))} {_ms(t['value_ns'])}" for t in targets[:3])
    return out


def kernel_labels(s: dict[str, Any]) -> dict[str, str]:
    """Full kernel name -> the label ``format_summary`` prints, for every kernel a summary lists (top kernels, fusion
    chains): the one short-name rule (taxbreak.read.kernel_names.short_names) over all of them, so two kernels
    never read the same and one kernel reads the same wherever it is listed."""
    names = [k["kernel_name"] for k in (s.get("top_kernels_by_time") or []) + (s.get("top_kernels_by_count") or [])]
    names += [n for f in s.get("top_fusion") or [] for n in f["chain"]]
    return short_names(names)


def target_text(name: str, max_names: int = 3) -> str:
    """A lever target in short names: an op or kernel, or a fusion chain (``a → b → c``) cut after a few kernels."""
    parts = name.split(" → ")
    shown = " → ".join(_short(short_name(n), 60) for n in parts[:max_names])
    return shown + (f" → … ({len(parts)} kernels)" if len(parts) > max_names else "")


def format_verdict(v: dict[str, Any] | None, cav: list[dict[str, str]]) -> list[str]:
    """The verdict block that opens ``taxbreak summary``: bound, confidence, reason, the evidence, the levers to
    fix first with their replayed gain, and the caveat that matters most."""
    if v is None:
        return ["  VERDICT  not computed: this warehouse predates the verdict; run `taxbreak analyze` again"]
    lines = [f"  VERDICT  {v['bound'].upper()} (confidence {v['confidence']}): {v['reason']}"]
    if v.get("gpu_window_ns"):
        wait = "n/a" if v.get("median_launch_wait_ns") is None else f"{v['median_launch_wait_ns'] / 1000:,.1f} µs"
        lead = (f"HDBI_wall {_frac(v.get('hdbi_wall'))} (HDBI undefined: no linked kernel)"
                if v.get("lead_index") == "hdbi_wall" else
                f"HDBI {_frac(v.get('hdbi'))} (coverage {_pct(v.get('linked_fraction'))}), HDBI_wall "
                f"{_frac(v.get('hdbi_wall'))}")
        lines.append(f"    evidence: GPU busy {_pct(v['busy_share'])} of the window (kernels "
                     f"{_pct(v['kernel_busy_share'])}); idle from late launches {_pct(v['host_idle_share'])}, syncs "
                     f"{_pct(v['sync_idle_share'])}, transfers {_pct(v['transfer_share'])}, other "
                     f"{_pct(v['other_idle_share'])}; launches queued {_pct(v.get('queued_launch_share'))} (median "
                     f"wait {wait}, T_sys {v['t_sys_ns'] / 1000:.2f} µs); {lead}")
    cpt = critical_path_text(v.get("critical_path"))
    if cpt:
        lines.append(f"    {cpt}")
    if v.get("phases"):
        lines.append("    phases: " + "; ".join(f"{p['phase']} {p['bound']} ({p['confidence']})" for p in v["phases"]))
    if v.get("levers") is None:
        lines.append("    fix first: levers not replayed yet (the pipeline's what-if step, or "
                     "`taxbreak whatif TRACE --save`)")
    else:
        top = top_levers(v)
        if top:
            lines.append("    fix first (gain replayed on this trace, docs/method.md \"The verdict\"):")
            lines += [f"      {i}. [{lv['side']}] {lever_text(lv)}" for i, lv in enumerate(top, 1)]
        else:
            lines.append("    fix first: no lever the replay models shortens this trace")
    c = main_caveat(v, cav)
    if c:
        lines.append(f"    caveat: {c}")
    return lines


def summary(
    warehouse_path: str | os.PathLike[str] | None, trace_id_prefix: str, top_k: int = 5,
    con: duckdb.DuckDBPyConnection | None = None,
) -> dict[str, Any]:
    """The headline figures of one analysed trace (matched by trace id prefix or file name) as plain data.

    ``con``: an open connection to read instead of opening ``warehouse_path`` with the readers' opener (kept open)."""
    own = con is None
    con = con or open_readonly(Path(warehouse_path)).con
    try:
        tid = resolve_trace(con, trace_id_prefix)
        p = {"t": tid, "k": top_k}
        out: dict[str, Any] = {
            "headline": trace_headlines(con, [tid])[0],
            "phases": _rows(con, "SELECT * FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'phase' "
                                 "ORDER BY scope_key", {"t": tid}),
            "device": _rows(con, "SELECT * FROM device_busy WHERE trace_id = $t ORDER BY device_id", {"t": tid}),
            "top_kernels_by_time": _rows(con, "SELECT * FROM skip_by_kernel WHERE trace_id = $t AND rank_by_time <= $k "
                                              "ORDER BY rank_by_time", p),
            "top_kernels_by_count": _rows(con, "SELECT * FROM skip_by_kernel WHERE trace_id = $t AND "
                                               "rank_by_count <= $k ORDER BY rank_by_count", p),
            "top_fusion": _rows(con, "SELECT * FROM fusion_candidates WHERE trace_id = $t AND rank <= $k "
                                     "ORDER BY rank", p),
            "i_lib_rules": _rows(con, "SELECT i_lib_rule, i_lib, count(*) AS kernels FROM kernel_taxbreak WHERE "
                                      "trace_id = $t AND is_linked GROUP BY ALL ORDER BY kernels DESC", {"t": tid}),
        }
        out["verdict"] = verdict(con, tid)
    finally:
        if own:
            con.close()
    out["caveats"] = caveats(out["headline"])
    rules = {r["i_lib_rule"] for r in out["i_lib_rules"]}
    if rules and "library_api_range" not in rules:
        out["caveats"].append({"kind": "library_rule",
                               "text": "I_lib decided from kernel names (no cuBLAS/cuDNN API ranges in the trace)"})
    return out


def format_summary(s: dict[str, Any]) -> str:
    h = s["headline"]
    lines = [f"trace {h['trace_id'][:16]}  {h['file_name']}  ({h['source_format']}, GPU {h['gpu_name'] or 'unknown'}; "
             f"{h['gpus_with_kernels'] or 0} GPU(s) ran kernels)"]
    lines += format_verdict(s.get("verdict"), s.get("caveats") or [])
    lines.append("  detail:")
    if h.get("kernels"):
        lines += [
            f"  {hdbi_text(h)}   (0 = host-bound, 1 = device-bound)",
            f"  kernels {h['kernels']:,}, linked {h['linked_kernels']:,}, launches charged {h['linked_launches']:,}"
            + (f"   flags: {', '.join(flags(h))}" if flags(h) else ""),
            f"  T_Orchestrate {_ms(h['t_orchestrate_ns'])} = ΔFT {_ms(h['delta_ft_ns'])} + ΔCT {_ms(h['delta_ct_ns'])}"
            f" + ΔKT {_ms(h['delta_kt_ns'])}   T_DeviceActive {_ms(h['t_device_active_ns'])}   "
            f"t_dispatch_blocked {_ms(h['t_dispatch_blocked_ns'])}",
            f"  host wall of the {h['host_threads'] or 0} launching thread(s) {_ms(h['host_wall_ns'])} = launch "
            f"{_ms(h['host_launch_ns'])} + launch blocked {_ms(h['host_launch_blocked_ns'])} + library "
            f"{_ms(h['host_library_ns'])} + framework {_ms(h['host_framework_ns'])} + sync {_ms(h['host_sync_ns'])}"
            f" + other runtime {_ms(h['host_other_runtime_ns'])} + untraced {_ms(h['host_untraced_ns'])}",
            f"  T_sys {h['t_sys_ns'] / 1000:.2f} µs ({h['t_sys_source']}, {h['t_sys_rule']}); T_dispatch_base "
            f"{h['t_dispatch_base_ns'] if h['t_dispatch_base_ns'] is not None else 'n/a'} ns; ΔKT excess (diagnostic) "
            f"{_ms(h['delta_kt_excess_ns'])}",
        ]
        if h.get("has_outlier_steps"):
            lines.append(f"  without outlier steps: HDBI {_frac(h['excl_outliers_hdbi'])} | HDBI_wall "
                         f"{_frac(h['excl_outliers_hdbi_wall'])} | T_Orchestrate "
                         f"{_ms(h['excl_outliers_t_orchestrate_ns'])}")
    else:
        lines.append(f"  no TaxBreak figures: {h.get('no_kernels_reason') or 'no kernels in this trace'}")
    for ph in s["phases"]:
        if ph["scope_key"] != "unknown":
            lines.append(f"  phase {ph['scope_key']:<8} kernels {ph['kernels']:,}  {hdbi_text(ph)}  "
                         f"T_Orch {_ms(ph['t_orchestrate_ns'])}  T_DevAct {_ms(ph['t_device_active_ns'])}")
    if h.get("kernels"):
        kv = "n/a" if h["kpt"] is None else f"{h['kpt']:,.1f}"
        kd = "n/a" if h["kpt_decode"] is None else f"{h['kpt_decode']:,.1f}"
        lines.append(f"  kernels per token {kv} (decode-only {kd}); unique kernels {h['unique_kernels'] or 0:,}, "
                     f"diversity {h['kernel_diversity'] or 0:.3f}")
        lines.append(f"  TKLQT {_ms(h['tklqt_ns'])}: {tklqt_note(h)} ({h['negative_samples']:,} negative samples "
                     f"apart); AKD {h['akd_ns'] / 1000:,.2f} µs")
        lines.append(f"  window [first framework op, last kernel end]: IL {_ms(h['il_ns'])}, GPU idle "
                     f"{_ms(h['gpu_idle_merged_ns'])} (IL - merged busy), {_ms(h['gpu_idle_sum_ns'])} "
                     "(IL - sum of kernel time)")
    for d in s["device"]:
        lines.append(f"  window [GPU {d['device_id']}'s first kernel start, last kernel end] {_ms(d['span_ns'])}: busy "
                     f"{_ms(d['busy_ns'])}, idle {_ms(d['idle_ns'])} (late launch {_ms(d['idle_launch_late_ns'])}, "
                     f"sync {_ms(d['idle_sync_drain_ns'])}, memcpy {_ms(d['idle_memcpy_ns'])}, other "
                     f"{_ms(d['idle_other_ns'])})")
    label = kernel_labels(s)
    if s["top_kernels_by_time"]:
        lines.append("  top kernels by time:")
        lines += [f"    {k['rank_by_time']}. {_ms(k['total_dur_ns'])} x{k['invocations']:,}  {label[k['kernel_name']]}"
                  for k in s["top_kernels_by_time"]]
        lines.append("  top kernels by count:")
        lines += [f"    {k['rank_by_count']}. x{k['invocations']:,}  {label[k['kernel_name']]}"
                  for k in s["top_kernels_by_count"]]
    if s["top_fusion"]:
        lines.append("  fusion candidates (maximal, non-overlapping, by host time saved):")
        lines += [f"    {f['rank']}. L={f['chain_len']} x{f['occurrences']:,} saves {f['launches_saved']:,} launches "
                  f"~{_ms(f['host_time_saved_ns'])}: " + " > ".join(label[n] for n in f["chain"])
                  for f in s["top_fusion"]]
    if label:
        lines.append("  (kernels by their short names, told apart where they share one; --json has the full names)")
    if s["caveats"]:
        lines.append("  assumed / caveats:")
        lines += [f"    - [{c['kind']}] {c['text']}" for c in s["caveats"]]
    return "\n".join(lines)
