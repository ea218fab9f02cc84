"""The engine: runs the plan (``taxbreak.engine.plan``: the ``sql/`` files, their order and the inputs prepared in
Python)
with the run settings (``taxbreak.engine.rules``) and publishes the tables into the DuckDB warehouse.  It owns the
connection policy (memory limit, spill folder), the run inputs (from the lake only), the run-local tables and the
writer rules (one publication per run).

A run (``materialize``) analyses a set of traces: ``prepare`` loads their events, catalogue rows and
metadata into temporary tables, then every statement is computed for those traces into a temporary table of
the same name (so later statements read only this run's rows) and published into the warehouse by deleting the
traces' old rows and inserting the new ones.  Re-running one trace therefore rebuilds only that trace.  A run for
some traces is best computed without the writer lock: ``compute_run`` runs ``materialize`` into a DuckDB file of
the run's own, and ``publish_run`` copies its rows into the warehouse under the lock (the CLI and Dagster do so).

Two scopes read beyond the run's traces.  ``all_traces`` (a per-trace table such as the null-kernel floor
measurements) is computed and published per trace like any other, but the statements that read it see every
trace's rows in the warehouse.  ``cross_trace`` (an aggregate over traces such as a batch-size sweep, whose rows
belong to no single trace) is computed from the warehouse's published tables of every trace, after this run's rows
were published, and replaces the whole table: a run for one trace thus recomputes the sweeps it belongs to (and
every other, which costs little: its inputs are trace-level rows).  Such a statement may read only kept tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from taxbreak.engine.plan import (
    SQL_DIR,
    SqlFile,
    _ordered,
    comment_on,
    plan_tables,
    release_after,
    sql_files,
)
from taxbreak.engine.plan import quote_ident as _q
from taxbreak.engine.plan import sql_literal as _lit
from taxbreak.engine.rules import RunConfig, settings_arrow, settings_tables
from taxbreak.ingest.lake import Lake
from taxbreak.ingest.sidecar import find_meta, side_file_errors
from taxbreak.store.faults import fault_point
from taxbreak.store.marts import register_filesystem
from taxbreak.store.warehouse import MEMORY_ENV, connect, memory_limit, snapshot_path

# the plan and the rules live in taxbreak.engine.plan and taxbreak.engine.rules, the connection policy in
# taxbreak.store.warehouse; the engine's callers find them here too
__all__ = ["MEMORY_ENV", "SQL_DIR", "AnalysisOutOfMemory", "RunConfig", "SqlFile", "connect", "memory_limit",
           "out_of_memory_names", "plan_tables", "release_after", "settings_tables", "sql_files"]


class AnalysisOutOfMemory(RuntimeError):
    """DuckDB ran out of memory computing ``table`` at ``limit``: the run published nothing.  The message says which
    setting to change: the analysis spills to disk beyond the limit, and a lower one can finish where a higher one
    ran out (DuckDB held the steps of one statement in its memory: int_kernel_links at 10 M kernels, one statement
    then, finished under 512MB, 2GB and 4GB and ran out under 6GB; its steps are run-local tables now)."""

    def __init__(self, table: str, limit: str, detail: str) -> None:
        self.table, self.limit, self.detail = table, limit, detail
        super().__init__(
            f"{table}: DuckDB ran out of memory at memory_limit {limit} ({detail}); nothing of this run was "
            f"published. Set analysis.duckdb_memory (${MEMORY_ENV}) to another size and run it again: lower where "
            "it was raised (the analysis spills to disk beyond it), higher where the machine has memory to spare")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:  # raised in a worker process, re-raised here
        return type(self), (self.table, self.limit, self.detail)


@contextlib.contextmanager
def out_of_memory_names(con: duckdb.DuckDBPyConnection, table: str) -> Iterator[None]:
    """DuckDB's out-of-memory error inside the block becomes ``AnalysisOutOfMemory`` naming ``table``; one raised
    by an inner block (a table this one reads, built first) keeps that table's name.  Every statement that computes
    a table runs in one: the plan's (``_build``, ``_stage``, ``publish_run``) and the request fit's
    (``taxbreak.features.requests.refit``).  The limit is read first: after the error the connection's transaction
    is aborted and answers nothing."""
    limit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    try:
        yield
    except duckdb.OutOfMemoryException as exc:  # rolled back by the publication: one line, not a traceback
        raise AnalysisOutOfMemory(table, limit, str(exc).splitlines()[0].strip()) from exc


def _catalog(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("SELECT current_database()").fetchall()[0][0]


SCRATCH_DB = "_run"  # the attached database that holds the run-local tables (``scratch``)


def _attached(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = $n",
                            {"n": name}).fetchall()[0][0])


def scratch(con: duckdb.DuckDBPyConnection) -> str:
    """Attach the connection's scratch database once and return its name: a DuckDB file beside the spill folder
    that holds the run-local tables (``-- materialize: temp``).

    Why a file and not DuckDB's temporary catalogue: tables there stay uncompressed in memory (the 512 MiB Kineto
    trace's stg_events took 379 MB of the 512 MB memory_limit, so every later statement spilled), while rows
    written to a file database are compressed as they arrive (the same stg_events: 24 MB) and read back through
    the buffer manager, which can drop their pages at any time.  The file is unlinked as soon as it is attached
    (DuckDB keeps it open) and has no write-ahead log: nothing of it outlives the connection, even a crash."""
    if _attached(con, SCRATCH_DB):
        return SCRATCH_DB
    spill = con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0] or os.path.join(
        tempfile.gettempdir(), "taxbreak-duckdb")
    path = Path(f"{spill}-run-{os.getpid()}-{uuid.uuid4().hex[:12]}.duckdb")
    path.parent.mkdir(parents=True, exist_ok=True)
    con.execute(f"ATTACH {_lit(str(path))} AS {_q(SCRATCH_DB)} (RECOVERY_MODE no_wal_writes)")
    with contextlib.suppress(OSError):
        path.unlink()
    return SCRATCH_DB


def _scratch_tables(con: duckdb.DuckDBPyConnection, name: str | None = None) -> list[str]:
    """The scratch database's tables (of run-local table ``name``: ``<name>__<generation>``)."""
    if not _attached(con, SCRATCH_DB):
        return []
    return [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main' "
        "AND ($n IS NULL OR regexp_full_match(table_name, $n || '__[0-9a-f]+'))",
        {"db": SCRATCH_DB, "n": name}).fetchall()]


