"""The one rule for writing the DuckDB warehouse, and the consistent copy readers use while it is written.

Every writer (``taxbreak analyze``, ``taxbreak forget``, ``taxbreak retry``, each Dagster step that writes) goes
through ``writer(db)``:

1. it takes the exclusive lock ``<db>.lock`` (``flock``), waiting for another writer;
2. it opens the file read-write, waiting while a reader still holds it (DuckDB lets no process write a file that
   another process has open);
3. the work runs; each publication inside it is one transaction (``taxbreak.analysis.publication``), so a killed
   writer leaves the tables as they were before it or as they are after it, never a mix;
4. on success it writes the Parquet marts of the traces the write touched (``taxbreak.marts``: loose
   ``marts/<table>/trace_id=<id>/`` partitions, compacted into few segment files when enough accumulate; the
   caller says which traces, ``traces=None`` meaning all, and may say which tables, ``tables=``), replaces
   ``marts/_manifest.json`` (``marts/`` beside the DuckDB file, or where the ``paths.marts`` setting says: another
   folder or ``s3://bucket/prefix``) and publishes ``exports/snapshot.duckdb``, a small file of views over exactly the
   manifest's files plus copies of the
   cross-trace tables, written beside its place and renamed into it, so a reader sees the old snapshot or the new
   one (the commit point readers see); neither grows with the traces already analysed;
5. it deletes the marts files the layout replaced long enough ago (``taxbreak.marts.collect``; a write for some
   traces at most ``COLLECT_PER_WRITE`` of them);
6. it releases the lock.

A writer that dies after its commit leaves a pending marker (``marts/.pending-*.json``, written when it took the
lock): the next writer exports its traces too.

Both waits are bounded by the ``analysis.writer_wait_s`` setting (``taxbreak.config``); past it the writer fails
with a message naming the file, instead of a DuckDB lock traceback.

Readers (``taxbreak sql``, ``summary``, ``report``, ``compare``: ``taxbreak.query.open_readonly``) read the
snapshot when it is at least as new as the warehouse file, so they never hold the file a writer needs; else the
file itself (read-only), else the snapshot, else the Parquet exports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb

SNAPSHOT_NAME = "snapshot.duckdb"
FAULT_ENV = "TAXBREAK_FAULT_POINT"


class WarehouseBusy(RuntimeError):
    """The writer lock or the file stayed held past the wait; the message says by what."""


def exports_dir(warehouse: str | os.PathLike[str]) -> Path:
    return Path(warehouse).parent / "exports"


def snapshot_path(warehouse: str | os.PathLike[str]) -> Path:
    return exports_dir(warehouse) / SNAPSHOT_NAME


def lock_path(warehouse: str | os.PathLike[str]) -> Path:
    db = Path(warehouse)
    return db.with_name(db.name + ".lock")


def fault_point(name: str) -> None:
    """Crash-test hook: SIGKILL this process at the named point when ``$TAXBREAK_FAULT_POINT`` lists it
    (comma-separated).  Points: ``publish:<table>`` (a table written, its transaction open), ``before_commit``,
    ``after_commit`` (before the marts), ``marts_staged`` (every marts file of the write staged, none renamed into
    place), ``marts_renamed`` (renamed, the marts manifest not yet replaced), ``marts_committed`` (the manifest
    replaced, the snapshot not yet built), ``snapshot_copied`` (the snapshot written, not yet renamed into place),
    ``snapshot_published`` (renamed, replaced marts files not yet deleted)."""
    wanted = os.environ.get(FAULT_ENV)
    if wanted and name in {w.strip() for w in wanted.split(",")}:
        os.kill(os.getpid(), signal.SIGKILL)


def _wait_s() -> float:
    from taxbreak.config import setting

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


def _is_lock_error(exc: Exception) -> bool:  # also taxbreak.query's test for a held file
    return "lock" in str(exc).lower()


def connect_writer(
    db: Path, deadline: float, on_wait: Callable[[str], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """``taxbreak.analysis.connect(db)``, retried while another process (a reader) has the file open."""
    from taxbreak.analysis import connect

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
    """Build the readers' snapshot (``taxbreak.marts.build_snapshot``) beside ``exports/snapshot.duckdb`` from the
    writer's connection and rename it into place after ``con`` is closed; call it holding the writer lock."""
    from taxbreak.marts import build_snapshot

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
                from taxbreak import marts

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
