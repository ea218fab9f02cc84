"""The analysis tables as assets: one asset per kept ``sql/`` table, the exports, and the invariant checks.

The tables are the specs of one multi-asset step, so a run prepares its traces' inputs once and holds the DuckDB
writer once (``taxbreak.analysis.materialize_table`` per selected table, in dependency order). Each asset's code
version hashes its SQL file, the run-local files it reads and the run settings (rules).
Run-local (``-- materialize: temp``) files are not assets: their reads are folded into the dependents.
In a run started for one trace (the sensor's runs carry the trace's partition key) the tables are rebuilt
for that trace only; a run without a partition (the schedule's refresh, a materialisation from the UI)
rebuilds them for every trace. Every step that touches the DuckDB file is in the ``duckdb_writer`` pool
(limit 1 in ``dagster.yaml``) and takes an exclusive lock on it.
"""

import base64
import hashlib

import dagster as dg

from taxbreak.analysis import settings_tables
from taxbreak.pipeline.defs.checks import check_specs, evaluate, markdown_preview
from taxbreak.pipeline.defs.ingest_assets import TRACE_INGEST, run_trace_id
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource

POOL = "duckdb_writer"
EXPORTS = dg.AssetKey("warehouse_exports")
REPORT = dg.AssetKey("warehouse_report")
SNAPSHOT_NAME = "snapshot.duckdb"
PREVIEW_ROWS = 5


TRACES_TAG = "taxbreak/trace_ids"  # a run tag: comma-separated trace ids the run analyses (a batch)


class AnalysisConfig(dg.Config):
    full_rebuild: bool = False
    """Rebuild every trace's rows even in a run started for one trace."""


def _sql_files() -> list:  # taxbreak.analysis.SqlFile, in dependency order
    try:
        from taxbreak import analysis
    except ImportError:  # the analysis module is optional for loading the definitions
        return []
    return list(analysis.sql_files())


def asset_deps(name: str, files: dict) -> list[dg.AssetKey]:
    """Kept tables a table reads; run-local files are looked through; inputs prepared from the lake
    (events, catalogue, sidecar metadata, run settings) make it depend on the ingest asset."""
    out: list[dg.AssetKey] = []

    def visit(n: str) -> None:
        for r in files[n].reads:
            if r in files and files[r].materialize != "temp":
                key = dg.AssetKey(r)
            elif r in files:  # run-local: built from the run's traces, so from the ingest too
                visit(r)
                key = TRACE_INGEST
            else:
                key = TRACE_INGEST
            if key not in out:
                out.append(key)

    visit(name)
    return out or [TRACE_INGEST]


def needed_files(selected: set[str]) -> list[str]:
    """The selected tables and every file they read (transitively), in dependency order: the engine's plan
    (``taxbreak.analysis.plan_tables``), not a second derivation of it."""
    from taxbreak.analysis import plan_tables

    return plan_tables(sorted(selected)) if selected else []


def trace_ids_for_run(context: dg.AssetExecutionContext, full_rebuild: bool) -> list[str] | None:
    batch = context.run.tags.get(TRACES_TAG)  # several traces dropped together: one run analyses them at once
    if full_rebuild:
        return None
    if batch:
        return sorted({t for t in batch.split(",") if t})
    # the partition's trace id: the run's taxbreak/trace_id tag, or its key mapped through the catalogue
    key = run_trace_id(context.run.tags, lambda: context.resources.lake.get())
    return [key] if key else None




# the run-settings tables taxbreak.analysis prepares per run, and the RunConfig fields each holds
SETTINGS_TABLES = settings_tables()  # run-settings table -> the RunConfig fields it holds (taxbreak.analysis)


def column_schema(con, sf) -> dg.TableSchema:  # noqa: ANN001 - DuckDB connection, taxbreak.analysis.SqlFile
    """The table's columns as Dagster's ``dagster/column_schema``: DuckDB types from the table, descriptions (with
    their units) from the SQL file's ``-- column:`` header lines."""
    rel = con.table(sf.name)
    return dg.TableSchema(columns=[dg.TableColumn(name=c, type=str(t), description=sf.columns.get(c) or None)
                                   for c, t in zip(rel.columns, rel.types, strict=True)])


def code_version(name: str, files: dict) -> str:
    """Hash of the table's SQL, of the run-local files it reads (transitively: their SQL is part of its
    computation) and of the run settings the statements read (kernel-name rules, step patterns, T_sys defaults)."""
    from taxbreak.analysis import RunConfig

    parts: list[str] = []
    settings_read: set[str] = set()

    def visit(n: str) -> None:
        parts.append(files[n].text)
        for r in files[n].reads:
            if r in files and files[r].materialize == "temp":
                visit(r)
            elif r in SETTINGS_TABLES:
                settings_read.add(r)

    visit(name)
    cfg = RunConfig.from_settings()  # the user's settings (taxbreak.toml, environment) are part of the computation
    for table in sorted(settings_read):  # only the settings it reads: a rule edit leaves the other tables current
        parts.append(table + "=" + repr([getattr(cfg, attr) for attr in SETTINGS_TABLES[table]]))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _specs(files: dict) -> list[dg.AssetSpec]:
    specs = []
    for name, sf in files.items():
        if sf.materialize == "temp":
            continue
        specs.append(dg.AssetSpec(
            key=name, deps=asset_deps(name, files), group_name="analysis", kinds={"duckdb", "sql"},
            code_version=code_version(name, files), skippable=True,
            description=f"`sql/{sf.path.name}` — {sf.grain}. {sf.description}".strip(),
            metadata={"grain": sf.grain, "sql_file": f"sql/{sf.path.name}"},
        ))
    return specs


