"""``taxbreak sql``: ad-hoc queries over the warehouse, also while a writer works on it.

Opening order (``open_readonly``; the writer side is ``taxbreak.store.warehouse``):
1. the snapshot every writer publishes when it finishes (``exports/snapshot.duckdb``), when it is at least as new
   as the warehouse file: a reader then never holds the file a writer needs, and sees the state after the last
   completed write;
2. else the DuckDB warehouse file, read-only;
3. when a writer holds it (DuckDB lets no other process open a file one process holds read-write), the older
   snapshot, read-only;
4. else views over the Parquet marts (the files ``marts/_manifest.json`` names, ``taxbreak.store.marts``).
In every case the lake is attached as views ``events`` and ``catalogue`` when it exists.

``taxbreak sql`` runs the user's SQL in a sandbox unless ``--unrestricted`` (or the ``sql.unrestricted`` setting)
lifts it: DuckDB may open only the warehouse, its snapshot, the lake and the exports (``allowed_directories``,
``allowed_paths``), no other file, database or extension (``enable_external_access = false``), and the query
cannot change that (``lock_configuration``).  Inside those folders DuckDB could still write (its file settings do
not tell reading from writing), so the sandbox also runs only statements that write no file (``SANDBOX_STATEMENTS``:
no ``COPY``, ``EXPORT``, ``ATTACH``, ``PREPARE``; ``check_statements``): a reader cannot change a lake partition, a
mart or a manifest a writer trusts (issue 30).  A result goes to a file with ``-o FILE``, written by taxbreak itself
anywhere but under the lake, the marts, the exports or onto the warehouse (``check_output``).  Text printed to a
terminal has its control characters escaped (``printable``), so a kernel or file name cannot send escape sequences
to it.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from taxbreak.config import Paths, add_path_args, setting
from taxbreak.ingest.lake import EVENTS_DIR, Lake
from taxbreak.ingest.objects import is_s3_url, normalise_s3_url
from taxbreak.store.marts import marts_location, pin_reader, reader_sources, register_filesystem, unpin_reader
from taxbreak.store.warehouse import SNAPSHOT_NAME, _is_lock_error, exports_dir, snapshot_is_current

__all__ = ["SNAPSHOT_NAME", "Opened", "WarehouseUnavailable", "exports_dir", "open_readonly", "printable"]

# C0 controls but tab and newline, DEL, C1 controls, zero-width and bidirectional formatting characters
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_CELL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """A table or a view of that name on the connection: the warehouse holds tables, the readers' snapshot views."""
    return bool(con.execute(
        "SELECT count(*) FROM (SELECT table_name AS n FROM duckdb_tables() UNION ALL "
        "SELECT view_name FROM duckdb_views()) WHERE n = $n", {"n": name}).fetchone()[0])


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, *, cell: bool = False) -> str:
    """``text`` with the characters a terminal would act on (escape sequences, carriage returns, bidirectional
    overrides) written as ``\\xNN`` / ``\\uNNNN``; newlines and tabs are kept unless ``cell``."""
    return (_UNSAFE_CELL if cell else _UNSAFE).sub(_escape, text)


class WarehouseUnavailable(RuntimeError):
    pass


@dataclass
class Opened:
    con: duckdb.DuckDBPyConnection
    source: str  # 'warehouse', 'snapshot' or 'exports'
    path: Path
    note: str | None = None  # why an older copy is read (the warehouse held by a writer, or missing)
    sandbox: bool = False  # the user's statements are checked (``check_statements``) before they run
    release: Callable[[], None] | None = None  # drops the reader's pin (marts.pin_reader); also when ``con`` is gone

    def close(self) -> None:
        """Close the connection and drop the reader's pin at once (``con.close()`` alone drops it when the
        connection object is gone)."""
        self.con.close()
        if self.release is not None:
            self.release()


def _sq(text: str) -> str:
    """A SQL string literal for a file path in DDL (DuckDB cannot bind parameters in CREATE VIEW)."""
    return "'" + text.replace("'", "''") + "'"


