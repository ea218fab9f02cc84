"""Communication / compute / memory / idle per GPU (sql/gpu_time_breakdown.sql, sql/int_device_work.sql) and the
per-stream queue (sql/stream_queue_length.sql, sql/stream_queue_summary.sql), on hand-computed scenarios and on
the public two-rank NCCL trace (HTA's nccl_parser_config)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from taxbreak.engine import analysis
from taxbreak.ingest import Lake, ingest_file
from taxbreak.read import report

from .scenarios import ev, kernel, write_trace

COMM_ID = "c0" * 32
QUEUE_ID = "c1" * 32


def comm_rows(t: str = COMM_ID) -> list[dict]:
    """GPU 0: compute k1 [0, 100) s7, ncclKernel_AllReduce [50, 250) s2, compute k2 [200, 300) s7,
    memcpy [350, 400), memset [420, 430); GPU 1: one compute kernel [1000, 1100)."""
    P = "1"
    return [
        kernel(t, "k1", 0, 100, P, None),
        kernel(t, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 50, 200, P,
               None, stream=2),
        kernel(t, "k2", 200, 100, P, None),
        ev(t, "memcpy", "Memcpy HtoD (Pageable -> Device)", 350, 50, P, "7", device_id=0, stream_id=7),
        ev(t, "memset", "Memset (Device)", 420, 10, P, "7", device_id=0, stream_id=7),
        kernel(t, "k3", 1000, 100, P, None, device=1),
    ]


def queue_rows(t: str = QUEUE_ID) -> list[dict]:
    """Stream 7: launches at 10, 20, 150 -> kernels A [100, 200), B [200, 260), C [260, 300); an orphan D [400, 410)
    (no launch: left out). Stream 9: launch at 500 after its kernel E [450, 480) started (clock skew)."""
    P, T = "1", "1"
    return [
        ev(t, "runtime_api", "cudaLaunchKernel", 10, 5, P, T, correlation_id=1),
        kernel(t, "A", 100, 100, P, 1),
        ev(t, "runtime_api", "cudaLaunchKernel", 20, 5, P, T, correlation_id=2),
        kernel(t, "B", 200, 60, P, 2),
        ev(t, "runtime_api", "cudaLaunchKernel", 150, 5, P, T, correlation_id=3),
        kernel(t, "C", 260, 40, P, 3),
        kernel(t, "D", 400, 10, P, 99),
        ev(t, "runtime_api", "cudaLaunchKernel", 500, 5, P, T, correlation_id=4),
        kernel(t, "E", 450, 30, P, 4, stream=9),
    ]


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root = tmp_path_factory.mktemp("comm")
    lake = Lake(root / "lake")
    write_trace(lake, COMM_ID, comm_rows(), gpu="NVIDIA A100-SXM4-80GB", file_name="comm.json",
                metadata={"distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4}})
    write_trace(lake, QUEUE_ID, queue_rows(), gpu="NVIDIA A100-SXM4-80GB", file_name="queue.json")
    analysis.materialize(root / "wh.duckdb", root / "lake")
    con = duckdb.connect(str(root / "wh.duckdb"), read_only=True)
    yield con
    con.close()


def _one(con: duckdb.DuckDBPyConnection, sql: str, **p) -> dict:
    cur = con.execute(sql, p)
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1, rows
    return dict(zip(cols, rows[0], strict=True))


def test_breakdown_by_class(wh: duckdb.DuckDBPyConnection) -> None:
    g0 = _one(wh, "SELECT * FROM gpu_time_breakdown WHERE trace_id = $t AND device_id = 0", t=COMM_ID)
    assert (g0["rank"], g0["first_start_ns"], g0["last_end_ns"], g0["span_ns"]) == (3, 0, 430, 430)
    assert (g0["kernels"], g0["comm_kernels"]) == (3, 1)
    # compute [0,100) + [200,300); the all-reduce alone [100,200); copies alone 50 + 10; nothing [300,350) + [400,420)
    assert (g0["t_compute_ns"], g0["t_comm_exposed_ns"], g0["t_memory_exposed_ns"], g0["t_idle_ns"]) == (
        200, 100, 60, 70)
    assert (g0["compute_busy_ns"], g0["comm_busy_ns"], g0["memcpy_busy_ns"], g0["memset_busy_ns"]) == (200, 200, 50, 10)
    # the all-reduce [50, 250) overlaps k1 on [50, 100) and k2 on [200, 250)
    assert g0["comm_compute_overlap_ns"] == 100 and g0["comm_overlap_fraction"] == pytest.approx(0.5)
    assert g0["idle_fraction"] == pytest.approx(70 / 430)
    g1 = _one(wh, "SELECT * FROM gpu_time_breakdown WHERE trace_id = $t AND device_id = 1", t=COMM_ID)
    assert (g1["span_ns"], g1["t_compute_ns"], g1["t_idle_ns"], g1["comm_busy_ns"]) == (100, 100, 0, 0)
    assert g1["comm_overlap_fraction"] is None and g1["rank"] == 3
    # the idle time is device_busy's (the same events, the same union)
    idle = wh.execute("SELECT idle_ns FROM device_busy WHERE trace_id = $t AND device_id = 0", {"t": COMM_ID})
    assert idle.fetchone() == (70,)


def test_rank_unknown_without_distributed_info(wh: duckdb.DuckDBPyConnection) -> None:
    assert _one(wh, "SELECT rank FROM gpu_time_breakdown WHERE trace_id = $t", t=QUEUE_ID)["rank"] is None


def test_stream_queue_length(wh: duckdb.DuckDBPyConnection) -> None:
    got = wh.execute("SELECT stream_id, ts_ns, queue_length, held_ns FROM stream_queue_length WHERE trace_id = $t "
                     "ORDER BY stream_id, ts_ns", {"t": QUEUE_ID}).fetchall()
    assert got == [(7, 10, 1, 10), (7, 20, 2, 130), (7, 150, 3, 50), (7, 200, 2, 60), (7, 260, 1, 40),
                   (7, 300, 0, 0), (9, 450, 1, 30), (9, 480, 0, 0)]
    s7 = _one(wh, "SELECT * FROM stream_queue_summary WHERE trace_id = $t AND stream_id = 7", t=QUEUE_ID)
    # time-weighted: (1*10 + 2*130 + 3*50 + 2*60 + 1*40) / 290 = 580 / 290
    assert (s7["kernels_queued"], s7["queue_span_ns"], s7["max_queue_length"], s7["nonempty_ns"]) == (3, 290, 3, 290)
    assert s7["mean_queue_length"] == pytest.approx(2.0)


def test_public_nccl_trace(tmp_path: Path, public_trace) -> None:
    path = public_trace("hta/nccl_parser_config/nccl_data.json.gz")
    lake = Lake(tmp_path / "lake")
    res = ingest_file(path, lake)
    assert res.status == "ingested", res.error
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT device_id, rank, span_ns, t_compute_ns + t_comm_exposed_ns + t_memory_exposed_ns "
                           "+ t_idle_ns, comm_kernels, comm_busy_ns, comm_compute_overlap_ns, t_idle_ns "
                           "FROM gpu_time_breakdown ORDER BY device_id").fetchall()
        idle = dict(con.execute("SELECT device_id, idle_ns FROM device_busy").fetchall())
        # an independent count of the NCCL kernels, straight from the lake's events
        n_nccl = con.execute("SELECT count(*) FROM read_parquet($f) WHERE kind = 'kernel' AND name ILIKE '%nccl%'",
                             {"f": [str(p) for p in (tmp_path / "lake").rglob("*.parquet") if "events" in str(p)]}
                             ).fetchone()[0]
        queues = con.execute("SELECT count(*), min(max_queue_length) FROM stream_queue_summary").fetchone()
        trace = report.collect(con)["traces"][0]
    finally:
        con.close()
    # the report groups the GPU by rank and device and says how much of the communication overlapped compute
    g = trace["gpu_breakdown"][0]
    label = f"{report.trace_label(trace)} · rank 0 GPU 0"
    index = report.render_index({"traces": [trace], "sweeps": {}})
    assert label in index and f"comm overlapped {g['comm_overlap_fraction']:.0%}" in index
    assert "rank 0 GPU 0" in report.render_trace_page(trace)
    assert rows and all(r[1] == 0 for r in rows)  # distributedInfo.rank 0 (SOURCES.md)
    for dev, _rank, span, parts, _n, comm, overlap, t_idle in rows:
        assert parts == span and t_idle == idle[dev] and 0 <= overlap <= comm
    assert sum(r[4] for r in rows) == n_nccl > 0
    assert queues[0] >= 1 and queues[1] >= 1
