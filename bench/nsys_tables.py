"""Where the Nsight SQLite ingest's CPU goes, table by table, beside the plain ADBC copy of the same table (issue 27:
the target is an ingest at >= 2x the copy's throughput; ``bench/run_all.py --only nsys`` prints the whole of both).

    python bench/nsys_tables.py                    # the export of bench/run_all.py (500 k launches, 1 M rows)
    python bench/nsys_tables.py EXPORT.sqlite

Per table of at least ``--min-rows`` rows, in this process, one thread, CPU seconds (``time.process_time``):
- plain copy: ``SELECT *`` through ADBC into a Parquet file (pyarrow's defaults), as run_all's reference does;
- ours, read: the adapter's query (its columns, SQLite's ``json_object`` for args_json) through ADBC;
- ours, events: those batches turned into events (``nsys_sqlite._events``: ids resolved, times, constant columns);
- ours, lake: the lake's checks and redaction (``lake._checked``; its args_json pre-filter alone beside it);
- ours, Parquet: the events written with the lake's column settings.
The ingest runs the read and the events on two reader threads and the Parquet write beside them, so wall times
differ; CPU adds up.  Process start-up and imports (in both routes) are left out.  Run it twice to see the noise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Duck:
    """One DuckDB connection, made on first use."""

    def __init__(self) -> None:
        self.con = None

    def connect(self):  # noqa: ANN201 - a duckdb connection (imported lazily)
        if self.con is None:
            import duckdb

            self.con = duckdb.connect(config={"threads": 1, "preserve_insertion_order": True,
                                              "autoinstall_known_extensions": False})
        return self.con

    def close(self) -> None:
        if self.con is not None:
            self.con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", type=Path, nargs="?", help="an nsys SQLite export (default: run_all's synthetic one)")
    ap.add_argument("--launches", type=int, default=500_000, help="launches of the synthetic export (2 rows each)")
    ap.add_argument("--min-rows", type=int, default=1000, help="tables with fewer rows are left out")
    args = ap.parse_args(argv)
    export = args.export or HERE / "out" / f"nsys_synth_{args.launches}.sqlite"
    if not export.exists():
        export.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(HERE / "gen_nsys_sqlite.py"), str(export), "--launches",
                        str(args.launches)], check=True)

    import adbc_driver_sqlite.dbapi as adbc
    import pyarrow as pa
    import pyarrow.parquet as pq

    from taxbreak.ingest import lake as lake_mod
    from taxbreak.ingest import nsys_sqlite as nsys
    from taxbreak.ingest import redact
    from taxbreak.schemas import EVENT_SCHEMA

    pa.array([0])  # pyarrow's one-time pandas import, outside the figures
    rows_out: list[tuple[str, int, dict[str, float]]] = []
    duck = _Duck()  # DuckDB only for REAL/BLOB args columns (NVTX payloads), as in the adapter
    with tempfile.TemporaryDirectory(prefix="nsys-tables-") as work_s:
        work = Path(work_s)
        db = nsys.NsysDb(export)
        try:
            tables = db.tables()
            lookups = nsys._build_lookups(db, tables)
            for table in sorted(t for t in tables if t in set(nsys.S.EVENT_TABLES)):
                n = int(db.rows(f"SELECT count(*) FROM {nsys._q(table)}")[0][0])
                if n < args.min_rows:
                    continue
                cpu: dict[str, float] = {}
                c0 = time.process_time()
                uri = export.resolve().as_uri() + "?mode=ro"
                with adbc.connect(uri) as con, con.cursor() as cur:
                    cur.execute(f"SELECT * FROM {nsys._q(table)}")
                    reader = cur.fetch_record_batch()
                    with pq.ParquetWriter(str(work / "plain.parquet"), reader.schema) as w:
                        for batch in reader:
                            w.write_batch(batch)
                cpu["plain copy"] = time.process_time() - c0
                cols = db.columns(table)
                plan = nsys._plan(table, {c for c, _ in cols})
                src = nsys._source(plan, cols)
                c0 = time.process_time()
                batches = list(db.stream(table, plan.where, only=src.raw, args_sql=src.args_sql))
                cpu["ours: read"] = time.process_time() - c0
                batches[0] = batches[0].slice(1)  # the adapter's typed sentinel row
                c0 = time.process_time()
                events = [nsys._events(plan, src, b, lookups, 0, "0" * 64, duck.connect) for b in batches
                          if b.num_rows]
                cpu["ours: events"] = time.process_time() - c0
                del batches
                c0 = time.process_time()
                checked = list(lake_mod._checked(iter(events), lake_mod._Facts()))
                cpu["ours: lake checks"] = time.process_time() - c0
                c0 = time.process_time()
                for b in checked:
                    redact._prefilter(b.column("args_json"))
                cpu["  of which args pre-filter"] = time.process_time() - c0
                c0 = time.process_time()
                with pq.ParquetWriter(
                    str(work / "ours.parquet"), EVENT_SCHEMA, compression=lake_mod._EVENT_COMPRESSION,
                    use_dictionary=lake_mod._EVENT_DICT_COLUMNS, write_statistics=lake_mod._EVENT_STATS_COLUMNS,
                    column_encoding=lake_mod._EVENT_DELTA_COLUMNS,
                ) as w:
                    for b in checked:
                        w.write_batch(b)
                cpu["ours: Parquet"] = time.process_time() - c0
                rows_out.append((table, n, cpu))
        finally:
            db.close()
            duck.close()
    print(f"{export.name}: CPU seconds per table, one thread, start-up and imports left out")
    print(f"{'table':<34} {'rows':>10} {'plain copy':>11} {'ours':>7} {'ratio':>6}  ours by stage")
    for table, n, cpu in rows_out:
        ours = sum(v for k, v in cpu.items() if k.startswith("ours"))
        parts = ", ".join(f"{k.removeprefix('ours: ').strip()} {v:.2f}" for k, v in cpu.items() if k != "plain copy")
        ratio = cpu["plain copy"] / ours
        print(f"{table:<34} {n:>10,} {cpu['plain copy']:>11.2f} {ours:>7.2f} {ratio:>5.2f}x  {parts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