def _ro(path: Path, sandbox: bool = False, own: bool = False) -> duckdb.DuckDBPyConnection:
    """``path`` read-only.  ``own``: in a DuckDB instance of its own, for a file replaced by a rename (the readers'
    snapshot): DuckDB shares an open instance by path, so a second connect in this process would read the replaced
    file a first reader still holds (issue 30).  The warehouse file itself is written in place, and not while a
    reader holds it, so its readers may share one."""
    if sandbox or own:  # an instance of its own (the sandbox's settings are the instance's), the file attached
        # read-only
        con = duckdb.connect(":memory:")
        name = re.sub(r"\W", "_", path.stem) or "warehouse"
        try:
            con.execute(f"ATTACH {_sq(str(path))} AS \"{name}\" (READ_ONLY)")
        except duckdb.Error:
            con.close()
            raise
        con.execute(f'USE "{name}"')
    else:
        con = duckdb.connect(str(path), read_only=True)  # default config: shares an instance this process has open
    con.execute("SET autoinstall_known_extensions = false")
    # no progress bar: DuckDB draws it on stdout once a query runs 2 s, into `--json` / `--format csv` output
    con.execute("SET enable_progress_bar = false")
    return con


def _attach_lake(con: duckdb.DuckDBPyConnection, lake: Path | str | None) -> None:
    """Views ``events`` and ``catalogue`` over the lake (a local folder or ``s3://bucket/prefix``)."""
    if lake is None:
        return

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


# the statements a sandboxed query may run: none of them writes a file (COPY ... TO, EXPORT DATABASE and ATTACH of a
# new file can, inside the folders the sandbox lets DuckDB read; PREPARE could wrap a COPY)
SANDBOX_STATEMENTS = frozenset({
    "SELECT", "EXPLAIN", "PRAGMA", "SET", "VARIABLE_SET", "CREATE", "CREATE_FUNC", "DROP", "INSERT", "UPDATE",
    "DELETE", "MERGE_INTO", "ALTER", "TRANSACTION", "CALL", "EXECUTE", "RELATION",
})


class SandboxRefused(ValueError):
    """A statement or an output file the sandbox does not allow; the message says which and why."""


