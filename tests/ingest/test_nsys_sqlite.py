"""Nsight SQLite ingest: public exports (counts from SOURCES.md), the process-scoped join, fixtures, bad inputs."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import duckdb
import pytest
from nsys_fixtures import EPOCH_NS, ORIGIN_NS, PUBLIC, build_tiny_export, ddl

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.base import IngestError
from taxbreak.ingest.nsys_sqlite import read_nsys_sqlite

# SOURCES.md: KERNEL, RUNTIME, NVTX_EVENTS, MEMCPY, MEMSET, SYNCHRONIZATION rows per export.
EXPECTED = {
    "nsys-ai/h100_2gpu_1s.sqlite": (3442, 5796, 16782, 904, 22, 244),
    "nsys-ai/mfu_2gpu_before.sqlite": (4010, 7466, 19118, 1020, 269, 366),
    "nsys-ai/mock.sqlite": (2, 9, 0, 1, 0, 1),
    "nvfuser/ee4fcf30/report1.sqlite": (18, 990, 13513, 3, 3, 3),
}
RUNTIME_KINDS = ("runtime_api", "driver_api", "graph_launch", "library_api")


def _need_public() -> None:
    if not PUBLIC.is_dir():
        pytest.skip(f"public traces not found at {PUBLIC}")


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_public_export_counts(rel: str, tmp_path: Path) -> None:
    _need_public()
    kernels, runtime, nvtx, memcpy, memset, sync = EXPECTED[rel]
    # the SOURCES.md figures, recounted from the raw export with plain sqlite3
    con = sqlite3.connect(f"file:{PUBLIC / rel}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        raw = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in tables else 0 for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"))
    finally:
        con.close()
    assert raw == EXPECTED[rel]
    res = ingest_file(PUBLIC / rel, Lake(tmp_path))
    assert res.status == "ingested", res.error
    counts = json.loads(res.row["event_counts_json"])
    skipped = json.loads(res.row["skipped_counts_json"])
    assert counts.get("kernel", 0) == kernels
    assert sum(counts.get(k, 0) for k in RUNTIME_KINDS) == runtime
    nvtx_stored = counts.get("nvtx_range", 0) + counts.get("nvtx_mark", 0)
    nvtx_skipped = sum(v for k, v in skipped.items() if k.startswith("NVTX_EVENTS:"))
    assert nvtx_stored + nvtx_skipped == nvtx
    assert nvtx_skipped == 0  # every NVTX row in these exports is a closed push/pop range
    assert counts.get("memcpy", 0) == memcpy and counts.get("memset", 0) == memset and counts.get("sync", 0) == sync
    assert res.row["source_event_count"] == sum(EXPECTED[rel])
    assert res.row["event_count"] + sum(skipped.values()) == res.row["source_event_count"]


def test_two_process_join_is_scoped_by_process(tmp_path: Path) -> None:
    _need_public()
    src = PUBLIC / "nsys-ai/h100_2gpu_1s.sqlite"
    con = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    (true_n,) = con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId AND (r.globalTid & -16777216) = k.globalPid").fetchone()
    (unscoped_n,) = con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId").fetchone()
    con.close()
    lake = Lake(tmp_path)
    res = ingest_file(src, lake)
    assert res.status == "ingested", res.error
    part = str(lake.events_dir(res.trace_id) / "part-0.parquet")
    q = ("SELECT count(*) FROM read_parquet($p) k JOIN read_parquet($p) r ON r.correlation_id = k.correlation_id {} "
         "WHERE k.kind = 'kernel' AND r.category = 'CUPTI_ACTIVITY_KIND_RUNTIME'")
    scoped = duckdb.execute(q.format("AND r.pid = k.pid"), {"p": part}).fetchone()[0]
    unscoped = duckdb.execute(q.format(""), {"p": part}).fetchone()[0]
    assert (true_n, unscoped_n) == (1632, 1643)
    assert scoped == true_n
    assert unscoped != true_n


def test_read_only_folder_gets_no_side_files(tmp_path: Path) -> None:
    _need_public()
    folder = PUBLIC / "nsys-ai"
    before = sorted(os.listdir(folder))
    res = ingest_file(folder / "mock.sqlite", Lake(tmp_path))
    assert res.status == "ingested", res.error
    assert sorted(os.listdir(folder)) == before


def test_tiny_fixture_hand_values(tmp_path: Path) -> None:
    src = build_tiny_export(tmp_path / "tiny.sqlite")
    os.chmod(tmp_path, 0o555)  # read-only folder: nothing may be written beside the file
    try:
        lake = Lake(tmp_path.parent / f"{tmp_path.name}-lake")
        res = ingest_file(src, lake)
        assert sorted(os.listdir(tmp_path)) == ["tiny.sqlite"]
    finally:
        os.chmod(tmp_path, 0o755)
    assert res.status == "ingested", res.error
    row = res.row
    assert row["start_epoch_ns"] == EPOCH_NS + ORIGIN_NS
    assert json.loads(row["skipped_counts_json"]) == {"NVTX_EVENTS:domain_create": 1}
    assert row["source_event_count"] == 13 and row["event_count"] == 12
    ev = {(r["kind"], r["name"], r["ts_ns"]): r for r in lake.read_events(res.trace_id).to_pylist()}
    lib = ev[("library_api", "cublasSgemm_v2", 100)]
    launch = ev[("runtime_api", "cudaLaunchKernel", 1100)]
    assert (lib["dur_ns"], launch["dur_ns"], launch["raw_name"]) == (4000, 1000, "cudaLaunchKernel_v7000")
    assert lib["ts_ns"] <= launch["ts_ns"] and launch["ts_ns"] + launch["dur_ns"] <= lib["ts_ns"] + lib["dur_ns"]
    assert (lib["pid"], lib["tid"], launch["pid"], launch["tid"]) == ("100", "101", "100", "101")
    gemm = ev[("kernel", "void gemm<float>(float*)", 2600)]
    assert (gemm["pid"], gemm["tid"], gemm["correlation_id"], gemm["stream_id"], gemm["short_name"]) == (
        "100", "7", 11, 7, "gemm")
    assert (gemm["shared_memory_bytes"], gemm["grid_x"], gemm["grid_y"], gemm["block_x"]) == (5120, 120, 2, 256)
    graph = ev[("graph_launch", "cudaGraphLaunch", 5100)]
    fed = sorted((r for r in ev.values() if r["kind"] == "kernel" and r["correlation_id"] == graph["correlation_id"]
                  and r["pid"] == graph["pid"]), key=lambda r: r["ts_ns"])
    assert [(r["ts_ns"], r["dur_ns"], r["graph_id"], r["graph_node_id"]) for r in fed] == [
        (6100, 200, 5, 1), (6300, 200, 5, 2), (6500, 200, 5, 3)]
    assert ev[("driver_api", "cuLaunchKernel", 5700)]["raw_name"] is None
    assert ev[("nvtx_range", "step", 0)]["dur_ns"] == 7100
    assert ev[("nvtx_mark", "mark", 50)]["dur_ns"] is None
    assert ev[("nvtx_range", "registered range", 300)]["end_tid"] == "102"
    assert ev[("nvtx_range", "in domain", 600)]["domain"] == "mydomain"
    assert json.loads(gemm["args_json"])["dynamicSharedMemory"] == 4096


def _expect_error(path: Path, *needles: str) -> None:
    with pytest.raises(IngestError) as exc:
        out = read_nsys_sqlite(path, "t")
        list(out.batches)
    for n in (str(path), *needles):
        assert n in str(exc.value)


def test_not_sqlite_named_sqlite(tmp_path: Path) -> None:
    p = tmp_path / "x.sqlite"
    p.write_text("hello, not a database\n")
    _expect_error(p, "not a SQLite database")
    res = ingest_file(p, Lake(tmp_path / "lake"))
    assert res.status == "failed" and "not a SQLite database" in res.error


def test_sqlite_but_not_nsys(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    _expect_error(p, "not an Nsight Systems export")


def test_kernel_table_without_stringids(tmp_path: Path) -> None:
    p = tmp_path / "nostrings.sqlite"
    con = sqlite3.connect(p)
    con.execute(ddl("CUPTI_ACTIVITY_KIND_KERNEL"))
    con.commit()
    con.close()
    _expect_error(p, "no StringIds", "CUPTI_ACTIVITY_KIND_KERNEL")


def test_missing_required_column(tmp_path: Path) -> None:
    p = tmp_path / "nocol.sqlite"
    con = sqlite3.connect(p)
    con.execute(ddl("StringIds"))
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, "
                "globalTid INTEGER, nameId INTEGER)")
    con.commit()
    con.close()
    _expect_error(p, "CUPTI_ACTIVITY_KIND_RUNTIME", "'correlationId'")


def test_truncated_file(tmp_path: Path) -> None:
    full = build_tiny_export(tmp_path / "full.sqlite")
    data = full.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    _expect_error(cut, "truncated")


def _gen_module():  # noqa: ANN202 - bench/ is not a package
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "gen_nsys_sqlite.py"
    spec = importlib.util.spec_from_file_location("gen_nsys_sqlite", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _events(path: Path, lake_root: Path) -> list[dict]:
    lake = Lake(lake_root)
    res = ingest_file(path, lake)
    assert res.status == "ingested", res.error
    return sorted(lake.read_events(res.trace_id).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))


def test_rowid_split_readers_and_small_batches_change_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from taxbreak.ingest import nsys_sqlite

    src = tmp_path / "g.sqlite"
    _gen_module().generate(src, 300)  # 300 launches: 300 runtime + 300 kernel rows
    whole = _events(src, tmp_path / "a")
    monkeypatch.setattr(nsys_sqlite, "SPLIT_ROWS", 50)  # both tables read in two rowid ranges by two threads
    monkeypatch.setattr(nsys_sqlite, "BATCH_ROWS", 16)
    monkeypatch.setattr(nsys_sqlite, "PREFETCH_BATCHES", 1)
    split = _events(src, tmp_path / "b")
    assert split == whole
    assert sum(r["kind"] == "kernel" for r in split) == 300 and sum(r["kind"] == "runtime_api" for r in split) == 300
    (k,) = [r for r in split if r["kind"] == "kernel" and r["pid"] == "4242" and r["correlation_id"] == 1]
    # Launch 0 of gen_nsys_sqlite: the softmax kernel (ids 5/6/7), start 1_003_000 - origin 1_000_000, 9000 ns.
    assert (k["name"], k["short_name"], k["ts_ns"], k["dur_ns"], k["shared_memory_bytes"]) == (
        "void softmax_kernel<half>(half*)", "softmax_kernel", 3000, 9000, 4096)
    assert k["args_json"] == (
        '{"contextId":1,"greenContextId":0,"launchType":1,"cacheConfig":1,"staticSharedMemory":0,'
        '"dynamicSharedMemory":4096,"localMemoryPerThread":0,"localMemoryTotal":0,"gridId":1,'
        '"sharedMemoryExecuted":32768,"sharedMemoryLimitConfig":0,"qmdBulkReleaseDone":null,"qmdPreexitDone":null,'
        '"qmdLastCtaDone":null,"clusterX":0,"clusterY":0,"clusterZ":0,"clusterSchedulingPolicy":1,'
        '"maxPotentialClusterSize":0,"maxActiveClusters":0,"sharedMemoryRequestedPercentage":null,'
        '"tensorSizeMinusOneElements":"[]","mangledName":"_Z14softmax_kernelI6__halfEvPS0_"}')
    (rt,) = [r for r in split if r["kind"] == "runtime_api" and r["pid"] == "4242" and r["correlation_id"] == 1]
    assert rt["args_json"] == '{"eventClass":0,"returnValue":0,"callchainId":null}'


def test_real_payload_columns_keep_every_digit(tmp_path: Path) -> None:
    """REAL columns go to args_json through DuckDB (SQLite's json_object would print 15 digits)."""
    p = tmp_path / "real.sqlite"
    con = sqlite3.connect(p)
    con.execute(ddl("NVTX_EVENTS"))
    con.execute(ddl("StringIds"))
    from nsys_fixtures import GTID, insert

    insert(con, "NVTX_EVENTS", start=10, end=20, eventType=59, text="r", globalTid=GTID, doubleValue=0.1 + 0.2,
           uint64Value=7, category=3)
    con.commit()
    con.close()
    (row,) = _events(p, tmp_path / "lake")
    args = json.loads(row["args_json"])
    assert args["doubleValue"] == 0.30000000000000004 and args["uint64Value"] == 7 and args["category"] == 3
    assert args["floatValue"] is None and "text" not in args and "start" not in args
    assert (row["name"], row["ts_ns"], row["dur_ns"]) == ("r", 0, 10)


def test_abandoned_stream_stops_its_reader_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from taxbreak.ingest import nsys_sqlite

    src = tmp_path / "g.sqlite"
    _gen_module().generate(src, 300)
    monkeypatch.setattr(nsys_sqlite, "SPLIT_ROWS", 50)
    monkeypatch.setattr(nsys_sqlite, "BATCH_ROWS", 16)
    monkeypatch.setattr(nsys_sqlite, "PREFETCH_BATCHES", 1)
    out = read_nsys_sqlite(src, "t")
    first = next(out.batches)
    assert first.num_rows == 15  # a first batch of 16 rows less the type sentinel row
    assert sum(t.name.startswith("nsys-sqlite-reader") for t in threading.enumerate()) == 2
    out.batches.close()  # what the lake writer does when it fails mid-stream
    assert not [t for t in threading.enumerate() if t.name.startswith("nsys-sqlite-reader")]
