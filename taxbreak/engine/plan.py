"""The analysis plan as data: the ``sql/`` files with their headers, their dependency order, and the inputs the
engine prepares in Python before any statement runs (``INPUTS``, ``PARAMETERS``).

Each SQL file holds one SELECT statement; its header comment documents the table::

    -- table: <name>              (must equal the file name)
    -- grain: one row per ...
    -- reads: a, b, c             (tables of this run it reads; used to order the files)
    -- materialize: temp          (optional: a run-local table, not kept in the warehouse)
    -- scope: all_traces          (optional: later statements read every trace's rows, not only the run's)
    -- scope: cross_trace         (optional: the statement itself reads every trace's rows)
    -- partition_by: <column>     (optional, cross_trace: rows of one value of the column depend only on the rows
                                   of that value in the tables it reads; a run recomputes only its traces' values)
    -- description: ...
    -- column: <name>: <description> (<unit>)
    -- computed_by: <module.function> (the later stages only: the Python function that writes the table)

The plan has three stages, each a folder of such files: ``analysis`` (``sql/*.sql``, run by the engine for the
traces of a run), ``whatif`` (``sql/whatif/``: written by the what-if replay after the analysis) and ``requests``
(``sql/requests/``: written after each latency-model fit).  A table computed in Python (the replay's
``whatif_results`` and ``critical_path``) is a plan node like the others: a file holding only the header, whose
``-- computed_by:`` names the function that writes its rows; a SQL node of a later stage names the function that
runs its statement.  Every table's docs, ``COMMENT ON`` text, Dagster asset spec and code version come from its node
(``nodes``, ``code_version``); there is no second parser and no hand-written list of a stage's tables.

A name in ``-- reads:`` is another SQL file or one of ``INPUTS``; nothing else (tests/sql/test_runner.py).
The engine (``taxbreak.engine.analysis``) runs this plan; Dagster maps it onto assets (``pipeline/defs``) and
``taxbreak.read.docgen`` documents it, all from here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taxbreak.engine.rules import RunConfig, settings_tables


@dataclass(frozen=True)
class Input:
    """A table the engine prepares in Python for a run (``taxbreak.engine.analysis.prepare``), before any statement."""

    name: str
    source: str  # "lake" (events, catalogue, sidecar metadata: enters with the ingest) or "settings" (the run's rules)
    description: str


_LAKE_INPUTS = (
    Input("selected_traces", "lake", "one row per trace of the run (trace_id): the ingested traces it analyses"),
    Input("stg_catalogue", "lake", "the run's traces' catalogue rows (file, format, sizes, capture metadata)"),
    Input("stg_meta_raw", "lake", "the run's traces' sidecar / embedded metadata as recorded at ingest "
          "(trace_id, meta_source, meta_note, meta_json, side_file_errors)"),
    Input("stg_request_lists", "lake", "the run's traces' request lists stored at ingest from "
          "<trace>.requests.jsonl[.gz] (trace_id, step_name, request_index, request_id, tenant, request_phase, "
          "tokens, context_tokens, output_tokens; a view over their Parquet files, never loaded whole)"),
)
# every run-settings table of taxbreak.engine.rules (its columns: the RunConfig fields it holds)
INPUTS: tuple[Input, ...] = _LAKE_INPUTS + tuple(
    Input(t, "settings", "run settings: " + ", ".join(cols)) for t, cols in settings_tables().items())
# statement parameters the engine binds: name -> what it holds
PARAMETERS: dict[str, str] = {
    "event_files": "the lake's event partitions of the run's traces (Parquet paths), read by stg_events",
    "trace_ids": "the run's traces (trace ids), in the order of event_files; int_traces numbers them",
}


SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
try:  # installed layout: taxbreak.sql is the sql/ folder
    import taxbreak.sql as _sql_pkg

    SQL_DIR = Path(_sql_pkg.__file__).resolve().parent
except ImportError:  # pragma: no cover - source checkout without install
    pass


@dataclass
class SqlFile:
    name: str
    path: Path
    text: str
    grain: str = ""
    reads: list[str] = field(default_factory=list)
    description: str = ""
    materialize: str = "table"
    scope: str = "run"
    partition_by: str = ""  # cross_trace: the column whose values a run for some traces recomputes alone
    columns: dict[str, str] = field(default_factory=dict)
    stage: str = "analysis"  # the plan stage: STAGES
    computed_by: str = ""  # a later stage's table: the Python function (module.function) that writes it

    @property
    def python_only(self) -> bool:
        """A table whose rows Python computes (the file holds only its header, no statement)."""
        return bool(self.computed_by) and not _strip_comments(self.text).strip()

    @property
    def params(self) -> list[str]:
        return sorted(set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", _strip_comments(self.text))))


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


TABLE_KEYS = ("table", "grain", "reads", "materialize", "scope", "partition_by", "description", "column",
              "computed_by")
STAGES = ("analysis", "whatif", "requests")  # in the order a trace's tables are written
_ANY_KEY = re.compile(r"^--\s*([a-z_]+):\s*(.*)$")


def header(text: str, keys: tuple[str, ...] = TABLE_KEYS) -> list[tuple[str, str]]:
    """The ``-- key: value`` header lines of a file's text whose key is one of ``keys``, in order (the one header
    parser: the tables' files here, the checks' in ``taxbreak.engine.checks``)."""
    out = []
    for line in text.splitlines():
        m = _ANY_KEY.match(line.strip())
        if m and m.group(1) in keys:
            out.append((m.group(1), m.group(2).strip()))
    return out


def parse_sql_file(path: Path, stage: str = "analysis") -> SqlFile:
    text = path.read_text(encoding="utf-8")
    sf = SqlFile(name=path.stem, path=path, text=text, stage=stage)
    for key, val in header(text):
        if key == "table" and val != sf.name:
            raise ValueError(f"{path}: '-- table: {val}' does not match the file name")
        if key == "grain":
            sf.grain = val
        elif key == "reads":
            sf.reads = [r.strip() for r in val.split(",") if re.fullmatch(r"[a-z_][a-z0-9_]*", r.strip())]
        elif key == "description":
            sf.description = val
        elif key == "materialize":
            sf.materialize = val
        elif key == "scope":
            sf.scope = val
        elif key == "partition_by":
            sf.partition_by = val
        elif key == "computed_by":
            sf.computed_by = val
        elif key == "column":
            col, _, desc = val.partition(":")
            sf.columns[col.strip()] = desc.strip()
    if not sf.grain:
        raise ValueError(f"{path}: no '-- grain:' line")
    if (stage == "analysis") == bool(sf.computed_by):
        raise ValueError(f"{path}: '-- computed_by:' is the header of a later stage's table, and it must have one")
    return sf


_PARSED: dict[str, tuple[tuple[tuple[str, int, int], ...], list[SqlFile]]] = {}  # per folder: the last parse


def _folder(stage: str, sql_dir: Path | None) -> Path:
    if stage not in STAGES:
        raise ValueError(f"unknown plan stage {stage!r}; known: {', '.join(STAGES)}")
    root = sql_dir or SQL_DIR
    return root if stage == "analysis" else root / stage


def sql_files(sql_dir: Path | None = None, stage: str = "analysis") -> list[SqlFile]:
    """The files of a plan stage (default: the analysis, ``sql/*.sql``), in dependency order (topological over
    '-- reads:', ties by name).

    Parsed once per version of the files (path, size, modification time): a run asks for them at every table."""
    folder = _folder(stage, sql_dir)
    paths = sorted(folder.glob("*.sql"))
    key = tuple((str(p), st.st_size, st.st_mtime_ns) for p in paths for st in (p.stat(),))
    cached = _PARSED.get(str(folder))
    if cached is None or cached[0] != key:
        _PARSED[str(folder)] = (key, _ordered({p.stem: parse_sql_file(p, stage) for p in paths}))
    return list(_PARSED[str(folder)][1])


def nodes(stage: str | None = None) -> list[SqlFile]:
    """Every table of the plan (``stage`` None) or of one stage, in the order they are written: the analysis, then
    the what-if replay's, then the request fit's; each stage in dependency order."""
    return [sf for st in (STAGES if stage is None else (stage,)) for sf in sql_files(stage=st)]


def node(name: str) -> SqlFile:
    """The plan node of table ``name``; KeyError names the known ones."""
    found = {sf.name: sf for sf in nodes()}
    if name not in found:
        raise KeyError(f"no table {name!r} in the plan; known: {', '.join(found)}")
    return found[name]


def _module_source(function: str) -> bytes:
    """The source of the module defining ``module.function`` (a Python node's code), found without importing it."""
    spec = importlib.util.find_spec(function.rpartition(".")[0])
    if spec is None or not spec.origin:
        raise ValueError(f"computed_by {function!r}: no such module")
    return Path(spec.origin).read_bytes()


def code_version(name: str, files: dict[str, SqlFile] | None = None, config: RunConfig | None = None) -> str:
    """A table's code version: hash of its node's text, of the run-local files it reads (transitively: their SQL is
    part of its computation), of the run settings those statements read (kernel-name rules, step patterns, T_sys
    defaults; ``config``: default the user's settings) and, for a table a later stage writes, of the module of its
    ``-- computed_by:`` function.  Dagster's asset code versions and the refresh job's key are these.  ``files``:
    the nodes by name (default: the plan's)."""
    files = files if files is not None else {sf.name: sf for sf in nodes()}
    settings = settings_tables()
    parts: list[str] = []
    settings_read: set[str] = set()

    def visit(n: str) -> None:
        parts.append(files[n].text)
        for r in files[n].reads:
            if r in files and files[r].materialize == "temp":
                visit(r)
            elif r in settings:
                settings_read.add(r)

    visit(name)
    if files[name].computed_by:
        parts.append(hashlib.sha256(_module_source(files[name].computed_by)).hexdigest())
    cfg = config or RunConfig.from_settings()  # the user's settings (taxbreak.toml, environment) are computation too
    for table in sorted(settings_read):  # only the settings it reads: a rule edit leaves the other tables current
        parts.append(table + "=" + repr([getattr(cfg, attr) for attr in settings[table]]))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _ordered(files: dict[str, SqlFile]) -> list[SqlFile]:
    order: list[SqlFile] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise ValueError("cycle in sql/ reads: " + " -> ".join(chain + (name,)))
        state[name] = 1
        for dep in files[name].reads:
            if dep in files:
                visit(dep, chain + (name,))
        state[name] = 2
        order.append(files[name])

    for name in sorted(files):
        visit(name, ())
    return order


def plan_tables(tables: list[str] | None = None) -> list[str]:
    """The files a run of ``tables`` (None: all) computes, in dependency order; ValueError names unknown ones."""
    files = {f.name: f for f in sql_files()}  # dependency order
    names = list(files)
    if not tables:
        return names
    unknown = sorted(set(tables) - set(names))
    if unknown:
        raise ValueError(f"unknown table(s): {', '.join(unknown)}; known: {', '.join(names)}")
    need: set[str] = set()
    stack = list(tables)
    while stack:
        t = stack.pop()
        if t in need:
            continue
        need.add(t)
        stack.extend(d for d in files[t].reads if d in files)
    return [n for n in names if n in need]


def release_after(names: list[str]) -> dict[str, list[str]]:
    """For a plan (``plan_tables``' order): table -> the run-local tables whose last reader in the plan it is.
    Dropping those once it is built frees DuckDB's memory for the later statements (at 1 M kernels the run's
    events alone fill most of the default memory_limit, so every later statement spilled)."""
    files = {f.name: f for f in sql_files()}
    last: dict[str, str] = {}
    for name in names:
        for dep in files[name].reads:
            if dep in files and files[dep].materialize == "temp":
                last[dep] = name
    out: dict[str, list[str]] = {}
    for dep, reader in last.items():
        out.setdefault(reader, []).append(dep)
    return out


def quote_ident(ident: str) -> str:
    """A plain SQL identifier, quoted; ValueError for anything else (the names come from the plan, never a file)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident):
        raise ValueError(f"not a plain identifier: {ident!r}")
    return '"' + ident + '"'


def sql_literal(text: str) -> str:
    """A SQL string literal for DDL (DuckDB cannot bind parameters in COMMENT ON or ATTACH)."""
    return "'" + text.replace("'", "''") + "'"


def comment_on(con: Any, target: str, sf: SqlFile, columns: list[str] | None = None) -> None:
    """The one COMMENT ON writer: the table's and columns' comments from its plan node's header.  ``target``:
    ``[db.]schema.table``, each part a plain identifier, quoted or not; ``columns``: the table's columns (None: read
    from the catalogue).  Comments the table already carries are not written again."""
    *db, schema, table = [part.strip('"') for part in target.split(".")]
    where = {"db": db[0] if db else con.execute("SELECT current_database()").fetchall()[0][0], "s": schema,
             "t": table}
    have = dict(con.execute(
        "SELECT '', comment FROM duckdb_tables() WHERE database_name = $db AND schema_name = $s AND table_name = $t "
        "UNION ALL SELECT column_name, comment FROM duckdb_columns() WHERE database_name = $db AND schema_name = $s "
        "AND table_name = $t", where).fetchall())
    text = sf.grain + ". " + sf.description
    if have.get("") != text:
        con.execute(f"COMMENT ON TABLE {target} IS {sql_literal(text)}")
    for col in (columns if columns is not None else [c for c in have if c]):
        if col in sf.columns and have.get(col) != sf.columns[col]:
            con.execute(f"COMMENT ON COLUMN {target}.{quote_ident(col)} IS {sql_literal(sf.columns[col])}")
