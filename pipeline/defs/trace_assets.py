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
from taxbreak.pipeline.defs.ingest_assets import TRACES, run_trace_id, single_run_asset
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


@single_run_asset(  # trace_job's one backfill policy (ingest_assets.single_run_asset says why)
    key=TRACE_ANALYSIS, partitions_def=TRACES, deps=headline_tables(), group_name="analysis", kinds={"duckdb"},
    description="One trace's analysis (a `traces` partition): its headline figures from the analysis tables "
    "(HDBI, HDBI_linked, HDBI_wall, T_Orchestrate = ΔFT + ΔCT + ΔKT, device-active time, T_sys, kernels per token; "
    "docs/method.md) and flags. Materialised by `trace_job` after the tables committed the trace, so the partitions "
    "page shows which traces are analysed; `refresh_job` (a run over a range of partitions) does not touch it. "
    "A `trace_job` run over a range (a backfill) records each trace of the range; its metadata counts them.",
)
def trace_analysis(
    context: dg.AssetExecutionContext, lake: LakeResource, warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    keys = context.partition_keys  # one for the sensor's runs (its trace id tag names it); a range for a backfill
    trace_ids = ([run_trace_id({"dagster/partition": keys[0], **context.run.tags}, lambda: lake.get())]
                 if len(keys) == 1 else [run_trace_id({"dagster/partition": key}, lambda: lake.get()) for key in keys])
    # as every reader: the snapshot the tables' step published before this one (no lock, no wait for other runs'
    # writers), else the file read-only
    opened = open_readonly(warehouse.file())
    try:
        heads = (readmodel.trace_headlines(opened.con, trace_ids)
                 if query.has_relation(opened.con, "trace_meta") else [])
        verdicts = readmodel.verdicts(opened.con, trace_ids) if heads else {}
    finally:
        opened.con.close()
    by_id = {h["trace_id"]: h for h in heads}
    missing = [(key, t) for key, t in zip(keys, trace_ids, strict=True) if t not in by_id]
    if missing:
        store = lake.get()
        told = []
        for key, t in missing:
            row = store.catalogue_row(t) if t else None
            told.append(f"partition {key}: trace {(t or '?')[:16]} is not in the analysis tables (catalogue status: "
                        f"{row['status'] if row else 'no row'})")
        raise dg.Failure("; ".join(told))
    if len(trace_ids) == 1:
        return dg.MaterializeResult(metadata=headline_metadata(by_id[trace_ids[0]], verdicts.get(trace_ids[0])))
    return dg.MaterializeResult(metadata={"traces": len(trace_ids), "flagged": sum(
        1 for t in trace_ids if readmodel.flags(by_id[t]))})


@dg.definitions
def trace_defs() -> dg.Definitions:
    return dg.Definitions(assets=[trace_analysis])
