"""The per-request latency model as an asset: ``request_model_fit`` (and the tables computed from it) refitted when
new serving steps of a (model, GPU) arrive.

The asset depends on ``serving_steps`` and ``serving_step_requests`` (kept analysis tables, ``traces`` partitions).
A sensor evaluates its automation condition (eager: after any partition of either table is updated); the run refits
only the (model, GPU, phase) groups whose number of fit-ready steps changed since their stored fit
(``taxbreak.features.requests.stale_groups``), and rebuilds ``request_step_fit``, ``request_step_shares``,
``request_totals``
and ``request_tenants``. It runs in the ``duckdb_writer`` pool and holds the warehouse lock like every other writer.
The model: docs/method.md.
"""

import dagster as dg

from taxbreak.engine import plan, runner
from taxbreak.features.requests import REQUESTS_STAGE, refit, stale_groups
from taxbreak.pipeline.defs.analysis_assets import POOL
from taxbreak.pipeline.defs.resources import WarehouseResource

REQUEST_MODEL_FIT = dg.AssetKey("request_model_fit")
STAGE = plan.nodes(REQUESTS_STAGE)  # request_model_fit, then the tables computed from it (the plan's requests stage)
# the analysis tables the stage reads (serving_steps, serving_step_requests): the asset's upstream
STAGE_DEPS = sorted({r for sf in STAGE for r in sf.reads} & {sf.name for sf in plan.nodes("analysis")})


@dg.asset(
    key=REQUEST_MODEL_FIT, deps=[dg.AssetKey(r) for r in STAGE_DEPS],
    group_name="analysis", kinds={"duckdb", "python"}, pool=POOL,
    # eager, but not held back by missing upstream partitions: serving_steps is partitioned by trace, and a trace
    # whose file failed never materialises its partition
    automation_condition=dg.AutomationCondition.eager().without(~dg.AutomationCondition.any_deps_missing()),
    code_version=plan.code_version(STAGE[0].name),
    description=f"{STAGE[0].grain}. {STAGE[0].description} Also rebuilds "
    + ", ".join(sf.name for sf in STAGE[1:]) + " (docs/warehouse.md).",
    metadata={"grain": STAGE[0].grain, "computed_by": STAGE[0].computed_by},
)
def request_model_fit(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    def write(con):  # noqa: ANN001, ANN202 - DuckDB connection; (refit result, fits) or None
        has_steps = bool(con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'serving_steps' AND NOT temporary").fetchone()[0])
        if not has_steps:
            context.log.info("no serving_steps table yet: nothing to fit")
            return None
        stale = stale_groups(con)
        if not stale:
            context.log.info("every (model, GPU, phase) fit is up to date")
            return None
        res = refit(con, stale)
        return res, con.execute(
            "SELECT model_name, gpu_name, phase, steps_fitted, r2, rel_err_p90, rel_err_p99, baseline_r2, "
            "baseline_rel_err_p90, baseline_rel_err_p99 FROM request_model_fit ORDER BY ALL").fetchall()

    # the one publisher (taxbreak.engine.runner.publish): the lock, one transaction, the readers' snapshot
    done = runner.publish(warehouse.file(), write, label="request_model_fit")
    if done is None:
        return dg.MaterializeResult(metadata={"refitted_groups": 0})
    res, fits = done
    table = ["| model | GPU | phase | steps | R2 | p90 | p99 | baseline R2 | baseline p90 | baseline p99 |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    table += [f"| {m} | {g} | {p} | {n:,} | {r2:.4f} | {e90:.1%} | {e99:.1%} | {br2:.4f} | {b90:.1%} | {b99:.1%} |"
              for m, g, p, n, r2, e90, e99, br2, b90, b99 in fits]
    return dg.MaterializeResult(metadata={
        "refitted_groups": len(res["fitted"]),
        "refitted": ", ".join("/".join((f["model_name"], f["gpu_name"], f["phase"])) for f in res["fitted"]) or "none",
        "not_fitted": "; ".join(res["skipped"]) or "none",
        "seconds": round(res["seconds"], 3),
        **{f"rows_{t}": int(n) for t, n in res["rows"].items()},
        "fits": dg.MetadataValue.md("\n".join(table)),
    })


request_refit_sensor = dg.AutomationConditionSensorDefinition(
    "request_refit_sensor", target=[REQUEST_MODEL_FIT], default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=60,
    description="Refits the per-request latency model after serving_steps / serving_step_requests were updated.",
)


@dg.definitions
def request_defs() -> dg.Definitions:
    return dg.Definitions(assets=[request_model_fit], sensors=[request_refit_sensor])
