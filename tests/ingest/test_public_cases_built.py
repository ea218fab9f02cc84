"""Cases that otherwise only the public traces show (tests/ingest/test_kineto_public.py, test_nsys_sqlite.py), on
tiny traces built here by hand, so a clone without ../shared checks them too: a 2-process, 2-GPU Nsight export whose
processes reuse correlation ids (nsys-ai/h100_2gpu_1s.sqlite), and a CUPTI range-profiler Kineto trace that has
ranges instead of kernels (hta/cupti_profiler)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
from nsys_fixtures import GPID, GTID, HW, ddl, insert, kernel_row

from taxbreak.ingest import Lake, ingest_file

PID_B, TID_B = 200, 201
GPID_B = HW | (PID_B << 24)
GTID_B = GPID_B | TID_B


def test_two_processes_on_two_gpus_reuse_correlation_ids(tmp_path: Path) -> None:
    """Process 100 launches [1000, 1100] -> kernel 'a' on GPU 0 [1200, 1300]; process 200 launches [1050, 1150] ->
    kernel 'b' on GPU 1 [1250, 1400]; both with correlation id 5, as CUPTI numbers per process.  A kernel pairs
    with its own process's launch: 2 pairs (joining on the correlation id alone would give 4)."""
    src = tmp_path / "two_gpus.sqlite"
    con = sqlite3.connect(src)
    for t in ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "PROCESSES"):
        con.execute(ddl(t))
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "cudaLaunchKernel_v7000"), (2, "a"), (3, "b")])
    insert(con, "PROCESSES", globalPid=GPID, pid=100, name="rank0")
    insert(con, "PROCESSES", globalPid=GPID_B, pid=PID_B, name="rank1")
    rt = dict(eventClass=0, returnValue=0, callchainId=None, correlationId=5, nameId=1)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=1000, end=1100, globalTid=GTID, **rt)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=1050, end=1150, globalTid=GTID_B, **rt)
    insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(1200, 1300, 5, 7, 2, 2))
    insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(1250, 1400, 5, 7, 3, 3, deviceId=1, globalPid=GPID_B))
    con.commit()
    con.close()

    lake = Lake(tmp_path / "lake")
    res = ingest_file(src, lake)
    assert res.status == "ingested", res.error
    assert res.row["kernel_gpu_count"] == 2
    part = str(lake.events_dir(res.trace_id) / "part-0.parquet")
    pairs = duckdb.execute(
        "SELECT k.name, k.pid, k.device_id, r.pid, r.ts_ns FROM read_parquet($p) k JOIN read_parquet($p) r "
        "ON r.correlation_id = k.correlation_id AND r.pid = k.pid "
        "WHERE k.kind = 'kernel' AND r.kind = 'runtime_api' ORDER BY k.name", {"p": part}).fetchall()
    # times from the earliest stored start (1000): a's launch at 0, b's at 50
    assert pairs == [("a", "100", 0, "100", 0), ("b", "200", 1, "200", 50)]
    (unscoped,) = duckdb.execute(
        "SELECT count(*) FROM read_parquet($p) k JOIN read_parquet($p) r ON r.correlation_id = k.correlation_id "
        "WHERE k.kind = 'kernel' AND r.kind = 'runtime_api'", {"p": part}).fetchone()
    assert unscoped == 4


def test_cupti_range_profiler_trace_has_ranges_and_no_kernels(write_kineto, lake) -> None:
    """Kineto in CUPTI range-profiler mode: the kernel appears as a 'cuda_profiler_range' event with counter
    values (on pid 0, tid 0), beside its cpu_op and launch call; no 'kernel' event at all."""
    path = write_kineto("range_profiler.json", [
        {"ph": "M", "name": "process_name", "pid": 42, "tid": 0, "args": {"name": "python3.8"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::uniform_", "pid": 42, "tid": 42, "ts": 100, "dur": 50,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 42, "tid": 42, "ts": 110, "dur": 20,
         "args": {"External id": 1, "cbid": 211, "correlation": 9}},
        {"ph": "X", "cat": "cuda_profiler_range", "name": "uniform_kernel", "pid": 0, "tid": 0, "ts": 140,
         "dur": 30, "args": {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 38731776}},
    ], {"schemaVersion": 1})
    res = ingest_file(path, lake)
    assert res.status == "ingested", res.error
    kinds = json.loads(res.row["event_counts_json"])
    assert (kinds["profiler_range"], kinds["runtime_api"], kinds["framework_op"]) == (1, 1, 1)
    assert "kernel" not in kinds
    (rng,) = [r for r in lake.read_events(res.trace_id).to_pylist() if r["kind"] == "profiler_range"]
    assert (rng["name"], rng["ts_ns"], rng["dur_ns"]) == ("uniform_kernel", 40_000, 30_000)  # µs from ts 100
