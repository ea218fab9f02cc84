"""Builders for the per-request attribution tests: tiny lakes written by code, serving tables straight into an
in-memory DuckDB, and where the real SGLang / vLLM traces are found (../shared first, then tests/data/public)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from public_data import find

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


@pytest.fixture()
def lake_builder(tmp_path: Path) -> Callable[..., Lake]:
    lake = Lake(tmp_path / "lake")

    def add(trace_id: str, rows: list[dict], **kw: object) -> Lake:
        write_trace(lake, trace_id, rows, **kw)
        return lake

    return add


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


@pytest.fixture(scope="session")
def real_trace() -> Callable[[str], Path]:
    """real_trace('tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz'): ../shared/traces/public first,
    then the vendored copy in tests/data/public (tests/public_data.py; TAXBREAK_TESTS_VENDORED_ONLY=1 runs as a fresh
    clone); skips, naming the file, when neither has it (the tests parametrise over what is here instead)."""

    def resolve(rel: str) -> Path:
        path = find(rel)
        if path is None:
            pytest.skip(f"needs the public trace {rel} (tests/data/public or ../shared/traces/public)")
        return path

    return resolve
