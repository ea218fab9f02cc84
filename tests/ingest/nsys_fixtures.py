"""Tiny Nsight Systems SQLite exports built in the real schema (DDL copied from public exports / nsys docs)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from taxbreak.ingest.nsys_schema import EXPORT_DDL_2026, EXPORT_DDL_DOCS

PID, TID, TID2 = 100, 101, 102
HW = 1 << 48  # hardware/VM bits above the pid, as in real globalTids
GPID = HW | (PID << 24)
GTID = GPID | TID
GTID2 = GPID | TID2
EPOCH_NS = 1_700_000_000_000_000_000
ORIGIN_NS = 900  # earliest stored start (the NVTX push/pop range)

STRINGS = {
    1: "cudaLaunchKernel_v7000", 2: "cublasSgemm_v2", 3: "void gemm<float>(float*)", 4: "gemm",
    5: "cudaGraphLaunch_v10000", 6: "void graph_k(int)", 7: "graph_k", 8: "cuLaunchKernel", 9: "registered range",
}


def ddl(table: str) -> str:
    return EXPORT_DDL_2026.get(table) or EXPORT_DDL_DOCS[table]


def insert(con: sqlite3.Connection, table: str, **values: object) -> None:
    cols = ", ".join(f'"{c}"' for c in values)
    con.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({", ".join("?" * len(values))})', tuple(values.values()))


def kernel_row(start: int, end: int, corr: int, stream: int, name_id: int, short_id: int, **extra: object) -> dict:
    row = dict(start=start, end=end, deviceId=0, contextId=1, greenContextId=0, streamId=stream, correlationId=corr,
               globalPid=GPID, demangledName=name_id, shortName=short_id, mangledName=None, launchType=1,
               cacheConfig=1, registersPerThread=32, gridX=120, gridY=2, gridZ=1, blockX=256, blockY=1, blockZ=1,
               staticSharedMemory=1024, dynamicSharedMemory=4096, localMemoryPerThread=0, localMemoryTotal=0,
               gridId=corr, sharedMemoryExecuted=32768, graphNodeId=None, sharedMemoryLimitConfig=0, graphId=None,
               clusterX=0, clusterY=0, clusterZ=0, clusterSchedulingPolicy=1, maxPotentialClusterSize=0,
               maxActiveClusters=0, tensorSizeMinusOneElements="[]")
    row.update(extra)
    return row


def build_tiny_export(path: Path) -> Path:
    """cuBLAS range [1000, 5000] around a cudaLaunchKernel [2000, 3000] -> gemm [3500, 4500]; a cudaGraphLaunch
    [6000, 6500] (correlation 12) feeding three graph kernels (graphId 5, nodes 1-3) at 7000/7200/7400 (200 ns
    each); a driver call; NVTX: push/pop 'step' [900, 8000], a mark at 950, a start/end range [1200, 1300] ended on
    thread 102, a domain-create row (skipped) and a range in that domain [1500, 1600]."""
    con = sqlite3.connect(path)
    for t in ("StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_RUNTIME",
              "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "CUBLAS_EVENTS", "ThreadNames", "PROCESSES"):
        con.execute(ddl(t))
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(STRINGS.items()))
    insert(con, "META_DATA_EXPORT", name="EXPORT_PRODUCT_VERSION", value="2026.2.1.210")
    insert(con, "META_DATA_EXPORT", name="EXPORT_SCHEMA_VERSION", value="3.25.0")
    insert(con, "TARGET_INFO_SESSION_START_TIME", utcEpochNs=EPOCH_NS, utcTime="t", localTime="t", systemClockNs=1)
    insert(con, "PROCESSES", globalPid=GPID, pid=PID, name="python")
    insert(con, "CUBLAS_EVENTS", start=1000, end=5000, eventClass=29, globalTid=GTID, nameId=2)
    rt = dict(eventClass=0, globalTid=GTID, returnValue=0, callchainId=None)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=2000, end=3000, correlationId=11, nameId=1, **rt)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=6000, end=6500, correlationId=12, nameId=5, **rt)
    insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=6600, end=6700, correlationId=13, nameId=8,
           **{**rt, "eventClass": 1})
    insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(3500, 4500, 11, 7, 3, 4))
    for node, start in enumerate((7000, 7200, 7400), start=1):
        insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(start, start + 200, 12, 9, 6, 7, graphId=5,
                                                                 graphNodeId=node))
    nv = dict(globalTid=GTID)
    insert(con, "NVTX_EVENTS", start=900, end=8000, eventType=59, text="step", domainId=0, **nv)
    insert(con, "NVTX_EVENTS", start=950, end=None, eventType=34, text="mark", domainId=0, **nv)
    insert(con, "NVTX_EVENTS", start=1200, end=1300, eventType=60, textId=9, endGlobalTid=GTID2, domainId=0, **nv)
    insert(con, "NVTX_EVENTS", start=800, end=None, eventType=75, text="mydomain", domainId=3, **nv)
    insert(con, "NVTX_EVENTS", start=1500, end=1600, eventType=59, text="in domain", domainId=3, **nv)
    con.commit()
    con.close()
    return path


# -- exports as they exist in the wild (issue 11 §6) and hostile values (issue 13) -------------------------------
# TARGET_INFO_SYSTEM_ENV in the name/value layout the adapter reads (the columns it needs; real exports have more).
SYSTEM_ENV_DDL = "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, value TEXT)"
# The older name of META_DATA_EXPORT (name/value records), as 2021-2022 exports such as DLProf's 2022.1 have it.
EXPORT_META_DATA_DDL = "CREATE TABLE EXPORT_META_DATA (name TEXT NOT NULL, value TEXT)"
BLOB = b"\x00\x9f\x92\x96\xff binary"  # not UTF-8 (0x9f cannot start a character, 0xff never appears)
BAD_SHORT_NAME = "ge" + "\ufffd" + "mm"  # StringIds 4 after repair: b"ge\xffmm" with 0xff replaced


def build_wild_export(path: Path) -> Path:
    """The tiny export as an old DLProf-written one looks: no META_DATA_EXPORT but EXPORT_META_DATA with the
    version; TARGET_INFO_SYSTEM_ENV with a binary blob in its TEXT value column (after the Hostname row); the
    kernel short name (StringIds 4) with a byte that is not UTF-8; an NVTX text that is not UTF-8; a blob in the
    kernel's TEXT column tensorSizeMinusOneElements (an args_json column)."""
    build_tiny_export(path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE META_DATA_EXPORT")
    con.execute(EXPORT_META_DATA_DDL)
    insert(con, "EXPORT_META_DATA", name="EXPORT_PRODUCT_VERSION", value="2022.1.1.61-1d07dc0")
    insert(con, "EXPORT_META_DATA", name="EXPORT_SCHEMA_VERSION", value="2.7.1")
    con.execute(SYSTEM_ENV_DDL)
    insert(con, "TARGET_INFO_SYSTEM_ENV", globalVid=1, devStateName="x", name="Hostname", value="dgx-1")
    insert(con, "TARGET_INFO_SYSTEM_ENV", globalVid=1, devStateName="x", name="DLPROF_BLOB", value=BLOB)
    con.execute("UPDATE StringIds SET value = CAST(X'6765ff6d6d' AS TEXT) WHERE id = 4")
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(X'73746570fe' AS TEXT) WHERE text = 'step'")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET tensorSizeMinusOneElements = X'00ff' WHERE correlationId = 11")
    con.commit()
    con.close()
    return path


