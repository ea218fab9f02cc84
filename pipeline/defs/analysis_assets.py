"""The analysis tables as assets: one asset per kept ``sql/`` table, the exports, and the invariant checks.

The per-trace tables are the specs of one multi-asset step partitioned by ``traces`` (``analysis_tables``), so a
run prepares its traces' inputs once and publishes once, and each table's partitions page shows which traces are
materialised.  The step is one run of the engine (``taxbreak.engine.runner.run``, as for ``taxbreak analyze``): a run
for
some traces computes its tables in a file of its own without the writer lock and holds the lock only to publish
them; a run over every trace computes under it, as it rewrites every table whole; the invariants
(``sql/checks``) are evaluated on the run's rows before anything is published; the engine's events become the
step's materialisations and check results.
The cross-trace tables (``-- scope: cross_trace``: the sweeps) belong to no trace: they are an unpartitioned
multi-asset step after it (``cross_trace_tables``), recomputed from every trace's rows.
Each asset's code version hashes its SQL file, the run-local files it reads and the run settings (rules).
Run-local (``-- materialize: temp``) files are not assets: their reads are folded into the dependents.
A run's traces (``trace_ids_for_run``): the sensor's run for one partition rebuilds that trace; a run over a range
of partitions (``refresh_job``; a backfill: the step's backfill policy is one run) rebuilds the range's traces, and
every trace when the range spans every registered key; the tag ``taxbreak/trace_ids`` adds a batch's traces.
Every step that writes the DuckDB file takes an exclusive lock on it; all but ``analysis_tables`` (which computes
before it takes the lock) are in the ``duckdb_writer`` pool (limit 1 in ``dagster.yaml``).
"""

import base64

import dagster as dg

from taxbreak.engine import plan, runner
from taxbreak.engine.analysis import build_cross_trace, plan_tables
from taxbreak.engine.checks import InvariantBroken
from taxbreak.engine.plan import INPUTS
from taxbreak.pipeline.defs.checks import (
    REGRESSION_CHECK,
    REGRESSIONS_ASSET,
    check_specs,
    markdown_preview,
    regression_result,
    regression_spec,
)
from taxbreak.pipeline.defs.checks import results as check_results
from taxbreak.pipeline.defs.ingest_assets import TRACE_INGEST, TRACES, run_trace_id, trace_ids_of_keys
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource
from taxbreak.read import plots, report
from taxbreak.read.trend import regressions_in
from taxbreak.store.marts import marts_location, pending, trace_counts
from taxbreak.store.query import open_readonly
from taxbreak.store.warehouse import SNAPSHOT_NAME, snapshot_is_current

POOL = "duckdb_writer"
EXPORTS = dg.AssetKey("warehouse_exports")
REPORT = dg.AssetKey("warehouse_report")
PREVIEW_ROWS = 5


TRACES_TAG = "taxbreak/trace_ids"  # a run tag: comma-separated trace ids the run analyses (a batch)


class AnalysisConfig(dg.Config):
    full_rebuild: bool = False
    """Rebuild every trace's rows even in a run started for one trace."""


def asset_deps(name: str, files: dict) -> list[dg.AssetKey]:
    """Kept tables a table reads; run-local files are looked through; the inputs the engine prepares from the lake
    (``taxbreak.engine.plan.INPUTS``, source "lake": the run's traces, catalogue rows, sidecar metadata) make it
    depend on the ingest asset.  The run-settings inputs are no asset: they are part of the code version
    (``taxbreak.engine.plan.code_version``)."""

    source = {i.name: i.source for i in INPUTS}
    out: list[dg.AssetKey] = []

    def visit(n: str) -> None:
        for r in files[n].reads:
            if r in files and files[r].materialize != "temp":
                key = dg.AssetKey(r)
            elif r in files:  # run-local: built from the run's traces, so from the ingest too
                visit(r)
                key = TRACE_INGEST
            elif source.get(r) == "settings":
                continue
            else:
                key = TRACE_INGEST
            if key not in out:
                out.append(key)

    visit(name)
    return out or [TRACE_INGEST]


def needed_files(selected: set[str]) -> list[str]:
    """The selected tables and every file they read (transitively), in dependency order: the engine's plan
    (``taxbreak.engine.analysis.plan_tables``), not a second derivation of it."""

    return plan_tables(sorted(selected)) if selected else []


RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def range_tags(keys: list[str]) -> dict[str, str]:
    """Run tags targeting the ``traces`` partitions from ``keys[0]`` to ``keys[-1]`` (registration order): one run
    over them all (the refresh, a batch)."""
    return {RANGE_START: keys[0], RANGE_END: keys[-1]}


