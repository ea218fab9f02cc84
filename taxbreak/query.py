"""``taxbreak sql``: ad-hoc queries over the warehouse, also while the pipeline writes it.

Opening order (``open_readonly``):
1. the DuckDB warehouse file, read-only;
2. when a writer holds it (DuckDB lets no other process open a file one process holds read-write), the snapshot
   the pipeline publishes beside it (``exports/snapshot.duckdb``), read-only;
3. else views over the Parquet exports (``exports/<table>.parquet``).
In every case the lake is attached as views ``events`` and ``catalogue`` when it exists.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb

from taxbreak.config import Paths, add_path_args

SNAPSHOT_NAME = "snapshot.duckdb"


class WarehouseUnavailable(RuntimeError):
    pass


@dataclass
class Opened:
    con: duckdb.DuckDBPyConnection
    source: str  # 'warehouse', 'snapshot' or 'exports'
    path: Path


def exports_dir(warehouse: Path) -> Path:
    return Path(warehouse).parent / "exports"


def _sq(text: str) -> str:
    """A SQL string literal for a file path in DDL (DuckDB cannot bind parameters in CREATE VIEW)."""
    return "'" + text.replace("'", "''") + "'"


def _ro(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path), read_only=True)  # default config: shares an instance this process has open
    con.execute("SET autoinstall_known_extensions = false")
    return con


def _is_lock_error(exc: Exception) -> bool:
    return "lock" in str(exc).lower()


def _attach_lake(con: duckdb.DuckDBPyConnection, lake: Path | str | None) -> None:
    """Views ``events`` and ``catalogue`` over the lake (a local folder or ``s3://bucket/prefix``)."""
    if lake is None:
        return
    from taxbreak.ingest.lake import EVENTS_DIR, Lake

    store = Lake(lake)
    existing = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    existing |= {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    events = store.root / EVENTS_DIR  # on S3 a prefix exists only while an object is under it
    has_events = events.exists() if store.is_object_store else any(events.glob("trace_id=*/*.parquet"))
    has_catalogue = bool(store.catalogue_paths())
    if (has_events or has_catalogue) and not ({"events", "catalogue"} <= existing):
        store.register_filesystem(con)
    if has_events and "events" not in existing:
        con.execute("CREATE TEMP VIEW events AS SELECT * FROM read_parquet("
                    + _sq(store.events_glob())
                    + ", hive_partitioning = false, union_by_name = true)")
    if has_catalogue and "catalogue" not in existing:
        con.execute("CREATE TEMP VIEW catalogue AS SELECT * FROM read_parquet("
                    + _sq(store.catalogue_glob()) + ", union_by_name = true)")


def open_readonly(warehouse: Path, lake: Path | None = None, prefer: str = "auto") -> Opened:
    """A read-only connection to the warehouse, its snapshot or its Parquet exports (see the module doc).

    ``prefer``: 'auto' (that order), 'warehouse', 'snapshot' or 'exports' (only that source)."""
    warehouse = Path(warehouse)
    exp = exports_dir(warehouse)
    errors: list[str] = []
    if prefer in ("auto", "warehouse"):
        if warehouse.exists():
            try:
                opened = Opened(_ro(warehouse), "warehouse", warehouse)
                _attach_lake(opened.con, lake)
                return opened
            except duckdb.Error as exc:
                if not _is_lock_error(exc) or prefer == "warehouse":
                    raise WarehouseUnavailable(f"{warehouse}: cannot open read-only ({exc})") from exc
                errors.append(f"{warehouse} is held by a writer")
        else:
            errors.append(f"{warehouse} does not exist")
    snap = exp / SNAPSHOT_NAME
    if prefer in ("auto", "snapshot"):
        if snap.exists():
            opened = Opened(_ro(snap), "snapshot", snap)
            _attach_lake(opened.con, lake)
            return opened
        errors.append(f"{snap} does not exist")
    parquet = sorted(p for p in exp.glob("*.parquet") if not p.name.startswith("."))
    if prefer in ("auto", "exports"):
        if parquet:
            con = duckdb.connect(":memory:")
            for p in parquet:
                con.execute(f'CREATE VIEW "{p.stem}" AS SELECT * FROM read_parquet({_sq(str(p))})')
            _attach_lake(con, lake)
            return Opened(con, "exports", exp)
        errors.append(f"no Parquet exports in {exp}")
    raise WarehouseUnavailable(
        "no warehouse to query: " + "; ".join(errors)
        + ". Run `taxbreak analyze` (or the Dagster pipeline) to build it, or pass --warehouse PATH."
    )


def write_result(rel: duckdb.DuckDBPyRelation, fmt: str, output: str | None, max_rows: int = 200) -> int:
    """Write a query result as 'table' (aligned text), 'csv' or 'parquet'; returns the row count."""
    if fmt == "parquet":
        if not output:
            raise ValueError("--format parquet needs --output FILE")
        rel.write_parquet(output)
        import pyarrow.parquet as pq

        return pq.ParquetFile(output).metadata.num_rows
    cols = rel.columns
    rows = rel.fetchall()
    out = open(output, "w", newline="", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    try:
        if fmt == "csv":
            w = csv.writer(out)
            w.writerow(cols)
            w.writerows(rows)
        else:
            out.write(format_table(cols, rows, max_rows) + "\n")
    finally:
        if output:
            out.close()
    return len(rows)


def _cell(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def format_table(cols: list[str], rows: list[tuple], max_rows: int = 200) -> str:
    shown = [[_cell(v) for v in r] for r in rows[:max_rows]]
    widths = [max([len(c)] + [len(r[i]) for r in shown]) for i, c in enumerate(cols)]
    num = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows[:max_rows]) for i in range(len(cols))]
    line = "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cols, widths, num, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in shown:
        out.append("  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(r, widths, num, strict=True)))
    more = f" (first {max_rows} shown)" if len(rows) > max_rows else ""
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{more})")
    return "\n".join(out)


def run_query(con: duckdb.DuckDBPyConnection, sql: str, fmt: str = "table", output: str | None = None) -> int:
    rel = con.sql(sql)
    if rel is None:  # a statement without a result (SET, CREATE TEMP VIEW ...)
        return 0
    return write_result(rel, fmt, output)


def interactive(opened: Opened, stdin=None, fmt: str = "table") -> int:  # noqa: ANN001 - a text stream
    """A small prompt: statements end with ';'; '.tables' lists tables, '.quit' leaves."""
    stdin = stdin or sys.stdin
    tty = hasattr(stdin, "isatty") and stdin.isatty()
    if tty:
        print(f"taxbreak sql on the {opened.source} ({opened.path}); end statements with ';', .tables, .quit")
    buf: list[str] = []
    while True:
        if tty:
            sys.stdout.write("sql> " if not buf else "...> ")
            sys.stdout.flush()
        line = stdin.readline()
        if not line:
            break
        s = line.strip()
        if not buf and s in (".quit", ".exit", "\\q"):
            break
        if not buf and s == ".tables":
            run_query(opened.con, "SELECT table_name AS name, 'table' AS type FROM duckdb_tables() UNION ALL "
                      "SELECT view_name, 'view' FROM duckdb_views() WHERE NOT internal ORDER BY 1", fmt)
            continue
        if not s and not buf:
            continue
        buf.append(line)
        if s.endswith(";"):
            try:
                run_query(opened.con, "".join(buf), fmt)
            except duckdb.Error as exc:
                print(f"error: {exc}", file=sys.stderr)
            buf = []
    return 0


def open_for_cli(args: argparse.Namespace, command: str, prefer: str = "auto") -> Opened | None:
    """``open_readonly`` for a subcommand: paths from its options, and None after printing why it can't."""
    paths = Paths.from_args(args)
    try:
        # the lake's views only for commands with a --lake option (sql), as before
        return open_readonly(paths.warehouse, paths.lake if hasattr(args, "lake") else None, prefer=prefer)
    except WarehouseUnavailable as exc:
        print(f"taxbreak {command}: {exc}", file=sys.stderr)
        return None


def cmd_sql(args: argparse.Namespace) -> int:
    opened = open_for_cli(args, "sql", prefer=args.source)
    if opened is None:
        return 2
    if opened.source != "warehouse":
        print(f"note: the warehouse file is busy or missing; reading the {opened.source} at {opened.path}",
              file=sys.stderr)
    try:
        if args.query is None:
            return interactive(opened, fmt=args.format)
        try:
            n = run_query(opened.con, args.query, args.format, args.output)
        except (duckdb.Error, ValueError) as exc:
            print(f"taxbreak sql: {exc}", file=sys.stderr)
            return 1
        if args.output:
            print(f"wrote {n} row(s) to {args.output}", file=sys.stderr)
        return 0
    finally:
        opened.con.close()


def add_sql_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sql",
        help="run SQL over the warehouse (one query, or an interactive prompt without one)",
        description="Query the analysis tables (and the lake as views `events`, `catalogue`). Works while the "
        "pipeline writes: when the DuckDB file is held by a writer, the snapshot or Parquet exports are read. "
        "See docs/warehouse.md for every table and example queries.",
    )
    p.add_argument("query", nargs="?", help="the SQL statement; omit for an interactive prompt")
    p.add_argument("--format", choices=("table", "csv", "parquet"), default="table", help="output format")
    p.add_argument("-o", "--output", help="write the result to this file (required for parquet)")
    p.add_argument("--source", choices=("auto", "warehouse", "snapshot", "exports"), default="auto",
                   help="which copy to read (default: the warehouse, else the snapshot, else the exports)")
    add_path_args(p)
    p.set_defaults(func=cmd_sql)