FILES = {sf.name: sf for sf in _sql_files()}
TABLE_SPECS = _specs(FILES)
TABLE_NAMES = [s.key.path[-1] for s in TABLE_SPECS]


def _table_assets() -> list[dg.AssetsDefinition]:
    if not TABLE_SPECS:
        return []

    @dg.multi_asset(specs=TABLE_SPECS, check_specs=check_specs(TABLE_NAMES), can_subset=True, pool=POOL,
                    name="analysis_tables")
    def analysis_tables(
        context: dg.AssetExecutionContext, config: AnalysisConfig, lake: LakeResource, warehouse: WarehouseResource
    ):  # noqa: ANN202 - yields MaterializeResult
        from taxbreak.analysis import drop_run_local, materialize_table, publication, release_after

        trace_ids = trace_ids_for_run(context, config.full_rebuild)
        if trace_ids is not None and len(trace_ids) == 1:
            store = lake.get()
            row = store.catalogue_row(trace_ids[0])
            if row is None or row["status"] != "ingested" or not store.has_events(trace_ids[0]):
                # A failed file adds nothing: the tables stay as they are (and so does what reads them).
                context.log.info(f"trace {trace_ids[0][:16]} is not in the lake ({row and row['status']}); "
                                 "tables unchanged")
                return
        selected = {k.path[-1] for k in context.selected_asset_keys}
        checks = {k.name for k in context.selected_asset_check_keys}
        scope = ("all traces" if trace_ids is None else f"trace {trace_ids[0][:16]}" if len(trace_ids) == 1
                 else f"{len(trace_ids)} traces")
        results = []
        # the marts of the run's traces only (taxbreak.marts): a run's cost does not grow with the traces analysed
        with warehouse.writer(traces=trace_ids) as con:
            # Every file the selection needs, in dependency order, each with the run's traces: a table's
            # inputs then already exist in the connection when it is computed.  One publication (one transaction):
            # a step that dies leaves every table as it was; the results are reported once it is committed.
            with publication(con):
                plan = needed_files(selected)
                release = release_after(plan)
                for name in plan:
                    computed = materialize_table(con, name, trace_ids=trace_ids, lake_root=lake.get(), plan=plan)
                    drop_run_local(con, release.get(name, []))
                    if name not in selected:
                        continue
                    (row_count,) = con.table(name).count("*").fetchall()[0]
                    results.append(dg.MaterializeResult(asset_key=name, metadata={
                        "dagster/row_count": int(row_count), "rows_computed": int(computed), "scope": scope,
                        "dagster/column_schema": column_schema(con, FILES[name]),
                        "preview": dg.MetadataValue.md(markdown_preview(con, name)),
                    }))
                # the blocking invariants on the run's rows, before the commit: a broken one publishes nothing
                evaluations = evaluate(con, checks)
                broken = [e.check_name for e in evaluations if not e.passed]
                if broken:
                    yield from evaluations
                    raise dg.Failure(f"{scope}: invariant(s) {', '.join(broken)} broken; nothing published "
                                     "(the tables, marts and snapshot stay as they were)")
        yield from results
        yield from evaluations

    return [analysis_tables]


@dg.asset(
    key=EXPORTS, deps=[dg.AssetKey(n) for n in TABLE_NAMES] or [TRACE_INGEST], group_name="analysis",
    kinds={"parquet", "duckdb"}, pool=POOL,
    description="The readers' copy: per-trace Parquet marts (`marts/<table>/trace_id=<id>/` beside the DuckDB "
    "file), written by each table run for its traces, and `exports/snapshot.duckdb`, views over them plus the "
    "cross-trace tables, replaced atomically (taxbreak.marts): query these while runs write. This step catches up "
    "what a writer that died left pending and reports the marts.",
)
def warehouse_exports(warehouse: WarehouseResource) -> dg.MaterializeResult:
    from taxbreak.marts import marts_dir, partitions

    with warehouse.writer(traces=[]):  # only what earlier writers left pending, then the snapshot (small)
        pass
    root = marts_dir(warehouse.file())
    counts = {d.name: len(partitions(d)) for d in sorted(root.iterdir()) if d.is_dir() and d.name[0] not in "._"}
    return dg.MaterializeResult(metadata={
        "marts_dir": str(root), "snapshot": str(warehouse.exports_dir() / SNAPSHOT_NAME),
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
    import duckdb

    from taxbreak import plots, report

    snapshot = warehouse.exports_dir() / SNAPSHOT_NAME
    out = warehouse.file().parent / "reports" / "index.html"
    # a run for some traces reads and redraws only their pages (and the index across traces): its cost does not
    # grow with the traces in the warehouse; a run without a partition redraws what changed in every page
    details = trace_ids_for_run(context, False)
    con = duckdb.connect(str(snapshot), read_only=True, config={"autoinstall_known_extensions": "false"})
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
