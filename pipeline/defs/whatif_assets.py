"""The what-if replay as an asset: ``whatif_results`` and ``critical_path`` (taxbreak.features.whatif; docs/method.md).

Part of ``trace_job`` (after the analysis tables): a run started for one trace replays that trace's default
scenarios (``taxbreak.features.whatif.default_scenarios``: identity, the host-speed sweep 1x..4x, GPU 2x, CUDA graphs
for decode, the top-5 fusion candidates); a run without a partition computes them for every analysed trace that has
no rows yet (``full_rebuild``: for every trace). The replay reads through the readers' opener, outside the writer
lock; its rows are published under it in one publication (``taxbreak.engine.runner.publish``). It runs in the
``duckdb_writer`` pool like every other writer.
It stays unpartitioned: a run without a given trace replays only the traces that have no rows yet, which is not
what a range of partitions would record.
"""

import dagster as dg

from taxbreak.engine import plan, runner
from taxbreak.features import whatif
from taxbreak.pipeline.defs.analysis_assets import POOL, AnalysisConfig, trace_ids_for_run
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource
from taxbreak.store.query import WarehouseUnavailable, has_relation, open_readonly

STAGE = plan.nodes(whatif.WHATIF_STAGE)  # whatif_results, critical_path (Python nodes), levers: from the plan
WHATIF_KEYS = [dg.AssetKey(sf.name) for sf in STAGE]


def _specs() -> list[dg.AssetSpec]:
    return [dg.AssetSpec(key=sf.name, deps=[dg.AssetKey(r) for r in sf.reads], group_name="analysis",
                         kinds={"duckdb", "python" if sf.python_only else "sql"}, skippable=True,
                         code_version=plan.code_version(sf.name), description=f"{sf.grain}. {sf.description}",
                         metadata={"grain": sf.grain, "computed_by": sf.computed_by})
            for sf in STAGE]


@dg.multi_asset(specs=_specs(), can_subset=True, pool=POOL, name="whatif_tables")
def whatif_tables(
    context: dg.AssetExecutionContext, config: AnalysisConfig, lake: LakeResource, warehouse: WarehouseResource,
):  # noqa: ANN201 - yields MaterializeResult
    trace_ids = trace_ids_for_run(context, config.full_rebuild)
    tables = [k.path[-1] for k in WHATIF_KEYS]
    # the replay reads, never writes: it runs on a reader's connection (the snapshot the analysis step just
    # published), outside the writer lock; only its rows are published under it
    try:
        opened = open_readonly(warehouse.file())
    except WarehouseUnavailable as exc:  # nothing analysed yet: nothing to replay
        context.log.info(f"no warehouse to replay from: {exc}")
        for key in [k for k in WHATIF_KEYS if k in context.selected_asset_keys]:
            yield dg.MaterializeResult(asset_key=key, metadata={"traces_replayed": 0, "rows_written": 0})
        return
    try:
        con = opened.con
        # the run's traces that have kernels (a run for some traces looks only at their rows)
        analysed = {r[0] for r in con.execute(
            "SELECT trace_id FROM skip_by_trace WHERE kernels > 0 AND ($all OR trace_id IN "
            "(SELECT unnest($ids::VARCHAR[])))", {"all": trace_ids is None, "ids": trace_ids or []},
        ).fetchall()} if has_relation(con, "skip_by_trace") else set()
        if trace_ids is None:
            done = {r[0] for r in con.execute("SELECT DISTINCT trace_id FROM whatif_results").fetchall()} if (
                has_relation(con, "whatif_results")) else set()
            trace_ids = sorted(analysed if config.full_rebuild else analysed - done)
        todo = [t for t in trace_ids if t in analysed]
        # not analysed or no events: the tables stay as they are for it
        results = whatif.replay_traces(con, lake.get(), todo,
                                       skipped=lambda tid, why: context.log.info(f"trace {tid[:16]}: {why}"))
    finally:
        opened.con.close()

    def write(con):  # noqa: ANN001, ANN202 - DuckDB connection; (rows written, table totals)
        rows = whatif.write_tables(con, results)
        return rows, {k: con.execute(f"SELECT count(*) FROM {k}").fetchone()[0] if has_relation(con, k) else 0
                      for k in tables}

    # the one publisher (taxbreak.engine.runner.publish), one publication: the marts of the replayed traces only and
    # only of the tables this step writes: their other tables, just published by the analysis step, stay where they
    # are (taxbreak.store.marts)
    rows, totals = {k: 0 for k in tables}, {}
    if results:
        rows, totals = runner.publish(warehouse.file(), write, traces=sorted({r["trace_id"] for r in results}),
                                      tables=tables, label="whatif")
    for key in [k for k in WHATIF_KEYS if k in context.selected_asset_keys]:  # in the plan's order
        name = key.path[-1]
        yield dg.MaterializeResult(asset_key=key, metadata={
            "traces_replayed": len({r["trace_id"] for r in results}), "rows_written": rows[name],
            **({"dagster/row_count": int(totals[name])} if name in totals else {})})
