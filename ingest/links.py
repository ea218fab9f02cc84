"""Quick link counts for the ingest summary (the full linking lives in sql/)."""

from __future__ import annotations

import duckdb

from taxbreak.ingest.lake import Lake
from taxbreak.schemas import LAUNCH_KINDS


def link_counts(lake_root, trace_id: str) -> dict:
    """Kernels, launches and memcpys of one trace, and how many kernels link to a launch call (same pid and
    correlation id).  Framework ops are linked by the analysis alone (sql/int_kernel_links.sql): a count here
    would apply another rule than it does."""
    lake = Lake(lake_root)
    path = lake.events_path(trace_id)
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions=false")
        lake.register_filesystem(con)
        row = con.execute(
            f"""
            WITH ev AS (SELECT * FROM read_parquet($path)),
            k AS (SELECT pid, correlation_id, external_id FROM ev WHERE kind = 'kernel'),
            l AS (SELECT DISTINCT pid, correlation_id FROM ev
                  WHERE kind IN {LAUNCH_KINDS} AND correlation_id IS NOT NULL),
            SELECT
              (SELECT count(*) FROM k),
              (SELECT count(*) FROM ev WHERE kind IN {LAUNCH_KINDS}
                 AND (name ILIKE '%launch%')),
              (SELECT count(*) FROM ev WHERE kind = 'memcpy'),
              (SELECT count(*) FROM k JOIN l USING (pid, correlation_id))
            """,
            {"path": str(path)},
        ).fetchone()
    finally:
        con.close()
    return dict(zip(("kernels", "launches", "memcpys", "to_launch"), row, strict=True))