def _drop_run_local(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Drop the run's table or view ``name`` (temporary catalogue) and its rows in the scratch database."""
    kinds = dict(con.execute(
        "SELECT 'TABLE', count(*) FROM duckdb_tables() WHERE database_name = 'temp' AND table_name = $t "
        "UNION ALL SELECT 'VIEW', count(*) FROM duckdb_views() WHERE database_name = 'temp' AND view_name = $t",
        {"t": name}).fetchall())
    for kind in ("VIEW", "TABLE"):
        if kinds.get(kind):
            con.execute(f"DROP {kind} temp.main.{_q(name)}")
    old = _scratch_tables(con, name)
    if old:
        # scratch writes go through their own connection: one transaction writes one database, and the run's
        # publication writes the warehouse (a transaction that already read the table keeps seeing it until it ends)
        cur = con.cursor()
        try:
            for table in old:
                with contextlib.suppress(duckdb.Error):
                    cur.execute(f"DROP TABLE IF EXISTS {_q(SCRATCH_DB)}.main.{_q(table)}")
        finally:
            cur.close()


def _load_inputs(con: duckdb.DuckDBPyConnection, inputs: dict[str, pa.Table | str]) -> None:
    """The run's prepared inputs (``prepare``) as temporary tables of ``con``; an input given as SQL text (a
    relation over lake files too large to load: the request lists) becomes a temporary view."""
    for table, arrow in inputs.items():
        if isinstance(arrow, str):
            con.execute(f"CREATE OR REPLACE TEMP VIEW {_q(table)} AS {arrow}")
            continue
        con.register("_input_arrow", arrow)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_q(table)} AS SELECT * FROM _input_arrow")
        con.unregister("_input_arrow")


def _stage(con: duckdb.DuckDBPyConnection, inputs: dict[str, pa.Table | str], bound: dict[str, Any],
           tables: list[str] | None, staging: Callable[[str, bool], None] | None = None) -> None:
    """Compute the run-local tables (those of ``tables``, None: all) into the scratch database, before the run's
    publication first reads it, and make each visible to ``con`` as a temporary view of its name.

    They are written through a second connection of the same database (one transaction writes one database, and
    the publication's transaction writes the warehouse), which gets the run's inputs as its own temporary tables.
    A transaction sees the scratch tables that existed when it first read the scratch database, so a run-local
    table staged later than that (a second ``prepare`` inside one publication) is left out here and computed
    in memory by ``_build`` instead, as before.  ``staging(name, done)``: called before (False) and after (True)
    each table staged (bench/bench_analysis.py times them)."""
    files = {f.name: f for f in sql_files()}
    wanted = set(plan_tables(tables)) if tables is not None else set(files)
    names = [f.name for f in _ordered(files) if f.materialize == "temp" and f.name in wanted]
    if not names:
        return
    db = scratch(con)
    generation = uuid.uuid4().hex[:12]
    staged: dict[str, str] = {}
    cur = con.cursor()
    try:
        _load_inputs(cur, inputs)
        for name in names:
            sf = files[name]
            if any(d in files and (files[d].materialize != "temp" or d not in staged) for d in sf.reads):
                continue  # reads a kept table (or one not staged): computed by _build in the run
            table = f"{name}__{generation}"
            if staging is not None:
                staging(name, False)
            with out_of_memory_names(cur, name):
                cur.execute(f"CREATE TABLE {_q(db)}.main.{_q(table)} AS {sf.text}", {p: bound[p] for p in sf.params})
            cur.execute(f"CREATE OR REPLACE TEMP VIEW {_q(name)} AS SELECT * FROM {_q(db)}.main.{_q(table)}")
            staged[name] = table
            if staging is not None:
                staging(name, True)
    finally:
        cur.close()
    visible = set(_scratch_tables(con))
    for name, table in staged.items():
        if table in visible:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {_q(name)} AS SELECT * FROM {_q(db)}.main.{_q(table)}")


