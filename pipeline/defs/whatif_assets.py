"""The what-if replay as an asset: ``whatif_results`` and ``critical_path`` (taxbreak.features.whatif; docs/method.md).

Part of ``trace_job`` (after the analysis tables): a run started for one trace replays that trace's default
scenarios (``taxbreak.features.whatif.default_scenarios``: identity, the host-speed sweep 1x..4x, GPU 2x, CUDA graphs
for
decode, the top-5 fusion candidates); a run without a partition computes them for every analysed trace that has
no rows yet (``full_rebuild``: for every trace). It runs in the ``duckdb_writer`` pool like every other writer.
It stays unpartitioned: a run without a given trace replays only the traces that have no rows yet, which is not
what a range of partitions would record.
"""

import dagster as dg

from taxbreak.engine import runner
from taxbreak.features import whatif
from taxbreak.pipeline.defs.analysis_assets import POOL, AnalysisConfig, trace_ids_for_run
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource

WHATIF_KEYS = [dg.AssetKey("whatif_results"), dg.AssetKey("critical_path"), dg.AssetKey("levers")]
READS = ["int_kernel_links", "kernel_taxbreak", "int_steps", "trace_launch_floor", "skip_by_trace",
         "fusion_candidates", "taxbreak_by_scope"]


def _specs() -> list[dg.AssetSpec]:
    try:
        from taxbreak.features.whatif import table_docs
    except ImportError:  # pragma: no cover - the replay module is optional for loading the definitions
        return []
    return [dg.AssetSpec(key=sf.name, deps=[dg.AssetKey(r) for r in READS], group_name="analysis",
                         kinds={"duckdb", "python"}, skippable=True,
                         description=f"{sf.grain}. {sf.description}", metadata={"grain": sf.grain})
            for sf in table_docs()]


@dg.multi_asset(specs=_specs(), can_subset=True, pool=POOL, name="whatif_tables")
def whatif_tables(
    context: dg.AssetExecutionContext, config: AnalysisConfig, lake: LakeResource, warehouse: WarehouseResource,
):  # noqa: ANN201 - yields MaterializeResult
    trace_ids = trace_ids_for_run(context, config.full_rebuild)

    def write(con):  # noqa: ANN001, ANN202 - DuckDB connection; (traces replayed, rows written, table totals)
        nonlocal trace_ids
        # the run's traces that have kernels (a run for some traces looks only at their rows)
        analysed = {r[0] for r in con.execute(
            "SELECT trace_id FROM skip_by_trace WHERE kernels > 0 AND ($all OR trace_id IN "
            "(SELECT unnest($ids::VARCHAR[])))", {"all": trace_ids is None, "ids": trace_ids or []},
        ).fetchall()} if _has(con, "skip_by_trace") else set()
        if trace_ids is None:
            done = {r[0] for r in con.execute("SELECT DISTINCT trace_id FROM whatif_results").fetchall()} if _has(
                con, "whatif_results") else set()
            trace_ids = sorted(analysed if config.full_rebuild else analysed - done)
        todo = [t for t in trace_ids if t in analysed]
        rows = {"whatif_results": 0, "critical_path": 0, "levers": 0}
        for tid in todo:
            try:
                n = whatif.compute_and_write(con, lake.get(), [tid])
            except LookupError as exc:  # not analysed or no events: the tables stay as they are for it
                context.log.info(f"trace {tid[:16]}: {exc}")
                continue
            for k, v in n.items():
                rows[k] += v
        totals = {k: (con.execute(f"SELECT count(*) FROM {k}").fetchone()[0] if _has(con, k) else 0) for k in rows}
        return todo, rows, totals

    # the one publisher (taxbreak.engine.runner.publish), one publication per trace (whatif.write_tables): the marts of
    # the run's trace only (None: every trace) and only of the tables this step writes: the trace's other tables,
    # just published by the analysis step, stay where they are (taxbreak.store.marts)
    todo, rows, totals = runner.publish(warehouse.file(), write, traces=trace_ids,
                                 tables=[k.path[-1] for k in WHATIF_KEYS], one_transaction=False, label="whatif")
    for key in context.selected_asset_keys:
        name = key.path[-1]
        yield dg.MaterializeResult(asset_key=key, metadata={
            "traces_replayed": len(todo), "rows_written": rows[name], "dagster/row_count": int(totals[name])})


def _has(con, table: str) -> bool:  # noqa: ANN001 - DuckDB connection
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $t AND NOT temporary",
                            {"t": table}).fetchone()[0])


@dg.definitions
def whatif_defs() -> dg.Definitions:
    return dg.Definitions(assets=[whatif_tables])
