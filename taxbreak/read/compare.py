"""``taxbreak compare A B``: two traces or two groups of traces side by side.

A group spec is a comma-separated list of items; each item is
``model:NAME`` (trace_meta.model), ``kind:dense|moe`` (trace_meta.model_kind), ``bs:N`` (batch size),
a file-name glob (``*bs16*``), or one trace named as every command names TRACE (``taxbreak.store.tracenames``: id
prefix, file name, its stem or a unique substring; an ambiguous name is an error listing the candidates).
A group's figures are sums over its traces, with HDBI and kernels per token recomputed from the sums (not
averaged)."""

from __future__ import annotations

import argparse
import fnmatch
import sys

import duckdb

from taxbreak.config import add_path_args
from taxbreak.read import readmodel
from taxbreak.read.plots import fmt_value
from taxbreak.store import query
from taxbreak.store.query import open_for_cli
from taxbreak.store.tracenames import TraceAmbiguous, resolve

# (metric, unit, better when lower)
METRICS: list[tuple[str, str, bool | None]] = [
    ("traces", "traces", None),
    ("kernels", "kernels", None),
    ("t_orchestrate_ns", "ns", True),
    ("delta_ft_ns", "ns", True),
    ("delta_ct_ns", "ns", True),
    ("delta_kt_ns", "ns", True),
    ("t_device_active_ns", "ns", None),
    ("hdbi", "fraction", False),
    ("hdbi_linked", "fraction", False),
    ("hdbi_wall", "fraction", False),
    ("linked_fraction", "fraction", False),
    ("host_wall_ns", "ns", True),
    ("flagged_orchestrate_exceeds_wall", "traces", True),
    ("flagged_dispatch_blocked", "traces", True),
    ("flagged_outlier_steps", "traces", True),
    ("output_tokens", "tokens", None),
    ("kpt", "kernels per token", True),
    ("end_to_end_ns", "ns", True),
    ("tklqt_ns", "ns", True),
    ("tklqt_per_launch_ns", "ns", True),
]


class GroupError(ValueError):
    pass


def resolve_group(con: duckdb.DuckDBPyConnection, spec: str) -> list[str]:
    """Trace ids matching a group spec (see the module doc); raises GroupError naming an item that matched none."""
    rows = con.execute(
        "SELECT trace_id, file_name, model, model_kind, batch_size FROM trace_meta ORDER BY file_name, trace_id"
    ).fetchall()
    chosen: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        key, _, val = item.partition(":")
        if key == "model" and val:
            hit = [r[0] for r in rows if r[2] == val]
        elif key == "kind" and val:
            hit = [r[0] for r in rows if r[3] == val]
        elif key == "bs" and val.isdigit():
            hit = [r[0] for r in rows if r[4] == int(val)]
        elif any(c in item for c in "*?["):
            hit = [r[0] for r in rows if fnmatch.fnmatch(r[1] or "", item)]
        else:  # one trace, named as every command names TRACE (taxbreak.store.tracenames)

            try:
                hit = [resolve([(r[0], r[1]) for r in rows], item, "analysed trace")]
            except TraceAmbiguous as exc:
                raise GroupError(f"{exc} (a file-name glob such as '*{item}*' takes them all)") from None
            except LookupError:
                raise GroupError(f"no trace matches '{item}' among the analysed traces (a trace-id prefix, file "
                                 "name, stem or unique substring; or a file-name glob, model:NAME, kind:dense|moe, "
                                 "bs:N)") from None
        if not hit:
            raise GroupError(
                f"'{item}' matches no analysed trace: use a trace-id prefix, a file-name glob, model:NAME, "
                "kind:dense|moe or bs:N (list traces with `taxbreak sql \"SELECT trace_id, file_name, model FROM "
                "trace_meta\"`)"
            )
        chosen.extend(t for t in hit if t not in chosen)
    if not chosen:
        raise GroupError(f"empty group spec {spec!r}")
    return chosen


