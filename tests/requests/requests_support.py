"""Builders of the per-request attribution tests that test modules import by name (``from requests_support import
...``): a module of its own, not conftest.py, since every test folder has a conftest.py and, when pytest is given
several folders (or collects all of them, as the xdist workers of ``make test`` do), ``import conftest`` finds
whichever it loaded last."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from taxbreak.ingest.base import TraceInfo
from taxbreak.ingest.lake import Lake
from taxbreak.schemas import EVENT_SCHEMA


def ev(trace_id: str, kind: str, name: str, ts: int, dur: int | None, pid: str = "100", tid: str = "1",
       **kw: object) -> dict:
    row = {f.name: None for f in EVENT_SCHEMA}
    row.update(trace_id=trace_id, source_format="kineto", kind=kind, name=name, ts_ns=ts, dur_ns=dur, pid=pid,
               tid=tid, phase="X")
    row.update(kw)
    return row


def write_trace(lake: Lake, trace_id: str, rows: list[dict], *, gpu: str | None, file_name: str,
                metadata: dict | None = None) -> None:
    batch = pa.RecordBatch.from_pylist(rows, schema=EVENT_SCHEMA)
    info = TraceInfo(source_format="kineto", gpu_names=[gpu] if gpu else [], host_name="hostA",
                     metadata=metadata or {})
    lake.write_events(trace_id, [batch], info, file_name=file_name, source_path=f"/nonexistent/{file_name}",
                      file_bytes=1)


def serving_con(steps: pa.Table, reqs: pa.Table) -> duckdb.DuckDBPyConnection:
    """An in-memory warehouse holding only serving_steps and serving_step_requests."""
    con = duckdb.connect()
    con.register("_s", steps)
    con.execute("CREATE TABLE serving_steps AS SELECT * FROM _s")
    con.register("_r", reqs)
    con.execute("CREATE TABLE serving_step_requests AS SELECT * FROM _r")
    con.unregister("_s")
    con.unregister("_r")
    return con