def check_statements(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise ``SandboxRefused`` unless every statement of ``sql`` is one the sandbox runs (``SANDBOX_STATEMENTS``)."""
    for stmt in con.extract_statements(sql):
        kind = stmt.type.name
        if kind not in SANDBOX_STATEMENTS:
            raise SandboxRefused(
                f"{kind} statements are not run by the sandbox: they could write the lake, marts or exports that "
                "the next analysis reads. Write a result with -o FILE (outside those folders), or pass "
                "--unrestricted")


def check_output(output: str | None, warehouse: Path, lake: Path | str | None) -> None:
    """Raise ``SandboxRefused`` when ``-o FILE`` would land in a folder a writer reads (the lake, the marts, the
    exports) or on the warehouse file."""
    if not output:
        return
    target = Path(output).resolve()
    warehouse = Path(warehouse).resolve()
    files = {warehouse, warehouse.with_name(warehouse.name + ".wal")}
    rooms = [exports_dir(warehouse).resolve()]
    location = marts_location(warehouse)
    if not is_s3_url(location):
        rooms.append(Path(location).resolve())
    if lake is not None and not is_s3_url(str(lake)):
        rooms.append(Path(lake).resolve())
    if target in files or any(target == r or r in target.parents for r in rooms):
        raise SandboxRefused(f"{output}: is in the warehouse's own files (the lake, marts, exports or the "
                             "warehouse file), which only writers change; write the result elsewhere")


def restrict(con: duckdb.DuckDBPyConnection, opened_path: Path, warehouse: Path, lake: Path | str | None) -> None:
    """The sandbox of ``taxbreak sql`` (module doc): only the warehouse, its snapshot, the lake and the exports."""
    paths = [str(Path(p).resolve()) for p in (opened_path, warehouse, exports_dir(warehouse) / SNAPSHOT_NAME)]
    dirs = [str(exports_dir(warehouse).resolve()) + "/", marts_location(warehouse) + "/"]
    if lake is not None:
        text = str(lake)
        if is_s3_url(text):
            dirs.append(normalise_s3_url(text) + "/")
        else:
            dirs.append(str(Path(text).resolve()) + "/")
    con.execute("SET allowed_paths = $p", {"p": paths})
    con.execute("SET allowed_directories = $d", {"d": dirs})
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def open_readonly(
    warehouse: Path, lake: Path | None = None, prefer: str = "auto", *, sandbox: bool = False,
) -> Opened:
    """A read-only connection to the warehouse, its snapshot or its Parquet exports (see the module doc).

    ``prefer``: 'auto' (that order), 'warehouse', 'snapshot' or 'exports' (only that source).
    ``sandbox``: restrict the connection to the warehouse, lake and exports (``restrict``)."""
    pin = pin_reader(warehouse) if prefer != "warehouse" else None  # taken before the snapshot is opened
    try:
        opened = _open_readonly(Path(warehouse), lake, prefer, sandbox)
    except BaseException:
        if pin is not None:
            unpin_reader(pin)
        raise
    if pin is not None:
        if opened.source == "warehouse":  # the file itself: DuckDB's own transactions, no marts files read
            unpin_reader(pin)
        else:  # the marts files this connection's views name stay until it is closed or gone (marts.collect)
            opened.release = weakref.finalize(opened.con, unpin_reader, pin)
    if sandbox:
        restrict(opened.con, opened.path, Path(warehouse), lake)
        opened.sandbox = True
    return opened


def _ro_snapshot(snap: Path, warehouse: Path, sandbox: bool) -> duckdb.DuckDBPyConnection | None:
    """The snapshot, read-only; None when its views read the marts of another folder (a copied or moved
    warehouse folder whose snapshot was not rebuilt since: taxbreak.store.marts names the marts by absolute path).  With
    the marts on S3 (``paths.marts``), their filesystem is registered on the connection."""
    con = _ro(snap, sandbox, own=True)
    location = marts_location(warehouse)
    prefix = "'" + (location + "/").replace("'", "''")
    views = con.execute("SELECT sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
                        "AND sql LIKE '%read_parquet(%'").fetchall()
    if all(prefix in v for (v,) in views):
        if views and is_s3_url(location):
            register_filesystem(con, warehouse)
        return con
    con.close()
    return None


def _open_readonly(warehouse: Path, lake: Path | None, prefer: str, sandbox: bool) -> Opened:
    exp = exports_dir(warehouse)
    errors: list[str] = []
    snap = exp / SNAPSHOT_NAME
    if prefer == "auto" and snapshot_is_current(warehouse):
        con = _ro_snapshot(snap, warehouse, sandbox)
        if con is not None:
            opened = Opened(con, "snapshot", snap)
            _attach_lake(opened.con, lake)
            return opened
    if prefer in ("auto", "warehouse"):
        if warehouse.exists():
            try:
                opened = Opened(_ro(warehouse, sandbox), "warehouse", warehouse)
                _attach_lake(opened.con, lake)
                return opened
            except duckdb.Error as exc:
                if not _is_lock_error(exc) or prefer == "warehouse":
                    raise WarehouseUnavailable(f"{warehouse}: cannot open read-only ({exc})") from exc
                errors.append(f"{warehouse} is held by a writer")
        else:
            errors.append(f"{warehouse} does not exist")
    if prefer in ("auto", "snapshot"):
        con = _ro_snapshot(snap, warehouse, sandbox) if snap.exists() else None
        if con is not None:
            opened = Opened(con, "snapshot", snap, "; ".join(errors) or None)
            _attach_lake(opened.con, lake)
            return opened
        errors.append(f"{snap} does not exist" if not snap.exists() else f"{snap} was built for another folder")
    parquet = {p.stem: f"SELECT * FROM read_parquet({_sq(str(p))})"
               for p in sorted(exp.glob("*.parquet")) if not p.name.startswith(".")}
    if prefer in ("auto", "exports"):
        con = duckdb.connect(":memory:")
        con.execute("SET enable_progress_bar = false")  # as in ``_ro``
        # the marts (taxbreak.store.marts), read directly: the files their manifest names
        parquet.update(reader_sources(con, warehouse))
        if parquet:
            for name, select in parquet.items():
                con.execute(f'CREATE VIEW "{name}" AS {select}')
            _attach_lake(con, lake)
            return Opened(con, "exports", exp, "; ".join(errors) or None)
        con.close()
        errors.append(f"no Parquet exports in {exp}")
    raise WarehouseUnavailable(
        "no warehouse to query: " + "; ".join(errors)
        + ". Run `taxbreak analyze` (or the Dagster pipeline) to build it, or pass --warehouse PATH."
    )


def _json_value(v: object) -> object:
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    return str(v)


def write_result(rel: duckdb.DuckDBPyRelation, fmt: str, output: str | None, max_rows: int = 200) -> int:
    """Write a query result as 'table' (aligned text), 'csv', 'json' (an array of objects) or 'parquet'; returns the
    row count.  Files are written by this process, not by DuckDB (which the sandbox lets write nothing)."""
    if fmt == "parquet":
        if not output:
            raise ValueError("--format parquet needs --output FILE")
        import pyarrow.parquet as pq

        reader = rel.to_arrow_reader()
        n = 0
        with pq.ParquetWriter(output, reader.schema) as w:
            for batch in reader:
                w.write_batch(batch)
                n += batch.num_rows
        return n
    cols = rel.columns
    rows = rel.fetchall()
    out = open(output, "w", newline="", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    tty = not output and hasattr(out, "isatty") and out.isatty()
    try:
        if fmt == "csv":
            w = csv.writer(out)
            w.writerow(cols)
            if tty:  # a terminal would act on escape sequences in the values; a file keeps them exactly
                rows = [[printable(v, cell=True) if isinstance(v, str) else v for v in r] for r in rows]
            w.writerows(rows)
        elif fmt == "json":
            json.dump([dict(zip(cols, r, strict=True)) for r in rows], out, default=_json_value)  # ASCII-escaped
            out.write("\n")
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
    s = printable(str(v), cell=True)
    return s if len(s) <= 60 else s[:57] + "..."


def align_columns(rows: list[list[str]], right: list[bool], sep: str = "  ") -> list[str]:
    """Text rows (the header among them) as lines whose columns line up: each column as wide as its widest cell
    (computed from the content, never a fixed width a long value overflows), right-aligned where ``right`` says; the
    last column is not padded (a free-text tail)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(right))]
    return [sep.join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(r, widths, right, strict=True)).rstrip()
            for r in rows]