def run_partition_keys(context: dg.AssetExecutionContext) -> list[str] | None:
    """The ``traces`` keys a run targets: its partition, or every key of its partition range; None without
    partitions.  Read from the run's tags, so an unpartitioned step of a partitioned run sees them too."""
    tags = context.run.tags
    if tags.get("dagster/partition"):
        return [tags["dagster/partition"]]
    if not (tags.get(RANGE_START) and tags.get(RANGE_END)):
        return None
    keys = context.instance.get_dynamic_partitions(TRACES.name)
    return keys[keys.index(tags[RANGE_START]): keys.index(tags[RANGE_END]) + 1]


def trace_ids_for_run(context: dg.AssetExecutionContext, full_rebuild: bool) -> list[str] | None:
    """The traces a run analyses (the one place that maps a run to them); None: every trace.

    The traces of the run's partition keys (its partition, or its range: every trace when the range spans every
    registered key) plus those of the ``taxbreak/trace_ids`` tag (a batch); every trace for ``full_rebuild`` or a
    run without partitions nor tag.  Each partition Dagster records as materialised is therefore recomputed."""
    if full_rebuild:
        return None
    batch = {t for t in context.run.tags.get(TRACES_TAG, "").split(",") if t}
    keys = run_partition_keys(context)
    if keys is None:
        return sorted(batch) if batch else None
    lake = context.resources.lake.get
    if len(keys) == 1:  # the sensor's run: its taxbreak/trace_id tag, or the key mapped through the catalogue
        key = run_trace_id({"dagster/partition": keys[0], **context.run.tags}, lake)
        return sorted(batch | ({key} if key else set()))
    if len(keys) == len(context.instance.get_dynamic_partitions(TRACES.name)):
        return None  # a refresh of every partition: every trace in the lake, written whole
    return sorted(batch | set(trace_ids_of_keys(keys, lake())))


def column_schema(con, sf) -> dg.TableSchema:  # noqa: ANN001 - DuckDB connection, taxbreak.engine.analysis.SqlFile
    """The table's columns as Dagster's ``dagster/column_schema``: DuckDB types from the table, descriptions (with
    their units) from the SQL file's ``-- column:`` header lines."""
    rel = con.table(sf.name)
    return dg.TableSchema(columns=[dg.TableColumn(name=c, type=str(t), description=sf.columns.get(c) or None)
                                   for c, t in zip(rel.columns, rel.types, strict=True)])


def _specs(files: dict) -> list[dg.AssetSpec]:
    specs = []
    for name, sf in files.items():
        if sf.materialize == "temp":
            continue
        specs.append(dg.AssetSpec(
            key=name, deps=asset_deps(name, files), group_name="analysis", kinds={"duckdb", "sql"},
            code_version=plan.code_version(name), skippable=True,
            description=f"`sql/{sf.path.name}` — {sf.grain}. {sf.description}".strip(),
            metadata={"grain": sf.grain, "sql_file": f"sql/{sf.path.name}"},
        ))
    return specs


FILES = {sf.name: sf for sf in plan.sql_files()}  # the analysis stage, in dependency order
TABLE_SPECS = _specs(FILES)  # every kept table, in dependency order
TABLE_NAMES = [s.key.path[-1] for s in TABLE_SPECS]
# rows of no single trace (sweeps over traces): not partitioned, a step of their own after the per-trace tables
CROSS_TRACE = [n for n in TABLE_NAMES if FILES[n].scope == "cross_trace"]
TRACE_TABLES = [n for n in TABLE_NAMES if n not in CROSS_TRACE]


def _metadata(con, name: str, computed: int, scope: str, partial: bool = False) -> dict:  # noqa: ANN001 - DuckDB
    """A table's materialisation metadata; ``partial``: a run for some traces, whose partitions hold the rows it
    computed (its file also holds other traces' rows of an ``all_traces`` table, read from the snapshot)."""
    (row_count,) = (computed,) if partial else con.table(name).count("*").fetchall()[0]
    return {"dagster/row_count": int(row_count), "rows_computed": int(computed), "scope": scope,
            "dagster/column_schema": column_schema(con, FILES[name]),
            "preview": dg.MetadataValue.md(markdown_preview(con, name))}


