"""Tiny Nsight Systems SQLite exports built in the real schema (DDL copied from public exports / nsys docs)."""

from __future__ import annotations

import sqlite3
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