def format_table(cols: list[str], rows: list[tuple], max_rows: int = 200) -> str:
    shown = [[_cell(v) for v in r] for r in rows[:max_rows]]
    widths = [max([len(c)] + [len(r[i]) for r in shown]) for i, c in enumerate(cols)]
    num = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows[:max_rows]) for i in range(len(cols))]
    out = align_columns([list(cols), ["-" * w for w in widths], *shown], num)
    more = f" (first {max_rows} shown)" if len(rows) > max_rows else ""
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{more})")
    return "\n".join(out)


def run_query(con: duckdb.DuckDBPyConnection, sql: str, fmt: str = "table", output: str | None = None,
              sandbox: bool = False) -> int:
    if sandbox:
        check_statements(con, sql)
    rel = con.sql(sql)
    if rel is None:  # a statement without a result (SET, CREATE TEMP VIEW ...)
        return 0
    return write_result(rel, fmt, output)


def interactive(opened: Opened, stdin=None, fmt: str = "table") -> int:  # noqa: ANN001 - a text stream
    """A small prompt: statements end with ';'; '.tables' lists tables, '.quit' leaves."""
    stdin = stdin or sys.stdin
    tty = hasattr(stdin, "isatty") and stdin.isatty()
    if tty:
        print(f"taxbreak sql on the {opened.source} ({printable(str(opened.path))}); end statements with ';', "
              ".tables, .quit")
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
                run_query(opened.con, "".join(buf), fmt, sandbox=opened.sandbox)
            except (duckdb.Error, SandboxRefused) as exc:
                print(printable(f"error: {exc}"), file=sys.stderr)
            buf = []
    return 0