def _table_assets() -> list[dg.AssetsDefinition]:
    if not TABLE_SPECS:
        return []

    @dg.multi_asset(specs=[s for s in TABLE_SPECS if s.key.path[-1] in TRACE_TABLES], partitions_def=TRACES,
                    backfill_policy=dg.BackfillPolicy.single_run(), check_specs=check_specs(TRACE_TABLES),
                    can_subset=True, name="analysis_tables")  # no pool: it computes before it takes the lock
    def analysis_tables(
        context: dg.AssetExecutionContext, config: AnalysisConfig, lake: LakeResource, warehouse: WarehouseResource
    ):  # noqa: ANN202 - yields MaterializeResult
        import pyarrow.compute as pc

        trace_ids = trace_ids_for_run(context, config.full_rebuild)
        if trace_ids == []:
            context.log.info("no trace of the run's partitions is in the catalogue; tables unchanged")
            return
        if trace_ids is not None and len(trace_ids) == 1:
            store = lake.get()
            row = store.catalogue_row(trace_ids[0])
            if row is None or row["status"] != "ingested" or not store.has_events(trace_ids[0]):
                # A failed file adds nothing: the tables stay as they are (and so does what reads them), and its
                # partition of every table stays unmaterialised.
                context.log.info(f"trace {trace_ids[0][:16]} is not in the lake ({row and row['status']}); "
                                 "tables unchanged")
                return
        if trace_ids is None and not pc.any(pc.equal(lake.get().catalogue().column("status"), "ingested")).as_py():
            context.log.info("no trace in the lake is ingested; tables unchanged")
            return
        selected = {k.path[-1] for k in context.selected_asset_keys}
        checks = {k.name for k in context.selected_asset_check_keys}
        scope = ("all traces" if trace_ids is None else f"trace {trace_ids[0][:16]}" if len(trace_ids) == 1
                 else f"{len(trace_ids)} traces")
        plan = needed_files(selected)
        results: list[dg.MaterializeResult] = []

        def on_event(event: runner.Event) -> None:
            # the run's tables computed (its own file for some traces, the warehouse inside the run's transaction
            # for every trace): their materialisation metadata, reported once the run is published
            if event.kind == "computed":
                results.extend(dg.MaterializeResult(asset_key=name, metadata=_metadata(
                    event.con, name, event.counts[name], scope, partial=event.partial))
                    for name in plan if name in selected)

        # The one run (taxbreak.engine.runner.run): some traces computed without the writer lock in the run's own file
        # (runs of other traces compute at the same time), every trace under it; the blocking invariants on the
        # run's rows before anything is published; one publication; the marts of the run's traces only
        # (taxbreak.store.marts: a run's cost does not grow with the traces); the cross-trace tables are the next
        # step's.
        try:
            done = runner.run(runner.Where(warehouse.file(), lake.get()), traces=trace_ids, tables=sorted(selected),
                              hooks=on_event, checks=checks, cross_trace=False)
        except InvariantBroken as exc:
            yield from check_results(exc.results)
            raise dg.Failure(f"{scope}: invariant(s) {', '.join(r.name for r in exc.broken)} broken; nothing "
                             "published (the tables, marts and snapshot stay as they were)") from None
        if trace_ids is not None and not done.trace_ids:
            context.log.info(f"{scope}: none is ingested in the lake; tables unchanged")
            return
        yield from results
        yield from check_results(done.checks)

    watch = REGRESSIONS_ASSET in CROSS_TRACE  # the regression warning on the runs a run analysed (issue 28)

    @dg.multi_asset(specs=[s for s in TABLE_SPECS if s.key.path[-1] in CROSS_TRACE], can_subset=True, pool=POOL,
                    check_specs=[regression_spec()] if watch else None, name="cross_trace_tables")
    def cross_trace_tables(
        context: dg.AssetExecutionContext, lake: LakeResource, warehouse: WarehouseResource
    ):  # noqa: ANN202 - yields MaterializeResult and AssetCheckResult
        results: list = []
        check = watch and dg.AssetCheckKey(dg.AssetKey(REGRESSIONS_ASSET), REGRESSION_CHECK) in \
            context.selected_asset_check_keys

        traces = trace_ids_for_run(context, full_rebuild=False)  # None: every trace
        memo: dict = {}  # one publication: what a partitioned table found carries to the next

        def write(con) -> None:  # noqa: ANN001 - DuckDB connection
            for name in CROSS_TRACE:  # dependency order
                if dg.AssetKey(name) not in context.selected_asset_keys:
                    continue
                computed = build_cross_trace(con, name, traces, memo)  # the partitioned ones: the run's groups
                if computed is None:
                    context.log.info(f"{name}: a table it reads is not built yet; left as it is")
                    continue
                results.append(dg.MaterializeResult(asset_key=name,
                                                    metadata=_metadata(con, name, computed, "all traces")))
                if check and name == REGRESSIONS_ASSET:  # the run's own traces; every workload's newest run without
                    scope = ("every workload's newest run" if traces is None else "no trace" if not traces else
                             f"trace {traces[0][:16]}" if len(traces) == 1 else f"{len(traces)} traces")
                    results.append(regression_result(regressions_in(con, traces), scope))

        # no trace's marts change here; the cross-trace tables are republished whole (one publication), then the
        # snapshot
        runner.publish(warehouse.file(), write, traces=[], tables=[], label="cross_trace_tables")
        if check and not any(isinstance(r, dg.AssetCheckResult) for r in results):
            results.append(dg.AssetCheckResult(  # a selected check always answers
                asset_key=REGRESSIONS_ASSET, check_name=REGRESSION_CHECK, passed=True,
                severity=dg.AssetCheckSeverity.WARN, description=f"{REGRESSIONS_ASSET} is not built yet"))
        yield from results

    return [analysis_tables] + ([cross_trace_tables] if CROSS_TRACE else [])