def group_metrics(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, float | int | None]:
    """The compared figures for a set of traces: sums of the read model's trace rows (taxbreak.read.readmodel), with
    the ratios recomputed from the sums, and how many traces carry each flag."""
    hs = readmodel.trace_headlines(con, trace_ids)

    def total(key: str, rows: list[dict] | None = None) -> int | None:
        vals = [h[key] for h in (hs if rows is None else rows) if h.get(key) is not None]
        return int(sum(vals)) if vals else None

    kernels, orch, dev = total("kernels"), total("t_orchestrate_ns"), total("t_device_active_ns")
    dev_linked, linked = total("t_device_active_linked_ns"), total("linked_kernels")
    host = [total(k) for k in ("host_launch_ns", "host_library_ns", "host_framework_ns")]
    with_kpt = [h for h in hs if h.get("kpt") is not None]
    tokens, kpt_kernels = total("output_tokens", with_kpt), total("kpt_kernels", with_kpt)

    def ratio(a: int | None, b: int | None) -> float | None:
        return a / (a + b) if a is not None and b is not None and a + b > 0 else None

    def ratio_of(a: int | None, b: int | None) -> float | None:
        return a / b if a is not None and b else None

    # the launches TKLQT sums over (the non-negative samples), so the group's mean is its TKLQT per launch
    samples, negative = total("launch_samples"), total("negative_samples")
    counted_launches = None if samples is None else samples - (negative or 0)

    return {
        "traces": len(hs), "kernels": kernels, "t_orchestrate_ns": orch, "delta_ft_ns": total("delta_ft_ns"),
        "delta_ct_ns": total("delta_ct_ns"), "delta_kt_ns": total("delta_kt_ns"), "t_device_active_ns": dev,
        "hdbi": ratio(dev, orch), "hdbi_linked": ratio(dev_linked, orch),
        "hdbi_wall": ratio(dev, sum(host)) if None not in host else None,
        "linked_fraction": linked / kernels if kernels and linked is not None else None,
        "host_wall_ns": total("host_wall_ns"),
        "flagged_orchestrate_exceeds_wall": sum(1 for h in hs if h.get("orchestrate_exceeds_wall")),
        "flagged_dispatch_blocked": sum(1 for h in hs if h.get("dispatch_blocked_flag")),
        "flagged_outlier_steps": sum(1 for h in hs if h.get("has_outlier_steps")),
        "output_tokens": tokens,
        "kpt": kpt_kernels / tokens if tokens and len(with_kpt) == len(hs) and kpt_kernels is not None else None,
        "end_to_end_ns": total("il_ns"), "tklqt_ns": total("tklqt_ns"),
        "tklqt_per_launch_ns": ratio_of(total("tklqt_ns"), counted_launches),
        "caveats": [f"{h['file_name']}: [{c['kind']}] {c['text']}" for h in hs for c in readmodel.caveats(h)
                    if c["kind"] in ("coverage", "wall", "blocked", "outlier", "no_kernels")],
    }


def compare(con: duckdb.DuckDBPyConnection, spec_a: str, spec_b: str) -> dict:
    ids_a, ids_b = resolve_group(con, spec_a), resolve_group(con, spec_b)
    a, b = group_metrics(con, ids_a), group_metrics(con, ids_b)
    rows = []
    for metric, unit, lower_better in METRICS:
        va, vb = a[metric], b[metric]
        delta = vb - va if va is not None and vb is not None else None
        pct = delta / va if delta is not None and va else None
        rows.append({"metric": metric, "unit": unit, "a": va, "b": vb, "delta": delta, "delta_ratio": pct,
                     "lower_is_better": lower_better})
    return {"a": {"spec": spec_a, "trace_ids": ids_a, "caveats": a["caveats"]},
            "b": {"spec": spec_b, "trace_ids": ids_b, "caveats": b["caveats"]}, "rows": rows,
            "verdict": verdict_change(con, ids_a, ids_b), "workload_mismatch": workload_mismatch(con, ids_a, ids_b)}


def _key_values(key: str) -> dict[str, str]:
    """run_spec.workload_key ('field=value|...') as a dict."""
    return dict(part.split("=", 1) for part in key.split("|") if "=" in part)


def workload_mismatch(con: duckdb.DuckDBPyConnection, ids_a: list[str], ids_b: list[str]) -> list[dict]:
    """The workload-key fields (run_spec, setting trends.workload_key) in which A and B differ: for each, the
    values on each side. Empty when they are like for like (or the warehouse predates run_spec)."""
    if not query.has_relation(con, "run_spec"):
        return []
    keys = dict(con.execute("SELECT trace_id, workload_key FROM run_spec WHERE trace_id IN "
                            "(SELECT unnest($ids::VARCHAR[]))", {"ids": list(ids_a) + list(ids_b)}).fetchall())

    def side(ids: list[str]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for t in ids:
            for f, v in _key_values(keys.get(t) or "").items():
                out.setdefault(f, set()).add(v)
        return out

    sa, sb = side(ids_a), side(ids_b)
    return [{"field": f, "a": sorted(sa.get(f, ())), "b": sorted(sb.get(f, ()))}
            for f in dict.fromkeys([*sa, *sb]) if sa.get(f) != sb.get(f)]


def format_workload_mismatch(mm: list[dict]) -> list[str]:
    if not mm:
        return []
    parts = "; ".join(f"{m['field']} (A: {', '.join(m['a']) or '?'}; B: {', '.join(m['b']) or '?'})" for m in mm)
    return [f"WARNING: A and B are not the same workload: they differ in {parts} (the workload key, setting "
            "trends.workload_key): the differences below mix the change you look for with these", ""]


def verdict_change(con: duckdb.DuckDBPyConnection, ids_a: list[str], ids_b: list[str]) -> dict | None:
    """Whether the verdict changed from A to B and which lever moved (docs/method.md "The verdict"): each side's
    bounds (trace count per bound), its top lever where the side is one trace, and per lever the predicted IL change
    (percent) on each side, largest move first. None when neither side has a verdict."""
    va = {t: readmodel.verdict(con, t) for t in ids_a}
    vb = {t: readmodel.verdict(con, t) for t in ids_b}
    if not any(va.values()) and not any(vb.values()):
        return None

    def bounds(vs: dict) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in vs.values():
            key = v["bound"] if v else "not computed"
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))

    def lever_pct(vs: dict) -> dict[str, float]:
        if len(vs) != 1:
            return {}
        v = next(iter(vs.values()))
        return {lv["lever"]: lv["il_change_pct"] for lv in (v or {}).get("levers") or []}

    def top(vs: dict) -> str | None:
        if len(vs) != 1 or not next(iter(vs.values())):
            return None
        t = readmodel.top_levers(next(iter(vs.values())), 1)
        return t[0]["label"] if t else None

    pa_, pb_ = lever_pct(va), lever_pct(vb)
    moves = sorted(({"lever": k, "a_pct": pa_[k], "b_pct": pb_[k], "delta_pct": pb_[k] - pa_[k]}
                    for k in pa_.keys() & pb_.keys()), key=lambda m: (-abs(m["delta_pct"]), m["lever"]))
    ba, bb = bounds(va), bounds(vb)
    return {"a": ba, "b": bb, "changed": ba != bb, "a_top_lever": top(va), "b_top_lever": top(vb),
            "lever_moves": moves}


