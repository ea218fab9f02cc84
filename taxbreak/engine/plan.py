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

A name in ``-- reads:`` is another SQL file or one of ``INPUTS``; nothing else (tests/sql/test_runner.py).
The engine (``taxbreak.engine.analysis``) runs this plan; Dagster maps it onto assets (``pipeline/defs``) and
``taxbreak.read.docgen`` documents it, all from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from taxbreak.engine.rules import settings_tables


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

    @property
    def params(self) -> list[str]:
        return sorted(set(re.findall(r"\$([A-Za-z_][A-Za-z0-9_]*)", _strip_comments(self.text))))


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


TABLE_KEYS = ("table", "grain", "reads", "materialize", "scope", "partition_by", "description", "column")
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


def parse_sql_file(path: Path) -> SqlFile:
    text = path.read_text(encoding="utf-8")
    sf = SqlFile(name=path.stem, path=path, text=text)
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
        elif key == "column":
            col, _, desc = val.partition(":")
            sf.columns[col.strip()] = desc.strip()
    if not sf.grain:
        raise ValueError(f"{path}: no '-- grain:' line")
    return sf


_PARSED: dict[tuple[tuple[str, int, int], ...], list[SqlFile]] = {}  # the last parse, by the files' versions


def sql_files(sql_dir: Path | None = None) -> list[SqlFile]:
    """Every SQL file, in dependency order (topological over '-- reads:', ties by name).

    Parsed once per version of the files (path, size, modification time): a run asks for them at every table."""
    paths = sorted((sql_dir or SQL_DIR).glob("*.sql"))
    key = tuple((str(p), st.st_size, st.st_mtime_ns) for p in paths for st in (p.stat(),))
    if key not in _PARSED:
        order = _ordered({p.stem: parse_sql_file(p) for p in paths})
        _PARSED.clear()
        _PARSED[key] = order
    return list(_PARSED[key])


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
