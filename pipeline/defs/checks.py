"""The analysis invariants (METHOD.md), as SQL over the warehouse tables: blocking asset checks.

Each check counts the rows that break one rule; it passes when there are none and shows up to five of them.
A table not built yet (no trace analysed) passes with ``rows_checked = 0``.  The checks are evaluated by the
``analysis_tables`` step itself (``taxbreak.pipeline.defs.analysis_assets``), on the run's rows, inside the
run's publication and before its commit: a broken invariant fails the step and rolls the run back, so nothing of
that trace is published (tables, marts, snapshot), its partition of the tables stays unmaterialised and the assets
downstream (cross-trace tables, exports, report, what-if) do not run.
"""

import dagster as dg

# (table, check name, description, query selecting the violating rows). Fixed text: no values in it.
RULES: list[tuple[str, str, str, str]] = [
    ("taxbreak_by_scope", "hdbi_in_unit_interval", "HDBI and HDBI_linked lie in [0, 1] wherever defined.",
     "SELECT trace_id, scope_kind, scope_key, hdbi, hdbi_linked FROM taxbreak_by_scope "
     "WHERE NOT (hdbi BETWEEN 0 AND 1) OR NOT (hdbi_linked BETWEEN 0 AND 1)"),
    ("taxbreak_by_scope", "times_never_negative", "T_DeviceActive, ΔFT, ΔCT, ΔKT and T_Orchestrate are never "
     "negative (a kernel ending before it starts would give HDBI 1.0 from a negative device time).",
     "SELECT trace_id, scope_kind, scope_key, t_device_active_ns, delta_ft_ns, delta_ct_ns, delta_kt_ns, "
     "t_orchestrate_ns FROM taxbreak_by_scope WHERE t_device_active_ns < 0 OR delta_ft_ns < 0 OR delta_ct_ns < 0 "
     "OR delta_kt_ns < 0 OR t_orchestrate_ns < 0"),
    ("taxbreak_by_scope", "linked_plus_orphan_is_all_kernels", "linked_kernels + orphan_kernels = kernels in "
     "every scope.",
     "SELECT trace_id, scope_kind, scope_key, kernels, linked_kernels, orphan_kernels FROM taxbreak_by_scope "
     "WHERE linked_kernels + orphan_kernels IS DISTINCT FROM kernels"),
    ("taxbreak_by_scope", "orchestrate_is_ft_plus_ct_plus_kt", "T_Orchestrate = ΔFT + ΔCT + ΔKT in every scope.",
     "SELECT trace_id, scope_kind, scope_key, t_orchestrate_ns, delta_ft_ns, delta_ct_ns, delta_kt_ns "
     "FROM taxbreak_by_scope WHERE t_orchestrate_ns IS DISTINCT FROM delta_ft_ns + delta_ct_ns + delta_kt_ns"),
    ("taxbreak_by_scope", "scopes_partition_the_trace", "Steps, phases, ops and kernel names each partition the "
     "trace: their kernels, ΔFT, ΔCT, ΔKT and device time sum to the trace row's.",
     "WITH parts AS (SELECT trace_id, scope_kind, sum(kernels) AS kernels, coalesce(sum(delta_ft_ns), 0) AS ft, "
     "coalesce(sum(delta_ct_ns), 0) AS ct, coalesce(sum(delta_kt_ns), 0) AS kt, "
     "coalesce(sum(t_device_active_ns), 0) AS dev FROM taxbreak_by_scope "
     "WHERE scope_kind IN ('step', 'phase', 'op', 'kernel') GROUP BY ALL) "
     "SELECT p.trace_id, p.scope_kind, p.kernels, t.kernels AS trace_kernels, p.ft, t.delta_ft_ns, p.kt, "
     "t.delta_kt_ns FROM parts p JOIN taxbreak_by_scope t ON t.trace_id = p.trace_id AND t.scope_kind = 'trace' "
     "WHERE p.kernels IS DISTINCT FROM t.kernels OR p.ft <> coalesce(t.delta_ft_ns, 0) "
     "OR p.ct <> coalesce(t.delta_ct_ns, 0) OR p.kt <> coalesce(t.delta_kt_ns, 0) "
     "OR p.dev <> coalesce(t.t_device_active_ns, 0)"),
    ("kernel_taxbreak", "per_kernel_costs_consistent", "Per kernel: uncharged kernels carry no host cost; a "
     "charged kernel's ΔKT is the trace's T_sys; ΔFT, ΔCT, ΔKT are never negative.",
     "SELECT trace_id, kernel_seq, is_charged, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_sys_ns FROM kernel_taxbreak "
     "WHERE (NOT is_charged AND (delta_ft_ns <> 0 OR delta_ct_ns <> 0 OR delta_kt_ns <> 0)) "
     "OR (is_charged AND delta_kt_ns IS DISTINCT FROM t_sys_ns) "
     "OR delta_ft_ns < 0 OR delta_ct_ns < 0 OR delta_kt_ns < 0"),
    ("kernel_taxbreak", "kernel_sums_match_trace_rows", "Per trace, the per-kernel ΔFT, ΔCT, ΔKT and kernel "
     "count sum to the trace row of taxbreak_by_scope.",
     "WITH k AS (SELECT trace_id, count(*) AS kernels, coalesce(sum(delta_ft_ns), 0) AS ft, "
     "coalesce(sum(delta_ct_ns), 0) AS ct, coalesce(sum(delta_kt_ns), 0) AS kt FROM kernel_taxbreak GROUP BY ALL) "
     "SELECT k.trace_id, k.kernels, t.kernels AS scope_kernels, k.ft, t.delta_ft_ns, k.ct, t.delta_ct_ns, k.kt, "
     "t.delta_kt_ns FROM k JOIN taxbreak_by_scope t ON t.trace_id = k.trace_id AND t.scope_kind = 'trace' "
     "WHERE k.kernels <> t.kernels OR k.ft <> coalesce(t.delta_ft_ns, 0) OR k.ct <> coalesce(t.delta_ct_ns, 0) "
     "OR k.kt <> coalesce(t.delta_kt_ns, 0)"),
]


