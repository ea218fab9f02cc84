"""Per-trace Parquet marts of the warehouse tables, compacted into few files, and the readers' snapshot over them.

The DuckDB file stays the writers' database (``taxbreak.store.warehouse.writer``: one lock, one transaction per
publication).  What readers open is built from it after each write, and only for what the write changed.

Layout of ``<warehouse dir>/marts/`` (the per-trace tables: a ``trace_id`` column, SQL file not
``-- scope: cross_trace``):

- ``<table>/trace_id=<id>/part-<random>.parquet``: a *loose* partition, the rows of one trace written since the
  last compaction, under a new name at each write (``Manifest.parts``; layouts before issue 30 named it
  ``part-0.parquet`` and renamed over it, so an open reader's query could return one value and then another).  A
  write for some traces writes those traces' partitions only.
- ``<table>/seg-<segment>.parquet``: a *segment*, the rows of many traces in one file sorted by ``trace_id``.
  When the loose traces reach ``marts.compact_loose`` (taxbreak.config) they are compacted into one segment;
  when ``marts.compact_fanout`` segments of one tier accumulate they are merged into one of the next tier (tiered,
  as in a log-structured merge tree: a trace's rows are rewritten once per tier, so the amortised cost of a new
  trace grows with the logarithm of the traces, and a reader opens at most ``compact_loose - 1`` loose files plus
  ``compact_fanout - 1`` segments per tier).  A whole rewrite (``traces=None``: ``taxbreak analyze`` over every
  trace, a refresh, new columns) writes one segment when there are at least ``compact_loose`` traces, else loose
  partitions.  A trace written again while its rows are in a segment gets a loose partition that *supersedes*
  them: the segment's rows of that trace are left out by the readers' views (and dropped by the next merge; a
  segment with half its traces superseded is rewritten alone).  A write of some tables only (``tables=``: the
  what-if step writes two of the 22) supersedes the segment's rows of those tables only; the trace's other tables
  are still read from its segment until the next compaction moves the trace whole into a new one.  A per-trace
  table new to the layout is published for the traces it has rows of, the same way (no whole rewrite); a table
  whose columns changed makes a whole rewrite.  A trace that no longer has rows anywhere (``taxbreak forget``) is
  removed from disk by the same write: its loose partitions and every segment holding it are rewritten without it.
- ``_manifest.json``: the writers' record of the layout: the per-trace tables and their columns, every segment
  (tier, traces, files), for every trace where its rows are (a segment, loose, or a segment but some tables
  loose) and in which tables, and the files the layout no longer uses with the time they were replaced.
  Replaced files stay for ``marts.keep_replaced_s`` (a reader of the previous snapshot may still read them), and
  while a reader that opened before the replacement is still open (``pin_reader``), then a writer deletes them
  (a write for some traces at most ``COLLECT_PER_WRITE``; those of a forgotten trace: at once).
- ``<table>/_empty.parquet``: no rows, the columns (readers of a table no trace has rows in);
  ``<table>.parquet``: a cross-trace table (sweeps, fits; small), written whole.

Every file is written under ``.staging-*`` first; once all of a write's files are written they are renamed into
place, then the manifest is replaced (the writers' commit point), then ``exports/snapshot.duckdb`` (the readers'
commit point, ``build_snapshot``): per per-trace table a view reading exactly the files of the manifest
(``read_parquet`` of an explicit list, no glob, no hive partitioning; the segments' superseded traces left out;
a column cast only where Parquet cannot hold the warehouse's type), and a copy of every cross-trace table.  A
writer killed anywhere leaves readers the previous snapshot and the files it names; its pending marker
(``marts/.pending-*.json``, written when it took the lock) makes the next writer export its traces again; a
segment it renamed into place but never recorded is deleted by the next writer.  Which traces a write touched
is told by its caller (``writer(db, traces=...)``); ``None`` means every trace.  The views name the marts by
absolute path: a moved warehouse folder gets a working snapshot at its next write.

The marts may be elsewhere: the ``paths.marts`` setting (``TAXBREAK_MARTS``) names a folder (``LocalMarts``) or
``s3://bucket/prefix`` (``ObjectMarts``, the same interface; default ``marts/`` beside the DuckDB file).  On S3
nothing is renamed: files are staged in the local ``marts/`` folder (which also keeps the pending markers) and
uploaded whole; a loose partition is a new object ``part-<random>.parquet`` at each write, as locally
(``Manifest.parts`` names it, and ``live_files`` and ``replaced`` then name that file, not its folder), so a reader
of the previous manifest still reads the objects it names; the manifest, one PUT after every other upload, is the
commit point; a write that fails before it deletes what it uploaded.  The snapshot stays local, its views name
``s3://`` URLs, and every connection that reads them registers the store's filesystem first
(``register_filesystem``: ``taxbreak.store.query``, ``build_snapshot``, ``export``).  Before its uploads a writer
lists the new objects in a local journal (``marts/.uploads-*.json``); the next writer deletes those of a writer
killed before its manifest that no manifest names.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import duckdb

from taxbreak.config import ConfigError, setting
from taxbreak.engine.plan import sql_files
from taxbreak.ingest.objects import LocalStore, S3Store, is_s3_url
from taxbreak.store.faults import fault_point

MARTS_DIR = "marts"
PART = "part-0.parquet"
MANIFEST = "_manifest.json"
EMPTY = "_empty.parquet"  # no rows, the columns
LEGACY_COLUMNS = "_columns.json"  # written by the layout before the manifest; removed when met
UPLOADS = ".uploads-"  # <local marts>/.uploads-<random>.json: the new objects an S3 write is about to upload
_ID = re.compile(r"[A-Za-z0-9_.:-]+")  # a trace id as a partition folder name (sha256 hex in practice)
log = logging.getLogger("taxbreak.marts")
_VERSION = 2  # 2: a trace's tables may be placed apart (``Manifest.traces``' third field); 1 is read too


def marts_dir(warehouse: str | os.PathLike[str]) -> Path:
    """The local marts folder: the ``paths.marts`` setting when it names a folder, else ``marts/`` beside the DuckDB
    file (where, with the marts on S3, the writers keep their pending markers and stage their files)."""
    return _local(warehouse, _configured())


def _configured() -> str | None:
    return setting("paths.marts").value


def _local(warehouse: str | os.PathLike[str], where: str | None) -> Path:
    return Path(warehouse).parent / MARTS_DIR if where is None or is_s3_url(where) else Path(where)


class LocalMarts(LocalStore):
    """The marts in a local folder (``marts/`` beside the DuckDB file, or the folder ``paths.marts`` names), on the
    lake's object store (``taxbreak.ingest.objects.LocalStore``: reads, listings, puts) with the marts' own
    policy.  Files are staged in the folder itself and put in place by one rename each; a loose partition gets a new
    name at each write (``part_name``), so a file an open reader's snapshot names is never replaced under it (issue
    30); the manifest is replaced by a rename."""

    def absolute(self) -> LocalMarts:
        """The store as readers name its files (the snapshot's views): its absolute folder."""
        return LocalMarts(self.dir.resolve())

    def stamp(self, rel: str) -> tuple[int, int, int] | None:
        """A key that changes whenever the file ``rel`` does (inode, mtime, size); None when it is missing."""
        try:
            st = (self.dir / rel).stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def absent(self, rel: str, recorded: bool) -> bool:
        """Whether the file ``rel``, which the manifest's layout has when ``recorded``, is to be written: here one
        stat tells."""
        return not (self.dir / rel).exists()

    def legacy(self) -> list[Path]:
        """The table folders of the layout before the manifest (one folder per trace) the marts folder may hold."""
        if not self.dir.is_dir():
            return []
        return sorted(d for d in self.dir.iterdir() if d.is_dir() and d.name[0] not in "._")

    def part_name(self) -> str:
        """The file name of a loose partition a write puts: a new one each time (``Manifest.parts`` records it); the
        previous version stays, replaced, for the readers of the previous snapshot (``collect``).  Layouts written
        before this named every partition ``PART``; their files are read and replaced the same way."""
        return f"part-{uuid.uuid4().hex[:16]}.parquet"

    def upload(self, local: Path, rel: str) -> None:
        """Put the staged file ``local`` in place: one rename, under a name no reader reads yet."""
        place = self.dir / rel
        place.parent.mkdir(parents=True, exist_ok=True)
        os.replace(local, place)

    def delete(self, rels: list[str]) -> None:
        """Delete the files and folders ``rels``; a missing one is no error; one outside the folder is never
        deleted (``confined``)."""
        for rel in rels:
            if confined(rel):
                _remove(self.dir / rel)
                if (self.dir / rel).parent.name.startswith("trace_id="):  # a partition's last version gone
                    with contextlib.suppress(OSError):
                        (self.dir / rel).parent.rmdir()

    def journal(self, local: Path, rels: list[str]) -> None:
        """No journal: renamed files need none (a segment a killed writer renamed into place but never recorded is
        deleted by ``collect``; a loose partition it renamed is its trace's, exported again from its marker)."""
        return None

    def delete_orphans(self, local: Path, manifest: Manifest, traces: list[str] | None = None) -> None:
        """Delete the loose partition files of ``traces`` (None: every trace) that ``manifest`` neither reads nor
        keeps for readers: those a writer renamed into place and was killed before its manifest named them (its
        pending marker lists the traces, so they are the ones the next writer exports again).  Call it holding the
        writer lock."""
        known = manifest.live_files() | {rel for rel, _ in manifest.replaced}
        for table in manifest.tables:
            if traces is None:
                folders = [d.name for d in _subdirs(self.dir / table) if d.name.startswith("trace_id=")]
            else:
                folders = [f"trace_id={t}" for t in traces]
            for folder in folders:
                rel = f"{table}/{folder}"
                for name in self.names(rel):
                    if name.endswith(".parquet") and f"{rel}/{name}" not in known and not (
                            name == PART and rel in known):
                        (self.dir / rel / name).unlink(missing_ok=True)


class ObjectMarts(S3Store):
    """The marts on an S3-compatible store (``paths.marts = "s3://bucket/prefix"``; endpoint and credentials:
    ``taxbreak.ingest.objects.S3Settings``), on the lake's object store (``S3Store``) with the marts' own policy.
    No object is renamed or replaced in place by a write that readers may see twice: loose partitions and segments
    get new names, uploaded whole (one PUT, or a multipart upload that S3 shows only when completed), and
    ``_manifest.json`` (one PUT, written last) is the commit point."""

    def absolute(self) -> ObjectMarts:
        return self

    def stamp(self, rel: str) -> None:
        """None: no cheap version key here (it would cost a request); the caller reads the object."""
        return None

    def absent(self, rel: str, recorded: bool) -> bool:
        """Whether the object ``rel``, which the manifest's layout has when ``recorded``, is to be written: the
        manifest's word (no HEAD per table: every table of a manifest had its columns' object put with it)."""
        return not recorded

    def legacy(self) -> list[Path]:
        """None: the layout before the manifest was never on S3."""
        return []

    def part_name(self) -> str:
        """The file name of a loose partition a write puts: a new object each time (readers of the previous
        manifest still read the old one)."""
        return f"part-{uuid.uuid4().hex[:16]}.parquet"

    def upload(self, local: Path, rel: str) -> None:
        """Upload the staged file ``local`` (``S3Store.put_file``: the object appears only when complete)."""
        self.put_file(local, rel)

    def delete(self, rels: list[str]) -> None:
        """Delete the objects ``rels`` (batched: up to 1,000 per request); a missing one is no error.  (s3fs, not
        pyarrow: pyarrow leaves an empty ``folder/`` marker where it deletes a folder's last object.)"""
        rels = [rel for rel in rels if confined(rel)]  # (never a key outside the prefix)
        if rels:
            self.up.rm([self.key(rel) for rel in rels])

    def journal(self, local: Path, rels: list[str]) -> Path:
        """List the new objects ``rels`` a write is about to upload in a journal in the local marts folder
        ``local`` (``UPLOADS``), for the next writer should this one be killed before its manifest."""
        path = local / f"{UPLOADS}{uuid.uuid4().hex}.json"
        path.write_text(json.dumps(rels), encoding="utf-8")
        return path

    def delete_orphans(self, local: Path, manifest: Manifest, traces: list[str] | None = None) -> None:
        """Delete the objects of writers that died before their manifest (their journals in ``local``): those the
        manifest neither reads nor keeps for the previous snapshot's readers.  Call it holding the writer lock."""
        keep = manifest.live_files() | {rel for rel, _ in manifest.replaced}
        for journal in sorted(local.glob(f"{UPLOADS}*.json")):
            try:
                rels = json.loads(journal.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                rels = []
            self.delete([rel for rel in rels if isinstance(rel, str) and rel not in keep])
            journal.unlink(missing_ok=True)


Root = LocalMarts | ObjectMarts


def _subdirs(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _store(root: Root | Path) -> Root:
    """``root``, a local marts folder given as a path made a ``LocalMarts``."""
    return LocalMarts(root) if isinstance(root, Path) else root


def _roots(warehouse: str | os.PathLike[str]) -> tuple[Root, Path]:
    """(where the marts of ``warehouse`` live, the local marts folder: the same folder, or where the writers of
    marts on S3 stage their files and keep their markers and journals), from one reading of the setting."""

    where = _configured()
    local = _local(warehouse, where)
    return (ObjectMarts(where) if where is not None and is_s3_url(where) else LocalMarts(local)), local


def marts_root(warehouse: str | os.PathLike[str]) -> Root:
    """Where the marts of ``warehouse`` live: ``marts_dir`` (a ``LocalMarts``), or the S3 location the
    ``paths.marts`` setting names (an ``ObjectMarts``)."""
    return _roots(warehouse)[0]


def marts_location(warehouse: str | os.PathLike[str]) -> str:
    """The marts' root as the snapshot's views name it: an absolute folder, or ``s3://bucket/prefix``."""
    return str(marts_root(warehouse).absolute())


def register_filesystem(con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str] | Root) -> None:
    """Let ``con`` read the marts (and the snapshot's views over them) where they are on S3; nothing locally."""
    root = warehouse if isinstance(warehouse, LocalMarts | ObjectMarts) else marts_root(warehouse)
    root.register_filesystem(con)


def _q(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def _lit(text: str) -> str:
    """A SQL string literal for DDL (DuckDB binds no parameters in CREATE VIEW / COMMENT ON / ATTACH / COPY); the
    texts are this module's own paths, trace ids checked against ``_ID``, the warehouse's type names and the sql/
    headers' comments."""
    return "'" + text.replace("'", "''") + "'"


def _check_id(trace_id: str) -> str:
    if not _ID.fullmatch(trace_id):
        raise ValueError(f"trace id {trace_id!r} cannot name a partition folder")
    return trace_id


def _loose_rel(table: str, trace_id: str) -> str:
    return f"{table}/trace_id={trace_id}"


def _segment_rel(table: str, segment: str) -> str:
    return f"{table}/seg-{segment}.parquet"


def _cross_trace_names() -> set[str]:
    return {f.name for f in sql_files() if f.scope == "cross_trace"}


def policy(compact_loose: int | None = None, fanout: int | None = None) -> tuple[int, int]:
    """(loose traces that trigger a compaction, segments of one tier that are merged): the arguments, else the
    ``marts.compact_loose`` and ``marts.compact_fanout`` settings."""

    loose = int(setting("marts.compact_loose").value if compact_loose is None else compact_loose)
    fan = int(setting("marts.compact_fanout").value if fanout is None else fanout)
    if loose < 1 or fan < 2:
        raise ConfigError(f"marts.compact_loose must be at least 1 and marts.compact_fanout at least 2 "
                          f"(got {loose} and {fan})")
    return loose, fan


def _keep_replaced_s() -> float:
    return float(setting("marts.keep_replaced_s").value)


def tier(traces: int, compact_loose: int, fanout: int) -> int:
    """The tier of a segment of ``traces`` traces: 0 below ``compact_loose * fanout``, k when it holds at least
    ``compact_loose * fanout**k``."""
    k = 0
    while traces >= compact_loose * fanout ** (k + 1):
        k += 1
    return k


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


# -- the manifest ----------------------------------------------------------------------------------------------------
@dataclass
class Manifest:
    """The layout of the marts (module doc).  ``traces``: trace id -> [segment id, or "" when loose; ``mask``: bit i
    set when the trace has rows in ``tables[i]``; ``off``: bit i set when the segment's rows of ``tables[i]`` are no
    longer the trace's (a write of some tables since: those rows are a loose partition, or none), 0 when loose].
    ``segments``: id -> {"tier", "seq", "traces" (sorted), "files" (table -> file name)}.  ``replaced``: [path
    relative to the marts folder, unix time replaced (0: delete at once)].  ``parts``: loose partition folder
    (``<table>/trace_id=<id>``) -> its file's name where it is not ``part-0.parquet`` (every write of a
    partition is a new file, locally too; ``live_files`` and ``replaced`` then name the file, not the folder);
    absent in a layout written before versioned names (every partition ``PART``)."""

    tables: list[str]
    columns: dict[str, list[list[str]]]
    segments: dict[str, dict] = field(default_factory=dict)
    traces: dict[str, list] = field(default_factory=dict)
    replaced: list[list] = field(default_factory=list)
    seq: int = 0
    parts: dict[str, str] = field(default_factory=dict)

    def part(self, table: str, trace_id: str) -> str:
        """The file name of the trace's loose partition of ``table``."""
        return self.parts.get(_loose_rel(table, trace_id), PART) if self.parts else PART

    def loose_rels(self) -> set[str]:
        """The loose partitions' folders (``<table>/trace_id=<id>``)."""
        out: set[str] = set()
        for tid in self.traces:
            bits = self.loose_mask(tid)
            out |= {_loose_rel(t, tid) for i, t in enumerate(self.tables) if bits >> i & 1}
        return out

    def bit(self, table: str) -> int:
        return 1 << self.tables.index(table)

    def loose_mask(self, trace_id: str) -> int:
        """The tables (bits) whose rows of the trace are a loose partition."""
        return _loose_bits(self.traces[trace_id])

    def loose(self) -> list[str]:
        """The traces with a loose partition in some table (those the next compaction moves into a segment)."""
        return sorted(t for t in self.traces if self.loose_mask(t))

    def superseded(self, segment: str, table: str | None = None) -> list[str]:
        """The traces of a segment whose rows there are no longer current (written again, or gone); with ``table``,
        also those whose rows of that table only were written again since."""
        off = self.bit(table) if table in self.tables else 0
        out = []
        for t in self.segments[segment]["traces"]:
            where, _mask, gone = self.traces.get(t, ("", 0, 0))
            if where != segment or gone & off:
                out.append(t)
        return out

    def live_files(self) -> set[str]:
        """Every file (segment) and folder (loose partition) the layout reads, relative to the marts folder."""
        out = {_segment_rel(t, sid) for sid, s in self.segments.items() for t in s["files"]}
        if self.parts:
            return out | {f"{rel}/{self.parts[rel]}" if rel in self.parts else rel for rel in self.loose_rels()}
        return out | self.loose_rels()

    def sources(self, table: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
        """What a reader of ``table`` reads: the files to read whole (segments without superseded traces, then the
        loose partitions) and the segments to read without some traces; paths relative to the marts folder."""
        whole: list[str] = []
        partial: list[tuple[str, list[str]]] = []
        for sid, s in sorted(self.segments.items(), key=lambda kv: kv[1]["seq"]):
            if table not in s["files"]:
                continue
            gone = self.superseded(sid, table)
            if gone:
                partial.append((f"{table}/{s['files'][table]}", gone))
            else:
                whole.append(f"{table}/{s['files'][table]}")
        if table in self.tables:
            bit = self.bit(table)
            whole += [f"{_loose_rel(table, t)}/{self.part(table, t)}" for t in sorted(self.traces)
                      if self.loose_mask(t) & bit]
        return whole, partial

    def to_json(self) -> str:
        data = {"version": _VERSION, "tables": self.tables, "columns": self.columns, "seq": self.seq,
                "segments": self.segments, "traces": self.traces, "replaced": self.replaced}
        if self.parts:
            data["parts"] = self.parts
        return json.dumps(data, separators=(",", ":"))


def _loose_bits(entry: list) -> int:
    """The tables (bits) of a trace's manifest entry whose rows are a loose partition."""
    where, mask, off = entry
    return mask if where == "" else mask & off


_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=-]*\.parquet")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")


def confined(rel: object) -> bool:
    """Whether ``rel`` names a place inside the marts folder: a relative path of plain names (no ``..``, no
    absolute path, no backslash, no empty part)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def manifest_problem(m: Manifest) -> str | None:
    """Why the manifest ``m`` is not to be acted on (a path it names would leave the marts folder, or a name is
    not one a writer gives), or None.  Writers check it before they delete or replace anything it names
    (issue 30: a forged manifest must not make the next writer delete a folder outside the warehouse)."""
    for t in m.tables:
        if not isinstance(t, str) or not _TABLE.fullmatch(t):
            return f"tables: {t!r} is not a table name"
    for sid, seg in m.segments.items():
        if not isinstance(sid, str) or not _SEGMENT.fullmatch(sid):
            return f"segments: {sid!r} is not a segment id"
        if not isinstance(seg, dict) or not isinstance(seg.get("files"), dict) or \
                not isinstance(seg.get("traces"), list):
            return f"segments.{sid}: no files or traces"
        for table, name in seg["files"].items():
            if table not in m.tables or not isinstance(name, str) or not _FILE.fullmatch(name):
                return f"segments.{sid}.files: {table!r} -> {name!r} is not a segment file of a table"
    for tid, entry in m.traces.items():
        if not _ID.fullmatch(tid):
            return f"traces: {tid!r} is not a trace id"
        if entry[0] and entry[0] not in m.segments:
            return f"traces.{tid}: segment {entry[0]!r} is not in segments"
    for item in m.replaced:
        if not isinstance(item, list) or len(item) != 2 or not confined(item[0]):
            return f"replaced: {item!r} is not a path inside the marts folder"
    for rel, name in m.parts.items():
        if not confined(rel) or not isinstance(name, str) or not _FILE.fullmatch(name):
            return f"parts: {rel!r} -> {name!r} is not a partition file inside the marts folder"
    return None


def load_manifest(root: Root | Path) -> Manifest | None:
    """The manifest of the marts ``root`` (a store, or a local marts folder); None when there is none (or it cannot
    be read, or ``manifest_problem`` finds a path in it outside the marts folder: the next writer then rewrites the
    marts whole, deleting only what it finds in the folder itself)."""
    return _load(root)[0]


def _load(root: Root | Path) -> tuple[Manifest | None, str | None]:
    """(the manifest, or None; why a manifest that exists is not acted on, or None)."""
    try:
        text = _store(root).read_text(MANIFEST)
        if text is None:
            return None, None
        data = json.loads(text)
        if data.get("version") not in (1, _VERSION):
            return None, f"version {data.get('version')!r} is not one this taxbreak writes"
        # version 1 (one place per trace for every table): [where, mask]
        traces = {t: [e[0], int(e[1]), int(e[2]) if len(e) > 2 else 0] for t, e in data["traces"].items()}
        m = Manifest(tables=list(data["tables"]), columns=dict(data["columns"]), segments=dict(data["segments"]),
                     traces=traces, replaced=list(data["replaced"]), seq=int(data["seq"]),
                     parts=dict(data.get("parts", {})))
    except OSError as exc:
        return None, f"cannot be read ({exc})"
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        return None, f"is not a manifest this taxbreak writes ({type(exc).__name__}: {exc})"
    problem = manifest_problem(m)
    return (None, problem) if problem is not None else (m, None)


REFUSED_SUFFIX = ".refused"  # <marts>/_manifest.json.refused: the last manifest a writer would not act on


def refuse_manifest(root: Root, local: Path, problem: str) -> str:
    """Say (``log``: a warning on stderr, in the Dagster step's log) that the manifest of ``root`` is not acted on
    and why; a local one is kept as ``_manifest.json.refused`` for whoever looks into it.  Returns the message.
    The write then rewrites the marts whole from the warehouse, deleting nothing the refused manifest names (issue
    30: a forged manifest was ignored in silence)."""
    kept = ""
    if isinstance(root, LocalMarts):
        with contextlib.suppress(OSError):
            os.replace(root.dir / MANIFEST, root.dir / (MANIFEST + REFUSED_SUFFIX))
            kept = f"; kept as {root.dir / (MANIFEST + REFUSED_SUFFIX)}"
    message = (f"taxbreak: {root.path(MANIFEST)}: refused, not acted on: {problem} — the marts are rewritten whole "
               f"from the warehouse, deleting nothing it names{kept}")
    log.warning(message)
    return message


def _save_manifest(root: Root, manifest: Manifest) -> None:
    root.put_text(MANIFEST, manifest.to_json())  # the new manifest whole, or the old one (a rename, or one PUT)


_READ_CACHE: dict[str, tuple[tuple[int, int, int], Manifest]] = {}


def _read_manifest(root: Root) -> Manifest | None:
    """``load_manifest`` for readers that do not change it, parsed once per version of the file (locally)."""
    key = root.stamp(MANIFEST)
    if key is None:  # missing (``load_manifest`` says None), or no version key (S3): read it
        return load_manifest(root)
    hit = _READ_CACHE.get(str(root))
    if hit is not None and hit[0] == key:
        return hit[1]
    manifest = load_manifest(root)
    if manifest is not None:
        _READ_CACHE.clear()
        _READ_CACHE[str(root)] = (key, manifest)
    return manifest


def partitions(table_dir: Path) -> dict[str, Path]:
    """trace id -> the file or folder holding its published rows of one table (its segment file, or its loose
    partition's folder), from the manifest: no listing of the traces' folders."""
    manifest = _read_manifest(LocalMarts(table_dir.parent))
    table = table_dir.name
    if manifest is None:  # a marts folder no writer of this layout has published yet
        if not table_dir.is_dir():
            return {}
        return {p.name.split("=", 1)[1]: p for p in table_dir.iterdir()
                if p.is_dir() and p.name.startswith("trace_id=") and any(p.glob("*.parquet"))}
    if table not in manifest.tables:
        return {}
    bit = manifest.bit(table)
    segment = {sid: table_dir / s["files"][table] for sid, s in manifest.segments.items() if table in s["files"]}
    return {t: table_dir / f"trace_id={t}" if manifest.loose_mask(t) & bit else segment[where]
            for t, (where, mask, _off) in manifest.traces.items() if mask & bit}


def trace_counts(warehouse: str | os.PathLike[str]) -> dict[str, int]:
    """Per per-trace table, the traces with published rows in it (from the manifest, nothing listed)."""
    manifest = _read_manifest(marts_root(warehouse))
    if manifest is None:
        return {}
    masks = [mask for _, mask, _ in manifest.traces.values()]
    return {t: sum(1 for m in masks if m >> i & 1) for i, t in enumerate(manifest.tables)}


# -- pending markers -------------------------------------------------------------------------------------------------
def mark_pending(warehouse: str | os.PathLike[str], traces: list[str] | None, tables: list[str] | None = None) -> Path:
    """Record, before a write, which traces it will touch (None: all) and in which per-trace tables (None: any), so
    a writer that dies is caught up."""
    d = marts_dir(warehouse)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f".pending-{uuid.uuid4().hex}.json"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps({"traces": traces, "tables": tables}), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # (a full disk leaves no half-written marker)
    return path


def pending_work(warehouse: str | os.PathLike[str]) -> tuple[list[Path], list[str] | None, list[str] | None]:
    """The markers left by writers (the caller's own included) and the union of their traces and of the tables of
    those with traces (None when one covered every trace, or any table; an unreadable marker covers everything)."""
    d = marts_dir(warehouse)
    markers = sorted(d.glob(".pending-*.json")) if d.is_dir() else []
    traces: set[str] | None = set()
    tables: set[str] | None = set()
    for m in markers:
        try:
            data = json.loads(m.read_text(encoding="utf-8"))
            got, names = data["traces"], data.get("tables")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            got = names = None  # unreadable: export everything
        if got is None:
            traces = None
        elif traces is not None:
            traces |= set(got)
        if got == []:
            continue  # (no traces: its tables change no trace's rows)
        if names is None:
            tables = None
        elif tables is not None:
            tables |= set(names)
    return markers, (sorted(traces) if traces is not None else None), (sorted(tables) if tables is not None else None)


def pending(warehouse: str | os.PathLike[str]) -> tuple[list[Path], list[str] | None]:
    """The markers left by earlier writers and the union of their traces (None when one covered every trace)."""
    markers, traces, _tables = pending_work(warehouse)
    return markers, traces


# -- export ----------------------------------------------------------------------------------------------------------
class _Write:
    """One export's staged files: place (relative to the marts root) -> the temporary file to put there.  Files are
    staged in the local marts folder ``local`` (the root itself unless the marts are on S3)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, root: Root, local: Path) -> None:
        self.con = con
        self.root = root
        self.stage = local / f".staging-{uuid.uuid4().hex}"
        self.staged: dict[str, Path] = {}
        self.written: dict[str, int] = {}

    def tmp(self, table: str, name: str) -> Path:
        path = self.stage / table / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def put(self, tmp: Path, place: str, table: str | None = None) -> None:
        self.staged[place] = tmp
        if table is not None:
            self.written[table] = self.written.get(table, 0) + 1

    def copy(self, select: str, tmp: Path) -> None:
        self.con.execute(f"COPY ({select}) TO {_lit(str(tmp))} (FORMAT parquet, COMPRESSION zstd)")

    def current(self, rel: str) -> Path | str:
        """A file of the layout where it is now: staged by this write, else in place."""
        staged = self.staged.get(rel)
        return staged if staged is not None else self.root.path(rel)

    def put_part(self, m: Manifest, tmp: Path, table: str, trace_id: str) -> None:
        """Stage the trace's loose partition of ``table``, under the name the store gives it (``part_name``:
        locally always ``PART``, on S3 a new object each time, recorded in ``m.parts``)."""
        rel, name = _loose_rel(table, trace_id), self.root.part_name()
        self.put(tmp, f"{rel}/{name}", table)
        if name != PART:
            m.parts[rel] = name


def export(
    con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str], traces: list[str] | None, *,
    tables: list[str] | None = None, compact_loose: int | None = None, fanout: int | None = None,
) -> dict[str, int]:
    """Publish the marts of ``traces`` (None: every trace) of the per-trace ``tables`` (None: every one; the
    tables the write changed) and compact them when due (module doc); returns the files written per table.  A
    per-trace table new to the layout is published for every trace it has rows of; one whose columns changed
    makes a whole rewrite.  Call it holding the writer lock, after the write committed; then ``build_snapshot``
    (the readers' commit point) and ``collect``."""

    loose_at, fan = policy(compact_loose, fanout)
    root, local = _roots(warehouse)
    local.mkdir(parents=True, exist_ok=True)
    root.register_filesystem(con)  # (on S3) compaction reads the segments in place
    found = warehouse_tables(con)
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    per_trace = per_trace_tables(found)
    columns = {t: [[c, typ] for c, typ, _ in found[t]] for t in per_trace}
    for stale in local.glob(".staging-*"):  # left by a killed writer (this one holds the lock)
        shutil.rmtree(stale, ignore_errors=True)
    for stale in local.glob(f".{MANIFEST}.*.tmp"):
        stale.unlink(missing_ok=True)
    old, problem = _load(root)
    if problem is not None:
        refuse_manifest(root, local, problem)
    if old is not None:
        root.delete_orphans(local, old, traces)  # (on S3: journals; locally: partition files no manifest names)
    w = _Write(con, root, local)
    now = time.time()
    fresh: list[str] = []  # on S3: the new objects this write puts, deleted again if it fails before its manifest
    journal: Path | None = None
    committed = False
    try:
        whole = traces is None or old is None or any(old.columns[t] != columns[t] for t in old.tables
                                                     if t in columns)
        if whole:
            new = _whole(w, db, per_trace, columns, old, loose_at, fan)
            at_once: set[str] = set()
        else:
            new = _retable(old, per_trace, columns)
            wanted = None if tables is None else set(tables) & set(per_trace)
            work: dict[str, set[str] | None] = {t: wanted for t in traces}
            for table in sorted(set(per_trace) - set(old.tables)):  # new to the layout: every trace it has rows of
                for (tid,) in con.execute(f"SELECT DISTINCT trace_id FROM {_q(db)}.main.{_q(table)} "
                                          "WHERE trace_id IS NOT NULL").fetchall():
                    if tid not in work or work[tid] is not None:
                        work[tid] = (work.get(tid) or set()) | {table}
            at_once = _traces(w, db, new, work)
            _compact(w, new, loose_at, fan, at_once)
        for table in per_trace:  # the table's columns for readers when no trace has rows
            place = f"{table}/{EMPTY}"
            if whole or root.absent(place, recorded=table in old.tables):
                tmp = w.tmp(table, EMPTY)
                con.sql(f"SELECT * FROM {_q(db)}.main.{_q(table)} LIMIT 0").write_parquet(str(tmp))
                w.put(tmp, place)
        for table in sorted(set(found) - set(per_trace)):  # the cross-trace tables, whole (small)
            tmp = w.tmp(".cross", f"{table}.parquet")
            w.copy(f"SELECT * FROM {_q(db)}.main.{_q(table)}", tmp)
            w.put(tmp, f"{table}.parquet")
        if new.parts:  # (only the loose partitions' names)
            loose = new.loose_rels()
            new.parts = {rel: name for rel, name in new.parts.items() if rel in loose}
        # what the previous layout read and this one does not: kept for the readers of the previous snapshot; all
        # of it deleted after this write's snapshot when a trace was forgotten (it may be in any of them)
        before = old.live_files() if old is not None else _legacy_files(root)
        after = new.live_files()
        # a partition folder of the layout before versioned names (one ``PART`` file) whose trace now has a new
        # file in that folder: only the old file is replaced, never the folder
        folders = {rel.rsplit("/", 1)[0] for rel in after if rel.rsplit("/", 1)[-1].startswith("part-")}
        before = {f"{rel}/{PART}" if rel in folders else rel for rel in before}
        new.replaced += [[rel, now] for rel in sorted(before - after)]
        if old is not None and set(old.traces) - set(new.traces):  # a trace forgotten: no copy of it stays
            new.replaced = [[rel, 0] for rel, _ in new.replaced]
        fault_point("marts_staged", w.stage)
        # every file of the write is staged: put them in place, one rename each (on S3 one upload each, under
        # names no reader reads yet, but for the columns and cross-trace files, after a local journal of those new
        # names for the next writer should this one be killed), then the manifest
        fresh = [rel for rel in w.staged if "/" in rel and not rel.endswith(f"/{EMPTY}")]
        journal = root.journal(local, fresh)  # (on S3; None locally)
        for rel, tmp in w.staged.items():
            root.upload(tmp, rel)
        fault_point("marts_renamed")
        _save_manifest(root, new)
        committed = True
        fault_point("marts_committed")
    finally:
        shutil.rmtree(w.stage, ignore_errors=True)
        if journal is not None:
            if not committed:  # no manifest names them: no reader reads them
                with contextlib.suppress(OSError):
                    root.delete(fresh)
                    journal.unlink(missing_ok=True)  # (kept when the deletion failed: the next writer retries it)
            else:
                journal.unlink(missing_ok=True)
    return w.written


def _legacy_files(root: Root) -> set[str]:
    """The files of a marts folder without a manifest (the layout before it: one folder per trace), to replace."""
    out: set[str] = set()
    for d in root.legacy():
        out |= {f"{d.name}/{p.name}" for p in d.iterdir()
                if p.name.startswith("trace_id=") or p.name.startswith("seg-") or p.name == LEGACY_COLUMNS}
    return out


def _segment(w: _Write, m: Manifest, selects: dict[str, str], traces: list[str], loose_at: int, fan: int) -> str:
    """A segment of ``traces``: per table, the rows ``selects[table]`` (a SELECT) returns, sorted by trace, in one
    file; recorded in ``m`` (numbered by its ``seq``); returns its id.  The traces' entries are the caller's."""
    m.seq += 1
    sid = f"{m.seq:06d}-{uuid.uuid4().hex[:8]}"
    files = {}
    for table, select in selects.items():
        name = f"seg-{sid}.parquet"
        tmp = w.tmp(table, name)
        w.copy(f"SELECT * FROM ({select}) ORDER BY trace_id", tmp)
        w.put(tmp, f"{table}/{name}", table)
        files[table] = name
    m.segments[sid] = {"tier": tier(len(traces), loose_at, fan), "seq": m.seq, "traces": sorted(traces),
                       "files": files}
    return sid


def _whole(w: _Write, db: str, per_trace: list[str], columns: dict[str, list[list[str]]], old: Manifest | None,
           loose_at: int, fan: int) -> Manifest:
    """Every trace of every per-trace table, from the warehouse: one segment when there are at least
    ``loose_at`` traces, else one loose partition per trace and table."""
    new = Manifest(tables=per_trace, columns=columns, seq=old.seq if old is not None else 0,
                   replaced=[list(r) for r in old.replaced] if old is not None else [])
    masks: dict[str, int] = {}
    for i, table in enumerate(per_trace):
        for (tid,) in w.con.execute(f"SELECT DISTINCT trace_id FROM {_q(db)}.main.{_q(table)} "
                                    "WHERE trace_id IS NOT NULL").fetchall():
            masks[_check_id(tid)] = masks.get(tid, 0) | 1 << i
    if len(masks) >= loose_at:
        selects = {table: f"SELECT * FROM {_q(db)}.main.{_q(table)}" for i, table in enumerate(per_trace)
                   if any(m >> i & 1 for m in masks.values())}
        sid = _segment(w, new, selects, sorted(masks), loose_at, fan)
        new.traces = {t: [sid, masks[t], 0] for t in sorted(masks)}
    else:
        for table in per_trace:
            for tmp, tid in _stage_whole(w.con, f"{_q(db)}.main.{_q(table)}", w.stage / table):
                w.put_part(new, tmp, table, tid)
        new.traces = {t: ["", masks[t], 0] for t in sorted(masks)}
    return new


def _retable(old: Manifest, per_trace: list[str], columns: dict[str, list[list[str]]]) -> Manifest:
    """A copy of ``old`` over the per-trace tables ``per_trace`` (a table added: no rows yet; one gone: its bits and
    its segment files dropped), to change."""
    index = {t: i for i, t in enumerate(per_trace)}
    moves = [(i, index[t]) for i, t in enumerate(old.tables) if t in index]

    def bits(mask: int) -> int:
        return sum(1 << j for i, j in moves if mask >> i & 1)

    segments = {sid: {**s, "traces": list(s["traces"]), "files": {t: f for t, f in s["files"].items() if t in index}}
                for sid, s in old.segments.items()}
    traces = {t: [where, bits(mask), bits(off)] for t, (where, mask, off) in old.traces.items() if bits(mask)}
    return Manifest(tables=list(per_trace), columns=columns, segments=segments, traces=traces,
                    replaced=[list(r) for r in old.replaced], seq=old.seq,
                    parts={rel: n for rel, n in old.parts.items() if rel.split("/", 1)[0] in index})


def _traces(w: _Write, db: str, m: Manifest, work: dict[str, set[str] | None]) -> set[str]:
    """Per trace of ``work``, its partitions of the tables named there (None: every table), from the warehouse, as
    loose partitions; ``m`` changed to match.  Returns the files to delete after this write's snapshot (those of
    traces with no rows any more: forgotten)."""
    before = {t: list(m.traces[t]) for t in work if t in m.traces}
    at_once: set[str] = set()
    for tid in sorted(work):
        _check_id(tid)
        where, mask, off = m.traces.get(tid, ["", 0, 0])
        names = work[tid]
        for i, table in enumerate(m.tables):
            if names is not None and table not in names:
                continue
            tmp = w.tmp(table, f"trace_id={tid}.parquet")
            rows = w.con.sql(f"SELECT * FROM {_q(db)}.main.{_q(table)}").filter(
                duckdb.ColumnExpression("trace_id") == duckdb.ConstantExpression(tid))
            rows.write_parquet(str(tmp), compression="zstd")
            off |= 1 << i  # its segment's rows of this table (if any) are not its rows any more
            if _rows(tmp):
                mask |= 1 << i
                w.put_part(m, tmp, table, tid)
            else:
                mask &= ~(1 << i)
                tmp.unlink()
        if where == "" or not mask & ~off:  # nothing of it read from a segment: loose
            where, off = "", 0
        if mask:
            m.traces[tid] = [where, mask, off]
            continue
        m.traces.pop(tid, None)  # no rows anywhere (forgotten): nothing of it stays on disk
        if tid in before:
            bits = _loose_bits(before[tid])
            at_once |= {_loose_rel(t, tid) for i, t in enumerate(m.tables) if bits >> i & 1}
        for sid, s in m.segments.items():
            if tid in s["traces"]:
                at_once |= {_segment_rel(t, sid) for t in s["files"]}
    return at_once


def _read(path: Path | str, without: list[str] | None = None, only: list[str] | None = None) -> str:
    where = ""
    if without:
        where = f" WHERE trace_id NOT IN ({', '.join(_lit(_check_id(t)) for t in without)})"
    elif only is not None:
        where = f" WHERE trace_id IN ({', '.join(_lit(_check_id(t)) for t in only)})"
    return f"SELECT * FROM read_parquet({_lit(str(path))}){where}"


def _compact(w: _Write, m: Manifest, loose_at: int, fan: int, at_once: set[str]) -> None:
    """Compact ``m`` in place (module doc): the traces with loose partitions into a segment once there are
    ``loose_at`` of them (with their rows of the other tables from the segments that hold them); ``fan`` segments of
    one tier into one; a segment holding a forgotten trace, or with half its traces superseded, rewritten alone."""
    loose = m.loose()
    if len(loose) >= loose_at:
        selects = {}
        for i, table in enumerate(m.tables):
            parts = [_read(w.current(f"{_loose_rel(table, t)}/{m.part(table, t)}")) for t in loose
                     if m.loose_mask(t) >> i & 1]
            held: dict[str, list[str]] = {}  # segment -> the traces whose rows of this table are still there
            for t in loose:
                where, mask, off = m.traces[t]
                if where and (mask & ~off) >> i & 1 and table in m.segments[where]["files"]:
                    held.setdefault(where, []).append(t)
            parts += [_read(w.current(_segment_rel(table, sid)), only=ts) for sid, ts in sorted(held.items())]
            if parts:
                selects[table] = " UNION ALL ".join(parts)
        staged = {t: m.loose_mask(t) for t in loose}
        sid = _segment(w, m, selects, loose, loose_at, fan)
        for t in loose:
            m.traces[t] = [sid, m.traces[t][1], 0]
            for i, table in enumerate(m.tables):  # partitions this write staged and compacted at once are never put
                place = f"{_loose_rel(table, t)}/{m.part(table, t)}"  # in place
                if staged[t] >> i & 1 and place in w.staged:
                    w.staged.pop(place)
                    w.written[table] -= 1

    def rewrite(group: list[str]) -> None:
        live = sorted({t for sid in group for t in m.segments[sid]["traces"] if m.traces.get(t, ("",))[0] == sid})
        if live:
            selects = {table: " UNION ALL ".join(parts) for table in m.tables if (parts := [
                _read(w.current(_segment_rel(table, sid)), m.superseded(sid, table)) for sid in group
                if table in m.segments[sid]["files"]])}
            sid = _segment(w, m, selects, live, loose_at, fan)
            for t in live:  # (the tables written since stay where they are: ``off`` unchanged)
                m.traces[t][0] = sid
        for sid in group:  # a segment staged by this write and merged at once is never put in place
            for table in m.segments.pop(sid)["files"]:
                place = _segment_rel(table, sid)
                if place in w.staged:
                    w.staged.pop(place)
                    w.written[table] -= 1

    for sid in [s for s in m.segments if any(_segment_rel(t, s) in at_once for t in m.segments[s]["files"])]:
        rewrite([sid])  # it holds a forgotten trace
    for sid in list(m.segments):
        if sid in m.segments and 2 * len(m.superseded(sid)) >= len(m.segments[sid]["traces"]):
            rewrite([sid])  # half of it superseded
    while True:
        by_tier: dict[int, list[str]] = {}
        for sid, s in sorted(m.segments.items(), key=lambda kv: kv[1]["seq"]):
            by_tier.setdefault(s["tier"], []).append(sid)
        full = [sids for _, sids in sorted(by_tier.items()) if len(sids) >= fan]
        if not full:
            return
        rewrite(full[0][:fan])


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(str(path)).num_rows


def _stage_whole(con: duckdb.DuckDBPyConnection, target: str, stage: Path) -> list[tuple[Path, str]]:
    """Every trace's partition of the table ``target`` (quoted, qualified) written under ``stage`` in one pass
    (DuckDB's partitioned COPY): [(its file, its trace)]."""
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
        out.append((files[0], _check_id(tid)))
    return out


# -- after the snapshot: replaced files ------------------------------------------------------------------------------
COLLECT_PER_WRITE = 100  # replaced files a write for some traces deletes at most (``collect``'s ``limit``)


def collect(warehouse: str | os.PathLike[str], keep_s: float | None = None, limit: int | None = None) -> list[str]:
    """Delete the files the layout replaced more than ``keep_s`` (default: the ``marts.keep_replaced_s`` setting)
    ago, at most ``limit`` of them (None: all), the oldest first, those of forgotten traces at once, and segments a
    killed writer put in place but never recorded; returns what was deleted (relative to the marts folder).  Call
    it holding the writer lock, after the snapshot.

    The limit bounds one write's share when many files expire together (a whole rewrite replaces every file of
    the layout before it: 22 per trace when its traces were loose; deleting 1,604 replaced files took 1.6 s on 2
    loaded cores); a write for one trace replaces a few tens of files on average (its loose partitions, later its
    share of the merged segments), so ``COLLECT_PER_WRITE`` per write still deletes them faster than they come."""
    root, local = _roots(warehouse)
    manifest = load_manifest(root)
    if manifest is None:
        return []
    keep_s = _keep_replaced_s() if keep_s is None else keep_s
    now = time.time()
    oldest = oldest_reader(local)
    live = manifest.live_files()
    kept: list[list] = []
    deleted: list[str] = []
    budget = limit
    for rel, since in manifest.replaced:
        if rel in live:
            continue  # in use again (a trace written loose again after its partition was compacted)
        # a reader that opened before the snapshot without this file was published may still read it: kept while
        # one is open (its pin is older than the replacement plus the grace that covers the writer's own time)
        held = oldest is not None and oldest < since + keep_s
        if since and (now - since < keep_s or budget == 0 or held):
            kept.append([rel, since])
            continue
        deleted.append(rel)
        if since and budget is not None:
            budget -= 1
    known = live | {rel for rel, _ in kept} | set(deleted)
    for table in manifest.tables:  # segments a killed writer renamed into place before its manifest: one listing
        for name in root.names(table):  # per table, then one deletion for all (on S3 batched)
            rel = f"{table}/{name}"
            if name.startswith("seg-") and name.endswith(".parquet") and rel not in known:
                deleted.append(rel)
    root.delete(deleted)
    if deleted or len(kept) != len(manifest.replaced):
        manifest.replaced = kept
        _save_manifest(root, manifest)
    return deleted


# -- readers' pins ---------------------------------------------------------------------------------------------------
READERS_DIR = ".readers"  # <local marts>/.readers/<random>.pin: one per open reader of the snapshot or the marts


def pin_reader(warehouse: str | os.PathLike[str]) -> IO[str] | None:
    """Say that a reader is about to open the snapshot (or the marts) of ``warehouse``: a pin file in the local
    marts folder, locked while the returned file is open (``unpin_reader`` when the reader's connection closes), named
    with the time it was taken.  ``collect`` deletes no replaced file such a reader may hold while the pin is held
    (issue 30: a ``sql`` session saw one query return one value, then another).  None when the folder cannot be
    written (a reader without write access to it): such a reader is covered by ``marts.keep_replaced_s`` only."""
    folder = marts_dir(warehouse) / READERS_DIR
    if not folder.parent.is_dir():  # no marts yet: nothing a writer could delete under the reader
        return None
    try:
        folder.mkdir(exist_ok=True)
        fh = open(folder / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.pin", "w")  # noqa: SIM115 - held open
    except OSError:
        return None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    return fh


def unpin_reader(pin: IO[str]) -> None:
    """The reader of ``pin_reader`` closed: its pin file removed and its lock released."""
    with contextlib.suppress(OSError):
        os.unlink(pin.name)
    pin.close()


def oldest_reader(local: Path) -> float | None:
    """The time (unix seconds) the oldest reader still open took its pin (``pin_reader``), or None; the pins of
    readers gone (their lock released) are removed.  Call it holding the writer lock."""
    oldest: float | None = None
    folder = local / READERS_DIR
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    for name in names:
        path = folder / name
        try:
            taken = int(name.split("-", 1)[0]) / 1e9
            fh = open(path, "a")  # noqa: SIM115
        except (ValueError, OSError):
            continue
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a reader still open
            oldest = taken if oldest is None else min(oldest, taken)
        else:
            path.unlink(missing_ok=True)  # its reader closed (or died)
        finally:
            fh.close()
    return oldest


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# -- readers ---------------------------------------------------------------------------------------------------------
def _reader_root(warehouse: str | os.PathLike[str]) -> Root:
    """The marts' root as readers name its files: an absolute folder, or the S3 location."""
    return marts_root(warehouse).absolute()


def view_select(con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str], table: str,
                manifest: Manifest | None = None, root: Root | None = None) -> str | None:
    """The SELECT a reader runs for the per-trace ``table``: ``read_parquet`` of the manifest's files (absolute
    paths or ``s3://`` URLs, no glob, no hive partitioning), the segments' superseded traces left out, each column
    cast to the warehouse's type where Parquet holds another (HUGEINT is written as DOUBLE); None when no trace has
    rows.  With the marts on S3, ``con`` must have their filesystem registered (``register_filesystem``)."""
    root = root if root is not None else _reader_root(warehouse)
    manifest = manifest if manifest is not None else load_manifest(root)
    if manifest is None or table not in manifest.columns:
        return None
    whole, partial = manifest.sources(table)
    if not whole and not partial:
        return None
    first = root.path(whole[0] if whole else partial[0][0])
    stored = dict((r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({_lit(first)})")
                  .fetchall())
    select = ", ".join(_q(c) if stored.get(c) == typ else f"CAST({_q(c)} AS {typ}) AS {_q(c)}"
                       for c, typ in manifest.columns[table])

    def read(paths: list[str]) -> str:
        files = "[" + ", ".join(_lit(root.path(p)) for p in paths) + "]"
        return f"SELECT {select} FROM read_parquet({files}, hive_partitioning = false)"

    branches = [read(whole)] if whole else []
    for path, gone in partial:
        branches.append(read([path]) + f" WHERE trace_id NOT IN ({', '.join(_lit(t) for t in gone)})")
    return " UNION ALL ".join(branches)


def build_snapshot(con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str], tmp: Path) -> None:
    """Write the readers' snapshot to ``tmp`` (renamed into place by the caller): views over the marts' files for
    the per-trace tables (``view_select``), copies of the others, with the warehouse's comments."""
    tables = warehouse_tables(con)
    root = _reader_root(warehouse)
    manifest = load_manifest(root)
    if manifest is not None:
        root.register_filesystem(con)  # (on S3)
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    comments = dict(con.execute(
        "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = $db AND schema_name = 'main'",
        {"db": db}).fetchall())
    alias = f"_snapshot_{uuid.uuid4().hex[:8]}"
    con.execute(f"ATTACH {_lit(str(tmp))} AS {_q(alias)}")
    try:
        con.execute("BEGIN TRANSACTION")  # one commit for every view, table and comment (not one each)
        for table, cols in tables.items():
            target = f"{_q(alias)}.main.{_q(table)}"
            select = view_select(con, warehouse, table, manifest, root) if manifest is not None else None
            if select is not None and manifest.columns[table] == [[c, t] for c, t, _ in cols]:
                con.execute(f"CREATE VIEW {target} AS {select}")
                kind = "VIEW"
            else:  # a small cross-trace table, or a per-trace table without rows: a copy
                con.execute(f"CREATE TABLE {target} AS SELECT * FROM {_q(db)}.main.{_q(table)}")
                kind = "TABLE"
            if comments.get(table):
                con.execute(f"COMMENT ON {kind} {target} IS {_lit(comments[table])}")
            for c, _t, comment in cols:
                if comment:
                    con.execute(f"COMMENT ON COLUMN {target}.{_q(c)} IS {_lit(comment)}")
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # (none left to roll back when the COMMIT itself failed)
            con.execute("ROLLBACK")
        raise
    finally:
        con.execute(f"DETACH {_q(alias)}")


def reader_sources(con: duckdb.DuckDBPyConnection, warehouse: str | os.PathLike[str]) -> dict[str, str]:
    """Table name -> a SELECT over the marts, for a reader without the snapshot (``taxbreak.store.query``): the
    per-trace
    tables as ``view_select`` (their columns only, when no trace has rows), the cross-trace tables' files.  Registers
    the marts' filesystem on ``con`` where they are on S3."""
    root = _reader_root(warehouse)
    manifest = load_manifest(root)
    out: dict[str, str] = {}
    root.register_filesystem(con)  # (on S3)
    for name in root.names():
        if name.endswith(".parquet") and name[0] not in "._":
            out[name[:-len(".parquet")]] = f"SELECT * FROM read_parquet({_lit(root.path(name))})"
    if manifest is None:  # marts no writer of this layout has published yet: one folder per trace
        for d in root.legacy():
            if any(d.glob("trace_id=*/*.parquet")):
                out[d.name] = f"SELECT * FROM read_parquet({_lit(str(d / 'trace_id=*' / '*.parquet'))})"
    for table in manifest.tables if manifest is not None else []:
        select = view_select(con, warehouse, table, manifest, root)
        if select is None and root.is_file(f"{table}/{EMPTY}"):
            select = f"SELECT * FROM read_parquet({_lit(root.path(f'{table}/{EMPTY}'))})"
        if select is not None:
            out[table] = select
    return out