def format_verdict_change(vc: dict | None) -> list[str]:
    if vc is None:
        return []

    def side(b: dict[str, int]) -> str:
        return ", ".join(k if n == 1 and len(b) == 1 else f"{k} x{n}" for k, n in b.items())

    lines = [f"verdict: A {side(vc['a'])} -> B {side(vc['b'])}" + ("  (CHANGED)" if vc["changed"] else "  (same)")]
    if vc["a_top_lever"] or vc["b_top_lever"]:
        lines.append(f"top lever: A {vc['a_top_lever'] or 'none'} -> B {vc['b_top_lever'] or 'none'}")
    if vc["lever_moves"] and abs(vc["lever_moves"][0]["delta_pct"]) >= 0.05:
        m = vc["lever_moves"][0]
        lines.append(f"lever that moved most: {m['lever']} {m['a_pct']:+.1f}% -> {m['b_pct']:+.1f}% of IL")
    return lines + [""]


def format_compare(result: dict) -> str:
    lines = [f"A = {result['a']['spec']}: {len(result['a']['trace_ids'])} trace(s) "
             + ", ".join(t[:12] for t in result["a"]["trace_ids"][:6]),
             f"B = {result['b']['spec']}: {len(result['b']['trace_ids'])} trace(s) "
             + ", ".join(t[:12] for t in result["b"]["trace_ids"][:6]), ""]
    lines += format_workload_mismatch(result.get("workload_mismatch") or [])
    lines += format_verdict_change(result.get("verdict"))
    table = [["metric", "A", "B", "B - A", "change"]]
    for r in result["rows"]:
        unit = r["unit"] if r["unit"] in ("ns", "fraction") else ""
        d = r["delta"]
        dtxt = "n/a" if d is None else ("+" if d > 0 else "") + fmt_value(d, unit)
        ptxt = "" if r["delta_ratio"] is None else f"{r['delta_ratio']:+.1%}"
        table.append([r["metric"], fmt_value(r["a"], unit), fmt_value(r["b"], unit), dtxt, ptxt])
    # widths from the content: flagged_orchestrate_exceeds_wall is wider than any fixed metric column was
    lines += query.align_columns(table, [False, True, True, True, True])
    for side in ("a", "b"):
        for c in result[side].get("caveats", []):
            lines.append(f"{side.upper()}: {c}")
    lines.append("")
    lines.append("sums over each group's traces; HDBI = device active / (device active + T_Orchestrate) of the sums, "
                 "HDBI_linked over linked kernels, HDBI_wall over the launching threads' host partition; "
                 "flagged_* count traces; "
                 "kpt n/a when a trace lacks its token count; end_to_end_ns = inference latency (skip_by_trace.il_ns); "
                 f"tklqt_ns: TKLQT, {readmodel.TKLQT_IS_A_SUM}, and a group's sum over its traces; "
                 "tklqt_per_launch_ns: TKLQT / the launches it sums, the figure to compare")
    return "\n".join(lines)


def cmd_compare(args: argparse.Namespace) -> int:
    opened = open_for_cli(args, "compare")
    if opened is None:
        return 2
    try:
        result = compare(opened.con, args.a, args.b)
    except GroupError as exc:
        print(f"taxbreak compare: {exc}", file=sys.stderr)
        return 2
    finally:
        opened.con.close()
    if args.json:
        import json

        print(json.dumps(result, indent=2))
    else:
        print(format_compare(result))
    return 0


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="two traces or two groups side by side: T_Orchestrate and its parts, HDBI, kernels per token, latency",
        description="Compare A and B. Each is a comma-separated list of traces (id prefix, file name, stem or unique "
        "substring), file-name globs, "
        "model:NAME, kind:dense|moe or bs:N. Figures are sums over each group from the warehouse tables.",
    )
    p.add_argument("a", help="group A")
    p.add_argument("b", help="group B")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_compare)