INT64_MAX = (1 << 63) - 1


def build_impossible_export(path: Path) -> Path:
    """Runtime and kernel tables whose start/end may be NULL (a hostile file's DDL need not say NOT NULL).

    Kept: launches [1000, 1100] and [2000, 2100] (correlations 1, 2), kernels [1500, 1600] (1) and [2500, 2700]
    (2).  Skipped: kernel end < start (3: [3000, 2990]); kernel start NULL (4); kernel start = INT64_MAX (5);
    kernel end = INT64_MAX (6: [3100, INT64_MAX]); kernel start negative (7); runtime end NULL (8); an NVTX range
    with end < start; an NVTX mark (no end) at 900 is kept and is the earliest stored event."""
    con = sqlite3.connect(path)
    for t in ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS"):
        con.execute(ddl(t).replace("start INTEGER NOT NULL", "start INTEGER").replace("end INTEGER NOT NULL",
                                                                                        "end INTEGER"))
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(STRINGS.items()))
    rt = dict(eventClass=0, globalTid=GTID, returnValue=0, callchainId=None, nameId=1)
    for corr, start, end in ((1, 1000, 1100), (2, 2000, 2100), (8, 2200, None)):
        insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=start, end=end, correlationId=corr, **rt)
    for corr, start, end in ((1, 1500, 1600), (2, 2500, 2700), (3, 3000, 2990), (4, None, 3000),
                             (5, INT64_MAX, INT64_MAX), (6, 3100, INT64_MAX), (7, -5, 100)):
        insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **kernel_row(start, end, corr, 7, 3, 4))
    insert(con, "NVTX_EVENTS", start=900, end=None, eventType=34, text="mark", globalTid=GTID)
    insert(con, "NVTX_EVENTS", start=1200, end=1100, eventType=59, text="backwards", globalTid=GTID)
    con.commit()
    con.close()
    return path


