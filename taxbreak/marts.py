"""Per-trace Parquet marts of the warehouse tables, and the readers' snapshot: views over them.

The DuckDB file stays the writers' database (``taxbreak.warehouse.writer``: one lock, one transaction per
publication).  What readers open is built from it after each write, and only for what the write changed:

- ``<warehouse dir>/marts/<table>/trace_id=<id>/part-0.parquet``: the rows of one trace of every per-trace table
  (a table with a ``trace_id`` column whose SQL file is not ``-- scope: cross_trace``).  A write for some traces
  rewrites those traces' partitions only, so the cost of a run does not grow with the traces already analysed.
  Every file is written under a temporary name first and renamed into place once all of the run's files are
  written (a reader sees a partition's old file or its new one; the renames of one run follow each other within
  milliseconds).  A trace without rows in a table has no partition there.  ``marts/<table>/_columns.json``
  records the columns the partitions were written with: a table whose columns changed (new code) is rewritten
  for every trace; ``marts/<table>/_empty.parquet`` holds no rows, only the columns (readers of a table no trace
  has rows in).  The other tables (cross-trace: sweeps, fits; small) are written whole: ``marts/<table>.parquet``.
- ``<warehouse dir>/exports/snapshot.duckdb``: a small DuckDB file holding, per per-trace table, a view over its
  partitions (every column cast to the warehouse's type, the table's and columns' comments), and a copy of every
  other table (the cross-trace ones: sweeps, fits; small).  Written beside its place and renamed into it, so a
  reader sees the old snapshot or the new one; its size and the time to write it do not grow with the traces.

A writer that dies between its commit and the end of this leaves a ``marts/.pending-*.json`` marker (written when
it took the lock) naming its traces: the next writer exports them too.  Which traces a write touched is told by
its caller (``writer(db, traces=...)``); ``None`` means every trace (``taxbreak analyze`` over everything,
``forget``, a refresh): then each table is rewritten whole, partitions of traces no longer in it removed.
The views name the marts by absolute path: a moved warehouse folder gets a working snapshot at its next write.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import duckdb

MARTS_DIR = "marts"
PART = "part-0.parquet"
COLUMNS_FILE = "_columns.json"
EMPTY = "_empty.parquet"  # no rows, the columns
_ID = re.compile(r"[A-Za-z0-9_.:-]+")  # a trace id as a partition folder name (sha256 hex in practice)


def marts_dir(warehouse: str | os.PathLike[str]) -> Path:
    return Path(warehouse).parent / MARTS_DIR


def _q(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def _lit(text: str) -> str:
    """A SQL string literal for DDL (DuckDB binds no parameters in CREATE VIEW / COMMENT ON / ATTACH); the texts
    are this module's own paths, the warehouse's type names and the sql/ headers' comments."""
    return "'" + text.replace("'", "''") + "'"


def _partition(table_dir: Path, trace_id: str) -> Path:
    if not _ID.fullmatch(trace_id):
        raise ValueError(f"trace id {trace_id!r} cannot name a partition folder")
    return table_dir / f"trace_id={trace_id}"


def _cross_trace_names() -> set[str]:
    from taxbreak.analysis import sql_files

    return {f.name for f in sql_files() if f.scope == "cross_trace"}


def warehouse_tables(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str, str | None]]]:
    """Every kept table of the connection's database: name -> [(column, type, comment)] in column order."""
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    out: dict[str, list[tuple[str, str, str | None]]] = {}
    for table, col, typ, comment in con.execute(
        "SELECT c.table_name, c.column_name, c.data_type, c.comment FROM duckdb_columns() c "
        "JOIN duckdb_tables() t ON t.database_name = c.database_name AND t.schema_name = c.schema_name "
        "AND t.table_name = c.table_name WHERE c.database_name = $db AND c.schema_name = 'main' "
        "AND NOT t.temporary ORDER BY c.table_name, c.column_index", {"db": db},
    ).fetchall():
        out.setdefault(table, []).append((col, typ, comment))
    return out


def per_trace_tables(tables: dict[str, list[tuple[str, str, str | None]]]) -> list[str]:
    cross = _cross_trace_names()
    return sorted(t for t, cols in tables.items() if t not in cross and any(c == "trace_id" for c, _, _ in cols))


