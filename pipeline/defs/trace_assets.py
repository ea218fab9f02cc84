"""``trace_analysis``: each trace's analysis as a ``traces`` partition, so the UI shows per-trace status.

The per-trace analysis tables are ``traces`` partitions too (``analysis_assets``: one step per run over its traces).
This asset, partitioned like them, is materialised by ``trace_job`` for the run's trace after the tables committed,
with the trace's headline figures (``taxbreak.read.readmodel.trace_headlines``, the read model every reader uses) as
metadata: the asset's partitions page then shows which traces are analysed, and a trace whose file failed or whose
invariants broke has no materialisation of it (its upstream step yielded nothing or failed, so this step did not run).
It reads one trace's rows from the readers' snapshot (``exports/snapshot.duckdb``, which the tables' step published
before it): no writer lock, no pool, so it never waits for another run's writer.
"""

import re

import dagster as dg

from taxbreak.pipeline.defs.analysis_assets import TABLE_NAMES
from taxbreak.pipeline.defs.ingest_assets import TRACES, run_trace_id
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource
from taxbreak.read import readmodel
from taxbreak.store import query
from taxbreak.store.query import open_readonly

TRACE_ANALYSIS = dg.AssetKey("trace_analysis")
_FIGURES = ("kernels", "linked_kernels", "hdbi", "hdbi_linked", "hdbi_wall", "linked_fraction", "t_orchestrate_ns",
            "t_device_active_ns", "delta_ft_ns", "delta_ct_ns", "delta_kt_ns", "t_sys_ns", "kpt", "steps")


def headline_tables() -> list[dg.AssetKey]:
    """The kept tables the read model's headline query reads (named in its SQL)."""

    sql = readmodel._HEADLINE_SQL  # noqa: SLF001 - the one headline query; its table names are its dependencies
    # and the verdict's table (readmodel.verdicts), which the metadata shows first
    return [dg.AssetKey(n) for n in TABLE_NAMES if re.search(rf"\b{n}\b", sql) or n == "diagnosis"]


def headline_metadata(h: dict, verdict: dict | None = None) -> dict[str, object]:
    """A trace's partition metadata: the verdict first (bound, confidence, top lever, the block `taxbreak summary`
    opens with), then the headline figures and flags, all worded by the read model."""

    meta: dict[str, object] = {}
    if verdict is not None:
        top = readmodel.top_levers(verdict, 1)
        meta["verdict"] = f"{verdict['bound']} ({verdict['confidence']})"
        meta["top_lever"] = readmodel.lever_text(top[0]) if top else "none replayed"
        meta["verdict_block"] = dg.MetadataValue.md(
            "\n".join(f"    {x.strip()}" for x in readmodel.format_verdict(verdict, readmodel.caveats(h))))
    meta.update({"file_name": h.get("file_name") or "", "trace_id": h["trace_id"],
                 "source_format": h.get("source_format") or "", "model": h.get("model") or ""})
    for k in _FIGURES:
        v = h.get(k)
        if v is not None:
            meta[k] = float(v) if isinstance(v, float) else int(v)
    meta["hdbi_text"] = readmodel.hdbi_text(h)
    meta["flags"] = ", ".join(readmodel.flags(h)) or "none"
    return meta


@dg.asset(
    key=TRACE_ANALYSIS, partitions_def=TRACES, deps=headline_tables(), group_name="analysis", kinds={"duckdb"},
    description="One trace's analysis (a `traces` partition): its headline figures from the analysis tables "
    "(HDBI, HDBI_linked, HDBI_wall, T_Orchestrate = ΔFT + ΔCT + ΔKT, device-active time, T_sys, kernels per token; "
    "docs/method.md) and flags. Materialised by `trace_job` after the tables committed the trace, so the partitions "
    "page shows which traces are analysed; `refresh_job` (a run over a range of partitions) does not touch it.",
)
def trace_analysis(
    context: dg.AssetExecutionContext, lake: LakeResource, warehouse: WarehouseResource,
) -> dg.MaterializeResult:

    trace_id = run_trace_id({"dagster/partition": context.partition_key, **context.run.tags}, lambda: lake.get())
    # as every reader: the snapshot the tables' step published before this one (no lock, no wait for other runs'
    # writers), else the file read-only
    opened = open_readonly(warehouse.file())
    try:
        heads = (readmodel.trace_headlines(opened.con, [trace_id])
                 if query.has_relation(opened.con, "trace_meta") else [])
        verdict = readmodel.verdicts(opened.con, [trace_id]).get(trace_id) if heads else None
    finally:
        opened.con.close()
    if not heads:
        row = lake.get().catalogue_row(trace_id)
        raise dg.Failure(f"partition {context.partition_key}: trace {trace_id[:16]} is not in the analysis tables "
                         f"(catalogue status: {row['status'] if row else 'no row'})")
    return dg.MaterializeResult(metadata=headline_metadata(heads[0], verdict))


@dg.definitions
def trace_defs() -> dg.Definitions:
    return dg.Definitions(assets=[trace_analysis])