def exports_behind(db) -> bool:  # noqa: ANN001 - the warehouse file (Path)
    """Whether the readers' copy lags the warehouse: a writer left work pending (it died before its marts), or the
    snapshot is older than the file.  Otherwise every writer already published its marts and snapshot, and the
    exports step need not take the lock."""

    markers, _ = pending(db)
    return bool(markers) or not snapshot_is_current(db)


@dg.asset(
    key=EXPORTS, deps=[dg.AssetKey(n) for n in TABLE_NAMES] or [TRACE_INGEST], group_name="analysis",
    kinds={"parquet", "duckdb"}, pool=POOL,
    description="The readers' copy: per-trace Parquet marts (`marts/<table>/trace_id=<id>/` beside the DuckDB "
    "file), written by each table run for its traces, and `exports/snapshot.duckdb`, views over them plus the "
    "cross-trace tables, replaced atomically (taxbreak.store.marts): query these while runs write. This step "
    "catches up "
    "what a writer that died left pending and reports the marts.",
)
def warehouse_exports(warehouse: WarehouseResource) -> dg.MaterializeResult:
    if exports_behind(warehouse.file()):  # only what earlier writers left pending, then the snapshot (small)
        runner.publish(warehouse.file(), lambda _con: None, traces=[], label="warehouse_exports")
    counts = trace_counts(warehouse.file())  # from the manifest: a folder or S3 alike, nothing listed
    return dg.MaterializeResult(metadata={
        "marts_dir": marts_location(warehouse.file()), "snapshot": str(warehouse.exports_dir() / SNAPSHOT_NAME),
        **{f"traces_{t}": n for t, n in counts.items()},
    })


def _svg_markdown(svg: str, alt: str) -> str:
    """An SVG plot as a markdown image (a data URI), which the Dagster UI renders inline."""
    return f"![{alt}](data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()})"


@dg.asset(
    key=REPORT, deps=[EXPORTS], group_name="analysis", kinds={"html"},
    description="The HTML report across every trace (`reports/index.html` beside the DuckDB file), built from the "
    "snapshot; its headline table and the orchestration-split plot are shown here as metadata.",
)
def warehouse_report(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, lake: LakeResource,
) -> dg.MaterializeResult:
    out = report.default_output(warehouse.file()) / "index.html"
    # a run for some traces reads and redraws only their pages (and the index across traces): its cost does not
    # grow with the traces in the warehouse; a run without a partition redraws what changed in every page
    details = trace_ids_for_run(context, False)
    # the readers' one opener: the snapshot the writers just published (its marts' filesystem registered)
    con = open_readonly(warehouse.file()).con
    try:
        data = report.collect(con, details=details)
        report.write_report(con, out, data=data)  # index.html + traces/<id>.html, changed pages only
    finally:
        con.close()
    split = plots.stacked_hbar([(report.trace_label(t), report.split_segments(t)) for t in data["traces"]],
                               title="Orchestration split: ΔFT / ΔCT / ΔKT vs device-active time",
                               colors=report.SPLIT_COLORS)
    return dg.MaterializeResult(metadata={
        "report": dg.MetadataValue.path(str(out)),
        "traces": len(data["traces"]),
        "summary": dg.MetadataValue.md(report.markdown_summary(data)),
        "orchestration_split": dg.MetadataValue.md(_svg_markdown(split, "orchestration split")),
        "assumptions": dg.MetadataValue.md("\n".join(f"- {a}" for a in data["assumptions"]) or "none"),
    })


ANALYSIS_ASSETS = [*_table_assets(), warehouse_exports, warehouse_report]
ANALYSIS_KEYS = [dg.AssetKey(n) for n in TABLE_NAMES] + [EXPORTS, REPORT]


@dg.definitions
def analysis_defs() -> dg.Definitions:
    return dg.Definitions(assets=ANALYSIS_ASSETS)