# -- stand-ins for the public exports that are not vendored (tests/data/SOURCES.md: left out for size) ------------
# Each takes the code path of the real file it stands in for, with counts and per-name kernel totals set by hand;
# the real file is tested too wherever ../shared/traces/public is beside the checkout.
NV = dict(eventType=59, domainId=0)  # NvtxPushPopRange


def _gen_export(con: sqlite3.Connection, tables: tuple[str, ...], strings: list[str], version: str, schema: str,
                epoch_ns: int) -> dict[str, int]:
    for t in ("StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", "PROCESSES", "ThreadNames",
              "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", *tables):
        con.execute(ddl(t))
    ids = {s: i for i, s in enumerate(strings, start=1)}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in ids.items()])
    insert(con, "META_DATA_EXPORT", name="EXPORT_PRODUCT_NAME", value="NVIDIA Nsight Systems")
    insert(con, "META_DATA_EXPORT", name="EXPORT_PRODUCT_VERSION", value=version)
    insert(con, "META_DATA_EXPORT", name="EXPORT_SCHEMA_VERSION", value=schema)
    insert(con, "TARGET_INFO_SESSION_START_TIME", utcEpochNs=epoch_ns, utcTime="t", localTime="t", systemClockNs=1)
    return ids


def _gpu_rows(con: sqlite3.Connection, ids: dict[str, int], pid: int, device: int, rows: list[tuple]) -> None:
    """rows: (api, api start, api end, kind, gpu start, gpu end, what); kind 'kernel' (what = (demangled, short,
    stream)), 'memcpy' (what = (copyKind, bytes)), 'memset' (what = bytes), 'sync' (what = syncType) or None (an
    API call with no GPU work). Correlation ids count from 1 per process; driver calls start with 'cu' + upper."""
    gpid = HW | (pid << 24)
    insert(con, "PROCESSES", globalPid=gpid, pid=pid, name="python")
    gpu = dict(deviceId=device, contextId=1, globalPid=gpid)
    kernel_cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}  # as this schema has
    for corr, (api, a0, a1, kind, g0, g1, what) in enumerate(rows, start=1):
        driver = api.startswith("cu") and api[2].isupper()
        insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", start=a0, end=a1, eventClass=1 if driver else 0,
               globalTid=gpid | pid, correlationId=corr, nameId=ids[api], returnValue=0, callchainId=None)
        if kind == "kernel":
            demangled, short, stream = what
            row = kernel_row(g0, g1, corr, stream, ids[demangled], ids[short], deviceId=device, globalPid=gpid)
            insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", **{k: v for k, v in row.items() if k in kernel_cols})
        elif kind == "memcpy":
            insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", start=g0, end=g1, streamId=7, correlationId=corr,
                   copyKind=what[0], bytes=what[1], **gpu)
        elif kind == "memset":
            insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", start=g0, end=g1, streamId=7, correlationId=corr, value=0,
                   bytes=what, **gpu)
        elif kind == "sync":
            insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", start=g0, end=g1, streamId=7, correlationId=corr,
                   syncType=what, eventId=0xFFFFFFFF, **gpu)


EW = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2, T3)"
EW2 = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda>(int, T3)"
NCCL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
TWO_GPU_PIDS = (200, 201)