def prepare(
    con: duckdb.DuckDBPyConnection, lake_root: str | os.PathLike[str], trace_ids: list[str] | None = None,
    config: RunConfig | None = None, tables: list[str] | None = None,
    staging: Callable[[str, bool], None] | None = None,
) -> dict[str, Any]:
    """Load the run's inputs into temporary tables and compute its run-local tables; returns the bound parameters
    of the statements.  ``staging(name, done)`` is told of each run-local table computed here (``_stage``).

    Creates the temporary tables of ``taxbreak.engine.plan.INPUTS`` and binds ``taxbreak.engine.plan.PARAMETERS``; in
    a run over
    every trace (``trace_ids`` None)
    also a view ``events`` and a table ``catalogue`` over the whole lake (for ad-hoc queries; no statement reads
    them).  The run-local tables that ``tables`` (None: every table) need are computed into the scratch database
    (``scratch``, ``_stage``).  DuckDB running out of memory is ``AnalysisOutOfMemory`` naming the run-local table
    being computed, else ``prepare``."""
    with out_of_memory_names(con, "prepare"):
        return _prepare(con, lake_root, trace_ids, config, tables, staging)


def _prepare(
    con: duckdb.DuckDBPyConnection, lake_root: str | os.PathLike[str], trace_ids: list[str] | None,
    config: RunConfig | None, tables: list[str] | None, staging: Callable[[str, bool], None] | None,
) -> dict[str, Any]:
    cfg = config or RunConfig.from_settings()
    lake = Lake(lake_root)
    lake.register_filesystem(con)  # an s3:// lake: DuckDB reads it through fsspec
    # A run for some traces reads their catalogue files only: its cost does not grow with the traces in the lake.
    cat = lake.catalogue(trace_ids)
    rows = [r for r in cat.to_pylist() if r["status"] == "ingested" and lake.has_events(r["trace_id"])]
    ids = [r["trace_id"] for r in rows]
    for t in ids:  # a partition written by an unknown schema major is refused, not misread
        lake.check_events_version(t)
    files = [str(lake.events_path(t)) for t in ids]
    if trace_ids is None:
        # the whole lake for ad-hoc queries on the run's connection (no statement reads them; binding the events
        # view reads every partition's footer, so a run for some traces leaves both out)
        if (lake.root / "events").exists():
            con.execute(
                "CREATE OR REPLACE TEMP VIEW events AS SELECT * FROM read_parquet("
                + _lit(lake.events_glob()) + ", hive_partitioning = false, union_by_name = true)"
            )
        _load_inputs(con, {"catalogue": cat})
    meta_rows = []
    for r in rows:
        meta, source, note = find_meta(r.get("metadata_json"), r.get("source_path"))
        meta_rows.append({
            "trace_id": r["trace_id"], "meta_source": source, "meta_note": note or None,
            "meta_json": json.dumps(meta) if meta is not None else None,
            "side_file_errors": "; ".join(side_file_errors(r.get("metadata_json"))) or None,
        })
    selected = set(ids)
    request_files = [str(lake.requests_path(t)) for t in ids if lake.has_requests(t)]
    inputs: dict[str, pa.Table | str] = {
        "stg_request_lists": (
            "SELECT trace_id, step_name, request_index, request_id, tenant, request_phase, tokens, context_tokens, "
            "output_tokens FROM read_parquet([" + ", ".join(_lit(f) for f in request_files) + "], "
            "hive_partitioning = true, hive_types = {'trace_id': VARCHAR})" if request_files else
            "SELECT * FROM (VALUES (NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT, NULL::VARCHAR, NULL::VARCHAR, "
            "NULL::VARCHAR, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT)) t(trace_id, step_name, request_index, "
            "request_id, tenant, request_phase, tokens, context_tokens, output_tokens) WHERE false"),
        "stg_catalogue": cat.filter(pa.array([r in selected for r in cat.column("trace_id").to_pylist()],
                                             pa.bool_())),
        "selected_traces": pa.table({"trace_id": pa.array(ids, pa.string())}),
        "stg_meta_raw": pa.Table.from_pylist(meta_rows, schema=pa.schema([
            ("trace_id", pa.string()), ("meta_source", pa.string()), ("meta_note", pa.string()),
            ("meta_json", pa.string()), ("side_file_errors", pa.string()),
        ])),
        **settings_arrow(cfg),
    }
    _load_inputs(con, inputs)
    for f in sql_files():  # run-local tables of an earlier run on this connection are stale now
        _drop_run_local(con, f.name)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _run_state AS SELECT $ids::VARCHAR[] AS trace_ids, $files::VARCHAR[] AS "
        "event_files, $root::VARCHAR AS lake_root, $all::BOOLEAN AS all_traces",
        {"ids": ids, "files": files, "root": str(lake_root), "all": trace_ids is None},
    )
    bound = {"event_files": files, "trace_ids": ids}
    if ids:
        _stage(con, inputs, {**bound, "lake_root": str(lake_root), "all_traces": trace_ids is None}, tables,
               staging)
    return bound


def _columns(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = $db AND schema_name = 'main' "
        "AND table_name = $t ORDER BY column_index", {"db": catalog, "t": table},
    ).fetchall()


def _exists(con: duckdb.DuckDBPyConnection, database: str, name: str) -> bool:
    return bool(con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main' AND table_name = $t",
        {"db": database, "t": name},
    ).fetchall()[0][0]) or bool(con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE database_name = $db AND schema_name = 'main' AND view_name = $t",
        {"db": database, "t": name},
    ).fetchall()[0][0])