def _violations(con, table: str, query: str, present: set[str]) -> tuple[int, int, str]:  # noqa: ANN001
    """(rows checked, violating rows, Markdown sample) of one rule on an open connection."""
    if table not in present or "taxbreak_by_scope" not in present:
        return 0, 0, "table not built yet"
    (checked,) = con.table(table).count("*").fetchall()[0]
    con.execute(f"CREATE OR REPLACE TEMP VIEW _violations AS {query}")  # fixed rule text, no values
    (bad,) = con.execute("SELECT count(*) FROM _violations").fetchall()[0]
    sample = markdown_preview(con, "_violations") if bad else "none"
    con.execute("DROP VIEW _violations")
    return int(checked), int(bad), sample


def markdown_preview(con, table: str, limit: int = 5) -> str:  # noqa: ANN001 - DuckDB connection
    """The first rows of a table or view as a Markdown table (asset metadata)."""
    rel = con.table(table).limit(limit)
    lines = ["| " + " | ".join(rel.columns) + " |", "|" + "---|" * len(rel.columns)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rel.fetchall()]
    return "\n".join(lines)


def check_specs(tables: list[str]) -> list[dg.AssetCheckSpec]:
    """The rules as blocking checks of the tables present in ``tables``."""
    return [dg.AssetCheckSpec(name=name, asset=dg.AssetKey(table), description=description, blocking=True)
            for table, name, description, _ in RULES if table in tables]


def evaluate(con, selected: set[str]) -> list[dg.AssetCheckResult]:  # noqa: ANN001 - DuckDB connection
    """The selected rules on the connection's tables (in a per-trace run: the run's temporary tables, which hold
    that trace's rows only and shadow the warehouse's)."""
    present = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    out = []
    for table, name, _, query in RULES:
        if name not in selected:
            continue
        checked, bad, sample = _violations(con, table, query, present)
        out.append(dg.AssetCheckResult(
            asset_key=table, check_name=name, passed=bad == 0, severity=dg.AssetCheckSeverity.ERROR,
            metadata={"rows_checked": checked, "violations": bad, "examples": dg.MetadataValue.md(sample)},
        ))
    return out
