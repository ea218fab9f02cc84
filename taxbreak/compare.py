"""``taxbreak compare A B``: two traces or two groups of traces side by side.

A group spec is a comma-separated list of items; each item is
``model:NAME`` (trace_meta.model), ``kind:dense|moe`` (trace_meta.model_kind), ``bs:N`` (batch size),
a trace-id prefix, or a file-name glob (``*bs16*``).  A group's figures are sums over its traces, with HDBI
and kernels per token recomputed from the sums (not averaged)."""

from __future__ import annotations

import argparse
import fnmatch
import sys

import duckdb

from taxbreak.config import add_path_args

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
    ("linked_fraction", "fraction", False),
    ("output_tokens", "tokens", None),
    ("kpt", "kernels per token", True),
    ("end_to_end_ns", "ns", True),
    ("tklqt_ns", "ns", True),
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
        else:
            hit = [r[0] for r in rows if r[0].startswith(item.lower())]
            if not hit:
                hit = [r[0] for r in rows if fnmatch.fnmatch(r[1] or "", item)]
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
    """The compared figures for a set of traces, straight from the warehouse tables."""
    row = con.execute(
        """
        WITH t AS (SELECT * FROM taxbreak_by_scope WHERE scope_kind = 'trace'
                   AND trace_id IN (SELECT unnest($ids::VARCHAR[]))),
        k AS (SELECT * FROM kernels_per_token WHERE trace_id IN (SELECT unnest($ids::VARCHAR[]))),
        s AS (SELECT * FROM skip_by_trace WHERE trace_id IN (SELECT unnest($ids::VARCHAR[])))
        SELECT
            (SELECT count(*) FROM t),
            (SELECT sum(kernels) FROM t),
            (SELECT sum(t_orchestrate_ns) FROM t),
            (SELECT sum(delta_ft_ns) FROM t),
            (SELECT sum(delta_ct_ns) FROM t),
            (SELECT sum(delta_kt_ns) FROM t),
            (SELECT sum(t_device_active_ns) FROM t),
            (SELECT sum(linked_kernels) FROM t),
            (SELECT sum(output_tokens) FROM k WHERE kpt IS NOT NULL),
            (SELECT sum(kernels) FROM k WHERE kpt IS NOT NULL),
            (SELECT count(*) FROM k WHERE kpt IS NULL),
            (SELECT sum(il_ns) FROM s),
            (SELECT sum(tklqt_ns) FROM s)
        """,
        {"ids": trace_ids},
    ).fetchone()
    (n, kernels, orch, ft, ct, kt, dev, linked, tokens, kpt_kernels, kpt_missing, il, tklqt) = (
        None if v is None else int(v) for v in row
    )
    hdbi = dev / (dev + orch) if dev is not None and orch is not None and dev + orch > 0 else None
    return {
        "traces": n, "kernels": kernels, "t_orchestrate_ns": orch, "delta_ft_ns": ft, "delta_ct_ns": ct,
        "delta_kt_ns": kt, "t_device_active_ns": dev, "hdbi": hdbi,
        "linked_fraction": linked / kernels if kernels else None,
        "output_tokens": tokens, "kpt": kpt_kernels / tokens if tokens and kpt_missing == 0 else None,
        "end_to_end_ns": il, "tklqt_ns": tklqt,
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
    return {"a": {"spec": spec_a, "trace_ids": ids_a}, "b": {"spec": spec_b, "trace_ids": ids_b}, "rows": rows}


def format_compare(result: dict) -> str:
    from taxbreak.plots import fmt_value

    lines = [f"A = {result['a']['spec']}: {len(result['a']['trace_ids'])} trace(s) "
             + ", ".join(t[:12] for t in result["a"]["trace_ids"][:6]),
             f"B = {result['b']['spec']}: {len(result['b']['trace_ids'])} trace(s) "
             + ", ".join(t[:12] for t in result["b"]["trace_ids"][:6]), ""]
    lines.append(f"{'metric':<20} {'A':>14} {'B':>14} {'B - A':>14} {'change':>9}")
    for r in result["rows"]:
        unit = r["unit"] if r["unit"] in ("ns", "fraction") else ""
        d = r["delta"]
        dtxt = "n/a" if d is None else ("+" if d > 0 else "") + fmt_value(d, unit)
        ptxt = "" if r["delta_ratio"] is None else f"{r['delta_ratio']:+.1%}"
        lines.append(f"{r['metric']:<20} {fmt_value(r['a'], unit):>14} {fmt_value(r['b'], unit):>14} "
                     f"{dtxt:>14} {ptxt:>9}")
    lines.append("")
    lines.append("sums over each group's traces; HDBI = device active / (device active + T_Orchestrate) of the sums; "
                 "kpt n/a when a trace lacks its token count; end_to_end_ns = inference latency (skip_by_trace.il_ns)")
    return "\n".join(lines)


def cmd_compare(args: argparse.Namespace) -> int:
    from taxbreak.query import open_for_cli

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
        description="Compare A and B. Each is a comma-separated list of trace-id prefixes, file-name globs, "
        "model:NAME, kind:dense|moe or bs:N. Figures are sums over each group from the warehouse tables.",
    )
    p.add_argument("a", help="group A")
    p.add_argument("b", help="group B")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_compare)