def open_for_cli(args: argparse.Namespace, command: str, prefer: str = "auto", sandbox: bool = False) -> Opened | None:
    """``open_readonly`` for a subcommand: paths from its options, and None after printing why it can't.
    Says on stderr when it reads an older copy than the warehouse (unless the command's ``-q``)."""
    paths = Paths.from_args(args)
    try:
        # the lake's views only for commands with a --lake option (sql), as before
        opened = open_readonly(paths.warehouse, paths.lake if hasattr(args, "lake") else None, prefer=prefer,
                               sandbox=sandbox)
    except (WarehouseUnavailable, duckdb.Error) as exc:
        print(printable(f"taxbreak {command}: {exc}"), file=sys.stderr)
        return None
    if opened.note and not getattr(args, "quiet", False):
        print(printable(f"note: {opened.note}; reading the {opened.source} at {opened.path}"), file=sys.stderr)
    return opened


def cmd_sql(args: argparse.Namespace) -> int:
    unrestricted = bool(setting("sql.unrestricted", True if args.unrestricted else None).value)
    opened = open_for_cli(args, "sql", prefer=args.source, sandbox=not unrestricted)
    if opened is None:
        return 2
    try:
        if args.query is None:
            return interactive(opened, fmt=args.format)
        try:
            if not unrestricted:
                paths = Paths.from_args(args)
                check_output(args.output, paths.warehouse, paths.lake)
            n = run_query(opened.con, args.query, args.format, args.output, sandbox=not unrestricted)
        except BrokenPipeError:
            raise  # the reader left: taxbreak.cli ends quietly
        except (duckdb.Error, ValueError, OSError) as exc:
            hint = ""
            if isinstance(exc, duckdb.PermissionException) and not unrestricted:
                hint = " (taxbreak sql reads only the warehouse, lake and exports; --unrestricted lifts that)"
            print(printable(f"taxbreak sql: {exc}{hint}"), file=sys.stderr)
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
        description="Query the analysis tables (and the lake as views `events`, `catalogue`). Works while a "
        "writer works: the snapshot published by the last completed write is read (else the DuckDB file, else the "
        "Parquet exports). The query may read only the warehouse, the lake and the exports, and write no file "
        "(DuckDB's enable_external_access, allowed_directories, lock_configuration; no COPY, EXPORT, ATTACH or "
        "PREPARE); -o FILE writes a result anywhere but under the lake, marts or exports; --unrestricted "
        "lifts that. See docs/warehouse.md for every table and example queries.",
    )
    p.add_argument("query", nargs="?", help="the SQL statement; omit for an interactive prompt")
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table",
                   help="output format (json: an array of row objects)")
    p.add_argument("-o", "--output", help="write the result to this file (required for parquet)")
    p.add_argument("--source", choices=("auto", "warehouse", "snapshot", "exports"), default="auto",
                   help="which copy to read (default: the current snapshot, else the warehouse, else an older "
                   "snapshot, else the exports)")
    p.add_argument("--unrestricted", action="store_true",
                   help="let the query read, attach and write any file, and load extensions (also the "
                   "sql.unrestricted setting, $TAXBREAK_SQL_UNRESTRICTED=1)")
    add_path_args(p)
    p.set_defaults(func=cmd_sql)