def build_two_gpu_nccl_export(path: Path) -> Path:
    """Stand-in for nsys-ai/mfu_2gpu_before.sqlite (nsys 2026.2, schema 3.25.0): two processes, each driving its own
    GPU (process 200 on device 0, 201 on device 1), each the same work shifted by 10 ns per rank:
    cudaLaunchKernel [1000, 1200] -> vectorized_elementwise_kernel [1500, 2500] (1000 ns) and [2000, 2200] ->
    elementwise_kernel [2600, 3100] (500 ns), on stream 7; the driver's cuLaunchKernelEx [3000, 3300] ->
    ncclDevKernel_SendRecv [3500, 6500] (3000 ns) on stream 13; cudaMemcpyAsync -> a 4096 B HtoD copy, cudaMemsetAsync
    -> a 1024 B memset, cudaStreamSynchronize -> a stream sync, cudaStreamIsCapturing (no GPU work); NVTX push/pop
    'step' [100, 9000] and 'forward' [200, 5000].

    Per file: 6 kernels (3 names: 2 x 1000, 2 x 500, 2 x 3000 ns), 14 runtime/driver rows, 4 NVTX ranges, 2 memcpy,
    2 memset, 2 sync rows."""
    con = sqlite3.connect(path)
    ids = _gen_export(con, (), ["cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cudaMemcpyAsync_v3020",
                                "cudaMemsetAsync_v3020", "cudaStreamSynchronize_v3020", "cudaStreamIsCapturing_v10000",
                                EW, "vectorized_elementwise_kernel", EW2, "elementwise_kernel", NCCL,
                                "ncclDevKernel_SendRecv"], "2026.2.1.210", "3.25.0", EPOCH_NS)
    for rank, pid in enumerate(TWO_GPU_PIDS):
        d = 10 * rank
        _gpu_rows(con, ids, pid, rank, [(api, a0 + d, a1 + d, kind, g0 + d, g1 + d, what) for api, a0, a1, kind, g0, g1,
                                        what in (
            ("cudaLaunchKernel_v7000", 1000, 1200, "kernel", 1500, 2500, (EW, "vectorized_elementwise_kernel", 7)),
            ("cudaLaunchKernel_v7000", 2000, 2200, "kernel", 2600, 3100, (EW2, "elementwise_kernel", 7)),
            ("cuLaunchKernelEx", 3000, 3300, "kernel", 3500, 6500, (NCCL, "ncclDevKernel_SendRecv", 13)),
            ("cudaMemcpyAsync_v3020", 4000, 4100, "memcpy", 4200, 4400, (1, 4096)),
            ("cudaMemsetAsync_v3020", 4500, 4600, "memset", 4700, 4800, 1024),
            ("cudaStreamSynchronize_v3020", 6000, 6600, "sync", 6000, 6550, 3),
            ("cudaStreamIsCapturing_v10000", 6700, 6750, None, 0, 0, None))])
        gtid = HW | (pid << 24) | pid
        insert(con, "NVTX_EVENTS", start=100 + d, end=9000 + d, text="step", globalTid=gtid, **NV)
        insert(con, "NVTX_EVENTS", start=200 + d, end=5000 + d, text="forward", globalTid=gtid, **NV)
    con.commit()
    con.close()
    return path


# Columns the nsys 2025.1 export (schema 3.17.1) does not have yet, by table (the 2026.2 DDL has them).
SCHEMA_3_17_MISSING = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone", "graphId", "clusterX",
                                   "clusterY", "clusterZ", "clusterSchedulingPolicy", "maxPotentialClusterSize",
                                   "maxActiveClusters", "sharedMemoryRequestedPercentage",
                                   "tensorSizeMinusOneElements"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("copyCount",),
    "TARGET_INFO_SESSION_START_TIME": ("systemClockNs",),
}
NVF_PW = "<unnamed>::nvfuser_pointwise_f0_c1_r0_g4(<unnamed>::Tensor<<unnamed>::__bfloat, (int)3, (int)3>)"
NVF_RED = "<unnamed>::nvfuser_reduction_f0_c1_r0_g3(<unnamed>::Tensor<float, (int)2, (int)2>)"
NVJET = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN"
NVFUSER_PID = 300


