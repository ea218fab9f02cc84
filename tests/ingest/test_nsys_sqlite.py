"""Nsight SQLite ingest: public exports (counts from SOURCES.md), the process-scoped join, fixtures, bad inputs."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from nsys_fixtures import EPOCH_NS, ORIGIN_NS, STANDINS, build_tiny_export, ddl, public_or_standin
from nsys_fixtures import NVJET as NVJET_SHORT
from public_data import available

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
# The two exports of the full collection that are not vendored (tests/data/SOURCES.md) have stand-ins built by code
# (tests/ingest/nsys_fixtures.py: two GPUs with NCCL kernels; the nsys 2025.1 schema 3.17.1), counted by hand.
STANDIN_COUNTS = {"generated/two_gpu_nccl.sqlite": (6, 14, 4, 2, 2, 2),
                  "generated/nsys2025_nvfuser.sqlite": (4, 9, 3, 1, 1, 1)}
assert set(STANDIN_COUNTS) == set(STANDINS)
RUNTIME_KINDS = ("runtime_api", "driver_api", "graph_launch", "library_api")


@pytest.mark.parametrize("rel", available(EXPECTED) + sorted(STANDINS))
def test_public_export_counts(rel: str, tmp_path: Path, public_trace: Callable[[str], Path]) -> None:
    src = public_or_standin(rel, tmp_path / "in", public_trace)
    expected = {**EXPECTED, **STANDIN_COUNTS}[rel]
    kernels, runtime, nvtx, memcpy, memset, sync = expected
    # the SOURCES.md figures, recounted from the raw export with plain sqlite3
    con = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        raw = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in tables else 0 for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"))
    finally:
        con.close()
    assert raw == expected
    res = ingest_file(src, Lake(tmp_path / "lake"))
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
    assert res.row["source_event_count"] == sum(expected)
    assert res.row["event_count"] + sum(skipped.values()) == res.row["source_event_count"]


def test_standins_read_as_the_exports_they_stand_for(tmp_path: Path) -> None:
    """What each stand-in adds to the counts above, by hand from tests/ingest/nsys_fixtures.py (origin: the first
    NVTX push at 100 ns, so every stored time is 100 ns earlier than in the export)."""
    two = ingest_file(STANDINS["generated/two_gpu_nccl.sqlite"](tmp_path / "two.sqlite"), Lake(tmp_path / "l1"))
    assert two.status == "ingested", two.error
    assert (two.row["kernel_gpu_count"], two.row["start_epoch_ns"]) == (2, EPOCH_NS + 100)
    assert json.loads(two.row["tool_versions_json"]) == {"export_schema": "3.25.0", "nsys_export": "2026.2.1.210"}
    rows = Lake(tmp_path / "l1").read_events(two.trace_id).to_pylist()
    kernels = sorted((e["pid"], e["device_id"], e["short_name"], e["ts_ns"], e["dur_ns"], e["correlation_id"])
                     for e in rows if e["kind"] == "kernel" and e["short_name"].startswith("nccl"))
    # each rank's NCCL kernel on its own GPU, joined to its own process's cuLaunchKernelEx (correlation 3 in both)
    assert kernels == [("200", 0, "ncclDevKernel_SendRecv", 3400, 3000, 3), ("201", 1, "ncclDevKernel_SendRecv", 3410,
                                                                            3000, 3)]
    assert sorted((e["pid"], e["ts_ns"]) for e in rows if e["name"] == "cuLaunchKernelEx") == [("200", 2900),
                                                                                               ("201", 2910)]
    nvf = ingest_file(STANDINS["generated/nsys2025_nvfuser.sqlite"](tmp_path / "nvf.sqlite"), Lake(tmp_path / "l2"))
    assert nvf.status == "ingested", nvf.error
    assert json.loads(nvf.row["tool_versions_json"]) == {"export_schema": "3.17.1", "nsys_export": "2025.1.1.110"}
    assert json.loads(nvf.row["gpu_names_json"]) == ["NVIDIA H200"]
    assert json.loads(nvf.row["event_counts_json"])["driver_api"] == 5  # 2 library calls + 3 driver launches
    rows = Lake(tmp_path / "l2").read_events(nvf.trace_id).to_pylist()
    assert [(e["short_name"], e["ts_ns"], e["dur_ns"], e["graph_id"]) for e in rows if e["kind"] == "kernel"] == [
        ("vectorized_elementwise_kernel", 1200, 500, None), (NVJET_SHORT, 2300, 2000, None),
        ("nvfuser_pointwise_f0_c1_r0_g4", 4700, 400, None), ("nvfuser_reduction_f0_c1_r0_g3", 5500, 100, None)]

def test_two_process_join_is_scoped_by_process(tmp_path: Path, public_trace: Callable[[str], Path]) -> None:
    src = public_trace("nsys-ai/h100_2gpu_1s.sqlite")
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
    folder = tmp_path / "read-only"
    folder.mkdir()
    src = build_tiny_export(folder / "tiny.sqlite")
    before = sorted(os.listdir(folder))
    folder.chmod(0o555)
    try:
        res = ingest_file(src, Lake(tmp_path / "lake"))
        after = sorted(os.listdir(folder))
    finally:
        folder.chmod(0o755)
    assert res.status == "ingested", res.error
    assert after == before == ["tiny.sqlite"]


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
    assert res.status == "not_a_trace" and "not a SQLite database" in res.error  # its own status since c5c43a3


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
    assert (k["name"], k["short_name"], k["raw_name"], k["ts_ns"], k["dur_ns"], k["shared_memory_bytes"]) == (
        "void softmax_kernel<half>(half*)", "softmax_kernel", "_Z14softmax_kernelI6__halfEvPS0_", 3000, 9000, 4096)
    assert k["args_json"] == (
        '{"contextId":1,"greenContextId":0,"launchType":1,"cacheConfig":1,"staticSharedMemory":0,'
        '"dynamicSharedMemory":4096,"localMemoryPerThread":0,"localMemoryTotal":0,"gridId":1,'
        '"sharedMemoryExecuted":32768,"sharedMemoryLimitConfig":0,"qmdBulkReleaseDone":null,"qmdPreexitDone":null,'
        '"qmdLastCtaDone":null,"clusterX":0,"clusterY":0,"clusterZ":0,"clusterSchedulingPolicy":1,'
        '"maxPotentialClusterSize":0,"maxActiveClusters":0,"sharedMemoryRequestedPercentage":null,'
        '"tensorSizeMinusOneElements":"[]"}')
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


def _lake_rows(lake_root: Path, sql: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        return con.sql(sql.replace("EVENTS", f"read_parquet('{lake_root}/events/*/*.parquet')")).fetchall()
    finally:
        con.close()


def test_public_kernels_and_runtime_match_sqlite_row_for_row(tmp_path: Path,
                                                            public_trace: Callable[[str], Path]) -> None:
    """Every mapped field of every kernel and runtime row, recomputed from the raw export with plain sqlite3."""
    src = public_trace("nsys-ai/h100_2gpu_1s.sqlite")
    res = ingest_file(src, Lake(tmp_path))
    assert res.status == "ingested", res.error
    con = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    try:
        origin = min(con.execute(f"SELECT min(start) FROM {t}").fetchone()[0] for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"))
        kernels = con.execute(
            "SELECT CAST((k.globalPid >> 24) & 16777215 AS TEXT), CAST(k.streamId AS TEXT), k.correlationId, "
            "k.start - ?, k.end - k.start, d.value, s.value, m.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, "
            "k.blockZ, k.registersPerThread, k.staticSharedMemory + k.dynamicSharedMemory, k.deviceId "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds d ON d.id = k.demangledName "
            "LEFT JOIN StringIds s ON s.id = k.shortName LEFT JOIN StringIds m ON m.id = k.mangledName",
            (origin,)).fetchall()
        runtime = con.execute(
            "SELECT CAST((r.globalTid >> 24) & 16777215 AS TEXT), CAST(r.globalTid & 16777215 AS TEXT), "
            "r.correlationId, r.start - ?, r.end - r.start, s.value, r.eventClass "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId", (origin,)).fetchall()
    finally:
        con.close()
    assert len(kernels) == 3442 and len(runtime) == 5796
    got_kernels = _lake_rows(tmp_path, (
        "SELECT pid, tid, correlation_id, ts_ns, dur_ns, name, short_name, raw_name, grid_x, grid_y, grid_z, block_x, "
        "block_y, block_z, registers_per_thread, shared_memory_bytes, device_id FROM EVENTS WHERE kind = 'kernel'"))
    assert sorted(got_kernels, key=repr) == sorted(kernels, key=repr)
    assert sum(k[7] is not None for k in kernels) > 0  # the export records mangled symbols: raw_name is tested

    def expected_runtime(row: tuple) -> tuple:
        pid, tid, corr, ts, dur, raw, event_class = row
        plain = raw[: raw.rindex("_v")] if "_v" in raw and raw.rsplit("_v", 1)[1].isdigit() else raw
        if plain.startswith(("cudaGraphLaunch", "cuGraphLaunch")):
            kind = "graph_launch"
        elif plain.startswith(("cublas", "cudnn")):
            kind = "library_api"
        else:
            kind = {0: "runtime_api", 1: "driver_api"}.get(event_class, "other")
        return (pid, tid, corr, ts, dur, kind, plain, raw if raw != plain else None)

    got_runtime = _lake_rows(tmp_path, (
        "SELECT pid, tid, correlation_id, ts_ns, dur_ns, kind, name, raw_name FROM EVENTS "
        "WHERE category = 'CUPTI_ACTIVITY_KIND_RUNTIME'"))
    assert sorted(got_runtime, key=repr) == sorted((expected_runtime(r) for r in runtime), key=repr)
    assert {r[5] for r in got_runtime} == {"runtime_api"}  # this export has no driver rows (the fixtures do)


def test_unresolvable_ids_fall_back_as_documented(tmp_path: Path) -> None:
    """Codes with no label and ids with no string: the fallbacks of each table, row by row."""
    from nsys_fixtures import GPID, GTID, insert, kernel_row

    p = tmp_path / "fallback.sqlite"
    con = sqlite3.connect(p)
    for t in ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"):
        con.execute(ddl(t))
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "cudaMalloc_v3020"), (2, "k"), (3, "_Z1kv")])
    rt = dict(globalTid=GTID, returnValue=0, callchainId=None)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=100, end=110, correlationId=1, nameId=1, eventClass=5, **rt)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=120, end=130, correlationId=2, nameId=999, eventClass=0, **rt)
    insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(200, 260, 2, 7, 2, 2, mangledName=3))
    insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(300, 360, 3, 7, -4, 1 << 40))
    dev = dict(deviceId=0, contextId=1, streamId=7, globalPid=GPID)
    insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", start=400, end=410, correlationId=4, bytes=64, copyKind=1, **dev)
    insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", start=420, end=430, correlationId=5, bytes=64, copyKind=99, **dev)
    insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=500, end=510, correlationId=6, syncType=3, eventId=0,
           **dev)
    insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=520, end=530, correlationId=7, syncType=77, eventId=0,
           **dev)
    insert(con, "NVTX_EVENTS", start=600, end=700, eventType=59, text="r", domainId=4, globalTid=GTID)
    con.commit()
    con.close()
    res = ingest_file(p, Lake(tmp_path / "lake"))
    assert res.status == "ingested", res.error
    rows = _lake_rows(tmp_path / "lake", (
        "SELECT ts_ns, kind, name, raw_name, short_name, copy_kind, domain FROM EVENTS ORDER BY ts_ns"))
    assert rows == [
        (0, "other", "cudaMalloc", "cudaMalloc_v3020", None, None, None),  # event class 5: neither runtime nor driver
        (20, "runtime_api", None, None, None, None, None),  # nameId 999 is not in StringIds
        (100, "kernel", "k", "_Z1kv", "k", None, None),
        (200, "kernel", None, None, None, None, None),  # ids -4 and 2**40: outside StringIds
        (300, "memcpy", "[CUDA memcpy Host-to-Device]", None, None, "HtoD", None),
        (320, "memcpy", "[CUDA memcpy 99]", None, None, "99", None),
        (400, "sync", "Stream sync", None, None, None, None),
        (420, "sync", "sync type 77", None, None, None, None),
        (500, "nvtx_range", "r", None, None, None, "domainId=4"),  # no domain-create row names domain 4
    ]


def test_sparse_string_ids_resolve_like_dense_ones() -> None:
    """Ids too spread out for the dense table go through index_in, with the same results."""
    import pyarrow as pa

    from taxbreak.ingest.nsys_sqlite import Lookup

    dense = Lookup(pa.array([1, 2, 5], pa.int64()), pa.array(["a", "b", "e"]))
    sparse = Lookup(pa.array([1, 2, 5, 1 << 50], pa.int64()), pa.array(["a", "b", "e", "far"]))
    assert dense.dense is not None and sparse.dense is None
    ids = pa.array([5, None, 1, 3, -1, 2, 1 << 50], pa.int64())
    assert dense.resolve(ids).to_pylist() == ["e", None, "a", None, None, "b", None]
    assert sparse.resolve(ids).to_pylist() == ["e", None, "a", None, None, "b", "far"]
