"""One run: the one entry point every writer of the analysis tables calls (``run``), and the one publisher of the
writes that are no run of the plan (``publish``: forget, the what-if rows, the request fit).

``run(paths, traces, tables, config, hooks)`` does, in this order and with these guarantees, what ``taxbreak
analyze``, ``taxbreak retry``, ``make demo`` and the Dagster ``analysis_tables`` step each did by hand before:

1. **prepare and compute** the plan's tables (``taxbreak.engine.plan``; inputs from the lake only,
``taxbreak.engine.analysis``):
   for some traces outside the writer lock, into the run's own DuckDB file (``analysis.compute_run``; runs for
   other traces compute at the same time); for every trace under the lock, straight into the warehouse inside
   the run's one transaction (every table is rewritten whole);
2. **check** the computed rows with the invariants of ``sql/checks/*.sql`` (``taxbreak.engine.checks``), before anything
   is published: a broken error-severity check raises ``taxbreak.engine.checks.InvariantBroken`` (the transaction is
   rolled back, or the run's file is never published): the tables, marts and snapshot stay as they were;
3. **publish** under the writer (``taxbreak.store.warehouse.writer``: the lock, then) in one transaction
   (``analysis.publication``): the run's traces' rows replaced (``analysis.publish_run``), then the cross-trace
   tables recomputed from every trace's rows (``cross_trace``; the Dagster step leaves them to its own step);
4. **export** when the writer ends: the Parquet marts of the run's traces and the readers' snapshot.

``hooks(event)`` is told each step (``Event``): a table started and done, the run's tables computed (with the
connection that holds them), each check's result, the publication done.  The CLI prints progress from them, Dagster
turns them into its materialisation and check events.

``publish(paths, write, ...)`` is steps 3 and 4 for a write that is no plan run: ``write(con)`` in one publication
under the writer, ``after(con)`` once it committed (still under the lock), then the marts and the snapshot.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import duckdb

from taxbreak.engine.analysis import compute_run, materialize, publication, publish_run
from taxbreak.engine.checks import Check, CheckResult, InvariantBroken, check_files, evaluate
from taxbreak.engine.plan import plan_tables
from taxbreak.engine.rules import RunConfig
from taxbreak.store.warehouse import snapshot_path, writer

__all__ = ["Event", "InvariantBroken", "RunResult", "Where", "publish", "run"]


class _Paths(Protocol):
    warehouse: Any  # the DuckDB file
    lake: Any  # the lake root (a folder, an s3:// URL) or a taxbreak.ingest.Lake


@dataclasses.dataclass(frozen=True)
class Where:
    """The warehouse file and the lake of a run (``taxbreak.config.Paths`` serves as well)."""

    warehouse: str | os.PathLike[str]
    lake: Any


@dataclasses.dataclass
class Event:
    """One step of a run, told to its hooks.

    kind: ``table_started`` (name, index of total; ``prepare`` is index 0: the loading of the inputs), ``table``
    (name, index, total, rows computed), ``computed`` (counts; ``con`` holds the run's computed tables: its own
    file in a run for some traces, ``partial``; the warehouse inside the run's transaction otherwise), ``check``
    (``result``), ``published`` (counts, trace_ids: the marts and the snapshot are out)."""

    kind: str
    name: str = ""
    index: int = 0
    total: int = 0
    rows: int | None = None
    counts: dict[str, int] | None = None
    con: duckdb.DuckDBPyConnection | None = None
    trace_ids: list[str] | None = None
    partial: bool = False
    result: CheckResult | None = None


Hooks = Callable[[Event], None]


@dataclasses.dataclass
class RunResult:
    trace_ids: list[str] | None  # the traces the run computed and published (None: every trace)
    counts: dict[str, int]  # rows per table (the cross-trace tables' whole counts); empty: nothing to analyse
    checks: list[CheckResult]
    snapshot: Path | None  # the readers' snapshot the run published (None: nothing published)

    @property
    def published(self) -> bool:
        return self.snapshot is not None


def _none(_event: Event) -> None:
    return None


def _progress(emit: Hooks) -> Callable[[str, int, int, int | None], None]:
    """The engine parts' progress callback (``taxbreak.engine.analysis``) as hook events."""

    def progress(name: str, index: int, total: int, rows: int | None) -> None:
        emit(Event("table_started" if rows is None else "table", name=name, index=index, total=total, rows=rows))

    return progress


def _check(con: duckdb.DuckDBPyConnection, checks: list[Check], emit: Hooks, scope: str) -> list[CheckResult]:
    results = evaluate(con, checks=checks)
    for r in results:
        emit(Event("check", name=r.name, result=r))
    if any(r.blocks for r in results):
        raise InvariantBroken(scope, results)
    return results


def _scope(traces: list[str] | None) -> str:
    return "all traces" if traces is None else f"trace {traces[0][:16]}" if len(traces) == 1 else (
        f"{len(traces)} traces")


def run(
    paths: _Paths, traces: list[str] | None = None, tables: list[str] | None = None,
    config: RunConfig | None = None, hooks: Hooks | None = None, *, checks: set[str] | None = None,
    cross_trace: bool = True, on_wait: Callable[[str], None] | None = None,
) -> RunResult:
    """Analyse ``traces`` (None: every ingested trace, written whole) for ``tables`` (None: the whole plan; else
    those and what they read) and publish them (see the module doc).  ``checks``: the check names to evaluate
    (None: every one).  Raises ValueError for an unknown table, ``InvariantBroken`` for a broken invariant
    (nothing published), ``taxbreak.store.warehouse.WarehouseBusy`` when the writer lock stays held."""
    emit = hooks or _none
    plan_tables(tables)  # an unknown table fails here, before any lock or file
    todo = [c for c in check_files() if checks is None or c.name in checks]
    progress = _progress(emit)
    warehouse = paths.warehouse
    if traces is None:  # every trace: computed under the lock into the warehouse, checked before the commit
        with writer(warehouse, traces=None, on_wait=on_wait) as con, publication(con):
            counts = materialize(warehouse, paths.lake, tables=tables, config=config, con=con, progress=progress)
            emit(Event("computed", counts=counts, con=con))
            results = _check(con, todo, emit, _scope(None))
        emit(Event("published", counts=counts))
        return RunResult(None, counts, results, snapshot_path(warehouse))
    with compute_run(warehouse, paths.lake, traces, tables=tables, config=config, progress=progress) as computed:
        if not computed.trace_ids:  # none of them is ingested: nothing to publish
            return RunResult([], {}, [], None)
        emit(Event("computed", counts=dict(computed.counts), con=computed.con, trace_ids=list(computed.trace_ids),
                   partial=True))
        results = _check(computed.con, todo, emit, _scope(computed.trace_ids))  # before the lock
        with writer(warehouse, traces=computed.trace_ids, on_wait=on_wait) as con:
            counts = publish_run(con, computed, cross_trace=cross_trace, progress=progress)
    emit(Event("published", counts=counts, trace_ids=list(computed.trace_ids)))
    return RunResult(list(computed.trace_ids), counts, results, snapshot_path(warehouse))


def publish(
    paths: _Paths | str | os.PathLike[str], write: Callable[[duckdb.DuckDBPyConnection], Any], *,
    traces: list[str] | None = None, tables: list[str] | None = None,
    after: Callable[[duckdb.DuckDBPyConnection], Any] | None = None, hooks: Hooks | None = None,
    on_wait: Callable[[str], None] | None = None, one_transaction: bool = True, label: str = "",
) -> Any:
    """``write(con)`` under the writer rule, in one publication (``one_transaction``; False: ``write`` makes its
    own, e.g. one per trace), ``after(con)`` once it committed, then the marts of ``traces`` (None: all) in
    ``tables`` (None: every per-trace table) and the readers' snapshot; returns what ``write`` returned."""
    warehouse = getattr(paths, "warehouse", paths)
    with writer(warehouse, traces=traces, tables=tables, on_wait=on_wait) as con:
        if one_transaction:
            with publication(con):
                out = write(con)
        else:
            out = write(con)
        if after is not None:
            after(con)
    counts = out if isinstance(out, dict) and all(isinstance(v, int) for v in out.values()) else None
    (hooks or _none)(Event("published", name=label, counts=counts, trace_ids=traces))
    return out
