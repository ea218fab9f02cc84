"""Write a synthetic Nsight Systems SQLite export in the real (2026.2, schema 3.25.0) table layout.

    python bench/gen_nsys_sqlite.py OUT.sqlite [--launches N]

Each launch is one ``cudaLaunchKernel_v7000`` runtime row and one kernel row joined by (globalPid,
correlationId), spread over two processes and four threads; N launches give 2N event rows (default 2.5 M
launches = 5 M rows).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path

from taxbreak.ingest.nsys_schema import EXPORT_DDL_2026

TABLES = ("StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", "ENUM_NSYS_EVENT_CLASS",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")
CHUNK = 200_000


def generate(out: Path, launches: int) -> None:
    if out.exists():
        out.unlink()
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    for t in TABLES:
        con.execute(EXPORT_DDL_2026[t])
    strings = ["cudaLaunchKernel_v7000", "void gemm_kernel<float>(float*, int)", "gemm_kernel",
               "_Z11gemm_kernelIfEvPfi",
               "void softmax_kernel<half>(half*)", "softmax_kernel", "_Z14softmax_kernelI6__halfEvPS0_"]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings, start=1)))
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                    [("EXPORT_PRODUCT_VERSION", "2026.2.1.210"), ("EXPORT_SCHEMA_VERSION", "3.25.0")])
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1779630014975716426, 'x', 'x', 35255823190)")
    con.executemany("INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES (?, ?, ?)",
                    [(0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
                     (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver")])
    pids = (4242, 4243)
    done = 0
    while done < launches:
        n = min(CHUNK, launches - done)
        rt, kn = [], []
        for i in range(done, done + n):
            pid = pids[i & 1]
            gpid = (1 << 48) | (pid << 24)
            gtid = gpid | (pid + (i >> 1) % 2)
            corr = i // 2 + 1
            start = 1_000_000 + i * 4_000
            which = i % 3 == 0
            rt.append((start, start + 2_500, 0, gtid, corr, 1, 0, None))
            kn.append((start + 3_000, start + 3_000 + (9_000 if which else 1_500), i & 1, 1, 0, 7, corr, gpid,
                       5 if which else 2, 6 if which else 3, 7 if which else 4, 1, 1, 32, 120, 1, 1, 256, 1, 1,
                       0, 4096 if which else 0, 0, 0, i + 1, 32768, None, 0, None, None, None, None, 0, 0, 0, 1, 0, 0,
                       None, "[]"))
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", rt)
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + ",".join("?" * 40) + ")", kn)
        con.commit()
        done += n
    con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--launches", type=int, default=2_500_000)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    generate(a.out, a.launches)
    print(f"wrote {a.out} ({2 * a.launches:,} rows, {a.out.stat().st_size / 1e6:,.0f} MB) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