def build_nsys2025_nvfuser_export(path: Path) -> Path:
    """Stand-in for nvfuser/ee4fcf30/report1.sqlite (nsys 2025.1.1.110, schema 3.17.1: no graphId, cluster or
    tensorSizeMinusOneElements kernel columns, no memcpy copyCount, no systemClockNs) with a TARGET_INFO_GPU row
    (H200): one process on device 0 whose JIT-compiled nvFuser kernels come from the driver. cuLibraryLoadData
    [500, 900] and cuLibraryGetKernel [950, 1000] (no GPU work); cudaLaunchKernel [1000, 1200] ->
    vectorized_elementwise_kernel [1300, 1800] (500 ns); cuLaunchKernelEx [2000, 2300] -> an nvjet GEMM [2400, 4400]
    (2000 ns); cuLaunchKernel [4500, 4700] -> nvfuser_pointwise [4800, 5200] (400 ns) and [5300, 5500] ->
    nvfuser_reduction [5600, 5700] (100 ns); cudaMemcpyAsync -> a DtoH copy, cudaMemsetAsync -> a memset,
    cudaStreamSynchronize -> a stream sync; NVTX push/pop 'FusionExecutorCache::runFusionWithInputs' [4400, 5800] and
    'getTerminatingOutputs' [4410, 4420] on the main thread, 'checkCanSchedule' [100, 200] on a second one.

    Per file: 4 kernels (4 names, 3000 ns), 9 runtime/driver rows, 3 NVTX ranges, 1 memcpy, 1 memset, 1 sync row."""
    con = sqlite3.connect(path)
    ids = _gen_export(con, ("TARGET_INFO_GPU",), [
        "cuLibraryLoadData", "cuLibraryGetKernel", "cudaLaunchKernel_v7000", "cuLaunchKernelEx", "cuLaunchKernel",
        "cudaMemcpyAsync_v3020", "cudaMemsetAsync_v3020", "cudaStreamSynchronize_v3020", EW,
        "vectorized_elementwise_kernel", NVJET, NVF_PW, "nvfuser_pointwise_f0_c1_r0_g4", NVF_RED,
        "nvfuser_reduction_f0_c1_r0_g3"], "2025.1.1.110", "3.17.1", EPOCH_NS)
    for table, cols in SCHEMA_3_17_MISSING.items():
        for col in cols:
            con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
    insert(con, "TARGET_INFO_GPU", vmId=HW, id=0, name="NVIDIA H200", busLocation="0000:45:00.0", isDiscrete=1,
           totalMemory=150121545728, smCount=132, chipName="GH100", computeMajor=9, computeMinor=0)
    _gpu_rows(con, ids, NVFUSER_PID, 0, [
        ("cuLibraryLoadData", 500, 900, None, 0, 0, None),
        ("cuLibraryGetKernel", 950, 1000, None, 0, 0, None),
        ("cudaLaunchKernel_v7000", 1000, 1200, "kernel", 1300, 1800, (EW, "vectorized_elementwise_kernel", 7)),
        ("cuLaunchKernelEx", 2000, 2300, "kernel", 2400, 4400, (NVJET, NVJET, 7)),
        ("cuLaunchKernel", 4500, 4700, "kernel", 4800, 5200, (NVF_PW, "nvfuser_pointwise_f0_c1_r0_g4", 7)),
        ("cuLaunchKernel", 5300, 5500, "kernel", 5600, 5700, (NVF_RED, "nvfuser_reduction_f0_c1_r0_g3", 7)),
        ("cudaMemcpyAsync_v3020", 5800, 5900, "memcpy", 6000, 6100, (2, 8)),
        ("cudaMemsetAsync_v3020", 6200, 6300, "memset", 6400, 6450, 4),
        ("cudaStreamSynchronize_v3020", 6500, 6800, "sync", 6500, 6790, 3)])
    gtid = HW | (NVFUSER_PID << 24) | NVFUSER_PID
    insert(con, "NVTX_EVENTS", start=4400, end=5800, text="FusionExecutorCache::runFusionWithInputs", globalTid=gtid,
           **NV)
    insert(con, "NVTX_EVENTS", start=4410, end=4420, text="getTerminatingOutputs", globalTid=gtid, **NV)
    insert(con, "NVTX_EVENTS", start=100, end=200, text="checkCanSchedule", globalTid=gtid + 1, **NV)
    con.commit()
    con.close()
    return path


# name -> builder, for parametrising beside the public exports (tests/ingest/test_nsys_sqlite.py, test_nsys_real.py)
STANDINS = {"generated/two_gpu_nccl.sqlite": build_two_gpu_nccl_export,  # for nsys-ai/mfu_2gpu_before.sqlite
            "generated/nsys2025_nvfuser.sqlite": build_nsys2025_nvfuser_export}  # for nvfuser/ee4fcf30/report1.sqlite


def public_or_standin(rel: str, folder: Path, public_trace: Callable[[str], Path]) -> Path:
    """The stand-in ``rel`` built in ``folder``, or the public export ``rel`` (read only: copy it to change it)."""
    if rel in STANDINS:
        folder.mkdir(parents=True, exist_ok=True)
        return STANDINS[rel](folder / Path(rel).name)
    return public_trace(rel)