def partitions(table_dir: Path) -> dict[str, Path]:
    """trace id -> partition folder, for the published partitions of one table."""
    if not table_dir.is_dir():
        return {}
    return {p.name.split("=", 1)[1]: p for p in table_dir.iterdir()
            if p.is_dir() and p.name.startswith("trace_id=") and any(p.glob("*.parquet"))}


# -- pending markers -------------------------------------------------------------------------------------------------
def mark_pending(warehouse: str | os.PathLike[str], traces: list[str] | None) -> Path:
    """Record, before a write, which traces it will touch (None: all), so a writer that dies is caught up."""
    d = marts_dir(warehouse)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f".pending-{uuid.uuid4().hex}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"traces": traces}), encoding="utf-8")
    os.replace(tmp, path)
    return path


def pending(warehouse: str | os.PathLike[str]) -> tuple[list[Path], list[str] | None]:
    """The markers left by earlier writers and the union of their traces (None when one covered every trace)."""
    d = marts_dir(warehouse)
    markers = sorted(d.glob(".pending-*.json")) if d.is_dir() else []
    traces: set[str] | None = set()
    for m in markers:
        try:
            got = json.loads(m.read_text(encoding="utf-8"))["traces"]
        except (OSError, ValueError, KeyError):
            got = None  # unreadable: export everything
        if got is None:
            traces = None
        elif traces is not None:
            traces |= set(got)
    return markers, (sorted(traces) if traces is not None else None)


# -- export ----------------------------------------------------------------------------------------------------------
def export(
    con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str], traces: list[str] | None,
) -> dict[str, int]:
    """Write the partitions of ``traces`` (None: every trace) of every per-trace table; returns files written per
    table.  Call it holding the writer lock, after the write committed."""
    root = marts_dir(warehouse)
    root.mkdir(parents=True, exist_ok=True)
    tables = warehouse_tables(con)
    db = con.execute("SELECT current_database()").fetchall()[0][0]

    def rel(table: str) -> duckdb.DuckDBPyRelation:
        # the warehouse's table, never a temporary table of the same name (a run's own rows) on this connection
        return con.sql(f"SELECT * FROM {_q(db)}.main.{_q(table)}")

    staged: list[tuple[Path, Path]] = []  # (temporary file, its place)
    removals: list[Path] = []
    written: dict[str, int] = {}
    for stale in root.glob(".staging-*"):  # left by a killed writer (this one holds the lock)
        shutil.rmtree(stale, ignore_errors=True)
    stage_root = root / f".staging-{uuid.uuid4().hex}"
    try:
        for table in per_trace_tables(tables):
            tdir = root / table
            columns = [[c, t] for c, t, _ in tables[table]]
            cols_file = tdir / COLUMNS_FILE
            try:
                same_columns = json.loads(cols_file.read_text(encoding="utf-8")) == columns
            except (OSError, ValueError):
                same_columns = False
            if traces is None or not same_columns:
                have = partitions(tdir)
                staged_here = _stage_whole(con, f"{_q(db)}.main.{_q(table)}", stage_root / table, tdir)
                keep = {place.parent.name.split("=", 1)[1] for _, place in staged_here}
                removals += [p for t, p in have.items() if t not in keep]
            else:
                staged_here = []
                for tid in traces:
                    place = _partition(tdir, tid) / PART
                    tmp = stage_root / table / f"{place.parent.name}.parquet"
                    tmp.parent.mkdir(parents=True, exist_ok=True)
                    rows = rel(table).filter(duckdb.ColumnExpression("trace_id") == duckdb.ConstantExpression(tid))
                    rows.write_parquet(str(tmp), compression="zstd")
                    if _rows(tmp):
                        staged_here.append((tmp, place))
                    elif place.parent.exists():  # no rows any more: no partition (only this trace's folder looked at)
                        removals.append(place.parent)
            staged += staged_here
            written[table] = len(staged_here)
            cols_tmp = stage_root / table / COLUMNS_FILE
            cols_tmp.parent.mkdir(parents=True, exist_ok=True)
            cols_tmp.write_text(json.dumps(columns), encoding="utf-8")
            staged.append((cols_tmp, cols_file))
            empty = stage_root / table / EMPTY  # the table's columns for readers when no trace has rows
            rel(table).limit(0).write_parquet(str(empty))
            staged.append((empty, tdir / EMPTY))
        per_trace = set(per_trace_tables(tables))
        for table in sorted(set(tables) - per_trace):  # the cross-trace tables, whole (small)
            tmp = stage_root / f"{table}.parquet"
            tmp.parent.mkdir(parents=True, exist_ok=True)
            rel(table).write_parquet(str(tmp), compression="zstd")
            staged.append((tmp, root / f"{table}.parquet"))
        # every file of the run is written: now put them in place, one rename each
        for tmp, place in staged:
            place.parent.mkdir(parents=True, exist_ok=True)
            if place.parent.name.startswith("trace_id="):
                for extra in place.parent.glob("*.parquet"):  # a partition is one file
                    if extra.name != place.name:
                        extra.unlink(missing_ok=True)
            os.replace(tmp, place)
        for p in removals:
            shutil.rmtree(p, ignore_errors=True)
    finally:
        shutil.rmtree(stage_root, ignore_errors=True)
    return written


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(str(path)).num_rows