def _run_state(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    if not _exists(con, "temp", "_run_state"):
        return None
    row = con.execute("SELECT trace_ids, event_files, lake_root, all_traces FROM _run_state").fetchall()[0]
    return {"trace_ids": list(row[0]), "event_files": list(row[1]), "lake_root": row[2], "all_traces": row[3]}


def materialize_table(
    con: duckdb.DuckDBPyConnection, name: str, trace_ids: list[str] | None = None,
    lake_root: str | os.PathLike[str] | None = None, config: RunConfig | None = None,
    plan: list[str] | None = None,
) -> int:
    """Compute table ``name`` for ``trace_ids`` (None: every ingested trace) and publish it into the warehouse.

    Works on a fresh connection: it prepares the run's inputs (``prepare``; for the tables of ``plan`` when given,
    else for ``name``) when they are missing or were prepared for other traces, builds the run-local tables it
    reads, and reads the warehouse's other tables restricted to the run's traces.  Returns the number of rows
    computed for the run's traces."""
    state = _run_state(con)
    wanted = sorted(trace_ids) if trace_ids is not None else None
    if state is None or (lake_root is not None and str(lake_root) != state["lake_root"]) or (
        wanted is not None and wanted != sorted(state["trace_ids"])) or (wanted is None and not state["all_traces"]):
        if lake_root is None:
            raise ValueError("materialize_table needs lake_root on a connection that was not prepared")
        prepare(con, lake_root, trace_ids, config, tables=plan or [name])
        state = _run_state(con)
    return _build(con, name, state, {f.name: f for f in sql_files()})


def _build_cross_trace(
    con: duckdb.DuckDBPyConnection, sf: SqlFile, state: dict[str, Any], files: dict[str, SqlFile],
) -> int:
    """A ``-- scope: cross_trace`` table: the statement over the warehouse's tables of every trace, replacing it
    (``_build``'s naming of an out-of-memory error too: publish_run, forget and the Dagster step call this)."""
    with out_of_memory_names(con, sf.name):
        return _build_cross_trace_table(con, sf, state, files)


def _build_cross_trace_table(
    con: duckdb.DuckDBPyConnection, sf: SqlFile, state: dict[str, Any], files: dict[str, SqlFile],
) -> int:
    catalog = _catalog(con)
    for dep in sf.reads:
        if dep not in files:
            continue
        if files[dep].materialize == "temp":
            raise ValueError(f"{sf.path}: a cross_trace statement cannot read the run-local table {dep}")
        if not _exists(con, catalog, dep):
            _build(con, dep, state, files)
    target = f"{_q(catalog)}.main.{_q(sf.name)}"
    _drop_run_local(con, sf.name)
    # The statement's names must resolve to the warehouse tables (every trace's rows), not to this run's temporary
    # tables and views of the same names (the run's rows only): those step aside for it, renamed, and come back.
    # (A second connection would not see the rows this run has published but not yet committed.)
    shadows: list[tuple[str, str]] = []
    for dep in sf.reads:
        for kind, listing, col in (("TABLE", "duckdb_tables()", "table_name"), ("VIEW", "duckdb_views()", "view_name")):
            if con.execute(f"SELECT count(*) FROM {listing} WHERE database_name = 'temp' AND {col} = $t",
                           {"t": dep}).fetchall()[0][0]:
                con.execute(f"ALTER {kind} temp.main.{_q(dep)} RENAME TO {_q('_xt_' + dep)}")
                shadows.append((kind, dep))
    narrowed: list[str] = []
    try:
        groups = _touched_groups(con, catalog, sf, state, files)
        if groups is None:
            con.execute(f"CREATE OR REPLACE TABLE {target} AS {sf.text}", {p: state[p] for p in sf.params})
        else:  # only the groups (``-- partition_by``) the run's traces are in: their reads narrowed to those groups
            col = _q(sf.partition_by)
            values = ", ".join(map(_lit, groups)) or "NULL"  # a view's text cannot take parameters
            for dep in sf.reads:
                if dep in files and sf.partition_by in {c for c, _t in _columns(con, catalog, dep)}:
                    con.execute(f"CREATE TEMP VIEW {_q(dep)} AS SELECT * FROM {_q(catalog)}.main.{_q(dep)} "
                                f"WHERE {col} IN ({values})")
                    narrowed.append(dep)
            con.execute(f"DELETE FROM {target} WHERE {col} IN ({values})")
            con.execute(f"INSERT INTO {target} BY NAME {sf.text}", {p: state[p] for p in sf.params})
        comment_on(con, target, sf, [c for c, _t in _columns(con, catalog, sf.name)])
        return con.execute(f"SELECT count(*) FROM {target}").fetchall()[0][0]
    finally:
        for dep in narrowed:
            con.execute(f"DROP VIEW temp.main.{_q(dep)}")
        for kind, dep in shadows:
            con.execute(f"ALTER {kind} temp.main.{_q('_xt_' + dep)} RENAME TO {_q(dep)}")


def _touched_groups(con: duckdb.DuckDBPyConnection, catalog: str, sf: SqlFile, state: dict[str, Any],
                    files: dict[str, SqlFile]) -> list[str] | None:
    """The values of ``sf.partition_by`` a publication for ``state["changed"]`` (the traces it wrote or removed)
    touches: those the traces have in the tables ``sf`` reads and in ``sf``'s own rows, plus those an earlier
    table of the same partition column found (a forgotten trace is no longer in the reads, but was in that table).
    None: recompute the whole table (no partition column, no such traces, or the table is new or changed shape)."""
    changed = state.get("changed")
    if not sf.partition_by or not changed:
        return None
    col = sf.partition_by
    if not _exists(con, catalog, sf.name) or {c for c, _t in _columns(con, catalog, sf.name)} != set(sf.columns):
        return None
    found = set(state.setdefault("groups", {}).setdefault(col, set()))
    for table in [d for d in sf.reads if d in files] + [sf.name]:
        have = {c for c, _t in _columns(con, catalog, table)}
        if {col, "trace_id"} <= have:
            found |= {r[0] for r in con.execute(
                f"SELECT DISTINCT {_q(col)} FROM {_q(catalog)}.main.{_q(table)} "
                f"WHERE trace_id IN (SELECT unnest($t::VARCHAR[])) AND {_q(col)} IS NOT NULL",
                {"t": list(changed)}).fetchall()}
    state["groups"][col] = found
    return sorted(found)


def build_cross_trace(con: duckdb.DuckDBPyConnection, name: str, traces: list[str] | None = None,
                      memo: dict[str, Any] | None = None) -> int | None:
    """Recompute the ``-- scope: cross_trace`` table ``name`` from the warehouse's tables of every trace, on its own
    (the Dagster step after the per-trace tables); its rows, or None when a table it reads is not built yet.
    ``traces``: the traces the run published; a table with ``-- partition_by`` then recomputes only their groups.
    ``memo``: the same dict for every table of one publication (the groups found carry to the next table)."""
    files = {f.name: f for f in sql_files()}
    sf = files[name]
    if sf.scope != "cross_trace":
        raise ValueError(f"{sf.path}: not a cross_trace table")
    if not all(_exists(con, _catalog(con), d) for d in sf.reads if d in files):
        return None
    state = memo if memo is not None else {}
    state.update({"trace_ids": [], "event_files": [], "lake_root": "", "all_traces": False,
                  "changed": list(traces or [])})
    return _build_cross_trace(con, sf, state, files)


def _build(con: duckdb.DuckDBPyConnection, name: str, state: dict[str, Any], files: dict[str, SqlFile]) -> int:
    """Compute table ``name`` (and the tables it reads that are missing) for the run; its rows.  DuckDB running out
    of memory is ``AnalysisOutOfMemory`` naming the table whose statement it was."""
    with out_of_memory_names(con, name):
        return _build_table(con, name, state, files)


def _build_table(con: duckdb.DuckDBPyConnection, name: str, state: dict[str, Any], files: dict[str, SqlFile]) -> int:
    sf = files[name]
    if sf.scope == "cross_trace":  # named by _build already: not wrapped twice
        return _build_cross_trace_table(con, sf, state, files)
    catalog = _catalog(con)
    for dep in sf.reads:
        if dep not in files or _exists(con, "temp", dep):
            continue
        dsf = files[dep]
        if dsf.materialize == "temp":
            _build(con, dep, state, files)
        elif dsf.scope in ("all_traces", "cross_trace"):
            if not _exists(con, catalog, dep):
                _build(con, dep, state, files)
        elif _exists(con, catalog, dep):
            con.execute(
                f"CREATE TEMP VIEW {_q(dep)} AS SELECT * FROM {_q(catalog)}.main.{_q(dep)} "
                "WHERE trace_id IN (SELECT trace_id FROM selected_traces)"
            )
        else:
            _build(con, dep, state, files)
    if not state["trace_ids"] and sf.materialize == "temp":
        return 0  # nothing to read: no ingested trace selected
    bound = {p: state[p] for p in sf.params}
    target = f"{_q(catalog)}.main.{_q(name)}"
    if (state["all_traces"] or (state.get("private") and sf.scope != "all_traces")) and (
            sf.materialize != "temp" and catalog != "memory"):
        # A full run, or a run's private file (``compute_run``; not the other traces' rows seeded there): the table
        # is this run's rows, written once, straight into the database.
        _drop_run_local(con, name)
        con.execute(f"CREATE OR REPLACE TABLE {target} AS {sf.text}", bound)
        comment_on(con, target, sf, [c for c, _t in _columns(con, catalog, name)])
        return con.execute(f"SELECT count(*) FROM {target}").fetchall()[0][0]
    if sf.materialize == "temp" and _exists(con, "temp", name):
        # computed by prepare into the scratch database (``_stage``)
        return con.execute(f"SELECT count(*) FROM temp.main.{_q(name)}").fetchall()[0][0]
    _drop_run_local(con, name)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_q(name)} AS {sf.text}", bound)
    n = con.execute(f"SELECT count(*) FROM temp.main.{_q(name)}").fetchall()[0][0]
    if sf.materialize == "temp":
        return n
    _replace_rows(con, sf, "temp", "(SELECT trace_id FROM selected_traces)", {}, whole=state["all_traces"])
    if sf.scope == "all_traces":
        _drop_run_local(con, name)
    return n


