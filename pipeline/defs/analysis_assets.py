"""The analysis tables as assets: one asset per ``sql/`` file, plus the exports readers use during runs.

Each asset's code version is the hash of its SQL file, so editing a file marks that table (and what reads
it) as changed.  In a run started for one trace (the sensor's runs carry the trace's partition key) a table
is rebuilt for that trace only (``trace_ids=[key]``); a run without a partition (the schedule's refresh, a
materialisation from the UI) rebuilds it whole.  All writers share the ``duckdb_writer`` pool (limit 1 in
``dagster.yaml``) and an exclusive lock on the DuckDB file.
"""


import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

import dagster as dg

from taxbreak.pipeline.defs.ingest_assets import TRACE_INGEST
from taxbreak.pipeline.defs.resources import LakeResource, WarehouseResource

POOL = "duckdb_writer"
EXPORTS = dg.AssetKey("warehouse_exports")
LAKE_SOURCES = {"events", "catalogue", "lake", "lake.events", "lake.catalogue"}
PREVIEW_ROWS = 5
_READS = re.compile(r"^--\s*reads\s*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)


class AnalysisConfig(dg.Config):
    full_rebuild: bool = False
    """Rebuild every trace's rows even in a run started for one trace."""


def _sql_files() -> list[Path]:
    try:
        from taxbreak import analysis
    except ImportError:
        return []
    out = []
    for item in analysis.sql_files():
        out.append(Path(getattr(item, "path", item)))
    return out


def _reads(text: str) -> list[str]:
    names: list[str] = []
    for match in _READS.finditer(text):
        names.extend(n.strip() for n in re.split(r"[,\s]+", match.group(1)) if n.strip())
    return names


def trace_ids_for_run(context: dg.AssetExecutionContext, full_rebuild: bool) -> list[str] | None:
    key = context.run.tags.get("dagster/partition")
    return None if full_rebuild or not key else [key]


def _markdown_preview(con, table: str) -> str:  # noqa: ANN001 - a DuckDB connection
    rel = con.table(table).limit(PREVIEW_ROWS)
    cols = rel.columns
    rows = rel.fetchall()
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _run_table(name: str, con, lake_root: Path, trace_ids: list[str] | None) -> None:  # noqa: ANN001
    from taxbreak import analysis

    analysis.materialize_table(con, name, trace_ids=trace_ids, lake_root=lake_root)


def _make_table_asset(path: Path, known: set[str]) -> dg.AssetsDefinition:
    name = path.stem
    text = path.read_text()
    reads = _reads(text)
    deps: list[dg.AssetKey] = []
    for r in reads:
        if r in known and r != name:
            deps.append(dg.AssetKey(r))
        elif r.lower() in LAKE_SOURCES and TRACE_INGEST not in deps:
            deps.append(TRACE_INGEST)
    if not any(d == TRACE_INGEST for d in deps) and not any(r in known for r in reads):
        deps.append(TRACE_INGEST)
    first = text.strip().splitlines()[0].lstrip("- ").strip() if text.strip() else name

    @dg.asset(
        name=name, deps=deps, group_name="analysis", kinds={"duckdb", "sql"}, pool=POOL,
        code_version=hashlib.sha256(text.encode()).hexdigest()[:16], description=f"`sql/{path.name}`: {first}",
    )
    def _table(
        context: dg.AssetExecutionContext, config: AnalysisConfig, lake: LakeResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        trace_ids = trace_ids_for_run(context, config.full_rebuild)
        with warehouse.writer() as con:
            _run_table(name, con, lake.path(), trace_ids)
            (row_count,) = con.table(name).count("*").fetchone()
            preview = _markdown_preview(con, name)
        return dg.MaterializeResult(metadata={
            "dagster/row_count": int(row_count),
            "scope": "all traces" if trace_ids is None else f"trace {trace_ids[0][:16]}",
            "preview": dg.MetadataValue.md(preview),
        })

    return _table


def _atomic_copy(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def export_warehouse(warehouse: WarehouseResource, tables: list[str]) -> dict[str, int]:
    """Parquet per table and a snapshot of the DuckDB file, each published with an atomic rename."""
    out_dir = warehouse.exports_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    with warehouse.writer() as con:
        present = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        present |= {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        for table in tables:
            if table not in present:
                continue
            dest = out_dir / f"{table}.parquet"
            tmp = out_dir / f".{table}.{uuid.uuid4().hex}.tmp.parquet"
            rel = con.table(table)
            rel.write_parquet(str(tmp), compression="zstd")
            os.replace(tmp, dest)
            (counts[table],) = rel.count("*").fetchone()
        con.execute("CHECKPOINT")
        _atomic_copy(warehouse.file(), out_dir / "snapshot.duckdb")
    return counts


def build_analysis_assets() -> list[dg.AssetsDefinition]:
    files = _sql_files()
    known = {p.stem for p in files}
    tables = [_make_table_asset(p, known) for p in files]
    names = [p.stem for p in files]

    @dg.asset(
        key=EXPORTS, deps=[dg.AssetKey(n) for n in names] or [TRACE_INGEST], group_name="analysis",
        kinds={"parquet", "duckdb"}, pool=POOL,
        description="Parquet copies of every table (`exports/<table>.parquet`) and a read-only snapshot of "
        "the DuckDB file (`exports/snapshot.duckdb`), replaced atomically: query these while runs write.",
    )
    def warehouse_exports(warehouse: WarehouseResource) -> dg.MaterializeResult:
        counts = export_warehouse(warehouse, names)
        return dg.MaterializeResult(metadata={
            "exports_dir": str(warehouse.exports_dir()), "tables_exported": len(counts),
            **{f"rows/{t}": n for t, n in counts.items()},
        })

    return [*tables, warehouse_exports]


ANALYSIS_ASSETS = build_analysis_assets()
ANALYSIS_KEYS = [a.key for a in ANALYSIS_ASSETS]


@dg.definitions
def analysis_defs() -> dg.Definitions:
    return dg.Definitions(assets=ANALYSIS_ASSETS)
