"""The one rule for writing the DuckDB warehouse, and the consistent copy readers use while it is written.

Every writer (``taxbreak analyze``, ``taxbreak forget``, ``taxbreak retry``, each Dagster step that writes) goes
through ``writer(db)``:

1. it takes the exclusive lock ``<db>.lock`` (``flock``), waiting for another writer;
2. it opens the file read-write, waiting while a reader still holds it (DuckDB lets no process write a file that
   another process has open);
3. the work runs; each publication inside it is one transaction (``taxbreak.engine.analysis.publication``), so a killed
   writer leaves the tables as they were before it or as they are after it, never a mix;
4. on success it writes the Parquet marts of the traces the write touched (``taxbreak.store.marts``: loose
   ``marts/<table>/trace_id=<id>/`` partitions, compacted into few segment files when enough accumulate; the
   caller says which traces, ``traces=None`` meaning all, and may say which tables, ``tables=``), replaces
   ``marts/_manifest.json`` (``marts/`` beside the DuckDB file, or where the ``paths.marts`` setting says: another
   folder or ``s3://bucket/prefix``) and publishes ``exports/snapshot.duckdb``, a small file of views over exactly the
   manifest's files plus copies of the
   cross-trace tables, written beside its place and renamed into it, so a reader sees the old snapshot or the new
   one (the commit point readers see); neither grows with the traces already analysed;
5. it deletes the marts files the layout replaced long enough ago (``taxbreak.store.marts.collect``; a write for some
   traces at most ``COLLECT_PER_WRITE`` of them);
6. it releases the lock.

A writer that dies after its commit leaves a pending marker (``marts/.pending-*.json``, written when it took the
lock): the next writer exports its traces too.

Both waits are bounded by the ``analysis.writer_wait_s`` setting (``taxbreak.config``); past it the writer fails
with a message naming the file, instead of a DuckDB lock traceback.

Readers (``taxbreak sql``, ``summary``, ``report``, ``compare``: ``taxbreak.store.query.open_readonly``) read the
snapshot when it is at least as new as the warehouse file, so they never hold the file a writer needs; else the
file itself (read-only), else the snapshot, else the Parquet exports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb

from taxbreak.config import setting
from taxbreak.store import marts
from taxbreak.store.faults import fault_point
from taxbreak.store.marts import build_snapshot

SNAPSHOT_NAME = "snapshot.duckdb"


MEMORY_ENV = "TAXBREAK_DUCKDB_MEMORY"  # the environment variable of the analysis.duckdb_memory setting


def memory_limit() -> str:
    """DuckDB's memory_limit for the analyses: the ``analysis.duckdb_memory`` setting ($TAXBREAK_DUCKDB_MEMORY or
    taxbreak.toml, a DuckDB size such as '4GB'; default 512MB, which keeps the analysis's peak RSS under 1 GB).

    Operators that can spill (sorts, windows, hash joins and aggregates, the run's temporary tables) spill to the
    connection's temp_directory beyond it."""
    return str(setting("analysis.duckdb_memory").value)


def connect(warehouse_path: str | os.PathLike[str] | None) -> duckdb.DuckDBPyConnection:
    """A connection to the warehouse (None: in memory) with the analyses' settings: bounded memory (``memory_limit``)
    and a spill folder DuckDB creates when it first spills and removes on close: ``<warehouse>.tmp`` beside the
    warehouse file, or a fresh folder in the system temp dir for an in-memory warehouse."""
    if warehouse_path is not None:
        Path(warehouse_path).parent.mkdir(parents=True, exist_ok=True)
        spill = Path(str(warehouse_path) + ".tmp")
    else:
        spill = Path(tempfile.gettempdir()) / f"taxbreak-duckdb-{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp"
    con = duckdb.connect(str(warehouse_path) if warehouse_path is not None else ":memory:")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET preserve_insertion_order = false")  # no table here relies on row order; faster writes
    con.execute("SET enable_progress_bar = false")  # DuckDB would draw it on stdout once a statement runs 2 s
    # An ASOF join whose probe side DuckDB estimates at <= 64 rows becomes a nested loop + aggregate, quadratic in
    # the real rows when the estimate is wrong (a CTE behind a filter): 36 k kernels took 33 s CPU in
    # int_kernel_links instead of 0.6 s.  Same rows either way; always the ASOF operator.
    con.execute("SET asof_loop_join_threshold = 0")
    con.execute("SET memory_limit = $m", {"m": memory_limit()})
    con.execute("SET temp_directory = $t", {"t": str(spill)})
    return con


class WarehouseBusy(RuntimeError):
    """The writer lock or the file stayed held past the wait; the message says by what."""


def exports_dir(warehouse: str | os.PathLike[str]) -> Path:
    return Path(warehouse).parent / "exports"


def snapshot_path(warehouse: str | os.PathLike[str]) -> Path:
    return exports_dir(warehouse) / SNAPSHOT_NAME


def lock_path(warehouse: str | os.PathLike[str]) -> Path:
    db = Path(warehouse)
    return db.with_name(db.name + ".lock")


def _wait_s() -> float:
    return float(setting("analysis.writer_wait_s").value)


@contextlib.contextmanager
def warehouse_lock(
    db: str | os.PathLike[str], wait_s: float | None = None, on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """The exclusive lock every writer of the DuckDB file holds; waits up to ``wait_s`` (default: the setting)."""
    db = Path(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path(db)
    deadline = time.monotonic() + (_wait_s() if wait_s is None else wait_s)
    with open(path, "a+b") as lock:
        told = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WarehouseBusy(
                        f"{db}: another writer (taxbreak analyze/forget/retry or a pipeline step) still holds "
                        f"{path}; try again when it has finished") from None
                if not told and on_wait is not None:
                    on_wait(f"waiting for another writer of {db} (it holds {path})")
                    told = True
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _is_lock_error(exc: Exception) -> bool:  # also taxbreak.store.query's test for a held file
    return "lock" in str(exc).lower()


def connect_writer(
    db: Path, deadline: float, on_wait: Callable[[str], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """``connect(db)``, retried while another process (a reader) has the file open."""

    told = False
    delay = 0.05
    while True:
        try:
            return connect(db)
        except duckdb.Error as exc:
            if not _is_lock_error(exc):
                raise
            if time.monotonic() >= deadline:
                raise WarehouseBusy(
                    f"{db}: another process keeps the file open (a `taxbreak sql` prompt on the warehouse file?); "
                    f"close it and try again ({exc})") from None
            if not told and on_wait is not None:
                on_wait(f"waiting for a reader to close {db}")
                told = True
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def publish_snapshot(db: Path, con: duckdb.DuckDBPyConnection) -> Path:
    """Build the readers' snapshot (``taxbreak.store.marts.build_snapshot``) beside ``exports/snapshot.duckdb`` from the
    writer's connection and rename it into place after ``con`` is closed; call it holding the writer lock."""

    dest = snapshot_path(db)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{dest.name}.*.tmp*"):  # left by a killed writer (this one holds the lock)
        stale.unlink(missing_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    try:
        try:
            build_snapshot(con, db, tmp)
        finally:
            con.close()
        os.utime(tmp)  # at least as new as the warehouse file the close may have touched (snapshot_is_current)
        fault_point("snapshot_copied")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            Path(str(tmp) + ".wal").unlink()
    return dest


@contextlib.contextmanager
def writer(
    db: str | os.PathLike[str], *, snapshot: bool = True, read_only: bool = False,
    on_wait: Callable[[str], None] | None = None, traces: list[str] | None = None, tables: list[str] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse opened for writing under the one writer rule (see the module doc).

    ``read_only``: the same lock, a read-only connection and no snapshot (checks that must see the file as the
    writers leave it).  ``traces``: the traces whose rows the block may change (None: any), whose marts are
    rewritten; ``tables``: the per-trace tables whose rows of those traces it may change (None: any; the cross-trace
    tables are always republished whole), so a step that changes two tables does not rewrite the trace's other
    twenty.  The marts and the snapshot are published only when the block ends without an exception."""
    db = Path(db)
    wait = _wait_s()
    deadline = time.monotonic() + wait
    with warehouse_lock(db, wait, on_wait):
        if read_only:
            con = duckdb.connect(str(db), read_only=True, config={"autoinstall_known_extensions": "false"})
        else:
            con = connect_writer(db, deadline, on_wait)
        marker = None
        try:
            if not read_only and snapshot:
                marker = marts.mark_pending(db, traces, tables)  # stays if this writer dies: the next one catches up
            yield con
        except BaseException:
            con.close()
            raise
        if read_only or not snapshot:
            con.close()
            return
        markers, todo, todo_tables = marts.pending_work(db)  # this writer's and those of writers that died
        marts.export(con, db, todo, tables=todo_tables)
        con.execute("CHECKPOINT")
        publish_snapshot(db, con)  # closes con
        fault_point("snapshot_published")
        # files the layout replaced, kept a while for readers of the previous snapshot; a write for some traces
        # deletes a bounded number of them (a whole rewrite costs O(traces) anyway: all that are due)
        marts.collect(db, limit=None if todo is None else marts.COLLECT_PER_WRITE)
        for m in [*markers, marker]:
            m.unlink(missing_ok=True)


def snapshot_is_current(warehouse: str | os.PathLike[str]) -> bool:
    """The snapshot exists and is at least as new as the warehouse file (and its write-ahead log)."""
    db = Path(warehouse)
    snap = snapshot_path(db)
    try:
        snap_ns = snap.stat().st_mtime_ns
    except OSError:
        return False
    newest = 0
    for p in (db, db.with_name(db.name + ".wal")):
        with contextlib.suppress(OSError):
            newest = max(newest, p.stat().st_mtime_ns)
    return snap_ns >= newest