def _replace_rows(con: duckdb.DuckDBPyConnection, sf: SqlFile, source: str, ids: str, params: dict[str, Any],
                  whole: bool = False) -> None:
    """Publish the rows of table ``sf.name`` in database ``source`` whose trace is in ``ids`` (a subquery) into the
    connection's database: the traces' old rows deleted, the new ones inserted; the whole table replaced by them in
    a full run (``whole``), for a table new to the database or whose columns changed with the code.  Then the
    header's comments."""
    catalog = _catalog(con)
    target = f"{_q(catalog)}.main.{_q(sf.name)}"
    rows = f"SELECT * FROM {_q(source)}.main.{_q(sf.name)} WHERE trace_id IN {ids}"
    columns = _columns(con, source, sf.name)
    if whole or _columns(con, catalog, sf.name) != columns:
        con.execute(f"CREATE OR REPLACE TABLE {target} AS {rows}", params)
    else:
        con.execute(f"DELETE FROM {target} WHERE trace_id IN {ids}", params)
        con.execute(f"INSERT INTO {target} {rows}", params)
    comment_on(con, target, sf, [c for c, _t in columns])


_IN_PUBLICATION: set[int] = set()  # ids of connections inside ``publication``


@contextlib.contextmanager
def publication(con: duckdb.DuckDBPyConnection, faults: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """Everything a run writes to the warehouse as one transaction: committed whole when the block ends, rolled back
    on an exception, and absent after a crash (DuckDB replays only committed transactions).  Re-entrant: an inner
    block joins the outer one (the Dagster step wraps its tables; ``materialize`` wraps its own).  ``faults``: the
    commit is a fault point of the crash tests (``taxbreak.store.faults.fault_point``; not for a run's private
    file)."""
    key = id(con)
    if key in _IN_PUBLICATION:
        yield con
        return
    con.execute("BEGIN TRANSACTION")
    _IN_PUBLICATION.add(key)
    try:
        yield con
    except BaseException:
        _IN_PUBLICATION.discard(key)
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    _IN_PUBLICATION.discard(key)
    try:
        if faults:
            fault_point("before_commit", lambda: con.execute(
                "SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0])
        con.execute("COMMIT")
    except BaseException:  # a COMMIT that could not write (a full disk): nothing of the run stays
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    if faults:
        fault_point("after_commit")


def drop_run_local(con: duckdb.DuckDBPyConnection, names: list[str]) -> None:
    """Drop the run-local tables ``names`` (``release_after``); a later statement that needs one rebuilds it."""
    for name in names:
        _drop_run_local(con, name)


def materialize(
    warehouse_path: str | os.PathLike[str] | None, lake_root: str | os.PathLike[str],
    trace_ids: list[str] | None = None, tables: list[str] | None = None, config: RunConfig | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
    progress: Callable[[str, int, int, int | None], None] | None = None, private: bool = False,
) -> dict[str, int]:
    """(Re)compute the tables for ``trace_ids`` (default: every ingested trace); returns rows per table.

    ``private``: ``con`` is a run's own file (``compute_run``), which holds only the run's rows: tables are written
    whole, once, as in a full run.

    ``tables`` limits the run to those tables and what they read.  The whole run is one publication (one
    transaction): a crash leaves every table as it was.  ``progress(name, index, total, rows)`` is called before
    each file is computed (rows None) and after it (its row count); 'prepare' (index 0) is the loading of the
    inputs.  Write a warehouse file through ``taxbreak.store.warehouse.writer`` (the lock and the readers' snapshot)."""
    names = plan_tables(tables)
    own = con is None
    con = con or connect(warehouse_path)
    try:
        with publication(con, faults=not private):
            if progress is not None:
                progress("prepare", 0, len(names), None)
            params = prepare(con, lake_root, trace_ids, config, tables=names)
            if not params["trace_ids"]:
                if _lake_gone(lake_root):
                    # the lake removed while the run read it (issue 30): an error, so that nothing is published
                    raise FileNotFoundError(errno.ENOENT, "the lake folder vanished", str(_lake(lake_root).root))
                return {}
            files = {f.name: f for f in sql_files()}
            state = {**_run_state(con), "private": private}
            out: dict[str, int] = {}
            release = release_after(names)
            for i, name in enumerate(names, 1):
                if progress is not None:
                    progress(name, i, len(names), None)
                out[name] = _build(con, name, state, files)
                drop_run_local(con, release.get(name, []))
                if not private:
                    fault_point(f"publish:{name}")
                if progress is not None:
                    progress(name, i, len(names), out[name])
            return out
    finally:
        if own:
            con.close()


def forget_traces(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, int]:
    """Delete ``trace_ids``' rows from every warehouse table with a trace_id column and recompute the cross-trace
    tables without them, in one publication; returns the rows deleted per table."""
    catalog = _catalog(con)
    files = {f.name: f for f in sql_files()}
    deleted: dict[str, int] = {}
    with publication(con):
        tables = [r[0] for r in con.execute(
            "SELECT DISTINCT table_name FROM duckdb_columns() WHERE database_name = $db AND schema_name = 'main' "
            "AND column_name = 'trace_id' ORDER BY 1", {"db": catalog}).fetchall()]
        for table in tables:
            if table in files and files[table].scope == "cross_trace":
                continue
            (n,) = con.execute(
                f"DELETE FROM {_q(catalog)}.main.{_q(table)} WHERE trace_id IN (SELECT unnest($ids::VARCHAR[]))",
                {"ids": trace_ids}).fetchone()
            deleted[table] = int(n)
        state = {"trace_ids": [], "event_files": [], "lake_root": "", "all_traces": False, "changed": list(trace_ids)}
        for sf in files.values():
            if sf.scope == "cross_trace" and _exists(con, catalog, sf.name):
                _build_cross_trace(con, sf, state, files)
    return deleted


# -- a run for some traces: computed without the writer, published under it -------------------------------------------

RUNS_SUFFIX = ".runs"  # <warehouse>.runs/: the private files of runs computing outside the writer lock


def runs_dir(warehouse_path: str | os.PathLike[str]) -> Path:
    return Path(str(warehouse_path) + RUNS_SUFFIX)


def _host_runs(warehouse_path: str | os.PathLike[str]) -> Path:
    """This host's folder of run files: ``<warehouse>.runs/<host>/`` (a folder shared by hosts keeps them apart)."""
    return runs_dir(warehouse_path) / re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())


STALE_RUN_S = 86_400.0  # a run file of another host untouched this long belongs to a run that died (a gone pod)


def _clear_dead_runs(folder: Path) -> None:
    """Delete the run files (and their spill folders) in this host's ``folder`` whose process no longer exists (a
    killed run; a live run's files, named by its pid, are left alone), and those of other hosts untouched for
    ``STALE_RUN_S`` (a host or pod that died with its run: its pids mean nothing here)."""
    pattern = re.compile(r"run_(\d+)_[0-9a-f]{12}\.duckdb(\.wal|\.tmp)?")

    def remove(path: Path) -> None:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    for path in folder.glob("run_*"):
        m = pattern.fullmatch(path.name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # still running
        except ProcessLookupError:
            remove(path)
        except PermissionError:
            continue  # another user's live process
    now = time.time()
    for other in folder.parent.iterdir() if folder.parent.is_dir() else []:
        if other == folder or not other.is_dir():
            continue
        for path in other.glob("run_*"):
            with contextlib.suppress(OSError):
                if pattern.fullmatch(path.name) and now - path.stat().st_mtime > STALE_RUN_S:
                    remove(path)


@dataclasses.dataclass
class ComputedRun:
    """A run's per-trace tables, computed into its private DuckDB file (``compute_run``), ready to publish."""

    path: Path
    con: duckdb.DuckDBPyConnection | None  # open on the run file until ``publish_run`` (checks read it)
    trace_ids: list[str]  # the run's ingested traces (those whose rows it computed)
    counts: dict[str, int]  # rows computed per table of the run's plan
    kept: list[str]  # the per-trace tables it publishes, in dependency order
    cross_trace: list[str]  # the cross-trace tables its plan names (recomputed at publication when asked)
    lake_root: str | None = None  # the lake it read: at publication, traces no longer ingested there are left out

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


@contextlib.contextmanager
def compute_run(
    warehouse_path: str | os.PathLike[str], lake_root: str | os.PathLike[str], trace_ids: list[str],
    tables: list[str] | None = None, config: RunConfig | None = None,
    progress: Callable[[str, int, int, int | None], None] | None = None,
) -> Iterator[ComputedRun]:
    """Compute the per-trace tables of a run for ``trace_ids`` without holding the warehouse's writer lock: into a
    private DuckDB file of the run (``<warehouse>.runs/<host>/run_<pid>_<id>.duckdb``, with its own spill folder),
    deleted when the block ends.  Runs for different traces thus compute at the same time; only ``publish_run``
    (copying the rows into the warehouse) waits for the one writer.

    The run reads the lake for its traces only.  The statements that read every trace's rows of an ``all_traces``
    table (``trace_launch_floor`` reads every null-kernel trace's ``launch_floor_measurements``) see the rows the
    readers' snapshot held when the run started (``taxbreak.store.warehouse.snapshot_path``), plus the run's own: what a
    run started after the last publication sees.  Two runs computing at once therefore give the rows of one serial
    order (the later publisher did not see the earlier one's rows, as if it had run first): a trace that writes a
    floor measurement uses its own, so no run both reads and writes what another changes.  The cross-trace tables
    are not computed here: they read every trace's published rows (``publish_run``)."""
    if not trace_ids:
        raise ValueError("compute_run needs the traces to analyse (a run over every trace is written whole)")

    files = {f.name: f for f in sql_files()}
    plan = plan_tables(tables)
    per_trace = [n for n in plan if files[n].scope != "cross_trace"]
    folder = _host_runs(warehouse_path)
    folder.mkdir(parents=True, exist_ok=True)
    _clear_dead_runs(folder)
    path = folder / f"run_{os.getpid()}_{uuid.uuid4().hex[:12]}.duckdb"  # its stem is the run's catalog name
    run = ComputedRun(path, None, [], {}, [], [n for n in plan if files[n].scope == "cross_trace"], str(lake_root))

    def compute(ids: list[str]) -> duckdb.DuckDBPyConnection:
        con = run.con = connect(path)
        snap = snapshot_path(warehouse_path)
        seeds = [n for n in per_trace if files[n].scope == "all_traces"]
        if seeds and snap.exists():
            register_filesystem(con, warehouse_path)  # the snapshot's views may name s3:// marts
            con.execute(f"ATTACH {_lit(str(snap))} AS _published (READ_ONLY)")
            try:
                for name in seeds:  # every other trace's published rows; the run's own are computed below
                    if _exists(con, "_published", name):
                        con.execute(
                            f"CREATE TABLE main.{_q(name)} AS SELECT * FROM _published.main.{_q(name)} "
                            "WHERE trace_id NOT IN (SELECT unnest($ids::VARCHAR[]))", {"ids": ids})
            finally:
                con.execute("DETACH _published")
        run.counts = materialize(path, lake_root, trace_ids=ids, tables=per_trace, config=config, con=con,
                                 progress=progress, private=True)
        return con

    def discard() -> None:
        run.close()
        for p in (path, Path(str(path) + ".wal")):
            p.unlink(missing_ok=True)
        shutil.rmtree(Path(str(path) + ".tmp"), ignore_errors=True)

    try:
        ids = list(trace_ids)
        while True:
            try:
                con = compute(ids)
                break
            except duckdb.IOException as exc:
                # a `taxbreak forget` removed a trace's lake partition while the run read it: compute the traces
                # still ingested again (forget holds no lock a computing run waits for; publish_run would leave
                # the forgotten trace out anyway); anything else is a real read error
                if _lake_gone(lake_root):  # the whole lake gone (issue 30)
                    gone = str(_lake(lake_root).root)
                    raise FileNotFoundError(errno.ENOENT, "the lake folder vanished", gone) from exc
                left = still_ingested(lake_root, ids)
                if left == ids:
                    raise
                discard()
                ids = left
                if not ids:
                    run.counts = {}
                    con = None
                    break
        state = _run_state(con) if con is not None else None
        run.trace_ids = list(state["trace_ids"]) if state else []
        run.kept = ([n for n in per_trace if files[n].materialize != "temp" and _exists(con, _catalog(con), n)]
                    if con is not None else [])
        fault_point("run_computed")
        yield run
    finally:
        discard()


def _lake(lake_root: str | os.PathLike[str] | Lake) -> Lake:
    return lake_root if isinstance(lake_root, Lake) else Lake(lake_root)


def _lake_gone(lake_root: str | os.PathLike[str] | Lake) -> bool:
    """A local lake whose folder is not there (removed while a run read it)."""
    lake = _lake(lake_root)
    return not lake.is_object_store and not Path(lake.root).is_dir()


def still_ingested(lake_root: str | os.PathLike[str], trace_ids: list[str]) -> list[str]:
    """Those of ``trace_ids`` the lake's catalogue holds as ingested now.  Read under the writer lock, it is the
    state ``taxbreak forget`` (which removes catalogue rows under that lock) left: a run that computed a trace
    beside a ``forget`` of it then publishes nothing of it."""

    lake = Lake(lake_root)
    out = []
    for tid in trace_ids:
        row = lake.catalogue_row(tid)
        if row is not None and row["status"] == "ingested" and lake.has_events(tid):
            out.append(tid)
    return out


def publish_run(
    con: duckdb.DuckDBPyConnection, run: ComputedRun, cross_trace: bool = True,
    progress: Callable[[str, int, int, int | None], None] | None = None,
) -> dict[str, int]:
    """Publish a computed run into the warehouse open on ``con`` (hold ``taxbreak.store.warehouse.writer`` with
    ``traces=run.trace_ids``), in one publication: each per-trace table's rows of the run's traces are replaced by
    the run's (a table new to the warehouse, or whose columns changed with the code, becomes the run's rows), then
    the cross-trace tables of the run's plan are recomputed from every trace's rows (``cross_trace``; the Dagster
    step leaves them to their own step).  Returns the rows per table (the cross-trace tables' whole counts)."""
    run.close()  # the run file is read by the writer's connection now
    counts = dict(run.counts)
    if not run.trace_ids:
        return counts
    if run.lake_root is not None:  # forgotten (or failed again) since the run read them: not published (issue 30)
        run.trace_ids = still_ingested(run.lake_root, run.trace_ids)
        if not run.trace_ids:
            return {}
    files = {f.name: f for f in sql_files()}
    con.execute(f"ATTACH {_lit(str(run.path))} AS _computed (READ_ONLY)")
    try:
        with publication(con):
            for name in run.kept:  # the run's file also holds other traces' rows of an all_traces table: not those
                with out_of_memory_names(con, name):
                    _replace_rows(con, files[name], "_computed", "(SELECT unnest($ids::VARCHAR[]))",
                                  {"ids": run.trace_ids})
                fault_point(f"publish:{name}")
            if cross_trace:  # the partitioned ones (``-- partition_by``) only for the groups of the run's traces
                state = {"trace_ids": [], "event_files": [], "lake_root": "", "all_traces": False,
                         "changed": list(run.trace_ids)}
                for i, name in enumerate(run.cross_trace, 1):
                    if progress is not None:
                        progress(name, i, len(run.cross_trace), None)
                    counts[name] = _build_cross_trace(con, files[name], state, files)
                    if progress is not None:
                        progress(name, i, len(run.cross_trace), counts[name])
    finally:
        con.execute("DETACH _computed")
    return counts