def _stage_whole(con: duckdb.DuckDBPyConnection, target: str, stage: Path, tdir: Path) -> list[tuple[Path, Path]]:
    """Every trace's partition of the table ``target`` (quoted, qualified) written under ``stage`` in one pass
    (DuckDB's partitioned COPY)."""
    if stage.exists():
        shutil.rmtree(stage)
    stage.parent.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY (SELECT * FROM {target}) TO {_lit(str(stage))} (FORMAT parquet, COMPRESSION zstd, "
                "PARTITION_BY (trace_id), WRITE_PARTITION_COLUMNS true)")
    out = []
    for part in sorted(stage.iterdir()) if stage.exists() else []:
        files = sorted(part.glob("*.parquet"))
        if not part.name.startswith("trace_id=") or not files:
            continue
        tid = part.name.split("=", 1)[1]
        if len(files) > 1:  # one file per partition: merge what DuckDB wrote in several
            merged = part / "merged.parquet"
            con.execute(f"COPY (SELECT * FROM read_parquet({_lit(str(part / '*.parquet'))})) TO {_lit(str(merged))} "
                        "(FORMAT parquet, COMPRESSION zstd)")
            files = [merged]
        out.append((files[0], _partition(tdir, tid) / PART))
    return out


# -- snapshot --------------------------------------------------------------------------------------------------------
def build_snapshot(con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str], tmp: Path) -> None:
    """Write the readers' snapshot to ``tmp`` (renamed into place by the caller): views over the marts for the
    per-trace tables, copies of the others, with the warehouse's comments."""
    tables = warehouse_tables(con)
    per_trace = set(per_trace_tables(tables))
    root = marts_dir(warehouse).resolve()
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    comments = dict(con.execute(
        "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main'",
        {"db": db}).fetchall())
    alias = f"_snapshot_{uuid.uuid4().hex[:8]}"
    con.execute(f"ATTACH {_lit(str(tmp))} AS {_q(alias)}")
    try:
        for table, cols in tables.items():
            target = f"{_q(alias)}.main.{_q(table)}"
            if table in per_trace and next((root / table).glob("trace_id=*/*.parquet"), None) is not None:
                select = ", ".join(f"CAST({_q(c)} AS {t}) AS {_q(c)}" for c, t, _ in cols)
                glob = str(root / table / "trace_id=*" / "*.parquet")
                con.execute(f"CREATE VIEW {target} AS SELECT {select} FROM read_parquet({_lit(glob)}, "
                            "hive_partitioning = false)")
                kind = "VIEW"
            else:  # a small cross-trace table, or a per-trace table without rows: a copy
                con.execute(f"CREATE TABLE {target} AS SELECT * FROM {_q(db)}.main.{_q(table)}")
                kind = "TABLE"
            if comments.get(table):
                con.execute(f"COMMENT ON {kind} {target} IS {_lit(comments[table])}")
            for c, _t, comment in cols:
                if comment:
                    con.execute(f"COMMENT ON COLUMN {target}.{_q(c)} IS {_lit(comment)}")
    finally:
        con.execute(f"DETACH {_q(alias)}")
